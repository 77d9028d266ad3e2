// The NIC model in the CPU engine: plans, admission, held-back CQEs (see emu_model.hpp).
#include "emu_model.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

#include "emu_nic.hpp"

namespace gicbench {
namespace emu {

namespace nm = nic_model;
namespace m5 = mlx5;

namespace {

// The model's memory operations in the CPU engine: the shared region's lock (a pid spin lock,
// as the CQs', so a dead holder is taken over) and atomic counters.
struct HostSync {
  uint32_t pid;
  void lock(uint32_t* l) { spin_lock(l, pid); }
  void unlock(uint32_t* l) { spin_unlock(l); }
  void add(uint64_t* c, uint64_t v) { add_rlx(c, v); }
};

// The log entry of a written CQE (if the ring still holds it) records when.
void note_cqe(ModelState& ms, const PendingCqe& c, uint32_t qpn, uint64_t now) {
  if (!c.log) return;
  ModelLogEntry& e = ms.log[c.log - 1];
  if (e.idx == c.idx && e.qpn == qpn) e.cqe_at = now;
}

}  // namespace

void Nic::set_model(const nm::Params& p) {
  std::lock_guard<std::mutex> g(ctl_);
  if (closed_) throw std::runtime_error("emu rank " + std::to_string(rank_) + ": closed");
  if (model_) throw std::runtime_error("emu rank " + std::to_string(rank_) + ": NIC model set");
  if (engine_threads() > 1)
    throw std::invalid_argument("invalid NIC model with engine_threads=" +
                                std::to_string(engine_threads()) +
                                ": allowed with 1 engine thread (the model is one thread's clock)");
  if (!p.mtu) throw std::invalid_argument("invalid mtu=0: allowed >= 1");
  if (p.cache_lines && (!p.send_ctx_lines || !p.recv_ctx_lines ||
                        p.send_ctx_lines > p.cache_lines || p.recv_ctx_lines > p.cache_lines))
    throw std::invalid_argument("invalid context lines: each in 1..cache_lines");
  const uint64_t off = self_.alloc_mr(nm::shared_bytes(p));
  auto* s = reinterpret_cast<nm::Shared*>(self_.at(off));
  std::memset(s, 0, nm::shared_bytes(p));
  nm::shared_init(s, p);
  st_rel(&s->magic, nm::kSharedMagic);
  auto m = std::make_unique<ModelState>();
  m->p = p;
  m->own = s;
  m->qps.resize(eng_.size());
  // An unqueued one-block WQE's latency from its doorbell to its landing (nic_model.cuh's
  // order): what every plan takes at least, beyond which the NIC plans kPlanAheadPs.
  m->plan_ahead_ps = p.doorbell_ps + nm::xfer_ps(m5::kWqebbBytes, p.dma_fs_per_byte) +
                     p.dma_read_ps + p.tx_msg_ps + p.wire_ps + p.rx_msg_ps + p.dma_write_ps +
                     kPlanAheadPs;
  lock_engine();
  model_ = std::move(m);
  st_rel(&self_.hdr()->reserved[kHdrNicModel], off);
  unlock_engine();
}

uint64_t Nic::model_bytes(const nm::Params& p) { return mr_footprint(nm::shared_bytes(p)); }

// Admit the WQE at `ci` once the clock has reached its modelled landing time. WQEs announced
// beyond the plan (`avail` WQEBBs from ci) are noted for model_plan at the end of the pass; an
// unplanned WQE at ci waits for it.
bool Nic::model_admit(uint32_t slot, const emu_core::SqParams& q, uint32_t ci, uint32_t avail) {
  ModelState& ms = *model_;
  ModelQp& mq = ms.qps[slot];
  const QpEntry& qp = self_.qps()[slot];
  const uint32_t n = q.ring.wqebb_cnt;
  if (mq.exec.size() != n) {
    mq.exec.assign(n, 0);
    mq.cqe.assign(n, 0);
    mq.log.assign(n, 0);
  }
  uint32_t ahead = mq.plan_end - ci;
  if (ahead > n) {  // WQEs flushed without a plan moved ci past it
    mq.plan_end = ci;
    ahead = 0;
  }
  if (ahead < avail) {
    mq.plan_to = ci + avail;
    if (mq.plan_state == 0) ms.to_plan.push_back(slot);
    mq.plan_state = 1;
  }
  if (ahead == 0) {
    const m5::CtrlView c = m5::get_ctrl_seg(q.ring.wqe(ci));
    if (emu_core::wqe_ready(q, ci, c) && m5::ds_to_wqebbs(c.ds ? c.ds : 1) <= avail) {
      ms.held_pass = 1;  // planned at the end of a pass, admitted after it
      return false;
    }
    // not plannable (the core checked it ready): execute, complete now
    mq.cur_cqe = model_now_ps();
    mq.cur_log = 0;
    return true;
  }
  uint64_t now = ms.now;
  const uint32_t k = ci & (n - 1);
  if (now == 0 || ++ms.since_read >= kClockReuse) {  // once a pass, then every kClockReuse
    now = ms.now = model_now_ps();
    ms.since_read = 0;
  }
  if (now < mq.exec[k]) {
    ms.held_pass = 1;
    return false;
  }
  if (now > mq.exec[k] + ms.p.slack_ps) ++ms.local[nm::kCntLate];
  mq.cur_cqe = mq.cqe[k];
  mq.cur_log = mq.log[k];
  if (mq.cur_log) {
    ModelLogEntry& e = ms.log[mq.cur_log - 1];
    if (e.qpn == qp.qpn && e.idx == static_cast<uint16_t>(ci)) e.exec_at = now;
  }
  return true;
}

// Plan announced WQEs, one of each QP in turn from where the last pass left off, until the NIC
// has work up to plan_ahead_ps past the clock (all seen at this pass's clock reading), or after
// one turn (`one_turn`: the engine may not have read every rung doorbell yet).
void Nic::model_plan(bool one_turn) {
  ModelState& ms = *model_;
  if (ms.to_plan.empty()) return;
  const uint64_t now = model_now_ps();
  ms.now = now;
  ms.since_read = 0;
  const uint64_t limit = now + ms.plan_ahead_ps;
  for (;;) {
    if (ms.plan_cursor >= ms.to_plan.size()) {  // a turn done: drop the drained QPs, in order
      size_t kept = 0;
      for (const uint32_t slot : ms.to_plan) {
        ModelQp& mq = ms.qps[slot];
        if (mq.plan_state == 1)
          ms.to_plan[kept++] = slot;
        else
          mq.plan_state = 0;
      }
      ms.to_plan.resize(kept);
      ms.plan_cursor = 0;
      if (kept == 0 || one_turn) return;
    }
    const uint32_t slot = ms.to_plan[ms.plan_cursor++];
    ModelQp& mq = ms.qps[slot];
    if (mq.plan_state != 1) continue;
    uint64_t t_exec = 0;
    if (!model_plan_next(slot, now, t_exec)) {
      mq.plan_state = 2;
      continue;
    }
    if (t_exec > limit) return;
  }
}

// Plan the next WQE of QP `slot` seen at `now`: false when none is announced and readable.
bool Nic::model_plan_next(uint32_t slot, uint64_t now, uint64_t& t_exec) {
  ModelState& ms = *model_;
  ModelQp& mq = ms.qps[slot];
  const QpEntry& qp = self_.qps()[slot];
  const emu_core::SqParams q = sq_params(slot);
  const uint32_t n = q.ring.wqebb_cnt;
  const uint32_t at = mq.plan_end;
  const uint32_t left = mq.plan_to - at;
  if (left == 0 || left > n || mq.exec.size() != n) return false;
  const m5::CtrlView c = m5::get_ctrl_seg(q.ring.wqe(at));
  const uint32_t nbb = m5::ds_to_wqebbs(c.ds ? c.ds : 1);
  if (!emu_core::wqe_ready(q, at, c) || nbb > left) return false;
  const nm::WqeDesc w = nm::describe(q.ring, at, q.dci, qp.remote_rank, qp.remote_qpn);
  nm::Shared* resp = nullptr;
  if (w.dest_rank >= 0 && w.dest_rank < world_ && seg_[w.dest_rank])
    resp = model_shared(*seg_[w.dest_rank]);
  HostSync sync{pid_};
  const nm::Planned pl =
      nm::plan_wqe(ms.p, ms.tx, mq.m, ms.own, resp, ms.spare_rx_free, w, qp.qpn, now, sync);
  const uint32_t k = at & (n - 1);
  mq.exec[k] = t_exec = pl.t.t_exec;
  mq.cqe[k] = pl.t.t_cqe;
  const uint32_t li = static_cast<uint32_t>(ms.log_n++ % kModelLog);
  ms.log[li] = ModelLogEntry{qp.qpn, static_cast<uint16_t>(at), w.kind,
                             static_cast<uint8_t>((w.pointer ? 1 : 0) | (pl.send_hit ? 0 : 2) |
                                                  (pl.recv_hit ? 0 : 4) |
                                                  (pl.tx.connected ? 8 : 0)),
                             w.bytes, now, pl.t.t_exec, pl.t.t_cqe, 0, 0};
  mq.log[k] = li + 1;
  ++ms.local[nm::kCntWqes];
  mq.plan_end = at + nbb;
  return true;
}

// Queue a requester, error or flush CQE of QP `slot` for its modelled time: the admitted WQE's
// (a flush: now), never before the QP's previous CQE.
void Nic::model_defer(uint32_t slot, PendingCqe c) {
  ModelState& ms = *model_;
  ModelQp& mq = ms.qps[slot];
  const uint64_t prev = mq.cqes.empty() ? 0 : mq.cqes.back().t;
  uint64_t t = c.flush ? model_now_ps() : mq.cur_cqe;
  if (!c.flush) c.log = mq.cur_log;
  c.t = t > prev ? t : prev;
  mq.cqes.push_back(c);
  if (!mq.listed) {
    mq.listed = true;
    ms.with_cqes.push_back(slot);
  }
  ms.queued.fetch_add(1, std::memory_order_relaxed);
  ++ms.local[nm::kCntCqes];
}

// The pass's counts into the shared counters (what Python and peers read).
void Nic::model_end_pass() {
  ModelState& ms = *model_;
  for (uint32_t i = 0; i < nm::kNumCounters; ++i) {
    if (ms.local[i]) {
      add_rlx(&ms.own->counters[i], ms.local[i]);
      ms.local[i] = 0;
    }
  }
  ms.held.store(ms.held_pass, std::memory_order_relaxed);
}

// Write the queued CQEs whose time has come: the work done.
size_t Nic::model_flush() {
  ModelState& ms = *model_;
  if (ms.with_cqes.empty()) return 0;
  const uint64_t now = model_now_ps();
  size_t done = 0;
  for (size_t k = 0; k < ms.with_cqes.size();) {
    const uint32_t slot = ms.with_cqes[k];
    ModelQp& mq = ms.qps[slot];
    while (!mq.cqes.empty() && mq.cqes.front().t <= now) {
      const PendingCqe c = mq.cqes.front();
      mq.cqes.pop_front();
      write_deferred_cqe(slot, c);
      if (now > c.t + ms.p.slack_ps) ++ms.local[nm::kCntLate];
      note_cqe(ms, c, self_.qps()[slot].qpn, now);
      ms.queued.fetch_sub(1, std::memory_order_relaxed);
      ++done;
    }
    if (mq.cqes.empty()) {
      mq.listed = false;
      ms.with_cqes[k] = ms.with_cqes.back();
      ms.with_cqes.pop_back();
      continue;
    }
    ++k;
  }
  return done;
}

// A QP back to RESET (engine locked): its queued CQEs are written now (a CQE the NIC had
// produced is not lost by the reset), its plans dropped.
void Nic::model_reset_qp(uint32_t slot) {
  ModelState& ms = *model_;
  ModelQp& mq = ms.qps[slot];
  const uint64_t now = model_now_ps();
  while (!mq.cqes.empty()) {
    const PendingCqe c = mq.cqes.front();
    mq.cqes.pop_front();
    write_deferred_cqe(slot, c);
    note_cqe(ms, c, self_.qps()[slot].qpn, now);
    ms.queued.fetch_sub(1, std::memory_order_relaxed);
  }
  mq.m = nm::Qp{};
  mq.plan_end = 0;
  mq.plan_to = 0;
  mq.cur_cqe = 0;
  mq.cur_log = 0;
}

bool Nic::model_pending() const {
  return model_ && (model_->queued.load(std::memory_order_relaxed) != 0 ||
                    model_->held.load(std::memory_order_relaxed) != 0);
}

std::vector<ModelLogEntry> Nic::model_log() {
  lock_engine();
  std::vector<ModelLogEntry> out;
  if (model_) {
    const uint64_t n = model_->log_n < kModelLog ? model_->log_n : kModelLog;
    for (uint64_t i = model_->log_n - n; i < model_->log_n; ++i)
      out.push_back(model_->log[i % kModelLog]);
  }
  unlock_engine();
  return out;
}

std::vector<uint64_t> Nic::model_counters() const {
  std::vector<uint64_t> out;
  if (!model_) return out;
  for (uint32_t i = 0; i < nm::kNumCounters; ++i) out.push_back(ld_rlx(&model_->own->counters[i]));
  return out;
}

}  // namespace emu
}  // namespace gicbench
