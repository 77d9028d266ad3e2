// What every mini-gda kernel call shares: its control (status words, host abort word, deadline),
// the first failure recorded once, bounded waits, and the shared-QP room and retirement waits
// (CQEs reaped under the QP's CQ lock). Used by cuda/gda/kernels.cu and cuda/moe/dispatch.cu.
#pragma once

#include "gda/queue.cuh"

namespace gicbench {
namespace gda {

struct Ctl {
  unsigned long long* status;
  const uint32_t* abort;
  uint64_t timeout_ns;
};

__device__ inline void fail(const Ctl& c, unsigned long long code, int lane, const Lane* l,
                     const QpState* s, uint64_t a = 0, uint64_t b = 0) {
  if (atomicCAS(&c.status[kStCode], 0ull, code) != 0ull) return;
  c.status[kStLane] = lane;
  if (l) c.status[kStQpn] = l->qpn();
  if (s) {
    c.status[kStPi] = ld_volatile32(&s->pub);
    c.status[kStRetired] = ld_volatile32(&s->retired);
    c.status[kStCqCi] = ld_volatile32(&s->cq_ci);
  }
  if (code == kCqeError) {
    c.status[kStSyndrome] = a;
    c.status[kStWqeCounter] = b;
  } else {
    c.status[kStWordSeen] = a;
    c.status[kStWordExpected] = b;
  }
  __threadfence_system();
}

// One wait: deadline, abort word and sibling failure, checked every 256 spins.
struct Wait {
  const Ctl& c;
  uint64_t start = 0;
  uint32_t spins = 0;
  __device__ explicit Wait(const Ctl& ctl) : c(ctl) {}
  // false: stop (the status is set).
  __device__ bool tick(int lane, const Lane* l, const QpState* s, uint64_t seen = 0,
                       uint64_t want = 0) {
    if ((++spins & 255) != 0) return true;
    if (ld_volatile32(c.abort)) {
      fail(c, kInterrupted, lane, l, s);
      return false;
    }
    if (ld_volatile64(&c.status[kStCode]) != 0) return false;
    const uint64_t now = globaltimer();
    if (start == 0) {
      start = now;
    } else if (now - start > c.timeout_ns) {
      fail(c, kTimeout, lane, l, s, seen, want);
      return false;
    }
    return true;
  }
};

__device__ __forceinline__ Lane lane_at(const uint64_t* table, int i) {
  return Lane{table + static_cast<uint64_t>(i) * kLaneCols};
}
__device__ __forceinline__ QpState* state_of(QpState* states, const Lane& l) {
  return states + l[kState];
}

// Reap every CQE present on the lane's CQ (one poller at a time); false on an error CQE.
// Returns the CQEs reaped through `reaped`.
__device__ inline bool try_reap(const Ctl& c, int li, const Lane& l, QpState* s, uint64_t& reaped) {
  if (atomicCAS(&s->cq_lock, 0u, 1u) != 0u) return true;
  fence_acq_rel_gpu();
  uint32_t ci = ld_volatile32(&s->cq_ci);
  const uint32_t bbs = ld_volatile32(&s->bbs);
  bool ok = true, any = false;
  uint32_t retired = ld_volatile32(&s->retired);
  Cqe e;
  while (poll_cqe(l, ci, e)) {
    if (e.opcode == m5::kCqeReqErr || e.opcode == m5::kCqeRespErr) {
      fail(c, kCqeError, li, &l, s, e.syndrome, e.wqe_counter);
      ok = false;
      break;
    }
    retired = full_index(retired, e.wqe_counter) + bbs;
    ++ci;
    ++reaped;
    any = true;
  }
  if (any) {
    publish_cq_ci(l, s, ci);
    st_volatile32(&s->cq_ci, ci);
    st_release_gpu32(&s->retired, retired);
  }
  fence_acq_rel_gpu();
  atomicExch(&s->cq_lock, 0u);
  return ok;
}

// Wait until the WQEBBs below `end` may be written: everything below end - SQ size retired.
// `seen`: the retired index the wait ended on (a caller may skip the next wait while that
// already leaves room: retirement only moves forward).
__device__ inline bool wait_room_seen(const Ctl& c, int li, const Lane& l, QpState* s,
                                      uint32_t end, uint64_t& reaped, uint32_t& seen) {
  Wait w(c);
  while (static_cast<int32_t>(end - (seen = ld_acquire_gpu32(&s->retired))) >
         static_cast<int32_t>(l.wqebbs())) {
    if (!try_reap(c, li, l, s, reaped) || !w.tick(li, &l, s)) return false;
  }
  return true;
}
__device__ inline bool wait_room(const Ctl& c, int li, const Lane& l, QpState* s, uint32_t end,
                          uint64_t& reaped) {
  uint32_t seen;
  return wait_room_seen(c, li, l, s, end, reaped, seen);
}

// Wait until everything below `end` is retired.
__device__ inline bool wait_retired(const Ctl& c, int li, const Lane& l, QpState* s, uint32_t end,
                             uint64_t& reaped) {
  Wait w(c);
  while (static_cast<int32_t>(end - ld_acquire_gpu32(&s->retired)) > 0) {
    if (!try_reap(c, li, l, s, reaped) || !w.tick(li, &l, s)) return false;
  }
  return true;
}

}  // namespace gda
}  // namespace gicbench
