// mini-proxy (the paper, arXiv 2610.01380, §4.2, Table 1): T CPU workers, each with its own
// QP(s), poll R rings of 16-byte descriptors and post chains of up to B RDMA writes with one
// doorbell; each ring's completion counter (host memory, GPU-visible when the ring is mapped)
// counts the descriptors whose writes completed. Producers are host threads here (proxy_host.cpp)
// or GPU threads writing through a mapping (the Python side launches them).
//
// Ring r belongs to worker r mod T and carries writes on one of that worker's lanes (QPs):
// lane l belongs to worker l mod T (unless the configuration assigns lanes: `lane_worker`), and
// ring r uses the worker's ((r div T) mod n)-th lane.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "lane.hpp"
#include "loop_error.hpp"
#include "proxy_ring.hpp"
#include "wait.hpp"

struct ibv_qp;
struct ibv_cq;

namespace gicbench {
namespace proxy {

template <class P>
struct WorkerLane;  // proxy_worker.hpp

enum class Handoff : int { kBaseline = 0, kTuned = 1 };
enum class Precondition : int { kCold = 0, kWarm = 1 };

// A lane on the verbs provider (no mlx5 queues in memory): the worker posts its chains with one
// ibv_post_send and polls with ibv_poll_cq (proxy_verbs.cpp). Its host::Lane twin carries the
// regions, the QP number, the SQ depth in work requests (sq.wqebb_cnt) and the CQ's entries.
struct VerbsQueues {
  ibv_qp* qp = nullptr;
  ibv_cq* cq = nullptr;
  uint32_t max_inline = 0;  // inline bytes the QP accepts
};

struct EngineConfig {
  uint32_t workers = 1;  // T
  uint32_t rings = 1;    // R
  uint32_t batch = 1;    // B: most WQEs per doorbell
  uint32_t depth = 1024; // slots per ring (power of two)
  uint32_t max_size = 8; // largest payload a descriptor may ask for
  bool inline_payload = true;
  std::vector<int> cores;  // worker w runs on cores[w mod n]; empty: not pinned
  Precondition precondition = Precondition::kCold;
  int64_t precondition_ns = 0;  // cold: idle this long first; warm: CPU-only load this long
  int64_t timeout_ns = 1000000000;
  Progress progress;
  // lane_worker[l]: the worker that owns lane l; empty: l mod T. A producer that cycles its
  // own lanes (cycle, proxy_host.hpp) has them owned by its ring's worker.
  std::vector<uint32_t> lane_worker;
};

// A failure anywhere in the engine: a loop's failure (the lane's queue state, the error
// completion) plus who (worker, producer, rank side) and where in the rings; the first one is
// kept and stops everything else. Kinds beyond LoopError's: bad_descriptor, pin.
struct EngineError : LoopError {
  std::string who;   // "worker 2" | "producer 1" | "probe" | "engine"
  int64_t ring = -1;
  uint64_t index = 0;      // ring index concerned
  uint64_t head = 0;       // ring's consumed index at the time
  uint64_t completed = 0;  // ring's completion counter at the time

  // The engine's configuration refused: `field`, what it allows, the value given. Always false
  // (init's return value).
  bool refuse(const std::string& f, const std::string& allowed_, const std::string& m) {
    who = "engine";
    return LoopError::refuse(f, allowed_, m);
  }
};

struct WorkerStats {
  int core = -1;        // where it ran (sched_getcpu after pinning)
  int64_t khz = -1;     // that core's clock after preconditioning (cpufreq), -1 if unreadable
  uint64_t descriptors = 0, doorbells = 0, cqes = 0, bytes = 0;
};

// Rings alive in this process (mapped and not yet unmapped): the tests' leak check.
int live_rings();

class Engine {
 public:
  Engine(std::vector<host::Lane> lanes, EngineConfig cfg);
  // On the verbs provider: verbs[i] are lanes[i]'s QP and CQ (lanes[i] holds no queue memory).
  Engine(std::vector<host::Lane> lanes, std::vector<VerbsQueues> verbs, EngineConfig cfg);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Maps the rings and checks the configuration; false (err filled) if refused.
  bool init(EngineError& err);
  // Starts and pins the workers and waits until each has preconditioned and attached.
  bool start(EngineError& err);
  // Asks workers to finish what is in the rings, joins them; returns the first failure.
  bool stop(EngineError& err);
  // Unmaps the rings (stop() first); idempotent, also done by the destructor.
  void release();

  uint32_t rings() const { return cfg_.rings; }
  uint32_t depth() const { return cfg_.depth; }
  const EngineConfig& config() const { return cfg_; }
  const std::vector<host::Lane>& lanes() const { return lanes_; }
  Ring ring(uint32_t r) const { return rings_[r]; }
  uint32_t ring_lane(uint32_t r) const { return ring_lane_[r]; }
  bool on_verbs() const { return !verbs_.empty(); }
  const std::vector<WorkerStats>& stats() const { return stats_; }
  // The worker that owns lane l.
  uint32_t owner(size_t l) const {
    return cfg_.lane_worker.empty() ? static_cast<uint32_t>(l % cfg_.workers) : cfg_.lane_worker[l];
  }
  // Before init: lane l to worker lane_worker[l] (init checks the assignment).
  void assign_lanes(std::vector<uint32_t> lane_worker) { cfg_.lane_worker = std::move(lane_worker); }

  // Shared failure state: producers and workers stop when it is set.
  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  void fail(const EngineError& e);
  EngineError first_error() const;
  // A human description of ring r's state for diagnostics.
  void fill_ring(EngineError& e, uint32_t r) const;

 private:
  void worker_main(uint32_t w);
  // The worker's loop over its rings and lanes, for either kind of poster (proxy_worker.hpp
  // defines it; proxy_engine.cpp runs it with mlx5 lanes, proxy_verbs.cpp with verbs lanes).
  template <class P>
  void drive(uint32_t w, std::vector<WorkerLane<P>>& mine, const std::vector<int>& lane_slot);
  void verbs_worker(uint32_t w);  // proxy_verbs.cpp
  bool init_verbs(EngineError& err);  // proxy_verbs.cpp: the verbs lanes' checks

  std::vector<host::Lane> lanes_;
  std::vector<VerbsQueues> verbs_;  // empty: mlx5 queues in memory
  EngineConfig cfg_;
  std::vector<Ring> rings_;
  std::vector<uint32_t> ring_lane_;
  std::vector<std::thread> threads_;
  std::vector<WorkerStats> stats_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> failed_{false};
  std::atomic<uint32_t> ready_{0};
  std::atomic_flag progress_busy_ = ATOMIC_FLAG_INIT;
  mutable std::atomic_flag err_lock_ = ATOMIC_FLAG_INIT;
  EngineError err_;
  bool mapped_ = false;
};

}  // namespace proxy
}  // namespace gicbench
