// The host submitter's loops on mlx5 queues in memory (see host_loops.hpp): the arguments'
// checks, attaching to each QP from what its memory says, the reclamation plan and msg-rate's
// threads; the loops themselves are loop_shapes.hpp's over Mlx5Poster.
#include "host_loops.hpp"

#include <algorithm>
#include <atomic>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>

#include "loop_shapes.hpp"
#include "mlx5_poster.hpp"

namespace gicbench {
namespace host {
namespace {

// Several submitting threads may share one inline-progress engine: whoever holds the flag
// progresses it, the others keep polling their own CQs.
class SharedProgress {
 public:
  explicit SharedProgress(Progress p) : p_(p) {}
  void operator()() {
    if (!p_.fn) return;
    if (busy_.test_and_set(std::memory_order_acquire)) return;
    p_();
    busy_.clear(std::memory_order_release);
  }

 private:
  Progress p_;
  std::atomic_flag busy_ = ATOMIC_FLAG_INIT;
};

// What a loop does between empty polls: progress the NIC (inline mode), then pause.
template <class Prog>
struct Idle {
  Prog& progress;
  void operator()() {
    progress();
    cpu_relax();
  }
};

// Lanes a loop uses must not share an SQ or a CQ: a completion must name the lane it retires.
// Sorted by queue address, a shared queue shows up as neighbours (lanes may be thousands).
bool distinct_queues(const std::vector<Lane>& lanes, LoopError& err) {
  std::vector<std::pair<const void*, size_t>> qs;
  qs.reserve(2 * lanes.size());
  for (size_t i = 0; i < lanes.size(); ++i) {
    qs.emplace_back(lanes[i].sq.buf, i);
    qs.emplace_back(lanes[i].cq.buf, i);
  }
  std::sort(qs.begin(), qs.end());
  for (size_t k = 1; k < qs.size(); ++k)
    if (qs[k].first == qs[k - 1].first) {
      const size_t i = std::min(qs[k - 1].second, qs[k].second);
      const size_t j = std::max(qs[k - 1].second, qs[k].second);
      return err.refuse("lanes", "lanes with their own SQ and CQ each",
                        "lanes " + std::to_string(i) + " and " + std::to_string(j) +
                            " share a queue (QPs " + qpn_hex(lanes[i].sq.qpn) + " and " +
                            qpn_hex(lanes[j].sq.qpn) + ")");
    }
  return true;
}

// Posters on lanes[first], lanes[first + step], ...: each SQ resumes where its memory says (see
// attach_retired in queues.hpp). Writes go from `src` to `dst`, or each lane's own regions.
bool attach(const std::vector<Lane>& lanes, size_t first, size_t step, const Buffer* src,
            const Buffer* dst, bool inline_payload, std::vector<Mlx5Poster>& out,
            LoopError& err) {
  out.clear();
  out.reserve(lanes.size());
  for (size_t i = first; i < lanes.size(); i += step) {
    const Lane& l = lanes[i];
    uint16_t retired = 0;
    if (const char* why = attach_retired(l.sq, l.cq, retired)) {
      err.failed = true;
      err.kind = "queue_state";
      err.qpn = l.sq.qpn;
      err.pi = SqProducer::posted_in_memory(l.sq);
      err.message = "QP " + qpn_hex(l.sq.qpn) + ": cannot tell what is outstanding: " + why +
                    " (was it used outside gicbench's loops?)";
      return false;
    }
    out.emplace_back(l, retired, src ? *src : l.src, dst ? *dst : l.dst, inline_payload);
  }
  return true;
}

bool refuse_size(LoopError& err, uint32_t size) {
  return err.refuse("size", "a payload that fits one WQE of 63 segments",
                    "an inline write of " + std::to_string(size) + " bytes does not fit one WQE");
}

}  // namespace

uint32_t write_wqebbs(bool inline_payload, uint32_t size, bool dc, bool compact_av) {
  return SqProducer::write_wqebbs(inline_payload, size, dc, compact_av);
}

bool single_op(std::vector<Lane>& lanes, const SingleOpArgs& a, Progress progress, int64_t* out,
               LoopError& err) {
  err.total = static_cast<uint64_t>(a.warmup) + a.iters;
  if (a.selected >= lanes.size())
    return err.refuse("selected", "a lane index below " + std::to_string(lanes.size()),
                      "selected lane " + std::to_string(a.selected) + " of " +
                          std::to_string(lanes.size()));
  if (write_wqebbs(a.inline_payload, a.size, lanes[a.selected].dc, lanes[a.selected].compact_av) ==
      0)
    return refuse_size(err, a.size);
  // scope=all waits on every lane; otherwise only the selected lane is touched.
  std::vector<Lane> one;
  if (!a.scope_all) one.push_back(lanes[a.selected]);
  const std::vector<Lane>& used = a.scope_all ? lanes : one;
  std::vector<Mlx5Poster> posters;
  if (!distinct_queues(used, err) ||
      !attach(used, 0, 1, &a.src, &a.dst, a.inline_payload, posters, err))
    return false;
  const loops::LatencyShape shape{static_cast<loops::Mode>(a.mode), a.size, a.src,
                                  a.reply.addr + a.size - 8, a.iters, a.warmup, a.timeout_ns};
  Idle<Progress> idle{progress};
  return loops::single_op(posters, a.scope_all ? a.selected : 0, a.scope_all, shape, idle, out,
                          err);
}

bool rtt_respond(Lane& lane, uint32_t size, bool inline_payload, Buffer watch, Buffer src,
                 Buffer dst, uint32_t count, int64_t timeout_ns, Progress progress,
                 LoopError& err) {
  err.total = count;
  if (write_wqebbs(inline_payload, size, lane.dc, lane.compact_av) == 0)
    return refuse_size(err, size);
  std::vector<Lane> one{lane};
  std::vector<Mlx5Poster> posters;
  if (!attach(one, 0, 1, &src, &dst, inline_payload, posters, err)) return false;
  const loops::RespondShape shape{size, src, watch.addr + size - 8, count, timeout_ns};
  Idle<Progress> idle{progress};
  return loops::respond(posters[0], shape, idle, err);
}

namespace {

// A lane's reclamation in msg-rate (poster.hpp's signal_every), refused unless the SQ holds a
// whole batch and the CQ every completion that can be outstanding.
bool plan_reclaim(const Lane& l, size_t index, const MsgRateArgs& a, uint32_t& signal,
                  LoopError& err);

// The same for chains of `batch` writes of `size` bytes (the cycle's QPs).
bool plan_chain_reclaim(const Lane& l, size_t index, bool inline_payload, uint32_t size,
                        uint32_t batch, uint32_t& signal, LoopError& err) {
  MsgRateArgs a;
  a.inline_payload = inline_payload;
  a.size = size;
  a.batch = batch;
  return plan_reclaim(l, index, a, signal, err);
}

bool plan_reclaim(const Lane& l, size_t index, const MsgRateArgs& a, uint32_t& signal,
                  LoopError& err) {
  const char* kind = a.inline_payload ? "inline" : "pointer";
  const char* tr = l.dc ? (l.compact_av ? "DC (compact AV)" : "DC") : "RC";
  const std::string what = std::to_string(a.size) + "-byte " + kind + " " + tr + " write";
  const uint32_t bbs = write_wqebbs(a.inline_payload, a.size, l.dc, l.compact_av);
  if (bbs == 0)
    return err.refuse("size", "a payload that fits one WQE of 63 segments",
                      "a " + what + " does not fit one WQE");
  const uint32_t max_wqes = l.sq.wqebb_cnt / bbs;  // WQEs the SQ can hold at once
  if (static_cast<uint64_t>(a.batch) * bbs > l.sq.wqebb_cnt)
    return err.refuse(
        "batch",
        "at most " + std::to_string(max_wqes) + " WQEs per doorbell: a " + what + " takes " +
            std::to_string(bbs) + " WQEBBs and the SQ holds " + std::to_string(l.sq.wqebb_cnt),
        "batch=" + std::to_string(a.batch) + " needs " +
            std::to_string(static_cast<uint64_t>(a.batch) * bbs) + " WQEBBs (" +
            std::to_string(bbs) + " WQEBBs per " + what + ") but the SQ of lane " +
            std::to_string(index) + " (QP " + qpn_hex(l.sq.qpn) + ") holds " +
            std::to_string(l.sq.wqebb_cnt));
  signal = signal_every(l.sq.wqebb_cnt, bbs, a.batch);
  // Every CQE still in the CQ belongs to an outstanding WQE: at most one signaled WQE in
  // signal_every among max_wqes, plus the lane's final one.
  const uint32_t cqes = std::min<uint32_t>(max_wqes, (max_wqes + signal - 1) / signal + 1);
  if (cqes > l.cq.ncqe)
    return err.refuse("lanes", "a CQ of at least " + std::to_string(cqes) + " entries",
                      "the CQ of lane " + std::to_string(index) + " (QP " + qpn_hex(l.sq.qpn) +
                          ") has " + std::to_string(l.cq.ncqe) + " entries but up to " +
                          std::to_string(cqes) + " completions can be outstanding");
  return true;
}

struct ThreadOut {
  loops::RateOut out;
  LoopError err;
};

struct Shared {
  SharedProgress progress;
  std::atomic<uint32_t> ready;
  std::atomic<bool> failed{false};  // a thread gave up: the others stop too
  Shared(Progress p, uint32_t threads) : progress(p), ready(threads) {}
};

// Runs body(t, shared, out) for t = 1..threads-1 on threads of their own and t = 0 on the
// caller's; each body meets the others at the start line (Shared::ready) itself. Gathers the
// windows and totals into `res`; false with the failure that stopped the others (not their
// "stopped") in `err`.
template <class Body>
bool run_threads(uint32_t threads, Progress progress, std::vector<ThreadOut>& outs, Body body,
                 MsgRateResult& res, LoopError& err) {
  Shared sh(progress, threads);
  std::vector<std::thread> pool;
  try {
    for (uint32_t t = 1; t < threads; ++t)
      pool.emplace_back([&body, &sh, &outs, t] { body(t, sh, outs[t]); });
  } catch (const std::system_error& e) {
    // Release the threads already waiting at the start line, then report.
    sh.failed.store(true);
    sh.ready.fetch_sub(threads - 1 - static_cast<uint32_t>(pool.size()));
    sh.ready.fetch_sub(1);
    for (auto& th : pool) th.join();
    return err.refuse("threads", "as many threads as the system can start",
                      std::string("could not start a submitting thread: ") + e.what());
  }
  body(0, sh, outs[0]);
  for (auto& th : pool) th.join();
  uint64_t posted = 0;
  for (auto& o : outs) posted += o.out.posted;
  const LoopError* first = nullptr;
  for (auto& o : outs)
    if (o.err.failed && (first == nullptr || first->kind == "stopped")) first = &o.err;
  if (first != nullptr) {
    const uint64_t total = err.total;
    err = *first;
    err.done = posted;
    err.total = total;
    return false;
  }
  // The rank's time: the first thread's first timed post to the last thread's last completion.
  // Not the slowest thread's own time: threads time-sliced on fewer cores run one after another,
  // and each one's time alone would overstate their sum's rate.
  int64_t t_first = outs[0].out.t_start, t_last = outs[0].out.t_end;
  for (auto& o : outs) {
    res.windows_ns.insert(res.windows_ns.end(), o.out.windows.begin(), o.out.windows.end());
    t_first = std::min(t_first, o.out.t_start);
    t_last = std::max(t_last, o.out.t_end);
    res.doorbells += o.out.doorbells;
    res.cqes += o.out.cqes;
  }
  res.elapsed_ns = t_last - t_first;
  err.done = posted;
  return true;
}

// Thread t owns lanes t, t + T, ...
void msg_rate_thread(const std::vector<Lane>& lanes, const MsgRateArgs& a,
                     const std::vector<uint32_t>& plan, uint32_t t, Shared& sh, ThreadOut& o) {
  std::vector<Mlx5Poster> mine;
  const bool attached =
      attach(lanes, t, a.threads, nullptr, nullptr, a.inline_payload, mine, o.err);
  if (!attached) sh.failed.store(true);
  // Everyone meets here first, so the timed region starts together (and nobody waits forever for
  // a thread that could not attach).
  sh.ready.fetch_sub(1, std::memory_order_acq_rel);
  while (sh.ready.load(std::memory_order_acquire) != 0) cpu_relax();
  if (!attached) return;
  std::vector<uint32_t> signal;
  for (size_t i = t; i < lanes.size(); i += a.threads) signal.push_back(plan[i]);
  const loops::RateShape shape{a.batch, a.size, a.warmup_per_thread, a.messages_per_thread,
                               a.window, a.timeout_ns};
  Idle<SharedProgress> idle{sh.progress};
  if (!loops::rate(mine, signal, shape, idle, loops::Cancel{&sh.failed}, o.out, o.err))
    sh.failed.store(true, std::memory_order_relaxed);
}

}  // namespace

bool msg_rate(std::vector<Lane>& lanes, const MsgRateArgs& a, Progress progress,
              MsgRateResult& res, LoopError& err) {
  res = MsgRateResult{};
  err.total = (a.warmup_per_thread + a.messages_per_thread) * a.threads;
  const std::string nl = std::to_string(lanes.size());
  if (lanes.empty()) return err.refuse("lanes", "at least one lane", "no lanes given");
  if (a.threads == 0 || a.threads > lanes.size())
    return err.refuse("threads", "1.." + nl + " (one thread owns one or more lanes)",
                      "threads=" + std::to_string(a.threads) + " with " + nl + " lanes");
  if (a.batch == 0) return err.refuse("batch", "at least 1 WQE per doorbell", "batch=0");
  for (size_t i = 0; i < lanes.size(); ++i) {
    const Lane& l = lanes[i];
    if (a.size == 0 || a.size > l.dst.length || a.size > l.src.length)
      return err.refuse("size",
                        "1.." + std::to_string(std::min(l.dst.length, l.src.length)) +
                            " (the lane's regions)",
                        "size=" + std::to_string(a.size) + " with lane " + std::to_string(i) +
                            "'s regions of " + std::to_string(l.dst.length) + " (remote) and " +
                            std::to_string(l.src.length) + " (source) bytes");
  }
  if (a.messages_per_thread == 0 || a.window == 0)
    return err.refuse("messages_per_thread", "at least 1 message and 1 per window",
                      "messages_per_thread=" + std::to_string(a.messages_per_thread) +
                          ", window=" + std::to_string(a.window));
  std::vector<uint32_t> plan(lanes.size());
  if (!distinct_queues(lanes, err)) return false;
  for (size_t i = 0; i < lanes.size(); ++i)
    if (!plan_reclaim(lanes[i], i, a, plan[i], err)) return false;

  std::vector<ThreadOut> outs(a.threads);
  const bool ok = run_threads(
      a.threads, progress, outs,
      [&](uint32_t t, Shared& sh, ThreadOut& o) { msg_rate_thread(lanes, a, plan, t, sh, o); },
      res, err);
  if (ok) res.messages = a.messages_per_thread * a.threads;
  return ok;
}

namespace {

// The cycle's QPs: lanes sharing an SQ are one QP, numbered by its first lane in the table.
struct CyclePlan {
  std::vector<size_t> first_lane;         // per QP: the lane whose queues it drives
  std::vector<uint32_t> qp_of;            // per lane: its QP
  std::vector<uint32_t> signal;           // per QP: signal_every of a chain
};

bool plan_cycle(const std::vector<Lane>& lanes, const CycleArgs& a, CyclePlan& plan,
                LoopError& err) {
  std::unordered_map<const void*, uint32_t> by_sq;  // SQ buffer -> QP
  by_sq.reserve(lanes.size());
  plan.qp_of.resize(lanes.size());
  std::vector<Lane> qps;
  for (size_t i = 0; i < lanes.size(); ++i) {
    const void* sq = lanes[i].sq.buf;
    auto it = by_sq.find(sq);
    if (it != by_sq.end()) {
      const Lane& q = lanes[plan.first_lane[it->second]];
      if (q.cq.buf != lanes[i].cq.buf || q.dc != lanes[i].dc)
        return err.refuse("lanes", "lanes of one QP with the same CQ and transport",
                          "lanes " + std::to_string(plan.first_lane[it->second]) + " and " +
                              std::to_string(i) + " share QP " + qpn_hex(q.sq.qpn) +
                              " but not its CQ or transport");
      plan.qp_of[i] = it->second;
      continue;
    }
    const uint32_t q = static_cast<uint32_t>(plan.first_lane.size());
    by_sq.emplace(sq, q);
    plan.first_lane.push_back(i);
    plan.qp_of[i] = q;
    qps.push_back(lanes[i]);
  }
  // Two QPs must not share an SQ or a CQ: a completion must name the QP it retires.
  if (!distinct_queues(qps, err)) return false;
  plan.signal.resize(qps.size());
  const uint32_t chain = std::min(a.batch, a.writes_per_visit);
  for (size_t q = 0; q < qps.size(); ++q)
    if (!plan_chain_reclaim(qps[q], plan.first_lane[q], a.inline_payload, a.size, chain,
                            plan.signal[q], err))
      return false;
  return true;
}

// Unit t: its QPs (t, t + T, ...) as posters and its lanes as connections, in table order.
void cycle_thread(const std::vector<Lane>& lanes, const CycleArgs& a, const CyclePlan& plan,
                  uint32_t t, Shared& sh, ThreadOut& o) {
  std::vector<Lane> mine_qps;
  std::vector<uint32_t> local(plan.first_lane.size(), UINT32_MAX), signal;
  for (size_t q = t; q < plan.first_lane.size(); q += a.threads) {
    local[q] = static_cast<uint32_t>(mine_qps.size());
    mine_qps.push_back(lanes[plan.first_lane[q]]);
    signal.push_back(plan.signal[q]);
  }
  std::vector<loops::Connection> conns;
  for (size_t i = 0; i < lanes.size(); ++i) {
    const uint32_t q = local[plan.qp_of[i]];
    if (q == UINT32_MAX) continue;
    const Lane& l = lanes[i];
    const uint64_t region = std::min(l.src.length, l.dst.length);
    conns.push_back(loops::Connection{q, static_cast<uint32_t>(i),
                                      std::max<uint64_t>(1, region / a.size)});
  }
  std::vector<Mlx5Poster> posters;
  const bool attached = attach(mine_qps, 0, 1, nullptr, nullptr, a.inline_payload, posters, o.err);
  if (!attached) sh.failed.store(true);
  sh.ready.fetch_sub(1, std::memory_order_acq_rel);
  while (sh.ready.load(std::memory_order_acquire) != 0) cpu_relax();
  if (!attached) return;
  const uint64_t visits = a.warmup_visits + a.visits_per_thread;
  const auto last = loops::last_visits(conns, posters.size(), visits);
  const loops::CycleShape shape{a.writes_per_visit, std::min(a.batch, a.writes_per_visit),
                                a.size, a.warmup_visits, a.visits_per_thread, a.window,
                                a.timeout_ns};
  // Each poster starts aimed at its own first lane; a DCI's other lanes re-aim it per visit.
  std::vector<uint32_t> aimed(posters.size(), UINT32_MAX);
  auto aim = [&](Mlx5Poster& p, uint32_t lane) {
    const size_t k = static_cast<size_t>(&p - posters.data());
    if (aimed[k] != lane) {
      p.aim(lanes[lane]);
      aimed[k] = lane;
    }
  };
  Idle<SharedProgress> idle{sh.progress};
  if (!loops::cycle(posters, conns, signal, last, aim, shape, idle, loops::Cancel{&sh.failed},
                    o.out, o.err))
    sh.failed.store(true, std::memory_order_relaxed);
}

}  // namespace

bool cycle(std::vector<Lane>& lanes, const CycleArgs& a, Progress progress, MsgRateResult& res,
           LoopError& err) {
  res = MsgRateResult{};
  err.total = (a.warmup_visits + a.visits_per_thread) * a.writes_per_visit * a.threads;
  if (lanes.empty()) return err.refuse("lanes", "at least one lane", "no lanes given");
  if (a.writes_per_visit == 0)
    return err.refuse("writes_per_visit", "at least 1 write per connection visit",
                      "writes_per_visit=0");
  if (a.batch == 0) return err.refuse("batch", "at least 1 WQE per doorbell", "batch=0");
  if (a.visits_per_thread == 0 || a.window == 0)
    return err.refuse("visits_per_thread", "at least 1 visit and 1 message per window",
                      "visits_per_thread=" + std::to_string(a.visits_per_thread) +
                          ", window=" + std::to_string(a.window));
  for (size_t i = 0; i < lanes.size(); ++i) {
    const Lane& l = lanes[i];
    if (a.size == 0 || a.size > l.dst.length || a.size > l.src.length)
      return err.refuse("size",
                        "1.." + std::to_string(std::min(l.dst.length, l.src.length)) +
                            " (the lane's regions)",
                        "size=" + std::to_string(a.size) + " with lane " + std::to_string(i) +
                            "'s regions of " + std::to_string(l.dst.length) + " (remote) and " +
                            std::to_string(l.src.length) + " (source) bytes");
  }
  CyclePlan plan;
  if (!plan_cycle(lanes, a, plan, err)) return false;
  const std::string nq = std::to_string(plan.first_lane.size());
  if (a.threads == 0 || a.threads > plan.first_lane.size())
    return err.refuse("threads", "1.." + nq + " (one unit owns one or more QPs)",
                      "threads=" + std::to_string(a.threads) + " with " + nq + " QPs");
  std::vector<ThreadOut> outs(a.threads);
  const bool ok = run_threads(
      a.threads, progress, outs,
      [&](uint32_t t, Shared& sh, ThreadOut& o) { cycle_thread(lanes, a, plan, t, sh, o); },
      res, err);
  if (ok) res.messages = a.visits_per_thread * a.writes_per_visit * a.threads;
  return ok;
}

}  // namespace host
}  // namespace gicbench
