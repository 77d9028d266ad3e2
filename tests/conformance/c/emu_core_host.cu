// Host driver of cuda/emu_core_selftest.cu: runs the core's scenario on the CPU (nvcc's host
// compiler, the code a CUDA engine compiles) and prints the result words, then the bytes of the
// destination, result, CQ and GPI control regions, as hex lines.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "emu_core_selftest.cu"

int main() {
  namespace t = gicbench::core_selftest;
  uint8_t* mem = static_cast<uint8_t*>(aligned_alloc(4096, t::kBufBytes));
  std::memset(mem, 0, t::kBufBytes);
  uint64_t out[t::kNumOut] = {};
  t::scenario(mem, out);
  for (uint32_t i = 0; i < t::kNumOut; ++i) std::printf("%llu ", (unsigned long long)out[i]);
  std::printf("\n");
  auto hex = [&](uint32_t off, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) std::printf("%02x", mem[off + i]);
    std::printf("\n");
  };
  hex(t::kDstOff, 1024);
  hex(t::kResOff, 24);
  hex(t::kCqOff, t::kNcqe * 64);
  hex(t::kGpiCtlOff, 512);
  std::free(mem);
  return 0;
}
