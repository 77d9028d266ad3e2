// The host submitter's loops on mlx5 queues in memory (see host_loops.hpp): the arguments'
// checks, attaching to each QP from what its memory says, the reclamation plan and msg-rate's
// threads; the loops themselves are loop_shapes.hpp's over Mlx5Poster.
#include "host_loops.hpp"

#include <algorithm>
#include <atomic>
#include <string>
#include <system_error>
#include <thread>
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

  Shared sh(progress, a.threads);
  std::vector<ThreadOut> outs(a.threads);
  std::vector<std::thread> pool;
  try {
    for (uint32_t t = 1; t < a.threads; ++t)
      pool.emplace_back(msg_rate_thread, std::cref(lanes), std::cref(a), std::cref(plan), t,
                        std::ref(sh), std::ref(outs[t]));
  } catch (const std::system_error& e) {
    // Release the threads already waiting at the start line, then report.
    sh.failed.store(true);
    sh.ready.fetch_sub(a.threads - 1 - static_cast<uint32_t>(pool.size()));
    sh.ready.fetch_sub(1);
    for (auto& th : pool) th.join();
    return err.refuse("threads", "as many threads as the system can start",
                      std::string("could not start a submitting thread: ") + e.what());
  }
  msg_rate_thread(lanes, a, plan, 0, sh, outs[0]);
  for (auto& th : pool) th.join();
  uint64_t posted = 0;
  for (auto& o : outs) posted += o.out.posted;
  // Report the failure that stopped the others, not their "stopped".
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
  for (auto& o : outs) {
    res.windows_ns.insert(res.windows_ns.end(), o.out.windows.begin(), o.out.windows.end());
    res.elapsed_ns = std::max(res.elapsed_ns, o.out.elapsed);
    res.doorbells += o.out.doorbells;
    res.cqes += o.out.cqes;
  }
  res.messages = a.messages_per_thread * a.threads;
  err.done = posted;
  return true;
}

}  // namespace host
}  // namespace gicbench
