// The host submitter's timing loops (see host_loops.hpp).
#include "host_loops.hpp"

#include <signal.h>

#include <algorithm>
#include <atomic>
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
    const auto h = g_previous[i].sa_handler;
    if (h != SIG_DFL && h != SIG_IGN && h != nullptr) h(sig);
  }
}

}  // namespace

void install_interrupt_handler() {
  for (int i = 0; i < 2; ++i) {
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

struct LaneState {
  Lane* lane;
  SqProducer sq;
  CqConsumer cq;
  explicit LaneState(Lane& l) : lane(&l), sq(l.sq), cq(l.cq) {}
};

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
bool wait_until(LaneState& s, Done done, Prog& progress, int64_t timeout_ns, LoopError& err) {
  int64_t deadline = 0;
  for (uint32_t spins = 0;; ++spins) {
    if (done()) return true;
    const int r = reap_one(s, err);
    if (r < 0) return false;
    if (r > 0) continue;
    progress();
    if ((spins & 255) == 255) {
      if (g_interrupt.load(std::memory_order_relaxed)) {
        fill_queue_state(err, s, "interrupted");
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
bool quiet(LaneState& s, Prog& progress, int64_t timeout_ns, LoopError& err) {
  return wait_until(s, [&] { return s.sq.outstanding() == 0; }, progress, timeout_ns, err);
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

bool single_op(std::vector<Lane>& lanes, const SingleOpArgs& a, Progress progress, int64_t* out,
               LoopError& err) {
  std::vector<LaneState> states;
  states.reserve(lanes.size());
  for (auto& l : lanes) states.emplace_back(l);
  LaneState& sel = states.at(a.selected);
  auto prog = [&] { progress(); };
  const uint64_t total = static_cast<uint64_t>(a.warmup) + a.iters;

  for (uint64_t i = 0; i < total; ++i) {
    const uint64_t seq = i + 1;
    stamp_sequence(a.src, a.size, seq);
    const WriteOp op = make_write(*sel.lane, a.src, a.dst, 0, a.size, a.inline_payload, true);
    int64_t t0 = 0, t1 = 0;
    switch (a.mode) {
      case SingleOpMode::kIssue:
        t0 = now_ns();
        sel.sq.post_write(op);
        sel.sq.ring();
        t1 = now_ns();
        if (!quiet(sel, prog, a.timeout_ns, err)) return false;  // untimed: one outstanding
        break;
      case SingleOpMode::kPutCompletion:
        t0 = now_ns();
        sel.sq.post_write(op);
        sel.sq.ring();
        if (a.scope_all) {
          // A PE-wide quiet: visit every configured queue, in use or not.
          for (auto& s : states)
            if (!quiet(s, prog, a.timeout_ns, err)) return false;
        } else if (!quiet(sel, prog, a.timeout_ns, err)) {
          return false;
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
          return false;
        }
        t1 = now_ns();
        if (!quiet(sel, prog, a.timeout_ns, err)) return false;
        break;
      }
    }
    if (i >= a.warmup) out[i - a.warmup] = t1 - t0;
  }
  return true;
}

bool rtt_respond(Lane& lane, uint32_t size, bool inline_payload, Buffer watch, Buffer src,
                 Buffer dst, uint32_t count, int64_t timeout_ns, Progress progress,
                 LoopError& err) {
  LaneState s(lane);
  auto prog = [&] { progress(); };
  const uint64_t word = watch.addr + size - 8;
  for (uint64_t seq = 1; seq <= count; ++seq) {
    if (!wait_until(s, [&] { return load_word(word) == seq; }, prog, timeout_ns, err)) {
      err.word_seen = load_word(word);
      err.word_expected = seq;
      return false;
    }
    stamp_sequence(src, size, seq);
    s.sq.post_write(make_write(lane, src, dst, 0, size, inline_payload, true));
    s.sq.ring();
    // Completing the reply also drives an inline-progress engine that must deliver it.
    if (!quiet(s, prog, timeout_ns, err)) return false;
  }
  return true;
}

namespace {

struct ThreadOut {
  std::vector<int64_t> windows;
  int64_t elapsed = 0;
  uint64_t doorbells = 0, cqes = 0;
  LoopError err;
};

void msg_rate_thread(std::vector<Lane>& lanes, const MsgRateArgs& a, uint32_t t,
                     SharedProgress& shared, std::atomic<uint32_t>& ready, ThreadOut& o) {
  std::vector<LaneState> mine;
  for (size_t i = t; i < lanes.size(); i += a.threads) mine.emplace_back(lanes[i]);
  auto prog = [&] { shared(); };
  const uint64_t total = a.warmup_per_thread + a.messages_per_thread;
  const uint32_t bbs = SqProducer::write_wqebbs(a.inline_payload, a.size, mine[0].lane->dc,
                                                mine[0].lane->compact_av);
  // Signal often enough that reclamation never starves the ring: every quarter SQ.
  const uint32_t signal_every = std::max<uint32_t>(1, mine[0].lane->sq.wqebb_cnt / (4 * bbs));
  const uint64_t nbatches = (total + a.batch - 1) / a.batch;
  std::vector<uint32_t> since_signal(mine.size(), 0);
  std::vector<uint64_t> lane_msgs(mine.size(), 0);
  const size_t n = mine.size();
  uint64_t ci_start = 0;  // CQ indices resume from the dbrec: count this call's CQEs only
  for (auto& s : mine) ci_start += s.cq.ci();

  ready.fetch_sub(1, std::memory_order_acq_rel);
  while (ready.load(std::memory_order_acquire) != 0) cpu_relax();

  uint64_t posted = 0, next_window = a.warmup_per_thread + a.window;
  int64_t t_start = a.warmup_per_thread == 0 ? now_ns() : 0, t_window = t_start;
  for (uint64_t b = 0; b < nbatches; ++b) {
    LaneState& s = mine[b % n];
    const size_t li = b % n;
    const bool final_batch_of_lane = b + n >= nbatches;
    const uint64_t count = std::min<uint64_t>(a.batch, total - posted);
    if (!wait_until(s, [&] { return s.sq.free_wqebbs() >= count * bbs; }, prog, a.timeout_ns,
                    o.err))
      return;
    for (uint64_t j = 0; j < count; ++j) {
      const bool last = j + 1 == count;
      bool sig = ++since_signal[li] >= signal_every || (last && final_batch_of_lane);
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
    if (reap_one(s, o.err) < 0) return;
  }
  for (auto& s : mine)
    if (!quiet(s, prog, a.timeout_ns, o.err)) return;
  const int64_t t_end = now_ns();
  o.windows.push_back(t_end - t_window);  // the last window carries the final drain
  o.elapsed = t_end - t_start;
  for (auto& s : mine) o.cqes += s.cq.ci();
  o.cqes -= ci_start;
}

}  // namespace

bool msg_rate(std::vector<Lane>& lanes, const MsgRateArgs& a, Progress progress,
              MsgRateResult& res, LoopError& err) {
  if (a.threads == 0 || a.threads > lanes.size() || a.batch == 0 || a.size < 1) {
    err.failed = true;
    err.kind = "bad_arguments";
    return false;
  }
  SharedProgress shared(progress);
  std::vector<ThreadOut> outs(a.threads);
  std::atomic<uint32_t> ready{a.threads};
  std::vector<std::thread> pool;
  for (uint32_t t = 1; t < a.threads; ++t)
    pool.emplace_back(msg_rate_thread, std::ref(lanes), std::cref(a), t, std::ref(shared),
                      std::ref(ready), std::ref(outs[t]));
  msg_rate_thread(lanes, a, 0, shared, ready, outs[0]);
  for (auto& th : pool) th.join();
  res = MsgRateResult{};
  for (auto& o : outs) {
    if (o.err.failed) {
      err = o.err;
      return false;
    }
    res.windows_ns.insert(res.windows_ns.end(), o.windows.begin(), o.windows.end());
    res.elapsed_ns = std::max(res.elapsed_ns, o.elapsed);
    res.doorbells += o.doorbells;
    res.cqes += o.cqes;
  }
  res.messages = a.messages_per_thread * a.threads;
  return true;
}

}  // namespace host
}  // namespace gicbench
