// Host-side producer and consumer of mlx5 queues in memory: the CPU's half of the one contract.
//
// SqProducer builds WQEs with cuda/mlx5.cuh, publishes the producer index to the doorbell record
// and stores the first 8 bytes of the last control segment to the doorbell word, in that order
// (rdma-core's post_send_db without BlueFlame). CqConsumer polls 64-byte CQEs by owner bit and
// returns the consumer index through the CQ doorbell record. Both are provider-agnostic: the emu
// engine and a real ConnectX read the same memory.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "mlx5.cuh"
#include "wait.hpp"

namespace gicbench {

namespace m5 = mlx5;

struct SqDesc {
  uint8_t* buf;
  uint32_t wqebb_cnt;  // power of two
  uint32_t* dbrec;     // the QP's doorbell record (2 words: [RCV_DBR], [SND_DBR])
  uint64_t* doorbell;  // the 8-byte doorbell word
  uint32_t qpn;
};

struct CqDesc {
  uint8_t* buf;
  uint32_t ncqe;     // power of two
  uint32_t* dbrec;   // consumer index record ([SET_CI])
};

// One RDMA write (or WRITE_WITH_IMM / fetch-add) as the submitter asks for it.
struct WriteOp {
  uint64_t raddr = 0;
  uint32_t rkey = 0;
  uint32_t length = 0;
  const void* inline_data = nullptr;  // non-null: payload copied into the WQE
  uint64_t laddr = 0;                 // pointer payload: local address + lkey
  uint32_t lkey = 0;
  bool signaled = false;
  bool fence = false;
  bool with_imm = false;
  uint32_t imm = 0;  // wire-order immediate
  // DC: the DCI's address vector for this WQE (nullptr on RC)
  const m5::AvFields* av = nullptr;
  bool compact_av = false;
};

class SqProducer {
 public:
  SqProducer() = default;
  // The producer index resumes from the doorbell record and the retired index is given by the
  // caller (attach_retired below reads it from the CQ in memory): the queue memory, not this
  // object, is the state, so loops can attach to a QP, post, drain and detach (mlx5 only ever
  // sees the low 16 bits of the index).
  // Attach assuming every WQE the doorbell record announces has completed (a fresh or drained
  // QP); loops that cannot assume that pass what attach_retired reads from the CQ.
  explicit SqProducer(const SqDesc& d) : SqProducer(d, posted_in_memory(d)) {}
  SqProducer(const SqDesc& d, uint32_t retired_lo16)
      : d_(d), ring_{d.buf, d.wqebb_cnt} {
    pi_ = rung_ = last_ = posted_in_memory(d);
    ci_ = pi_ - static_cast<uint16_t>(static_cast<uint16_t>(pi_) - retired_lo16);
  }

  // Low 16 bits of the producer index the NIC has been told about (the SQ doorbell record).
  static uint32_t posted_in_memory(const SqDesc& d) {
    return m5::bswap32(__atomic_load_n(&d.dbrec[m5::kSndDbr], __ATOMIC_ACQUIRE)) & 0xffff;
  }

  const SqDesc& desc() const { return d_; }
  uint32_t pi() const { return pi_; }                 // running producer index (WQEBBs)
  uint32_t retired() const { return ci_; }            // first WQEBB not yet retired by a CQE
  uint32_t outstanding() const { return pi_ - ci_; }  // WQEBBs posted and not retired
  uint32_t free_wqebbs() const { return d_.wqebb_cnt - outstanding(); }
  uint32_t posted_since_ring() const { return pi_ - rung_; }

  // Adopt WQEs another producer posted and rang on this QP (its doorbell record moved past ours),
  // as NVSHMEM's quiet reads the QP's posted counter: they are outstanding until their CQEs come.
  // Only for a QP this object is not posting to.
  void observe_posted() {
    if (pi_ != rung_) return;  // our own unrung WQEs: never mix producers
    const uint16_t ahead = static_cast<uint16_t>(posted_in_memory(d_) - static_cast<uint16_t>(pi_));
    pi_ += ahead;
    rung_ = pi_;
  }

  // WQEBBs of one RDMA write WQE (RC, or DC with its address vector), 0 when it cannot be built
  // (more than kDsMask = 63 16-byte segments: an inline payload too large).
  static uint32_t write_wqebbs(bool inline_payload, uint32_t length, bool dc, bool compact_av) {
    const uint32_t ds = write_ds(inline_payload, length, dc, compact_av);
    return ds > m5::kDsMask ? 0 : m5::ds_to_wqebbs(ds);
  }
  static uint32_t write_ds(bool inline_payload, uint32_t length, bool dc, bool compact_av) {
    if (inline_payload && length > (1u << 20)) return UINT32_MAX;  // no overflow below
    const uint32_t av = dc ? (compact_av ? m5::kDsAvCompact : m5::kDsAvFull) : 0;
    return m5::ds_rc_write(inline_payload, length) + av;
  }

  // Build one write WQE at the producer index (mlx5::build_rdma_write); returns its index, or
  // UINT32_MAX when the SQ is full (the caller must reclaim first). Nothing is visible to the NIC
  // until ring().
  uint32_t post_write(const WriteOp& op) {
    if (write_wqebbs(op.inline_data != nullptr, op.length, op.av != nullptr, op.compact_av) >
        free_wqebbs())
      return UINT32_MAX;
    const uint32_t idx = pi_;
    uint8_t flags = op.signaled ? m5::kCqUpdate : 0;
    if (op.fence) flags |= m5::kFence;
    finish(idx, m5::build_rdma_write(ring_, idx, d_.qpn, op.raddr, op.rkey, op.inline_data,
                                     op.length, op.lkey, op.laddr, flags, op.with_imm, op.imm,
                                     op.av, op.compact_av));
    return idx;
  }

  // Fetch-add of `add` on the 8-byte word at raddr; the old value lands at laddr (lkey).
  uint32_t post_fetch_add(uint64_t raddr, uint32_t rkey, uint64_t add, uint64_t laddr,
                          uint32_t lkey, bool signaled, const m5::AvFields* av = nullptr,
                          bool compact_av = false) {
    if (m5::ds_to_wqebbs(m5::ds_fetch_add(av != nullptr, compact_av)) > free_wqebbs())
      return UINT32_MAX;
    const uint32_t idx = pi_;
    finish(idx, m5::build_fetch_add(ring_, idx, d_.qpn, raddr, rkey, add, lkey, laddr,
                                    signaled ? m5::kCqUpdate : 0, av, compact_av));
    return idx;
  }

  // Announce every WQE built since the last ring: WQE stores, then the doorbell record, then the
  // 8-byte doorbell store (release ordering on each step, as post_send_db's barriers do).
  void ring() {
    if (pi_ == rung_) return;
    std::atomic_thread_fence(std::memory_order_release);
    __atomic_store_n(&d_.dbrec[m5::kSndDbr], m5::dbrec_value(pi_), __ATOMIC_RELEASE);
    __atomic_store_n(d_.doorbell, m5::doorbell_value(ring_.wqe(last_)), __ATOMIC_RELEASE);
    rung_ = pi_;
  }

  // A CQE reported `wqe_counter`: that WQE and every earlier one are retired. The WQE's size is
  // read from its control segment in the ring (it cannot be overwritten before it retires), so
  // WQEs another producer posted retire as exactly as ours.
  void retire(uint16_t wqe_counter) {
    // Rebuild the full index from 16 bits: it lies in [ci_, pi_).
    const uint32_t full = pi_ - static_cast<uint16_t>(static_cast<uint16_t>(pi_) - wqe_counter);
    ci_ = full + m5::ds_to_wqebbs(m5::get_ctrl_seg(ring_.wqe(full)).ds);
  }

 private:
  void finish(uint32_t idx, uint32_t bbs) {
    last_ = idx;
    pi_ += bbs;
  }

  SqDesc d_{};
  m5::SqRing ring_{nullptr, 0};
  uint32_t pi_ = 0, ci_ = 0, rung_ = 0, last_ = 0;
};

class CqConsumer {
 public:
  CqConsumer() = default;
  // Resumes from the consumer index in the CQ's doorbell record (see SqProducer).
  explicit CqConsumer(const CqDesc& d)
      : d_(d),
        ci_(m5::bswap32(__atomic_load_n(&d.dbrec[m5::kCqSetCi], __ATOMIC_ACQUIRE)) & 0xffffff) {}

  const CqDesc& desc() const { return d_; }
  uint32_t ci() const { return ci_; }

  // Take the next CQE if the NIC has written it: owner-bit check, then an acquire so the body is
  // read after op_own, then the consumer index goes back through the doorbell record.
  bool poll(m5::CqeView& out) {
    uint8_t* cqe = d_.buf + (ci_ & (d_.ncqe - 1)) * m5::kCqeBytes;
    const uint8_t op_own = __atomic_load_n(cqe + m5::kCqeOpOwn, __ATOMIC_ACQUIRE);
    if ((op_own >> 4) == m5::kCqeInvalid || (op_own & 1) != m5::cqe_owner_for(ci_, d_.ncqe))
      return false;
    out = m5::get_cqe(cqe);
    ++ci_;
    __atomic_store_n(&d_.dbrec[m5::kCqSetCi], m5::cq_ci_value(ci_), __ATOMIC_RELEASE);
    return true;
  }

 private:
  CqDesc d_{};
  uint32_t ci_ = 0;
};

// Where a QP's SQ stands when a loop attaches to it, read from queue memory as NVSHMEM's quiet
// reads its QP: posted work is the SQ doorbell record; retired work ends after the WQE named by
// the last CQE consumed on the QP's CQ (the slot just before the CQ's consumer index, which the
// NIC cannot have reused yet), whose control segment in the ring gives its size. A CQ never
// consumed has retired nothing since the QP was created at index 0. Returns nullptr and fills
// `retired` (low 16 bits) on success, else a reason: memory that cannot tell is never guessed.
inline const char* attach_retired(const SqDesc& sq, const CqDesc& cq, uint16_t& retired) {
  const uint16_t pi = static_cast<uint16_t>(SqProducer::posted_in_memory(sq));
  const uint32_t ci = m5::bswap32(__atomic_load_n(&cq.dbrec[m5::kCqSetCi], __ATOMIC_ACQUIRE)) &
                      0xffffff;
  if (ci == 0) {
    retired = 0;
  } else {
    const uint32_t prev = ci - 1;
    const uint8_t* cqe = cq.buf + (prev & (cq.ncqe - 1)) * m5::kCqeBytes;
    const uint8_t op_own = __atomic_load_n(cqe + m5::kCqeOpOwn, __ATOMIC_ACQUIRE);
    if ((op_own >> 4) == m5::kCqeInvalid || (op_own & 1) != m5::cqe_owner_for(prev, cq.ncqe))
      return "the last consumed CQE has been overwritten (a full CQ of unconsumed completions)";
    const m5::CqeView c = m5::get_cqe(cqe);
    if (c.qpn != sq.qpn) return "its CQ's last completion is another QP's (a shared CQ)";
    const m5::CtrlView ctrl = m5::get_ctrl_seg(m5::SqRing{sq.buf, sq.wqebb_cnt}.wqe(c.wqe_counter));
    if (ctrl.wqe_index != c.wqe_counter || ctrl.ds == 0)
      return "the SQ slot of the last completed WQE has been reused without reaping completions";
    retired = static_cast<uint16_t>(c.wqe_counter + m5::ds_to_wqebbs(ctrl.ds));
  }
  if (static_cast<uint16_t>(pi - retired) > sq.wqebb_cnt)
    return "its doorbell record is more than one SQ ahead of its completions";
  return nullptr;
}

inline bool cqe_is_error(const m5::CqeView& c) {
  return c.opcode == m5::kCqeReqErr || c.opcode == m5::kCqeRespErr;
}

}  // namespace gicbench
