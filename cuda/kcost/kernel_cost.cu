// kernel-cost's caller kernels (the paper, arXiv 2610.01380, §4.3.2, Fig. 9, Appendix D.2): a
// fixed amount of useful work in a fixed launch shape, with or without mini-gda's communication
// call compiled in (the path's: kcost/path.cuh). Build-time choices (the launcher compiles one cubin per combination, nvcc):
//
//   KC_CALLER    0 compute: KC_LIVE independent FMA chains per thread (v = v * a + b)
//                1 stream: KC_LIVE accumulators per thread fed by coalesced loads of a large
//                  array (memory-bound)
//   KC_LIVE      live values per thread, held in registers across every communication call
//   KC_COMM      0: no communication code at all (the reference); 1: the call is compiled in
//   KC_SEPARATE  0: the call's body inlined into the caller; 1: a non-inlined call to a
//                separately compiled function (relocatable device code, send.cu)
//   KC_PATH      0 mini-gda, 1 mini-proxy (GPU producers), 2 DOCA GPUNetIO
//
// The variant is a run-time argument so the compiler cannot drop the call: 1 code only (the
// branch is compiled in and never taken), 2 send then compute (thread 0 posts each message and
// its warp resumes), 3 send, wait, then compute (thread 0 waits for each message's completion
// first). Other warps compute throughout. A block's work runs in messages + 1 equal segments
// with one call between consecutive segments, so every variant and the reference do the same
// work in the same loop shape.
//
// The work is exact in FP32 so the launcher checks every thread's output against a closed form:
// compute runs with a = 1, b = 1 (run-time values: the FMAs are issued), stream reads
// in[x] = x & 7 (small integers; sums stay below 2^24).
#include "kcost/path.cuh"

#ifndef KC_CALLER
#define KC_CALLER 0
#endif
#ifndef KC_LIVE
#define KC_LIVE 8
#endif
#ifndef KC_COMM
#define KC_COMM 1
#endif

static_assert(KC_CALLER == 0 || KC_CALLER == 1, "KC_CALLER must be 0 (compute) or 1 (stream)");
static_assert(KC_LIVE >= 1 && KC_LIVE <= 256, "KC_LIVE must be 1..256");

using namespace gicbench;
using namespace gicbench::kcost;

namespace {

enum Variant : int { kCodeOnly = 1, kSend = 2, kSendWait = 3 };

// Steps [lo, hi) of this thread's work on its live values.
__device__ __forceinline__ void work(float (&v)[KC_LIVE], const float* __restrict__ in,
                                     uint64_t mask, uint64_t threads, uint64_t gtid, uint32_t lo,
                                     uint32_t hi, float a, float b) {
  for (uint32_t s = lo; s < hi; ++s) {
#if KC_CALLER == 0
#pragma unroll
    for (int i = 0; i < KC_LIVE; ++i) v[i] = fmaf(v[i], a, b);
#else
#pragma unroll
    for (int i = 0; i < KC_LIVE; ++i)
      v[i] += in[((static_cast<uint64_t>(s) * KC_LIVE + i) * threads + gtid) & mask];
#endif
  }
}

}  // namespace

// in: in_mask + 1 floats (a power of two); out: one float per thread; steps: per thread;
// send: the launch's communication arguments (ignored without KC_COMM); messages: per block.
extern "C" __global__ void kc_caller(const float* __restrict__ in, uint64_t in_mask,
                                     float* __restrict__ out, uint32_t steps, float a, float b,
                                     const SendArgs* send, int variant, uint32_t messages) {
  const uint64_t threads = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const uint64_t gtid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  float v[KC_LIVE];
#pragma unroll
  for (int i = 0; i < KC_LIVE; ++i) {
#if KC_CALLER == 0
    v[i] = in[(gtid * KC_LIVE + i) & in_mask];
#else
    v[i] = 0.0f;
#endif
  }
  const uint32_t segments = messages + 1;
  for (uint32_t k = 0; k < segments; ++k) {
    const uint32_t lo = static_cast<uint32_t>(static_cast<uint64_t>(steps) * k / segments);
    const uint32_t hi = static_cast<uint32_t>(static_cast<uint64_t>(steps) * (k + 1) / segments);
    work(v, in, in_mask, threads, gtid, lo, hi, a, b);
#if KC_COMM
    // Decided at run time: code-only carries this branch and never takes it.
    if (k < messages && variant >= kSend && threadIdx.x == 0)
      kc_send(send, static_cast<int>(blockIdx.x), k, variant == kSendWait ? 1 : 0);
#endif
  }
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < KC_LIVE; ++i) sum += v[i];
  out[gtid] = sum;
}

#if KC_COMM
// After a timed launch, untimed: one thread per unit of the path (a lane, a ring, a QP) waits
// until everything posted is retired (the completion drain the paper excludes from kernel time).
extern "C" __global__ void kc_drain(const SendArgs* send) {
  drain_body(send, static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x));
}
#if KC_PATH == 2
// The WQE slots each QP has reserved so far (DOCA's index in its QP structure): read before and
// after a call, the difference is what the call posted on it.
extern "C" __global__ void kc_posted(const SendArgs* send, uint64_t* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < static_cast<int>(send->nqps)) out[i] = posted_on(send, i);
}
#endif
#endif
