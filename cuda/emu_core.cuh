// The engine core of the emulated NIC: doorbell processing, the SQ state machine, WQE checks and
// execution, CQE writing and the errors and syndromes it reports.
//
// __host__ __device__ and templated on an environment `Env` that supplies the memory operations
// (acquire loads, release stores, atomics, copies) and the object lookups (the responder of a
// WQE, memory-region translation, receive queues, counters, error records). The CPU engine
// (native/src/emu_engine.cpp) instantiates it over POSIX shared memory with GCC __atomic builtins;
// a CUDA engine instantiates it over GPU-resident queues with cuda::atomic_ref, so both engines
// share one semantics and one conformance suite.
//
// What an Env provides (all callable from the code that instantiates the core):
//   uint32_t ld_acq32(const uint32_t*)          acquire load (doorbell records)
//   uint64_t fetch_add64(uint64_t*, uint64_t)   atomic, returns the old value
//   uint64_t cas64(uint64_t*, uint64_t expected, uint64_t desired)   returns the old value
//   uint32_t cas32(uint32_t*, uint32_t expected, uint32_t desired)   returns the old value
//   void copy(uint8_t* dst, const uint8_t* src, uint32_t n)
//   uint32_t qp_state()                          state of the QP being served (QpState values)
//   void qp_to_error()                           the QP goes to ERR (release store)
//   typename Env::Resp                           a resolved responder
//   bool responder(const uint8_t* av, Resp&)     RC peer (av null) or the DCT the AV names; false
//                                                when unreachable (counts DC key violations)
//   uint8_t* local(key, addr, len, need, pd)     this QP's MR translation, null on a violation
//   uint8_t* remote(const Resp&, key, addr, len, need)  at the responder, in its pd
//   bool recv_begin(const Resp&, RecvSlot&)      lock the receive CQ and take the next receive;
//                                                false (unlocked) when none is posted
//   void recv_end(const Resp&, const RecvSlot&, uint8_t cqe_opcode, uint8_t synd, uint32_t len,
//                 uint32_t imm)                  write the responder CQE (or error CQE), unlock
//   void req_cqe(uint8_t wqe_opcode, uint16_t idx, uint32_t bytes)     requester CQE
//   void err_cqe(uint8_t synd, uint8_t vendor, uint8_t wqe_opcode, uint16_t idx, bool flush)
//   void event(Event, uint32_t expected, uint32_t found)  counters and error records
//
// GPI queues (docs/gpi.md): gpi_serve() consumes a ring of gicbench's 64-byte descriptors
// (cuda/gpi.cuh) through its own environment `GEnv`, which supplies:
//   uint64_t ld_acq64(const uint64_t*)  void st_rel64(uint64_t*, uint64_t)
//   uint64_t fetch_add64(uint64_t*, uint64_t)  uint64_t cas64(...)  uint32_t cas32(...)
//   void copy(uint8_t*, const uint8_t*, uint32_t)
//   uint32_t self_rank()  bool reachable(uint32_t rank)
//   bool window(uint32_t handle, uint32_t rank, GpiWindow&)   the queue's window table
//   uint8_t* local(key, addr, len)              this rank's MR translation, the queue's pd
//   uint8_t* remote(rank, key, addr, len, need) rank's MR translation, the queue's pd
//   void gpi_event(GpiEvent, uint64_t a, uint64_t b, uint64_t c)   counters and error records
#pragma once

#include "gpi.cuh"
#include "mlx5.cuh"

namespace gicbench {
namespace emu_core {

namespace m5 = mlx5;

// QP states (mlx5 / verbs numbering) and access bits, as the emu layout stores them.
enum : uint32_t { kReset = 0, kInit = 1, kRtr = 2, kRts = 3, kErr = 6 };
enum : uint32_t { kLocalWrite = 1, kRemoteWrite = 2, kRemoteRead = 4, kRemoteAtomic = 8 };
// QP creation flags: no send doorbell record; check the mlx5 WQE signature.
enum : uint32_t { kQpNoDbr = 1, kQpWqeSig = 2 };
// CQ creation flags (mlx5_ifc.h cqc.cc, cqc.oi).
enum : uint32_t { kCqCollapsed = 1, kCqOverrunIgnore = 2 };

// What the core reports through Env::event (each a counter; most also an error record).
enum Event : uint32_t {
  kEvDoorbell,       // a doorbell register changed (not a record)
  kEvWrongQpn,       // the value carries another QPN: expected = QPN, found = its QPN
  kEvNotRts,         // QP cannot send: expected = state, found = index named
  kEvOutOfWindow,    // doorbell names more than the SQ holds: expected = ci, found = index
  kEvBadRecord,      // record names more than the SQ holds: expected = ci, found = record
  kEvDbrecLag,       // the doorbell named WQEs the record had not published (counter only)
  kEvStale,          // the slot does not hold the expected WQE: expected = ci, found = its index
  kEvFlushed,        // a WQE completed with WR_FLUSH
  kEvExecuted,       // a WQE executed: expected = bytes, found = 1 if it moved data (a message)
  kEvError,          // a WQE failed: expected = syndrome, found = index
  kEvRnr,            // no receive posted at the responder
};

// Vendor syndromes as ConnectX reports them (e.g. open-mpi/ompi#1241 for 0x88).
GB_HD uint8_t vendor_syndrome(uint8_t synd) {
  switch (synd) {
    case m5::kSyndRemoteAccess: return 0x88;
    case m5::kSyndTransportRetryExc: return 0x81;
    case m5::kSyndLocalProt: return 0x52;
    default: return 0;
  }
}

// ---- doorbells -----------------------------------------------------------------------------------
struct DoorbellView {
  uint32_t idx;      // WQE index (rdma-core: the last WQE; IBGDA/DOCA: the next producer index)
  uint32_t qpn;
  bool next_index;   // opcode 0 and ds 0: IBGDA's / DOCA GPUNetIO's convention
};

// Both conventions put a ctrl head in the register: opmod_idx_opcode, qpn_ds (big-endian).
GB_HD DoorbellView decode_doorbell(uint64_t db) {
  const uint32_t w0 = m5::bswap32(static_cast<uint32_t>(db));
  const uint32_t w1 = m5::bswap32(static_cast<uint32_t>(db >> 32));
  return DoorbellView{(w0 >> 8) & 0xffff, w1 >> 8, (w0 & 0xff) == 0 && (w1 & m5::kDsMask) == 0};
}

// The engine's view of one send queue: fixed at creation.
struct SqParams {
  m5::SqRing ring;
  uint32_t qpn;
  uint32_t flags;       // kQpNoDbr, kQpWqeSig
  uint32_t max_inline;  // 0 = what ds allows
  uint32_t pd;
  bool dci;
  const uint32_t* snd_dbrec;  // &dbrec[MLX5_SND_DBR] (unused when DBR-less)
};

// The engine's state of one send queue (only its engine touches it).
struct SqState {
  uint32_t ci = 0;        // next WQEBB to execute (running; the wire sees 16 bits)
  uint32_t target = 0;    // DBR-less: producer index the doorbells announced
  uint32_t db_last = 0;   // DBR-less, rdma-core convention: the WQE the doorbell named
  uint32_t named = 0;     // end of the work the last doorbell named (lag detection)
  uint32_t stale_at = 0;  // ci + 1 of the slot already reported stale
  uint32_t bad_at = 0;    // record value + 1 already reported out of window
  uint8_t pending = 0;    // announced work not executed yet: serve again next pass
  uint8_t db_last_open = 0;
  uint8_t check_lag = 0;
  uint8_t lag_counted = 0;
  // The CQE of the last WQE executed, not written until the next published WQE has been read
  // (serve, below): kept across passes while that WQE is published but not yet executed.
  uint8_t held = 0;
  uint8_t held_op = 0;
  uint16_t held_idx = 0;
  uint32_t held_bytes = 0;
};

// A WQE is there to execute when its ctrl names this index and this QP and, with signatures on,
// its bytes XOR to 0xff (rdma-core's calc_sig sets the ctrl's signature byte so).
GB_HD bool wqe_ready(const SqParams& q, uint32_t ci, const m5::CtrlView& c) {
  if (c.wqe_index != (ci & 0xffff) || c.qpn != q.qpn) return false;
  if (!(q.flags & kQpWqeSig)) return true;
  uint8_t x = 0;
  for (uint32_t s = 0; s < c.ds; ++s) {
    const uint8_t* p = q.ring.seg(ci, s);
    for (uint32_t b = 0; b < m5::kSegBytes; ++b) x ^= p[b];
  }
  return x == 0xff;
}

struct Exec {
  uint8_t synd;  // 0 = success
  uint32_t bytes;
};

struct RecvSlot {
  const uint8_t* wqe;  // the receive's 16-byte data segment
  uint16_t index;
};

// ---- extended (masked) atomics -------------------------------------------------------------------
// Masked fetch-add's sum, field by field: a set bit of `boundary` is the most significant bit of
// its field and its carry is dropped (the MFetchAdd definition of the masked-atomics verbs,
// Linux's "IB/core: Add support for masked atomic operations"); boundary 0 is a plain add, all
// ones XOR. The non-boundary bits add with carries; each boundary bit is then its two operand
// bits and the carry into it, with no carry out.
GB_HD uint64_t masked_add(uint64_t old, uint64_t add, uint64_t boundary) {
  return ((old & ~boundary) + (add & ~boundary)) ^ ((old ^ add) & boundary);
}

// The value a masked atomic leaves in a word that held `old`. Compare-and-swap: when the bits of
// compare_mask equal compare's, the bits of swap_mask take swap's; otherwise nothing changes.
GB_HD uint64_t masked_result(uint8_t opcode, const m5::MaskedAtomicView& v, uint64_t old) {
  if (opcode == m5::kOpAtomicMaskedFa) return masked_add(old, v.swap_add, v.swap_add_mask);
  if ((old ^ v.compare) & v.compare_mask) return old;
  return (old & ~v.swap_add_mask) | (v.swap_add & v.swap_add_mask);
}

// An extended atomic (MLX5_OPCODE_ATOMIC_MASKED_FA / _CS) whose raddr segment is read: segments
// from `seg` are the extended atomic segment(s) and the data segment of the old value. The
// operands are big-endian in the WQE; the target word is updated in host endianness, as the
// standard 8-byte atomics are (atomic_req_8B_endianness_mode = host) and as NVSHMEM's and
// DeepEP's IBGDA signals need (receivers read those counters natively). The update is a
// compare-and-swap loop, so it is atomic against every other atomic of every engine.
template <class Env>
GB_HD Exec execute_masked(Env& env, const SqParams& q, uint32_t ci, const m5::CtrlView& c,
                          uint32_t seg, const typename Env::Resp& resp, const m5::RaddrView& ra) {
  const m5::SqRing& sq = q.ring;
  const uint32_t size = m5::ext_atomic_size(c.opmod);
  if (!size) return Exec{m5::kSyndLocalQpOp, 0};  // not the 4- or 8-byte extended form
  const uint32_t nseg = m5::masked_atomic_segs(c.opcode, size);
  if (c.ds < seg + nseg + 1) return Exec{m5::kSyndLocalQpOp, 0};
  const m5::MaskedAtomicView v =
      m5::get_masked_atomic(sq.seg(ci, seg), sq.seg(ci, seg + 1), c.opcode, size);
  const m5::DataView d = m5::get_data_seg(sq.seg(ci, seg + nseg));
  if (d.byte_count != size) return Exec{m5::kSyndLocalLength, 0};
  uint8_t* res = env.local(d.lkey, d.addr, size, kLocalWrite, q.pd);
  if (!res) return Exec{m5::kSyndLocalProt, 0};
  if (ra.raddr & (size - 1)) return Exec{m5::kSyndRemoteInvalReq, 0};  // misaligned
  uint8_t* tp = env.remote(resp, ra.rkey, ra.raddr, size, kRemoteAtomic);
  if (!tp) return Exec{m5::kSyndRemoteAccess, 0};
  if (size == 8) {
    uint64_t* word = reinterpret_cast<uint64_t*>(tp);
    uint64_t old = 0;  // a guess: the first swap succeeds when the word holds it
    for (;;) {
      const uint64_t seen = env.cas64(word, old, masked_result(c.opcode, v, old));
      if (seen == old) break;
      old = seen;
    }
    env.copy(res, reinterpret_cast<const uint8_t*>(&old), 8);
  } else {
    uint32_t* word = reinterpret_cast<uint32_t*>(tp);
    uint32_t old = 0;
    for (;;) {
      const uint32_t want = static_cast<uint32_t>(masked_result(c.opcode, v, old));
      const uint32_t seen = env.cas32(word, old, want);
      if (seen == old) break;
      old = seen;
    }
    env.copy(res, reinterpret_cast<const uint8_t*>(&old), 4);
  }
  return Exec{0, size};
}

// ---- WQE execution -------------------------------------------------------------------------------
template <class Env>
GB_HD Exec execute(Env& env, const SqParams& q, uint32_t ci, const m5::CtrlView& c) {
  const m5::SqRing& sq = q.ring;
  Exec bad{0, 0};
  if (c.ds == 0 || m5::ds_to_wqebbs(c.ds) > sq.wqebb_cnt) return Exec{m5::kSyndLocalQpOp, 0};
  if (c.opcode == m5::kOpNop) return Exec{0, 0};
  const uint8_t op = c.opcode;
  const bool write = op == m5::kOpRdmaWrite || op == m5::kOpRdmaWriteImm;
  const bool send = op == m5::kOpSend || op == m5::kOpSendImm;
  const bool read = op == m5::kOpRdmaRead;
  const bool atomic = op == m5::kOpAtomicFa || op == m5::kOpAtomicCs;
  const bool masked = op == m5::kOpAtomicMaskedFa || op == m5::kOpAtomicMaskedCs;
  if (!write && !send && !read && !atomic && !masked) return Exec{m5::kSyndLocalQpOp, 0};

  // The responder: the RC peer, or the DCT named by the address vector.
  uint32_t seg = 1;
  const uint8_t* av = nullptr;
  if (q.dci) {
    av = sq.seg(ci, seg);
    seg += m5::get_av(av).ext ? m5::kDsAvFull : m5::kDsAvCompact;
  }
  typename Env::Resp resp;
  if (!env.responder(av, resp)) return Exec{m5::kSyndTransportRetryExc, 0};

  m5::RaddrView ra{0, 0};
  if (!send) {
    if (c.ds < seg + 1) return Exec{m5::kSyndLocalQpOp, 0};
    ra = m5::get_raddr_seg(sq.seg(ci, seg++));
  }
  if (masked) return execute_masked(env, q, ci, c, seg, resp, ra);

  if (atomic) {
    if (c.ds < seg + 2) return Exec{m5::kSyndLocalQpOp, 0};
    const m5::AtomicView at = m5::get_atomic_seg(sq.seg(ci, seg++));
    const m5::DataView d = m5::get_data_seg(sq.seg(ci, seg));
    if (d.byte_count != 8) return Exec{m5::kSyndLocalLength, 0};
    uint8_t* res = env.local(d.lkey, d.addr, 8, kLocalWrite, q.pd);
    if (!res) return Exec{m5::kSyndLocalProt, 0};
    if (ra.raddr & 7) return Exec{m5::kSyndRemoteInvalReq, 0};  // misaligned: Invalid Request
    uint8_t* tp = env.remote(resp, ra.rkey, ra.raddr, 8, kRemoteAtomic);
    if (!tp) return Exec{m5::kSyndRemoteAccess, 0};
    // Host endianness (ConnectX's atomic_req_8B_endianness_mode = host, set by mlx5_core).
    uint64_t* word = reinterpret_cast<uint64_t*>(tp);
    const uint64_t old = op == m5::kOpAtomicFa ? env.fetch_add64(word, at.swap_add)
                                               : env.cas64(word, at.compare, at.swap_add);
    env.copy(res, reinterpret_cast<const uint8_t*>(&old), 8);
    return Exec{0, 8};
  }

  // Data segments: one inline segment, or pointer segments (a gather or scatter list).
  if (seg > c.ds || (seg == c.ds && !send)) return Exec{m5::kSyndLocalQpOp, 0};
  uint8_t* sge_p[m5::kDsMask];
  uint32_t sge_n[m5::kDsMask];
  uint32_t nsge = 0;
  uint64_t total = 0;
  uint8_t tmp[m5::kDsMask * m5::kSegBytes];
  if (seg < c.ds && m5::is_inline(sq.seg(ci, seg))) {
    if (read) return Exec{m5::kSyndLocalQpOp, 0};  // a READ scatters into memory
    const uint32_t len = m5::get_be32(sq.seg(ci, seg)) & ~m5::kInlineFlag;
    if (seg + m5::inline_seg_ds(len) > c.ds || (q.max_inline && len > q.max_inline))
      return Exec{m5::kSyndLocalLength, 0};
    uint8_t* p = sq.seg(ci, seg) + 4;
    if (p + len <= sq.buf + sq.bytes()) {
      sge_p[0] = p;
    } else {  // the payload wraps at the SQ end
      m5::get_inline_payload(sq, ci, seg, tmp, len);
      sge_p[0] = tmp;
    }
    sge_n[0] = len;
    nsge = 1;
    total = len;
  } else {
    for (; seg < c.ds; ++seg) {
      const m5::DataView d = m5::get_data_seg(sq.seg(ci, seg));
      if (d.byte_count == 0) continue;
      uint8_t* p = env.local(d.lkey, d.addr, d.byte_count, read ? uint32_t{kLocalWrite} : 0u, q.pd);
      if (!p) return Exec{m5::kSyndLocalProt, 0};
      sge_p[nsge] = p;
      sge_n[nsge++] = d.byte_count;
      total += d.byte_count;
    }
  }
  if (total > 0x80000000ull) return Exec{m5::kSyndLocalLength, 0};  // 2 GiB: the largest message
  const uint32_t len = static_cast<uint32_t>(total);

  if (read || write) {
    uint8_t* rp = nullptr;
    if (len) {
      rp = env.remote(resp, ra.rkey, ra.raddr, len, read ? kRemoteRead : kRemoteWrite);
      if (!rp) return Exec{m5::kSyndRemoteAccess, 0};
    }
    if (read || op == m5::kOpRdmaWrite) {
      for (uint32_t k = 0, off = 0; k < nsge; off += sge_n[k], ++k) {
        if (read) {
          env.copy(sge_p[k], rp + off, sge_n[k]);
        } else {
          env.copy(rp + off, sge_p[k], sge_n[k]);
        }
      }
      return Exec{0, len};
    }
  }

  // A receive is consumed at the responder (WRITE_IMM, SEND, SEND_IMM).
  RecvSlot slot{nullptr, 0};
  if (!env.recv_begin(resp, slot)) {
    env.event(kEvRnr, 0, 0);
    return Exec{m5::kSyndRnrRetryExc, 0};  // the responder NAKs: emu behaves as rnr_retry = 0
  }
  uint8_t* dst = nullptr;
  uint8_t resp_synd = 0;
  if (write) {
    dst = len ? env.remote(resp, ra.rkey, ra.raddr, len, kRemoteWrite) : nullptr;
  } else {  // SEND: the receive's data segment says where the message goes
    const m5::DataView rd = m5::get_data_seg(slot.wqe);
    if (len > rd.byte_count) {
      resp_synd = m5::kSyndLocalLength;
    } else if (len) {
      dst = env.remote(resp, rd.lkey, rd.addr, len, kLocalWrite);
      if (!dst) resp_synd = m5::kSyndLocalProt;
    }
  }
  if (resp_synd) {
    // The responder completes the receive in error and NAKs: the requester sees a remote error.
    env.recv_end(resp, slot, m5::kCqeRespErr, resp_synd, 0, 0);
    bad.synd = resp_synd == m5::kSyndLocalLength ? m5::kSyndRemoteInvalReq : m5::kSyndRemoteOp;
    return bad;
  }
  for (uint32_t k = 0, off = 0; k < nsge; off += sge_n[k], ++k) env.copy(dst + off, sge_p[k], sge_n[k]);
  const uint8_t cqe_op = op == m5::kOpRdmaWriteImm ? m5::kCqeRespWrImm
                         : op == m5::kOpSendImm    ? m5::kCqeRespSendImm
                                                   : m5::kCqeRespSend;
  env.recv_end(resp, slot, cqe_op, 0, len, op == m5::kOpSend ? 0 : c.imm);
  return Exec{0, len};
}

// ---- doorbell processing -------------------------------------------------------------------------

// Admission of the WQE at `ci` (`avail` WQEBBs announced from it): an Env with
// `bool admit(const SqParams&, uint32_t ci, uint32_t avail)` may hold it back (the NIC model's
// timeline: native/src/emu_model.cpp); every other Env executes at once.
template <class Env>
GB_HD auto admit_wqe(Env& env, const SqParams& q, uint32_t ci, uint32_t avail, int)
    -> decltype(env.admit(q, ci, avail)) {
  return env.admit(q, ci, avail);
}
template <class Env>
GB_HD bool admit_wqe(Env&, const SqParams&, uint32_t, uint32_t, long) {
  return true;
}

// Whether a WQE's CQE waits until the next published WQE has been read (serve, below). An Env
// with `bool hold_cqes()` may say no: the NIC model writes every CQE at its modelled time,
// planned as the WQE executes (native/src/emu_model.cpp), so its CQE is requested at once.
template <class Env>
GB_HD auto hold_cqes(Env& env, int) -> decltype(env.hold_cqes()) {
  return env.hold_cqes();
}
template <class Env>
GB_HD bool hold_cqes(Env&, long) {
  return true;
}

// Serve a QP: execute the WQEs published (by the send doorbell record, or for a DBR-less QP by
// the doorbells), stopping at a slot that does not hold its WQE yet, or after `budget` WQEs (the
// rest stays pending: served next pass). Returns the WQEs handled.
template <class Env>
GB_HD uint32_t serve(Env& env, SqState& e, const SqParams& q, uint32_t budget = 0xffffffffu) {
  const uint32_t state = env.qp_state();
  if (state != kRts && state != kErr) {
    e.pending = 0;
    e.held = 0;  // a QP leaving RTS this way (reset) drops what it had not completed
    return 0;
  }
  const m5::SqRing& sq = q.ring;
  uint32_t ci = e.ci;
  uint32_t avail;
  if (q.flags & kQpNoDbr) {
    if (e.db_last_open) {
      const m5::CtrlView c = m5::get_ctrl_seg(sq.wqe(e.db_last));
      if (wqe_ready(q, e.db_last, c)) {
        e.target = (e.db_last + m5::ds_to_wqebbs(c.ds)) & 0xffff;
        e.db_last_open = 0;
      }
    }
    avail = ((e.db_last_open ? e.db_last : e.target) - ci) & 0xffff;
  } else {
    const uint32_t pi = m5::bswap32(env.ld_acq32(q.snd_dbrec)) & 0xffff;
    avail = (pi - ci) & 0xffff;
    if (avail > sq.wqebb_cnt) {  // the record names more than the SQ holds
      if (e.bad_at != pi + 1) {
        e.bad_at = pi + 1;
        env.event(kEvBadRecord, ci & 0xffff, pi);
      }
      return 0;
    }
    if (e.check_lag && !e.lag_counted) {
      const uint32_t need = (e.named - ci) & 0xffff;
      if (need <= sq.wqebb_cnt && need > avail) {
        e.lag_counted = 1;
        env.event(kEvDbrecLag, need, avail);
      }
    }
  }
  uint32_t handled = 0;
  bool blocked = false;
  // A NIC fetches the WQEs a doorbell names ahead of completing the ones before them, so a
  // WQE's CQE is written here only once the next published WQE has been read and executed (or
  // nothing more is published in this pass). Posting code may then reuse a slot as soon as
  // the CQE before it arrives, as it may on a NIC: DOCA's collapsed-CQ slot wait frees slot
  // i + depth when the CQE of WQE i - 1 lands.
  bool held = e.held;
  uint8_t held_op = e.held_op;
  uint16_t held_idx = e.held_idx;
  uint32_t held_bytes = e.held_bytes;
  while (avail && handled < budget) {
    const m5::CtrlView c = m5::get_ctrl_seg(sq.wqe(ci));
    const uint32_t nbb = m5::ds_to_wqebbs(c.ds ? c.ds : 1);
    if (!wqe_ready(q, ci, c) || nbb > avail) {
      // The doorbell or record overtook the WQE stores, or the WQE runs past the published
      // index: not executed, reported once, served again next pass.
      if (e.stale_at != ci + 1) {
        e.stale_at = ci + 1;
        env.event(kEvStale, ci & 0xffff, c.wqe_index);
      }
      blocked = true;
      break;
    }
    const uint16_t idx = static_cast<uint16_t>(ci);
    if (env.qp_state() == kErr) {
      if (held) env.req_cqe(held_op, held_idx, held_bytes);
      held = false;
      env.err_cqe(m5::kSyndWrFlush, 0, c.opcode, idx, true);
      env.event(kEvFlushed, 0, idx);
    } else {
      if (!admit_wqe(env, q, ci, avail, 0)) {  // not yet: served again next pass
        blocked = true;
        break;
      }
      const Exec r = execute(env, q, ci, c);
      if (held) env.req_cqe(held_op, held_idx, held_bytes);  // WQE ci read: complete the last
      held = false;
      if (r.synd) {
        env.err_cqe(r.synd, vendor_syndrome(r.synd), c.opcode, idx, false);
        env.qp_to_error();
        env.event(kEvError, r.synd, idx);
      } else {
        env.event(kEvExecuted, r.bytes, c.opcode != m5::kOpNop);
        if ((c.fm_ce_se & m5::kCqUpdate) && !hold_cqes(env, 0)) {
          env.req_cqe(c.opcode, idx, r.bytes);
        } else if (c.fm_ce_se & m5::kCqUpdate) {
          held = true;
          held_op = c.opcode;
          held_idx = idx;
          held_bytes = r.bytes;
        }
      }
    }
    ++handled;
    ci += nbb;
    avail -= nbb;
  }
  // Nothing more published: complete the last WQE now. Otherwise (a stale slot, the model's
  // admission, the budget) the next WQE is published and the next pass reads it first.
  if (held && avail == 0) {
    env.req_cqe(held_op, held_idx, held_bytes);
    held = false;
  }
  e.held = held;
  e.held_op = held_op;
  e.held_idx = held_idx;
  e.held_bytes = held_bytes;
  e.ci = ci;
  if (e.check_lag) {
    const uint32_t need = (e.named - ci) & 0xffff;
    if (need == 0 || need > sq.wqebb_cnt) e.check_lag = 0;  // executed through what was named
  }
  e.pending = blocked || avail != 0 || e.check_lag || e.db_last_open;
  return handled;
}

// A doorbell register changed to `db`: check it, note what it announces, serve the QP.
template <class Env>
GB_HD uint32_t on_doorbell(Env& env, SqState& e, const SqParams& q, uint64_t db,
                           uint32_t budget = 0xffffffffu) {
  env.event(kEvDoorbell, 0, 0);
  const DoorbellView v = decode_doorbell(db);
  if (v.qpn != q.qpn) {
    env.event(kEvWrongQpn, q.qpn, v.qpn);
    return 0;
  }
  const uint32_t state = env.qp_state();
  if (state != kRts && state != kErr) {
    env.event(kEvNotRts, state, v.idx);  // hardware ignores it; emu says so
    return 0;
  }
  const uint32_t ahead = (v.idx - e.ci) & 0xffff;
  if (ahead > q.ring.wqebb_cnt) {
    // Behind the consumer index: WQEs the record already published and the engine executed
    // before this doorbell was seen (the record runs ahead of the doorbell). Nothing new.
    if (((e.ci - v.idx) & 0xffff) <= q.ring.wqebb_cnt) return serve(env, e, q, budget);
    env.event(kEvOutOfWindow, e.ci & 0xffff, v.idx);
    return 0;
  }
  if (q.flags & kQpNoDbr) {
    if (v.next_index) {
      e.target = v.idx;
      e.db_last_open = 0;
    } else {  // the end is known once the named WQE's ctrl is readable
      e.db_last = v.idx;
      e.db_last_open = 1;
    }
  } else {
    e.named = v.next_index ? v.idx : (v.idx + 1) & 0xffff;
    e.check_lag = 1;
    e.lag_counted = 0;
  }
  e.pending = 1;
  return serve(env, e, q, budget);
}

// ---- CQEs ----------------------------------------------------------------------------------------
// One CQ as the core writes it (the fields live in the engine's own tables).
struct CqRef {
  uint8_t* buf;
  const uint32_t* ci_rec;  // &dbrec[MLX5_CQ_SET_CI]
  uint32_t* status;        // 0 OK, 9 CQ_OVERFLOW
  uint32_t* pi;
  uint32_t* dropped;
  uint32_t ncqe;
  uint32_t flags;  // kCqCollapsed, kCqOverrunIgnore
};

enum CqeResult { kCqeWritten, kCqeDropped, kCqeOverrun };
constexpr uint32_t kCqOverflow = 9;

// Write one CQE (the CQ's lock held): overrun check against the consumer index in the CQ's
// record unless oi, body first (fill returns op_own), op_own last with a release store. A
// collapsed CQ receives every CQE in entry 0. On kCqeOverrun the caller raises the CQ error
// event and moves the CQ's QPs to ERR.
template <class Mem, class Fill>
GB_HD CqeResult write_cqe(Mem& mem, const CqRef& cq, Fill fill) {
  if (*cq.status != 0) {
    ++*cq.dropped;
    return kCqeDropped;
  }
  const uint32_t pi = *cq.pi;
  if (!(cq.flags & kCqOverrunIgnore)) {
    const uint32_t ci = m5::bswap32(mem.ld_acq32(cq.ci_rec)) & 0xffffff;
    if (((pi - ci) & 0xffffff) >= cq.ncqe) {
      mem.st_rel32(cq.status, kCqOverflow);
      ++*cq.dropped;
      return kCqeOverrun;
    }
  }
  const uint32_t slot = (cq.flags & kCqCollapsed) ? 0 : (pi & (cq.ncqe - 1));
  uint8_t* b = cq.buf + slot * m5::kCqeBytes;
  // Build the CQE aside and publish it as a NIC's single DMA write is seen: the body, then the
  // 4-byte tail (wqe_counter, signature, op_own) in one release store. Filling in place would
  // expose a zeroed or half-written wqe_counter next to a valid op_own, which a collapsed-CQ
  // poller (DOCA GPUNetIO's reads that word alone) takes as a completion.
  alignas(8) uint8_t tmp[m5::kCqeBytes];
  tmp[m5::kCqeOpOwn] = fill(tmp, static_cast<uint8_t>((pi & cq.ncqe) ? 1 : 0));
  for (uint32_t i = 0; i < m5::kCqeWqeCounter; i += 4) m5::store32(b + i, m5::load32(tmp + i));
  mem.st_rel32(reinterpret_cast<uint32_t*>(b + m5::kCqeWqeCounter),
               m5::load32(tmp + m5::kCqeWqeCounter));
  *cq.pi = pi + 1;
  return kCqeWritten;
}

// ---- GPI queues ----------------------------------------------------------------------------------
namespace gp = gicbench::gpi;

// What gpi_serve reports through GEnv::gpi_event.
enum GpiEvent : uint32_t {
  kGpiDone,     // a descriptor executed: a = RDMA writes, b = signals, c = bytes written
  kGpiTorn,     // a torn descriptor (once each): a = its index, b = segments of this lap
  kGpiError,    // a descriptor failed: a = syndrome, b = its index, c = destination
};

struct GpiWindow {
  uint64_t addr;    // as the owner reports it
  uint64_t length;  // bytes from addr a descriptor may name
  uint32_t key;
};

// The engine's view of one GPI queue (fixed at creation).
struct GpiParams {
  const uint64_t* ring;  // 2^log_depth descriptors of 8 words
  uint32_t log_depth;
  uint8_t* ctl;  // the control block: pi, ci, errors, last_error, counters (gpi.cuh offsets)
  uint32_t ncounters, nwindows;
  GB_HD uint64_t* word(uint32_t off) const { return reinterpret_cast<uint64_t*>(ctl + off); }
};

// The engine's state of one GPI queue (only its engine touches it).
struct GpiState {
  uint64_t ci = 0;          // next descriptor to consume
  uint64_t torn_at = 0;  // index + 1 of the descriptor already counted torn
};

struct GpiExec {
  uint8_t synd;  // 0 = success
  uint8_t dest;  // the destination that failed
  uint32_t writes, signals;
  uint64_t bytes;
};

// (handle, rank, off, len) through the window table and then the owner's MR table; 0 or the
// syndrome of a refusal (local: the source, LOCAL_PROT; else REMOTE_ACCESS).
template <class GEnv>
GB_HD uint8_t gpi_resolve(GEnv& env, const GpiParams& q, uint32_t handle, uint32_t rank,
                          uint64_t off, uint64_t len, uint32_t need, bool local, uint8_t** out) {
  const uint8_t refused = local ? m5::kSyndLocalProt : m5::kSyndRemoteAccess;
  GpiWindow w;
  if (handle >= q.nwindows || !env.window(handle, rank, w)) return refused;
  if (off > w.length || len > w.length - off) return refused;
  if (len == 0) {
    *out = nullptr;
    return 0;
  }
  *out = local ? env.local(w.key, w.addr + off, len) : env.remote(rank, w.key, w.addr + off, len,
                                                                   need);
  return *out ? 0 : refused;
}

template <class GEnv>
GB_HD uint8_t gpi_resolve_signal(GEnv& env, const GpiParams& q, uint32_t handle, uint32_t rank,
                                 uint64_t off, uint32_t size, uint8_t** out) {
  GpiWindow w;
  if (handle >= q.nwindows || !env.window(handle, rank, w)) return m5::kSyndRemoteAccess;
  if ((w.addr + off) & (size - 1)) return m5::kSyndRemoteInvalReq;  // misaligned signal word
  return gpi_resolve(env, q, handle, rank, off, size, kRemoteAtomic, false, out);
}

// One descriptor, whole or not at all: every address is resolved and checked before any data
// moves; then each destination's data, then its signal (the data is placed before the signal
// that announces it, with release ordering).
template <class GEnv>
GB_HD GpiExec gpi_execute(GEnv& env, const GpiParams& q, const gp::Desc& d) {
  GpiExec r{0, 0, 0, 0, 0};
  const bool fan = d.op == gp::kOpFanout;
  if (d.op > gp::kOpFanout || (d.flags & ~gp::kFlagsKnown) ||
      ((d.flags & gp::kFlagNoSignal) && !fan) || d.counter >= q.ncounters ||
      (fan ? (d.k < 1 || d.k > gp::kMaxFanout) : d.k != 0)) {
    r.synd = m5::kSyndLocalQpOp;
    return r;
  }
  if (d.op == gp::kOpNop) return r;
  const bool inl = d.op == gp::kOpWriteInline || d.op == gp::kOpWriteInlineSignal;
  const bool data = d.op != gp::kOpSignal;
  const bool sig = fan ? !(d.flags & gp::kFlagNoSignal)
                       : d.op == gp::kOpWriteSignal || d.op == gp::kOpSignal ||
                             d.op == gp::kOpWriteInlineSignal;
  const uint32_t sig_bytes = (d.flags & gp::kFlagSignal32) ? 4 : 8;
  if ((data && !inl && d.src_win >= q.nwindows) || (data && d.dst_win >= q.nwindows) ||
      (sig && d.sig_win >= q.nwindows)) {  // a handle the queue has no table row for
    r.synd = m5::kSyndLocalQpOp;
    return r;
  }
  if ((inl && d.size > gp::kMaxInline) || d.size > 0x80000000u) {
    r.synd = m5::kSyndLocalLength;
    return r;
  }
  const uint8_t* src = d.inline_data;
  if (data && !inl) {
    uint8_t* p = nullptr;
    r.synd = gpi_resolve(env, q, d.src_win, env.self_rank(), d.src_off, d.size, 0, true, &p);
    if (r.synd) return r;
    src = p;
  }
  const uint32_t n = fan ? d.k : 1;
  uint8_t* dst[gp::kMaxFanout];
  uint8_t* sw[gp::kMaxFanout];
  for (uint32_t j = 0; j < n; ++j) {
    r.dest = static_cast<uint8_t>(j);
    const uint32_t rank = fan ? d.dest[j].rank : d.dst_rank;
    if (!env.reachable(rank)) {
      r.synd = m5::kSyndTransportRetryExc;
      return r;
    }
    dst[j] = sw[j] = nullptr;
    if (data) {
      const uint64_t off = fan ? uint64_t{d.dest[j].slot} * d.stride : d.dst_off;
      r.synd = gpi_resolve(env, q, d.dst_win, rank, off, d.size, kRemoteWrite, false, &dst[j]);
      if (r.synd) return r;
    }
    if (sig) {
      const uint64_t off =
          fan ? (uint64_t{d.sig_base} + d.dest[j].signal) * sig_bytes : d.sig_off;
      r.synd = gpi_resolve_signal(env, q, d.sig_win, rank, off, sig_bytes, &sw[j]);
      if (r.synd) return r;
    }
  }
  r.dest = 0;
  for (uint32_t j = 0; j < n; ++j) {
    if (data && d.size) env.copy(dst[j], src, d.size);
    if (!sig) continue;
    if (sig_bytes == 8) {
      env.fetch_add64(reinterpret_cast<uint64_t*>(sw[j]), static_cast<uint64_t>(d.value));
    } else {
      uint32_t* word = reinterpret_cast<uint32_t*>(sw[j]);
      uint32_t old = 0;
      for (;;) {
        const uint32_t seen = env.cas32(word, old, old + static_cast<uint32_t>(d.value));
        if (seen == old) break;
        old = seen;
      }
    }
  }
  r.writes = data ? n : 0;
  r.signals = sig ? n : 0;
  r.bytes = data ? uint64_t{n} * d.size : 0;
  return r;
}

// Consume the descriptors posted at the queue's consumer index: each executes once all eight of
// its segments carry the owner bit of this lap; a torn one is counted once and waited for. Every
// descriptor, executed or failed, advances ci, published (release) after its effects and its
// counter. The producers' pi is not read: reservations may run any distance ahead of ci while
// producers wait for credits. Returns the descriptors consumed.
template <class GEnv>
GB_HD uint32_t gpi_serve(GEnv& env, GpiState& st, const GpiParams& q) {
  const uint64_t depth = uint64_t{1} << q.log_depth;
  uint32_t handled = 0;
  for (;;) {
    const uint64_t idx = st.ci;
    const uint64_t* slot = q.ring + (idx & (depth - 1)) * gp::kSegs;
    uint64_t w[gp::kSegs];
    for (uint32_t i = 0; i < gp::kSegs; ++i) w[i] = env.ld_acq64(slot + i);
    const uint32_t owned = gp::owned_segments(w, gp::owner_for(idx, q.log_depth));
    if (owned == 0) break;  // nothing posted here yet
    if (owned < gp::kSegs) {  // some segments still in flight: never executed torn
      if (st.torn_at != idx + 1) {
        st.torn_at = idx + 1;
        env.gpi_event(kGpiTorn, idx, owned, 0);
      }
      break;
    }
    const gp::Desc d = gp::decode(w);
    const GpiExec r = gpi_execute(env, q, d);
    uint64_t* counter =
        d.counter < q.ncounters ? q.word(gp::kOffCounters + 8u * d.counter) : nullptr;
    if (r.synd) {
      if (counter) {
        uint64_t old = 0;
        for (;;) {
          const uint64_t seen = env.cas64(counter, old, old | gp::kCounterError);
          if (seen == old) break;
          old = seen;
        }
      }
      env.fetch_add64(q.word(gp::kOffErrors), 1);
      env.st_rel64(q.word(gp::kOffLastError), gp::last_error_word(idx, r.synd, r.dest));
      env.gpi_event(kGpiError, r.synd, idx, r.dest);
    } else {
      env.fetch_add64(counter, 1);
      env.gpi_event(kGpiDone, r.writes, r.signals, r.bytes);
    }
    st.ci = idx + 1;
    env.st_rel64(q.word(gp::kOffCi), st.ci);
    ++handled;
  }
  return handled;
}

}  // namespace emu_core
}  // namespace gicbench
