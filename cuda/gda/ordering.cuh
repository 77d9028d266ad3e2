// The seven orderings of the paper's Table 4 (arXiv 2610.01380), chosen at build time with
// -DGDA_ORDERING=<n> (the submitter compiles one module per ordering). Each one orders the WQE (and
// source payload) stores before the doorbell record, and the record before the doorbell, and
// polls CQs at the matching scope:
//
//   0 none               plain (volatile) stores, no fence: the unsafe control
//   1 gpu-fence          fence.acq_rel.gpu, record, doorbell (DOCA GPUNetIO, NCCL GDAKI)
//   2 gpu-fence-dbrec    fence.acq_rel.gpu, record, fence.acq_rel.gpu, doorbell
//   3 gpu-release-store  st.release.gpu record, st.release.gpu doorbell (DeepEP)
//   4 threadfence        __threadfence() before the record and before the doorbell (NVSHMEM)
//   5 sys-release-store  st.release.sys record, st.release.sys doorbell
//   6 sys-fence          fence.acq_rel.sys before the record and before the doorbell
//
// CQ polling: none reads op_own with a volatile load; the GPU-scope orderings with ld.acquire.gpu;
// threadfence with a volatile load followed by __threadfence(); the system-scope ones with
// ld.acquire.sys. Names and numbers are the order of gicbench.submit.gpu.ORDERINGS.
#pragma once

#include "gda/scope.cuh"

#ifndef GDA_ORDERING
#define GDA_ORDERING 1
#endif

namespace gicbench {
namespace gda {

enum Ordering : int {
  kNone = 0,
  kGpuFence = 1,
  kGpuFenceDbrec = 2,
  kGpuReleaseStore = 3,
  kThreadfence = 4,
  kSysReleaseStore = 5,
  kSysFence = 6,
};

constexpr Ordering kOrdering = static_cast<Ordering>(GDA_ORDERING);
static_assert(GDA_ORDERING >= 0 && GDA_ORDERING <= 6, "GDA_ORDERING must be 0..6");

// Publish a producer index: the doorbell record (BE32 of pi's low 16 bits in slot kSndDbr) then
// the 8-byte doorbell register. `db` is the value, composed in registers (never read back from
// the SQ, which may sit across PCIe).
__device__ __forceinline__ void publish(uint32_t* dbrec, uint64_t* doorbell, uint32_t pi,
                                       uint64_t db) {
  uint32_t* rec = dbrec + mlx5::kSndDbr;
  const uint32_t v = mlx5::dbrec_value(pi);
  if constexpr (kOrdering == kNone) {
    st_volatile32(rec, v);
    st_volatile64(doorbell, db);
  } else if constexpr (kOrdering == kGpuFence) {
    fence_acq_rel_gpu();
    st_volatile32(rec, v);
    st_volatile64(doorbell, db);
  } else if constexpr (kOrdering == kGpuFenceDbrec) {
    fence_acq_rel_gpu();
    st_volatile32(rec, v);
    fence_acq_rel_gpu();
    st_volatile64(doorbell, db);
  } else if constexpr (kOrdering == kGpuReleaseStore) {
    st_release_gpu32(rec, v);
    st_release_gpu64(doorbell, db);
  } else if constexpr (kOrdering == kThreadfence) {
    __threadfence();
    st_volatile32(rec, v);
    __threadfence();
    st_volatile64(doorbell, db);
  } else if constexpr (kOrdering == kSysReleaseStore) {
    st_release_sys32(rec, v);
    st_release_sys64(doorbell, db);
  } else {
    fence_acq_rel_sys();
    st_volatile32(rec, v);
    fence_acq_rel_sys();
    st_volatile64(doorbell, db);
  }
}

// The CQE's last word (wqe_counter BE16, signature, op_own), loaded at the polling scope.
__device__ __forceinline__ uint32_t poll_word(const void* p) {
  if constexpr (kOrdering == kNone) {
    return ld_volatile32(p);
  } else if constexpr (kOrdering == kThreadfence) {
    return ld_volatile32(p);  // __threadfence() follows a hit (see acquire_after_poll)
  } else if constexpr (kOrdering == kSysReleaseStore || kOrdering == kSysFence) {
    return ld_acquire_sys32(p);
  } else {
    return ld_acquire_gpu32(p);
  }
}
__device__ __forceinline__ void acquire_after_poll() {
  if constexpr (kOrdering == kThreadfence) __threadfence();
}

// A data word the peer writes (a round trip's reply), polled at the same scope.
__device__ __forceinline__ uint32_t poll_data32(const void* p) { return poll_word(p); }

}  // namespace gda
}  // namespace gicbench
