// mlx5 send-WQE and CQE wire format: the one contract every gicbench submitter and engine speaks.
//
// __host__ __device__ so the same code runs in CUDA kernels (GPU submitter, CUDA engine) and in the
// C++ of proxy/ (CPU engine, host submitter, proxy workers). Layouts follow rdma-core's
// <infiniband/mlx5dv.h>; tests compare them byte for byte against that header.
// All multi-byte fields are big-endian, except ctrl.imm which is stored as passed.
#pragma once

#if defined(__CUDACC_RTC__)
// NVRTC (CuPy RawModule) ships no C library headers. These are the typedefs libcu++'s
// <cuda/std/cstdint> makes under NVRTC, so a kernel may include both.
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef signed short int16_t;
typedef unsigned short uint16_t;
typedef signed int int32_t;
typedef unsigned int uint32_t;
typedef signed long long int64_t;
typedef unsigned long long uint64_t;
#else
#include <stdint.h>
#endif

#if defined(__CUDACC__)
#define GB_HD __host__ __device__ __forceinline__
#else
#define GB_HD inline
#endif

namespace gicbench {
namespace mlx5 {

// ---- sizes --------------------------------------------------------------------------------------
constexpr uint32_t kSegBytes = 16;    // one WQE segment, the ds unit
constexpr uint32_t kWqebbBytes = 64;  // one send-queue basic block
constexpr uint32_t kCqeBytes = 64;
constexpr uint32_t kAvFullBytes = 48;
constexpr uint32_t kAvCompactBytes = 16;
constexpr uint32_t kDsMask = 0x3f;  // ds is 6 bits: a WQE is at most 63 segments
constexpr uint32_t kInlineFlag = 0x80000000u;

// ---- send opcodes (ctrl.opmod_idx_opcode low byte) ----------------------------------------------
enum Opcode : uint8_t {
  kOpNop = 0x00,
  kOpRdmaWrite = 0x08,
  kOpRdmaWriteImm = 0x09,
  kOpSend = 0x0a,
  kOpSendImm = 0x0b,
  kOpRdmaRead = 0x10,
  kOpAtomicCs = 0x11,
  kOpAtomicFa = 0x12,
  kOpAtomicMaskedCs = 0x14,  // extended atomics: ctrl.opmod gives the operand size
  kOpAtomicMaskedFa = 0x15,
};

// Extended atomics: ctrl.opmod = 0x08 | (log2(operand bytes) - 2), the PRM's encoding (UCX's
// UCT_IB_MLX5_OPMOD_EXT_ATOMIC; NVSHMEM's and DeepEP's IBGDA post 0x08 for 4-byte and 0x09 for
// 8-byte operands). gicbench posts and serves the 4- and 8-byte forms.
constexpr uint8_t kOpmodExtAtomic = 0x08;

// ctrl.fm_ce_se bits
enum CtrlFlags : uint8_t {
  kSolicited = 0x02,
  kCqUpdate = 0x08,  // signaled: the NIC writes a CQE for this WQE
  kInitiatorSmallFence = 0x20,
  kFence = 0x80,
};

// ---- CQE opcodes (op_own >> 4) and error syndromes -----------------------------------------------
enum CqeOpcode : uint8_t {
  kCqeReq = 0,
  kCqeRespWrImm = 1,
  kCqeRespSend = 2,
  kCqeRespSendImm = 3,
  kCqeReqErr = 13,
  kCqeRespErr = 14,
  kCqeInvalid = 15,
};

enum Syndrome : uint8_t {
  kSyndLocalLength = 0x01,
  kSyndLocalQpOp = 0x02,
  kSyndLocalProt = 0x04,
  kSyndWrFlush = 0x05,
  kSyndBadResp = 0x10,
  kSyndLocalAccess = 0x11,
  kSyndRemoteInvalReq = 0x12,
  kSyndRemoteAccess = 0x13,
  kSyndRemoteOp = 0x14,
  kSyndTransportRetryExc = 0x15,
  kSyndRnrRetryExc = 0x16,
  kSyndRemoteAborted = 0x22,
};

// Doorbell-record slots (32-bit words): send producer index at [1], receive at [0];
// CQ consumer index at [0] (SET_CI).
constexpr uint32_t kRcvDbr = 0;
constexpr uint32_t kSndDbr = 1;
constexpr uint32_t kCqSetCi = 0;

// ---- byte order ----------------------------------------------------------------------------------
GB_HD uint16_t bswap16(uint16_t v) { return static_cast<uint16_t>((v >> 8) | (v << 8)); }
GB_HD uint32_t bswap32(uint32_t v) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(v, 0, 0x0123);
#else
  return __builtin_bswap32(v);
#endif
}
GB_HD uint64_t bswap64(uint64_t v) {
  return (static_cast<uint64_t>(bswap32(static_cast<uint32_t>(v))) << 32) |
         bswap32(static_cast<uint32_t>(v >> 32));
}

// Native 32/64-bit accesses to queue memory. Rings are byte buffers written through several widths
// (ctrl as 32-bit words, then read back as the 64-bit doorbell), so the accesses go through
// may_alias types: without them GCC's type-based alias analysis may reorder or forward them.
// `p` must be 4-byte aligned (8 for the 64-bit ones): true of every field gicbench touches.
typedef uint32_t __attribute__((__may_alias__)) u32_alias;
typedef uint64_t __attribute__((__may_alias__)) u64_alias;
GB_HD uint32_t load32(const void* p) { return *static_cast<const u32_alias*>(p); }
GB_HD void store32(void* p, uint32_t v) { *static_cast<u32_alias*>(p) = v; }
GB_HD uint64_t load64(const void* p) { return *static_cast<const u64_alias*>(p); }

// Big-endian stores/loads. 16-bit fields (AV rlid, CQE wqe_counter) go byte-wise; 64-bit fields as
// two 32-bit words: a segment is only guaranteed 4-byte aligned by the ring arithmetic.
GB_HD void put_be16(void* p, uint16_t v) {
  uint8_t* b = static_cast<uint8_t*>(p);
  b[0] = static_cast<uint8_t>(v >> 8);
  b[1] = static_cast<uint8_t>(v);
}
GB_HD void put_be32(void* p, uint32_t v) { store32(p, bswap32(v)); }
GB_HD void put_be64(void* p, uint64_t v) {
  uint8_t* b = static_cast<uint8_t*>(p);
  store32(b, bswap32(static_cast<uint32_t>(v >> 32)));
  store32(b + 4, bswap32(static_cast<uint32_t>(v)));
}
GB_HD uint16_t get_be16(const void* p) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  return static_cast<uint16_t>((b[0] << 8) | b[1]);
}
GB_HD uint32_t get_be32(const void* p) { return bswap32(load32(p)); }
GB_HD uint64_t get_be64(const void* p) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  return (static_cast<uint64_t>(bswap32(load32(b))) << 32) | bswap32(load32(b + 4));
}

// ---- ds and WQEBB arithmetic -------------------------------------------------------------------
GB_HD uint32_t inline_seg_ds(uint32_t len) { return (len + 4 + kSegBytes - 1) / kSegBytes; }
GB_HD uint32_t ds_to_wqebbs(uint32_t ds) { return (ds * kSegBytes + kWqebbBytes - 1) / kWqebbBytes; }

// Segment counts of the layouts gicbench posts.
constexpr uint32_t kDsCtrl = 1, kDsRaddr = 1, kDsData = 1, kDsAtomic = 1;
constexpr uint32_t kDsAvFull = kAvFullBytes / kSegBytes;
constexpr uint32_t kDsAvCompact = kAvCompactBytes / kSegBytes;
GB_HD uint32_t ds_rc_write(bool inl, uint32_t len) {
  return kDsCtrl + kDsRaddr + (inl ? inline_seg_ds(len) : kDsData);
}
GB_HD uint32_t ds_dc_write(bool inl, uint32_t len, bool compact_av) {
  return ds_rc_write(inl, len) + (compact_av ? kDsAvCompact : kDsAvFull);
}
GB_HD uint32_t ds_fetch_add(bool dc, bool compact_av) {
  return kDsCtrl + kDsRaddr + kDsAtomic + kDsData +
         (dc ? (compact_av ? kDsAvCompact : kDsAvFull) : 0);
}

// ---- extended atomics: operand sizes and segment counts ----------------------------------------
GB_HD uint8_t ext_atomic_opmod(uint32_t size) {  // size 4 or 8
  return static_cast<uint8_t>(kOpmodExtAtomic | (size == 8 ? 1 : 0));
}
// The operand bytes an opmod names (4 or 8); 0 for any other opmod (not served).
GB_HD uint32_t ext_atomic_size(uint8_t opmod) {
  return opmod == kOpmodExtAtomic ? 4u : opmod == (kOpmodExtAtomic | 1) ? 8u : 0u;
}
// Segments of the extended atomic segment: two for an 8-byte masked compare-and-swap
// (rdma-core's struct mlx5_wqe_masked_atomic_seg, 32 bytes), one otherwise.
GB_HD uint32_t masked_atomic_segs(uint8_t opcode, uint32_t size) {
  return opcode == kOpAtomicMaskedCs && size == 8 ? 2u : 1u;
}
GB_HD uint32_t ds_masked_atomic(uint8_t opcode, uint32_t size, bool dc, bool compact_av) {
  return kDsCtrl + kDsRaddr + masked_atomic_segs(opcode, size) + kDsData +
         (dc ? (compact_av ? kDsAvCompact : kDsAvFull) : 0);
}

// An SQ of `wqebb_cnt` (power of two) basic blocks; segments are addressed by a running 16-byte
// index so a WQE that crosses the end of the ring wraps to its start, as on the NIC.
struct SqRing {
  uint8_t* buf;
  uint32_t wqebb_cnt;
  GB_HD uint32_t bytes() const { return wqebb_cnt * kWqebbBytes; }
  GB_HD uint8_t* wqe(uint32_t wqe_index) const {
    return buf + (wqe_index & (wqebb_cnt - 1)) * kWqebbBytes;
  }
  // The `seg`-th 16-byte segment of the WQE that starts at `wqe_index`, wrapping at the SQ end.
  GB_HD uint8_t* seg(uint32_t wqe_index, uint32_t seg) const {
    uint32_t off = ((wqe_index & (wqebb_cnt - 1)) * kWqebbBytes + seg * kSegBytes) & (bytes() - 1);
    return buf + off;
  }
};

// ---- encoders (mirror rdma-core's mlx5dv_set_*_seg) -----------------------------------------------
// Byte for byte what mlx5dv_set_ctrl_seg writes into a zeroed segment for ds <= 63; ds is masked
// to its 6 bits (rdma-core would let a larger value spill into the reserved bits 7..6).
GB_HD void set_ctrl_seg(void* seg, uint16_t pi, uint8_t opcode, uint8_t opmod, uint32_t qpn,
                        uint8_t fm_ce_se, uint8_t ds, uint8_t signature, uint32_t imm) {
  uint8_t* b = static_cast<uint8_t*>(seg);
  put_be32(b + 0, (static_cast<uint32_t>(opmod) << 24) | (static_cast<uint32_t>(pi) << 8) | opcode);
  put_be32(b + 4, (qpn << 8) | (ds & kDsMask));
  b[8] = signature;
  b[9] = 0;  // dci_stream_channel_id (not used by gicbench)
  b[10] = 0;
  b[11] = fm_ce_se;
  store32(b + 12, imm);  // as passed (already in wire order for WRITE_IMM), like rdma-core
}

GB_HD void set_raddr_seg(void* seg, uint64_t raddr, uint32_t rkey) {
  uint8_t* b = static_cast<uint8_t*>(seg);
  put_be64(b + 0, raddr);
  put_be32(b + 8, rkey);
  store32(b + 12, 0);  // reserved
}

GB_HD void set_data_seg(void* seg, uint32_t length, uint32_t lkey, uint64_t addr) {
  uint8_t* b = static_cast<uint8_t*>(seg);
  put_be32(b + 0, length);
  put_be32(b + 4, lkey);
  put_be64(b + 8, addr);
}

GB_HD void set_atomic_seg(void* seg, uint64_t swap_add, uint64_t compare) {
  uint8_t* b = static_cast<uint8_t*>(seg);
  put_be64(b + 0, swap_add);
  put_be64(b + 8, compare);
}

// Masked fetch-add's extended atomic segment (16 bytes, big-endian). 4-byte operands: add,
// field_boundary (BE32 each), 8 reserved bytes; 8-byte operands: add, field_boundary (BE64 each,
// in struct mlx5_wqe_atomic_seg's swap_add and compare).
GB_HD void set_masked_fa_seg(void* seg, uint32_t size, uint64_t add, uint64_t field_boundary) {
  uint8_t* b = static_cast<uint8_t*>(seg);
  if (size == 4) {
    put_be32(b + 0, static_cast<uint32_t>(add));
    put_be32(b + 4, static_cast<uint32_t>(field_boundary));
    store32(b + 8, 0);
    store32(b + 12, 0);
  } else {
    put_be64(b + 0, add);
    put_be64(b + 8, field_boundary);
  }
}

// Masked compare-and-swap's extended atomic segment(s), big-endian. 4-byte operands: one segment
// of swap, compare, swap_mask, compare_mask (BE32); 8-byte operands: swap and compare in `seg0`,
// swap_mask and compare_mask in `seg1` (rdma-core's struct mlx5_wqe_masked_atomic_seg across two
// segments, which a WQE at the SQ end places apart).
GB_HD void set_masked_cs_seg(void* seg0, void* seg1, uint32_t size, uint64_t swap,
                             uint64_t compare, uint64_t swap_mask, uint64_t compare_mask) {
  uint8_t* b = static_cast<uint8_t*>(seg0);
  if (size == 4) {
    put_be32(b + 0, static_cast<uint32_t>(swap));
    put_be32(b + 4, static_cast<uint32_t>(compare));
    put_be32(b + 8, static_cast<uint32_t>(swap_mask));
    put_be32(b + 12, static_cast<uint32_t>(compare_mask));
  } else {
    uint8_t* m = static_cast<uint8_t*>(seg1);
    put_be64(b + 0, swap);
    put_be64(b + 8, compare);
    put_be64(m + 0, swap_mask);
    put_be64(m + 8, compare_mask);
  }
}

// Inline data segment starting at segment `first_seg` of the WQE at `wqe_index`: byte_count header
// then the payload, wrapping at the SQ end; the tail of the last 16-byte segment is zeroed.
// Returns the segments used (inline_seg_ds(len)).
GB_HD uint32_t set_inline_seg(const SqRing& sq, uint32_t wqe_index, uint32_t first_seg,
                              const void* data, uint32_t len) {
  const uint32_t nseg = inline_seg_ds(len);
  const uint8_t* src = static_cast<const uint8_t*>(data);
  uint8_t* hdr = sq.seg(wqe_index, first_seg);
  put_be32(hdr, len | kInlineFlag);
  // Payload and padding run from 4 bytes into the header segment; they wrap at most once.
  const uint32_t bytes = sq.bytes();
  uint32_t off = static_cast<uint32_t>(hdr - sq.buf) + 4;
  const uint32_t total = nseg * kSegBytes - 4;
  for (uint32_t i = 0; i < total; ++i, ++off) {
    if (off == bytes) off = 0;
    sq.buf[off] = (i < len) ? src[i] : 0;
  }
  return nseg;
}

struct AvFields {
  uint64_t dc_key;
  uint32_t dqp_dct;  // remote DCT number (24 bits); ext bit set for the full 48-byte form
  uint8_t stat_rate_sl;
  uint8_t fl_mlid;
  uint16_t rlid;
  uint8_t rmac[6];
  uint8_t tclass;
  uint8_t hop_limit;
  uint32_t grh_gid_fl;
  uint8_t rgid[16];
};

constexpr uint32_t kAvExt = 0x80000000u;  // dqp_dct bit 31: extended (GRH/MAC) address vector

// Full 48-byte AV (struct mlx5_wqe_av). `av` may span two segments of a wrapped WQE: callers pass
// the SQ and position; it occupies segments first_seg..first_seg+2.
GB_HD void set_av_full(const SqRing& sq, uint32_t wqe_index, uint32_t first_seg, const AvFields& f) {
  uint8_t* s0 = sq.seg(wqe_index, first_seg);
  uint8_t* s1 = sq.seg(wqe_index, first_seg + 1);
  uint8_t* s2 = sq.seg(wqe_index, first_seg + 2);
  put_be64(s0 + 0, f.dc_key);
  put_be32(s0 + 8, f.dqp_dct | kAvExt);
  s0[12] = f.stat_rate_sl;
  s0[13] = f.fl_mlid;
  put_be16(s0 + 14, f.rlid);
  for (int i = 0; i < 4; ++i) s1[i] = 0;
  for (int i = 0; i < 6; ++i) s1[4 + i] = f.rmac[i];
  s1[10] = f.tclass;
  s1[11] = f.hop_limit;
  put_be32(s1 + 12, f.grh_gid_fl);
  for (int i = 0; i < 16; ++i) s2[i] = f.rgid[i];
}

// Compact 16-byte AV (struct mlx5_base_av) for HCAs reporting compact_address_vector.
GB_HD void set_av_compact(void* seg, uint64_t dc_key, uint32_t dqp_dct, uint8_t stat_rate_sl,
                          uint8_t fl_mlid, uint16_t rlid) {
  uint8_t* b = static_cast<uint8_t*>(seg);
  put_be64(b + 0, dc_key);
  put_be32(b + 8, dqp_dct & ~kAvExt);
  b[12] = stat_rate_sl;
  b[13] = fl_mlid;
  put_be16(b + 14, rlid);
}

// ---- WQE decoders (what a NIC reads) --------------------------------------------------------------
struct CtrlView {
  uint8_t opcode;
  uint8_t opmod;
  uint16_t wqe_index;
  uint32_t qpn;
  uint8_t ds;
  uint8_t signature;
  uint8_t fm_ce_se;
  uint32_t imm;  // raw, as stored
};

GB_HD CtrlView get_ctrl_seg(const void* seg) {
  const uint8_t* b = static_cast<const uint8_t*>(seg);
  const uint32_t w0 = get_be32(b + 0), w1 = get_be32(b + 4);
  CtrlView c;
  c.opcode = static_cast<uint8_t>(w0 & 0xff);
  c.wqe_index = static_cast<uint16_t>((w0 >> 8) & 0xffff);
  c.opmod = static_cast<uint8_t>(w0 >> 24);
  c.qpn = w1 >> 8;
  c.ds = static_cast<uint8_t>(w1 & kDsMask);
  c.signature = b[8];
  c.fm_ce_se = b[11];
  c.imm = load32(b + 12);
  return c;
}

struct RaddrView {
  uint64_t raddr;
  uint32_t rkey;
};
GB_HD RaddrView get_raddr_seg(const void* seg) {
  const uint8_t* b = static_cast<const uint8_t*>(seg);
  return RaddrView{get_be64(b), get_be32(b + 8)};
}

struct DataView {
  uint32_t byte_count;  // with kInlineFlag set this is an inline header
  uint32_t lkey;
  uint64_t addr;
};
GB_HD DataView get_data_seg(const void* seg) {
  const uint8_t* b = static_cast<const uint8_t*>(seg);
  return DataView{get_be32(b), get_be32(b + 4), get_be64(b + 8)};
}

GB_HD bool is_inline(const void* seg) { return (get_be32(seg) & kInlineFlag) != 0; }

// Copy `len` inline payload bytes that start 4 bytes into segment `first_seg`, wrapping.
GB_HD void get_inline_payload(const SqRing& sq, uint32_t wqe_index, uint32_t first_seg, void* out,
                              uint32_t len) {
  uint8_t* dst = static_cast<uint8_t*>(out);
  const uint32_t bytes = sq.bytes();
  uint32_t off = static_cast<uint32_t>(sq.seg(wqe_index, first_seg) - sq.buf) + 4;
  for (uint32_t i = 0; i < len; ++i, ++off) {
    if (off == bytes) off = 0;
    dst[i] = sq.buf[off];
  }
}

struct AtomicView {
  uint64_t swap_add;
  uint64_t compare;
};
GB_HD AtomicView get_atomic_seg(const void* seg) {
  const uint8_t* b = static_cast<const uint8_t*>(seg);
  return AtomicView{get_be64(b), get_be64(b + 8)};
}

// An extended atomic segment as the NIC reads it. Masked fetch-add: swap_add is the addend and
// swap_add_mask the field boundary (compare, compare_mask 0); masked compare-and-swap: swap,
// compare, swap mask, compare mask. `seg1`: the second segment (8-byte compare-and-swap only).
struct MaskedAtomicView {
  uint64_t swap_add, compare, swap_add_mask, compare_mask;
};
GB_HD MaskedAtomicView get_masked_atomic(const void* seg0, const void* seg1, uint8_t opcode,
                                         uint32_t size) {
  const uint8_t* b = static_cast<const uint8_t*>(seg0);
  if (opcode == kOpAtomicMaskedFa) {
    if (size == 4) return MaskedAtomicView{get_be32(b), 0, get_be32(b + 4), 0};
    return MaskedAtomicView{get_be64(b), 0, get_be64(b + 8), 0};
  }
  if (size == 4) return MaskedAtomicView{get_be32(b), get_be32(b + 4), get_be32(b + 8),
                                         get_be32(b + 12)};
  const uint8_t* m = static_cast<const uint8_t*>(seg1);
  return MaskedAtomicView{get_be64(b), get_be64(b + 8), get_be64(m), get_be64(m + 8)};
}

struct AvView {
  uint64_t dc_key;
  uint32_t dqp_dct;  // without the ext bit
  bool ext;          // full 48-byte form
};
GB_HD AvView get_av(const void* first_seg) {
  const uint8_t* b = static_cast<const uint8_t*>(first_seg);
  const uint32_t d = get_be32(b + 8);
  return AvView{get_be64(b), d & ~kAvExt, (d & kAvExt) != 0};
}

// ---- CQEs -----------------------------------------------------------------------------------------
constexpr uint32_t kCqeImm = 36, kCqeByteCnt = 44, kCqeTimestamp = 48, kCqeSopQpn = 56,
                   kCqeWqeCounter = 60, kCqeSignature = 62, kCqeOpOwn = 63;
constexpr uint32_t kErrCqeVendorSynd = 54, kErrCqeSyndrome = 55;

struct CqeView {
  uint8_t opcode;  // CqeOpcode
  uint8_t owner;
  uint16_t wqe_counter;
  uint32_t byte_cnt;
  uint32_t qpn;
  uint8_t wqe_opcode;  // requester: the send opcode of the completed WQE (sop_drop_qpn bits 31..24)
  uint32_t imm;        // raw imm_inval_pkey (responder WRITE_IMM)
  uint8_t syndrome;    // error CQEs only
  uint8_t vendor_syndrome;
  uint64_t timestamp;
};

// Error CQEs (struct mlx5_err_cqe) have no byte_cnt, imm or timestamp: bytes 36..53 are reserved
// and the syndromes sit in the timestamp's last two bytes, so those fields decode as 0 there.
GB_HD CqeView get_cqe(const void* cqe) {
  const uint8_t* b = static_cast<const uint8_t*>(cqe);
  CqeView v;
  const uint8_t op_own = b[kCqeOpOwn];
  v.opcode = op_own >> 4;
  v.owner = op_own & 1;
  v.wqe_counter = get_be16(b + kCqeWqeCounter);
  const uint32_t sop = get_be32(b + kCqeSopQpn);
  v.qpn = sop & 0xffffff;
  v.wqe_opcode = static_cast<uint8_t>(sop >> 24);
  const bool err = v.opcode == kCqeReqErr || v.opcode == kCqeRespErr;
  v.byte_cnt = err ? 0 : get_be32(b + kCqeByteCnt);
  v.imm = err ? 0 : load32(b + kCqeImm);
  v.timestamp = err ? 0 : get_be64(b + kCqeTimestamp);
  v.syndrome = err ? b[kErrCqeSyndrome] : 0;
  v.vendor_syndrome = err ? b[kErrCqeVendorSynd] : 0;
  return v;
}

// Owner bit a valid CQE carries at consumer index ci on a CQ of ncqe (power of two) entries.
GB_HD uint8_t cqe_owner_for(uint32_t ci, uint32_t ncqe) { return (ci & ncqe) ? 1 : 0; }

// True when the CQE at consumer index ci has been written by the NIC for this pass of the ring.
GB_HD bool cqe_ready(const void* cqe, uint32_t ci, uint32_t ncqe) {
  const uint8_t op_own = static_cast<const uint8_t*>(cqe)[kCqeOpOwn];
  return (op_own >> 4) != kCqeInvalid && (op_own & 1) == cqe_owner_for(ci, ncqe);
}

// A fresh CQ entry: op_own = INVALID<<4, as the driver initialises the buffer; the NIC's first pass
// over the ring writes owner 0.
GB_HD void cqe_init(void* cqe) {
  uint8_t* b = static_cast<uint8_t*>(cqe);
  for (uint32_t i = 0; i < kCqeBytes; ++i) b[i] = 0;
  b[kCqeOpOwn] = static_cast<uint8_t>(kCqeInvalid << 4);
}

// Writers used by NIC engines. The op_own byte is written last by the caller's ordering (the engine
// publishes it with a release store after the body); these helpers fill the body and return op_own.
GB_HD uint8_t fill_req_cqe(void* cqe, uint32_t qpn, uint8_t wqe_opcode, uint16_t wqe_counter,
                           uint32_t byte_cnt, uint64_t timestamp, uint8_t owner) {
  uint8_t* b = static_cast<uint8_t*>(cqe);
  for (uint32_t i = 0; i < kCqeOpOwn; ++i) b[i] = 0;
  put_be32(b + kCqeByteCnt, byte_cnt);
  put_be64(b + kCqeTimestamp, timestamp);
  put_be32(b + kCqeSopQpn, (static_cast<uint32_t>(wqe_opcode) << 24) | (qpn & 0xffffff));
  put_be16(b + kCqeWqeCounter, wqe_counter);
  return static_cast<uint8_t>((kCqeReq << 4) | (owner & 1));
}

GB_HD uint8_t fill_resp_cqe(void* cqe, uint8_t cqe_opcode, uint32_t qpn, uint16_t wqe_counter,
                            uint32_t byte_cnt, uint32_t raw_imm, uint64_t timestamp,
                            uint8_t owner) {
  uint8_t* b = static_cast<uint8_t*>(cqe);
  for (uint32_t i = 0; i < kCqeOpOwn; ++i) b[i] = 0;
  store32(b + kCqeImm, raw_imm);
  put_be32(b + kCqeByteCnt, byte_cnt);
  put_be64(b + kCqeTimestamp, timestamp);
  put_be32(b + kCqeSopQpn, qpn & 0xffffff);
  put_be16(b + kCqeWqeCounter, wqe_counter);
  return static_cast<uint8_t>((cqe_opcode << 4) | (owner & 1));
}

GB_HD uint8_t fill_err_cqe(void* cqe, uint8_t cqe_opcode, uint8_t syndrome, uint8_t vendor_synd,
                           uint32_t qpn, uint8_t wqe_opcode, uint16_t wqe_counter, uint8_t owner) {
  uint8_t* b = static_cast<uint8_t*>(cqe);
  for (uint32_t i = 0; i < kCqeOpOwn; ++i) b[i] = 0;
  b[kErrCqeVendorSynd] = vendor_synd;
  b[kErrCqeSyndrome] = syndrome;
  put_be32(b + kCqeSopQpn, (static_cast<uint32_t>(wqe_opcode) << 24) | (qpn & 0xffffff));
  put_be16(b + kCqeWqeCounter, wqe_counter);
  return static_cast<uint8_t>((cqe_opcode << 4) | (owner & 1));
}

// ---- whole WQEs (the layouts of reference/mlx5.md), twins of gicbench.mlx5.SqRing.post_* --------
// Each writes the WQE at producer index `pi` (body first, ctrl last) and returns its WQEBBs. An AV
// (DC) goes right after ctrl: the 48-byte form, or the 16-byte one with `compact_av`. Callers keep
// the WQE within ds <= 63 and the free part of the SQ (an inline payload of at most
// (63 - 2 - AV segments) * 16 - 4 bytes); nothing here checks, as on the GPU there is no one to tell.
GB_HD uint32_t set_av_at(const SqRing& sq, uint32_t pi, uint32_t seg, const AvFields* av,
                         bool compact_av) {
  if (!av) return 0;
  if (compact_av) {
    set_av_compact(sq.seg(pi, seg), av->dc_key, av->dqp_dct, av->stat_rate_sl, av->fl_mlid,
                   av->rlid);
    return kDsAvCompact;
  }
  set_av_full(sq, pi, seg, *av);
  return kDsAvFull;
}

// RDMA WRITE (with_imm: WRITE_WITH_IMM, `imm` in wire order). inline_data non-null: `length` bytes
// go inline; else a pointer data segment (length, lkey, laddr).
GB_HD uint32_t build_rdma_write(const SqRing& sq, uint32_t pi, uint32_t qpn, uint64_t raddr,
                                uint32_t rkey, const void* inline_data, uint32_t length,
                                uint32_t lkey, uint64_t laddr, uint8_t fm_ce_se, bool with_imm,
                                uint32_t imm, const AvFields* av = nullptr,
                                bool compact_av = false) {
  uint32_t seg = 1 + set_av_at(sq, pi, 1, av, compact_av);
  set_raddr_seg(sq.seg(pi, seg++), raddr, rkey);
  if (inline_data) {
    seg += set_inline_seg(sq, pi, seg, inline_data, length);
  } else {
    set_data_seg(sq.seg(pi, seg++), length, lkey, laddr);
  }
  set_ctrl_seg(sq.wqe(pi), static_cast<uint16_t>(pi), with_imm ? kOpRdmaWriteImm : kOpRdmaWrite,
               0, qpn, fm_ce_se, static_cast<uint8_t>(seg), 0, with_imm ? imm : 0);
  return ds_to_wqebbs(seg);
}

// ATOMIC fetch-add of `add` on the 8-byte word at raddr; the old value lands at laddr (lkey).
GB_HD uint32_t build_fetch_add(const SqRing& sq, uint32_t pi, uint32_t qpn, uint64_t raddr,
                               uint32_t rkey, uint64_t add, uint32_t lkey, uint64_t laddr,
                               uint8_t fm_ce_se, const AvFields* av = nullptr,
                               bool compact_av = false) {
  uint32_t seg = 1 + set_av_at(sq, pi, 1, av, compact_av);
  set_raddr_seg(sq.seg(pi, seg++), raddr, rkey);
  set_atomic_seg(sq.seg(pi, seg++), add, 0);
  set_data_seg(sq.seg(pi, seg++), 8, lkey, laddr);
  set_ctrl_seg(sq.wqe(pi), static_cast<uint16_t>(pi), kOpAtomicFa, 0, qpn, fm_ce_se,
               static_cast<uint8_t>(seg), 0, 0);
  return ds_to_wqebbs(seg);
}

// Masked fetch-add of `add` (field boundaries `field_boundary`; 0 = a plain add) on the `size`
// (4 or 8) bytes at raddr; the old value, `size` bytes, lands at laddr (lkey).
GB_HD uint32_t build_masked_fetch_add(const SqRing& sq, uint32_t pi, uint32_t qpn, uint64_t raddr,
                                      uint32_t rkey, uint32_t size, uint64_t add,
                                      uint64_t field_boundary, uint32_t lkey, uint64_t laddr,
                                      uint8_t fm_ce_se, const AvFields* av = nullptr,
                                      bool compact_av = false) {
  uint32_t seg = 1 + set_av_at(sq, pi, 1, av, compact_av);
  set_raddr_seg(sq.seg(pi, seg++), raddr, rkey);
  set_masked_fa_seg(sq.seg(pi, seg++), size, add, field_boundary);
  set_data_seg(sq.seg(pi, seg++), size, lkey, laddr);
  set_ctrl_seg(sq.wqe(pi), static_cast<uint16_t>(pi), kOpAtomicMaskedFa, ext_atomic_opmod(size),
               qpn, fm_ce_se, static_cast<uint8_t>(seg), 0, 0);
  return ds_to_wqebbs(seg);
}

// Masked compare-and-swap on the `size` (4 or 8) bytes at raddr: when ((old ^ compare) &
// compare_mask) == 0 they become (old & ~swap_mask) | (swap & swap_mask); the old value lands at
// laddr (lkey).
GB_HD uint32_t build_masked_cmp_swap(const SqRing& sq, uint32_t pi, uint32_t qpn, uint64_t raddr,
                                     uint32_t rkey, uint32_t size, uint64_t swap,
                                     uint64_t compare, uint64_t swap_mask, uint64_t compare_mask,
                                     uint32_t lkey, uint64_t laddr, uint8_t fm_ce_se,
                                     const AvFields* av = nullptr, bool compact_av = false) {
  uint32_t seg = 1 + set_av_at(sq, pi, 1, av, compact_av);
  set_raddr_seg(sq.seg(pi, seg++), raddr, rkey);
  set_masked_cs_seg(sq.seg(pi, seg), sq.seg(pi, seg + 1), size, swap, compare, swap_mask,
                    compare_mask);
  seg += masked_atomic_segs(kOpAtomicMaskedCs, size);
  set_data_seg(sq.seg(pi, seg++), size, lkey, laddr);
  set_ctrl_seg(sq.wqe(pi), static_cast<uint16_t>(pi), kOpAtomicMaskedCs, ext_atomic_opmod(size),
               qpn, fm_ce_se, static_cast<uint8_t>(seg), 0, 0);
  return ds_to_wqebbs(seg);
}

// NOP: a control segment alone.
GB_HD uint32_t build_nop(const SqRing& sq, uint32_t pi, uint32_t qpn, uint8_t fm_ce_se) {
  set_ctrl_seg(sq.wqe(pi), static_cast<uint16_t>(pi), kOpNop, 0, qpn, fm_ce_se, 1, 0, 0);
  return 1;
}

// ---- doorbells -----------------------------------------------------------------------------------
// The native 32-bit words to store into doorbell records: memory then holds BE32 of the index.
GB_HD uint32_t dbrec_value(uint32_t pi) { return bswap32(pi & 0xffffu); }    // dbrec[kSndDbr]
GB_HD uint32_t cq_ci_value(uint32_t ci) { return bswap32(ci & 0xffffffu); }  // dbrec[kCqSetCi]

// The 8 bytes a doorbell carries: the first 8 bytes of the last WQE's control segment.
// Stored as a native 64-bit word, it writes those 8 bytes unchanged. ctrl_seg: 8-byte aligned.
GB_HD uint64_t doorbell_value(const void* ctrl_seg) { return load64(ctrl_seg); }

}  // namespace mlx5
}  // namespace gicbench
