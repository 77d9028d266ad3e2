// The CPU engine of the emulated NIC: doorbells, WQE checks, execution, CQEs, errors.
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

// Vendor syndromes as ConnectX reports them (e.g. open-mpi/ompi#1241 for 0x88).
constexpr uint8_t kVendorRemoteAccess = 0x88;
constexpr uint8_t kVendorRetryExceeded = 0x81;
constexpr uint8_t kVendorLocalProt = 0x52;

uint8_t vendor_syndrome(uint8_t synd) {
  switch (synd) {
    case m5::kSyndRemoteAccess: return kVendorRemoteAccess;
    case m5::kSyndTransportRetryExc: return kVendorRetryExceeded;
    case m5::kSyndLocalProt: return kVendorLocalProt;
    default: return 0;
  }
}

// Translate (key, addr, len) through the MR table of segment `s`; null on any violation
// (unknown key, bounds, access, another protection domain).
uint8_t* mr_ptr(const Segment& s, uint32_t key, uint64_t addr, uint64_t len, uint32_t need,
                uint32_t pd) {
  const uint32_t i = key_index(key);
  if (i == 0 || i >= ld_acq(&s.hdr()->n_mrs)) return nullptr;
  const MrEntry& m = s.mrs()[i];
  if (ld_acq(&m.key) != key || m.pd != pd) return nullptr;
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

// One local buffer of a gather or scatter list.
struct Sge {
  uint8_t* p;
  uint32_t len;
};

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
template <class Fill>
bool Nic::post_cqe_locked(const Segment& s, CqEntry& cq, uint32_t qpn, Fill fill) {
  if (cq.status != kCqOk) {
    ++cq.dropped;
    s.count(kCntCqeDropped);
    return false;
  }
  if (!(cq.flags & kCqOverrunIgnore)) {
    const uint32_t ci = be32_at(s, cq.dbrec_off + 4 * m5::kCqSetCi) & 0xffffff;
    if (((cq.pi - ci) & 0xffffff) >= cq.ncqe) {
      // mlx5: the CQ goes to CQ_OVERFLOW and an async error event is raised; CQEs are lost.
      st_rel(&cq.status, static_cast<uint32_t>(kCqOverflow));
      ++cq.dropped;
      s.count(kCntCqOverruns);
      s.count(kCntCqeDropped);
      s.push_error(kErrCqOverrun, qpn, ci, cq.pi & 0xffffff, cq.cqn, rank_);
      cq_fatal(s, cq);
      return false;
    }
  }
  const uint32_t slot = (cq.flags & kCqCollapsed) ? 0 : (cq.pi & (cq.ncqe - 1));
  uint8_t* b = s.at(cq.buf_off) + slot * m5::kCqeBytes;
  const uint8_t op_own = fill(b, static_cast<uint8_t>((cq.pi & cq.ncqe) ? 1 : 0));
  __atomic_store_n(b + m5::kCqeOpOwn, op_own, __ATOMIC_RELEASE);
  ++cq.pi;
  s.count(kCntCqes);
  return true;
}

template <class Fill>
bool Nic::post_cqe(const Segment& s, uint32_t cqn, uint32_t qpn, Fill fill) {
  CqEntry& cq = s.cqs()[num_index(cqn)];
  lock_cq(s, cq);
  const bool ok = post_cqe_locked(s, cq, qpn, fill);
  spin_unlock(&cq.lock);
  return ok;
}

void Nic::complete_error(QpEntry& qp, uint8_t synd, uint8_t wqe_opcode, uint16_t idx,
                         bool flush) {
  const uint8_t vendor = vendor_syndrome(synd);
  post_cqe(self_, qp.send_cqn, qp.qpn, [&](uint8_t* b, uint8_t owner) {
    return m5::fill_err_cqe(b, m5::kCqeReqErr, synd, vendor, qp.qpn, wqe_opcode, idx, owner);
  });
  if (!flush) self_.push_error(kErrCompletion, qp.qpn, synd, idx, qp.send_cqn, rank_);
}

// ---- doorbells -----------------------------------------------------------------------------------

size_t Nic::progress() {
  if (__atomic_exchange_n(&busy_, 1u, __ATOMIC_ACQUIRE)) return 0;
  if (closed_) {
    unlock_engine();
    return 0;
  }
  Header* h = self_.hdr();
  const uint32_t n = ld_acq(&h->n_qps);
  ++pass_;
  size_t work = 0;
  // The hot set: registers rung recently, and QPs whose announced work is not all executed.
  for (size_t k = 0; k < hot_.size();) {
    const uint32_t i = hot_[k];
    QpEng& e = eng_[i];
    const uint64_t db = ld_acq(self_.doorbell(i));
    if (db != last_db_[i]) {
      last_db_[i] = db;
      e.active = pass_;
      work += 1 + on_doorbell(i, db);
    } else if (e.pending) {
      const size_t w = service(i);
      if (w) e.active = pass_;
      work += w;
    }
    if (!e.pending && pass_ - e.active > kHotIdlePasses) {
      is_hot_[i] = 0;
      hot_[k] = hot_.back();
      hot_.pop_back();
      continue;
    }
    ++k;
  }
  // One window of the rotating sweep over every register.
  wrapped_ = false;
  const uint32_t window = n > 1 ? std::min(kSweepWindow, n - 1) : 0;
  for (uint32_t k = 0; k < window; ++k) {
    const uint32_t i = cursor_ < n ? cursor_ : 1;
    cursor_ = i + 1;
    if (cursor_ >= n) {
      cursor_ = 1;
      wrapped_ = true;
    }
    if (is_hot_[i]) continue;
    const uint64_t db = ld_acq(self_.doorbell(i));
    if (db == last_db_[i]) continue;
    last_db_[i] = db;
    ++local_[kCntColdWakeups];
    is_hot_[i] = 1;
    hot_.push_back(i);
    eng_[i].active = pass_;
    work += 1 + on_doorbell(i, db);
  }
  if (n <= 1) wrapped_ = true;
  if (work) {
    for (uint32_t c = 0; c < kNumCounters; ++c) {
      if (local_[c]) {
        add_rlx(&h->counters[c], local_[c]);
        local_[c] = 0;
      }
    }
  }
  if (wrapped_) sweeps_.fetch_add(1, std::memory_order_release);
  passes_.fetch_add(1, std::memory_order_release);
  unlock_engine();
  return work;
}

size_t Nic::on_doorbell(uint32_t i, uint64_t db) {
  QpEntry& qp = self_.qps()[i];
  QpEng& e = eng_[i];
  ++local_[kCntDoorbells];
  st_rlx(&qp.doorbells, qp.doorbells + 1);
  // Either convention puts a ctrl head in the register: opmod_idx_opcode, qpn_ds.
  const uint32_t w0 = m5::bswap32(static_cast<uint32_t>(db));
  const uint32_t w1 = m5::bswap32(static_cast<uint32_t>(db >> 32));
  const uint32_t idx = (w0 >> 8) & 0xffff;
  const uint32_t db_qpn = w1 >> 8;
  const bool next_index = (w0 & 0xff) == 0 && (w1 & m5::kDsMask) == 0;  // IBGDA / DOCA
  if (db_qpn != qp.qpn) {
    ++local_[kCntBadDoorbells];
    self_.push_error(kErrDoorbellQpn, qp.qpn, qp.qpn, db_qpn, 0, rank_);
    return 0;
  }
  const uint32_t state = ld_acq(&qp.state);
  if (state != kRts && state != kErr) {
    // Hardware ignores a doorbell of a QP that cannot send; emu says so (counter + record).
    ++local_[kCntNotRts];
    self_.push_error(kErrNotRts, qp.qpn, state, idx, 0, rank_);
    return 0;
  }
  if (((idx - e.ci) & 0xffff) > qp.wqebb_cnt) {
    ++local_[kCntBadDoorbells];
    self_.push_error(kErrBadDoorbell, qp.qpn, e.ci & 0xffff, idx, 0, rank_);
    return 0;
  }
  if (qp.flags & kQpNoDbr) {
    if (next_index) {
      e.target = idx;
      e.db_last_open = 0;
    } else {  // the end is known once the named WQE's ctrl is readable
      e.db_last = idx;
      e.db_last_open = 1;
    }
  } else {
    e.named = next_index ? idx : (idx + 1) & 0xffff;
    e.check_lag = 1;
    e.lag_counted = 0;
  }
  e.pending = 1;
  return service(i);
}

// A WQE is there to execute when its ctrl names this index and this QP and, with signatures on,
// its bytes XOR to 0xff (the ctrl's signature byte makes them so once the whole WQE is written).
bool Nic::wqe_ready(const QpEntry& qp, const m5::SqRing& sq, uint32_t ci,
                    const m5::CtrlView& c) const {
  if (c.wqe_index != (ci & 0xffff) || c.qpn != qp.qpn) return false;
  if (!(qp.flags & kQpWqeSig)) return true;
  uint8_t x = 0;
  for (uint32_t s = 0; s < c.ds; ++s) {
    const uint8_t* p = sq.seg(ci, s);
    for (uint32_t b = 0; b < m5::kSegBytes; ++b) x ^= p[b];
  }
  return x == 0xff;
}

size_t Nic::service(uint32_t i) {
  QpEntry& qp = self_.qps()[i];
  QpEng& e = eng_[i];
  const uint32_t state = ld_acq(&qp.state);
  if (state != kRts && state != kErr) {
    e.pending = 0;
    return 0;
  }
  const m5::SqRing sq{self_.at(qp.sq_off), qp.wqebb_cnt};
  uint32_t ci = e.ci;
  uint32_t avail;
  if (qp.flags & kQpNoDbr) {
    if (e.db_last_open) {
      const m5::CtrlView c = m5::get_ctrl_seg(sq.wqe(e.db_last));
      if (wqe_ready(qp, sq, e.db_last, c)) {
        e.target = (e.db_last + m5::ds_to_wqebbs(c.ds)) & 0xffff;
        e.db_last_open = 0;
      }
    }
    avail = ((e.db_last_open ? e.db_last : e.target) - ci) & 0xffff;
  } else {
    const uint32_t pi = be32_at(self_, qp.dbrec_off + 4 * m5::kSndDbr) & 0xffff;
    avail = (pi - ci) & 0xffff;
    if (avail > qp.wqebb_cnt) {  // the record names more than the SQ holds
      if (e.bad_at != pi + 1) {
        e.bad_at = pi + 1;
        ++local_[kCntBadDoorbells];
        self_.push_error(kErrBadDbrec, qp.qpn, ci & 0xffff, pi, 0, rank_);
      }
      return 0;
    }
    if (e.check_lag && !e.lag_counted) {
      const uint32_t need = (e.named - ci) & 0xffff;
      if (need <= qp.wqebb_cnt && need > avail) {
        e.lag_counted = 1;
        ++local_[kCntDbrecLag];
        st_rlx(&qp.dbrec_lag, qp.dbrec_lag + 1);
      }
    }
  }
  size_t handled = 0;
  uint64_t wqes = 0;
  bool blocked = false;
  while (avail) {
    const m5::CtrlView c = m5::get_ctrl_seg(sq.wqe(ci));
    const uint32_t nbb = m5::ds_to_wqebbs(c.ds ? c.ds : 1);
    if (!wqe_ready(qp, sq, ci, c) || nbb > avail) {
      // The slot does not hold this WQE yet (the doorbell or record overtook the WQE stores), or
      // the WQE runs past the published index. Not executed; reported once; re-checked next pass.
      if (e.stale_at != ci + 1) {
        e.stale_at = ci + 1;
        ++local_[kCntStaleWqes];
        st_rlx(&qp.stale, qp.stale + 1);
        self_.push_error(kErrStaleWqe, qp.qpn, ci & 0xffff, c.wqe_index, 0, rank_);
      }
      blocked = true;
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
          post_cqe(self_, qp.send_cqn, qp.qpn, [&](uint8_t* b, uint8_t owner) {
            return m5::fill_req_cqe(b, qp.qpn, c.opcode, idx, r.bytes, 0, owner);
          });
        }
      }
    }
    ++handled;
    ci += nbb;
    avail -= nbb;
  }
  local_[kCntWqes] += wqes;
  st_rlx(&qp.wqes, qp.wqes + wqes);
  e.ci = ci;
  st_rlx(&qp.sq_ci, ci);
  if (e.check_lag) {
    const uint32_t need = (e.named - ci) & 0xffff;
    if (need == 0 || need > qp.wqebb_cnt) e.check_lag = 0;  // executed through what was named
  }
  e.pending = blocked || e.check_lag || e.db_last_open;
  return handled;
}

// ---- WQE execution -------------------------------------------------------------------------------

Nic::Exec Nic::execute(QpEntry& qp, const m5::SqRing& sq, uint32_t ci, const m5::CtrlView& c) {
  Exec bad;
  if (c.ds == 0 || m5::ds_to_wqebbs(c.ds) > qp.wqebb_cnt) {
    bad.synd = m5::kSyndLocalQpOp;
    return bad;
  }
  if (c.opcode == m5::kOpNop) return Exec{};
  const uint8_t op = c.opcode;
  const bool write = op == m5::kOpRdmaWrite || op == m5::kOpRdmaWriteImm;
  const bool send = op == m5::kOpSend || op == m5::kOpSendImm;
  const bool read = op == m5::kOpRdmaRead;
  const bool atomic = op == m5::kOpAtomicFa || op == m5::kOpAtomicCs;
  if (!write && !send && !read && !atomic) {
    bad.synd = m5::kSyndLocalQpOp;  // opcodes emu does not implement (UMR, LSO, TAG, ...)
    return bad;
  }
  // ---- the responder: RC peer QP, or a DCT named by the address vector -------------------------
  uint32_t seg = 1;
  const Segment* ts = nullptr;
  RqState* rq = nullptr;
  uint32_t resp_num = 0, resp_pd = 0;
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
    resp_pd = d.pd;
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
    resp_pd = r.pd;
  }
  m5::RaddrView ra{0, 0};
  if (!send) {
    if (c.ds < seg + 1) {
      bad.synd = m5::kSyndLocalQpOp;
      return bad;
    }
    ra = m5::get_raddr_seg(sq.seg(ci, seg++));
  }

  if (atomic) {
    if (c.ds < seg + 2) {
      bad.synd = m5::kSyndLocalQpOp;
      return bad;
    }
    const m5::AtomicView at = m5::get_atomic_seg(sq.seg(ci, seg++));
    const m5::DataView d = m5::get_data_seg(sq.seg(ci, seg));
    if (d.byte_count != 8) {
      bad.synd = m5::kSyndLocalLength;
      return bad;
    }
    uint8_t* res = mr_ptr(self_, d.lkey, d.addr, 8, kLocalWrite, qp.pd);
    if (!res) {
      bad.synd = m5::kSyndLocalProt;
      return bad;
    }
    if (ra.raddr & 7) {
      bad.synd = m5::kSyndRemoteInvalReq;  // misaligned atomic: Invalid Request NAK
      return bad;
    }
    uint8_t* tp = mr_ptr(*ts, ra.rkey, ra.raddr, 8, kRemoteAtomic, resp_pd);
    if (!tp) {
      bad.synd = m5::kSyndRemoteAccess;
      return bad;
    }
    // Host endianness (ConnectX's atomic_req_8B_endianness_mode = host, set by mlx5_core).
    uint64_t* word = reinterpret_cast<uint64_t*>(tp);
    uint64_t old;
    if (op == m5::kOpAtomicFa) {
      old = __atomic_fetch_add(word, at.swap_add, __ATOMIC_ACQ_REL);
    } else {  // compare and swap: swap_add is the swap value, compare the expected one
      old = at.compare;
      __atomic_compare_exchange_n(word, &old, at.swap_add, false, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE);
    }
    std::memcpy(res, &old, 8);
    return Exec{0, 8};
  }

  // ---- data segments: one inline segment, or a list of pointer segments (gather / scatter) -----
  if (seg >= c.ds) {
    if (!send || seg > c.ds) {
      bad.synd = m5::kSyndLocalQpOp;
      return bad;
    }
  }
  Sge sge[m5::kDsMask];
  uint32_t nsge = 0;
  uint64_t total = 0;
  uint8_t tmp[m5::kDsMask * m5::kSegBytes];
  const bool inl = seg < c.ds && m5::is_inline(sq.seg(ci, seg));
  if (inl) {
    if (read) {
      bad.synd = m5::kSyndLocalQpOp;  // a READ scatters into memory: no inline form
      return bad;
    }
    const uint32_t len = m5::get_be32(sq.seg(ci, seg)) & ~m5::kInlineFlag;
    if (seg + m5::inline_seg_ds(len) > c.ds || (qp.max_inline && len > qp.max_inline)) {
      bad.synd = m5::kSyndLocalLength;
      return bad;
    }
    const uint8_t* p = sq.seg(ci, seg) + 4;
    if (p + len <= sq.buf + sq.bytes()) {
      sge[0] = Sge{const_cast<uint8_t*>(p), len};
    } else {  // the payload wraps at the SQ end
      m5::get_inline_payload(sq, ci, seg, tmp, len);
      sge[0] = Sge{tmp, len};
    }
    nsge = 1;
    total = len;
  } else {
    const uint32_t need = read ? kLocalWrite : 0;
    for (; seg < c.ds; ++seg) {
      const m5::DataView d = m5::get_data_seg(sq.seg(ci, seg));
      if (d.byte_count == 0) continue;
      uint8_t* p = mr_ptr(self_, d.lkey, d.addr, d.byte_count, need, qp.pd);
      if (!p) {
        bad.synd = m5::kSyndLocalProt;
        return bad;
      }
      sge[nsge++] = Sge{p, d.byte_count};
      total += d.byte_count;
    }
  }
  if (total > 0x80000000ull) {
    bad.synd = m5::kSyndLocalLength;  // 2 GiB: the largest message
    return bad;
  }
  const uint32_t len = static_cast<uint32_t>(total);

  if (read || write) {
    uint8_t* rp = nullptr;
    if (len) {
      rp = mr_ptr(*ts, ra.rkey, ra.raddr, len, read ? kRemoteRead : kRemoteWrite, resp_pd);
      if (!rp) {
        bad.synd = m5::kSyndRemoteAccess;
        return bad;
      }
    }
    if (read) {
      for (uint32_t k = 0, off = 0; k < nsge; off += sge[k].len, ++k)
        std::memcpy(sge[k].p, rp + off, sge[k].len);
      return Exec{0, len};
    }
    if (op == m5::kOpRdmaWrite) {
      for (uint32_t k = 0, off = 0; k < nsge; off += sge[k].len, ++k)
        copy_payload(rp + off, sge[k].p, sge[k].len);
      return Exec{0, len};
    }
    // WRITE_WITH_IMM: data at raddr; the receive it consumes carries no scatter list.
  }

  // ---- a receive is consumed at the responder (WRITE_IMM, SEND, SEND_IMM) ----------------------
  if (rq->wqe_cnt == 0) {
    ++local_[kCntRnr];
    bad.synd = m5::kSyndRnrRetryExc;
    return bad;
  }
  CqEntry& rcq = ts->cqs()[num_index(rq->cqn)];
  lock_cq(*ts, rcq);
  const uint32_t rpi = be32_at(*ts, rq->dbrec_off) & 0xffff;
  if (((rpi - rq->ci) & 0xffff) == 0) {
    spin_unlock(&rcq.lock);
    // No receive posted: the responder NAKs with RNR; emu behaves as rnr_retry = 0.
    ++local_[kCntRnr];
    bad.synd = m5::kSyndRnrRetryExc;
    return bad;
  }
  const uint16_t ridx = static_cast<uint16_t>(rq->ci);
  uint8_t* dst = nullptr;
  uint8_t resp_synd = 0;
  if (write) {
    dst = len ? mr_ptr(*ts, ra.rkey, ra.raddr, len, kRemoteWrite, resp_pd) : nullptr;
  } else {  // SEND: the receive's data segment says where the message goes
    const uint8_t* rwqe = ts->at(rq->buf_off) + (rq->ci & (rq->wqe_cnt - 1)) * 16;
    const m5::DataView rd = m5::get_data_seg(rwqe);
    if (len > rd.byte_count) {
      resp_synd = m5::kSyndLocalLength;  // the message does not fit the receive buffer
    } else if (len) {
      dst = mr_ptr(*ts, rd.lkey, rd.addr, len, kLocalWrite, resp_pd);
      if (!dst) resp_synd = m5::kSyndLocalProt;
    }
  }
  ++rq->ci;
  if (resp_synd) {
    // The responder completes the receive in error and NAKs: the requester sees a remote error.
    post_cqe_locked(*ts, rcq, resp_num, [&](uint8_t* b, uint8_t owner) {
      return m5::fill_err_cqe(b, m5::kCqeRespErr, resp_synd, vendor_syndrome(resp_synd),
                              resp_num, 0, ridx, owner);
    });
    spin_unlock(&rcq.lock);
    bad.synd = resp_synd == m5::kSyndLocalLength ? m5::kSyndRemoteInvalReq : m5::kSyndRemoteOp;
    return bad;
  }
  for (uint32_t k = 0, off = 0; k < nsge; off += sge[k].len, ++k)
    copy_payload(dst + off, sge[k].p, sge[k].len);
  const uint8_t cqe_op = op == m5::kOpRdmaWriteImm ? m5::kCqeRespWrImm
                         : op == m5::kOpSendImm    ? m5::kCqeRespSendImm
                                                   : m5::kCqeRespSend;
  const uint32_t imm = op == m5::kOpSend ? 0 : c.imm;
  post_cqe_locked(*ts, rcq, resp_num, [&](uint8_t* b, uint8_t owner) {
    return m5::fill_resp_cqe(b, cqe_op, resp_num, ridx, len, imm, 0, owner);
  });
  spin_unlock(&rcq.lock);
  ts->count(kCntRecvConsumed);
  return Exec{0, len};
}

// ---- the engine thread ---------------------------------------------------------------------------

void Nic::engine_loop() {
  uint32_t idle = 0;
  long sleep_ns = kSleepMinNs;
  bool busy_sweep = false;  // work seen since the current sweep began
  while (!stop_.load(std::memory_order_relaxed)) {
    if (progress()) {
      idle = 0;
      sleep_ns = kSleepMinNs;
      busy_sweep = true;
      continue;
    }
    // Back off only after a whole sweep found nothing: a quiet QP's doorbell is found by the
    // sweep, which must not stall in a sleep halfway.
    if (!wrapped_) {
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
  // Two completed sweeps that started after this call have read every doorbell register rung
  // before it (and every hot QP once per pass).
  const uint64_t start = sweeps_.load(std::memory_order_acquire);
  for (;;) {
    size_t w = 0;
    if (!thread_running()) w = progress();
    if (w == 0 && sweeps_.load(std::memory_order_acquire) >= start + 2) return;
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
