// Bindings of the emu area: the emulated NIC of one rank (gicbench._native.emu.Nic) and the
// native benchmark loops. Python (gicbench.fabric.emu) wraps these and maps errors.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.hpp"
#include "emu_bench.hpp"
#include "emu_model_bindings.hpp"
#include "emu_nic.hpp"
#include "gpi.cuh"

namespace nb = nanobind;
using gicbench::emu::Nic;

namespace gicbench {

namespace {

const char* const kCounterNames[emu::kNumCounters] = {
    "wqes",          "doorbells",  "bytes",   "messages",          "errors",
    "stale_wqes",    "flushed",    "cq_overruns", "cqes",          "cqe_dropped",
    "not_rts",       "bad_doorbells", "recv_consumed", "dc_key_violations", "rnr",
    "dbrec_lag",     "cold_wakeups", "qp_fatal", "lock_steals",
};

const char* const kGpiCounterNames[emu::kNumGpiCounters] = {
    "gpi_descriptors", "gpi_writes", "gpi_signals", "gpi_bytes", "gpi_torn_waits", "gpi_errors",
};

// A GPI descriptor's fields as a dict (cuda/gpi.cuh's Desc; the numpy twin's GpiDesc names).
nb::dict gpi_desc_dict(const gpi::Desc& d) {
  nb::dict o;
  o["op"] = d.op;
  o["flags"] = d.flags;
  o["counter"] = d.counter;
  o["src_win"] = d.src_win;
  o["dst_win"] = d.dst_win;
  o["sig_win"] = d.sig_win;
  o["k"] = d.k;
  o["size"] = d.size;
  o["dst_rank"] = d.dst_rank;
  o["src_off"] = d.src_off;
  o["dst_off"] = d.dst_off;
  o["sig_off"] = d.sig_off;
  o["value"] = d.value;
  o["inline"] = nb::bytes(reinterpret_cast<const char*>(d.inline_data), gpi::kMaxInline);
  o["stride"] = d.stride;
  o["sig_base"] = d.sig_base;
  nb::list dests;
  for (const gpi::Dest& e : d.dest) dests.append(nb::make_tuple(e.rank, e.slot, e.signal));
  o["dests"] = dests;
  return o;
}

gpi::Desc gpi_desc_from(const nb::dict& o) {
  gpi::Desc d{};
  auto u = [&](const char* k) { return o.contains(k) ? nb::cast<uint64_t>(o[k]) : uint64_t{0}; };
  d.op = static_cast<uint8_t>(u("op"));
  d.flags = static_cast<uint8_t>(u("flags"));
  d.counter = static_cast<uint16_t>(u("counter"));
  d.src_win = static_cast<uint8_t>(u("src_win"));
  d.dst_win = static_cast<uint8_t>(u("dst_win"));
  d.sig_win = static_cast<uint8_t>(u("sig_win"));
  d.k = static_cast<uint8_t>(u("k"));
  d.size = static_cast<uint32_t>(u("size"));
  d.dst_rank = static_cast<uint16_t>(u("dst_rank"));
  d.src_off = u("src_off");
  d.dst_off = u("dst_off");
  d.sig_off = u("sig_off");
  d.value = o.contains("value") ? nb::cast<int64_t>(o["value"]) : 0;
  d.stride = static_cast<uint32_t>(u("stride"));
  d.sig_base = static_cast<uint32_t>(u("sig_base"));
  if (o.contains("inline")) {
    const nb::bytes b = nb::cast<nb::bytes>(o["inline"]);
    std::memcpy(d.inline_data, b.c_str(), std::min<size_t>(b.size(), gpi::kMaxInline));
  }
  if (o.contains("dests")) {
    uint32_t j = 0;
    for (nb::handle e : nb::cast<nb::list>(o["dests"])) {
      if (j == gpi::kMaxFanout) break;
      const auto t = nb::cast<std::tuple<uint32_t, uint32_t, uint32_t>>(e);
      d.dest[j++] = gpi::Dest{static_cast<uint8_t>(std::get<0>(t)),
                              static_cast<uint16_t>(std::get<1>(t)),
                              static_cast<uint8_t>(std::get<2>(t))};
    }
  }
  return d;
}

nb::dict rq_dict(const emu::RqInfo& r) {
  nb::dict d;
  d["buf"] = r.buf;
  d["dbrec"] = r.dbrec;
  d["wqe_cnt"] = r.wqe_cnt;
  return d;
}

}  // namespace

void bind_emu(nb::module_ m) {
  // A taken segment name: FileExistsError, so gicbench.fabric.emu retries under a new name.
  nb::exception<emu::SegmentExists>(m, "SegmentExists", PyExc_FileExistsError);
  m.attr("COUNTERS") = [] {
    nb::list l;
    for (const char* n : kCounterNames) l.append(n);
    return l;
  }();
  m.attr("MAX_QPS") = emu::kMaxQps;
  m.attr("GPI_COUNTERS") = [] {
    nb::list l;
    for (const char* n : kGpiCounterNames) l.append(n);
    return l;
  }();
  m.attr("MAX_GPIS") = emu::kMaxGpis - 1;
  m.attr("ERR_GPI") = static_cast<uint32_t>(emu::kErrGpi);
  m.def("gpi_footprint", &emu::gpi_footprint, nb::arg("depth"), nb::arg("ncounters"),
        nb::arg("nwindows"), nb::arg("world"),
        "Bytes one GPI queue takes in the queue arena (page padded).");
  // cuda/gpi.cuh's encoder and decoder, for the tests against the numpy twin.
  m.def(
      "gpi_encode",
      [](nb::dict fields, uint32_t owner) {
        uint64_t w[gpi::kSegs];
        gpi::encode(gpi_desc_from(fields), owner & 1u, w);
        return nb::bytes(reinterpret_cast<const char*>(w), sizeof w);
      },
      nb::arg("fields"), nb::arg("owner"));
  m.def("gpi_decode", [](nb::bytes b) {
    if (b.size() != gpi::kDescBytes) throw std::invalid_argument("a GPI descriptor is 64 bytes");
    uint64_t w[gpi::kSegs];
    std::memcpy(w, b.c_str(), sizeof w);
    return gpi_desc_dict(gpi::decode(w));
  });
  m.def("gpi_owner_for", &gpi::owner_for, nb::arg("index"), nb::arg("log_depth"));
  m.attr("ERR_STALE_WQE") = static_cast<uint32_t>(emu::kErrStaleWqe);
  m.attr("ERR_NOT_RTS") = static_cast<uint32_t>(emu::kErrNotRts);
  m.attr("ERR_CQ_OVERRUN") = static_cast<uint32_t>(emu::kErrCqOverrun);
  m.attr("ERR_BAD_DOORBELL") = static_cast<uint32_t>(emu::kErrBadDoorbell);
  m.attr("ERR_COMPLETION") = static_cast<uint32_t>(emu::kErrCompletion);
  m.attr("CQ_COLLAPSED") = static_cast<uint32_t>(emu::kCqCollapsed);
  m.attr("CQ_OVERRUN_IGNORE") = static_cast<uint32_t>(emu::kCqOverrunIgnore);
  m.attr("QP_NO_DBR") = static_cast<uint32_t>(emu::kQpNoDbr);
  m.attr("QP_WQE_SIG") = static_cast<uint32_t>(emu::kQpWqeSig);
  m.attr("DB_STRIDE") = emu::kDbStride;
  m.def(
      "segment_bytes",
      [](uint32_t max_mrs, uint32_t max_qps, uint32_t max_cqs, uint32_t max_dcts,
         uint64_t ring_bytes, uint64_t mr_bytes) {
        return emu::bytes_needed(emu::Limits{max_mrs, max_qps, max_cqs, max_dcts}, ring_bytes,
                                 mr_bytes);
      },
      nb::arg("max_mrs"), nb::arg("max_qps"), nb::arg("max_cqs"), nb::arg("max_dcts"),
      nb::arg("ring_bytes"), nb::arg("mr_bytes"),
      "Exact segment bytes for these table sizes (slot 0 included) and footprints.");
  m.def("ring_footprint", &emu::ring_footprint, "Bytes a ring of n bytes takes (page padded).");
  m.def("mr_footprint", &emu::mr_footprint, "Bytes a memory region of n bytes takes.");

  nb::class_<Nic>(m, "Nic", "The emulated NIC of one rank: segment, objects, CPU engine.")
      .def(
          "__init__",
          [](Nic* self, const std::string& name, int rank, int world, uint64_t bytes,
             uint32_t max_mrs, uint32_t max_qps, uint32_t max_cqs, uint32_t max_dcts) {
            emu::Limits lim{max_mrs, max_qps, max_cqs, max_dcts};
            new (self) Nic(name, rank, world, bytes, lim);
          },
          nb::arg("name"), nb::arg("rank"), nb::arg("world"), nb::arg("bytes"),
          nb::arg("max_mrs"), nb::arg("max_qps"), nb::arg("max_cqs"), nb::arg("max_dcts"))
      .def_prop_ro("name", [](const Nic& n) { return n.seg().name(); })
      .def_prop_ro("base", [](const Nic& n) { return reinterpret_cast<uint64_t>(n.seg().base()); })
      .def_prop_ro("bytes", [](const Nic& n) { return n.seg().bytes(); })
      .def_prop_ro("used",
                   [](const Nic& n) {
                     const emu::Header* h = n.seg().hdr();
                     return h->ring_off + h->ring_used + h->mr_used;
                   })
      .def_prop_ro("queue_arena",
                   [](const Nic& n) {
                     const emu::Header* h = n.seg().hdr();
                     return std::make_tuple(
                         reinterpret_cast<uint64_t>(n.seg().at(h->queue_off)),
                         n.seg().queue_bytes());
                   })
      .def("reg_mr",
           [](Nic& n, uint64_t length, uint32_t access, uint32_t pd) {
             const emu::MrInfo r = n.reg_mr(length, access, pd);
             return std::make_tuple(r.addr, r.length, r.key);
           }, nb::arg("length"), nb::arg("access"), nb::arg("pd") = 0)
      .def("create_cq",
           [](Nic& n, uint32_t ncqe, uint32_t flags) {
             const emu::CqInfo c = n.create_cq(ncqe, flags);
             return std::make_tuple(c.cqn, c.buf, c.dbrec, c.ncqe);
           }, nb::arg("ncqe"), nb::arg("flags") = 0)
      .def("create_qp",
           [](Nic& n, uint32_t send_cqn, uint32_t sq_wqebbs, uint32_t recv_cqn, uint32_t rq_wqes,
              bool dci, uint32_t flags, uint32_t max_inline, uint32_t pd) {
             const emu::QpInfo q = n.create_qp(send_cqn, sq_wqebbs, recv_cqn, rq_wqes, dci, flags,
                                               max_inline, pd);
             nb::dict d;
             d["qpn"] = q.qpn;
             d["buf"] = q.sq_buf;
             d["dbrec"] = q.dbrec;
             d["doorbell"] = q.doorbell;
             d["wqebb_cnt"] = q.wqebb_cnt;
             d["rq"] = rq_dict(q.rq);
             return d;
           }, nb::arg("send_cqn"), nb::arg("sq_wqebbs"), nb::arg("recv_cqn"), nb::arg("rq_wqes"),
           nb::arg("dci"), nb::arg("flags") = 0, nb::arg("max_inline") = 0, nb::arg("pd") = 0)
      .def("create_dct",
           [](Nic& n, uint32_t cqn, uint64_t dc_key, uint32_t rq_wqes, uint32_t pd) {
             const emu::DctInfo t = n.create_dct(cqn, dc_key, rq_wqes, pd);
             nb::dict d;
             d["dctn"] = t.dctn;
             d["rq"] = rq_dict(t.rq);
             return d;
           }, nb::arg("cqn"), nb::arg("dc_key"), nb::arg("rq_wqes"), nb::arg("pd") = 0)
      .def("create_gpi",
           [](Nic& n, uint32_t depth, uint32_t ncounters, uint32_t nwindows, uint32_t pd) {
             const emu::GpiInfo g = n.create_gpi(depth, ncounters, nwindows, pd);
             return std::make_tuple(g.num, g.base, g.ring, g.depth);
           }, nb::arg("depth"), nb::arg("ncounters"), nb::arg("nwindows"), nb::arg("pd") = 0)
      .def("set_gpi_window", &Nic::set_gpi_window, nb::arg("num"), nb::arg("handle"),
           nb::arg("rank"), nb::arg("addr"), nb::arg("length"), nb::arg("key"))
      .def("gpi_counters",
           [](const Nic& n) {
             nb::dict d;
             const uint64_t* c = n.seg().hdr()->gpi_counters;
             for (uint32_t i = 0; i < emu::kNumGpiCounters; ++i)
               d[kGpiCounterNames[i]] = emu::ld_rlx(&c[i]);
             return d;
           })
      .def("modify_qp", &Nic::modify_qp, nb::arg("qpn"), nb::arg("state"),
           nb::arg("remote_rank") = -1, nb::arg("remote_qpn") = 0)
      .def("qp_state", &Nic::qp_state)
      .def("qp_info",
           [](const Nic& n, uint32_t qpn) {
             const emu::QpEntry& q = n.qp_entry(qpn);
             nb::dict d;
             d["state"] = emu::ld_acq(&q.state);
             d["sq_ci"] = emu::ld_rlx(&q.sq_ci);
             d["wqes"] = emu::ld_rlx(&q.wqes);
             d["doorbells"] = emu::ld_rlx(&q.doorbells);
             d["errors"] = emu::ld_rlx(&q.errors);
             d["stale_wqes"] = emu::ld_rlx(&q.stale);
             d["dbrec_lag"] = emu::ld_rlx(&q.dbrec_lag);
             d["remote_rank"] = q.remote_rank;
             d["remote_qpn"] = q.remote_qpn;
             d["rq_ci"] = emu::ld_rlx(&q.rq.ci);
             return d;
           })
      .def("dct_info",
           [](const Nic& n, uint32_t dctn) {
             const emu::DctEntry& t = n.dct_entry(dctn);
             nb::dict d;
             d["key_violations"] = emu::ld_rlx(&t.key_violations);
             d["rq_ci"] = emu::ld_rlx(&t.rq.ci);
             return d;
           })
      .def("cq_info",
           [](const Nic& n, uint32_t cqn) {
             const emu::CqEntry& c = n.cq_entry(cqn);
             nb::dict d;
             d["status"] = emu::ld_acq(&c.status);
             d["pi"] = emu::ld_rlx(&c.pi);
             d["dropped"] = emu::ld_rlx(&c.dropped);
             // where the CQ's lock word lives (tests plant a dead owner there)
             d["lock_addr"] = reinterpret_cast<uint64_t>(&c.lock);
             return d;
           })
      .def("attach_peer", &Nic::attach_peer)
      .def("relocate_cq", &Nic::relocate_cq, nb::arg("cqn"), nb::arg("devcq"),
           "CUDA engine: the CQ lives in GPU memory, described by the DevCq at devcq.")
      .def("relocate_mr", &Nic::relocate_mr, nb::arg("key"), nb::arg("addr"), nb::arg("base_dev"),
           "CUDA engine: the MR's memory is GPU memory at addr.")
      .def("seg_base", &Nic::seg_base, nb::arg("rank"), "Rank r's segment as mapped here (0: none).")
      .def("seal", &Nic::seal)
      .def("close", &Nic::close, nb::call_guard<nb::gil_scoped_release>())
      .def("progress", &Nic::progress, nb::call_guard<nb::gil_scoped_release>())
      .def("set_engine_threads", &Nic::set_engine_threads, nb::arg("n"),
           "Engine threads (shards of the QP table) before the first QP; 1 by default.")
      .def_prop_ro("engine_threads", &Nic::engine_threads)
      .def("shard_wqes", &Nic::shard_wqes, "WQEs each engine thread executed, by thread.")
      .def("start_thread", &Nic::start_thread)
      .def("stop_thread", &Nic::stop_thread, nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("thread_running", &Nic::thread_running)
      .def("quiesce", &Nic::quiesce, nb::call_guard<nb::gil_scoped_release>())
      .def("counters",
           [](const Nic& n) {
             nb::dict d;
             const uint64_t* c = n.seg().hdr()->counters;
             for (uint32_t i = 0; i < emu::kNumCounters; ++i)
               d[kCounterNames[i]] = emu::ld_rlx(&c[i]);
             return d;
           })
      .def("drain_errors",
           [](Nic& n) {
             uint64_t lost = 0;
             std::vector<std::tuple<uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, int32_t>> v;
             for (const emu::ErrRecord& r : n.drain_errors(&lost))
               v.emplace_back(r.kind, r.qpn, r.expected, r.found, r.cqn, r.rank);
             return std::make_tuple(v, lost);
           })
      .def_prop_ro("progress_hook",
                   [](const Nic&) { return reinterpret_cast<uint64_t>(&gicbench_emu_progress); })
      .def_prop_ro("progress_ctx", [](Nic& n) { return reinterpret_cast<uint64_t>(&n); });

  bind_emu_bench(m);
  bind_emu_model(m);
}

}  // namespace gicbench
