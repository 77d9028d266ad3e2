// The host submitter's loop shapes, written once over a poster (poster.hpp): single-op (issue,
// put+completion, round trip), the round trip's responder, msg-rate's per-thread loop and the
// active-connections cycle (a unit visiting its connections in turn, W writes per visit). host_loops.cpp runs them on mlx5 queues in memory (Mlx5Poster), verbs_loops.cpp through
// libibverbs (VerbsPoster). Every timed region is here.
//
// The contract both share: the sequence number rides in the payload's last 8 bytes (the round
// trip polls it); lane l's k-th rate message goes to slot k mod (region / size) of its regions;
// signaled every signal_every (poster.hpp) with each lane's last write signaled; the final drain
// is inside the timed region. Waits poll the lane's CQ and, between empty polls, call the
// loop's idle step; every 256 empty polls they read the clock (deadline) and the interrupt flag.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include "interrupt.hpp"
#include "lane.hpp"
#include "loop_error.hpp"
#include "poster.hpp"
#include "wait.hpp"

namespace gicbench {
namespace loops {

// Stops a loop early: a signal (interrupt.hpp), or another submitting thread that failed.
struct Cancel {
  const std::atomic<bool>* peer_failed = nullptr;
  bool operator()() const {
    return interrupted() || (peer_failed && peer_failed->load(std::memory_order_relaxed));
  }
  const char* kind() const { return interrupted() ? "interrupted" : "stopped"; }
};

inline uint64_t load_word(uint64_t addr) {
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(addr), __ATOMIC_ACQUIRE);
}

// The sequence number rides in the last 8 bytes of the payload (the polled word).
inline void stamp_sequence(const host::Buffer& src, uint32_t size, uint64_t seq) {
  __atomic_store_n(reinterpret_cast<uint64_t*>(src.addr + size - 8), seq, __ATOMIC_RELEASE);
}

// Poll `p` until `done()` holds, retiring what completes; the clock is read every 256 empty
// polls so the deadline costs little on the fast path.
template <class P, class Done, class Idle>
bool wait_until(P& p, Done done, Idle& idle, int64_t timeout_ns, LoopError& err,
                Cancel cancel = {}) {
  int64_t deadline = 0;
  typename P::Completion c;
  for (uint32_t spins = 0;; ++spins) {
    if (done()) return true;
    const int r = p.poll(c, err);
    if (r < 0) return false;
    if (r > 0) {
      p.retire(c);
      continue;
    }
    idle();
    if ((spins & 255) == 255) {
      if (cancel()) {
        p.fail(err, cancel.kind());
        return false;
      }
      const int64_t t = now_ns();
      if (deadline == 0) {
        deadline = t + timeout_ns;
      } else if (t > deadline) {
        p.fail(err, "timeout");
        return false;
      }
    }
  }
}

// Until everything posted on `p` is retired.
template <class P, class Idle>
bool quiet(P& p, Idle& idle, int64_t timeout_ns, LoopError& err, Cancel cancel = {}) {
  return wait_until(p, [&] { return p.outstanding() == 0; }, idle, timeout_ns, err, cancel);
}

// Until the word at `addr` holds `seq`, consuming `p`'s completions meanwhile (an error
// completion of the request shows there).
template <class P, class Idle>
bool wait_word(P& p, uint64_t addr, uint64_t seq, Idle& idle, int64_t timeout_ns,
               LoopError& err) {
  auto seen = [&] {
    for (uint32_t k = 0; k < P::kWordReadsPerPoll; ++k)
      if (load_word(addr) == seq) return true;
    return false;
  };
  if (wait_until(p, seen, idle, timeout_ns, err)) return true;
  err.word_seen = load_word(addr);
  err.word_expected = seq;
  return false;
}

enum class Mode : int { kIssue = 0, kPutCompletion = 1, kRoundTrip = 2 };

struct LatencyShape {
  Mode mode = Mode::kIssue;
  uint32_t size = 8;
  host::Buffer src;        // the selected lane's payload source (the sequence is stamped here)
  uint64_t reply_word = 0;  // round trip: where the peer's reply lands its sequence
  uint64_t iters = 0, warmup = 0;
  int64_t timeout_ns = 0;
};

// Requester side of single-op on lanes[sel], one operation outstanding; `out` gets `iters`
// samples (ns). issue: post and ring; put+completion: until the completion (with `scope_all`,
// every lane's posted work, re-read from its doorbell record, retired: NVSHMEM's quiet); round
// trip: until the reply word holds the sequence.
template <class P, class Idle>
bool single_op(std::vector<P>& lanes, size_t sel, bool scope_all, const LatencyShape& a,
               Idle& idle, int64_t* out, LoopError& err) {
  P& s = lanes[sel];
  const uint64_t total = a.warmup + a.iters;
  err.total = total;
  const uint32_t cost = s.cost(a.size);
  const Write w{0, a.size, true};
  for (uint64_t i = 0; i < total; ++i) {
    if (interrupted()) {
      s.fail(err, "interrupted");
      err.done = i;
      return false;
    }
    const uint64_t seq = i + 1;
    stamp_sequence(a.src, a.size, seq);
    // Untimed: work posted on this lane outside the loop must leave room first.
    if (!wait_until(s, [&] { return s.room(cost); }, idle, a.timeout_ns, err)) {
      err.done = i;
      return false;
    }
    int64_t t1 = 0;
    const int64_t t0 = now_ns();
    bool ok = s.post(&w, 1, err);
    if (ok) {
      switch (a.mode) {
        case Mode::kIssue:
          t1 = now_ns();
          ok = quiet(s, idle, a.timeout_ns, err);  // untimed: one outstanding
          break;
        case Mode::kPutCompletion:
          if (scope_all) {
            for (auto& o : lanes) {
              if (&o != &s) o.observe_posted();
              if (!(ok = quiet(o, idle, a.timeout_ns, err))) break;
            }
          } else {
            ok = quiet(s, idle, a.timeout_ns, err);
          }
          t1 = now_ns();
          break;
        case Mode::kRoundTrip:
          ok = wait_word(s, a.reply_word, seq, idle, a.timeout_ns, err);
          t1 = now_ns();
          if (ok) ok = quiet(s, idle, a.timeout_ns, err);
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

struct RespondShape {
  uint32_t size = 8;
  host::Buffer src;         // the reply's payload source (stamped with the request's sequence)
  uint64_t watch_word = 0;  // where each request lands its sequence
  uint64_t count = 0;
  int64_t timeout_ns = 0;
};

// Responder side of the round trip: wait for request `seq` in the watched word, write the same
// sequence back through `s`, and complete it before watching for the next (as ib_write_lat;
// completing it also drives an inline-progress engine that must deliver it).
template <class P, class Idle>
bool respond(P& s, const RespondShape& a, Idle& idle, LoopError& err) {
  err.total = a.count;
  const uint32_t cost = s.cost(a.size);
  const Write w{0, a.size, true};
  for (uint64_t seq = 1; seq <= a.count; ++seq) {
    err.done = seq - 1;
    if (interrupted()) {
      s.fail(err, "interrupted");
      return false;
    }
    if (!wait_word(s, a.watch_word, seq, idle, a.timeout_ns, err)) return false;
    // Work posted on this lane outside the loop must leave room first.
    if (!wait_until(s, [&] { return s.room(cost); }, idle, a.timeout_ns, err)) return false;
    stamp_sequence(a.src, a.size, seq);
    if (!s.post(&w, 1, err)) return false;
    if (!quiet(s, idle, a.timeout_ns, err)) return false;
  }
  err.done = a.count;
  return true;
}

struct RateShape {
  uint32_t batch = 1;  // writes per doorbell
  uint32_t size = 8;
  uint64_t warmup = 0, messages = 0;  // this thread's
  uint64_t window = 1;                // messages per recorded window
  int64_t timeout_ns = 0;
};

struct RateOut {
  std::vector<int64_t> windows;  // ns; the last one carries the final drain
  int64_t t_start = 0, t_end = 0;  // now_ns(): the first timed post, the last completion
  int64_t elapsed() const { return t_end - t_start; }
  uint64_t posted = 0;           // messages posted, warm-up included
  uint64_t doorbells = 0, cqes = 0;
};

// One submitting thread's msg-rate over its lanes: batch b goes to lanes[b mod n] as one chain
// (one doorbell) once the lane has room for all of it; lanes[i] signals every signal[i] writes
// and on its last; after the warm-up each `window` messages close a window; the drain of every
// lane ends the timed region.
template <class P, class Idle>
bool rate(std::vector<P>& lanes, const std::vector<uint32_t>& signal, const RateShape& a,
          Idle& idle, Cancel cancel, RateOut& o, LoopError& err) {
  const size_t n = lanes.size();
  const uint64_t total = a.warmup + a.messages;
  const uint64_t nbatches = (total + a.batch - 1) / a.batch;
  std::vector<uint32_t> cost(n), since_signal(n, 0);
  std::vector<uint64_t> slots(n), sent(n, 0);
  for (size_t i = 0; i < n; ++i) {
    cost[i] = lanes[i].cost(a.size);
    slots[i] = std::max<uint64_t>(1, lanes[i].region() / a.size);
  }
  std::vector<Write> chain(a.batch);
  auto fail = [&] {
    err.done = o.posted;
    return false;
  };
  uint64_t next_window = a.warmup + a.window;
  int64_t t_start = a.warmup == 0 ? now_ns() : 0, t_window = t_start;
  for (uint64_t b = 0; b < nbatches; ++b) {
    const size_t li = b % n;
    P& s = lanes[li];
    // One relaxed load per batch: a signal or a failed sibling ends the loop within a batch.
    if (cancel()) {
      s.fail(err, cancel.kind());
      return fail();
    }
    const bool final_batch_of_lane = b + n >= nbatches;
    const uint32_t count = static_cast<uint32_t>(std::min<uint64_t>(a.batch, total - o.posted));
    const uint64_t need = uint64_t{count} * cost[li];
    if (!wait_until(s, [&] { return s.room(need); }, idle, a.timeout_ns, err, cancel))
      return fail();
    for (uint32_t j = 0; j < count; ++j) {
      const bool sig = ++since_signal[li] >= signal[li] || (j + 1 == count && final_batch_of_lane);
      if (sig) since_signal[li] = 0;
      // The lane's k-th message goes to slot k mod slots: the first min(k, slots) slots of each
      // lane's region are written, which the receiver validates.
      chain[j] = Write{(sent[li]++ % slots[li]) * a.size, a.size, sig};
    }
    if (!s.post(chain.data(), count, err)) return fail();
    ++o.doorbells;
    const uint64_t before = o.posted;
    o.posted += count;
    if (before < a.warmup && o.posted >= a.warmup) t_start = t_window = now_ns();
    while (o.posted >= next_window && next_window < total) {
      const int64_t t = now_ns();
      o.windows.push_back(t - t_window);
      t_window = t;
      next_window += a.window;
    }
    if (P::kReapEveryBatch) {  // keep completions flowing without blocking
      typename P::Completion c;
      const int r = s.poll(c, err);
      if (r < 0) return fail();
      if (r > 0) s.retire(c);
    }
  }
  for (auto& s : lanes)
    if (!quiet(s, idle, a.timeout_ns, err, cancel)) return fail();
  const int64_t t_end = now_ns();
  o.windows.push_back(t_end - t_window);
  o.t_start = t_start;
  o.t_end = t_end;
  for (auto& s : lanes) o.cqes += s.completions();
  return true;
}

// ---- the connection-cycling loop (active connections) -------------------------------------------

struct CycleShape {
  uint32_t writes_per_visit = 32;  // W: writes posted on a connection before the next one
  uint32_t batch = 32;             // writes per doorbell within a visit (<= W)
  uint32_t size = 8;
  uint64_t warmup_visits = 0, visits = 0;  // this unit's
  uint64_t window = 1;                     // messages per recorded window
  int64_t timeout_ns = 0;
};

// One connection a unit visits: the poster (QP) its writes go through and the lane whose regions
// (and, for a DCI, address vector) they use; `slots` = whole messages in its regions.
struct Connection {
  uint32_t poster = 0;
  uint32_t lane = 0;
  uint64_t slots = 1;
};

// One submitting unit cycling its connections: visit v goes to conns[v mod n] and posts W writes
// there, in chains of up to `batch` (one doorbell each) once the QP has room for the chain, then
// moves on; `aim(poster, lane)` points the poster at the connection first (a DCI changing
// destination; nothing on RC). Connection c's k-th write goes to slot k mod slots of its regions.
// Poster p signals every signal[p] writes and on its last write (`last_visit[p]`: the visit that
// posts it); after the warm-up visits each `window` messages close a window; the drain of every
// poster ends the timed region.
template <class P, class Aim, class Idle>
bool cycle(std::vector<P>& posters, const std::vector<Connection>& conns,
           const std::vector<uint32_t>& signal, const std::vector<uint64_t>& last_visit, Aim aim,
           const CycleShape& a, Idle& idle, Cancel cancel, RateOut& o, LoopError& err) {
  const size_t n = conns.size();
  const uint64_t total_visits = a.warmup_visits + a.visits;
  const uint64_t warmup = a.warmup_visits * a.writes_per_visit;
  const uint64_t total = total_visits * a.writes_per_visit;
  std::vector<uint32_t> cost(posters.size()), since_signal(posters.size(), 0);
  for (size_t p = 0; p < posters.size(); ++p) cost[p] = posters[p].cost(a.size);
  std::vector<uint64_t> sent(n, 0);
  std::vector<Write> chain(a.batch);
  auto fail = [&] {
    err.done = o.posted;
    return false;
  };
  uint64_t next_window = warmup + a.window;
  int64_t t_start = warmup == 0 ? now_ns() : 0, t_window = t_start;
  for (uint64_t v = 0; v < total_visits; ++v) {
    const Connection& c = conns[v % n];
    P& s = posters[c.poster];
    if (cancel()) {
      s.fail(err, cancel.kind());
      return fail();
    }
    aim(s, c.lane);
    const bool final_visit = v == last_visit[c.poster];
    for (uint32_t left = a.writes_per_visit; left > 0;) {
      const uint32_t count = std::min(a.batch, left);
      left -= count;
      const uint64_t need = uint64_t{count} * cost[c.poster];
      if (!wait_until(s, [&] { return s.room(need); }, idle, a.timeout_ns, err, cancel))
        return fail();
      for (uint32_t j = 0; j < count; ++j) {
        uint32_t& since = since_signal[c.poster];
        const bool sig = ++since >= signal[c.poster] || (final_visit && left == 0 && j + 1 == count);
        if (sig) since = 0;
        chain[j] = Write{(sent[v % n]++ % c.slots) * a.size, a.size, sig};
      }
      if (!s.post(chain.data(), count, err)) return fail();
      ++o.doorbells;
      const uint64_t before = o.posted;
      o.posted += count;
      if (before < warmup && o.posted >= warmup) t_start = t_window = now_ns();
      while (o.posted >= next_window && next_window < total) {
        const int64_t t = now_ns();
        o.windows.push_back(t - t_window);
        t_window = t;
        next_window += a.window;
      }
      if (P::kReapEveryBatch) {
        typename P::Completion comp;
        const int r = s.poll(comp, err);
        if (r < 0) return fail();
        if (r > 0) s.retire(comp);
      }
    }
  }
  for (auto& s : posters)
    if (!quiet(s, idle, a.timeout_ns, err, cancel)) return fail();
  const int64_t t_end = now_ns();
  o.windows.push_back(t_end - t_window);
  o.t_start = t_start;
  o.t_end = t_end;
  for (auto& s : posters) o.cqes += s.completions();
  return true;
}

// The visit of `conns` (one unit's, n of them, `visits` in all) after which poster p posts no
// more: the last write it posts is signaled, so the drain ends with a completion.
inline std::vector<uint64_t> last_visits(const std::vector<Connection>& conns, size_t posters,
                                         uint64_t visits) {
  std::vector<uint64_t> last(posters, UINT64_MAX);
  const uint64_t n = conns.size();
  for (uint64_t i = 0; i < n && i < visits; ++i) {
    const uint64_t v = i + (visits - 1 - i) / n * n;  // the last visit of connection i
    uint64_t& l = last[conns[i].poster];
    if (l == UINT64_MAX || v > l) l = v;
  }
  return last;
}

}  // namespace loops
}  // namespace gicbench
