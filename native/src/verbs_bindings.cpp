// Bindings of the verbs provider's native side: gicbench._native.verbs.Nic (objects, posting,
// polling) and the host submitter's loops over it. The loops run without the GIL.
#ifdef GICBENCH_HAVE_VERBS
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <arpa/inet.h>

#include <cstring>
#include <stdexcept>

#include "bindings.hpp"
#include "numpy_out.hpp"
#include "verbs_loops.hpp"
#include "verbs_nic.hpp"

namespace nb = nanobind;

namespace gicbench {
namespace {

using verbs::Nic;
using SideT = std::tuple<uint64_t, uint32_t, uint64_t>;  // (addr, key, length)

verbs::Side side(const SideT& s) {
  return verbs::Side{std::get<0>(s), std::get<1>(s), std::get<2>(s)};
}

verbs::Queue queue(const Nic& n, uint32_t qpn, uint32_t cq) {
  return verbs::Queue{n.qp(qpn), n.cq(cq), qpn};
}

// The loop's queue state counts work requests: posted, and known complete (retired); status is
// the error completion's ibv_wc_status, -1 where no completion failed.
nb::dict error_dict(const LoopError& e) {
  nb::dict d;
  d["kind"] = e.kind;
  d["message"] = e.message;
  d["qpn"] = e.qpn;
  d["posted"] = e.pi;
  d["completed"] = e.retired;
  d["status"] = e.wc_status;
  d["vendor_err"] = e.vendor_err;
  d["wr_id"] = e.wr_id;
  d["wc_qpn"] = e.wc_qpn;
  d["word_seen"] = e.word_seen;
  d["word_expected"] = e.word_expected;
  d["done"] = e.done;
  d["total"] = e.total;
  return d;
}

// (wr_id, status, opcode, byte_len, imm (host order), qp_num, wc_flags, vendor_err)
using WcT = std::tuple<uint64_t, int, int, uint32_t, uint32_t, uint32_t, int, uint32_t>;

}  // namespace

void bind_verbs(nb::module_ m) {
  nb::dict c;
  c["IBV_WR_RDMA_WRITE"] = static_cast<int>(IBV_WR_RDMA_WRITE);
  c["IBV_WR_RDMA_WRITE_WITH_IMM"] = static_cast<int>(IBV_WR_RDMA_WRITE_WITH_IMM);
  c["IBV_WR_RDMA_READ"] = static_cast<int>(IBV_WR_RDMA_READ);
  c["IBV_SEND_SIGNALED"] = static_cast<int>(IBV_SEND_SIGNALED);
  c["IBV_SEND_INLINE"] = static_cast<int>(IBV_SEND_INLINE);
  c["IBV_WC_RECV"] = static_cast<int>(IBV_WC_RECV);
  c["IBV_WC_RECV_RDMA_WITH_IMM"] = static_cast<int>(IBV_WC_RECV_RDMA_WITH_IMM);
  c["IBV_WC_WITH_IMM"] = static_cast<int>(IBV_WC_WITH_IMM);
  c["IBV_ACCESS_LOCAL_WRITE"] = static_cast<int>(IBV_ACCESS_LOCAL_WRITE);
  c["IBV_ACCESS_REMOTE_WRITE"] = static_cast<int>(IBV_ACCESS_REMOTE_WRITE);
  c["IBV_ACCESS_REMOTE_READ"] = static_cast<int>(IBV_ACCESS_REMOTE_READ);
  c["IBV_ACCESS_REMOTE_ATOMIC"] = static_cast<int>(IBV_ACCESS_REMOTE_ATOMIC);
  m.attr("CONSTANTS") = c;

  nb::class_<Nic>(m, "Nic", "One rank's verbs objects on an RDMA device (see verbs_nic.hpp)")
      .def(nb::init<const std::string&>(), nb::arg("device"))
      .def("close", &Nic::close)
      .def_prop_ro("closed", &Nic::closed)
      .def_prop_ro("device", &Nic::device)
      .def("reg_mr", &Nic::reg_mr, nb::arg("length"), nb::arg("access"))
      .def("create_cq", &Nic::create_cq, nb::arg("ncqe"))
      .def("create_qp", &Nic::create_qp, nb::arg("send_cq"), nb::arg("recv_cq"),
           nb::arg("max_send_wr"), nb::arg("max_recv_wr"), nb::arg("max_inline"))
      .def("to_init", &Nic::to_init, nb::arg("qpn"), nb::arg("port"), nb::arg("access"))
      .def(
          "to_rtr",
          [](Nic& n, uint32_t qpn, uint32_t dest_qpn, uint32_t rq_psn, int path_mtu,
             uint16_t dlid, nb::bytes dgid, uint8_t sgid_index, uint8_t port,
             uint8_t min_rnr_timer, uint8_t max_dest_rd_atomic) {
            verbs::RtrArgs a;
            a.dest_qpn = dest_qpn;
            a.rq_psn = rq_psn;
            a.path_mtu = path_mtu;
            a.dlid = dlid;
            a.global = dgid.size() != 0;
            if (a.global && dgid.size() != 16)
              throw std::invalid_argument("dgid: 16 bytes, or empty for a LID route");
            if (a.global) std::memcpy(a.dgid, dgid.c_str(), 16);
            a.sgid_index = sgid_index;
            a.port = port;
            a.min_rnr_timer = min_rnr_timer;
            a.max_dest_rd_atomic = max_dest_rd_atomic;
            n.to_rtr(qpn, a);
          },
          nb::arg("qpn"), nb::arg("dest_qpn"), nb::arg("rq_psn"), nb::arg("path_mtu"),
          nb::arg("dlid"), nb::arg("dgid"), nb::arg("sgid_index"), nb::arg("port"),
          nb::arg("min_rnr_timer"), nb::arg("max_dest_rd_atomic"))
      .def("to_rts", &Nic::to_rts, nb::arg("qpn"), nb::arg("sq_psn"), nb::arg("timeout"),
           nb::arg("retry_cnt"), nb::arg("rnr_retry"), nb::arg("max_rd_atomic"))
      .def("qp_state", &Nic::qp_state, nb::arg("qpn"))
      .def(
          "post_send",
          [](Nic& n, uint32_t qpn,
             const std::vector<std::tuple<int, uint64_t, uint32_t, uint64_t, uint32_t, uint32_t,
                                          int, int64_t, uint64_t>>& ops) {
            // (opcode, laddr, lkey, raddr, rkey, size, flags, imm or -1, wr_id)
            std::vector<verbs::Op> v(ops.size());
            for (size_t i = 0; i < ops.size(); ++i) {
              auto& [op, la, lk, ra, rk, sz, fl, imm, id] = ops[i];
              v[i] = verbs::Op{op, la, lk, ra, rk, sz, fl, imm >= 0,
                               static_cast<uint32_t>(imm < 0 ? 0 : imm), id};
            }
            n.post_send(qpn, v);
          },
          nb::arg("qpn"), nb::arg("ops"))
      .def("post_recv", &Nic::post_recv, nb::arg("qpn"), nb::arg("n"), nb::arg("addr"),
           nb::arg("length"), nb::arg("lkey"))
      .def(
          "poll",
          [](Nic& n, uint32_t cq, int max) {
            std::vector<ibv_wc> wcs;
            n.poll(cq, max, wcs);
            std::vector<WcT> out;
            out.reserve(wcs.size());
            for (const auto& w : wcs)
              out.emplace_back(w.wr_id, static_cast<int>(w.status), static_cast<int>(w.opcode),
                               w.byte_len, (w.wc_flags & IBV_WC_WITH_IMM) ? ntohl(w.imm_data) : 0,
                               w.qp_num, static_cast<int>(w.wc_flags), w.vendor_err);
            return out;
          },
          nb::arg("cq"), nb::arg("max"));

  m.def(
      "single_op",
      [](Nic& n, uint32_t qpn, uint32_t cq, int mode, const SideT& src, const SideT& dst,
         const SideT& reply, uint32_t size, bool inline_payload, uint64_t iters, uint64_t warmup,
         uint64_t timeout_ns) {
        if (mode < 0 || mode > 2) throw std::invalid_argument("mode must be 0, 1 or 2");
        if (size < 8) throw std::invalid_argument("single_op needs size >= 8");
        verbs::LatencyArgs a;
        a.q = queue(n, qpn, cq);
        a.mode = mode;
        a.src = side(src);
        a.dst = side(dst);
        a.reply = side(reply);
        a.size = size;
        a.inline_payload = inline_payload;
        a.iters = iters;
        a.warmup = warmup;
        a.timeout_ns = timeout_ns;
        std::vector<int64_t> samples(iters);
        LoopError err;
        bool ok;
        {
          nb::gil_scoped_release unlocked;
          ok = verbs::single_op(a, samples.data(), err);
        }
        return std::make_tuple(ok, to_numpy(std::move(samples)), error_dict(err));
      },
      nb::arg("nic"), nb::arg("qpn"), nb::arg("cq"), nb::arg("mode"), nb::arg("src"),
      nb::arg("dst"), nb::arg("reply"), nb::arg("size"), nb::arg("inline_payload"),
      nb::arg("iters"), nb::arg("warmup"), nb::arg("timeout_ns"),
      "Timed operations one at a time: (ok, samples ns, error dict).");

  m.def(
      "respond",
      [](Nic& n, uint32_t qpn, uint32_t cq, const SideT& src, const SideT& dst,
         const SideT& watch, uint32_t size, bool inline_payload, uint64_t count,
         uint64_t timeout_ns) {
        if (size < 8) throw std::invalid_argument("respond needs size >= 8");
        verbs::RespondArgs a;
        a.q = queue(n, qpn, cq);
        a.src = side(src);
        a.dst = side(dst);
        a.watch = side(watch);
        a.size = size;
        a.inline_payload = inline_payload;
        a.count = count;
        a.timeout_ns = timeout_ns;
        LoopError err;
        bool ok;
        {
          nb::gil_scoped_release unlocked;
          ok = verbs::respond(a, err);
        }
        return std::make_tuple(ok, error_dict(err));
      },
      nb::arg("nic"), nb::arg("qpn"), nb::arg("cq"), nb::arg("src"), nb::arg("dst"),
      nb::arg("watch"), nb::arg("size"), nb::arg("inline_payload"), nb::arg("count"),
      nb::arg("timeout_ns"), "The round trip's far end: (ok, error dict).");

  m.def(
      "msg_rate",
      [](Nic& n, const std::vector<std::tuple<uint32_t, uint32_t, SideT, SideT>>& lanes,
         uint32_t batch, uint32_t size, bool inline_payload, uint64_t messages, uint64_t warmup,
         uint64_t window, uint64_t timeout_ns) {
        std::vector<verbs::RateLane> ls(lanes.size());
        for (size_t i = 0; i < lanes.size(); ++i)
          ls[i] = verbs::RateLane{queue(n, std::get<0>(lanes[i]), std::get<1>(lanes[i])),
                                  side(std::get<2>(lanes[i])), side(std::get<3>(lanes[i]))};
        verbs::RateArgs a;
        a.batch = batch;
        a.size = size;
        a.inline_payload = inline_payload;
        a.messages = messages;
        a.warmup = warmup;
        a.window = window == 0 ? 1 : window;
        a.timeout_ns = timeout_ns;
        std::vector<int64_t> windows;
        verbs::RateStats st;
        LoopError err;
        bool ok;
        {
          nb::gil_scoped_release unlocked;
          ok = verbs::msg_rate(ls, a, windows, st, err);
        }
        nb::dict stats;
        stats["elapsed_ns"] = st.elapsed_ns;
        stats["messages"] = st.messages;
        stats["doorbells"] = st.doorbells;
        stats["cqes"] = st.cqes;
        return std::make_tuple(ok, to_numpy(std::move(windows)), stats, error_dict(err));
      },
      nb::arg("nic"), nb::arg("lanes"), nb::arg("batch"), nb::arg("size"),
      nb::arg("inline_payload"), nb::arg("messages"), nb::arg("warmup"), nb::arg("window"),
      nb::arg("timeout_ns"),
      "Writes with many outstanding over (qpn, cq, src, dst) lanes: (ok, windows ns, stats, "
      "error dict).");

  m.def(
      "cycle",
      [](Nic& n, const std::vector<std::tuple<uint32_t, uint32_t, SideT, SideT>>& lanes,
         uint32_t writes_per_visit, uint32_t batch, uint32_t size, bool inline_payload,
         uint64_t visits, uint64_t warmup_visits, uint64_t window, uint64_t timeout_ns) {
        std::vector<verbs::RateLane> ls(lanes.size());
        for (size_t i = 0; i < lanes.size(); ++i)
          ls[i] = verbs::RateLane{queue(n, std::get<0>(lanes[i]), std::get<1>(lanes[i])),
                                  side(std::get<2>(lanes[i])), side(std::get<3>(lanes[i]))};
        verbs::CycleArgs a;
        a.writes_per_visit = writes_per_visit;
        a.batch = batch;
        a.size = size;
        a.inline_payload = inline_payload;
        a.visits = visits;
        a.warmup_visits = warmup_visits;
        a.window = window == 0 ? 1 : window;
        a.timeout_ns = timeout_ns;
        std::vector<int64_t> windows;
        verbs::RateStats st;
        LoopError err;
        bool ok;
        {
          nb::gil_scoped_release unlocked;
          ok = verbs::cycle(ls, a, windows, st, err);
        }
        nb::dict stats;
        stats["elapsed_ns"] = st.elapsed_ns;
        stats["messages"] = st.messages;
        stats["doorbells"] = st.doorbells;
        stats["cqes"] = st.cqes;
        return std::make_tuple(ok, to_numpy(std::move(windows)), stats, error_dict(err));
      },
      nb::arg("nic"), nb::arg("lanes"), nb::arg("writes_per_visit"), nb::arg("batch"),
      nb::arg("size"), nb::arg("inline_payload"), nb::arg("visits"), nb::arg("warmup_visits"),
      nb::arg("window"), nb::arg("timeout_ns"),
      "Active connections over (qpn, cq, src, dst) lanes, one thread: lane v mod n takes visit "
      "v, W writes in chains of min(batch, W): (ok, windows ns, stats, error dict).");
}

}  // namespace gicbench
#endif  // GICBENCH_HAVE_VERBS
