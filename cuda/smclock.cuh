// The effective SM clock: clock64 cycles over globaltimer ns of one spinning thread. One place
// for the clock read and the spin, used by mini-gda's module (cuda/gda/kernels.cu) and by the
// stand-alone clock module every GPU submitter may load (cuda/smclock.cu).
#pragma once

#include "gda/scope.cuh"

namespace gicbench {

__device__ __forceinline__ uint64_t clock64_now() {
  uint64_t c;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c));
  return c;
}

// Spin for `ns` of globaltimer; out = {elapsed ns, elapsed SM cycles}.
__device__ __forceinline__ void spin_for_clock(uint64_t ns, int64_t* out) {
  const uint64_t t0 = gda::globaltimer();
  const uint64_t c0 = clock64_now();
  uint64_t t;
  while ((t = gda::globaltimer()) - t0 < ns) {
  }
  const uint64_t c1 = clock64_now();
  out[0] = static_cast<int64_t>(t - t0);
  out[1] = static_cast<int64_t>(c1 - c0);
}

}  // namespace gicbench
