// The separately compiled build of kernel-cost's communication call (KC_SEPARATE=1): the same
// body as the inlined build (the path's header, kcost/path.cuh), behind a non-inlined function
// in its own translation unit, linked into the caller's cubin by nvcc's device link.
#include "kcost/path.cuh"

namespace gicbench {
namespace kcost {

extern "C" __device__ __noinline__ bool kc_send(const SendArgs* a, int block, uint32_t k,
                                                int wait) {
  return send_body(a, block, k, wait);
}

}  // namespace kcost
}  // namespace gicbench
