// Bindings of mini-proxy: an Engine object (rings + pinned workers) that Python starts, hands
// to host producers (latency, respond, rate, loaded) or to GPU producers through its ring
// addresses, and stops. Lanes come as the host submitter's lane table (same columns).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "error_fields.hpp"
#include "numpy_out.hpp"
#include "lane_table.hpp"
#include "proxy_engine.hpp"
#include "proxy_host.hpp"
#ifdef GICBENCH_HAVE_VERBS
#include "verbs_nic.hpp"
#endif

namespace nb = nanobind;

namespace gicbench {
namespace {

nb::dict error_dict(const proxy::EngineError& e) {
  nb::dict d;
  put_loop_fields(d, e);
  d["failed"] = e.failed;
  d["who"] = e.who;
  d["ring"] = e.ring;
  d["index"] = e.index;
  d["head"] = e.head;
  d["completed"] = e.completed;
  d["wc_status"] = e.wc_status;
  d["vendor_err"] = e.vendor_err;
  d["wr_id"] = e.wr_id;
  return d;
}

// The Python-facing engine: owns the native one, and the lanes it was built from.
struct PyEngine {
  std::unique_ptr<proxy::Engine> e;
  bool started = false;

  proxy::Engine& get() {
    if (!e) throw std::runtime_error("proxy engine already closed");
    return *e;
  }
};

proxy::EngineConfig engine_config(uint32_t workers, uint32_t rings, uint32_t batch,
                                  uint32_t depth, uint32_t max_size, bool inline_payload,
                                  std::vector<int> cores, int precondition,
                                  int64_t precondition_ns, int64_t timeout_ns) {
  proxy::EngineConfig c;
  c.workers = workers;
  c.rings = rings;
  c.batch = batch;
  c.depth = depth;
  c.max_size = max_size;
  c.inline_payload = inline_payload;
  c.cores = std::move(cores);
  c.precondition = precondition == 1 ? proxy::Precondition::kWarm : proxy::Precondition::kCold;
  c.precondition_ns = precondition_ns;
  c.timeout_ns = timeout_ns;
  return c;
}

proxy::Handoff handoff_of(int h) {
  if (h != 0 && h != 1) throw std::invalid_argument("handoff must be 0 (baseline) or 1 (tuned)");
  return static_cast<proxy::Handoff>(h);
}

// A host producers' rate or cycle result: (ok, windows_ns, stats, error).
auto rate_out(bool ok, proxy::RateResult& res, const proxy::EngineError& err) {
  nb::dict r;
  r["elapsed_ns"] = res.elapsed_ns;
  r["messages"] = res.messages;
  r["ring_messages"] = res.ring_messages;
  r["enqueue_ns"] = res.enqueue_ns;
  return std::make_tuple(ok, to_numpy(std::move(res.windows_ns)), r, error_dict(err));
}

}  // namespace

void bind_proxy(nb::module_ m) {
  m.attr("HEAD_OFF") = proxy::kHeadOff;
  m.attr("COMPLETED_OFF") = proxy::kCompletedOff;
  m.attr("RESERVE_OFF") = proxy::kReserveOff;
  m.attr("CONTROL_OFF") = proxy::kControlOff;
  m.attr("HEADER_BYTES") = proxy::kHeaderBytes;
  m.attr("SLOT_BYTES") = proxy::kSlotBytes;
  m.attr("MAX_LENGTH") = proxy::kMaxLength;
  m.def("live_rings", &proxy::live_rings, "Rings mapped in this process and not yet unmapped.");
  m.def("desc_words",
        [](uint64_t index, uint32_t lane, uint32_t offset, uint32_t length) {
          return std::make_tuple(proxy::desc_word0(index, lane, 0),
                                 proxy::desc_word1(index, offset, length));
        },
        nb::arg("index"), nb::arg("lane"), nb::arg("offset"), nb::arg("length"),
        "The two 8-byte words of the descriptor at ring index `index` (proxy_ring.hpp).");

  nb::class_<PyEngine>(m, "Engine")
      .def(
          "__init__",
          [](PyEngine* self, const LaneTable& table, uint32_t workers, uint32_t rings,
             uint32_t batch, uint32_t depth, uint32_t max_size, bool inline_payload,
             std::vector<int> cores, int precondition, int64_t precondition_ns,
             int64_t timeout_ns, uint64_t progress_fn, uint64_t progress_ctx) {
            proxy::EngineConfig c =
                engine_config(workers, rings, batch, depth, max_size, inline_payload,
                              std::move(cores), precondition, precondition_ns, timeout_ns);
            c.progress = Progress{reinterpret_cast<void (*)(void*)>(progress_fn),
                                  lane_ptr<void>(progress_ctx)};
            new (self) PyEngine{std::make_unique<proxy::Engine>(lanes_from(table), c), false};
          },
          nb::arg("lanes"), nb::arg("workers"), nb::arg("rings"), nb::arg("batch"),
          nb::arg("depth"), nb::arg("max_size"), nb::arg("inline_payload"), nb::arg("cores"),
          nb::arg("precondition"), nb::arg("precondition_ns"), nb::arg("timeout_ns"),
          nb::arg("progress_fn") = 0, nb::arg("progress_ctx") = 0)
#ifdef GICBENCH_HAVE_VERBS
      // On the verbs provider: lanes are (qpn, cq, sq_depth, cq_entries, max_inline,
      // (src addr, lkey, length), (dst addr, rkey, length)) of `nic`'s QPs and CQs.
      .def_static(
          "over_verbs",
          [](verbs::Nic& nic,
             const std::vector<std::tuple<uint32_t, uint32_t, uint32_t, uint32_t, uint32_t,
                                          std::tuple<uint64_t, uint32_t, uint64_t>,
                                          std::tuple<uint64_t, uint32_t, uint64_t>>>& lanes,
             uint32_t workers, uint32_t rings, uint32_t batch, uint32_t depth,
             uint32_t max_size, bool inline_payload, std::vector<int> cores, int precondition,
             int64_t precondition_ns, int64_t timeout_ns) {
            std::vector<host::Lane> ls(lanes.size());
            std::vector<proxy::VerbsQueues> vq(lanes.size());
            for (size_t i = 0; i < lanes.size(); ++i) {
              const auto& [qpn, cq, sq_depth, ncqe, max_inline, src, dst] = lanes[i];
              ls[i].sq.qpn = qpn;
              ls[i].sq.wqebb_cnt = sq_depth;
              ls[i].cq.ncqe = ncqe;
              ls[i].src = host::Buffer{std::get<0>(src), std::get<1>(src), std::get<2>(src)};
              ls[i].dst = host::Buffer{std::get<0>(dst), std::get<1>(dst), std::get<2>(dst)};
              vq[i] = proxy::VerbsQueues{nic.qp(qpn), nic.cq(cq), max_inline};
            }
            auto c = engine_config(workers, rings, batch, depth, max_size, inline_payload,
                                   std::move(cores), precondition, precondition_ns, timeout_ns);
            return new PyEngine{
                std::make_unique<proxy::Engine>(std::move(ls), std::move(vq), c), false};
          },
          nb::arg("nic"), nb::arg("lanes"), nb::arg("workers"), nb::arg("rings"),
          nb::arg("batch"), nb::arg("depth"), nb::arg("max_size"), nb::arg("inline_payload"),
          nb::arg("cores"), nb::arg("precondition"), nb::arg("precondition_ns"),
          nb::arg("timeout_ns"), nb::keep_alive<0, 1>(),
          "An engine whose workers post through ibv_post_send on the verbs provider's QPs.")
#endif
      .def("init",
           [](PyEngine& s) {
             proxy::EngineError err;
             const bool ok = s.get().init(err);
             return std::make_tuple(ok, error_dict(err));
           },
           "Map the rings and check the configuration. Returns (ok, error).")
      .def("start",
           [](PyEngine& s) {
             proxy::EngineError err;
             bool ok;
             {
               nb::gil_scoped_release nogil;
               ok = s.get().start(err);
             }
             s.started = ok;
             return std::make_tuple(ok, error_dict(err));
           },
           "Start, pin and precondition the workers. Returns (ok, error).")
      .def("stop",
           [](PyEngine& s) {
             proxy::EngineError err;
             bool ok = true;
             if (s.e) {
               nb::gil_scoped_release nogil;
               ok = s.e->stop(err);
             }
             s.started = false;
             return std::make_tuple(ok, error_dict(err));
           },
           "Let the workers finish what the rings hold, join them. Returns (ok, first error).")
      .def("close",
           [](PyEngine& s) {
             if (!s.e) return;
             nb::gil_scoped_release nogil;
             s.e.reset();  // stops the workers and unmaps the rings
           },
           "Stop the workers and unmap the rings (idempotent).")
      .def("failed", [](PyEngine& s) { return s.e && s.e->failed(); })
      .def("first_error", [](PyEngine& s) { return error_dict(s.get().first_error()); })
      .def("ring_addr",
           [](PyEngine& s, uint32_t r) {
             if (r >= s.get().rings()) throw std::out_of_range("ring index");
             return reinterpret_cast<uintptr_t>(s.get().ring(r).base);
           })
      .def("rings", [](PyEngine& s) { return s.get().rings(); })
      .def("ring_bytes", [](PyEngine& s) { return proxy::Ring::bytes(s.get().depth()); })
      .def("ring_lane", [](PyEngine& s, uint32_t r) {
        if (r >= s.get().rings()) throw std::out_of_range("ring index");
        return s.get().ring_lane(r);
      })
      .def(
          "wait_completed",
          [](PyEngine& s, uint32_t ring, uint64_t count, std::string who) {
            if (ring >= s.get().rings()) throw std::out_of_range("ring index");
            proxy::EngineError err;
            bool ok;
            {
              nb::gil_scoped_release nogil;
              ok = proxy::wait_completed(s.get(), ring, count, who.c_str(), err);
            }
            return std::make_tuple(ok, error_dict(err));
          },
          nb::arg("ring"), nb::arg("count"), nb::arg("who"),
          "Wait until ring's completion counter reaches count (timeout, failure, signal).")
      .def("stats",
           [](PyEngine& s) {
             nb::list out;
             for (const auto& w : s.get().stats()) {
               nb::dict d;
               d["core"] = w.core;
               d["khz"] = w.khz;
               d["descriptors"] = w.descriptors;
               d["doorbells"] = w.doorbells;
               d["cqes"] = w.cqes;
               d["bytes"] = w.bytes;
               out.append(d);
             }
             return out;
           },
           "Per worker: core, clock (kHz, -1 unknown), descriptors, doorbells, CQEs.")
      .def(
          "latency",
          [](PyEngine& s, int mode, int handoff, uint32_t ring, uint32_t size, bool scope_all,
             uint64_t reply, uint32_t iters, uint32_t warmup) {
            if (mode < 0 || mode > 2) throw std::invalid_argument("mode must be 0, 1 or 2");
            if (ring >= s.get().rings()) throw std::out_of_range("ring index");
            if (size < 8) throw std::invalid_argument("latency needs size >= 8");
            proxy::LatencyArgs a;
            a.mode = static_cast<proxy::Mode>(mode);
            a.handoff = handoff_of(handoff);
            a.ring = ring;
            a.size = size;
            a.scope_all = scope_all;
            a.reply = reply;
            a.iters = iters;
            a.warmup = warmup;
            std::vector<int64_t> out(iters, 0);
            proxy::EngineError err;
            bool ok;
            {
              nb::gil_scoped_release nogil;
              ok = proxy::latency(s.get(), a, out.data(), err);
            }
            return std::make_tuple(ok, to_numpy(std::move(out)), error_dict(err));
          },
          nb::arg("mode"), nb::arg("handoff"), nb::arg("ring"), nb::arg("size"),
          nb::arg("scope_all"), nb::arg("reply"), nb::arg("iters"), nb::arg("warmup"),
          "Probe samples (ns) through host producers. Returns (ok, samples, error).")
      .def(
          "respond",
          [](PyEngine& s, uint32_t ring, int handoff, uint32_t size, uint64_t watch,
             uint32_t count) {
            if (ring >= s.get().rings()) throw std::out_of_range("ring index");
            if (size < 8) throw std::invalid_argument("respond needs size >= 8");
            proxy::EngineError err;
            bool ok;
            {
              nb::gil_scoped_release nogil;
              ok = proxy::respond(s.get(), ring, handoff_of(handoff), size, watch, count, err);
            }
            return std::make_tuple(ok, error_dict(err));
          },
          nb::arg("ring"), nb::arg("handoff"), nb::arg("size"), nb::arg("watch"),
          nb::arg("count"))
      .def(
          "rate",
          [](PyEngine& s, uint32_t producers, int handoff, uint32_t size, uint64_t messages,
             uint64_t warmup, uint64_t window) {
            proxy::RateArgs a;
            a.producers = producers;
            a.handoff = handoff_of(handoff);
            a.size = size;
            a.messages_per_producer = messages;
            a.warmup_per_producer = warmup;
            a.window = window == 0 ? messages : window;
            proxy::RateResult res;
            proxy::EngineError err;
            bool ok;
            {
              nb::gil_scoped_release nogil;
              ok = proxy::rate(s.get(), a, res, err);
            }
            return rate_out(ok, res, err);
          },
          nb::arg("producers"), nb::arg("handoff"), nb::arg("size"), nb::arg("messages"),
          nb::arg("warmup"), nb::arg("window"),
          "Host producers fill the rings. Returns (ok, windows_ns, stats, error).")
      .def(
          "assign_lanes",
          [](PyEngine& s, std::vector<uint32_t> lane_worker) {
            s.get().assign_lanes(std::move(lane_worker));
          },
          nb::arg("lane_worker"),
          "Before init: lane l belongs to worker lane_worker[l] (default l mod workers).")
      .def(
          "cycle",
          [](PyEngine& s, std::vector<std::vector<uint32_t>> unit_lanes, int handoff,
             uint32_t size, uint32_t writes_per_visit, uint64_t visits, uint64_t warmup_visits,
             uint64_t window) {
            proxy::CycleArgs a;
            a.unit_lanes = std::move(unit_lanes);
            a.handoff = handoff_of(handoff);
            a.size = size;
            a.writes_per_visit = writes_per_visit;
            a.visits = visits;
            a.warmup_visits = warmup_visits;
            a.window = window;
            proxy::RateResult res;
            proxy::EngineError err;
            bool ok;
            {
              nb::gil_scoped_release nogil;
              ok = proxy::cycle(s.get(), a, res, err);
            }
            return rate_out(ok, res, err);
          },
          nb::arg("unit_lanes"), nb::arg("handoff"), nb::arg("size"),
          nb::arg("writes_per_visit"), nb::arg("visits"), nb::arg("warmup_visits"),
          nb::arg("window"),
          "Host producers cycle their lanes, unit u on ring u. Returns (ok, windows_ns, stats, "
          "error).")
      .def(
          "loaded",
          [](PyEngine& s, bool requester, int handoff, bool reserved, uint32_t producers,
             double pace_mps, uint32_t size, uint64_t reply, uint32_t iters, uint32_t warmup) {
            if (producers == 0 || producers > 64)
              throw std::invalid_argument("producers must be 1..64");
            if (size < 8) throw std::invalid_argument("loaded needs size >= 8");
            proxy::LoadedArgs a;
            a.requester = requester;
            a.handoff = handoff_of(handoff);
            a.reserved = reserved;
            a.producers = producers;
            a.pace_mps = pace_mps;
            a.size = size;
            a.reply = reply;
            a.iters = iters;
            a.warmup = warmup;
            proxy::LoadedResult res;
            proxy::EngineError err;
            bool ok;
            {
              nb::gil_scoped_release nogil;
              ok = proxy::loaded(s.get(), a, res, err);
            }
            nb::dict r;
            r["background"] = res.background;
            r["probe_ns"] = res.probe_ns;
            r["ring_messages"] = res.ring_messages;
            return std::make_tuple(ok, to_numpy(std::move(res.rtt_ns)), r, error_dict(err));
          },
          nb::arg("requester"), nb::arg("handoff"), nb::arg("reserved"), nb::arg("producers"),
          nb::arg("pace_mps"), nb::arg("size"), nb::arg("reply"), nb::arg("iters"),
          nb::arg("warmup"),
          "A probe round trip (or its responder) on ring 0 while background producers load the "
          "rings. Returns (ok, rtt_ns, stats, error).");
}

}  // namespace gicbench
