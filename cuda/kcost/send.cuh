// kernel-cost's communication call on mini-gda (the paper, arXiv 2610.01380, §4.3.2): one
// thread of a block posts one RDMA write on its block's QP (one QP per block) and, when asked,
// waits for its completion. WQEs come from the one encoder (gda/queue.cuh: build_write), the
// doorbell from the build's ordering (gda/ordering.cuh), waits from gda/calls.cuh.
//
// kcost/path.cuh picks this header (KC_PATH 0) and declares the call over send_body, inlined or
// separately compiled (KC_SEPARATE).
#pragma once

#include "gda/calls.cuh"

namespace gicbench {
namespace kcost {

// What every call of one launch shares (passed by pointer: one argument register pair).
struct SendArgs {
  const uint64_t* lanes;  // lane table (gda/queue.cuh LaneCol), one lane per block
  int nlanes;
  gda::QpState* states;
  uint32_t size;           // bytes of each message
  int inl;                 // 1: inline payload (8 B), 0: pointer payload (7 KiB)
  uint64_t timeout_ns;
  unsigned long long* status;
  const uint32_t* abort;
};
// The launcher packs these bytes (gicbench.submit.gpu.kernel_cost.send_args).
static_assert(sizeof(SendArgs) == 56, "SendArgs is 56 bytes (kernel_cost.SEND_ARGS_BYTES)");
static_assert(offsetof(SendArgs, states) == 16 && offsetof(SendArgs, size) == 24 &&
                  offsetof(SendArgs, timeout_ns) == 32 && offsetof(SendArgs, abort) == 48,
              "SendArgs field offsets (kernel_cost.send_args)");

// Message `k` of block `block`: bytes [k * size, (k + 1) * size) of the lane's source slice to
// the same offset of its destination slice. Returns false on a failure (status is set).
// A lane that several blocks share (fewer lanes than blocks) is posted under the QP's doorbell
// lock; the default shape (one QP per block) takes no lock, as mini-gda's bare path.
__device__ __forceinline__ bool send_body(const SendArgs* a, int block, uint32_t k, int wait) {
  using namespace gda;
  const Ctl c{a->status, a->abort, a->timeout_ns};
  const int li = block % a->nlanes;
  const Lane l = lane_at(a->lanes, li);
  QpState* s = state_of(a->states, l);
  const bool shared = static_cast<unsigned>(a->nlanes) < gridDim.x;
  const uint32_t bbs = write_wqebbs(a->inl != 0, a->size, l[kDc] != 0);
  uint64_t reaped = 0;
  if (shared) {
    Wait w(c);
    while (atomicCAS(&s->lock, 0u, 1u) != 0u)
      if (!w.tick(li, &l, s)) return false;
    fence_acq_rel_gpu();
  }
  const uint32_t pi = ld_volatile32(&s->pub);
  bool ok = wait_room(c, li, l, s, pi + bbs, reaped);
  if (ok) {
    const uint64_t off = static_cast<uint64_t>(k) * a->size;
    const Payload p{reinterpret_cast<const uint8_t*>(l[kSrcDev]) + off, a->size, false, 0};
    const uint64_t db = build_write(l, pi, l[kDstAddr] + off, a->inl != 0, p,
                                    l[kSrcAddr] + off, true);
    if (l[kReady])
      mark_wqe_ready(l, pi, bbs);
    else
      publish(l.dbrec(), l.doorbell(), pi + bbs, db);
    st_volatile32(&s->resv, pi + bbs);
    st_release_gpu32(&s->pub, pi + bbs);
  }
  if (shared) {
    fence_acq_rel_gpu();
    atomicExch(&s->lock, 0u);
  }
  if (ok && wait) ok = wait_retired(c, li, l, s, pi + bbs, reaped);
  return ok;
}

// After a timed launch, untimed: one thread per lane waits until everything posted is retired
// (the completion drain the paper excludes from kernel time).
__device__ __forceinline__ void drain_body(const SendArgs* a, int i) {
  using namespace gda;
  if (i >= a->nlanes) return;
  const Ctl c{a->status, a->abort, a->timeout_ns};
  const Lane l = lane_at(a->lanes, i);
  QpState* s = state_of(a->states, l);
  uint64_t reaped = 0;
  wait_retired(c, i, l, s, s->pub, reaped);
}

}  // namespace kcost
}  // namespace gicbench
