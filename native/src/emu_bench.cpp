// Native posting loops for bench/emu_engine.py, over the provider-agnostic SqProducer and
// CqConsumer (queues.hpp): 8-byte inline RDMA writes, B per doorbell, round-robin over QPs.
#include "emu_bench.hpp"

#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <sched.h>

#include <cstdint>
#include <cstring>
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

// Posters of 8-byte inline RC writes, `n` per doorbell with the last one signaled.
// QueuesPoster: the provider-agnostic SqProducer of queues.hpp, field by field.
class QueuesPoster {
 public:
  QueuesPoster(const SqDesc& d, uint64_t raddr, uint32_t rkey, const uint64_t* payload) : sq_(d) {
    op_.raddr = raddr;
    op_.rkey = rkey;
    op_.length = 8;
    op_.inline_data = payload;
  }
  uint32_t free_wqebbs() const { return sq_.free_wqebbs(); }
  uint32_t outstanding() const { return sq_.outstanding(); }
  void retire(uint16_t c) { sq_.retire(c); }
  void post_batch(uint32_t n) {
    for (uint32_t k = 0; k < n; ++k) {
      op_.signaled = (k + 1 == n);
      sq_.post_write(op_);
    }
    sq_.ring();
  }

 private:
  SqProducer sq_;
  WriteOp op_;
};

// FastPoster: the leanest submitter of the same WQE: the 48 bytes (ctrl + raddr + inline) are
// prebuilt once; per WQE only the index and the signaled flag change and the WQE goes to the ring
// as one 48-byte copy. It measures the engine rather than the poster.
class FastPoster {
 public:
  FastPoster(const SqDesc& d, uint64_t raddr, uint32_t rkey, const uint64_t* payload) : d_(d) {
    const m5::SqRing one{tmpl_, 1};
    m5::set_ctrl_seg(tmpl_, 0, m5::kOpRdmaWrite, 0, d.qpn, 0, 3, 0, 0);
    m5::set_raddr_seg(tmpl_ + 16, raddr, rkey);
    m5::set_inline_seg(one, 0, 2, payload, 8);
  }
  uint32_t free_wqebbs() const { return d_.wqebb_cnt - (pi_ - ci_); }
  uint32_t outstanding() const { return pi_ - ci_; }
  void retire(uint16_t c) { ci_ = pi_ - static_cast<uint16_t>(static_cast<uint16_t>(pi_) - c) + 1; }
  void post_batch(uint32_t n) {
    alignas(16) uint8_t w[48];
    std::memcpy(w, tmpl_, sizeof w);
    for (uint32_t k = 0; k < n; ++k, ++pi_) {
      m5::put_be32(w, (static_cast<uint32_t>(pi_ & 0xffff) << 8) | m5::kOpRdmaWrite);
      w[11] = (k + 1 == n) ? m5::kCqUpdate : 0;
      uint8_t* slot = d_.buf + (pi_ & (d_.wqebb_cnt - 1)) * m5::kWqebbBytes;
      std::memcpy(slot + 16, w + 16, 32);  // raddr + inline, then ctrl last (as rdma-core does)
      std::memcpy(slot, w, 16);
    }
    uint64_t db;
    std::memcpy(&db, w, 8);
    std::atomic_thread_fence(std::memory_order_release);
    __atomic_store_n(&d_.dbrec[m5::kSndDbr], m5::bswap32(pi_ & 0xffff), __ATOMIC_RELEASE);
    __atomic_store_n(d_.doorbell, db, __ATOMIC_RELEASE);
  }

 private:
  SqDesc d_;
  alignas(16) uint8_t tmpl_[64] = {};
  uint32_t pi_ = 0, ci_ = 0;
};

// Retire what the CQ reports; error CQEs abort the benchmark.
template <class P>
void reap(P& p, CqConsumer& cq) {
  m5::CqeView c;
  while (cq.poll(c)) {
    if (cqe_is_error(c))
      throw std::runtime_error("error CQE: syndrome " + std::to_string(c.syndrome) + " qpn " +
                               std::to_string(c.qpn) + " wqe " + std::to_string(c.wqe_counter));
    p.retire(c.wqe_counter);
  }
}

template <class P>
std::tuple<int64_t, uint64_t> run_rate(const std::vector<SqTuple>& sqs,
                                       const std::vector<CqTuple>& cqs, uint64_t raddr,
                                       uint32_t rkey, uint64_t total, uint32_t batch,
                                       uint64_t warmup, const Progress& progress) {
  static const uint64_t payload = 0x0123456789abcdefull;
  std::vector<P> posters;
  std::vector<CqConsumer> cqc;
  for (size_t i = 0; i < sqs.size(); ++i) {
    if (batch == 0 || batch > std::get<1>(sqs[i]))
      throw std::invalid_argument("batch must be 1..wqebb_cnt");
    posters.emplace_back(sq_desc(sqs[i]), raddr, rkey, &payload);
    cqc.emplace_back(cq_desc(cqs[i]));
  }
  uint64_t posted = 0;
  uint32_t stalls = 0;
  int64_t t0 = now_ns();
  bool timing = warmup == 0;
  total += warmup;
  size_t q = 0;
  while (posted < total) {
    if (!timing && posted >= warmup) {  // the clock starts after the warm-up WQEs
      timing = true;
      t0 = now_ns();
    }
    P& p = posters[q];
    CqConsumer& cq = cqc[q];
    q = (q + 1 == posters.size()) ? 0 : q + 1;
    if (p.free_wqebbs() < batch) reap(p, cq);
    if (p.free_wqebbs() < batch) {
      progress();
      // Oversubscribed (the engine thread waits for this core): give the core away.
      if (++stalls % 256 == 0) sched_yield();
      continue;
    }
    stalls = 0;
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(batch, total - posted));
    p.post_batch(n);
    posted += n;
  }
  for (size_t i = 0; i < posters.size(); ++i) {
    while (posters[i].outstanding()) {
      progress();
      reap(posters[i], cqc[i]);
      if (++stalls % 256 == 0) sched_yield();
    }
  }
  return {now_ns() - t0, posted - warmup};
}

// Post `warmup` + `total` 8-byte inline writes to `raddr` (rkey), `batch` per doorbell with the
// last one signaled, round-robin over the QPs; returns (nanoseconds, WQEs) of the timed part.
// The queues must be fresh (producer and consumer indices start at 0): one call per QP set.
std::tuple<int64_t, uint64_t> bench_rate(const std::vector<SqTuple>& sqs,
                                         const std::vector<CqTuple>& cqs, uint64_t raddr,
                                         uint32_t rkey, uint64_t total, uint32_t batch,
                                         uint64_t warmup, uint64_t hook, uint64_t ctx,
                                         bool fast) {
  if (sqs.empty() || sqs.size() != cqs.size())
    throw std::invalid_argument("need one CQ per SQ and at least one SQ");
  const Progress progress{reinterpret_cast<void (*)(void*)>(hook), reinterpret_cast<void*>(ctx)};
  return fast ? run_rate<FastPoster>(sqs, cqs, raddr, rkey, total, batch, warmup, progress)
              : run_rate<QueuesPoster>(sqs, cqs, raddr, rkey, total, batch, warmup, progress);
}

// Doorbell-to-CQE latency of one signaled 8-byte inline write, `iters` times (ns per sample):
// the clock starts just before the doorbell store and stops when the CQE's owner bit flips.
// Fresh queues only (one call per QP), like bench_rate; the first `warmup` samples are dropped.
std::vector<int64_t> bench_latency(const SqTuple& sqt, const CqTuple& cqt, uint64_t raddr,
                                   uint32_t rkey, uint32_t iters, uint32_t warmup, uint64_t hook,
                                   uint64_t ctx) {
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
  out.reserve(iters + warmup);
  m5::CqeView c;
  for (uint32_t i = 0; i < iters + warmup; ++i) {
    if (l.sq.post_write(op) == UINT32_MAX) throw std::runtime_error("SQ full in latency loop");
    const int64_t t0 = now_ns();
    l.sq.ring();
    while (!l.cq.poll(c)) progress();
    out.push_back(now_ns() - t0);
    if (cqe_is_error(c)) throw std::runtime_error("error CQE in latency loop");
    l.sq.retire(c.wqe_counter);
  }
  out.erase(out.begin(), out.begin() + warmup);
  return out;
}

}  // namespace

void bind_emu_bench(nb::module_& m) {
  m.def("bench_rate", &bench_rate, nb::arg("sqs"), nb::arg("cqs"), nb::arg("raddr"),
        nb::arg("rkey"), nb::arg("total"), nb::arg("batch"), nb::arg("warmup") = 0,
        nb::arg("hook") = 0, nb::arg("ctx") = 0, nb::arg("fast") = false, nb::call_guard<nb::gil_scoped_release>(),
        "Post `total` 8-byte inline writes, `batch` per doorbell; returns (ns, wqes). fast: "
        "prebuilt 48-byte WQE copies instead of queues.hpp's SqProducer.");
  m.def("bench_latency", &bench_latency, nb::arg("sq"), nb::arg("cq"), nb::arg("raddr"),
        nb::arg("rkey"), nb::arg("iters"), nb::arg("warmup") = 0, nb::arg("hook") = 0,
        nb::arg("ctx") = 0,
        nb::call_guard<nb::gil_scoped_release>(),
        "Doorbell-to-CQE latency samples (ns) of one signaled 8-byte inline write.");
}

}  // namespace gicbench
