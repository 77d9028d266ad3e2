// The CPU engine of the emulated NIC: doorbell scan, WQE checks, execution, CQEs, errors.
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
// (plus the kernel's timer slack, 50 µs by default), 1 ms once deeply idle; reset on work.
constexpr uint32_t kSpinPasses = 2000;
constexpr uint32_t kYieldPasses = 100;
constexpr long kSleepMinNs = 1000, kSleepMaxNs = 100000;
// After this many consecutive idle sleeps (~50 ms) the cap rises to 1 ms: each wake-up costs a
// timer and a context switch (~10% of a core at 100 µs on a VM), a deep-idle engine ~1%.
constexpr uint32_t kDeepIdleSleeps = 330;
constexpr long kDeepSleepMaxNs = 1000000;

// Vendor syndrome ConnectX reports with REMOTE_ACCESS (0x88 = 136, e.g. open-mpi/ompi#1241).
constexpr uint8_t kVendorRemoteAccess = 0x88;

// Translate (key, addr, len) through the MR table of segment `s`; null on any violation.
uint8_t* mr_ptr(const Segment& s, uint32_t key, uint64_t addr, uint64_t len, uint32_t need) {
  const uint32_t i = key_index(key);
  if (i == 0 || i >= ld_acq(&s.hdr()->n_mrs)) return nullptr;
  const MrEntry& m = s.mrs()[i];
  if (ld_acq(&m.key) != key) return nullptr;
  if (addr < m.addr || len > m.length || addr - m.addr > m.length - len) return nullptr;
  if ((m.access & need) != need) return nullptr;
  return s.base() + m.offset + (addr - m.addr);
}

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

// Write one CQE into CQ `cq` of segment `s` (its lock held): overrun check against the consumer
// index in the CQ's doorbell record, body first, op_own last with a release store.
template <class Fill>
static bool post_cqe_locked(const Segment& s, CqEntry& cq, uint32_t qpn, int rank, Fill fill) {
  if (cq.status != kCqOk) {
    ++cq.dropped;
    s.count(kCntCqeDropped);
    return false;
  }
  const uint32_t ci = be32_at(s, cq.dbrec_off + 4 * m5::kCqSetCi) & 0xffffff;
  if (((cq.pi - ci) & 0xffffff) >= cq.ncqe) {
    // mlx5: the CQ goes to CQ_OVERFLOW and an async error event is raised; CQEs are lost.
    st_rel(&cq.status, static_cast<uint32_t>(kCqOverflow));
    ++cq.dropped;
    s.count(kCntCqOverruns);
    s.count(kCntCqeDropped);
    s.push_error(kErrCqOverrun, qpn, ci, cq.pi & 0xffffff, cq.cqn, rank);
    return false;
  }
  uint8_t* b = s.at(cq.buf_off) + (cq.pi & (cq.ncqe - 1)) * m5::kCqeBytes;
  const uint8_t op_own = fill(b, static_cast<uint8_t>((cq.pi & cq.ncqe) ? 1 : 0));
  __atomic_store_n(b + m5::kCqeOpOwn, op_own, __ATOMIC_RELEASE);
  ++cq.pi;
  s.count(kCntCqes);
  return true;
}

template <class Fill>
static bool post_cqe(const Segment& s, uint32_t cqn, uint32_t qpn, int rank, Fill fill) {
  CqEntry& cq = s.cqs()[num_index(cqn)];
  spin_lock(&cq.lock);
  const bool ok = post_cqe_locked(s, cq, qpn, rank, fill);
  spin_unlock(&cq.lock);
  return ok;
}

void Nic::complete_error(QpEntry& qp, uint8_t synd, uint8_t wqe_opcode, uint16_t idx,
                         bool flush) {
  const uint8_t vendor = synd == m5::kSyndRemoteAccess ? kVendorRemoteAccess : 0;
  post_cqe(self_, qp.send_cqn, qp.qpn, rank_, [&](uint8_t* b, uint8_t owner) {
    return m5::fill_err_cqe(b, m5::kCqeReqErr, synd, vendor, qp.qpn, wqe_opcode, idx, owner);
  });
  if (!flush) self_.push_error(kErrCompletion, qp.qpn, synd, idx, qp.send_cqn, rank_);
}

size_t Nic::progress() {
  if (__atomic_exchange_n(&busy_, 1u, __ATOMIC_ACQUIRE)) return 0;
  if (closed_) {
    unlock_engine();
    return 0;
  }
  Header* h = self_.hdr();
  const uint32_t n = ld_acq(&h->n_qps);
  const uint64_t* dbs = self_.doorbells();
  size_t work = 0;
  for (uint32_t i = 1; i < n; ++i) {
    const uint64_t db = ld_acq(&dbs[i]);
    if (db != last_db_[i]) {
      last_db_[i] = db;
      work += 1 + process_doorbell(i, db);
    }
  }
  if (work) {
    for (uint32_t c = 0; c < kNumCounters; ++c) {
      if (local_[c]) {
        add_rlx(&h->counters[c], local_[c]);
        local_[c] = 0;
      }
    }
  }
  passes_.fetch_add(1, std::memory_order_release);
  unlock_engine();
  return work;
}

size_t Nic::process_doorbell(uint32_t i, uint64_t db) {
  QpEntry& qp = self_.qps()[i];
  ++local_[kCntDoorbells];
  st_rlx(&qp.doorbells, qp.doorbells + 1);
  // The doorbell carries the first 8 bytes of the last WQE's ctrl: opmod_idx_opcode, qpn_ds.
  const uint32_t w0 = m5::bswap32(static_cast<uint32_t>(db));
  const uint32_t w1 = m5::bswap32(static_cast<uint32_t>(db >> 32));
  const uint32_t target = (w0 >> 8) & 0xffff;
  const uint32_t db_qpn = w1 >> 8;
  uint32_t ci = ci_[i];
  if (db_qpn != qp.qpn) {
    ++local_[kCntBadDoorbells];
    self_.push_error(kErrBadDoorbell, qp.qpn, qp.qpn, db_qpn, 0, rank_);
    return 0;
  }
  const uint32_t state = ld_acq(&qp.state);
  if (state != kRts && state != kErr) {
    // Hardware ignores a doorbell of a QP that cannot send; emu says so (counter + record).
    ++local_[kCntNotRts];
    self_.push_error(kErrNotRts, qp.qpn, state, target, 0, rank_);
    return 0;
  }
  if (((target - ci) & 0xffff) >= qp.wqebb_cnt) {
    ++local_[kCntBadDoorbells];
    self_.push_error(kErrBadDoorbell, qp.qpn, ci & 0xffff, target, 0, rank_);
    return 0;
  }
  const m5::SqRing sq{self_.at(qp.sq_off), qp.wqebb_cnt};
  size_t handled = 0;
  uint64_t wqes = 0;
  for (;;) {
    const uint32_t rem = (target - ci) & 0xffff;
    const m5::CtrlView c = m5::get_ctrl_seg(sq.wqe(ci));
    if (c.wqe_index != (ci & 0xffff)) {
      // The slot still holds an older WQE (or none): the doorbell overtook the WQE stores.
      ++local_[kCntStaleWqes];
      st_rlx(&qp.stale, qp.stale + 1);
      self_.push_error(kErrStaleWqe, qp.qpn, ci & 0xffff, c.wqe_index, 0, rank_);
      break;
    }
    const uint32_t nbb = m5::ds_to_wqebbs(c.ds ? c.ds : 1);
    if (rem != 0 && nbb > rem) {  // the doorbell names an index inside this WQE
      ++local_[kCntBadDoorbells];
      self_.push_error(kErrBadDoorbell, qp.qpn, ci & 0xffff, target, 0, rank_);
      break;
    }
    if (ld_rlx(&qp.state) == kErr) {
      complete_error(qp, m5::kSyndWrFlush, c.opcode, static_cast<uint16_t>(ci), true);
      ++local_[kCntFlushed];
    } else {
      const Exec r = execute(qp, sq, ci, c);
      if (r.synd) {
        complete_error(qp, r.synd, c.opcode, static_cast<uint16_t>(ci), false);
        st_rel(&qp.state, static_cast<uint32_t>(kErr));
        ++local_[kCntErrors];
        st_rlx(&qp.errors, qp.errors + 1);
      } else {
        ++wqes;
        local_[kCntBytes] += r.bytes;
        if (c.opcode != m5::kOpNop) ++local_[kCntMessages];
        if (c.fm_ce_se & m5::kCqUpdate) {
          const uint16_t idx = static_cast<uint16_t>(ci);
          post_cqe(self_, qp.send_cqn, qp.qpn, rank_, [&](uint8_t* b, uint8_t owner) {
            return m5::fill_req_cqe(b, qp.qpn, c.opcode, idx, r.bytes, 0, owner);
          });
        }
      }
    }
    ++handled;
    ci += nbb;
    if (rem == 0) break;
  }
  local_[kCntWqes] += wqes;
  st_rlx(&qp.wqes, qp.wqes + wqes);
  ci_[i] = ci;
  st_rlx(&qp.sq_ci, ci);
  return handled;
}

Nic::Exec Nic::execute(QpEntry& qp, const m5::SqRing& sq, uint32_t ci, const m5::CtrlView& c) {
  Exec bad;
  if (c.qpn != qp.qpn || c.ds == 0 || m5::ds_to_wqebbs(c.ds) > qp.wqebb_cnt) {
    bad.synd = m5::kSyndLocalQpOp;
    return bad;
  }
  if (c.opcode == m5::kOpNop) return Exec{};
  const bool atomic = c.opcode == m5::kOpAtomicFa;
  if (c.opcode != m5::kOpRdmaWrite && c.opcode != m5::kOpRdmaWriteImm && !atomic) {
    bad.synd = m5::kSyndLocalQpOp;  // SEND, READ, CMP_SWAP...: not emulated
    return bad;
  }
  // ---- the responder: RC peer QP, or a DCT named by the address vector -------------------------
  uint32_t seg = 1;
  const Segment* ts = nullptr;
  RqState* rq = nullptr;
  uint32_t resp_num = 0;
  bad.synd = m5::kSyndTransportRetryExc;  // unreachable/not-ready responder: packets go nowhere
  if (qp.type == kDci) {
    const uint8_t* av = sq.seg(ci, seg);
    const m5::AvView v = m5::get_av(av);
    const uint32_t rlid = m5::get_be16(av + 14);
    seg += v.ext ? m5::kDsAvFull : m5::kDsAvCompact;
    const int trank = static_cast<int>(rlid) - 1;  // LID = rank + 1
    if (trank < 0 || trank >= world_ || !seg_[trank]) return bad;
    ts = seg_[trank];
    const uint32_t dn = v.dqp_dct & 0xffffff;
    const uint32_t di = num_index(dn) & ~kDctBit;
    if (num_rank(dn) != (static_cast<uint32_t>(trank) & 0xff) || !(num_index(dn) & kDctBit) ||
        di == 0 || di >= ld_acq(&ts->hdr()->n_dcts))
      return bad;
    DctEntry& d = ts->dcts()[di];
    if (ld_acq(&d.state) != kRtr) return bad;
    if (d.dc_key != v.dc_key) {
      // The DCT drops the packet and counts it (dctc.dc_access_key_violation_count in
      // mlx5_ifc.h); the requester retries until TRANSPORT_RETRY_EXC.
      add_rlx(&d.key_violations, 1u);
      ts->count(kCntDcKeyViolations);
      return bad;
    }
    rq = &d.rq;
    resp_num = d.dctn;
  } else {
    if (qp.remote_rank < 0 || !seg_[qp.remote_rank]) return bad;
    ts = seg_[qp.remote_rank];
    const uint32_t ri = num_index(qp.remote_qpn);
    if (ri == 0 || (ri & kDctBit) || ri >= ld_acq(&ts->hdr()->n_qps)) return bad;
    QpEntry& r = ts->qps()[ri];
    const uint32_t rs = ld_acq(&r.state);
    if (r.qpn != qp.remote_qpn || (rs != kRtr && rs != kRts)) return bad;
    rq = &r.rq;
    resp_num = r.qpn;
  }
  if (c.ds < seg + (atomic ? 3u : 2u)) {
    bad.synd = m5::kSyndLocalQpOp;
    return bad;
  }
  const m5::RaddrView ra = m5::get_raddr_seg(sq.seg(ci, seg++));

  if (atomic) {
    const m5::AtomicView at = m5::get_atomic_seg(sq.seg(ci, seg++));
    const m5::DataView d = m5::get_data_seg(sq.seg(ci, seg));
    if (d.byte_count != 8) {
      bad.synd = m5::kSyndLocalLength;
      return bad;
    }
    uint8_t* res = mr_ptr(self_, d.lkey, d.addr, 8, kLocalWrite);
    if (!res) {
      bad.synd = m5::kSyndLocalProt;
      return bad;
    }
    if (ra.raddr & 7) {
      bad.synd = m5::kSyndRemoteInvalReq;  // misaligned atomic: Invalid Request NAK
      return bad;
    }
    uint8_t* tp = mr_ptr(*ts, ra.rkey, ra.raddr, 8, kRemoteAtomic);
    if (!tp) {
      bad.synd = m5::kSyndRemoteAccess;
      return bad;
    }
    // Host endianness (ConnectX's atomic_req_8B_endianness_mode = host, set by mlx5_core).
    const uint64_t old =
        __atomic_fetch_add(reinterpret_cast<uint64_t*>(tp), at.swap_add, __ATOMIC_ACQ_REL);
    std::memcpy(res, &old, 8);
    return Exec{0, 8};
  }

  // ---- RDMA write (pointer or inline), with or without immediate --------------------------------
  const m5::DataView d = m5::get_data_seg(sq.seg(ci, seg));
  const bool inl = (d.byte_count & m5::kInlineFlag) != 0;
  const uint32_t len = d.byte_count & ~m5::kInlineFlag;
  const uint8_t* src = nullptr;
  uint8_t tmp[m5::kDsMask * m5::kSegBytes];
  if (inl) {
    if (seg + m5::inline_seg_ds(len) > c.ds) {
      bad.synd = m5::kSyndLocalLength;
      return bad;
    }
    const uint8_t* p = sq.seg(ci, seg) + 4;
    if (p + len <= sq.buf + sq.bytes()) {
      src = p;
    } else {  // the payload wraps at the SQ end
      m5::get_inline_payload(sq, ci, seg, tmp, len);
      src = tmp;
    }
  } else if (len) {
    src = mr_ptr(self_, d.lkey, d.addr, len, 0);
    if (!src) {
      bad.synd = m5::kSyndLocalProt;
      return bad;
    }
  }
  uint8_t* dst = nullptr;
  if (len) {
    dst = mr_ptr(*ts, ra.rkey, ra.raddr, len, kRemoteWrite);
    if (!dst) {
      bad.synd = m5::kSyndRemoteAccess;
      return bad;
    }
  }
  if (c.opcode == m5::kOpRdmaWrite) {
    if (len) copy_payload(dst, src, len);
    return Exec{0, len};
  }
  // WRITE_WITH_IMM consumes a receive at the responder, under its receive CQ's lock.
  if (rq->wqe_cnt == 0) {
    ++local_[kCntRnr];
    bad.synd = m5::kSyndRnrRetryExc;
    return bad;
  }
  CqEntry& rcq = ts->cqs()[num_index(rq->cqn)];
  spin_lock(&rcq.lock);
  const uint32_t rpi = be32_at(*ts, rq->dbrec_off) & 0xffff;
  if (((rpi - rq->ci) & 0xffff) == 0) {
    spin_unlock(&rcq.lock);
    // No receive posted: the responder NAKs with RNR; emu behaves as rnr_retry = 0.
    ++local_[kCntRnr];
    bad.synd = m5::kSyndRnrRetryExc;
    return bad;
  }
  if (len) copy_payload(dst, src, len);
  const uint16_t ridx = static_cast<uint16_t>(rq->ci);
  ++rq->ci;
  post_cqe_locked(*ts, rcq, resp_num, rank_, [&](uint8_t* b, uint8_t owner) {
    return m5::fill_resp_cqe(b, m5::kCqeRespWrImm, resp_num, ridx, len, c.imm, 0, owner);
  });
  spin_unlock(&rcq.lock);
  ts->count(kCntRecvConsumed);
  return Exec{0, len};
}

void Nic::engine_loop() {
  uint32_t idle = 0;
  long sleep_ns = kSleepMinNs;
  while (!stop_.load(std::memory_order_relaxed)) {
    if (progress()) {
      idle = 0;
      sleep_ns = kSleepMinNs;
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
  if (thread_.joinable() || closed_) return;
  stop_.store(false);
  thread_ = std::thread([this] { engine_loop(); });
}

void Nic::stop_thread() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  thread_.join();
  stop_.store(false);
}

void Nic::quiesce() {
  // Two completed passes that started after this call have seen every doorbell rung before it.
  const uint64_t start = passes_.load(std::memory_order_acquire);
  for (;;) {
    size_t w = 0;
    if (!thread_running()) w = progress();
    if (w == 0 && passes_.load(std::memory_order_acquire) >= start + 2) return;
    if (thread_running()) sched_yield();
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
    out.push_back(r);
  }
  return out;
}

}  // namespace emu
}  // namespace gicbench

extern "C" void gicbench_emu_progress(void* ctx) {
  static_cast<gicbench::emu::Nic*>(ctx)->progress();
}
