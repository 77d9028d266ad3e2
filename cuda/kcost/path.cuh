// kernel-cost's communication call, per path (KC_PATH) and build (KC_SEPARATE). Each path's
// header defines its `SendArgs` (what every call of one launch shares, passed by pointer),
// `send_body` (message k of a block; wait: until its completion) and `drain_body` (unit i of
// the untimed completion drain after a launch):
//
//   KC_PATH 0  mini-gda: one RDMA write WQE on the block's QP (kcost/send.cuh)
//           1  mini-proxy: thread 0 of the block pushes a descriptor into a host ring that the
//              proxy's CPU workers drain and post (kcost/send_proxy.cuh)
//           2  DOCA GPUNetIO: doca_gpu_dev_verbs_put on the block's QP (kcost/send_doca.cuh)
//
// Built two ways: inlined into the caller (send_body, forced inline), or separately compiled
// (cuda/kcost/send.cu, relocatable device code) so the caller makes a real, non-inlined ABI
// call and its live values must survive it.
#pragma once

#ifndef KC_PATH
#define KC_PATH 0
#endif
#ifndef KC_SEPARATE
#define KC_SEPARATE 0
#endif

#if KC_PATH == 0
#include "kcost/send.cuh"
#elif KC_PATH == 1
#include "kcost/send_proxy.cuh"
#elif KC_PATH == 2
#include "kcost/send_doca.cuh"
#else
#error "KC_PATH must be 0 (mini-gda), 1 (mini-proxy) or 2 (DOCA GPUNetIO)"
#endif

namespace gicbench {
namespace kcost {

#if KC_SEPARATE
// Defined in cuda/kcost/send.cu; the caller links against it (nvcc -rdc=true, then -dlink).
extern "C" __device__ __noinline__ bool kc_send(const SendArgs* a, int block, uint32_t k,
                                                int wait);
#else
extern "C" __device__ __forceinline__ bool kc_send(const SendArgs* a, int block, uint32_t k,
                                                   int wait) {
  return send_body(a, block, k, wait);
}
#endif

}  // namespace kcost
}  // namespace gicbench
