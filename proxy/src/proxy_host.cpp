// mini-proxy's host producers (see proxy_host.hpp).
#include "proxy_host.hpp"

#include <sched.h>

#include <algorithm>
#include <string>
#include <system_error>
#include <thread>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "interrupt.hpp"

namespace gicbench {
namespace proxy {

namespace {

// Why a producer's wait gives up, or nothing: the engine failed, a signal, the deadline.
bool give_up(Engine& e, uint32_t r, uint64_t index, int64_t& deadline, const char* who,
             const char* what, EngineError& err) {
  const char* kind = nullptr;
  if (e.failed()) kind = "stopped";
  else if (interrupted()) kind = "interrupted";
  else {
    const int64_t t = now_ns();
    if (deadline == 0) deadline = t + e.config().timeout_ns;
    else if (t > deadline) kind = "timeout";
  }
  if (kind == nullptr) return false;
  err.failed = true;
  err.kind = kind;
  err.who = who;
  e.fill_ring(err, r);
  err.index = index;
  err.message = std::string(what) + " on ring " + std::to_string(r) + " at index " +
                std::to_string(index);
  return true;
}

inline uint64_t load(uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }

// A producer that has waited a while lets the worker have its core when both share one (an
// oversubscribed node); with a core of its own, sched_yield returns at once.
inline void backoff(uint32_t spins) {
  if ((spins & 1023) == 1023) sched_yield();
  else cpu_relax();
}

inline void stamp(uint64_t addr, uint64_t seq) {
  __atomic_store_n(reinterpret_cast<uint64_t*>(addr), seq, __ATOMIC_RELEASE);
}

}  // namespace

namespace {

// Reserve ring r's next index, wait for room, publish (lane, offset_of(index), length).
template <class Offset>
bool publish(Engine& e, uint32_t r, Handoff h, ProducerCache& c, uint32_t lane, Offset offset_of,
             uint32_t length, uint64_t& index, const char* who, EngineError& err) {
  const Ring R = e.ring(r);
  int64_t deadline = 0;
  uint32_t spins = 0;
  if (h == Handoff::kBaseline) {
    index = __atomic_fetch_add(R.word(kReserveOff), 1, __ATOMIC_SEQ_CST);
    // Every publish reads the worker's progress from ring memory.
    while (index - load(R.word(kHeadOff)) >= R.depth) {
      if ((++spins & 255) == 0 && give_up(e, r, index, deadline, who, "no room", err)) return false;
      backoff(spins);
    }
    uint64_t* s = R.slot(index);
    __atomic_store_n(&s[1], desc_word1(index, offset_of(index), length), __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);  // the system-scope release
    __atomic_store_n(&s[0], desc_word0(index, lane, 0), __ATOMIC_RELEASE);
    return true;
  }
  index = c.next++;
  while (index - c.cached_head >= R.depth) {
    c.cached_head = load(R.word(kHeadOff));
    if (index - c.cached_head < R.depth) break;
    if ((++spins & 255) == 0 && give_up(e, r, index, deadline, who, "no room", err)) return false;
    backoff(spins);
  }
  uint64_t* s = R.slot(index);
  const uint64_t w0 = desc_word0(index, lane, 0), w1 = desc_word1(index, offset_of(index), length);
#if defined(__x86_64__)
  // One 16-byte store; x86 keeps it after the producer's earlier stores (payload stamps).
  std::atomic_signal_fence(std::memory_order_release);
  _mm_store_si128(reinterpret_cast<__m128i*>(s),
                  _mm_set_epi64x(static_cast<long long>(w1), static_cast<long long>(w0)));
#else
  __atomic_store_n(&s[1], w1, __ATOMIC_RELAXED);
  __atomic_store_n(&s[0], w0, __ATOMIC_RELEASE);
#endif
  return true;
}

}  // namespace

bool enqueue(Engine& e, uint32_t r, Handoff h, ProducerCache& c, uint32_t lane, Slots slots,
             uint32_t length, uint64_t& index, const char* who, EngineError& err) {
  auto offset_of = [&](uint64_t i) {
    return static_cast<uint32_t>((slots.first + i % slots.count) * length);
  };
  return publish(e, r, h, c, lane, offset_of, length, index, who, err);
}

bool wait_completed(Engine& e, uint32_t r, uint64_t count, const char* who, EngineError& err) {
  uint64_t* done = e.ring(r).word(kCompletedOff);
  int64_t deadline = 0;
  for (uint32_t spins = 0; load(done) < count; ++spins) {
    if ((spins & 255) == 255 && give_up(e, r, count - 1, deadline, who, "no completion", err))
      return false;
    backoff(spins);
  }
  return true;
}

namespace {

// The last 8 bytes of the first `size` bytes of ring r's lane source: the sequence word.
uint64_t seq_word(const Engine& e, uint32_t r, uint32_t size) {
  return e.lanes()[e.ring_lane(r)].src.addr + size - 8;
}

bool wait_word(Engine& e, uint32_t r, uint64_t addr, uint64_t want, const char* who,
               EngineError& err) {
  int64_t deadline = 0;
  for (uint32_t spins = 0; load(reinterpret_cast<uint64_t*>(addr)) != want; ++spins) {
    if ((spins & 255) == 255 && give_up(e, r, 0, deadline, who, "no reply", err)) {
      err.word_seen = load(reinterpret_cast<uint64_t*>(addr));
      err.word_expected = want;
      return false;
    }
    backoff(spins);
  }
  return true;
}

}  // namespace

bool latency(Engine& e, const LatencyArgs& a, int64_t* out, EngineError& err) {
  const uint64_t total = uint64_t{a.warmup} + a.iters;
  err.total = total;
  const uint32_t lane = e.ring_lane(a.ring);
  ProducerCache cache;
  std::vector<uint64_t> enq(e.rings(), 0);  // what each ring has been given (scope all)
  for (uint64_t i = 0; i < total; ++i) {
    err.done = i;
    const uint64_t seq = i + 1;
    stamp(seq_word(e, a.ring, a.size), seq);
    uint64_t idx = 0;
    int64_t t0 = now_ns(), t1 = 0;
    if (!enqueue(e, a.ring, a.handoff, cache, lane, Slots{}, a.size, idx, "probe", err)) return false;
    ++enq[a.ring];
    switch (a.mode) {
      case Mode::kIssue:
        t1 = now_ns();
        if (!wait_completed(e, a.ring, idx + 1, "probe", err)) return false;  // untimed
        break;
      case Mode::kPutCompletion:
        if (a.scope_all) {
          for (uint32_t r = 0; r < e.rings(); ++r)
            if (!wait_completed(e, r, r == a.ring ? idx + 1 : enq[r], "probe", err)) return false;
        } else if (!wait_completed(e, a.ring, idx + 1, "probe", err)) {
          return false;
        }
        t1 = now_ns();
        break;
      case Mode::kRoundTrip:
        if (!wait_word(e, a.ring, a.reply, seq, "probe", err)) return false;
        t1 = now_ns();
        if (!wait_completed(e, a.ring, idx + 1, "probe", err)) return false;
        break;
    }
    if (i >= a.warmup) out[i - a.warmup] = t1 - t0;
  }
  err.done = total;
  return true;
}

bool respond(Engine& e, uint32_t ring, Handoff h, uint32_t size, uint64_t watch, uint32_t count,
             EngineError& err) {
  err.total = count;
  ProducerCache cache;
  const uint32_t lane = e.ring_lane(ring);
  for (uint64_t seq = 1; seq <= count; ++seq) {
    err.done = seq - 1;
    if (!wait_word(e, ring, watch, seq, "responder", err)) return false;
    stamp(seq_word(e, ring, size), seq);
    uint64_t idx = 0;
    if (!enqueue(e, ring, h, cache, lane, Slots{}, size, idx, "responder", err)) return false;
    if (!wait_completed(e, ring, idx + 1, "responder", err)) return false;
  }
  err.done = count;
  return true;
}

namespace {

// Rings producer p fills: p, p+P, ... when P <= R, else ring p mod R (shared).
std::vector<uint32_t> rings_of(uint32_t p, uint32_t producers, uint32_t rings, uint32_t first) {
  std::vector<uint32_t> out;
  const uint32_t n = rings - first;
  if (producers <= n)
    for (uint32_t r = first + p; r < rings; r += producers) out.push_back(r);
  else
    out.push_back(first + p % n);
  return out;
}

// `size`-byte slots of a lane's regions (at least 1): its k-th write goes to slot k mod this.
uint64_t lane_slots(const host::Lane& l, uint32_t size) {
  return std::max<uint64_t>(1, std::min(l.src.length, l.dst.length) / size);
}

uint64_t slots_of(const Engine& e, uint32_t r, uint32_t size) {
  return lane_slots(e.lanes()[e.ring_lane(r)], size);
}

// Start `n` threads running f(i); false (err) if the system refuses one: the started ones are
// told to stop through `stop` and joined.
template <class F>
bool spawn(std::vector<std::thread>& pool, uint32_t n, F f, std::atomic<bool>& stop,
           EngineError& err) {
  try {
    for (uint32_t i = 0; i < n; ++i) pool.emplace_back(f, i);
  } catch (const std::system_error& x) {
    stop.store(true);
    for (auto& t : pool) t.join();
    pool.clear();
    err.failed = true;
    err.kind = "bad_arguments";
    err.who = "engine";
    err.field = "producers";
    err.allowed = "as many threads as the system can start";
    err.message = std::string("could not start a producer thread: ") + x.what();
    return false;
  }
  return true;
}

void keep_first(EngineError& first, const EngineError& e) {
  if (e.failed && (!first.failed || first.kind == "stopped")) first = e;
}

}  // namespace

namespace {

bool bad_arguments(EngineError& err, const char* field, const std::string& allowed,
                   const std::string& message) {
  err.failed = true;
  err.kind = "bad_arguments";
  err.who = "engine";
  err.field = field;
  err.allowed = allowed;
  err.message = message;
  return false;
}

// P host producers, each publishing `total` descriptors (the first `warmup` untimed) through
// put(p, k, caches, rings_given, who, err), which enqueues producer p's k-th descriptor (on ring
// ring_of(p, k)) and counts it in rings_given[ring]; then the drain: every ring's counter reaches what it was given
// (timed). Windows of `window` descriptors per producer, producer after producer, the last one
// carrying the drain; elapsed from the first timed enqueue to the last completion.
template <class Put, class RingOf>
bool stream(Engine& e, uint32_t P, uint64_t warmup, uint64_t total, uint64_t window, Put put,
            RingOf ring_of, RateResult& res, EngineError& err) {
  struct Out {
    std::vector<int64_t> windows;
    std::vector<uint64_t> given;
    int64_t t_start = 0, enq_ns = 0;
    uint64_t posted = 0;
    EngineError err;
  };
  std::vector<Out> outs(P);
  std::atomic<uint32_t> ready{0};
  std::atomic<bool> stop{false};
  auto body = [&](uint32_t p) {
    Out& o = outs[p];
    o.given.assign(e.rings(), 0);
    const std::string who = "producer " + std::to_string(p);
    std::vector<ProducerCache> caches(e.rings());
    ready.fetch_add(1);
    while (ready.load() < P && !stop.load()) cpu_relax();
    if (stop.load()) return;
    uint64_t next_window = warmup + window;
    int64_t t_window = warmup == 0 ? now_ns() : 0;
    o.t_start = t_window;
    for (uint64_t k = 0; k < total; ++k) {
      // One relaxed load each: a signal or a failed worker ends the stream within a message.
      if (interrupted() || e.failed()) {
        o.err.failed = true;
        o.err.kind = interrupted() ? "interrupted" : "stopped";
        o.err.who = who;
        e.fill_ring(o.err, ring_of(p, k));
        break;
      }
      const int64_t t0 = now_ns();
      if (!put(p, k, caches, o.given, who.c_str(), o.err)) break;
      const int64_t t1 = now_ns();
      ++o.posted;
      if (k >= warmup) o.enq_ns += t1 - t0;
      if (o.posted == warmup) o.t_start = t_window = t1;
      while (o.posted >= next_window && next_window < total) {
        o.windows.push_back(t1 - t_window);
        t_window = t1;
        next_window += window;
      }
    }
    if (o.err.failed) {
      o.err.done = o.posted;
      e.fail(o.err);
      return;
    }
    o.windows.push_back(-t_window);  // closed by the drain below
  };
  std::vector<std::thread> pool;
  if (!spawn(pool, P, body, stop, err)) return false;
  for (auto& t : pool) t.join();
  EngineError first;
  for (auto& o : outs) keep_first(first, o.err);
  std::vector<uint64_t> given(e.rings(), 0);
  for (auto& o : outs)
    for (size_t r = 0; r < o.given.size(); ++r) given[r] += o.given[r];
  if (!first.failed)
    for (uint32_t r = 0; r < e.rings() && !first.failed; ++r)
      wait_completed(e, r, given[r], "drain", first);
  const int64_t t_end = now_ns();
  if (first.failed) {
    err = first;
    err.total = total * P;
    uint64_t posted = 0;
    for (auto& o : outs) posted += o.posted;
    err.done = posted;
    return false;
  }
  int64_t t0 = INT64_MAX;
  for (auto& o : outs) {
    o.windows.back() += t_end;  // the last window carries the drain
    res.windows_ns.insert(res.windows_ns.end(), o.windows.begin(), o.windows.end());
    res.enqueue_ns.push_back(o.enq_ns);
    t0 = std::min(t0, o.t_start);
  }
  res.elapsed_ns = t_end - t0;
  res.messages = (total - warmup) * P;
  res.ring_messages = given;
  err.done = err.total = total * P;
  return true;
}

}  // namespace

bool rate(Engine& e, const RateArgs& a, RateResult& res, EngineError& err) {
  res = RateResult{};
  const uint32_t P = a.producers;
  err.total = (a.warmup_per_producer + a.messages_per_producer) * P;
  if (P == 0 || P > 64 || (a.handoff == Handoff::kTuned && P > e.rings()))
    return bad_arguments(err, "producers",
                         a.handoff == Handoff::kTuned
                             ? "1.." + std::to_string(e.rings()) + " (tuned: one producer per ring)"
                             : std::string("1..64"),
                         "producers=" + std::to_string(P) + " with " +
                             std::to_string(e.rings()) + " rings");
  if (a.window == 0 || a.messages_per_producer == 0)
    return bad_arguments(err, "messages", "at least 1 message and 1 per window",
                         "messages=" + std::to_string(a.messages_per_producer));
  std::vector<std::vector<uint32_t>> mine(P);
  for (uint32_t p = 0; p < P; ++p) mine[p] = rings_of(p, P, e.rings(), 0);
  auto ring_of = [&](uint32_t p, uint64_t k) { return mine[p][k % mine[p].size()]; };
  auto put = [&](uint32_t p, uint64_t k, std::vector<ProducerCache>& caches,
                 std::vector<uint64_t>& given, const char* who, EngineError& pe) {
    const uint32_t r = ring_of(p, k);
    uint64_t idx = 0;
    if (!enqueue(e, r, a.handoff, caches[r], e.ring_lane(r), Slots{0, slots_of(e, r, a.size)},
                 a.size, idx, who, pe)) {
      e.fill_ring(pe, r);
      return false;
    }
    ++given[r];
    return true;
  };
  return stream(e, P, a.warmup_per_producer, a.warmup_per_producer + a.messages_per_producer,
                a.window, put, ring_of, res, err);
}

bool cycle(Engine& e, const CycleArgs& a, RateResult& res, EngineError& err) {
  res = RateResult{};
  const auto U = static_cast<uint32_t>(a.unit_lanes.size());
  const uint64_t W = a.writes_per_visit;
  err.total = (a.warmup_visits + a.visits) * W * U;
  if (U == 0 || U > e.rings())
    return bad_arguments(err, "units", "1.." + std::to_string(e.rings()) + " (one ring each)",
                         "units=" + std::to_string(U));
  if (W == 0 || a.visits == 0 || a.window == 0)
    return bad_arguments(err, "visits", "at least 1 write per visit, 1 visit and 1 per window",
                         "writes_per_visit=" + std::to_string(W) +
                             " visits=" + std::to_string(a.visits));
  std::vector<std::vector<uint64_t>> slots(U);
  for (uint32_t u = 0; u < U; ++u) {
    if (a.unit_lanes[u].empty())
      return bad_arguments(err, "units", "every unit with a lane",
                           "unit " + std::to_string(u) + " has none");
    for (uint32_t l : a.unit_lanes[u]) {
      if (l >= e.lanes().size() || e.owner(l) != u % e.config().workers)
        return bad_arguments(err, "lanes", "lanes owned by the unit's ring's worker",
                             "unit " + std::to_string(u) + " visits lane " + std::to_string(l));
      slots[u].push_back(lane_slots(e.lanes()[l], a.size));
    }
  }
  // Unit u's k-th write: visit v = k div W on its (v mod n)-th lane, that lane's
  // ((v div n) W + k mod W)-th write, to slot (that mod slots).
  auto put = [&](uint32_t u, uint64_t k, std::vector<ProducerCache>& caches,
                 std::vector<uint64_t>& given, const char* who, EngineError& pe) {
    const auto& mine = a.unit_lanes[u];
    const uint64_t v = k / W, n = mine.size();
    const uint64_t write = (v / n) * W + k % W;
    const auto offset = static_cast<uint32_t>((write % slots[u][v % n]) * a.size);
    uint64_t idx = 0;
    if (!publish(e, u, a.handoff, caches[u], mine[v % n], [&](uint64_t) { return offset; },
                 a.size, idx, who, pe)) {
      e.fill_ring(pe, u);
      return false;
    }
    ++given[u];
    return true;
  };
  const uint64_t total = (a.warmup_visits + a.visits) * W;
  auto ring_of = [](uint32_t u, uint64_t) { return u; };
  return stream(e, U, a.warmup_visits * W, total, a.window, put, ring_of, res, err);
}

bool loaded(Engine& e, const LoadedArgs& a, LoadedResult& res, EngineError& err) {
  res = LoadedResult{};
  const uint32_t first = a.reserved ? 1 : 0;
  if (a.reserved && e.rings() < 2) {
    err.failed = true;
    err.kind = "bad_arguments";
    err.who = "engine";
    err.field = "rings";
    err.allowed = "at least 2 with a reserved probe ring";
    err.message = "rings=" + std::to_string(e.rings());
    return false;
  }
  if (!a.reserved && a.handoff == Handoff::kTuned) {
    err.failed = true;
    err.kind = "bad_arguments";
    err.who = "engine";
    err.field = "handoff";
    err.allowed = "baseline with a shared probe ring (tuned allows one producer per ring)";
    err.message = "handoff=tuned, queue=shared";
    return false;
  }
  const uint32_t P = a.producers;
  std::atomic<bool> stop{false};
  std::vector<EngineError> perr(P);
  std::vector<uint64_t> sent(P, 0);
  std::vector<std::vector<uint64_t>> per_ring(P, std::vector<uint64_t>(e.rings(), 0));
  // The probe uses slot 0 of its lane; background writes slots 1.. (needs 2 slots per lane).
  for (uint32_t r = 0; r < e.rings(); ++r)
    if (slots_of(e, r, a.size) < 2) {
      err.failed = true;
      err.kind = "bad_arguments";
      err.who = "engine";
      err.field = "size";
      err.allowed = "a size that leaves two slots per lane";
      err.message = "size=" + std::to_string(a.size);
      return false;
    }
  auto body = [&](uint32_t p) {
    const std::string who = "background producer " + std::to_string(p);
    // Tuned: one producer per ring, so background producers own distinct rings.
    const auto mine = rings_of(p, P, e.rings(), first);
    std::vector<ProducerCache> caches(mine.size());
    const double per_ns = a.pace_mps > 0 ? a.pace_mps * 1e6 / P / 1e9 : 0;  // msgs per ns
    const int64_t t0 = now_ns();
    for (uint64_t k = 0; !stop.load(std::memory_order_relaxed) && !e.failed(); ++k) {
      if (interrupted()) {
        perr[p].failed = true;
        perr[p].kind = "interrupted";
        perr[p].who = who;
        e.fail(perr[p]);
        return;
      }
      if (per_ns > 0)
        while (static_cast<double>(now_ns() - t0) * per_ns < static_cast<double>(k)) {
          if (stop.load(std::memory_order_relaxed)) return;
          cpu_relax();
        }
      const size_t j = k % mine.size();
      const uint32_t r = mine[j];
      // Background writes cycle over slots 1.. of the ring's lane (slot 0 is the probe's).
      uint64_t idx = 0;
      if (!enqueue(e, r, a.handoff, caches[j], e.ring_lane(r), Slots{1, slots_of(e, r, a.size) - 1},
                   a.size, idx, who.c_str(), perr[p])) {
        if (perr[p].kind == "timeout" || perr[p].kind == "interrupted") e.fail(perr[p]);
        return;
      }
      ++per_ring[p][r];
      ++sent[p];
    }
  };
  std::vector<std::thread> pool;
  if (!spawn(pool, P, body, stop, err)) return false;
  auto completed_bg = [&] {
    uint64_t n = 0;
    for (uint32_t r = first; r < e.rings(); ++r)
      n += __atomic_load_n(e.ring(r).word(kCompletedOff), __ATOMIC_ACQUIRE);
    return n;
  };
  const uint64_t bg0 = completed_bg();
  const int64_t t0 = now_ns();
  bool ok;
  if (a.requester) {
    res.rtt_ns.assign(a.iters, 0);
    LatencyArgs la;
    la.mode = Mode::kRoundTrip;
    la.handoff = a.handoff;
    la.ring = 0;
    la.size = a.size;
    la.reply = a.reply;
    la.iters = a.iters;
    la.warmup = a.warmup;
    // On a shared ring the probe's reservation interleaves with the background's.
    ok = latency(e, la, res.rtt_ns.data(), err);
  } else {
    ok = respond(e, 0, a.handoff, a.size, a.reply, a.iters + a.warmup, err);
  }
  res.probe_ns = now_ns() - t0;
  // Background completed during the probe (shared ring: the probe's own are taken out).
  const uint64_t bg1 = completed_bg();
  stop.store(true);
  for (auto& t : pool) t.join();
  res.background = bg1 - bg0;
  if (!a.reserved) {
    const uint64_t probe_ops = ok ? uint64_t{a.iters} + a.warmup : 0;
    res.background = res.background > probe_ops ? res.background - probe_ops : 0;
  }
  EngineError first_err;
  keep_first(first_err, err);
  for (auto& pe : perr) keep_first(first_err, pe);
  if (first_err.failed) {
    err = first_err;
    return false;
  }
  res.ring_messages.assign(e.rings(), 0);
  for (uint32_t p = 0; p < P; ++p)
    for (uint32_t r = 0; r < e.rings(); ++r) res.ring_messages[r] += per_ring[p][r];
  // Every background descriptor must complete before the point ends (nothing left in flight).
  for (uint32_t r = first; r < e.rings(); ++r) {
    uint64_t want = res.ring_messages[r];
    if (!a.reserved && r == 0) want += uint64_t{a.iters} + a.warmup;
    if (!wait_completed(e, r, want, "drain", err)) return false;
  }
  return ok;
}

}  // namespace proxy
}  // namespace gicbench
