// Host driver of cuda/wire_selftest.cu: runs its cases on the CPU (no GPU needed) so the case table
// and tests/test_wire_cuda.py's numpy expectations are checked wherever nvcc exists.
// stdin: the case table (16 little-endian u64 words per case); stdout: kCaseBytes per case.
#include <cstdio>
#include <vector>

#include "wire_selftest.cu"

int main() {
  std::vector<uint64_t> words;
  uint64_t w;
  while (std::fread(&w, sizeof w, 1, stdin) == 1) words.push_back(w);
  if (words.size() % gicbench::selftest::kWords) {
    std::fprintf(stderr, "wire_selftest_host: %zu words is not a whole number of cases\n",
                 words.size());
    return 2;
  }
  const size_t ncase = words.size() / gicbench::selftest::kWords;
  // 64-byte aligned output, zeroed as the GPU test's buffer is
  std::vector<uint64_t> out(ncase * gicbench::selftest::kCaseBytes / 8, 0);
  uint8_t* base = reinterpret_cast<uint8_t*>(out.data());
  for (size_t i = 0; i < ncase; ++i)
    gicbench::selftest::run_case(words.data() + i * gicbench::selftest::kWords,
                                 base + i * gicbench::selftest::kCaseBytes);
  std::fwrite(base, 1, ncase * gicbench::selftest::kCaseBytes, stdout);
  return 0;
}
