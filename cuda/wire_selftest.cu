// Self-test of cuda/mlx5.cuh on the GPU: each thread encodes one case from a parameter table into
// its own slice of a device buffer, with the same __device__ code the GPU submitter and the CUDA
// engine use. tests/test_wire_cuda.py builds the same bytes with gicbench.mlx5 (numpy) and compares.
//
// Case table: kWords 64-bit words per case (see the k* indices below).
// Output: kCaseBytes per case, zeroed by the caller:
//   [0, 256)    an SQ ring of 4 WQEBBs: the WQE at producer index `pi` (wrapping at the end)
//   [256, 320)  a CQE with op_own set (CQE kinds)
//   [320, 384)  results read back on the device: see write_wqe_results / write_cqe_results
#include "mlx5.cuh"

namespace gicbench {
namespace selftest {

namespace m5 = gicbench::mlx5;

constexpr uint32_t kWords = 16;
constexpr uint32_t kRingWqebbs = 4;
constexpr uint32_t kRingBytes = kRingWqebbs * m5::kWqebbBytes;
constexpr uint32_t kCqeOffset = kRingBytes;
constexpr uint32_t kResultOffset = kCqeOffset + m5::kCqeBytes;
constexpr uint32_t kCaseBytes = kResultOffset + 64;
constexpr uint32_t kMaxInline = 160;

// Case kinds (word 0).
enum Kind : uint32_t {
  kWrite = 0,      // RDMA WRITE / WRITE_IMM, pointer or inline, RC or DC
  kFetchAdd = 1,   // ATOMIC fetch-add, RC or DC
  kNop = 2,        // NOP
  kReqCqe = 3,     // requester CQE
  kRespCqe = 4,    // responder CQE
  kErrCqe = 5,     // error CQE
};

// Word indices. WQE kinds:
enum WqeWord : uint32_t {
  kKind = 0,
  kPi = 1,
  kQpn = 2,
  kRaddr = 3,
  kRkey = 4,
  kLkey = 5,
  kLaddr = 6,
  kLength = 7,   // pointer length, or inline payload length
  kFmCeSe = 8,
  kImm = 9,      // wire-order immediate
  kFlags = 10,   // kWithImm | kInline | kDc | kCompactAv
  kAddOrKey = 11,  // fetch-add addend; (DC) also the AV's dc_key
  kDctNum = 12,
  kSeed = 13,    // inline payload bytes and the AV's other fields derive from it
};
enum WqeFlag : uint32_t { kWithImm = 1, kInline = 2, kDc = 4, kCompactAv = 8 };

// CQE kinds:
enum CqeWord : uint32_t {
  kCqeQpn = 1,
  kCqeWqeOpcode = 2,
  kCqeWqeCounter = 3,
  kCqeByteCnt = 4,
  kCqeTimestamp = 5,
  kCqeOwner = 6,
  kCqeOpcode = 7,
  kCqeImm = 8,
  kCqeSyndrome = 9,
  kCqeVendorSynd = 10,
  kCqeCi = 11,    // consumer index and CQ size for cqe_ready
  kCqeNcqe = 12,
};

// Inline payload byte i and the AV of a case, from its seed (gicbench.mlx5 twin in the test).
GB_HD uint8_t payload_byte(uint64_t seed, uint32_t i) {
  return static_cast<uint8_t>(seed + 13u * i);
}

GB_HD m5::AvFields av_from_seed(uint64_t dc_key, uint32_t dct_num, uint64_t seed) {
  m5::AvFields f;
  f.dc_key = dc_key;
  f.dqp_dct = dct_num;
  f.stat_rate_sl = static_cast<uint8_t>(seed);
  f.fl_mlid = static_cast<uint8_t>(seed >> 8);
  f.rlid = static_cast<uint16_t>(seed >> 16);
  for (uint32_t i = 0; i < 6; ++i) f.rmac[i] = static_cast<uint8_t>(seed + 3u * i);
  f.tclass = static_cast<uint8_t>(seed >> 32);
  f.hop_limit = static_cast<uint8_t>(seed >> 40);
  f.grh_gid_fl = static_cast<uint32_t>(seed >> 24);
  for (uint32_t i = 0; i < 16; ++i) f.rgid[i] = static_cast<uint8_t>(7u * seed + i);
  return f;
}

GB_HD void put_u32(uint8_t* p, uint32_t v) { m5::store32(p, v); }
GB_HD void put_u64(uint8_t* p, uint64_t v) {
  m5::store32(p, static_cast<uint32_t>(v));
  m5::store32(p + 4, static_cast<uint32_t>(v >> 32));
}

// Results of a WQE case (little-endian words): [0] doorbell_value u64, [8] dbrec word as stored,
// [12] CQ ci word as stored, [16..40) the ctrl segment decoded on the device (opcode, wqe_index,
// qpn, ds, fm_ce_se, imm), [40] WQEBBs returned by the builder, [44..60) inline payload read back.
GB_HD void write_wqe_results(const m5::SqRing& sq, uint32_t pi, uint32_t wqebbs,
                                  uint32_t inline_len, uint32_t inline_seg, uint8_t* res) {
  const uint8_t* ctrl = sq.wqe(pi);
  put_u64(res + 0, m5::doorbell_value(ctrl));
  put_u32(res + 8, m5::dbrec_value(pi));
  put_u32(res + 12, m5::cq_ci_value(pi));
  const m5::CtrlView c = m5::get_ctrl_seg(ctrl);
  put_u32(res + 16, c.opcode);
  put_u32(res + 20, c.wqe_index);
  put_u32(res + 24, c.qpn);
  put_u32(res + 28, c.ds);
  put_u32(res + 32, c.fm_ce_se);
  put_u32(res + 36, c.imm);
  put_u32(res + 40, wqebbs);
  if (inline_len) {
    uint8_t tmp[16];
    const uint32_t n = inline_len < 16 ? inline_len : 16;
    m5::get_inline_payload(sq, pi, inline_seg, tmp, n);
    for (uint32_t i = 0; i < n; ++i) res[44 + i] = tmp[i];
  }
}

// Results of a CQE case: get_cqe's fields as u32 at [0..36), timestamp u64 at [40], cqe_ready at
// [48] for (ci, ncqe) of the case.
GB_HD void write_cqe_results(const uint8_t* cqe, uint32_t ci, uint32_t ncqe, uint8_t* res) {
  const m5::CqeView v = m5::get_cqe(cqe);
  put_u32(res + 0, v.opcode);
  put_u32(res + 4, v.owner);
  put_u32(res + 8, v.wqe_counter);
  put_u32(res + 12, v.byte_cnt);
  put_u32(res + 16, v.qpn);
  put_u32(res + 20, v.wqe_opcode);
  put_u32(res + 24, v.imm);
  put_u32(res + 28, v.syndrome);
  put_u32(res + 32, v.vendor_syndrome);
  put_u64(res + 40, v.timestamp);
  put_u32(res + 48, m5::cqe_ready(cqe, ci, ncqe) ? 1u : 0u);
}

GB_HD void run_case(const uint64_t* w, uint8_t* out) {
  const m5::SqRing sq{out, kRingWqebbs};
  uint8_t* cqe = out + kCqeOffset;
  uint8_t* res = out + kResultOffset;
  const uint32_t kind = static_cast<uint32_t>(w[kKind]);
  if (kind == kWrite || kind == kFetchAdd || kind == kNop) {
    const uint32_t pi = static_cast<uint32_t>(w[kPi]);
    const uint32_t qpn = static_cast<uint32_t>(w[kQpn]);
    const uint32_t flags = static_cast<uint32_t>(w[kFlags]);
    const uint8_t fm_ce_se = static_cast<uint8_t>(w[kFmCeSe]);
    const m5::AvFields av =
        av_from_seed(w[kAddOrKey], static_cast<uint32_t>(w[kDctNum]), w[kSeed]);
    const m5::AvFields* avp = (flags & kDc) ? &av : nullptr;
    const bool compact = (flags & kCompactAv) != 0;
    uint32_t wqebbs = 0, inline_len = 0;
    if (kind == kWrite) {
      const bool inl = (flags & kInline) != 0;
      uint8_t payload[kMaxInline];
      uint32_t len = static_cast<uint32_t>(w[kLength]);
      if (inl) {
        if (len > kMaxInline) len = kMaxInline;
        for (uint32_t i = 0; i < len; ++i) payload[i] = payload_byte(w[kSeed], i);
        inline_len = len;
      }
      wqebbs = m5::build_rdma_write(sq, pi, qpn, w[kRaddr], static_cast<uint32_t>(w[kRkey]),
                                    inl ? payload : nullptr, len, static_cast<uint32_t>(w[kLkey]),
                                    w[kLaddr], fm_ce_se, (flags & kWithImm) != 0,
                                    static_cast<uint32_t>(w[kImm]), avp, compact);
    } else if (kind == kFetchAdd) {
      wqebbs = m5::build_fetch_add(sq, pi, qpn, w[kRaddr], static_cast<uint32_t>(w[kRkey]),
                                   w[kAddOrKey], static_cast<uint32_t>(w[kLkey]), w[kLaddr],
                                   fm_ce_se, avp, compact);
    } else {
      wqebbs = m5::build_nop(sq, pi, qpn, fm_ce_se);
    }
    const uint32_t av_segs = avp ? (compact ? m5::kDsAvCompact : m5::kDsAvFull) : 0;
    write_wqe_results(sq, pi, wqebbs, inline_len, 2 + av_segs, res);
    return;
  }
  const uint32_t qpn = static_cast<uint32_t>(w[kCqeQpn]);
  const uint16_t wc = static_cast<uint16_t>(w[kCqeWqeCounter]);
  const uint8_t owner = static_cast<uint8_t>(w[kCqeOwner]);
  uint8_t op_own = 0;
  if (kind == kReqCqe) {
    op_own = m5::fill_req_cqe(cqe, qpn, static_cast<uint8_t>(w[kCqeWqeOpcode]), wc,
                              static_cast<uint32_t>(w[kCqeByteCnt]), w[kCqeTimestamp], owner);
  } else if (kind == kRespCqe) {
    op_own = m5::fill_resp_cqe(cqe, static_cast<uint8_t>(w[kCqeOpcode]), qpn, wc,
                               static_cast<uint32_t>(w[kCqeByteCnt]),
                               static_cast<uint32_t>(w[kCqeImm]), w[kCqeTimestamp], owner);
  } else if (kind == kErrCqe) {
    op_own = m5::fill_err_cqe(cqe, static_cast<uint8_t>(w[kCqeOpcode]),
                              static_cast<uint8_t>(w[kCqeSyndrome]),
                              static_cast<uint8_t>(w[kCqeVendorSynd]), qpn,
                              static_cast<uint8_t>(w[kCqeWqeOpcode]), wc, owner);
  } else {
    return;  // unknown kind: leaves zeros, which the test reports
  }
  cqe[m5::kCqeOpOwn] = op_own;
  write_cqe_results(cqe, static_cast<uint32_t>(w[kCqeCi]), static_cast<uint32_t>(w[kCqeNcqe]),
                    res);
}

}  // namespace selftest
}  // namespace gicbench

// One thread per case: params holds ncase * 16 words, out ncase * 384 zeroed bytes.
extern "C" __global__ void gicbench_wire_selftest(const unsigned long long* params, int ncase,
                                                  unsigned char* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= ncase) return;
  gicbench::selftest::run_case(
      reinterpret_cast<const uint64_t*>(params) + i * gicbench::selftest::kWords,
      out + static_cast<unsigned long long>(i) * gicbench::selftest::kCaseBytes);
}
