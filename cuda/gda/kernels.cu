// mini-gda's kernels: GPU threads build mlx5 WQEs, publish doorbell records, ring doorbells and
// poll CQs (the paper, arXiv 2610.01380, §3-4). Compiled at run time (CuPy RawModule, NVRTC) once
// per ordering with -DGDA_ORDERING=n; tests compile every variant with nvcc for sm_90.
//
// gda_prepare    attach QP states (from the doorbell records in memory) and start a call
// gda_finish     end a call: every lane's CQ consumer record brought up to date
// gda_single_op  one write at a time: issue, put+completion (selected QP or all), round trip
// gda_respond    the far side of the round trip
// gda_msg_rate   many writes outstanding: publication per thread (slot handoff in reservation
//                order on a shared QP, none on a QP the thread owns), per warp (cooperative), or
//                under one doorbell lock per WQE (a FIFO ticket lock); a unit moves to its next
//                lane after each visit (a batch, or W writes in chains of the batch: the
//                active-connections cycle)
// gda_clock      clock64 against globaltimer: the effective SM clock
//
// Every wait checks a deadline (globaltimer) and a host abort word, and stops when another thread
// has failed: a call never hangs; the first failure is written to `status` (queue.cuh).
//
// Completion (-DGDA_CQ_POLL): 0 `scan`: every wait reaps all CQEs present under the QP's CQ lock
// (an acquire load per poll), the CQ record is stored at every reap, msg-rate reaps after every
// doorbell. 1 `expected`: a lane one thread drives is waited on by polling only the next CQE (a
// relaxed load per poll, one acquire on the hit), the record is stored only when its lag could
// let the NIC overrun the CQ (QpState.cq_slack), msg-rate reaps only when it needs room or drains,
// and single-op's all-QP quiet reads the other QPs' records and CQs from the lanes of a warp.
//
// Doorbell: a lane with a ready array (kReady, `--doorbell host`) is never rung from the GPU: each
// WQE is marked ready in its slot (mark_wqe_ready) and a host thread rings; threads sharing a QP
// then need no hand-off in reservation order.
#include "gda/calls.cuh"
#include "smclock.cuh"

// Build switches (GICBENCH_GDA_DEFINES, app/submit/gpu/build.py). GDA_SOLO 1: msg-rate's
// threads alone on one lane run the solo loop below; 0 (the default until it is measured on a
// GPU): every thread runs the general loop, whose code is the same as before the split.
#ifndef GDA_SOLO
#define GDA_SOLO 0
#endif

using namespace gicbench;
using namespace gicbench::gda;

namespace {

// Expected poll on a lane only this thread drives: poll the next CQE only until everything below
// `end` is retired (touch: read the CQ at least once, as a quiet must). State is thread-owned.
__device__ bool wait_own(const Ctl& c, int li, const Lane& l, QpState* s, uint32_t end,
                         uint64_t& reaped_n, bool touch = false) {
  uint32_t retired = ld_volatile32(&s->retired);
  if (!touch && static_cast<int32_t>(end - retired) <= 0) return true;
  uint32_t ci = ld_volatile32(&s->cq_ci);
  const uint32_t bbs = ld_volatile32(&s->bbs);
  Wait w(c);
  bool ok = true, must_poll = touch;
  while (must_poll || static_cast<int32_t>(end - retired) > 0) {
    must_poll = false;
    Cqe e;
    if (poll_cqe(l, ci, e)) {
      if (e.opcode == m5::kCqeReqErr || e.opcode == m5::kCqeRespErr) {
        fail(c, kCqeError, li, &l, s, e.syndrome, e.wqe_counter);
        ok = false;
        break;
      }
      retired = full_index(retired, e.wqe_counter) + bbs;
      ++ci;
      ++reaped_n;
      continue;
    }
    if (static_cast<int32_t>(end - retired) <= 0) break;
    if (!w.tick(li, &l, s)) {
      ok = false;
      break;
    }
  }
  st_volatile32(&s->cq_ci, ci);
  st_volatile32(&s->retired, retired);
  publish_cq_ci(l, s, ci);
  return ok;
}

// Room and retirement on a lane one thread drives (single-op, respond): the expected poll, or
// the scan under the CQ lock (--cq-poll scan).
__device__ __forceinline__ bool own_retired(const Ctl& c, int li, const Lane& l, QpState* s,
                                            uint32_t end, uint64_t& reaped_n) {
  if constexpr (kExpectedPoll) return wait_own(c, li, l, s, end, reaped_n);
  return wait_retired(c, li, l, s, end, reaped_n);
}
__device__ __forceinline__ bool own_room(const Ctl& c, int li, const Lane& l, QpState* s,
                                         uint32_t end, uint64_t& reaped_n) {
  if constexpr (kExpectedPoll) return wait_own(c, li, l, s, end - l.wqebbs(), reaped_n);
  return wait_room(c, li, l, s, end, reaped_n);
}

// A QP-wide quiet as NVSHMEM's: what the QP's doorbell record (in memory) announces, retired by
// CQEs read from its CQ in memory. One thread per QP.
__device__ bool quiet_from_memory(const Ctl& c, int li, const Lane& l, QpState* s) {
  const uint32_t posted =
      m5::bswap32(ld_volatile32(l.dbrec() + m5::kSndDbr)) & 0xffff;  // low 16 bits
  uint64_t reaped = 0;
  if constexpr (kExpectedPoll) {
    const uint32_t retired = ld_volatile32(&s->retired);
    const uint32_t end = retired + static_cast<uint16_t>(posted - static_cast<uint16_t>(retired));
    return wait_own(c, li, l, s, end, reaped, true);
  }
  Wait w(c);
  for (;;) {
    if (!try_reap(c, li, l, s, reaped)) return false;  // reads the CQ at least once
    if (static_cast<uint16_t>(ld_volatile32(&s->retired)) == posted) return true;
    if (!w.tick(li, &l, s)) return false;
  }
}

__device__ __forceinline__ void store_seq(uint8_t* p, uint64_t seq) {
  if ((reinterpret_cast<unsigned long long>(p) & 7) == 0) {
    st_volatile64(p, seq);
  } else {
    for (int k = 0; k < 8; ++k) reinterpret_cast<volatile uint8_t*>(p)[k] = seq >> (8 * k);
  }
}

// The 8-byte word a round trip polls, composed of the widest loads its alignment allows, at the
// polling scope (an equality test on a torn read can only succeed on the final value).
__device__ __forceinline__ uint64_t load_seq(const uint8_t* p) {
  if ((reinterpret_cast<unsigned long long>(p) & 3) == 0) {
    const uint32_t lo = poll_data32(p), hi = poll_data32(p + 4);
    return (static_cast<uint64_t>(hi) << 32) | lo;
  }
  uint64_t v = 0;
  for (int k = 0; k < 8; ++k) v |= static_cast<uint64_t>(ld_volatile8(p + k)) << (8 * k);
  return v;
}

// Post one signaled write at producer index `pi` on a lane used by this thread alone, from
// registers only (the lane's columns in `q`, the index kept by the caller, an inline payload
// staged on chip): the WQE's segment stores, the ordering, the record and the doorbell (or the
// ready mark). Returns the producer index after it.
__device__ __forceinline__ uint32_t post_one(const SendQp& q, const WriteShape& w, uint32_t pi,
                                             uint32_t bbs, const StagedPayload& p) {
  const uint64_t db = emit_write(q, w, pi, p);
  if (q.ready)
    mark_ready(q.ready + (pi & (q.wqebbs - 1)), static_cast<uint64_t>(pi + bbs));
  else
    publish(q.dbrec, q.doorbell, pi + bbs, db);
  return pi + bbs;
}

// The state a one-thread lane's producer keeps in registers, written back after each post
// (fail() and the next call read it).
__device__ __forceinline__ void store_pub(QpState* s, uint32_t end) {
  st_volatile32(&s->pub, end);
  st_volatile32(&s->resv, end);
}

// Inline payloads of one WQE staged in shared memory: at most 63 segments a WQE.
constexpr uint32_t kStageSegs = 64;

// The payload of the next post, ready before its timer starts: inline, staged on chip; pointer,
// its sequence word stored and made visible to the NIC (the application wrote its buffer before
// the call: that store is not the mechanism being timed).
__device__ __forceinline__ StagedPayload ready_payload(uint4* stage, uint8_t* src, uint32_t size,
                                                       bool inl, uint64_t seq) {
  if (inl) return stage_inline(stage, src, size, seq);
  store_seq(src + size - 8, seq);
  __threadfence_system();
  return StagedPayload{static_cast<uint32_t>(__cvta_generic_to_shared(stage)), make_uint4(0, 0, 0, 0)};
}

}  // namespace

// ---- prepare -------------------------------------------------------------------------------------
// One thread per lane. attach[i]: the QP is new to the submitter: take its producer and consumer
// indices from the records in memory (a fresh or drained QP). Every lane: the call starts at the
// published index with `bbs` WQEBBs per WQE.
// cq_slack: consumed CQEs a lane's CQ record may lag by in this call (0: store it at every reap).
extern "C" __global__ void gda_prepare(const uint64_t* lanes, int nlanes, QpState* states,
                                       const uint8_t* attach, uint32_t bbs, uint32_t cq_slack) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= nlanes) return;
  const Lane l = lane_at(lanes, i);
  QpState* s = state_of(states, l);
  if (attach[i]) {
    const uint32_t pi = m5::bswap32(ld_volatile32(l.dbrec() + m5::kSndDbr)) & 0xffff;
    const uint32_t ci = m5::bswap32(ld_volatile32(l.cq_dbrec() + m5::kCqSetCi)) & 0xffffff;
    s->pub = s->resv = s->retired = pi;
    s->cq_ci = s->cq_pub = ci;
  }
  // No kernel runs on the states now: a call that failed may have left a ticket or the CQ lock.
  s->lock = s->lock_turn = s->cq_lock = 0;
  if (s->cq_pub != s->cq_ci) {  // a call that failed left its record behind
    set_cq_ci(l, s->cq_ci);
    s->cq_pub = s->cq_ci;
  }
  s->base = s->pub;
  s->bbs = bbs;
  s->cq_slack = cq_slack;
}

// One thread per lane, after a call: the CQ record says everything consumed, so whoever reads
// the queues next (another submitter, a drain, a check) sees no lag.
extern "C" __global__ void gda_finish(const uint64_t* lanes, int nlanes, QpState* states) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= nlanes) return;
  const Lane l = lane_at(lanes, i);
  QpState* s = state_of(states, l);
  const uint32_t ci = ld_volatile32(&s->cq_ci);
  if (ld_volatile32(&s->cq_pub) != ci) {
    set_cq_ci(l, ci);
    st_volatile32(&s->cq_pub, ci);
  }
}

// ---- single-op -----------------------------------------------------------------------------------
// Thread 0 posts and times. mode 0 issue, 1 put+completion, 2 round trip. src: the payload's
// device address (inline: a device copy of the source slice; pointer: the mapped source slice,
// whose last 8 bytes the kernel stamps). reply: device address of the polled reply word (round
// trip). A block of 32 (--cq-poll expected): with scope_all, lanes 1..31 quiet the other QPs
// while thread 0 waits for its own; a block of 1: thread 0 quiets them one after another.
extern "C" __global__ void gda_single_op(const uint64_t* lanes, int nlanes, QpState* states,
                                         int sel, int mode, uint32_t size, int inl, int scope_all,
                                         uint8_t* src, const uint8_t* reply, uint32_t iters,
                                         uint32_t warmup, uint64_t timeout_ns, int64_t* samples,
                                         int64_t* cycles, unsigned long long* status,
                                         const uint32_t* abort) {
  const Ctl c{status, abort, timeout_ns};
  const int t = threadIdx.x;
  const int helpers = static_cast<int>(blockDim.x) - 1;  // lanes that quiet other QPs
  const unsigned all = blockDim.x >= 32 ? 0xffffffffu : (1u << blockDim.x) - 1;
  const Lane l = lane_at(lanes, sel);
  QpState* s = state_of(states, l);
  const uint32_t bbs = write_wqebbs(inl, size, l[kDc] != 0);
  const uint64_t total = static_cast<uint64_t>(warmup) + iters;
  const bool quiet = mode == 1 && scope_all;
  __shared__ uint4 stage[kStageSegs];
  if (inl && m5::inline_seg_ds(size) > kStageSegs) {
    if (t == 0) fail(c, kBadArgs, sel, &l, s);
    return;
  }
  // Thread 0 alone produces on the selected lane: its columns and producer index live in
  // registers for the whole call (the timed section reads no memory).
  const SendQp q = load_send_qp(l);
  // Every post of the call writes the same shape (destination, length, keys, signaled): its
  // words are composed once, so the timed build is the stores and the index's operations.
  WriteShape shape = shape_write(q, q.dst, inl != 0, size, q.src_addr, true);
  uint32_t pub = ld_volatile32(&s->pub);
  for (uint64_t i = 0; i < total; ++i) {
    const uint64_t seq = i + 1;
    uint64_t t0 = 0, c0 = 0, t1 = 0, c1 = 0, reaped = 0;
    uint32_t end = 0;
    bool ok = true;
    if (t == 0) {
      // Untimed: room for the WQE (the previous one is retired: one outstanding at most)
      // and its payload ready.
      ok = own_room(c, sel, l, s, pub + bbs, reaped);
      if (ok) {
        const StagedPayload p = ready_payload(stage, src, size, inl != 0, seq);
        drain_before_timing();
        pin_shape(shape);
        compiler_barrier();
        t0 = globaltimer();
        c0 = clock64_now();
        end = post_one(q, shape, pub, bbs, p);
        if (mode == 0) {
          t1 = globaltimer();
          c1 = clock64_now();
        }
        pub = end;
        store_pub(s, end);
      }
    }
    ok = __shfl_sync(all, ok, 0);  // posted: the helpers' quiet starts now, inside the interval
    if (ok && t == 0) {
      if (mode == 0) {
        ok = own_retired(c, sel, l, s, end, reaped);
      } else if (mode == 1) {
        ok = own_retired(c, sel, l, s, end, reaped);
        if (ok && quiet && helpers == 0) {
          for (int k = 0; k < nlanes && ok; ++k) {
            if (k == sel) continue;
            const Lane o = lane_at(lanes, k);
            ok = quiet_from_memory(c, k, o, state_of(states, o));
          }
        }
      } else {
        Wait w(c);
        const uint8_t* word = reply + size - 8;
        uint64_t seen;
        while ((seen = load_seq(word)) != seq) {
          if ((!kExpectedPoll && !try_reap(c, sel, l, s, reaped)) ||
              !w.tick(sel, &l, s, seen, seq)) {
            ok = false;
            break;
          }
        }
        t1 = globaltimer();
        c1 = clock64_now();
        ok = ok && own_retired(c, sel, l, s, end, reaped);
      }
    } else if (ok && quiet) {
      // Helper t quiets the other QPs j = t-1, t-1+helpers, ... (j counts the lanes but sel; their
      // state is theirs alone in this kernel). Every helper takes its first QP in the same loop
      // iteration, so the helpers stay converged and their PCIe reads are in flight together (a
      // loop over all lanes that skipped the others' QPs ran them one after another).
      for (int j = t - 1; j < nlanes - 1 && ok; j += helpers) {
        const int k = j < sel ? j : j + 1;
        const Lane o = lane_at(lanes, k);
        ok = quiet_from_memory(c, k, o, state_of(states, o));
      }
    }
    ok = __all_sync(all, ok);
    if (!ok) {
      if (t == 0) status[kStDone] = i;
      return;
    }
    if (t == 0) {
      if (mode == 1) {
        t1 = globaltimer();
        c1 = clock64_now();
      }
      if (i >= warmup) {
        samples[i - warmup] = static_cast<int64_t>(t1 - t0);
        cycles[i - warmup] = static_cast<int64_t>(c1 - c0);
      }
    }
  }
  if (t == 0) status[kStDone] = total;
}

// ---- round-trip responder ------------------------------------------------------------------------
extern "C" __global__ void gda_respond(const uint64_t* lanes, QpState* states, uint32_t size,
                                       int inl, uint8_t* src, const uint8_t* watch, uint32_t count,
                                       uint64_t timeout_ns, unsigned long long* status,
                                       const uint32_t* abort) {
  const Ctl c{status, abort, timeout_ns};
  const Lane l = lane_at(lanes, 0);
  QpState* s = state_of(states, l);
  const uint32_t bbs = write_wqebbs(inl, size, l[kDc] != 0);
  const uint8_t* word = watch + size - 8;
  __shared__ uint4 stage[kStageSegs];
  if (inl && m5::inline_seg_ds(size) > kStageSegs) {
    fail(c, kBadArgs, 0, &l, s);
    return;
  }
  const SendQp q = load_send_qp(l);
  const WriteShape shape = shape_write(q, q.dst, inl != 0, size, q.src_addr, true);
  uint32_t pub = ld_volatile32(&s->pub);
  for (uint64_t seq = 1; seq <= count; ++seq) {
    status[kStDone] = seq - 1;
    uint64_t reaped = 0;
    // Room and the payload first: the reply goes out as soon as the request is seen.
    if (!own_room(c, 0, l, s, pub + bbs, reaped)) return;
    const StagedPayload p = ready_payload(stage, src, size, inl != 0, seq);
    Wait w(c);
    uint64_t seen;
    while ((seen = load_seq(word)) != seq)
      if (!w.tick(0, &l, s, seen, seq)) return;
    const uint32_t end = post_one(q, shape, pub, bbs, p);
    pub = end;
    store_pub(s, end);
    if (!own_retired(c, 0, l, s, end, reaped)) return;
  }
  status[kStDone] = count;
}

// ---- msg-rate ------------------------------------------------------------------------------------
// Units: a thread (publish 0: slot handoff in reservation order; 2: doorbell lock per WQE) or a
// warp (publish 1: reserve once, build in lockstep, one lane publishes and rings). With U units
// and L lanes, unit u owns lanes u, u+U, ... when U <= L (its batch b goes to its (b mod n)-th
// lane), else it shares lane u mod L. A unit posts per_thread x (its threads) messages after as
// many warm-up ones, `batch` WQEs per doorbell. Lane WQE k (of the call) is signaled when
// (k + 1) % signal_every == 0 or it is the lane's last (kLaneWqes); the drain is timed.
// unit_out: per unit {t_start, t_end, doorbells, cqes, windows}; windows: per unit max_windows.
//
// kSolo: the loop of a thread that alone drives one lane (publish 0, units <= lanes, one lane a
// unit), compiled apart so that none of the other units' branches (warp shuffles, hand-off, lock,
// lane moves) sits in its loop: one thread's rate is bound by its instructions' latency.
template <bool kSolo>
__device__ __forceinline__ void msg_rate(const uint64_t* lanes, uint32_t L, QpState* states,
                                         uint32_t threads, int pub_mode, uint32_t batch,
                                         uint64_t writes_per_visit, uint32_t size, int inl,
                                         uint64_t per_thread, uint64_t warmup_per_thread,
                                         uint64_t window, uint32_t signal_every, const Ctl& c,
                                         int64_t* unit_out, int64_t* windows,
                                         uint32_t max_windows, unsigned long long* status,
                                         unsigned mask, uint32_t tid, uint64_t* ahead_slots) {
  const bool warp_mode = !kSolo && pub_mode == 1;
  const uint32_t lane_id = threadIdx.x & 31;
  const uint32_t usize = warp_mode ? __popc(mask) : 1;
  const uint32_t unit = warp_mode ? tid / 32 : tid;
  const uint32_t units = warp_mode ? (threads + 31) / 32 : threads;
  const bool leader = !warp_mode || lane_id == 0;
  const uint32_t n = kSolo ? 1 : units <= L ? (L - unit + units - 1) / units : 1;
  const uint32_t first = kSolo || units <= L ? unit : unit % L;
  const uint64_t total = (per_thread + warmup_per_thread) * usize;
  const uint64_t warm = warmup_per_thread * usize;
  const uint64_t win = window * usize;
  // A visit: `writes_per_visit` writes on one lane (0: one batch), in chains of at most `batch`
  // with one doorbell each; then the unit's next lane. Counted down, no division per chain.
  const uint64_t visit = writes_per_visit != 0 ? writes_per_visit * usize : batch;
  uint64_t visit_left = visit;
  uint32_t lane_k = 0;  // the unit's current lane: first + lane_k * units
  int64_t* out = unit_out + static_cast<uint64_t>(unit) * 5;
  int64_t* wout = windows + static_cast<uint64_t>(unit) * max_windows;
  uint64_t posted = 0, doorbells = 0, reaped = 0, next_window = warm + win;
  uint32_t nwin = 0, last_end = 0;
  uint64_t t_start = warm == 0 ? globaltimer() : 0, t_window = t_start;
  bool ok = true;
  // The current lane's columns and call constants, loaded when the unit moves to another lane
  // (never, for a unit on one lane); `known_retired`: a retired index this unit has acquired on
  // it (retirement only moves forward, so while it leaves room no wait is needed).
  // A lane this unit alone posts to (units <= lanes) needs no atomic reservation and no
  // hand-off: its reservation index is the unit's, kept in `own_resv` and written back with plain
  // stores for the drain, the diagnostics and the next call.
  const bool owned = kSolo || units <= L;
  uint32_t cur = 0xffffffffu, bbs = 0, base = 0, lane_wqes = 0, known_retired = 0, own_resv = 0;
  bool known = false, host_db = false;
  uint64_t slots = 1;
  // A thread alone on one lane, posting 8-byte inline writes: its payloads are copied on chip
  // kAhead messages ahead (PayloadAhead); its message numbers on the lane are consecutive.
  PayloadAhead ah{static_cast<uint32_t>(__cvta_generic_to_shared(
      &ahead_slots[(threadIdx.x % kAheadThreads) * 2 * kAhead]))};
  bool ahead = false;
  // A thread's running place (WQE number, signaling phase, slice) after its last chain.
  uint32_t run_k = 0xffffffffu, run_phase = 0;
  uint64_t run_slice = 0;
  SendQp q{};
  QpState* s = nullptr;
  while (posted < total && ok) {
    const uint32_t li = first + lane_k * units;
    const Lane l = lane_at(lanes, li);
    if (li != cur) {
      cur = li;
      s = state_of(states, l);
      q = load_send_qp(l);
      bbs = ld_volatile32(&s->bbs);
      base = ld_volatile32(&s->base);
      lane_wqes = static_cast<uint32_t>(l[kLaneWqes]);
      host_db = q.ready != nullptr;
      // message slot: the lane's k-th message goes to slot k mod slots of its slice
      slots = q.region / size > 0 ? q.region / size : 1;
      known = false;
      if (owned && leader) own_resv = ld_volatile32(&s->resv);
      ahead = !warp_mode && owned && n == 1 && inl && size == 8 && slots <= 0xffffffffu &&
              threadIdx.x < kAheadThreads && (q.src_dev & 7) == 0;
      run_k = 0xffffffffu;  // another lane: its places are computed afresh
      if (ahead) {
        ah.src = reinterpret_cast<const uint8_t*>(q.src_dev);
        ah.slots = static_cast<uint32_t>(slots);
        ah.live = false;
      }
    }
    const uint64_t room_left = total - posted < visit_left ? total - posted : visit_left;
    const uint32_t count = static_cast<uint32_t>(room_left < batch ? room_left : batch);
    visit_left -= count;
    if (visit_left == 0) {  // the visit is done: the next lane (every thread keeps the count)
      visit_left = visit;
      lane_k = lane_k + 1 == n ? 0 : lane_k + 1;
    }
    uint32_t start = 0, ticket = 0;
    bool held = false;  // this thread's ticket is served (publish=lock)
    // reserve (and, for the lock, take it: a ticket lock, served in the order taken, so that no
    // thread of a warp contending for it starves behind its siblings)
    if (leader) {
      if (!kSolo && pub_mode == 2) {
        ticket = atomicAdd(&s->lock, 1u);
        Wait w(c);
        while (ld_acquire_gpu32(&s->lock_turn) != ticket)
          if (!w.tick(li, &l, s)) {
            ok = false;
            break;
          }
        held = ok;
        if (ok) {
          start = ld_volatile32(&s->resv);
          st_volatile32(&s->resv, start + count * bbs);
        }
      } else if (owned) {
        start = own_resv;
        own_resv = start + count * bbs;
        st_volatile32(&s->resv, own_resv);
      } else {
        start = atomicAdd(&s->resv, count * bbs);
      }
      const uint32_t need = start + count * bbs;
      if (ok && !(known && static_cast<int32_t>(need - known_retired) <=
                               static_cast<int32_t>(q.wqebbs))) {
        ok = wait_room_seen(c, li, l, s, need, reaped, known_retired);
        known = ok;
      }
      if (!ok && held) st_release_gpu32(&s->lock_turn, ticket + 1);
    }
    if (warp_mode) {
      start = __shfl_sync(mask, start, 0);
      ok = __shfl_sync(mask, ok, 0);
    }
    if (!ok) break;
    // build: a warp builds WQEs lane_id, lane_id + usize, ...; a thread all of its batch
    uint64_t db = 0;
    const uint32_t step = warp_mode ? usize : 1;
    // The chain's first WQE number on the lane; each WQE's place in the signaling period and
    // its slice by steps, carried from a thread's last chain when this one continues it (no
    // division a WQE or a chain: one thread's posting is bound by its instructions' latency).
    const uint32_t j0 = warp_mode ? lane_id : 0;
    const uint32_t kc = bbs == 1 ? start - base : (start - base) / bbs;
    if (warp_mode || kc != run_k) {
      run_phase = (kc + j0 + 1) % signal_every;  // 0: the WQE is signaled
      run_slice = (kc + j0) % slots;
    }
    uint32_t phase = run_phase;
    uint64_t slice = run_slice;
    const uint32_t phase_step = warp_mode ? step % signal_every : 1;
    const uint64_t slice_step = warp_mode ? step % slots : 1;
    for (uint32_t j = j0, k = kc + j0; j < count; j += step, k += step) {
      const uint32_t pi = start + j * bbs;
      const bool sig = phase == 0 || k + 1 == lane_wqes;
      const uint64_t off = slice * size;
      if (ahead) {
        const uint4 h = ah.take(k);
        db = build_write_q(q, pi, q.dst + off, true, 8u, HeadPayload{h}, q.src_addr + off, sig);
      } else {
        const ConstPayload p{reinterpret_cast<const uint8_t*>(q.src_dev) + off, size};
        db = build_write_q(q, pi, q.dst + off, inl != 0, size, p, q.src_addr + off, sig);
      }
      phase += phase_step;
      if (phase >= signal_every) phase -= signal_every;
      slice += slice_step;
      if (slice >= slots) slice -= slots;
      if (host_db && !kMarkAfterFence)  // each builder publishes its own WQE
        mark_ready(q.ready + (pi & (q.wqebbs - 1)), static_cast<uint64_t>(pi + bbs));
    }
    if (!warp_mode) {  // where this thread's next chain on the lane continues
      run_k = kc + count;
      run_phase = phase;
      run_slice = slice;
    }
    if (host_db && kMarkAfterFence) {  // each builder's WQEs: one fence, then their slots
      mark_fence();
      for (uint32_t j = warp_mode ? lane_id : 0; j < count; j += step) {
        const uint32_t pi = start + j * bbs;
        st_volatile64(q.ready + (pi & (q.wqebbs - 1)), static_cast<uint64_t>(pi + bbs));
      }
    }
    if (warp_mode && !host_db) {
      db = __shfl_sync(mask, db, (count - 1) % usize);
      __syncwarp(mask);
    }
    const uint32_t end = start + count * bbs;
    if (leader) {
      if (host_db) {
        // the host thread rings: no hand-off; pub only feeds diagnostics (the furthest end)
        if (owned)
          st_volatile32(&s->pub, end);
        else
          atomicMax(&s->pub, end);  // doorbells: the host thread counts the rings
      } else if (!kSolo && pub_mode != 2 && !owned) {  // hand-off: after every earlier reservation
        Wait w(c);
        while (ld_acquire_gpu32(&s->pub) != start)
          if (!w.tick(li, &l, s)) {
            ok = false;
            break;
          }
      }
      if (ok && !host_db) {
        publish(q.dbrec, q.doorbell, end, db);
        if (owned)
          st_volatile32(&s->pub, end);  // read by no other thread of this kernel
        else
          st_release_gpu32(&s->pub, end);  // the next reservation's hand-off
        ++doorbells;
      }
      if (held) st_release_gpu32(&s->lock_turn, ticket + 1);  // the next ticket's turn
      last_end = end;
      const uint64_t before = posted;
      posted += count;
      if (before < warm && posted >= warm) t_start = t_window = globaltimer();
      while (posted >= next_window && next_window < total) {
        const uint64_t t = globaltimer();
        if (nwin < max_windows) wout[nwin++] = static_cast<int64_t>(t - t_window);
        t_window = t;
        next_window += win;
      }
      if constexpr (!kExpectedPoll) ok = ok && try_reap(c, li, l, s, reaped);
    } else {
      posted += count;
    }
    if (warp_mode) ok = __shfl_sync(mask, ok, 0);
  }
  if (ahead) ah.finish();  // no copy still landing in shared memory when the thread leaves
  if (!leader) return;
  // drain: every lane of this unit retired up to what the unit posted on it (shared lane) or
  // up to everything reserved on it (lanes it owns)
  for (uint32_t i = 0; i < n && ok; ++i) {
    const uint32_t li = first + i * units;
    const Lane l = lane_at(lanes, li);
    QpState* s = state_of(states, l);
    const uint32_t end = owned ? ld_volatile32(&s->resv) : last_end;
    ok = wait_retired(c, li, l, s, end, reaped);
  }
  if (!ok) {
    atomicAdd(&status[kStDone], posted);
    return;
  }
  const uint64_t t_end = globaltimer();
  if (nwin < max_windows) wout[nwin++] = static_cast<int64_t>(t_end - t_window);
  out[0] = static_cast<int64_t>(t_start);
  out[1] = static_cast<int64_t>(t_end);
  out[2] = static_cast<int64_t>(doorbells);
  out[3] = static_cast<int64_t>(reaped);
  out[4] = nwin;
  atomicAdd(&status[kStDone], posted);
}

extern "C" __global__ void gda_msg_rate(const uint64_t* lanes, int nlanes, QpState* states,
                                        uint32_t threads, int pub_mode, uint32_t batch,
                                        uint64_t writes_per_visit, uint32_t size, int inl,
                                        uint64_t per_thread,
                                        uint64_t warmup_per_thread, uint64_t window,
                                        uint32_t signal_every, uint64_t timeout_ns,
                                        int64_t* unit_out, int64_t* windows, uint32_t max_windows,
                                        unsigned long long* status, const uint32_t* abort) {
  const Ctl c{status, abort, timeout_ns};
  const uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned mask = __ballot_sync(0xffffffffu, tid < threads);
  if (tid >= threads) return;
  __shared__ alignas(16) uint64_t ahead_slots[kAheadThreads * 2 * kAhead];
  const uint32_t L = static_cast<uint32_t>(nlanes);
  // a thread alone on one lane: units (threads) <= lanes and its lanes tid, tid + threads, ...
  // are one (tid + threads >= lanes)
  const bool solo = pub_mode == 0 && threads <= L && tid + threads >= L;
#define GDA_MSG_RATE_ARGS                                                                     \
  lanes, L, states, threads, pub_mode, batch, writes_per_visit, size, inl, per_thread,          \
      warmup_per_thread, window, signal_every, c, unit_out, windows, max_windows, status, mask, \
      tid, ahead_slots
  if (GDA_SOLO && solo)
    msg_rate<true>(GDA_MSG_RATE_ARGS);
  else
    msg_rate<false>(GDA_MSG_RATE_ARGS);
#undef GDA_MSG_RATE_ARGS
}

// ---- clock ---------------------------------------------------------------------------------------
// Spin for `ns` of globaltimer; out = {elapsed ns, elapsed SM cycles} (cuda/smclock.cuh).
extern "C" __global__ void gda_clock(uint64_t ns, int64_t* out) { spin_for_clock(ns, out); }
