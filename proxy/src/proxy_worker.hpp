// A mini-proxy worker's loop (see proxy_engine.hpp), written once for both kinds of lanes: the
// worker owns its lanes through posters (native/src/poster.hpp), Mlx5Poster for mlx5 queues in
// memory (proxy_engine.cpp) or VerbsPoster for a verbs QP and CQ (proxy_verbs.cpp), the same
// posters the host submitter's loops use. On top of a poster a worker lane keeps its chains in
// flight: every chain's last write is signaled, so each completion retires the oldest chain and
// credits that chain's ring. Included by the two .cpp files only.
#pragma once

#include <sched.h>

#include <algorithm>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "interrupt.hpp"
#include "poster.hpp"
#include "proxy_engine.hpp"

namespace gicbench {
namespace proxy {

// One chain in flight: what its completion carries (`tag`), the ring it credits, how many.
struct Chain {
  uint64_t tag;
  uint32_t ring;
  uint32_t count;
};

// One descriptor's write, as the worker took it from a ring.
struct Piece {
  uint32_t offset, length;
};

// A lane the worker owns: its poster, the chains it has in flight (oldest first, one completion
// each, so no more than the CQ has entries) and when a completion last came.
template <class P>
struct WorkerLane {
  P poster;
  uint32_t max_chains;  // completions the lane's CQ holds
  std::deque<Chain> chains;
  int64_t last_progress = 0;
  std::vector<Write> writes;

  WorkerLane(const host::Lane& l, P p, uint32_t batch)
      : poster(std::move(p)), max_chains(l.cq.ncqe), writes(batch) {}

  bool room(const Piece* d, uint32_t n) const {
    uint64_t need = 0;
    for (uint32_t k = 0; k < n; ++k) need += poster.cost(d[k].length);
    return chains.size() < max_chains && poster.room(need);
  }
  // The n writes as one chain, its last signaled; false (e filled) when posting failed.
  bool post(const Piece* d, uint32_t n, uint32_t ring, EngineError& e) {
    for (uint32_t k = 0; k < n; ++k) writes[k] = Write{d[k].offset, d[k].length, k + 1 == n};
    if (!poster.post(writes.data(), n, e)) return false;
    chains.push_back(Chain{poster.last_tag(), ring, n});
    return true;
  }
  // 1: the oldest chain completed (popped into `done`), 0: nothing yet, -1: failure (e filled).
  int poll(Chain& done, EngineError& e) {
    typename P::Completion c;
    const int got = poster.poll(c, e);
    if (got <= 0) return got;
    if (chains.empty() || chains.front().tag != c.tag) {
      poster.fail(e, "queue_state");
      poster.describe(c, e);
      e.message = "a completion for work request " + std::to_string(c.tag) +
                  " that ends no chain this worker posted";
      return -1;
    }
    done = chains.front();
    chains.pop_front();
    poster.retire(c);
    return 1;
  }
};

template <class P>
void Engine::drive(uint32_t w, std::vector<WorkerLane<P>>& mine,
                   const std::vector<int>& lane_slot) {
  WorkerStats& st = stats_[w];
  const std::string who = "worker " + std::to_string(w);
  auto fail_here = [&](EngineError e) {
    e.who = who;
    fail(e);
  };
  std::vector<uint32_t> my_rings;
  for (uint32_t r = w; r < cfg_.rings; r += cfg_.workers) my_rings.push_back(r);
  std::vector<uint64_t> head(cfg_.rings, 0);
  ready_.fetch_add(1, std::memory_order_acq_rel);

  std::vector<Piece> chain(cfg_.batch);
  // The lanes with chains in flight: only these are polled (a worker may own thousands of
  // lanes, most of them idle at any moment, as when its producers cycle connections). A pass
  // that posted polls at most kReapPerPass of them, round robin (a lane that needs room is
  // polled when it does): a cycle with a new connection every write leaves thousands in flight,
  // and polling each after every descriptor made a worker's pass grow with the connections. A
  // pass that posted nothing polls each of them once (the drain, and waits on a ring's counter).
  constexpr size_t kReapPerPass = 8;
  std::vector<uint32_t> busy;
  std::vector<char> in_busy(mine.size(), 0);
  size_t reap_at = 0;
  constexpr int64_t kProgressNs = 50'000;
  int64_t last_drive = 0;  // when this worker last drove an inline NIC
  // Take completions of one lane; each retires one chain and credits its ring's counter.
  auto reap = [&](WorkerLane<P>& L) -> bool {
    for (;;) {
      Chain ch{};
      EngineError e;
      const int got = L.poll(ch, e);
      if (got == 0) return true;
      ++st.cqes;
      L.last_progress = now_ns();
      if (got < 0) {
        if (!L.chains.empty()) {
          fill_ring(e, L.chains.front().ring);
          e.index = e.completed;
        }
        fail_here(e);
        return false;
      }
      uint64_t* done = rings_[ch.ring].word(kCompletedOff);
      __atomic_store_n(done, __atomic_load_n(done, __ATOMIC_RELAXED) + ch.count, __ATOMIC_RELEASE);
    }
  };

  for (uint32_t spins = 0;; ++spins) {
    const bool stopping = stop_.load(std::memory_order_acquire);
    if (failed()) return;
    if (interrupted()) {
      EngineError e;
      e.kind = "interrupted";
      fail_here(e);
      return;
    }
    bool any = false, waiting = false;
    for (uint32_t r : my_rings) {
      const Ring& R = rings_[r];
      uint32_t n = 0, lane = 0;
      for (; n < cfg_.batch; ++n) {
        const uint64_t i = head[r] + n;
        uint64_t* s = R.slot(i);
        const uint64_t w0 = __atomic_load_n(&s[0], __ATOMIC_ACQUIRE);
        const uint64_t w1 = __atomic_load_n(&s[1], __ATOMIC_ACQUIRE);
        if (!desc_valid(i, w0, w1)) break;
        const uint32_t l = desc_lane(w0);
        const uint32_t off = desc_offset(w1), len = desc_length(w1);
        if (l >= lanes_.size() || lane_slot[l] < 0 || len == 0 || len > cfg_.max_size ||
            uint64_t{off} + len > std::min(lanes_[l].src.length, lanes_[l].dst.length)) {
          EngineError e;
          e.kind = "bad_descriptor";
          fill_ring(e, r);
          e.index = i;
          e.message = "descriptor " + std::to_string(i) + " of ring " + std::to_string(r) +
                      " asks for lane " + std::to_string(l) + ", offset " + std::to_string(off) +
                      ", " + std::to_string(len) + " bytes; this worker owns " +
                      (cfg_.lane_worker.empty()
                           ? "lanes ≡ " + std::to_string(w) + " mod " +
                                 std::to_string(cfg_.workers)
                           : std::to_string(mine.size()) + " assigned lanes") +
                      " and payloads of 1.." + std::to_string(cfg_.max_size) + " bytes";
          fail_here(e);
          return;
        }
        if (n == 0) lane = l;
        else if (l != lane) break;  // a chain goes to one QP
        chain[n] = Piece{off, len};
      }
      if (n == 0) continue;
      const uint32_t slot = static_cast<uint32_t>(lane_slot[lane]);
      WorkerLane<P>& L = mine[slot];
      if (!L.room(chain.data(), n)) {
        if (!reap(L)) return;
        if (!L.room(chain.data(), n)) {  // its completions will come; the timeout watches
          waiting = true;
          continue;
        }
      }
      if (L.chains.empty()) L.last_progress = now_ns();
      EngineError pe;
      if (!L.post(chain.data(), n, r, pe)) {
        fill_ring(pe, r);
        pe.index = head[r];
        fail_here(pe);
        return;
      }
      if (!in_busy[slot]) {
        in_busy[slot] = 1;
        busy.push_back(slot);
      }
      head[r] += n;
      // The slots are free again once their work requests are built: producers may reuse them.
      __atomic_store_n(R.word(kHeadOff), head[r], __ATOMIC_RELEASE);
      st.descriptors += n;
      for (uint32_t k = 0; k < n; ++k) st.bytes += chain[k].length;
      ++st.doorbells;
      any = true;
    }
    // Poll busy[k]; false on a failure. A lane left with nothing in flight leaves the list
    // (the last one takes its place, so k then holds a lane not yet polled).
    auto poll_busy = [&](size_t k, bool& removed) -> bool {
      WorkerLane<P>& L = mine[busy[k]];
      if (!reap(L)) return false;
      removed = L.chains.empty();
      if (removed) {
        in_busy[busy[k]] = 0;
        busy[k] = busy.back();
        busy.pop_back();
      }
      return true;
    };
    bool removed = false;
    if (any) {  // a bounded share, round robin
      for (size_t n = std::min(kReapPerPass, busy.size()); n > 0 && !busy.empty(); --n) {
        if (reap_at >= busy.size()) reap_at = 0;
        if (!poll_busy(reap_at, removed)) return;
        if (!removed) ++reap_at;
      }
    } else {  // every lane in flight, each once
      for (size_t k = 0; k < busy.size();) {
        if (!poll_busy(k, removed)) return;
        if (!removed) ++k;
      }
    }
    const bool outstanding = !busy.empty();
    // An inline-progress NIC is driven when the worker would otherwise wait (a pass that posted
    // nothing, or a lane without room), as the host loops drive it between empty polls, and at
    // least every kProgressNs while it keeps posting (what it posted is not held back longer,
    // and a lane's deadline never counts time the worker kept the NIC from running): a pass of
    // the emulated NIC reads every recently rung QP's doorbell, so driving it after every chain
    // made each of a thousand-connection cycle's writes pay a thousand reads.
    if (cfg_.progress.fn) {
      const int64_t t = any && !waiting ? now_ns() : 0;
      if ((t == 0 || t - last_drive >= kProgressNs) &&
          !progress_busy_.test_and_set(std::memory_order_acquire)) {
        cfg_.progress();
        progress_busy_.clear(std::memory_order_release);
        last_drive = t ? t : now_ns();
      }
    }
    if (!any) {
      // Finish what the rings held when stop was asked, then leave.
      if (stopping && !outstanding) return;
      if ((spins & 255) == 255 && outstanding) {
        const int64_t t = now_ns();
        for (uint32_t b : busy)
          if (WorkerLane<P>& L = mine[b];
              !L.chains.empty() && t - L.last_progress > cfg_.timeout_ns) {
            EngineError e;
            L.poster.fail(e, "timeout");
            fill_ring(e, L.chains.front().ring);
            e.index = e.completed;
            e.message = "no completion for " + std::to_string(L.chains.size()) +
                        " chain(s) on QP " + qpn_hex(L.poster.qpn()) +
                        " (the oldest ends at work request " +
                        std::to_string(L.chains.front().tag) + ")";
            fail_here(e);
            return;
          }
      }
      // An idle worker lets a producer sharing its core run (see backoff in proxy_host.cpp).
      if ((spins & 1023) == 1023) sched_yield();
      else cpu_relax();
    }
  }
}

}  // namespace proxy
}  // namespace gicbench
