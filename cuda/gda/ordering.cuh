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
// ld.acquire.sys. With -DGDA_CQ_POLL=1 (`--cq-poll expected`) each poll is a relaxed load at the
// same scope (volatile for none/threadfence) and one fence at that scope follows a hit only, as
// DOCA GPUNetIO's poll does. Names and numbers are the order of gicbench.submit.gpu.ORDERINGS.
//
// The host-forwarded doorbell (`--doorbell host`) replaces the record and the doorbell by one
// store per WQE into its slot of a ready array in host memory (mark_ready), ordered after the WQE
// stores by the same ordering; a host thread rings (native/src/gda_forward.cpp).
#pragma once

#include "gda/scope.cuh"

#ifndef GDA_ORDERING
#define GDA_ORDERING 1
#endif
#ifndef GDA_CQ_POLL
#define GDA_CQ_POLL 1  // 0 scan (reap every CQE present, record at every reap), 1 expected
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
constexpr bool kExpectedPoll = GDA_CQ_POLL == 1;
static_assert(GDA_CQ_POLL == 0 || GDA_CQ_POLL == 1, "GDA_CQ_POLL must be 0 or 1");
constexpr bool kSysScope = kOrdering == kSysReleaseStore || kOrdering == kSysFence;

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

// Host-forwarded doorbell: the fence orderings' step before ready marks (kMarkAfterFence): the
// ordering's fence (none for `none`). mark_ready puts one before each mark; in a thread's chain
// of WQEs it comes once after all of the thread's WQE stores, then a plain store per WQE's slot,
// as publish() fences once a doorbell. Each mark still follows every WQE store of the thread,
// with one fence a chain instead of one a WQE (each waits for the WQE's stores across PCIe). A
// mark that shows before an earlier one only holds the host's prefix walk a moment (a hole). The
// release-store orderings store each mark with a release (a release orders what came before
// it, not the marks after it).
constexpr bool kMarkAfterFence = kOrdering != kGpuReleaseStore && kOrdering != kSysReleaseStore;
__device__ __forceinline__ void mark_fence() {
  if constexpr (kOrdering == kGpuFence || kOrdering == kGpuFenceDbrec) {
    fence_acq_rel_gpu();
  } else if constexpr (kOrdering == kThreadfence) {
    __threadfence();
  } else if constexpr (kOrdering == kSysFence) {
    fence_acq_rel_sys();
  }
}

// Host-forwarded doorbell: publish one WQE by storing `v` (the producer index after it) into its
// ready slot, ordered after the WQE stores as the ordering orders the record.
__device__ __forceinline__ void mark_ready(uint64_t* slot, uint64_t v) {
  if constexpr (kMarkAfterFence) {
    mark_fence();
    st_volatile64(slot, v);
  } else if constexpr (kOrdering == kGpuReleaseStore) {
    st_release_gpu64(slot, v);
  } else {
    st_release_sys64(slot, v);
  }
}

// --cq-poll expected: the CQE's last word with a relaxed load at the ordering's scope (no acquire
// per poll); acquire_after_hit() once the owner bit says the CQE is there.
__device__ __forceinline__ uint32_t poll_word_relaxed(const void* p) {
  if constexpr (kOrdering == kNone || kOrdering == kThreadfence) {
    return ld_volatile32(p);
  } else if constexpr (kSysScope) {
    return ld_relaxed_sys32(p);
  } else {
    return ld_relaxed_gpu32(p);
  }
}
__device__ __forceinline__ void acquire_after_hit() {
  if constexpr (kOrdering == kNone) {
  } else if constexpr (kOrdering == kThreadfence) {
    __threadfence();
  } else if constexpr (kSysScope) {
    fence_acq_rel_sys();
  } else {
    fence_acq_rel_gpu();
  }
}

// Before a timed publication (single-op issue): the stores this thread made before it (the last
// op's completion bookkeeping: state words, the CQ record, its samples) performed at the
// ordering's scope, so the timed ordering waits for this op's stores alone, as the bare probe's
// idle before each op lets it (bench/gda_probe.py). Adds ordering; none stays fence-free.
__device__ __forceinline__ void drain_before_timing() { acquire_after_hit(); }

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
