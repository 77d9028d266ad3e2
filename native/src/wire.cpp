// Python bindings of cuda/mlx5.cuh: the C++ twin of gicbench.mlx5, compared byte for byte in tests.
// Bytes in, bytes out: every function here only calls the header, so what the tests check is the
// code that CUDA kernels and the proxy run.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.hpp"
#include "mlx5.cuh"

namespace nb = nanobind;
namespace m5 = gicbench::mlx5;

namespace gicbench {
namespace {

nb::bytes to_bytes(const uint8_t* p, size_t n) {
  return nb::bytes(reinterpret_cast<const char*>(p), n);
}

// A 4-byte-aligned copy of `b` (at least `n` bytes): the header's loads assume aligned fields.
struct Aligned {
  alignas(64) uint8_t buf[64];
  Aligned(const nb::bytes& b, size_t n, const char* what) {
    if (b.size() < n)
      throw std::invalid_argument(std::string(what) + ": need " + std::to_string(n) +
                                  " bytes, got " + std::to_string(b.size()));
    std::memset(buf, 0, sizeof buf);
    std::memcpy(buf, b.c_str(), n);
  }
};

// A ring image (wqebb_cnt WQEBBs) owned by C++ for the duration of one call.
struct Ring {
  std::vector<uint64_t> store;  // 8-byte aligned storage
  m5::SqRing sq;
  Ring(const nb::bytes& img, uint32_t wqebb_cnt) : store(wqebb_cnt * m5::kWqebbBytes / 8) {
    if (wqebb_cnt == 0 || (wqebb_cnt & (wqebb_cnt - 1)))
      throw std::invalid_argument("wqebb_cnt=" + std::to_string(wqebb_cnt) +
                                  ": must be a power of two >= 1");
    if (img.size() != wqebb_cnt * m5::kWqebbBytes)
      throw std::invalid_argument("ring: need " + std::to_string(wqebb_cnt * m5::kWqebbBytes) +
                                  " bytes, got " + std::to_string(img.size()));
    sq = m5::SqRing{reinterpret_cast<uint8_t*>(store.data()), wqebb_cnt};
    std::memcpy(sq.buf, img.c_str(), img.size());
  }
  nb::bytes image() const { return to_bytes(sq.buf, sq.bytes()); }
};

m5::AvFields av_from_dict(const nb::dict& d) {
  m5::AvFields f{};
  auto get = [&](const char* k, uint64_t dflt) -> uint64_t {
    return d.contains(k) ? nb::cast<uint64_t>(d[k]) : dflt;
  };
  auto get_bytes = [&](const char* k, uint8_t* out, size_t n) {
    if (!d.contains(k)) return;
    nb::bytes b = nb::cast<nb::bytes>(d[k]);
    if (b.size() != n)
      throw std::invalid_argument(std::string("av.") + k + ": need " + std::to_string(n) + " bytes");
    std::memcpy(out, b.c_str(), n);
  };
  f.dc_key = get("dc_key", 0);
  f.dqp_dct = static_cast<uint32_t>(get("dct_num", 0));
  f.stat_rate_sl = static_cast<uint8_t>(get("stat_rate_sl", 0));
  f.fl_mlid = static_cast<uint8_t>(get("fl_mlid", 0));
  f.rlid = static_cast<uint16_t>(get("rlid", 0));
  get_bytes("rmac", f.rmac, 6);
  f.tclass = static_cast<uint8_t>(get("tclass", 0));
  f.hop_limit = static_cast<uint8_t>(get("hop_limit", 0));
  f.grh_gid_fl = static_cast<uint32_t>(get("grh_gid_fl", 0));
  get_bytes("rgid", f.rgid, 16);
  return f;
}

uint8_t flags(bool signaled, bool fence) {
  return static_cast<uint8_t>((signaled ? m5::kCqUpdate : 0) | (fence ? m5::kFence : 0));
}

nb::dict cqe_dict(const m5::CqeView& v) {
  nb::dict d;
  d["opcode"] = v.opcode;
  d["owner"] = v.owner;
  d["wqe_counter"] = v.wqe_counter;
  d["byte_cnt"] = v.byte_cnt;
  d["qpn"] = v.qpn;
  d["wqe_opcode"] = v.wqe_opcode;
  d["imm"] = v.imm;
  d["syndrome"] = v.syndrome;
  d["vendor_syndrome"] = v.vendor_syndrome;
  d["timestamp"] = v.timestamp;
  return d;
}

void bind_segments(nb::module_ m) {
  m.def(
      "ctrl_seg",
      [](uint16_t pi, uint8_t opcode, uint8_t opmod, uint32_t qpn, uint8_t fm_ce_se, uint8_t ds,
         uint8_t signature, uint32_t imm) {
        alignas(16) uint8_t b[16];
        m5::set_ctrl_seg(b, pi, opcode, opmod, qpn, fm_ce_se, ds, signature, imm);
        return to_bytes(b, sizeof b);
      },
      nb::arg("pi"), nb::arg("opcode"), nb::arg("opmod"), nb::arg("qpn"), nb::arg("fm_ce_se"),
      nb::arg("ds"), nb::arg("signature") = 0, nb::arg("imm") = 0);
  m.def("raddr_seg", [](uint64_t raddr, uint32_t rkey) {
    alignas(16) uint8_t b[16];
    m5::set_raddr_seg(b, raddr, rkey);
    return to_bytes(b, sizeof b);
  });
  m.def("data_seg", [](uint32_t length, uint32_t lkey, uint64_t addr) {
    alignas(16) uint8_t b[16];
    m5::set_data_seg(b, length, lkey, addr);
    return to_bytes(b, sizeof b);
  });
  m.def(
      "atomic_seg",
      [](uint64_t swap_add, uint64_t compare) {
        alignas(16) uint8_t b[16];
        m5::set_atomic_seg(b, swap_add, compare);
        return to_bytes(b, sizeof b);
      },
      nb::arg("swap_add"), nb::arg("compare") = 0);
  // Extended atomics: the masked fetch-add segment (16 bytes) and the masked compare-and-swap
  // segment(s) (16 bytes for 4-byte operands, 32 for 8-byte ones).
  m.def(
      "masked_fa_seg",
      [](uint32_t size, uint64_t add, uint64_t field_boundary) {
        alignas(16) uint8_t b[16];
        m5::set_masked_fa_seg(b, size, add, field_boundary);
        return to_bytes(b, sizeof b);
      },
      nb::arg("size"), nb::arg("add"), nb::arg("field_boundary") = 0);
  m.def(
      "masked_cs_seg",
      [](uint32_t size, uint64_t swap, uint64_t compare, uint64_t swap_mask,
         uint64_t compare_mask) {
        alignas(16) uint8_t b[32] = {};
        m5::set_masked_cs_seg(b, b + 16, size, swap, compare, swap_mask, compare_mask);
        return to_bytes(b, 16 * m5::masked_atomic_segs(m5::kOpAtomicMaskedCs, size));
      },
      nb::arg("size"), nb::arg("swap"), nb::arg("compare"), nb::arg("swap_mask"),
      nb::arg("compare_mask"));
  m.def("ext_atomic_opmod", &m5::ext_atomic_opmod, nb::arg("size"));
  m.def("ext_atomic_size", &m5::ext_atomic_size, nb::arg("opmod"));
  m.def("ds_masked_atomic", &m5::ds_masked_atomic, nb::arg("opcode"), nb::arg("size"),
        nb::arg("dc") = false, nb::arg("compact_av") = false);
  // The 48-byte AV, written through a one-WQEBB ring as set_av_full is.
  m.def("av_full", [](nb::dict fields) {
    alignas(64) uint8_t b[64] = {};
    const m5::AvFields f = av_from_dict(fields);
    m5::set_av_full(m5::SqRing{b, 1}, 0, 0, f);
    return to_bytes(b, m5::kAvFullBytes);
  });
  m.def(
      "av_compact",
      [](uint64_t dc_key, uint32_t dct_num, uint8_t stat_rate_sl, uint8_t fl_mlid, uint16_t rlid) {
        alignas(16) uint8_t b[16];
        m5::set_av_compact(b, dc_key, dct_num, stat_rate_sl, fl_mlid, rlid);
        return to_bytes(b, sizeof b);
      },
      nb::arg("dc_key"), nb::arg("dct_num"), nb::arg("stat_rate_sl") = 0, nb::arg("fl_mlid") = 0,
      nb::arg("rlid") = 0);
  // Inline segment(s) for `payload`, written by set_inline_seg at the start of a ring just big
  // enough (so nothing wraps): header, payload, zero padding.
  m.def("inline_seg", [](nb::bytes payload) {
    const uint32_t len = static_cast<uint32_t>(payload.size());
    const uint32_t nseg = m5::inline_seg_ds(len);
    uint32_t wqebbs = 1;
    while (wqebbs * m5::kWqebbBytes < nseg * m5::kSegBytes) wqebbs <<= 1;
    std::vector<uint64_t> store(wqebbs * m5::kWqebbBytes / 8, 0);
    const m5::SqRing sq{reinterpret_cast<uint8_t*>(store.data()), wqebbs};
    m5::set_inline_seg(sq, 0, 0, payload.c_str(), len);
    return to_bytes(sq.buf, nseg * m5::kSegBytes);
  });
  m.def("inline_seg_ds", &m5::inline_seg_ds);
  m.def("ds_to_wqebbs", &m5::ds_to_wqebbs);
  m.def("ds_rc_write", &m5::ds_rc_write, nb::arg("inline"), nb::arg("length"));
  m.def("ds_dc_write", &m5::ds_dc_write, nb::arg("inline"), nb::arg("length"),
        nb::arg("compact_av"));
  m.def("ds_fetch_add", &m5::ds_fetch_add, nb::arg("dc"), nb::arg("compact_av"));
}

void bind_decoders(nb::module_ m) {
  m.def("decode_ctrl", [](nb::bytes b) {
    const Aligned a(b, 16, "ctrl segment");
    const m5::CtrlView c = m5::get_ctrl_seg(a.buf);
    nb::dict d;
    d["opcode"] = c.opcode;
    d["opmod"] = c.opmod;
    d["wqe_index"] = c.wqe_index;
    d["qpn"] = c.qpn;
    d["ds"] = c.ds;
    d["signature"] = c.signature;
    d["fm_ce_se"] = c.fm_ce_se;
    d["imm"] = c.imm;
    return d;
  });
  m.def("decode_raddr", [](nb::bytes b) {
    const Aligned a(b, 16, "raddr segment");
    const m5::RaddrView r = m5::get_raddr_seg(a.buf);
    return std::make_tuple(r.raddr, r.rkey);
  });
  m.def("decode_data", [](nb::bytes b) {
    const Aligned a(b, 16, "data segment");
    const m5::DataView v = m5::get_data_seg(a.buf);
    return std::make_tuple(v.byte_count, v.lkey, v.addr, m5::is_inline(a.buf));
  });
  m.def("decode_atomic", [](nb::bytes b) {
    const Aligned a(b, 16, "atomic segment");
    const m5::AtomicView v = m5::get_atomic_seg(a.buf);
    return std::make_tuple(v.swap_add, v.compare);
  });
  m.def("decode_masked_atomic", [](nb::bytes b, uint8_t opcode, uint32_t size) {
    const uint32_t n = 16 * m5::masked_atomic_segs(opcode, size);
    const Aligned a(b, n, "extended atomic segment");
    const m5::MaskedAtomicView v = m5::get_masked_atomic(a.buf, a.buf + 16, opcode, size);
    return std::make_tuple(v.swap_add, v.compare, v.swap_add_mask, v.compare_mask);
  });
  m.def("decode_av", [](nb::bytes b) {
    const Aligned a(b, 16, "address vector");
    const m5::AvView v = m5::get_av(a.buf);
    return std::make_tuple(v.dc_key, v.dqp_dct, v.ext);
  });
}

void bind_cqes(nb::module_ m) {
  m.def("decode_cqe", [](nb::bytes b) {
    const Aligned a(b, 64, "CQE");
    return cqe_dict(m5::get_cqe(a.buf));
  });
  m.def("cqe_ready", [](nb::bytes b, uint32_t ci, uint32_t ncqe) {
    const Aligned a(b, 64, "CQE");
    return m5::cqe_ready(a.buf, ci, ncqe);
  });
  m.def("owner_for", &m5::cqe_owner_for, nb::arg("ci"), nb::arg("ncqe"));
  m.def("cqe_init", []() {
    alignas(64) uint8_t b[64];
    m5::cqe_init(b);
    return to_bytes(b, sizeof b);
  });
  // The fill_* helpers leave op_own to the caller (the engine publishes it last); set it here.
  m.def(
      "req_cqe",
      [](uint32_t qpn, uint8_t wqe_opcode, uint16_t wqe_counter, uint32_t byte_cnt,
         uint64_t timestamp, uint8_t owner) {
        alignas(64) uint8_t b[64];
        b[m5::kCqeOpOwn] = m5::fill_req_cqe(b, qpn, wqe_opcode, wqe_counter, byte_cnt, timestamp,
                                            owner);
        return to_bytes(b, sizeof b);
      },
      nb::arg("qpn"), nb::arg("wqe_opcode"), nb::arg("wqe_counter"), nb::arg("byte_cnt") = 0,
      nb::arg("timestamp") = 0, nb::arg("owner") = 0);
  m.def(
      "resp_cqe",
      [](uint8_t opcode, uint32_t qpn, uint16_t wqe_counter, uint32_t byte_cnt, uint32_t imm,
         uint64_t timestamp, uint8_t owner) {
        alignas(64) uint8_t b[64];
        b[m5::kCqeOpOwn] = m5::fill_resp_cqe(b, opcode, qpn, wqe_counter, byte_cnt, imm,
                                             timestamp, owner);
        return to_bytes(b, sizeof b);
      },
      nb::arg("opcode"), nb::arg("qpn"), nb::arg("wqe_counter"), nb::arg("byte_cnt"),
      nb::arg("imm") = 0, nb::arg("timestamp") = 0, nb::arg("owner") = 0);
  m.def(
      "err_cqe",
      [](uint8_t opcode, uint8_t syndrome, uint32_t qpn, uint8_t wqe_opcode, uint16_t wqe_counter,
         uint8_t vendor_syndrome, uint8_t owner) {
        alignas(64) uint8_t b[64];
        b[m5::kCqeOpOwn] = m5::fill_err_cqe(b, opcode, syndrome, vendor_syndrome, qpn, wqe_opcode,
                                            wqe_counter, owner);
        return to_bytes(b, sizeof b);
      },
      nb::arg("opcode"), nb::arg("syndrome"), nb::arg("qpn"), nb::arg("wqe_opcode"),
      nb::arg("wqe_counter"), nb::arg("vendor_syndrome") = 0, nb::arg("owner") = 0);
}

void bind_ring(nb::module_ m) {
  // Each takes a ring image and returns (new image, WQEBBs used).
  m.def(
      "post_write",
      [](nb::bytes ring, uint32_t wqebb_cnt, uint32_t pi, uint32_t qpn, uint64_t raddr,
         uint32_t rkey, std::optional<nb::bytes> payload, uint32_t lkey, uint64_t addr,
         uint32_t length, bool signaled, bool fence, std::optional<uint32_t> imm,
         std::optional<nb::dict> av, bool compact_av) {
        Ring r(ring, wqebb_cnt);
        m5::AvFields f{};
        if (av) f = av_from_dict(*av);
        const uint32_t len = payload ? static_cast<uint32_t>(payload->size()) : length;
        const uint32_t n = m5::build_rdma_write(
            r.sq, pi, qpn, raddr, rkey, payload ? payload->c_str() : nullptr, len, lkey, addr,
            flags(signaled, fence), imm.has_value(), imm.value_or(0), av ? &f : nullptr,
            compact_av);
        return std::make_tuple(r.image(), n);
      },
      nb::arg("ring"), nb::arg("wqebb_cnt"), nb::arg("pi"), nb::arg("qpn"), nb::arg("raddr"),
      nb::arg("rkey"), nb::arg("payload") = nb::none(), nb::arg("lkey") = 0, nb::arg("addr") = 0,
      nb::arg("length") = 0, nb::arg("signaled") = false, nb::arg("fence") = false,
      nb::arg("imm") = nb::none(), nb::arg("av") = nb::none(), nb::arg("compact_av") = false);
  m.def(
      "post_fetch_add",
      [](nb::bytes ring, uint32_t wqebb_cnt, uint32_t pi, uint32_t qpn, uint64_t raddr,
         uint32_t rkey, uint64_t add, uint32_t lkey, uint64_t addr, bool signaled, bool fence,
         std::optional<nb::dict> av, bool compact_av) {
        Ring r(ring, wqebb_cnt);
        m5::AvFields f{};
        if (av) f = av_from_dict(*av);
        const uint32_t n = m5::build_fetch_add(r.sq, pi, qpn, raddr, rkey, add, lkey, addr,
                                               flags(signaled, fence), av ? &f : nullptr,
                                               compact_av);
        return std::make_tuple(r.image(), n);
      },
      nb::arg("ring"), nb::arg("wqebb_cnt"), nb::arg("pi"), nb::arg("qpn"), nb::arg("raddr"),
      nb::arg("rkey"), nb::arg("add"), nb::arg("lkey"), nb::arg("addr"),
      nb::arg("signaled") = true, nb::arg("fence") = false, nb::arg("av") = nb::none(),
      nb::arg("compact_av") = false);
  m.def(
      "post_masked_fetch_add",
      [](nb::bytes ring, uint32_t wqebb_cnt, uint32_t pi, uint32_t qpn, uint64_t raddr,
         uint32_t rkey, uint32_t size, uint64_t add, uint64_t field_boundary, uint32_t lkey,
         uint64_t addr, bool signaled, bool fence, std::optional<nb::dict> av, bool compact_av) {
        Ring r(ring, wqebb_cnt);
        m5::AvFields f{};
        if (av) f = av_from_dict(*av);
        const uint32_t n = m5::build_masked_fetch_add(r.sq, pi, qpn, raddr, rkey, size, add,
                                                      field_boundary, lkey, addr,
                                                      flags(signaled, fence), av ? &f : nullptr,
                                                      compact_av);
        return std::make_tuple(r.image(), n);
      },
      nb::arg("ring"), nb::arg("wqebb_cnt"), nb::arg("pi"), nb::arg("qpn"), nb::arg("raddr"),
      nb::arg("rkey"), nb::arg("size"), nb::arg("add"), nb::arg("field_boundary"),
      nb::arg("lkey"), nb::arg("addr"), nb::arg("signaled") = true, nb::arg("fence") = false,
      nb::arg("av") = nb::none(), nb::arg("compact_av") = false);
  m.def(
      "post_masked_cmp_swap",
      [](nb::bytes ring, uint32_t wqebb_cnt, uint32_t pi, uint32_t qpn, uint64_t raddr,
         uint32_t rkey, uint32_t size, uint64_t swap, uint64_t compare, uint64_t swap_mask,
         uint64_t compare_mask, uint32_t lkey, uint64_t addr, bool signaled, bool fence,
         std::optional<nb::dict> av, bool compact_av) {
        Ring r(ring, wqebb_cnt);
        m5::AvFields f{};
        if (av) f = av_from_dict(*av);
        const uint32_t n = m5::build_masked_cmp_swap(
            r.sq, pi, qpn, raddr, rkey, size, swap, compare, swap_mask, compare_mask, lkey, addr,
            flags(signaled, fence), av ? &f : nullptr, compact_av);
        return std::make_tuple(r.image(), n);
      },
      nb::arg("ring"), nb::arg("wqebb_cnt"), nb::arg("pi"), nb::arg("qpn"), nb::arg("raddr"),
      nb::arg("rkey"), nb::arg("size"), nb::arg("swap"), nb::arg("compare"),
      nb::arg("swap_mask"), nb::arg("compare_mask"), nb::arg("lkey"), nb::arg("addr"),
      nb::arg("signaled") = true, nb::arg("fence") = false, nb::arg("av") = nb::none(),
      nb::arg("compact_av") = false);
  m.def(
      "post_nop",
      [](nb::bytes ring, uint32_t wqebb_cnt, uint32_t pi, uint32_t qpn, bool signaled,
         bool fence) {
        Ring r(ring, wqebb_cnt);
        const uint32_t n = m5::build_nop(r.sq, pi, qpn, flags(signaled, fence));
        return std::make_tuple(r.image(), n);
      },
      nb::arg("ring"), nb::arg("wqebb_cnt"), nb::arg("pi"), nb::arg("qpn"),
      nb::arg("signaled") = false, nb::arg("fence") = false);
  m.def("read_inline",
        [](nb::bytes ring, uint32_t wqebb_cnt, uint32_t wqe_index, uint32_t first_seg,
           uint32_t len) {
          Ring r(ring, wqebb_cnt);
          std::vector<uint8_t> out(len);
          m5::get_inline_payload(r.sq, wqe_index, first_seg, out.data(), len);
          return to_bytes(out.data(), out.size());
        });
}

void bind_doorbells(nb::module_ m) {
  m.def("doorbell_value", [](nb::bytes ctrl) {
    const Aligned a(ctrl, 8, "ctrl segment");
    return m5::doorbell_value(a.buf);
  });
  // The 4 bytes a doorbell-record store leaves in memory.
  m.def("dbrec_value", [](uint32_t pi) {
    const uint32_t v = m5::dbrec_value(pi);
    return to_bytes(reinterpret_cast<const uint8_t*>(&v), 4);
  });
  m.def("cq_ci_value", [](uint32_t ci) {
    const uint32_t v = m5::cq_ci_value(ci);
    return to_bytes(reinterpret_cast<const uint8_t*>(&v), 4);
  });
}

void bind_constants(nb::module_ m) {
  nb::dict c;
  c["SEG_BYTES"] = m5::kSegBytes;
  c["WQEBB_BYTES"] = m5::kWqebbBytes;
  c["CQE_BYTES"] = m5::kCqeBytes;
  c["AV_FULL_BYTES"] = m5::kAvFullBytes;
  c["AV_COMPACT_BYTES"] = m5::kAvCompactBytes;
  c["DS_MAX"] = m5::kDsMask;
  c["INLINE_FLAG"] = m5::kInlineFlag;
  c["AV_EXT"] = m5::kAvExt;
  c["RCV_DBR"] = m5::kRcvDbr;
  c["SND_DBR"] = m5::kSndDbr;
  c["CQ_SET_CI"] = m5::kCqSetCi;
  c["OP_NOP"] = static_cast<int>(m5::kOpNop);
  c["OP_RDMA_WRITE"] = static_cast<int>(m5::kOpRdmaWrite);
  c["OP_RDMA_WRITE_IMM"] = static_cast<int>(m5::kOpRdmaWriteImm);
  c["OP_SEND"] = static_cast<int>(m5::kOpSend);
  c["OP_SEND_IMM"] = static_cast<int>(m5::kOpSendImm);
  c["OP_RDMA_READ"] = static_cast<int>(m5::kOpRdmaRead);
  c["OP_ATOMIC_CS"] = static_cast<int>(m5::kOpAtomicCs);
  c["OP_ATOMIC_FA"] = static_cast<int>(m5::kOpAtomicFa);
  c["OP_ATOMIC_MASKED_CS"] = static_cast<int>(m5::kOpAtomicMaskedCs);
  c["OP_ATOMIC_MASKED_FA"] = static_cast<int>(m5::kOpAtomicMaskedFa);
  c["EXT_ATOMIC_OPMOD"] = static_cast<int>(m5::kOpmodExtAtomic);
  c["CTRL_SOLICITED"] = static_cast<int>(m5::kSolicited);
  c["CTRL_CQ_UPDATE"] = static_cast<int>(m5::kCqUpdate);
  c["CTRL_INITIATOR_SMALL_FENCE"] = static_cast<int>(m5::kInitiatorSmallFence);
  c["CTRL_FENCE"] = static_cast<int>(m5::kFence);
  c["CQE_REQ"] = static_cast<int>(m5::kCqeReq);
  c["CQE_RESP_WR_IMM"] = static_cast<int>(m5::kCqeRespWrImm);
  c["CQE_RESP_SEND"] = static_cast<int>(m5::kCqeRespSend);
  c["CQE_RESP_SEND_IMM"] = static_cast<int>(m5::kCqeRespSendImm);
  c["CQE_REQ_ERR"] = static_cast<int>(m5::kCqeReqErr);
  c["CQE_RESP_ERR"] = static_cast<int>(m5::kCqeRespErr);
  c["CQE_INVALID"] = static_cast<int>(m5::kCqeInvalid);
  c["SYND_LOCAL_LENGTH"] = static_cast<int>(m5::kSyndLocalLength);
  c["SYND_LOCAL_QP_OP"] = static_cast<int>(m5::kSyndLocalQpOp);
  c["SYND_LOCAL_PROT"] = static_cast<int>(m5::kSyndLocalProt);
  c["SYND_WR_FLUSH"] = static_cast<int>(m5::kSyndWrFlush);
  c["SYND_BAD_RESP"] = static_cast<int>(m5::kSyndBadResp);
  c["SYND_LOCAL_ACCESS"] = static_cast<int>(m5::kSyndLocalAccess);
  c["SYND_REMOTE_INVAL_REQ"] = static_cast<int>(m5::kSyndRemoteInvalReq);
  c["SYND_REMOTE_ACCESS"] = static_cast<int>(m5::kSyndRemoteAccess);
  c["SYND_REMOTE_OP"] = static_cast<int>(m5::kSyndRemoteOp);
  c["SYND_TRANSPORT_RETRY_EXC"] = static_cast<int>(m5::kSyndTransportRetryExc);
  c["SYND_RNR_RETRY_EXC"] = static_cast<int>(m5::kSyndRnrRetryExc);
  c["SYND_REMOTE_ABORTED"] = static_cast<int>(m5::kSyndRemoteAborted);
  c["CQE_OFF_IMM"] = m5::kCqeImm;
  c["CQE_OFF_BYTE_CNT"] = m5::kCqeByteCnt;
  c["CQE_OFF_TIMESTAMP"] = m5::kCqeTimestamp;
  c["CQE_OFF_SOP_QPN"] = m5::kCqeSopQpn;
  c["CQE_OFF_WQE_COUNTER"] = m5::kCqeWqeCounter;
  c["CQE_OFF_SIGNATURE"] = m5::kCqeSignature;
  c["CQE_OFF_OP_OWN"] = m5::kCqeOpOwn;
  c["ERR_CQE_OFF_VENDOR_SYND"] = m5::kErrCqeVendorSynd;
  c["ERR_CQE_OFF_SYNDROME"] = m5::kErrCqeSyndrome;
  m.attr("CONSTANTS") = c;
}

}  // namespace

void bind_wire(nb::module_ m) {
  bind_segments(m);
  bind_decoders(m);
  bind_cqes(m);
  bind_ring(m);
  bind_doorbells(m);
  bind_constants(m);
}

}  // namespace gicbench
