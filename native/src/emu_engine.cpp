// The CPU engine of the emulated NIC: the core of cuda/emu_core.cuh (doorbells, WQE checks and
// execution, CQEs, errors) over POSIX shared memory, the per-pass choice of registers to read,
// and the engine thread.
//
// Doorbells. The doorbell register is the wake-up; the producer index comes from the send doorbell
// record (acquire load), or, for a DBR-less QP, from the doorbell value. Both conventions are
// understood: rdma-core's (the first 8 bytes of the last WQE's ctrl) and IBGDA's / DOCA GPUNetIO's
// (the next producer index with opcode 0 and ds 0). A doorbell naming WQEs the record has not
// published yet is a doorbell-record lag: counted, and the QP is re-checked every pass until the
// record covers them (DOCA's default rings, updates the record, rings again: the second ring
// carries the same value and is no memory change; the re-check is what notices the record).
//
// Which registers are read: a NIC sees each doorbell as a write addressed to it; emu sees memory.
// It reads every pass the registers of QPs rung recently or with work pending (the "hot" set, its
// cost proportional to the active QPs, as a NIC's is to the doorbells it receives) and a fixed
// window of a rotating sweep over all registers (constant cost per pass). A QP quiet for a long
// time is found by the sweep (counted as cold_wakeups): its first doorbell waits up to one sweep.
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cstring>

#include "emu_nic.hpp"

namespace gicbench {
namespace emu {

namespace m5 = mlx5;

namespace {

// Idle backoff of the engine thread: spin with pause, then yield, then sleeps doubling to 100 µs
// (plus the kernel's timer slack, 50 µs by default), 1 ms once deeply idle; reset on work. Counted
// in idle sweeps (a sweep reads every doorbell register once).
constexpr uint32_t kSpinPasses = 2000;
constexpr uint32_t kYieldPasses = 100;
constexpr long kSleepMinNs = 1000, kSleepMaxNs = 100000;
// After this many consecutive idle sleeps (~50 ms) the cap rises to 1 ms: each wake-up costs a
// timer and a context switch (~10% of a core at 100 µs on a VM), a deep-idle engine ~1%.
constexpr uint32_t kDeepIdleSleeps = 330;
constexpr long kDeepSleepMaxNs = 1000000;

// Registers of the rotating sweep read per pass, and the passes without a doorbell or work after
// which a QP leaves the hot set.
constexpr uint32_t kSweepWindow = 16;
constexpr uint64_t kHotIdlePasses = 1u << 16;

inline void copy_payload(uint8_t* dst, const uint8_t* src, uint32_t len) {
  switch (len) {  // the small sizes benchmarks use, without a call to memcpy
    case 8: std::memcpy(dst, src, 8); break;
    case 4: std::memcpy(dst, src, 4); break;
    case 16: std::memcpy(dst, src, 16); break;
    default: std::memcpy(dst, src, len);
  }
}

inline uint32_t be32_at(const Segment& s, uint64_t off) {
  return m5::bswap32(ld_acq(reinterpret_cast<const uint32_t*>(s.at(off))));
}

}  // namespace

// ---- CQEs ----------------------------------------------------------------------------------------

void Nic::lock_cq(const Segment& s, CqEntry& cq) {
  const uint32_t dead = spin_lock(&cq.lock, pid_);
  if (dead) {
    s.count(kCntLockSteals);
    s.push_error(kErrDeadOwner, 0, 0, dead, cq.cqn, rank_);
  }
}

// Overrun without oi: hardware raises the CQ error event and moves every QP that completes on the
// CQ to ERR (they stop executing; later WQEs flush). The CQ's segment holds those QPs.
void Nic::cq_fatal(const Segment& s, CqEntry& cq) {
  const uint32_t n = ld_acq(&s.hdr()->n_qps);
  for (uint32_t i = 1; i < n; ++i) {
    QpEntry& q = s.qps()[i];
    if (q.send_cqn != cq.cqn && !(q.rq.wqe_cnt && q.rq.cqn == cq.cqn)) continue;
    const uint32_t st = ld_acq(&q.state);
    if (st == kErr || st == kReset) continue;
    st_rel(&q.state, static_cast<uint32_t>(kErr));
    s.count(kCntQpFatal);
    s.push_error(kErrQpFatal, q.qpn, st, kErr, cq.cqn, rank_);
  }
}

// Write one CQE into CQ `cq` of segment `s` (its lock held): overrun check against the consumer
// index in the CQ's doorbell record (skipped with oi), body first, op_own last (release). A
// collapsed CQ (cc) receives every CQE in entry 0.
namespace {
// GCC __atomic builtins over shared memory: the memory operations the core needs for CQEs.
struct HostMem {
  uint32_t ld_acq32(const uint32_t* p) const { return ld_acq(p); }
  void st_rel32(uint32_t* p, uint32_t v) const { st_rel(p, v); }
  void st_rel8(uint8_t* p, uint8_t v) const { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
};
}  // namespace

// Write one CQE into CQ `cq` of segment `s` (its lock held) with the core's write_cqe; an
// overrun (without oi) raises the CQ error: counters, a record, and the CQ's QPs go to ERR.
template <class Fill>
bool Nic::post_cqe_locked(const Segment& s, CqEntry& cq, uint32_t qpn, Fill fill) {
  const emu_core::CqRef ref{s.at(cq.buf_off),
                            reinterpret_cast<const uint32_t*>(s.at(cq.dbrec_off)) + m5::kCqSetCi,
                            &cq.status,
                            &cq.pi,
                            &cq.dropped,
                            cq.ncqe,
                            cq.flags};
  const uint32_t pi = cq.pi;
  HostMem mem;
  switch (emu_core::write_cqe(mem, ref, fill)) {
    case emu_core::kCqeWritten: s.count(kCntCqes); return true;
    case emu_core::kCqeDropped: s.count(kCntCqeDropped); return false;
    case emu_core::kCqeOverrun: {
      // mlx5: the CQ goes to CQ_OVERFLOW and an async error event is raised; CQEs are lost.
      const uint32_t ci = be32_at(s, cq.dbrec_off + 4 * m5::kCqSetCi) & 0xffffff;
      s.count(kCntCqOverruns);
      s.count(kCntCqeDropped);
      s.push_error(kErrCqOverrun, qpn, ci, pi & 0xffffff, cq.cqn, rank_);
      cq_fatal(s, cq);
      return false;
    }
  }
  return false;
}

template <class Fill>
bool Nic::post_cqe(const Segment& s, uint32_t cqn, uint32_t qpn, Fill fill) {
  CqEntry& cq = s.cqs()[num_index(cqn)];
  lock_cq(s, cq);
  const bool ok = post_cqe_locked(s, cq, qpn, fill);
  spin_unlock(&cq.lock);
  return ok;
}

// ---- the core's environment ---------------------------------------------------------------------
// One QP of this rank being served: memory operations, responder lookup through the peers'
// segments, MR translation, receive queues, CQEs, counters and error records.
struct Nic::Env {
  Nic& nic;
  QpEntry& qp;
  uint64_t* counts;  // the serving shard's counters
  struct Resp {
    const Segment* ts = nullptr;
    RqState* rq = nullptr;
    uint32_t num = 0, pd = 0;
  };

  uint32_t ld_acq32(const uint32_t* p) const { return ld_acq(p); }
  uint64_t fetch_add64(uint64_t* p, uint64_t v) const {
    return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL);
  }
  uint64_t cas64(uint64_t* p, uint64_t expected, uint64_t desired) const {
    __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    return expected;  // the old value either way
  }
  uint32_t cas32(uint32_t* p, uint32_t expected, uint32_t desired) const {
    __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    return expected;
  }
  void copy(uint8_t* dst, const uint8_t* src, uint32_t n) const { copy_payload(dst, src, n); }
  uint32_t qp_state() const { return ld_acq(&qp.state); }
  void qp_to_error() const { st_rel(&qp.state, static_cast<uint32_t>(kErr)); }

  bool responder(const uint8_t* av, Resp& r) const {
    if (qp.type == kDci) {
      const m5::AvView v = m5::get_av(av);
      const int trank = static_cast<int>(m5::get_be16(av + 14)) - 1;  // LID = rank + 1
      if (trank < 0 || trank >= nic.world_ || !nic.seg_[trank]) return false;
      const Segment* ts = nic.seg_[trank];
      const uint32_t dn = v.dqp_dct & 0xffffff;
      const uint32_t di = num_index(dn) & ~kDctBit;
      if (num_rank(dn) != (static_cast<uint32_t>(trank) & 0xff) || !(num_index(dn) & kDctBit) ||
          di == 0 || di >= ld_acq(&ts->hdr()->n_dcts))
        return false;
      DctEntry& d = ts->dcts()[di];
      if (ld_acq(&d.state) != kRtr) return false;
      if (d.dc_key != v.dc_key) {
        // The DCT drops the packet and counts it (dctc.dc_access_key_violation_count in
        // mlx5_ifc.h); the requester retries until TRANSPORT_RETRY_EXC.
        add_rlx(&d.key_violations, 1u);
        ts->count(kCntDcKeyViolations);
        return false;
      }
      r = Resp{ts, &d.rq, d.dctn, d.pd};
      return true;
    }
    if (qp.remote_rank < 0 || !nic.seg_[qp.remote_rank]) return false;
    const Segment* ts = nic.seg_[qp.remote_rank];
    const uint32_t ri = num_index(qp.remote_qpn);
    if (ri == 0 || (ri & kDctBit) || ri >= ld_acq(&ts->hdr()->n_qps)) return false;
    QpEntry& p = ts->qps()[ri];
    const uint32_t rs = ld_acq(&p.state);
    if (p.qpn != qp.remote_qpn || (rs != kRtr && rs != kRts)) return false;
    r = Resp{ts, &p.rq, p.qpn, p.pd};
    return true;
  }
  uint8_t* local(uint32_t key, uint64_t addr, uint64_t len, uint32_t need, uint32_t pd) const {
    return nic.self_.mr_ptr(key, addr, len, need, pd);
  }
  uint8_t* remote(const Resp& r, uint32_t key, uint64_t addr, uint64_t len,
                  uint32_t need) const {
    return r.ts->mr_ptr(key, addr, len, need, r.pd);
  }
  bool recv_begin(const Resp& r, emu_core::RecvSlot& slot) const {
    if (r.rq->wqe_cnt == 0) return false;
    CqEntry& rcq = r.ts->cqs()[num_index(r.rq->cqn)];
    nic.lock_cq(*r.ts, rcq);
    const uint32_t rpi = be32_at(*r.ts, r.rq->dbrec_off) & 0xffff;
    if (((rpi - r.rq->ci) & 0xffff) == 0) {
      spin_unlock(&rcq.lock);
      return false;
    }
    slot.wqe = r.ts->at(r.rq->buf_off) + (r.rq->ci & (r.rq->wqe_cnt - 1)) * 16;
    slot.index = static_cast<uint16_t>(r.rq->ci);
    ++r.rq->ci;
    return true;
  }
  void recv_end(const Resp& r, const emu_core::RecvSlot& slot, uint8_t cqe_op, uint8_t synd,
                uint32_t len, uint32_t imm) const {
    CqEntry& rcq = r.ts->cqs()[num_index(r.rq->cqn)];
    nic.post_cqe_locked(*r.ts, rcq, r.num, [&](uint8_t* b, uint8_t owner) {
      if (synd)
        return m5::fill_err_cqe(b, cqe_op, synd, emu_core::vendor_syndrome(synd), r.num, 0,
                                slot.index, owner);
      return m5::fill_resp_cqe(b, cqe_op, r.num, slot.index, len, imm, 0, owner);
    });
    spin_unlock(&rcq.lock);
    if (!synd) r.ts->count(kCntRecvConsumed);
  }
  // The NIC model holds a WQE back until its modelled landing time (emu_model.cpp).
  bool admit(const emu_core::SqParams& q, uint32_t ci, uint32_t avail) const {
    return !nic.model_ || nic.model_admit(num_index(qp.qpn), q, ci, avail);
  }
  // With the NIC model every CQE is planned as its WQE executes and written at that time.
  bool hold_cqes() const { return !nic.model_; }
  void req_cqe(uint8_t wqe_opcode, uint16_t idx, uint32_t bytes) const {
    if (nic.model_) {  // written at its modelled time
      nic.model_defer(num_index(qp.qpn), PendingCqe{0, 0, idx, wqe_opcode, 0, 0, 0, bytes});
      return;
    }
    nic.post_cqe(nic.self_, qp.send_cqn, qp.qpn, [&](uint8_t* b, uint8_t owner) {
      return m5::fill_req_cqe(b, qp.qpn, wqe_opcode, idx, bytes, 0, owner);
    });
  }
  void err_cqe(uint8_t synd, uint8_t vendor, uint8_t wqe_opcode, uint16_t idx, bool flush) const {
    if (nic.model_) {  // after the QP's earlier CQEs
      nic.model_defer(num_index(qp.qpn), PendingCqe{0, 0, idx, wqe_opcode, synd, vendor,
                                                    static_cast<uint8_t>(flush), 0});
      return;
    }
    nic.post_cqe(nic.self_, qp.send_cqn, qp.qpn, [&](uint8_t* b, uint8_t owner) {
      return m5::fill_err_cqe(b, m5::kCqeReqErr, synd, vendor, qp.qpn, wqe_opcode, idx, owner);
    });
    if (!flush) nic.self_.push_error(kErrCompletion, qp.qpn, synd, idx, qp.send_cqn, nic.rank_);
  }
  void event(emu_core::Event ev, uint32_t expected, uint32_t found) const {
    uint64_t* c = counts;
    const Segment& s = nic.self_;
    switch (ev) {
      case emu_core::kEvDoorbell:
        ++c[kCntDoorbells];
        st_rlx(&qp.doorbells, qp.doorbells + 1);
        break;
      case emu_core::kEvWrongQpn:
        ++c[kCntBadDoorbells];
        s.push_error(kErrDoorbellQpn, qp.qpn, expected, found, 0, nic.rank_);
        break;
      case emu_core::kEvNotRts:
        ++c[kCntNotRts];
        s.push_error(kErrNotRts, qp.qpn, expected, found, 0, nic.rank_);
        break;
      case emu_core::kEvOutOfWindow:
        ++c[kCntBadDoorbells];
        s.push_error(kErrBadDoorbell, qp.qpn, expected, found, 0, nic.rank_);
        break;
      case emu_core::kEvBadRecord:
        ++c[kCntBadDoorbells];
        s.push_error(kErrBadDbrec, qp.qpn, expected, found, 0, nic.rank_);
        break;
      case emu_core::kEvDbrecLag:
        ++c[kCntDbrecLag];
        st_rlx(&qp.dbrec_lag, qp.dbrec_lag + 1);
        break;
      case emu_core::kEvStale:
        ++c[kCntStaleWqes];
        st_rlx(&qp.stale, qp.stale + 1);
        s.push_error(kErrStaleWqe, qp.qpn, expected, found, 0, nic.rank_);
        break;
      case emu_core::kEvFlushed: ++c[kCntFlushed]; break;
      case emu_core::kEvExecuted:
        ++c[kCntWqes];
        st_rlx(&qp.wqes, qp.wqes + 1);
        c[kCntBytes] += expected;
        c[kCntMessages] += found;
        break;
      case emu_core::kEvError:
        ++c[kCntErrors];
        st_rlx(&qp.errors, qp.errors + 1);
        break;
      case emu_core::kEvRnr: ++c[kCntRnr]; break;
    }
  }
};

emu_core::SqParams Nic::sq_params(uint32_t i) const {
  const QpEntry& qp = self_.qps()[i];
  return emu_core::SqParams{
      m5::SqRing{self_.at(qp.sq_off), qp.wqebb_cnt},
      qp.qpn,
      qp.flags,
      qp.max_inline,
      qp.pd,
      qp.type == kDci,
      reinterpret_cast<const uint32_t*>(self_.at(qp.dbrec_off)) + m5::kSndDbr};
}

// A CQE the NIC model held back, written now (the Env's req_cqe/err_cqe, later).
void Nic::write_deferred_cqe(uint32_t slot, const PendingCqe& c) {
  const QpEntry& qp = self_.qps()[slot];
  if (!c.synd) {
    post_cqe(self_, qp.send_cqn, qp.qpn, [&](uint8_t* b, uint8_t owner) {
      return m5::fill_req_cqe(b, qp.qpn, c.opcode, c.idx, c.bytes, 0, owner);
    });
    return;
  }
  post_cqe(self_, qp.send_cqn, qp.qpn, [&](uint8_t* b, uint8_t owner) {
    return m5::fill_err_cqe(b, m5::kCqeReqErr, c.synd, c.vendor, qp.qpn, c.opcode, c.idx, owner);
  });
  if (!c.flush) self_.push_error(kErrCompletion, qp.qpn, c.synd, c.idx, qp.send_cqn, rank_);
}

// A changed register (`rung`, value `db`) or a pending QP: hand it to the core.
size_t Nic::serve_qp(uint32_t i, uint64_t db, bool rung, uint64_t* local) {
  QpEntry& qp = self_.qps()[i];
  QpEng& e = eng_[i];
  Env env{*this, qp, local};
  const emu_core::SqParams q = sq_params(i);
  const size_t n = rung ? 1 + emu_core::on_doorbell(env, e.sq, q, db) : emu_core::serve(env, e.sq, q);
  st_rlx(&qp.sq_ci, e.sq.ci);
  return n;
}

// ---- doorbells -----------------------------------------------------------------------------------

size_t Nic::progress() {
  size_t work = 0;
  for (auto& sh : shards_) work += progress_shard(*sh);
  return work;
}

size_t Nic::progress_shard(Shard& sh) {
  if (__atomic_exchange_n(&sh.busy, 1u, __ATOMIC_ACQUIRE)) return 0;
  if (closed_) {
    st_rel(&sh.busy, 0u);
    return 0;
  }
  Header* h = self_.hdr();
  const uint32_t n = ld_acq(&h->n_qps);
  const uint64_t pass = ++sh.pass;
  uint64_t* local = sh.local;
  const bool first_shard = sh.index == 0;  // GPI queues and the NIC model
  size_t work = 0;
  if (model_ && first_shard) {  // the NIC model's CQEs whose time has come
    model_->held_pass = 0;
    model_->now = 0;
    work += model_flush();
  }
  // The hot set: registers rung recently, and QPs whose announced work is not all executed.
  std::vector<uint32_t>& hot = sh.hot;
  for (size_t k = 0; k < hot.size();) {
    const uint32_t i = hot[k];
    QpEng& e = eng_[i];
    const uint64_t db = ld_acq(self_.doorbell(i));
    if (db != last_db_[i]) {
      last_db_[i] = db;
      e.active = pass;
      work += serve_qp(i, db, true, local);
    } else if (e.sq.pending) {
      const size_t w = serve_qp(i, db, false, local);
      if (w) e.active = pass;
      work += w;
    }
    if (!e.sq.pending && pass - e.active > kHotIdlePasses) {
      is_hot_[i] = 0;
      hot[k] = hot.back();
      hot.pop_back();
      continue;
    }
    ++k;
  }
  // One window of the rotating sweep over the shard's registers: slots first, first + step, ...
  sh.wrapped = false;
  const uint32_t step = engine_threads(), first = 1 + sh.index;
  const uint32_t owned = n > first ? (n - first + step - 1) / step : 0;
  const uint32_t window = std::min(kSweepWindow, owned);
  for (uint32_t k = 0; k < window; ++k) {
    const uint32_t i = sh.cursor < n ? sh.cursor : first;
    sh.cursor = i + step;
    if (sh.cursor >= n) {
      sh.cursor = first;
      sh.wrapped = true;
    }
    if (is_hot_[i]) continue;
    const uint64_t db = ld_acq(self_.doorbell(i));
    if (db == last_db_[i]) continue;
    last_db_[i] = db;
    ++local[kCntColdWakeups];
    sh.last_cold_pass = pass;
    is_hot_[i] = 1;
    hot.push_back(i);
    eng_[i].active = pass;
    work += serve_qp(i, db, true, local);
  }
  if (owned == 0) sh.wrapped = true;
  if (first_shard) work += serve_gpis();
  if (work) {
    if (local[kCntWqes]) sh.wqes.fetch_add(local[kCntWqes], std::memory_order_relaxed);
    for (uint32_t c = 0; c < kNumCounters; ++c) {
      if (local[c]) {
        add_rlx(&h->counters[c], local[c]);
        local[c] = 0;
      }
    }
  }
  if (model_ && first_shard) {
    // Until a whole sweep has found no rung QP outside the hot set, QPs whose doorbells rang
    // with the others' may still be unread: the NIC model plans one turn a pass meanwhile.
    const uint64_t sweep_passes = owned ? (owned - 1) / kSweepWindow + 2 : 1;
    model_plan(pass - sh.last_cold_pass <= sweep_passes);
    model_end_pass();
  }
  if (sh.wrapped) sh.sweeps.fetch_add(1, std::memory_order_release);
  st_rel(&sh.busy, 0u);
  return work;
}

std::vector<uint64_t> Nic::shard_wqes() const {
  std::vector<uint64_t> out;
  for (const auto& sh : shards_) out.push_back(sh->wqes.load(std::memory_order_relaxed));
  return out;
}

void Nic::set_engine_threads(uint32_t n) {
  std::lock_guard<std::mutex> g(ctl_);
  const std::string who = "emu rank " + std::to_string(rank_);
  if (n < 1 || n > kMaxEngineThreads)
    throw std::invalid_argument("invalid engine_threads=" + std::to_string(n) + ": allowed 1.." +
                                std::to_string(kMaxEngineThreads));
  if (closed_) throw std::runtime_error(who + ": closed");
  if (thread_running())
    throw std::runtime_error(who + ": engine_threads is set before the engine threads start");
  if (model_ && n > 1)
    throw std::invalid_argument("invalid engine_threads=" + std::to_string(n) +
                                " with a NIC model: allowed 1 (the model is one thread's clock)");
  if (ld_acq(&self_.hdr()->n_qps) > 1)
    throw std::runtime_error(who + ": engine_threads is set before any QP exists");
  // Before the first QP nothing is hot, no counter is pending and no submitter holds the
  // progress hook; the lock waits out a pass already running (quiesce, progress()).
  lock_engine();
  std::vector<std::unique_ptr<Shard>> next;
  for (uint32_t k = 0; k < n; ++k) {
    next.push_back(std::make_unique<Shard>());
    next.back()->index = k;
    next.back()->cursor = 1 + k;
    next.back()->busy = 1;  // held, as lock_engine left the old ones
  }
  shards_ = std::move(next);
  unlock_engine();
}

// ---- the engine thread ---------------------------------------------------------------------------

void Nic::engine_loop(Shard& sh) {
  uint32_t idle = 0;
  long sleep_ns = kSleepMinNs;
  bool busy_sweep = false;  // work seen since the current sweep began
  while (!stop_.load(std::memory_order_relaxed)) {
    if (progress_shard(sh)) {
      idle = 0;
      sleep_ns = kSleepMinNs;
      busy_sweep = true;
      continue;
    }
    // Back off only after a whole sweep found nothing: a quiet QP's doorbell is found by the
    // sweep, which must not stall in a sleep halfway; nor while the NIC model holds work back.
    if (!sh.wrapped || model_pending()) {
      cpu_pause();
      continue;
    }
    if (busy_sweep) {
      busy_sweep = false;
      continue;
    }
    ++idle;
    if (idle < kSpinPasses) {
      cpu_pause();
    } else if (idle < kSpinPasses + kYieldPasses) {
      sched_yield();
    } else {
      const timespec ts{0, sleep_ns};
      nanosleep(&ts, nullptr);
      const bool deep = idle - kSpinPasses - kYieldPasses > kDeepIdleSleeps;
      sleep_ns = std::min(sleep_ns * 2, deep ? kDeepSleepMaxNs : kSleepMaxNs);
    }
  }
}

void Nic::start_thread() {
  if (thread_running() || closed_) return;
  stop_.store(false);
  for (auto& sh : shards_) {
    Shard* p = sh.get();
    p->thread = std::thread([this, p] { engine_loop(*p); });
  }
}

void Nic::stop_thread() {
  if (!thread_running()) return;
  stop_.store(true);
  for (auto& sh : shards_)
    if (sh->thread.joinable()) sh->thread.join();
  stop_.store(false);
}

void Nic::quiesce() {
  // Two completed sweeps of every shard that started after this call have read every doorbell
  // register rung before it (and every hot QP once per pass).
  std::vector<uint64_t> start;
  for (auto& sh : shards_) start.push_back(sh->sweeps.load(std::memory_order_acquire));
  for (;;) {
    size_t w = 0;
    const bool threads = thread_running();
    if (!threads) w = progress();
    bool swept = true;
    for (size_t k = 0; k < shards_.size(); ++k)
      swept = swept && shards_[k]->sweeps.load(std::memory_order_acquire) >= start[k] + 2;
    if (w == 0 && !model_pending() && swept) return;
    if (threads) sched_yield();
  }
}

std::vector<ErrRecord> Nic::drain_errors(uint64_t* lost) {
  std::lock_guard<std::mutex> g(ctl_);
  std::vector<ErrRecord> out;
  *lost = 0;
  if (closed_) return out;
  const uint64_t head = ld_acq(&self_.hdr()->err_head);
  if (head - err_cursor_ > kErrRing) {
    *lost = head - kErrRing - err_cursor_;
    err_cursor_ = head - kErrRing;
  }
  for (; err_cursor_ < head; ++err_cursor_) {
    const ErrRecord& r = self_.errs()[err_cursor_ % kErrRing];
    const uint64_t s = ld_acq(&r.seq);
    if (s < err_cursor_ + 1) break;  // still being written
    if (s > err_cursor_ + 1) {       // overwritten by a later lap
      ++*lost;
      continue;
    }
    ErrRecord copy;
    copy.kind = ld_rlx(&r.kind);
    copy.qpn = ld_rlx(&r.qpn);
    copy.expected = ld_rlx(&r.expected);
    copy.found = ld_rlx(&r.found);
    copy.cqn = ld_rlx(&r.cqn);
    copy.rank = ld_rlx(&r.rank);
    // A writer of a later lap may have started overwriting the record while it was copied: the
    // sequence, read again after the copy, says whether the copy is one record.
    std::atomic_thread_fence(std::memory_order_acquire);
    if (ld_rlx(&r.seq) != err_cursor_ + 1) {
      ++*lost;
      continue;
    }
    copy.seq = s;
    out.push_back(copy);
  }
  return out;
}

}  // namespace emu
}  // namespace gicbench

extern "C" void gicbench_emu_progress(void* ctx) {
  static_cast<gicbench::emu::Nic*>(ctx)->progress();
}

// The layout and the core name the same flag and state values.
static_assert(static_cast<uint32_t>(gicbench::emu::kQpNoDbr) == gicbench::emu_core::kQpNoDbr &&
                  static_cast<uint32_t>(gicbench::emu::kQpWqeSig) == gicbench::emu_core::kQpWqeSig,
              "QP flags");
static_assert(static_cast<uint32_t>(gicbench::emu::kCqCollapsed) ==
                      gicbench::emu_core::kCqCollapsed &&
                  static_cast<uint32_t>(gicbench::emu::kCqOverrunIgnore) ==
                      gicbench::emu_core::kCqOverrunIgnore,
              "CQ flags");
static_assert(static_cast<uint32_t>(gicbench::emu::kRts) == gicbench::emu_core::kRts &&
                  static_cast<uint32_t>(gicbench::emu::kErr) == gicbench::emu_core::kErr &&
                  static_cast<uint32_t>(gicbench::emu::kRemoteAtomic) ==
                      gicbench::emu_core::kRemoteAtomic,
              "states and access bits");
