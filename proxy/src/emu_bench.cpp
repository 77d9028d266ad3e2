// Native posting loops for bench/emu_engine.py, over the provider-agnostic SqProducer and
// CqConsumer (queues.hpp): 8-byte inline RDMA writes, B per doorbell, round-robin over QPs.
#include "emu_bench.hpp"

#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <sched.h>

#include <cstdint>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "queues.hpp"

namespace nb = nanobind;

namespace gicbench {

namespace {

// (buf, wqebb_cnt, dbrec, doorbell, qpn) and (buf, ncqe, dbrec) as the Python side passes them.
using SqTuple = std::tuple<uint64_t, uint32_t, uint64_t, uint64_t, uint32_t>;
using CqTuple = std::tuple<uint64_t, uint32_t, uint64_t>;

SqDesc sq_desc(const SqTuple& t) {
  return SqDesc{reinterpret_cast<uint8_t*>(std::get<0>(t)), std::get<1>(t),
                reinterpret_cast<uint32_t*>(std::get<2>(t)),
                reinterpret_cast<uint64_t*>(std::get<3>(t)), std::get<4>(t)};
}
CqDesc cq_desc(const CqTuple& t) {
  return CqDesc{reinterpret_cast<uint8_t*>(std::get<0>(t)), std::get<1>(t),
                reinterpret_cast<uint32_t*>(std::get<2>(t))};
}

struct Lane {
  SqProducer sq;
  CqConsumer cq;
};

// Retire what the CQ reports; error CQEs abort the benchmark.
void reap(Lane& l) {
  m5::CqeView c;
  while (l.cq.poll(c)) {
    if (cqe_is_error(c))
      throw std::runtime_error("error CQE: syndrome " + std::to_string(c.syndrome) + " qpn " +
                               std::to_string(c.qpn) + " wqe " + std::to_string(c.wqe_counter));
    l.sq.retire(c.wqe_counter);
  }
}

// Post `total` 8-byte inline writes to `raddr` (rkey), `batch` per doorbell with the last one
// signaled, round-robin over the QPs; returns (nanoseconds, WQEs posted).
std::tuple<int64_t, uint64_t> bench_rate(const std::vector<SqTuple>& sqs,
                                         const std::vector<CqTuple>& cqs, uint64_t raddr,
                                         uint32_t rkey, uint64_t total, uint32_t batch,
                                         uint64_t hook, uint64_t ctx) {
  if (sqs.empty() || sqs.size() != cqs.size())
    throw std::invalid_argument("need one CQ per SQ and at least one SQ");
  std::vector<Lane> lanes;
  for (size_t i = 0; i < sqs.size(); ++i) {
    lanes.push_back(Lane{SqProducer(sq_desc(sqs[i])), CqConsumer(cq_desc(cqs[i]))});
    if (batch == 0 || batch > std::get<1>(sqs[i]))
      throw std::invalid_argument("batch must be 1..wqebb_cnt");
  }
  const Progress progress{reinterpret_cast<void (*)(void*)>(hook), reinterpret_cast<void*>(ctx)};
  const uint64_t payload = 0x0123456789abcdefull;
  WriteOp op;
  op.raddr = raddr;
  op.rkey = rkey;
  op.length = 8;
  op.inline_data = &payload;
  uint64_t posted = 0;
  const int64_t t0 = now_ns();
  size_t q = 0;
  uint32_t stalls = 0;
  while (posted < total) {
    Lane& l = lanes[q];
    q = (q + 1 == lanes.size()) ? 0 : q + 1;
    if (l.sq.free_wqebbs() < batch) reap(l);
    if (l.sq.free_wqebbs() < batch) {
      progress();
      // Oversubscribed (the engine thread waits for this core): give the core away.
      if (++stalls % 256 == 0) sched_yield();
      continue;
    }
    stalls = 0;
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(batch, total - posted));
    for (uint32_t k = 0; k < n; ++k) {
      op.signaled = (k + 1 == n);
      l.sq.post_write(op);
    }
    l.sq.ring();
    posted += n;
  }
  for (auto& l : lanes) {
    while (l.sq.outstanding()) {
      progress();
      reap(l);
      if (++stalls % 256 == 0) sched_yield();
    }
  }
  return {now_ns() - t0, posted};
}

// Doorbell-to-CQE latency of one signaled 8-byte inline write, `iters` times (ns per sample):
// the clock starts just before the doorbell store and stops when the CQE's owner bit flips.
std::vector<int64_t> bench_latency(const SqTuple& sqt, const CqTuple& cqt, uint64_t raddr,
                                   uint32_t rkey, uint32_t iters, uint64_t hook, uint64_t ctx) {
  Lane l{SqProducer(sq_desc(sqt)), CqConsumer(cq_desc(cqt))};
  const Progress progress{reinterpret_cast<void (*)(void*)>(hook), reinterpret_cast<void*>(ctx)};
  const uint64_t payload = 42;
  WriteOp op;
  op.raddr = raddr;
  op.rkey = rkey;
  op.length = 8;
  op.inline_data = &payload;
  op.signaled = true;
  std::vector<int64_t> out;
  out.reserve(iters);
  m5::CqeView c;
  for (uint32_t i = 0; i < iters; ++i) {
    if (l.sq.post_write(op) == UINT32_MAX) throw std::runtime_error("SQ full in latency loop");
    const int64_t t0 = now_ns();
    l.sq.ring();
    while (!l.cq.poll(c)) progress();
    out.push_back(now_ns() - t0);
    if (cqe_is_error(c)) throw std::runtime_error("error CQE in latency loop");
    l.sq.retire(c.wqe_counter);
  }
  return out;
}

}  // namespace

void bind_emu_bench(nb::module_& m) {
  m.def("bench_rate", &bench_rate, nb::arg("sqs"), nb::arg("cqs"), nb::arg("raddr"),
        nb::arg("rkey"), nb::arg("total"), nb::arg("batch"), nb::arg("hook") = 0,
        nb::arg("ctx") = 0, nb::call_guard<nb::gil_scoped_release>(),
        "Post `total` 8-byte inline writes, `batch` per doorbell; returns (ns, wqes).");
  m.def("bench_latency", &bench_latency, nb::arg("sq"), nb::arg("cq"), nb::arg("raddr"),
        nb::arg("rkey"), nb::arg("iters"), nb::arg("hook") = 0, nb::arg("ctx") = 0,
        nb::call_guard<nb::gil_scoped_release>(),
        "Doorbell-to-CQE latency samples (ns) of one signaled 8-byte inline write.");
}

}  // namespace gicbench
