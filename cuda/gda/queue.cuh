// Device-side producer and consumer of mlx5 queues: the GPU's counterpart of native/src/queues.hpp.
//
// Everything is addressed through device addresses only (the lane table), so the same code drives
// queues in host memory mapped into the GPU (the emulated NIC's CPU engine) and GPU-resident queues
// (a CUDA engine, or a real NIC's queues placed in GPU memory). WQEs are written with 32-bit word
// stores, body first and control segment last; the doorbell value is composed in registers; the
// record and the doorbell are published with the build-time ordering (ordering.cuh); CQEs are
// polled by their last word at the matching scope.
#pragma once

#include "gda/ordering.cuh"

namespace gicbench {
namespace gda {

namespace m5 = mlx5;

// Columns of one lane in the uint64 lane table (gicbench.submit.gpu.lanes.COLUMNS).
enum LaneCol : int {
  kSqBuf = 0,
  kSqWqebbs,
  kSqDbrec,
  kSqDoorbell,
  kQpn,
  kCqBuf,
  kCqNcqe,
  kCqDbrec,
  kSrcDev,    // device copy of the lane's source slice (inline payloads are read from here)
  kSrcAddr,   // the source slice as the NIC addresses it (pointer payloads)
  kLkey,
  kDstAddr,   // remote slice (raddr)
  kRkey,
  kRegion,    // bytes of the slice
  kState,     // index of the QP's QpState
  kLaneWqes,  // msg-rate: WQEs this lane carries in the call
  kDc,        // 1: a DCI, the WQE carries a full address vector
  kDcKey,
  kDctn,
  kLid,
  kReady,     // --doorbell host: device address of the QP's ready array (0: the GPU rings)
  kLaneCols
};

// Per-QP producer state, kept in device memory across kernel launches (indices in WQEBBs,
// running 32-bit; the NIC sees their low 16 bits).
struct QpState {
  uint32_t base;     // producer index when the call started (all earlier work retired)
  uint32_t resv;     // next WQEBB to reserve
  uint32_t pub;      // published (rung) up to here
  uint32_t retired;  // every WQEBB below is retired by a CQE
  uint32_t cq_ci;    // CQ consumer index
  uint32_t lock;     // doorbell lock (publish=lock)
  uint32_t cq_lock;  // one poller at a time
  uint32_t bbs;      // WQEBBs per WQE of the current call
  uint32_t cq_pub;   // CQ consumer index last stored in the CQ's doorbell record
  uint32_t cq_slack; // consumed CQEs the record may lag by (publish_cq_ci)
  uint32_t pad[6];   // one 64-byte row (gicbench.submit.gpu.submitter.STATE_WORDS)
};
static_assert(sizeof(QpState) == 64, "QpState is one 64-byte row of the submitter's states");

// Status of a call, written once by the first thread that fails (gicbench.submit.gpu.status).
enum StatusWord : int {
  kStCode = 0,
  kStLane,
  kStQpn,
  kStPi,
  kStRetired,
  kStCqCi,
  kStSyndrome,
  kStWqeCounter,
  kStDone,
  kStWordSeen,
  kStWordExpected,
  kStWords = 16
};
enum StatusCode : unsigned long long {
  kOk = 0,
  kTimeout = 1,
  kCqeError = 2,
  kInterrupted = 3,
  kBadArgs = 4,
};

struct Lane {
  const uint64_t* c;
  __device__ uint64_t operator[](int i) const { return c[i]; }
  __device__ uint8_t* sq() const { return reinterpret_cast<uint8_t*>(c[kSqBuf]); }
  __device__ uint32_t wqebbs() const { return static_cast<uint32_t>(c[kSqWqebbs]); }
  __device__ uint32_t* dbrec() const { return reinterpret_cast<uint32_t*>(c[kSqDbrec]); }
  __device__ uint64_t* doorbell() const { return reinterpret_cast<uint64_t*>(c[kSqDoorbell]); }
  __device__ uint32_t qpn() const { return static_cast<uint32_t>(c[kQpn]); }
  __device__ uint8_t* cq() const { return reinterpret_cast<uint8_t*>(c[kCqBuf]); }
  __device__ uint32_t ncqe() const { return static_cast<uint32_t>(c[kCqNcqe]); }
  __device__ uint32_t* cq_dbrec() const { return reinterpret_cast<uint32_t*>(c[kCqDbrec]); }
  __device__ uint64_t* ready() const { return reinterpret_cast<uint64_t*>(c[kReady]); }
};

// ---- WQE construction (word stores) ---------------------------------------------------------
struct Ring {
  uint8_t* buf;
  uint32_t mask;  // bytes - 1
  __device__ uint32_t* word(uint32_t pi, uint32_t byte_in_wqe) const {
    return reinterpret_cast<uint32_t*>(buf + ((pi * m5::kWqebbBytes + byte_in_wqe) & mask));
  }
  __device__ void put(uint32_t pi, uint32_t byte_in_wqe, uint32_t v) const {
    *word(pi, byte_in_wqe) = v;
  }
};

// Where a write's payload comes from.
struct Payload {
  const uint8_t* src;   // device address of the bytes (inline)
  uint32_t length;
  bool stamp;           // the last 8 bytes carry `seq` instead of src's (single-op, round trip)
  uint64_t seq;
  __device__ uint8_t byte(uint32_t i) const {
    if (stamp && i >= length - 8)
      return static_cast<uint8_t>(seq >> (8 * (i - (length - 8))));
    return src[i];
  }
  // Payload bytes [i, i+4) as a little-endian word, zero past the end.
  __device__ uint32_t word(uint32_t i) const {
    const bool whole = i + 4 <= length;
    const bool aligned = (reinterpret_cast<unsigned long long>(src + i) & 3) == 0;
    if (whole && aligned && !(stamp && i + 4 > length - 8))
      return *reinterpret_cast<const uint32_t*>(src + i);
    uint32_t w = 0;
    for (uint32_t k = 0; k < 4; ++k)
      if (i + k < length) w |= static_cast<uint32_t>(byte(i + k)) << (8 * k);
    return w;
  }
};

// Segments of one RDMA write (RC or DC with a full AV), inline or pointer payload.
__device__ __forceinline__ uint32_t write_ds(bool inl, uint32_t len, bool dc) {
  return m5::ds_rc_write(inl, len) + (dc ? m5::kDsAvFull : 0);
}
__device__ __forceinline__ uint32_t write_wqebbs(bool inl, uint32_t len, bool dc) {
  const uint32_t ds = write_ds(inl, len, dc);
  return ds > m5::kDsMask ? 0 : m5::ds_to_wqebbs(ds);
}

// Build the write at producer index `pi` (body first, ctrl last); returns the doorbell value
// (the first 8 bytes of its control segment), composed in registers.
__device__ __forceinline__ uint64_t build_write(const Lane& l, uint32_t pi, uint64_t raddr,
                                                bool inl, const Payload& p, uint64_t laddr,
                                                bool signaled) {
  const Ring r{l.sq(), l.wqebbs() * m5::kWqebbBytes - 1};
  uint32_t off = m5::kSegBytes;  // after ctrl
  if (l[kDc]) {
    const uint64_t key = l[kDcKey];
    r.put(pi, off + 0, m5::bswap32(static_cast<uint32_t>(key >> 32)));
    r.put(pi, off + 4, m5::bswap32(static_cast<uint32_t>(key)));
    r.put(pi, off + 8, m5::bswap32(static_cast<uint32_t>(l[kDctn]) | m5::kAvExt));
    // stat_rate_sl = fl_mlid = 0, rlid big-endian in bytes 14..15
    const uint32_t lid = static_cast<uint32_t>(l[kLid]) & 0xffff;
    r.put(pi, off + 12, ((lid >> 8) & 0xff) << 16 | (lid & 0xff) << 24);
    for (uint32_t b = 16; b < m5::kAvFullBytes; b += 4) r.put(pi, off + b, 0);
    off += m5::kAvFullBytes;
  }
  r.put(pi, off + 0, m5::bswap32(static_cast<uint32_t>(raddr >> 32)));
  r.put(pi, off + 4, m5::bswap32(static_cast<uint32_t>(raddr)));
  r.put(pi, off + 8, m5::bswap32(static_cast<uint32_t>(l[kRkey])));
  r.put(pi, off + 12, 0);
  off += m5::kSegBytes;
  if (inl) {
    r.put(pi, off, m5::bswap32(p.length | m5::kInlineFlag));
    const uint32_t total = m5::inline_seg_ds(p.length) * m5::kSegBytes - 4;
    for (uint32_t i = 0; i < total; i += 4) r.put(pi, off + 4 + i, p.word(i));
    off += total + 4;
  } else {
    r.put(pi, off + 0, m5::bswap32(p.length));
    r.put(pi, off + 4, m5::bswap32(static_cast<uint32_t>(l[kLkey])));
    r.put(pi, off + 8, m5::bswap32(static_cast<uint32_t>(laddr >> 32)));
    r.put(pi, off + 12, m5::bswap32(static_cast<uint32_t>(laddr)));
    off += m5::kSegBytes;
  }
  const uint32_t ds = off / m5::kSegBytes;
  const uint32_t w0 = m5::bswap32(((pi & 0xffff) << 8) | m5::kOpRdmaWrite);
  const uint32_t w1 = m5::bswap32((l.qpn() << 8) | (ds & m5::kDsMask));
  r.put(pi, 8, static_cast<uint32_t>(signaled ? m5::kCqUpdate : 0) << 24);
  r.put(pi, 12, 0);
  compiler_barrier();  // the body is emitted before the control words
  r.put(pi, 4, w1);
  r.put(pi, 0, w0);
  return (static_cast<uint64_t>(w1) << 32) | w0;
}

// ---- completion ------------------------------------------------------------------------------
struct Cqe {
  uint8_t opcode;
  uint16_t wqe_counter;
  uint8_t syndrome;
};

// Take the CQE at consumer index `ci` if the NIC has written it (owner bit for this pass).
// Expected poll: a relaxed load of the CQE's last word, one acquire on a hit (ordering.cuh).
__device__ __forceinline__ bool poll_cqe(const Lane& l, uint32_t ci, Cqe& out) {
  const uint8_t* cqe = l.cq() + (ci & (l.ncqe() - 1)) * m5::kCqeBytes;
  const uint32_t w =
      kExpectedPoll ? poll_word_relaxed(cqe + m5::kCqeWqeCounter) : poll_word(cqe + m5::kCqeWqeCounter);
  const uint8_t op_own = static_cast<uint8_t>(w >> 24);
  if ((op_own >> 4) == m5::kCqeInvalid || (op_own & 1) != m5::cqe_owner_for(ci, l.ncqe()))
    return false;
  if constexpr (kExpectedPoll) {
    acquire_after_hit();
  } else {
    acquire_after_poll();
  }
  out.opcode = op_own >> 4;
  out.wqe_counter = static_cast<uint16_t>(((w & 0xff) << 8) | ((w >> 8) & 0xff));
  const bool err = out.opcode == m5::kCqeReqErr || out.opcode == m5::kCqeRespErr;
  out.syndrome = err ? ld_volatile8(cqe + m5::kErrCqeSyndrome) : 0;
  return true;
}

__device__ __forceinline__ void set_cq_ci(const Lane& l, uint32_t ci) {
  st_volatile32(l.cq_dbrec() + m5::kCqSetCi, m5::cq_ci_value(ci));
}

// After reaping up to `ci` (the caller owns the CQ): store the consumer index in the CQ's record
// when the record lags by more than cq_slack. The NIC refuses a CQE past record + ncqe (overrun);
// with at most M signaled WQEs in flight on the QP and slack = ncqe - M, the next CQE's index is
// below ci + M <= record + ncqe, so no CQE can overrun. Slack 0: at every reap (--cq-poll scan).
__device__ __forceinline__ void publish_cq_ci(const Lane& l, QpState* s, uint32_t ci) {
  const uint32_t pub = ld_volatile32(&s->cq_pub);
  if (ci - pub > ld_volatile32(&s->cq_slack)) {
    set_cq_ci(l, ci);
    st_volatile32(&s->cq_pub, ci);
  }
}

// The full producer index of a completed WQE from its 16-bit counter: it is not retired yet, so
// it lies in [retired, retired + SQ size), and an SQ holds at most 32,768 WQEBBs.
__device__ __forceinline__ uint32_t full_index(uint32_t retired, uint16_t wc) {
  return retired + static_cast<uint16_t>(wc - static_cast<uint16_t>(retired));
}

// Host-forwarded doorbell: the WQE at `pi` (of `bbs` WQEBBs) is ready; its slot (the slot of its
// first WQEBB) gets the producer index after it. The host thread advances its ready prefix from
// slot to slot (native/src/ready_prefix.hpp).
__device__ __forceinline__ void mark_wqe_ready(const Lane& l, uint32_t pi, uint32_t bbs) {
  mark_ready(l.ready() + (pi & (l.wqebbs() - 1)), static_cast<uint64_t>(pi + bbs));
}

}  // namespace gda
}  // namespace gicbench
