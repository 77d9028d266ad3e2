// The host submitter's loops on the verbs provider (see verbs_loops.hpp).
#ifdef GICBENCH_HAVE_VERBS
#include "verbs_loops.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "loop_shapes.hpp"
#include "verbs_poster.hpp"

namespace gicbench {
namespace verbs {
namespace {

// Between empty polls the verbs loops poll again at once (no NIC to progress, no pause).
struct Idle {
  void operator()() const {}
};

}  // namespace

bool single_op(const LatencyArgs& a, int64_t* samples, LoopError& err) {
  // One write outstanding at a time: a queue of depth 1, chains of 1.
  std::vector<VerbsPoster> lane;
  lane.emplace_back(a.q.qp, a.q.cq, a.q.qpn, 1, 1, a.src, a.dst, a.inline_payload);
  const loops::LatencyShape shape{static_cast<loops::Mode>(a.mode), a.size, a.src,
                                  a.reply.addr + a.size - 8, a.iters, a.warmup,
                                  static_cast<int64_t>(a.timeout_ns)};
  Idle idle;
  return loops::single_op(lane, 0, false, shape, idle, samples, err);
}

bool respond(const RespondArgs& a, LoopError& err) {
  VerbsPoster lane(a.q.qp, a.q.cq, a.q.qpn, 1, 1, a.src, a.dst, a.inline_payload);
  const loops::RespondShape shape{a.size, a.src, a.watch.addr + a.size - 8, a.count,
                                  static_cast<int64_t>(a.timeout_ns)};
  Idle idle;
  return loops::respond(lane, shape, idle, err);
}

bool msg_rate(const std::vector<RateLane>& lanes, const RateArgs& a,
              std::vector<int64_t>& windows, RateStats& stats, LoopError& err) {
  const uint64_t total = a.warmup + a.messages;
  err.total = total;
  // Chains no longer than the SQ: every lane's depth is the smallest max_send_wr.
  uint32_t depth = UINT32_MAX;
  for (const auto& l : lanes) {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    if (ibv_query_qp(l.q.qp, &attr, IBV_QP_CAP, &init) == 0)
      depth = std::min<uint32_t>(depth, init.cap.max_send_wr);
  }
  if (depth == UINT32_MAX) depth = 0;
  if (a.size == 0) return err.refuse("size", "at least 1 byte", "size=0");
  if (a.window == 0) return err.refuse("window", "at least 1 message", "window=0");
  if (lanes.empty() || depth == 0 || a.batch == 0 || a.batch > depth)
    return err.refuse("batch", "1.." + std::to_string(depth) + " (the SQ depth here)",
                      "batch=" + std::to_string(a.batch) + " over " +
                          std::to_string(lanes.size()) + " lane(s) of SQ depth " +
                          std::to_string(depth));
  std::vector<VerbsPoster> posters;
  posters.reserve(lanes.size());
  for (const auto& l : lanes)
    posters.emplace_back(l.q.qp, l.q.cq, l.q.qpn, depth, depth, l.src, l.dst, a.inline_payload);
  const std::vector<uint32_t> signal(lanes.size(), signal_every(depth, 1, a.batch));
  const loops::RateShape shape{a.batch, a.size, a.warmup, a.messages, a.window,
                               static_cast<int64_t>(a.timeout_ns)};
  Idle idle;
  loops::RateOut out;
  const bool ok = loops::rate(posters, signal, shape, idle, loops::Cancel{}, out, err);
  windows = std::move(out.windows);
  if (!ok) return false;
  stats.elapsed_ns = static_cast<uint64_t>(out.elapsed());
  stats.messages = a.messages;
  stats.doorbells = out.doorbells;
  stats.cqes = out.cqes;
  err.done = total;
  return true;
}

bool cycle(const std::vector<RateLane>& lanes, const CycleArgs& a,
           std::vector<int64_t>& windows, RateStats& stats, LoopError& err) {
  const uint64_t total = (a.warmup_visits + a.visits) * a.writes_per_visit;
  err.total = total;
  uint32_t depth = UINT32_MAX;
  for (const auto& l : lanes) {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    if (ibv_query_qp(l.q.qp, &attr, IBV_QP_CAP, &init) == 0)
      depth = std::min<uint32_t>(depth, init.cap.max_send_wr);
  }
  if (depth == UINT32_MAX) depth = 0;
  if (a.size == 0) return err.refuse("size", "at least 1 byte", "size=0");
  if (a.writes_per_visit == 0)
    return err.refuse("writes_per_visit", "at least 1 write per connection visit",
                      "writes_per_visit=0");
  if (a.visits == 0 || a.window == 0)
    return err.refuse("visits", "at least 1 visit and 1 message per window",
                      "visits=" + std::to_string(a.visits) + ", window=" +
                          std::to_string(a.window));
  const uint32_t chain = std::min(a.batch, a.writes_per_visit);
  if (lanes.empty() || depth == 0 || chain == 0 || chain > depth)
    return err.refuse("batch", "1.." + std::to_string(depth) + " (the SQ depth here)",
                      "a chain of " + std::to_string(chain) + " over " +
                          std::to_string(lanes.size()) + " lane(s) of SQ depth " +
                          std::to_string(depth));
  std::vector<VerbsPoster> posters;
  posters.reserve(lanes.size());
  std::vector<loops::Connection> conns;
  conns.reserve(lanes.size());
  for (size_t i = 0; i < lanes.size(); ++i) {
    const auto& l = lanes[i];
    posters.emplace_back(l.q.qp, l.q.cq, l.q.qpn, depth, chain, l.src, l.dst, a.inline_payload);
    const uint64_t region = std::min(l.src.length, l.dst.length);
    conns.push_back(loops::Connection{static_cast<uint32_t>(i), static_cast<uint32_t>(i),
                                      std::max<uint64_t>(1, region / a.size)});
  }
  const std::vector<uint32_t> signal(lanes.size(), signal_every(depth, 1, chain));
  const auto last = loops::last_visits(conns, posters.size(), a.warmup_visits + a.visits);
  const loops::CycleShape shape{a.writes_per_visit, chain, a.size, a.warmup_visits, a.visits,
                                a.window, static_cast<int64_t>(a.timeout_ns)};
  Idle idle;
  loops::RateOut out;
  auto aim = [](VerbsPoster&, uint32_t) {};  // RC: every lane is its own QP
  const bool ok = loops::cycle(posters, conns, signal, last, aim, shape, idle, loops::Cancel{},
                               out, err);
  windows = std::move(out.windows);
  if (!ok) return false;
  stats.elapsed_ns = static_cast<uint64_t>(out.elapsed());
  stats.messages = a.visits * a.writes_per_visit;
  stats.doorbells = out.doorbells;
  stats.cqes = out.cqes;
  err.done = total;
  return true;
}

}  // namespace verbs
}  // namespace gicbench
#endif  // GICBENCH_HAVE_VERBS
