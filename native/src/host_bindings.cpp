// Bindings of the host submitter's loops. Python hands queue descriptions as one uint64 table
// (a row per lane, columns LANE_COLUMNS) and gets samples back as numpy arrays.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "error_fields.hpp"
#include "host_loops.hpp"
#include "interrupt.hpp"
#include "lane_table.hpp"
#include "numpy_out.hpp"

namespace nb = nanobind;

namespace gicbench {
namespace {

host::Buffer buf(const std::tuple<uint64_t, uint32_t, uint64_t>& b) {
  return host::Buffer{std::get<0>(b), std::get<1>(b), std::get<2>(b)};
}

nb::dict error_dict(const LoopError& e) {
  nb::dict d;
  put_loop_fields(d, e);
  return d;
}

// What msg_rate and cycle return: (ok, windows_ns, totals, error).
auto rate_reply(bool ok, host::MsgRateResult& res, const LoopError& err) {
  nb::dict r;
  r["elapsed_ns"] = res.elapsed_ns;
  r["messages"] = res.messages;
  r["doorbells"] = res.doorbells;
  r["cqes"] = res.cqes;
  return std::make_tuple(ok, to_numpy(std::move(res.windows_ns)), r, error_dict(err));
}

Progress progress_from(uint64_t fn, uint64_t ctx) {
  return Progress{reinterpret_cast<void (*)(void*)>(static_cast<uintptr_t>(fn)), lane_ptr<void>(ctx)};
}

}  // namespace

void bind_host(nb::module_ m) {
  nb::list cols;
  for (auto c : kLaneColumns) cols.append(c);
  m.attr("LANE_COLUMNS") = nb::tuple(cols);
  m.def("install_interrupt_handler", &install_interrupt_handler,
        "Make SIGTERM/SIGINT stop native loops (call after Python's own handlers are set).");
  m.def("clear_interrupt", [] { g_interrupt.store(0); });
  m.def("interrupted", [] { return interrupted(); },
        "True once SIGTERM/SIGINT reached the native handler (until clear_interrupt).");

  m.def(
      "write_wqebbs",
      [](bool inline_payload, uint32_t size, bool dc, bool compact_av) {
        const uint32_t n = host::write_wqebbs(inline_payload, size, dc, compact_av);
        if (n == 0)
          throw std::invalid_argument("an inline write of " + std::to_string(size) +
                                      " bytes does not fit one WQE (63 segments of 16 bytes)");
        return n;
      },
      nb::arg("inline_payload"), nb::arg("size"), nb::arg("dc") = false,
      nb::arg("compact_av") = false,
      "64-byte WQEBBs of one RDMA write WQE as the host loops build it (RC, or DC with a full or "
      "compact address vector). msg_rate refuses a batch unless batch * this <= the SQ's "
      "wqebb_cnt. Raises ValueError when the payload cannot go inline in one WQE.");

  m.def(
      "single_op",
      [](const LaneTable& table, int mode, uint32_t size, bool inline_payload, bool scope_all,
         uint32_t selected, std::tuple<uint64_t, uint32_t, uint64_t> src,
         std::tuple<uint64_t, uint32_t, uint64_t> dst,
         std::tuple<uint64_t, uint32_t, uint64_t> reply, uint32_t iters, uint32_t warmup,
         int64_t timeout_ns, uint64_t progress_fn, uint64_t progress_ctx) {
        auto lanes = lanes_from(table);
        if (selected >= lanes.size()) throw std::invalid_argument("selected lane out of range");
        if (mode < 0 || mode > 2) throw std::invalid_argument("mode must be 0, 1 or 2");
        if (size < 8) throw std::invalid_argument("single_op needs size >= 8");
        host::SingleOpArgs a;
        a.mode = static_cast<host::SingleOpMode>(mode);
        a.size = size;
        a.inline_payload = inline_payload;
        a.scope_all = scope_all;
        a.selected = selected;
        a.src = buf(src);
        a.dst = buf(dst);
        a.reply = buf(reply);
        a.iters = iters;
        a.warmup = warmup;
        a.timeout_ns = timeout_ns;
        std::vector<int64_t> out(iters, 0);
        LoopError err;
        bool ok;
        {
          nb::gil_scoped_release nogil;
          ok = host::single_op(lanes, a, progress_from(progress_fn, progress_ctx), out.data(),
                               err);
        }
        return std::make_tuple(ok, to_numpy(std::move(out)), error_dict(err));
      },
      nb::arg("lanes"), nb::arg("mode"), nb::arg("size"), nb::arg("inline_payload"),
      nb::arg("scope_all"), nb::arg("selected"), nb::arg("src"), nb::arg("dst"), nb::arg("reply"),
      nb::arg("iters"), nb::arg("warmup"), nb::arg("timeout_ns"), nb::arg("progress_fn") = 0,
      nb::arg("progress_ctx") = 0,
      "Requester side of single-op (mode 0 issue, 1 put+completion, 2 round trip). Buffers are "
      "(addr, key, length). Returns (ok, samples_ns, error).");

  m.def(
      "rtt_respond",
      [](const LaneTable& table, uint32_t lane, uint32_t size, bool inline_payload,
         std::tuple<uint64_t, uint32_t, uint64_t> watch,
         std::tuple<uint64_t, uint32_t, uint64_t> src,
         std::tuple<uint64_t, uint32_t, uint64_t> dst, uint32_t count, int64_t timeout_ns,
         uint64_t progress_fn, uint64_t progress_ctx) {
        auto lanes = lanes_from(table);
        if (lane >= lanes.size()) throw std::invalid_argument("lane out of range");
        if (size < 8) throw std::invalid_argument("rtt_respond needs size >= 8");
        LoopError err;
        bool ok;
        {
          nb::gil_scoped_release nogil;
          ok = host::rtt_respond(lanes[lane], size, inline_payload, buf(watch), buf(src),
                                 buf(dst), count, timeout_ns,
                                 progress_from(progress_fn, progress_ctx), err);
        }
        return std::make_tuple(ok, error_dict(err));
      },
      nb::arg("lanes"), nb::arg("lane"), nb::arg("size"), nb::arg("inline_payload"),
      nb::arg("watch"), nb::arg("src"), nb::arg("dst"), nb::arg("count"), nb::arg("timeout_ns"),
      nb::arg("progress_fn") = 0, nb::arg("progress_ctx") = 0,
      "Responder side of the round trip: answer `count` requests. Returns (ok, error).");

  m.def(
      "msg_rate",
      [](const LaneTable& table, uint32_t threads, uint32_t batch, uint32_t size,
         bool inline_payload, uint64_t messages_per_thread,
         uint64_t warmup_per_thread, uint64_t window, int64_t timeout_ns, uint64_t progress_fn,
         uint64_t progress_ctx) {
        auto lanes = lanes_from(table);
        host::MsgRateArgs a;
        a.threads = threads;
        a.batch = batch;
        a.size = size;
        a.inline_payload = inline_payload;
        a.messages_per_thread = messages_per_thread;
        a.warmup_per_thread = warmup_per_thread;
        a.window = window == 0 ? messages_per_thread : window;
        a.timeout_ns = timeout_ns;
        host::MsgRateResult res;
        LoopError err;
        bool ok;
        {
          nb::gil_scoped_release nogil;
          ok = host::msg_rate(lanes, a, progress_from(progress_fn, progress_ctx), res, err);
        }
        return rate_reply(ok, res, err);
      },
      nb::arg("lanes"), nb::arg("threads"), nb::arg("batch"), nb::arg("size"),
      nb::arg("inline_payload"), nb::arg("messages_per_thread"),
      nb::arg("warmup_per_thread"), nb::arg("window"), nb::arg("timeout_ns"),
      nb::arg("progress_fn") = 0, nb::arg("progress_ctx") = 0,
      "Message rate with many writes outstanding, each lane writing its own region (slots of "
      "`size` bytes, message m to slot m mod slots). Returns (ok, windows_ns, stats, error).");

  m.def(
      "cycle",
      [](const LaneTable& table, uint32_t threads, uint32_t writes_per_visit, uint32_t batch,
         uint32_t size, bool inline_payload, uint64_t visits_per_thread, uint64_t warmup_visits,
         uint64_t window, int64_t timeout_ns, uint64_t progress_fn, uint64_t progress_ctx) {
        auto lanes = lanes_from(table);
        host::CycleArgs a;
        a.threads = threads;
        a.writes_per_visit = writes_per_visit;
        a.batch = batch;
        a.size = size;
        a.inline_payload = inline_payload;
        a.visits_per_thread = visits_per_thread;
        a.warmup_visits = warmup_visits;
        a.window = window == 0 ? visits_per_thread * writes_per_visit : window;
        a.timeout_ns = timeout_ns;
        host::MsgRateResult res;
        LoopError err;
        bool ok;
        {
          nb::gil_scoped_release nogil;
          ok = host::cycle(lanes, a, progress_from(progress_fn, progress_ctx), res, err);
        }
        return rate_reply(ok, res, err);
      },
      nb::arg("lanes"), nb::arg("threads"), nb::arg("writes_per_visit"), nb::arg("batch"),
      nb::arg("size"), nb::arg("inline_payload"), nb::arg("visits_per_thread"),
      nb::arg("warmup_visits"), nb::arg("window"), nb::arg("timeout_ns"),
      nb::arg("progress_fn") = 0, nb::arg("progress_ctx") = 0,
      "Active connections: units cycle their lanes (lanes sharing an SQ are one DCI's "
      "destinations), W writes per visit in chains of min(batch, W); lane l's k-th write to "
      "slot k mod slots of its regions. Returns (ok, windows_ns, stats, error).");
}

}  // namespace gicbench
