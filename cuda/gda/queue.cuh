// Device-side producer and consumer of mlx5 queues: the GPU's counterpart of native/src/queues.hpp.
//
// Everything is addressed through device addresses only (the lane table), so the same code drives
// queues in host memory mapped into the GPU (the emulated NIC's CPU engine) and GPU-resident queues
// (a CUDA engine, or a real NIC's queues placed in GPU memory). WQEs are written one 16-byte
// segment per store, body first and control segment last, from words composed in registers
// (SendQp: the lane's columns loaded once, not re-read between the stores); the doorbell value
// is composed in registers; the record and the doorbell are published with the build-time
// ordering (ordering.cuh); CQEs are polled by their last word at the matching scope.
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
  uint32_t lock;     // doorbell lock (publish=lock): the next ticket
  uint32_t cq_lock;  // one poller at a time
  uint32_t bbs;      // WQEBBs per WQE of the current call
  uint32_t cq_pub;   // CQ consumer index last stored in the CQ's doorbell record
  uint32_t cq_slack; // consumed CQEs the record may lag by (publish_cq_ci)
  uint32_t lock_turn; // doorbell lock: the ticket served now (a FIFO lock: no thread starves)
  uint32_t pad[5];   // one 64-byte row (gicbench.submit.gpu.submitter.STATE_WORDS)
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

// ---- WQE construction (16-byte segment stores) ------------------------------------------------
struct Ring {
  uint8_t* buf;
  uint32_t mask;  // bytes - 1
  __device__ uint32_t* word(uint32_t pi, uint32_t byte_in_wqe) const {
    return reinterpret_cast<uint32_t*>(buf + ((pi * m5::kWqebbBytes + byte_in_wqe) & mask));
  }
  __device__ void put(uint32_t pi, uint32_t byte_in_wqe, uint32_t v) const {
    *word(pi, byte_in_wqe) = v;
  }
  // Segment `seg` of the WQE at `pi` (16-byte aligned; wraps at the SQ end).
  __device__ void put_seg(uint32_t pi, uint32_t seg, uint4 v) const {
    st_global_v4(buf + ((pi * m5::kWqebbBytes + seg * m5::kSegBytes) & mask), v);
  }
};

// What building and publishing a write on a lane needs, loaded from the lane table once (one
// round of independent loads) and then held in registers: nothing between the first WQE store
// and the doorbell reads memory. The 32-bit keys are kept byte-swapped, as the WQE carries them.
struct SendQp {
  uint8_t* sq;
  uint32_t mask;    // SQ bytes - 1
  uint32_t wqebbs;
  uint32_t* dbrec;
  uint64_t* doorbell;
  uint64_t* ready;  // --doorbell host: the QP's ready array (nullptr: the GPU rings)
  uint32_t qpn;
  uint32_t rkey_be, lkey_be;
  uint64_t dst, src_addr, src_dev, region;
  bool dc;
  uint32_t dc_key_hi_be, dc_key_lo_be, dctn_be, lid_word;
};

__device__ __forceinline__ SendQp load_send_qp(const Lane& l) {
  SendQp q;
  q.sq = l.sq();
  q.wqebbs = l.wqebbs();
  q.mask = q.wqebbs * m5::kWqebbBytes - 1;
  q.dbrec = l.dbrec();
  q.doorbell = l.doorbell();
  q.ready = l.ready();
  q.qpn = l.qpn();
  q.rkey_be = m5::bswap32(static_cast<uint32_t>(l[kRkey]));
  q.lkey_be = m5::bswap32(static_cast<uint32_t>(l[kLkey]));
  q.dst = l[kDstAddr];
  q.src_addr = l[kSrcAddr];
  q.src_dev = l[kSrcDev];
  q.region = l[kRegion];
  q.dc = l[kDc] != 0;
  const uint64_t key = l[kDcKey];
  q.dc_key_hi_be = m5::bswap32(static_cast<uint32_t>(key >> 32));
  q.dc_key_lo_be = m5::bswap32(static_cast<uint32_t>(key));
  q.dctn_be = m5::bswap32(static_cast<uint32_t>(l[kDctn]) | m5::kAvExt);
  // stat_rate_sl = fl_mlid = 0, rlid big-endian in bytes 14..15
  const uint32_t lid = static_cast<uint32_t>(l[kLid]) & 0xffff;
  q.lid_word = ((lid >> 8) & 0xff) << 16 | (lid & 0xff) << 24;
  return q;
}

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
  // The inline segments' words: the first segment's three after the header, then segment k
  // (k >= 1) whole (payload bytes 16k-4 .. 16k+12).
  __device__ uint4 head() const { return make_uint4(0, word(0), word(4), word(8)); }
  __device__ uint4 seg(uint32_t k) const {
    const uint32_t i = 16 * k - 4;
    return make_uint4(word(i), word(i + 4), word(i + 8), word(i + 12));
  }
};

// A payload nothing writes while the kernel runs (msg-rate's device copy of the source slices,
// staged before the call): read through the read-only path, so its loads need not wait behind
// the WQE stores before them.
struct ConstPayload {
  const uint8_t* src;
  uint32_t length;
  __device__ uint32_t word(uint32_t i) const {
    if (i + 4 <= length && (reinterpret_cast<unsigned long long>(src + i) & 3) == 0)
      return __ldg(reinterpret_cast<const unsigned int*>(src + i));
    uint32_t w = 0;
    for (uint32_t k = 0; k < 4; ++k)
      if (i + k < length) w |= static_cast<uint32_t>(__ldg(src + i + k)) << (8 * k);
    return w;
  }
  __device__ uint4 head() const { return make_uint4(0, word(0), word(4), word(8)); }
  __device__ uint4 seg(uint32_t k) const {
    const uint32_t i = 16 * k - 4;
    return make_uint4(word(i), word(i + 4), word(i + 8), word(i + 12));
  }
};

// 8-byte inline payloads of a thread's next messages on one lane, copied into shared memory
// kAhead messages before they are posted (cp.async: the thread never waits on a load the WQE's
// store needs; one exposed global load a WQE held one thread to ~2 M msg/s whatever its batch).
// A ring of 2 x kAhead slots: a slot is refilled kAhead messages after it was read. `k` is the
// message whose copy the ring expects to be used next; another message restarts the ring there.
constexpr uint32_t kAhead = 8;
constexpr uint32_t kAheadThreads = 128;  // threads of a block with a ring (msg-rate's blocks)
struct PayloadAhead {
  uint32_t ring;           // shared-window address of this thread's 2 x kAhead 8-byte slots
  const uint8_t* src = nullptr;  // the lane's source slices: message m's 8 bytes at slot m % slots
  uint32_t slots = 1;
  uint32_t k = 0;          // the message take() expects next
  uint32_t next = 0;       // the next message to copy, and its slice
  uint32_t next_slice = 0;
  bool live = false;
  __device__ void copy_next() {
    cp_async8(slot(next), src + next_slice * 8ull);
    ++next;
    next_slice = next_slice + 1 == slots ? 0 : next_slice + 1;
  }
  // Message m's 8 bytes as an inline head (its copy waited for); the copy kAhead further issued.
  __device__ uint4 take(uint32_t m) {
    if (!live || k != m) {  // (re)start the ring at m
      cp_async_wait<0>();   // copies into the slots of an earlier run are done
      next = m;
      next_slice = m % slots;
      for (uint32_t u = 0; u < kAhead; ++u) copy_next();
      live = true;
    }
    cp_async_wait<kAhead - 1>();  // message m's copy (the oldest in flight) has landed
    const uint2 v = ld_shared_v2(slot(m));
    copy_next();
    k = m + 1;
    return make_uint4(0, v.x, v.y, 0);
  }
  __device__ uint32_t slot(uint32_t m) const { return ring + (m & (2 * kAhead - 1)) * 8; }
  __device__ void finish() const { cp_async_wait<0>(); }
};

// An inline payload whose first segment's words are already in registers (PayloadAhead).
struct HeadPayload {
  uint4 first;
  __device__ uint4 head() const { return first; }
  __device__ uint4 seg(uint32_t) const { return make_uint4(0, 0, 0, 0); }  // one segment only
};

// An inline payload staged on chip before the timed build: its first segment's words in
// registers, the rest in shared memory laid out as the segments are (payload word j at word
// j + 1, so segment k is one 16-byte shared load). stage_inline fills it.
struct StagedPayload {
  uint32_t segs;  // shared-window address of the staged segments
  uint4 first;    // .y .z .w: payload words 0..2 (.x: the header's place)
  __device__ uint4 head() const { return first; }
  __device__ uint4 seg(uint32_t k) const { return ld_shared_v4(segs + k * m5::kSegBytes); }
};

// Segments of one RDMA write (RC or DC with a full AV), inline or pointer payload.
__device__ __forceinline__ uint32_t write_ds(bool inl, uint32_t len, bool dc) {
  return m5::ds_rc_write(inl, len) + (dc ? m5::kDsAvFull : 0);
}
__device__ __forceinline__ uint32_t write_wqebbs(bool inl, uint32_t len, bool dc) {
  const uint32_t ds = write_ds(inl, len, dc);
  return ds > m5::kDsMask ? 0 : m5::ds_to_wqebbs(ds);
}

// The words of a write that do not depend on its producer index (where it goes, its length, its
// keys, its control word but the index): composed once, e.g. before a timer, so that building
// the WQE at an index is its stores and the index's few operations (emit_write).
struct WriteShape {
  uint4 raddr;    // the remote address segment
  uint4 data;     // pointer payload: the data segment; inline: .x the inline segment's header
  uint32_t w1;    // control segment word 1 (big-endian): QPN, segment count
  uint32_t z;     // control segment word 2: fm_ce_se (signaled)
  uint32_t nseg;  // inline segments (0: a pointer payload)
  uint32_t bbs;   // WQEBBs
};

__device__ __forceinline__ WriteShape shape_write(const SendQp& q, uint64_t raddr, bool inl,
                                                  uint32_t length, uint64_t laddr,
                                                  bool signaled) {
  WriteShape w;
  w.raddr = make_uint4(m5::bswap32(static_cast<uint32_t>(raddr >> 32)),
                       m5::bswap32(static_cast<uint32_t>(raddr)), q.rkey_be, 0);
  w.nseg = inl ? m5::inline_seg_ds(length) : 0;
  w.data = inl ? make_uint4(m5::bswap32(length | m5::kInlineFlag), 0, 0, 0)
               : make_uint4(m5::bswap32(length), q.lkey_be,
                            m5::bswap32(static_cast<uint32_t>(laddr >> 32)),
                            m5::bswap32(static_cast<uint32_t>(laddr)));
  const uint32_t ds = write_ds(inl, length, q.dc);
  w.w1 = m5::bswap32((q.qpn << 8) | (ds & m5::kDsMask));
  w.bbs = m5::ds_to_wqebbs(ds);
  w.z = static_cast<uint32_t>(signaled ? m5::kCqUpdate : 0) << 24;
  return w;
}

// Keep a shape's words in registers from here on (a compiler barrier for values): code after it
// cannot recompute them from their sources, so a timer started after it times the stores.
__device__ __forceinline__ void pin_shape(WriteShape& w) {
  asm volatile("" : "+r"(w.raddr.x), "+r"(w.raddr.y), "+r"(w.raddr.z), "+r"(w.data.x),
                    "+r"(w.data.y), "+r"(w.data.z), "+r"(w.data.w), "+r"(w.w1), "+r"(w.z),
                    "+r"(w.nseg), "+r"(w.bbs));
}

// A WQE's 16-byte segments stored at its slot: `Linear` when the WQE ends before the SQ's end
// (offsets from one address: no arithmetic a store), `Ring` otherwise (each segment wraps).
struct LinearSlot {
  uint8_t* wqe;
  __device__ void put_seg(uint32_t, uint32_t seg, uint4 v) const {
    st_global_v4(wqe + seg * m5::kSegBytes, v);
  }
};

template <class P, class Slot>
__device__ __forceinline__ uint64_t emit_into(const Slot& r, const SendQp& q, const WriteShape& w,
                                              uint32_t pi, const P& p) {
  const bool inl = w.nseg != 0;
  uint4 h = w.data;
  if (inl) {  // loaded before the first store (it may not pass one)
    const uint4 head = p.head();
    h.y = head.y;
    h.z = head.z;
    h.w = head.w;
  }
  uint32_t seg = 1;  // after ctrl
  if (q.dc) {
    r.put_seg(pi, seg, make_uint4(q.dc_key_hi_be, q.dc_key_lo_be, q.dctn_be, q.lid_word));
    r.put_seg(pi, seg + 1, make_uint4(0, 0, 0, 0));
    r.put_seg(pi, seg + 2, make_uint4(0, 0, 0, 0));
    seg += m5::kDsAvFull;
  }
  r.put_seg(pi, seg++, w.raddr);
  r.put_seg(pi, seg, h);
  for (uint32_t k = 1; k < w.nseg; ++k) r.put_seg(pi, seg + k, p.seg(k));
  const uint32_t w0 = m5::bswap32(((pi & 0xffff) << 8) | m5::kOpRdmaWrite);
  compiler_barrier();  // the body is emitted before the control segment
  r.put_seg(pi, 0, make_uint4(w0, w.w1, w.z, 0));
  return (static_cast<uint64_t>(w.w1) << 32) | w0;
}

// Build the write of shape `w` at producer index `pi` from registers: body segments first, the
// control segment last, each one 16-byte store; returns the doorbell value (the first 8 bytes of
// its control segment). `P`: Payload (read from memory as it is stored) or StagedPayload (on
// chip), for inline payloads.
template <class P>
__device__ __forceinline__ uint64_t emit_write(const SendQp& q, const WriteShape& w, uint32_t pi,
                                               const P& p) {
  const uint32_t at = (pi * m5::kWqebbBytes) & q.mask;
  if (w.bbs == 1 && !q.dc) {  // the common write: ctrl, raddr, one or two payload segments
    uint8_t* wqe = q.sq + at;  // one WQEBB never wraps
    uint4 h = w.data;
    if (w.nseg) {
      const uint4 head = p.head();
      h.y = head.y;
      h.z = head.z;
      h.w = head.w;
    }
    st_global_v4(wqe + m5::kSegBytes, w.raddr);
    st_global_v4(wqe + 2 * m5::kSegBytes, h);
    if (w.nseg == 2) st_global_v4(wqe + 3 * m5::kSegBytes, p.seg(1));
    const uint32_t w0 = m5::bswap32(((pi & 0xffff) << 8) | m5::kOpRdmaWrite);
    compiler_barrier();  // the body is emitted before the control segment
    st_global_v4(wqe, make_uint4(w0, w.w1, w.z, 0));
    return (static_cast<uint64_t>(w.w1) << 32) | w0;
  }
  const uint32_t end = at + w.bbs * m5::kWqebbBytes;
  if (end <= q.mask + 1) return emit_into(LinearSlot{q.sq + at}, q, w, pi, p);
  return emit_into(Ring{q.sq, q.mask}, q, w, pi, p);
}

// Build the write at producer index `pi` from registers (shape_write, then emit_write).
template <class P>
__device__ __forceinline__ uint64_t build_write_q(const SendQp& q, uint32_t pi, uint64_t raddr,
                                                  bool inl, uint32_t length, const P& p,
                                                  uint64_t laddr, bool signaled) {
  return emit_write(q, shape_write(q, raddr, inl, length, laddr, signaled), pi, p);
}

// Build the write at producer index `pi` of lane `l` (the lane's columns loaded first).
__device__ __forceinline__ uint64_t build_write(const Lane& l, uint32_t pi, uint64_t raddr,
                                                bool inl, const Payload& p, uint64_t laddr,
                                                bool signaled) {
  return build_write_q(load_send_qp(l), pi, raddr, inl, p.length, p, laddr, signaled);
}

// Stage an inline payload of `length` bytes (>= 8) from `src`, its last 8 bytes replaced by
// `seq`, into `segs` (shared memory, inline_seg_ds(length) segments), zero-padded to the end of
// its last segment; returns it with the first segment's words already in registers.
__device__ __forceinline__ StagedPayload stage_inline(uint4* segs, const uint8_t* src,
                                                      uint32_t length, uint64_t seq) {
  uint8_t* b = reinterpret_cast<uint8_t*>(segs) + 4;  // payload word j at word j + 1
  const uint32_t padded = m5::inline_seg_ds(length) * m5::kSegBytes - 4;
  for (uint32_t i = 0; i < padded; ++i)
    b[i] = i >= length ? 0 : i >= length - 8 ? static_cast<uint8_t>(seq >> (8 * (i - (length - 8))))
                                             : src[i];
  return StagedPayload{static_cast<uint32_t>(__cvta_generic_to_shared(segs)), segs[0]};
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
