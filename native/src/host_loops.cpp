// The host submitter's timing loops (see host_loops.hpp).
#include "host_loops.hpp"

#include <signal.h>
#include <stdio.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <system_error>
#include <utility>
#include <thread>

namespace gicbench {
namespace host {

std::atomic<int> g_interrupt{0};

namespace {

struct sigaction g_previous[2];
constexpr int kSignals[2] = {SIGTERM, SIGINT};

void on_signal(int sig) {
  g_interrupt.store(1, std::memory_order_relaxed);
  // Chain to the previous handler (Python's, which schedules the Python-level handler).
  for (int i = 0; i < 2; ++i) {
    if (kSignals[i] != sig) continue;
    if (g_previous[i].sa_flags & SA_SIGINFO) continue;  // not Python's: nothing to chain to
    const auto h = g_previous[i].sa_handler;
    if (h != SIG_DFL && h != SIG_IGN && h != nullptr) h(sig);
  }
}

}  // namespace

void install_interrupt_handler() {
  for (int i = 0; i < 2; ++i) {
    struct sigaction cur {};
    sigaction(kSignals[i], nullptr, &cur);
    // Installed twice without Python replacing it in between: keep the handler we chain to
    // (saving ourselves as "previous" would recurse on the next signal).
    if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == on_signal) continue;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(kSignals[i], &sa, &g_previous[i]);
  }
}

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

// Stops a loop early: a signal (g_interrupt), or another submitting thread that failed.
struct Cancel {
  const std::atomic<bool>* peer_failed = nullptr;
  bool operator()() const {
    return interrupted() || (peer_failed && peer_failed->load(std::memory_order_relaxed));
  }
  const char* kind() const { return interrupted() ? "interrupted" : "stopped"; }
};

struct LaneState {
  Lane* lane;
  SqProducer sq;
  CqConsumer cq;
  LaneState(Lane& l, uint16_t retired) : lane(&l), sq(l.sq, retired), cq(l.cq) {}
};

void fail_args(LoopError& err, const std::string& field, const std::string& allowed,
               const std::string& message) {
  err.failed = true;
  err.kind = "bad_arguments";
  err.field = field;
  err.allowed = allowed;
  err.message = message;
}

std::string hex_qpn(uint32_t qpn) {
  char b[16];
  snprintf(b, sizeof b, "0x%06x", qpn);
  return b;
}

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
      fail_args(err, "lanes", "lanes with their own SQ and CQ each",
                "lanes " + std::to_string(i) + " and " + std::to_string(j) +
                    " share a queue (QPs " + hex_qpn(lanes[i].sq.qpn) + " and " +
                    hex_qpn(lanes[j].sq.qpn) + ")");
      return false;
    }
  return true;
}

// Attach to lanes[first], lanes[first + step], ...: each SQ resumes where its memory says (see
// attach_retired in queues.hpp).
bool attach(std::vector<Lane>& lanes, size_t first, size_t step, std::vector<LaneState>& out,
            LoopError& err) {
  out.clear();
  out.reserve(lanes.size());
  for (size_t i = first; i < lanes.size(); i += step) {
    uint16_t retired = 0;
    if (const char* why = attach_retired(lanes[i].sq, lanes[i].cq, retired)) {
      err.failed = true;
      err.kind = "queue_state";
      err.qpn = lanes[i].sq.qpn;
      err.pi = SqProducer::posted_in_memory(lanes[i].sq);
      err.message = "QP " + hex_qpn(lanes[i].sq.qpn) + ": cannot tell what is outstanding: " +
                    why + " (was it used outside gicbench's loops?)";
      return false;
    }
    out.emplace_back(lanes[i], retired);
  }
  return true;
}
void fill_queue_state(LoopError& err, const LaneState& s, const char* kind) {
  err.failed = true;
  err.kind = kind;
  err.qpn = s.lane->sq.qpn;
  err.pi = s.sq.pi();
  err.retired = s.sq.retired();
  err.cq_ci = s.cq.ci();
}

// Consume one CQE if present. Returns -1 on an error CQE (err filled), 1 if one was consumed.
int reap_one(LaneState& s, LoopError& err) {
  mlx5::CqeView c;
  if (!s.cq.poll(c)) return 0;
  if (cqe_is_error(c)) {
    fill_queue_state(err, s, "cqe_error");
    err.syndrome = c.syndrome;
    err.vendor_syndrome = c.vendor_syndrome;
    err.wqe_counter = c.wqe_counter;
    return -1;
  }
  s.sq.retire(c.wqe_counter);
  return 1;
}

// Poll until `done()` holds; the NIC is progressed while waiting. The clock is read every 256
// polls so the deadline costs little on the fast path.
template <class Done, class Prog>
bool wait_until(LaneState& s, Done done, Prog& progress, int64_t timeout_ns, LoopError& err,
                Cancel cancel = {}) {
  int64_t deadline = 0;
  for (uint32_t spins = 0;; ++spins) {
    if (done()) return true;
    const int r = reap_one(s, err);
    if (r < 0) return false;
    if (r > 0) continue;
    progress();
    if ((spins & 255) == 255) {
      if (cancel()) {
        fill_queue_state(err, s, cancel.kind());
        return false;
      }
      const int64_t t = now_ns();
      if (deadline == 0) {
        deadline = t + timeout_ns;
      } else if (t > deadline) {
        fill_queue_state(err, s, "timeout");
        return false;
      }
    }
    cpu_relax();
  }
}

template <class Prog>
bool quiet(LaneState& s, Prog& progress, int64_t timeout_ns, LoopError& err, Cancel cancel = {}) {
  return wait_until(s, [&] { return s.sq.outstanding() == 0; }, progress, timeout_ns, err,
                    cancel);
}

inline uint64_t load_word(uint64_t addr) {
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(addr), __ATOMIC_ACQUIRE);
}

inline void stamp_sequence(const Buffer& src, uint32_t size, uint64_t seq) {
  // The sequence number rides in the last 8 bytes of the payload (the polled word).
  *reinterpret_cast<uint64_t*>(src.addr + size - 8) = seq;
}

WriteOp make_write(const Lane& lane, const Buffer& src, const Buffer& dst, uint64_t offset,
                   uint32_t size, bool inline_payload, bool signaled) {
  WriteOp op;
  op.raddr = dst.addr + offset;
  op.rkey = dst.key;
  op.length = size;
  if (inline_payload) {
    op.inline_data = reinterpret_cast<const void*>(src.addr + offset);
  } else {
    op.laddr = src.addr + offset;
    op.lkey = src.key;
  }
  op.signaled = signaled;
  if (lane.dc) {
    op.av = &lane.av;
    op.compact_av = lane.compact_av;
  }
  return op;
}

}  // namespace

uint32_t write_wqebbs(bool inline_payload, uint32_t size, bool dc, bool compact_av) {
  return SqProducer::write_wqebbs(inline_payload, size, dc, compact_av);
}

bool single_op(std::vector<Lane>& lanes, const SingleOpArgs& a, Progress progress, int64_t* out,
               LoopError& err) {
  const uint64_t total = static_cast<uint64_t>(a.warmup) + a.iters;
  err.total = total;
  if (a.selected >= lanes.size()) {
    fail_args(err, "selected", "a lane index below " + std::to_string(lanes.size()),
              "selected lane " + std::to_string(a.selected) + " of " +
                  std::to_string(lanes.size()));
    return false;
  }
  const uint32_t bbs = write_wqebbs(a.inline_payload, a.size, lanes[a.selected].dc,
                                    lanes[a.selected].compact_av);
  if (bbs == 0) {
    fail_args(err, "size", "a payload that fits one WQE of 63 segments",
              "an inline write of " + std::to_string(a.size) + " bytes does not fit one WQE");
    return false;
  }
  // scope=all waits on every lane; otherwise only the selected lane is touched.
  std::vector<Lane> one;
  if (!a.scope_all) one.push_back(lanes[a.selected]);
  std::vector<Lane>& used = a.scope_all ? lanes : one;
  std::vector<LaneState> states;
  if (!distinct_queues(used, err) || !attach(used, 0, 1, states, err)) return false;
  LaneState& sel = states.at(a.scope_all ? a.selected : 0);
  auto prog = [&] { progress(); };

  for (uint64_t i = 0; i < total; ++i) {
    if (interrupted()) {
      fill_queue_state(err, sel, "interrupted");
      err.done = i;
      return false;
    }
    const uint64_t seq = i + 1;
    stamp_sequence(a.src, a.size, seq);
    const WriteOp op = make_write(*sel.lane, a.src, a.dst, 0, a.size, a.inline_payload, true);
    // Untimed: work posted on this lane outside the loop must leave room first.
    if (!wait_until(sel, [&] { return sel.sq.free_wqebbs() >= bbs; }, prog, a.timeout_ns, err)) {
      err.done = i;
      return false;
    }
    int64_t t0 = 0, t1 = 0;
    bool ok = true;
    switch (a.mode) {
      case SingleOpMode::kIssue:
        t0 = now_ns();
        sel.sq.post_write(op);
        sel.sq.ring();
        t1 = now_ns();
        ok = quiet(sel, prog, a.timeout_ns, err);  // untimed: one outstanding
        break;
      case SingleOpMode::kPutCompletion:
        t0 = now_ns();
        sel.sq.post_write(op);
        sel.sq.ring();
        if (a.scope_all) {
          // A PE-wide quiet: every configured QP, in use or not, until the work its doorbell
          // record announces is retired by CQEs read from its CQ in memory.
          for (auto& s : states) {
            if (&s != &sel) s.sq.observe_posted();
            if (!(ok = quiet(s, prog, a.timeout_ns, err))) break;
          }
        } else {
          ok = quiet(sel, prog, a.timeout_ns, err);
        }
        t1 = now_ns();
        break;
      case SingleOpMode::kRoundTrip: {
        const uint64_t word = a.reply.addr + a.size - 8;
        t0 = now_ns();
        sel.sq.post_write(op);
        sel.sq.ring();
        if (!wait_until(sel, [&] { return load_word(word) == seq; }, prog, a.timeout_ns, err)) {
          err.word_seen = load_word(word);
          err.word_expected = seq;
          ok = false;
          break;
        }
        t1 = now_ns();
        ok = quiet(sel, prog, a.timeout_ns, err);
        break;
      }
    }
    if (!ok) {
      err.done = i;
      return false;
    }
    if (i >= a.warmup) out[i - a.warmup] = t1 - t0;
  }
  err.done = total;
  return true;
}

bool rtt_respond(Lane& lane, uint32_t size, bool inline_payload, Buffer watch, Buffer src,
                 Buffer dst, uint32_t count, int64_t timeout_ns, Progress progress,
                 LoopError& err) {
  err.total = count;
  const uint32_t bbs = write_wqebbs(inline_payload, size, lane.dc, lane.compact_av);
  if (bbs == 0) {
    fail_args(err, "size", "a payload that fits one WQE of 63 segments",
              "an inline write of " + std::to_string(size) + " bytes does not fit one WQE");
    return false;
  }
  std::vector<Lane> one{lane};
  std::vector<LaneState> states;
  if (!attach(one, 0, 1, states, err)) return false;
  LaneState& s = states[0];
  auto prog = [&] { progress(); };
  const uint64_t word = watch.addr + size - 8;
  for (uint64_t seq = 1; seq <= count; ++seq) {
    err.done = seq - 1;
    if (interrupted()) {
      fill_queue_state(err, s, "interrupted");
      return false;
    }
    if (!wait_until(s, [&] { return load_word(word) == seq; }, prog, timeout_ns, err)) {
      err.word_seen = load_word(word);
      err.word_expected = seq;
      return false;
    }
    // Work posted on this lane outside the loop must leave room first.
    if (!wait_until(s, [&] { return s.sq.free_wqebbs() >= bbs; }, prog, timeout_ns, err))
      return false;
    stamp_sequence(src, size, seq);
    s.sq.post_write(make_write(*s.lane, src, dst, 0, size, inline_payload, true));
    s.sq.ring();
    // Completing the reply also drives an inline-progress engine that must deliver it.
    if (!quiet(s, prog, timeout_ns, err)) return false;
  }
  err.done = count;
  return true;
}

namespace {

// How one lane reclaims its SQ in msg-rate. A lane waits before each batch until its SQ has room
// for the whole batch; room only comes back through signaled WQEs, and up to signal_every - 1
// WQEs after the last signaled one stay outstanding until a later signal. So
//   (signal_every - 1 + batch) x bbs <= wqebb_cnt
// is what makes every wait finite; signal_every is a quarter SQ when that allows, fewer when the
// batch is large, and 1 (every WQE signaled) when batch x bbs == wqebb_cnt.
struct Reclaim {
  uint32_t bbs = 0;           // WQEBBs per write WQE
  uint32_t signal_every = 1;  // WQEs per signaled WQE
};

bool plan_reclaim(const Lane& l, size_t index, const MsgRateArgs& a, Reclaim& r, LoopError& err) {
  const char* kind = a.inline_payload ? "inline" : "pointer";
  const char* tr = l.dc ? (l.compact_av ? "DC (compact AV)" : "DC") : "RC";
  const std::string what = std::to_string(a.size) + "-byte " + kind + " " + tr + " write";
  r.bbs = write_wqebbs(a.inline_payload, a.size, l.dc, l.compact_av);
  if (r.bbs == 0) {
    fail_args(err, "size", "a payload that fits one WQE of 63 segments",
              "a " + what + " does not fit one WQE");
    return false;
  }
  const uint32_t max_wqes = l.sq.wqebb_cnt / r.bbs;  // WQEs the SQ can hold at once
  if (static_cast<uint64_t>(a.batch) * r.bbs > l.sq.wqebb_cnt) {
    fail_args(err, "batch",
              "at most " + std::to_string(max_wqes) + " WQEs per doorbell: a " + what +
                  " takes " + std::to_string(r.bbs) + " WQEBBs and the SQ holds " +
                  std::to_string(l.sq.wqebb_cnt),
              "batch=" + std::to_string(a.batch) + " needs " +
                  std::to_string(static_cast<uint64_t>(a.batch) * r.bbs) + " WQEBBs (" +
                  std::to_string(r.bbs) + " WQEBBs per " + what + ") but the SQ of lane " +
                  std::to_string(index) + " (QP " + hex_qpn(l.sq.qpn) + ") holds " +
                  std::to_string(l.sq.wqebb_cnt));
    return false;
  }
  r.signal_every = std::max<uint32_t>(
      1, std::min<uint32_t>(l.sq.wqebb_cnt / (4 * r.bbs), max_wqes - a.batch + 1));
  // Every CQE still in the CQ belongs to an outstanding WQE: at most one signaled WQE in
  // signal_every among max_wqes, plus the lane's final one.
  const uint32_t cqes = std::min<uint32_t>(
      max_wqes, (max_wqes + r.signal_every - 1) / r.signal_every + 1);
  if (cqes > l.cq.ncqe) {
    fail_args(err, "lanes", "a CQ of at least " + std::to_string(cqes) + " entries",
              "the CQ of lane " + std::to_string(index) + " (QP " + hex_qpn(l.sq.qpn) +
                  ") has " + std::to_string(l.cq.ncqe) + " entries but up to " +
                  std::to_string(cqes) + " completions can be outstanding");
    return false;
  }
  return true;
}

struct ThreadOut {
  std::vector<int64_t> windows;
  int64_t elapsed = 0;
  uint64_t posted = 0;
  uint64_t doorbells = 0, cqes = 0;
  LoopError err;
};

struct Shared {
  SharedProgress progress;
  std::atomic<uint32_t> ready;
  std::atomic<bool> failed{false};  // a thread gave up: the others stop too
  Shared(Progress p, uint32_t threads) : progress(p), ready(threads) {}
};

void msg_rate_thread(std::vector<Lane>& lanes, const MsgRateArgs& a,
                     const std::vector<Reclaim>& plan, uint32_t t, Shared& sh, ThreadOut& o) {
  std::vector<LaneState> mine;
  const bool attached = attach(lanes, t, a.threads, mine, o.err);
  if (!attached) sh.failed.store(true);
  // Everyone meets here first, so the timed region starts together (and nobody waits forever for
  // a thread that could not attach).
  sh.ready.fetch_sub(1, std::memory_order_acq_rel);
  while (sh.ready.load(std::memory_order_acquire) != 0) cpu_relax();
  if (!attached) return;
  const Cancel cancel{&sh.failed};
  auto fail = [&] {
    o.err.done = o.posted;
    sh.failed.store(true, std::memory_order_relaxed);
  };
  auto prog = [&] { sh.progress(); };
  const uint64_t total = a.warmup_per_thread + a.messages_per_thread;
  const size_t n = mine.size();
  std::vector<Reclaim> rec;
  for (size_t i = t; i < lanes.size(); i += a.threads) rec.push_back(plan[i]);
  const uint64_t nbatches = (total + a.batch - 1) / a.batch;
  std::vector<uint32_t> since_signal(n, 0);
  std::vector<uint64_t> lane_msgs(n, 0);
  uint64_t ci_start = 0;  // CQ indices resume from the dbrec: count this call's CQEs only
  for (auto& s : mine) ci_start += s.cq.ci();

  uint64_t& posted = o.posted;
  uint64_t next_window = a.warmup_per_thread + a.window;
  int64_t t_start = a.warmup_per_thread == 0 ? now_ns() : 0, t_window = t_start;
  for (uint64_t b = 0; b < nbatches; ++b) {
    // One relaxed load per batch: a signal or a failed sibling ends the loop within a batch.
    if (cancel()) {
      fill_queue_state(o.err, mine[b % n], cancel.kind());
      return fail();
    }
    const size_t li = b % n;
    LaneState& s = mine[li];
    const Reclaim& r = rec[li];
    const bool final_batch_of_lane = b + n >= nbatches;
    const uint64_t count = std::min<uint64_t>(a.batch, total - posted);
    if (!wait_until(s, [&] { return s.sq.free_wqebbs() >= count * r.bbs; }, prog, a.timeout_ns,
                    o.err, cancel))
      return fail();
    for (uint64_t j = 0; j < count; ++j) {
      const bool last = j + 1 == count;
      bool sig = ++since_signal[li] >= r.signal_every || (last && final_batch_of_lane);
      if (sig) since_signal[li] = 0;
      // The lane's k-th message goes to slot k mod slots: the first min(k, slots) slots of each
      // lane's region are written, which the receiver validates.
      const uint64_t nslots = std::max<uint64_t>(1, s.lane->dst.length / a.size);
      const uint64_t off = (lane_msgs[li]++ % nslots) * a.size;
      s.sq.post_write(
          make_write(*s.lane, s.lane->src, s.lane->dst, off, a.size, a.inline_payload, sig));
    }
    s.sq.ring();
    ++o.doorbells;
    const uint64_t before = posted;
    posted += count;
    if (before < a.warmup_per_thread && posted >= a.warmup_per_thread) t_start = t_window = now_ns();
    while (posted >= next_window && next_window < total) {
      const int64_t t = now_ns();
      o.windows.push_back(t - t_window);
      t_window = t;
      next_window += a.window;
    }
    // Keep completions flowing without blocking.
    if (reap_one(s, o.err) < 0) return fail();
  }
  for (auto& s : mine)
    if (!quiet(s, prog, a.timeout_ns, o.err, cancel)) return fail();
  const int64_t t_end = now_ns();
  o.windows.push_back(t_end - t_window);  // the last window carries the final drain
  o.elapsed = t_end - t_start;
  for (auto& s : mine) o.cqes += s.cq.ci();
  o.cqes -= ci_start;
}

}  // namespace

bool msg_rate(std::vector<Lane>& lanes, const MsgRateArgs& a, Progress progress,
              MsgRateResult& res, LoopError& err) {
  res = MsgRateResult{};
  err.total = (a.warmup_per_thread + a.messages_per_thread) * a.threads;
  const std::string nl = std::to_string(lanes.size());
  if (lanes.empty())
    return fail_args(err, "lanes", "at least one lane", "no lanes given"), false;
  if (a.threads == 0 || a.threads > lanes.size())
    return fail_args(err, "threads", "1.." + nl + " (one thread owns one or more lanes)",
                     "threads=" + std::to_string(a.threads) + " with " + nl + " lanes"),
           false;
  if (a.batch == 0)
    return fail_args(err, "batch", "at least 1 WQE per doorbell", "batch=0"), false;
  for (size_t i = 0; i < lanes.size(); ++i) {
    const Lane& l = lanes[i];
    if (a.size == 0 || a.size > l.dst.length || a.size > l.src.length)
      return fail_args(err, "size", "1.." + std::to_string(std::min(l.dst.length, l.src.length)) +
                       " (the lane's regions)", "size=" + std::to_string(a.size) + " with lane " +
                       std::to_string(i) + "'s regions of " + std::to_string(l.dst.length) +
                       " (remote) and " + std::to_string(l.src.length) + " (source) bytes"),
             false;
  }
  if (a.messages_per_thread == 0 || a.window == 0)
    return fail_args(err, "messages_per_thread", "at least 1 message and 1 per window",
                     "messages_per_thread=" + std::to_string(a.messages_per_thread) +
                         ", window=" + std::to_string(a.window)),
           false;
  std::vector<Reclaim> plan(lanes.size());
  if (!distinct_queues(lanes, err)) return false;
  for (size_t i = 0; i < lanes.size(); ++i)
    if (!plan_reclaim(lanes[i], i, a, plan[i], err)) return false;

  Shared sh(progress, a.threads);
  std::vector<ThreadOut> outs(a.threads);
  std::vector<std::thread> pool;
  try {
    for (uint32_t t = 1; t < a.threads; ++t)
      pool.emplace_back(msg_rate_thread, std::ref(lanes), std::cref(a), std::cref(plan), t,
                        std::ref(sh), std::ref(outs[t]));
  } catch (const std::system_error& e) {
    // Release the threads already waiting at the start line, then report.
    sh.failed.store(true);
    sh.ready.fetch_sub(a.threads - 1 - static_cast<uint32_t>(pool.size()));
    sh.ready.fetch_sub(1);
    for (auto& th : pool) th.join();
    return fail_args(err, "threads", "as many threads as the system can start",
                     std::string("could not start a submitting thread: ") + e.what()),
           false;
  }
  msg_rate_thread(lanes, a, plan, 0, sh, outs[0]);
  for (auto& th : pool) th.join();
  uint64_t posted = 0;
  for (auto& o : outs) posted += o.posted;
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
    res.windows_ns.insert(res.windows_ns.end(), o.windows.begin(), o.windows.end());
    res.elapsed_ns = std::max(res.elapsed_ns, o.elapsed);
    res.doorbells += o.doorbells;
    res.cqes += o.cqes;
  }
  res.messages = a.messages_per_thread * a.threads;
  err.done = posted;
  return true;
}

}  // namespace host
}  // namespace gicbench
