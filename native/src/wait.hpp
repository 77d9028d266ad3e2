// What every native loop waits with: a cheap monotonic clock, a spin hint, and the hook that makes
// a NIC progress while the loop waits (the emu engine's inline mode hands one in; hardware needs
// none).
#pragma once

#include <time.h>

#include <cstdint>

namespace gicbench {

// Monotonic nanoseconds (CLOCK_MONOTONIC through the vDSO, ~20 ns per read).
inline int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

struct Progress {
  void (*fn)(void*) = nullptr;
  void* ctx = nullptr;
  void operator()() const {
    if (fn) fn(ctx);
  }
};

}  // namespace gicbench
