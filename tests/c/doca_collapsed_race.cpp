// A collapsed CQ's entry 0 as DOCA GPUNetIO polls it: one thread writes CQEs for WQEs 0..n-1
// through the emu core's write_cqe (the engines' code path), another reads the entry's 4-byte
// tail (wqe_counter, signature, op_own) as one load, as doca_priv_gpu_dev_verbs_poll_cq_
// collapsed_at does, while the writer runs. A valid opcode next to a wqe_counter lower than one
// already seen is what DOCA takes for a completion that has not happened. `rounds` rounds of
// n <= 65535 CQEs each (no 16-bit wrap inside a round). Prints "<reads> <valid> <backward>".
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "emu_core.cuh"

namespace core = gicbench::emu_core;
namespace m5 = gicbench::mlx5;

struct Mem {
  GB_HD uint32_t ld_acq32(const uint32_t* p) const { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
  GB_HD void st_rel32(uint32_t* p, uint32_t v) const { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
  GB_HD void st_rel8(uint8_t* p, uint8_t v) const { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
};

struct FillReq {
  uint16_t counter;
  GB_HD uint8_t operator()(uint8_t* b, uint8_t owner) const {
    return m5::fill_req_cqe(b, 0x000101, 0x08, counter, 8, 0, owner);
  }
};

int main(int argc, char** argv) {
  const uint32_t n = argc > 1 ? static_cast<uint32_t>(std::atoi(argv[1])) : 65000;
  const uint32_t rounds = argc > 2 ? static_cast<uint32_t>(std::atoi(argv[2])) : 16;
  if (n == 0 || n > 65535) return 2;
  alignas(64) static uint8_t ring[64 * 64];
  unsigned long long reads = 0, valid = 0, backward = 0;
  for (uint32_t r = 0; r < rounds; ++r) {
    for (uint32_t i = 0; i < 64; ++i) m5::cqe_init(ring + 64 * i);
    uint32_t ci = 0, status = 0, pi = 0, dropped = 0;
    const core::CqRef cq{ring, &ci,  &status, &pi, &dropped,
                         64,   core::kCqCollapsed | core::kCqOverrunIgnore};
    std::atomic<bool> done{false};
    std::thread writer([&] {
      Mem mem;
      for (uint32_t k = 0; k < n; ++k) core::write_cqe(mem, cq, FillReq{static_cast<uint16_t>(k)});
      done.store(true, std::memory_order_release);
    });
    int last = -1;
    while (!done.load(std::memory_order_acquire)) {
      const uint32_t raw = __builtin_bswap32(__atomic_load_n(
          reinterpret_cast<const uint32_t*>(ring + m5::kCqeWqeCounter), __ATOMIC_RELAXED));
      ++reads;
      if ((raw & 0xff) >> 4 == m5::kCqeInvalid) continue;
      ++valid;
      const int wc = static_cast<int>(raw >> 16);
      if (wc < last) ++backward;
      if (wc > last) last = wc;
    }
    writer.join();
  }
  std::printf("%llu %llu %llu\n", reads, valid, backward);
  return 0;
}
