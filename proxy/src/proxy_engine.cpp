// mini-proxy's CPU workers (see proxy_engine.hpp).
#include "proxy_engine.hpp"

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <system_error>

#include "mlx5_poster.hpp"
#include "proxy_worker.hpp"

namespace gicbench {
namespace proxy {

namespace {

std::atomic<int> g_live_rings{0};

int64_t core_khz(int core) {
  std::ifstream f("/sys/devices/system/cpu/cpu" + std::to_string(core) +
                  "/cpufreq/scaling_cur_freq");
  int64_t khz = -1;
  if (f) f >> khz;
  return f ? khz : -1;
}

// The CPU-only preconditioning load of Appendix C.1: dependent arithmetic, no memory traffic.
void busy_for(int64_t ns) {
  const int64_t end = now_ns() + ns;
  volatile uint64_t sink = 1;
  uint64_t x = 88172645463325252ull;
  while (now_ns() < end)
    for (int i = 0; i < 4096; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      sink = sink + x;
    }
}

}  // namespace

int live_rings() { return g_live_rings.load(); }

Engine::Engine(std::vector<host::Lane> lanes, EngineConfig cfg)
    : lanes_(std::move(lanes)), cfg_(std::move(cfg)) {}

Engine::Engine(std::vector<host::Lane> lanes, std::vector<VerbsQueues> verbs, EngineConfig cfg)
    : lanes_(std::move(lanes)), verbs_(std::move(verbs)), cfg_(std::move(cfg)) {}

Engine::~Engine() {
  EngineError ignored;
  stop(ignored);
  release();
}

void Engine::fail(const EngineError& e) {
  while (err_lock_.test_and_set(std::memory_order_acquire)) cpu_relax();
  if (!err_.failed || err_.kind == "stopped") {
    err_ = e;
    err_.failed = true;
  }
  err_lock_.clear(std::memory_order_release);
  failed_.store(true, std::memory_order_release);
}

EngineError Engine::first_error() const {
  while (err_lock_.test_and_set(std::memory_order_acquire)) cpu_relax();
  EngineError e = err_;
  err_lock_.clear(std::memory_order_release);
  return e;
}

void Engine::fill_ring(EngineError& e, uint32_t r) const {
  e.ring = r;
  e.head = __atomic_load_n(rings_[r].word(kHeadOff), __ATOMIC_ACQUIRE);
  e.completed = __atomic_load_n(rings_[r].word(kCompletedOff), __ATOMIC_ACQUIRE);
}

bool Engine::init(EngineError& err) {
  auto refuse = [&](const std::string& field, const std::string& allowed, const std::string& m) {
    return err.refuse(field, allowed, m);
  };
  const auto& c = cfg_;
  if (c.workers < 1 || c.workers > 8)
    return refuse("workers", "1..8", "workers=" + std::to_string(c.workers));
  if (c.rings < 1 || c.rings > 32)
    return refuse("rings", "1..32", "rings=" + std::to_string(c.rings));
  if (c.batch < 1 || c.batch > 16)
    return refuse("batch", "1..16", "batch=" + std::to_string(c.batch));
  if (c.rings < c.workers)
    return refuse("rings", "at least one ring per worker (>= " + std::to_string(c.workers) + ")",
                  "rings=" + std::to_string(c.rings) + " with " + std::to_string(c.workers) +
                      " workers");
  if (lanes_.size() < c.workers)
    return refuse("workers", "at most one worker per lane (<= " + std::to_string(lanes_.size()) +
                                 ")",
                  std::to_string(c.workers) + " workers need their own QPs; " +
                      std::to_string(lanes_.size()) + " lanes given");
  if (lanes_.size() > kMaxLane + 1)
    return refuse("lanes", "at most 65536", std::to_string(lanes_.size()) + " lanes");
  if (c.depth < 2 || (c.depth & (c.depth - 1)) || c.depth > (1u << 20))
    return refuse("depth", "a power of two in 2..1M", "depth=" + std::to_string(c.depth));
  if (c.max_size == 0 || c.max_size > kMaxLength)
    return refuse("size", "1.." + std::to_string(kMaxLength),
                  "size=" + std::to_string(c.max_size));
  if (on_verbs() && verbs_.size() != lanes_.size())
    return refuse("lanes", "a verbs QP and CQ per lane", std::to_string(verbs_.size()) +
                                                              " verbs queues for " +
                                                              std::to_string(lanes_.size()) +
                                                              " lanes");
  if (on_verbs() && !init_verbs(err)) return false;
  for (size_t i = 0; i < lanes_.size() && !on_verbs(); ++i) {
    const auto& l = lanes_[i];
    const uint32_t bbs = SqProducer::write_wqebbs(c.inline_payload, c.max_size, l.dc, l.compact_av);
    if (bbs == 0)
      return refuse("size", "a payload that fits one WQE inline (or --payload pointer)",
                    "an inline write of " + std::to_string(c.max_size) + " bytes");
    if (uint64_t{c.batch} * bbs > l.sq.wqebb_cnt)
      return refuse("batch", "at most " + std::to_string(l.sq.wqebb_cnt / bbs) + " WQEs per chain",
                    "batch=" + std::to_string(c.batch) + " x " + std::to_string(bbs) +
                        " WQEBBs exceeds the SQ of lane " + std::to_string(i) + " (QP " +
                        qpn_hex(l.sq.qpn) + ", " + std::to_string(l.sq.wqebb_cnt) + " WQEBBs)");
    if (l.cq.ncqe < l.sq.wqebb_cnt / bbs)
      return refuse("lanes", "a CQ with an entry per possible chain",
                    "lane " + std::to_string(i) + "'s CQ has " + std::to_string(l.cq.ncqe) +
                        " entries for " + std::to_string(l.sq.wqebb_cnt / bbs) + " chains");
    if (c.max_size > l.src.length || c.max_size > l.dst.length)
      return refuse("size", "1.." + std::to_string(std::min(l.src.length, l.dst.length)),
                    "size=" + std::to_string(c.max_size) + " beyond lane " + std::to_string(i) +
                        "'s regions");
  }
  if (!c.lane_worker.empty()) {
    if (c.lane_worker.size() != lanes_.size())
      return refuse("lanes", "a worker for every lane",
                    std::to_string(c.lane_worker.size()) + " assignments for " +
                        std::to_string(lanes_.size()) + " lanes");
    std::vector<bool> owns(c.workers, false);
    for (size_t i = 0; i < lanes_.size(); ++i) {
      if (c.lane_worker[i] >= c.workers)
        return refuse("lanes", "workers 0.." + std::to_string(c.workers - 1),
                      "lane " + std::to_string(i) + " assigned to worker " +
                          std::to_string(c.lane_worker[i]));
      owns[c.lane_worker[i]] = true;
    }
    for (uint32_t w = 0; w < c.workers; ++w)
      if (!owns[w])
        return refuse("workers", "a lane for every worker",
                      "worker " + std::to_string(w) + " is assigned no lane");
  }
  // lanes of worker w: w, w+T, ...; ring r: worker r mod T, that worker's ((r div T) mod n)-th
  // (assigned lanes: rings name their lanes in each descriptor, ring_lane is not used)
  ring_lane_.resize(c.rings);
  for (uint32_t r = 0; r < c.rings; ++r) {
    const uint32_t w = r % c.workers;
    const uint32_t n = static_cast<uint32_t>((lanes_.size() - w + c.workers - 1) / c.workers);
    ring_lane_[r] = w + ((r / c.workers) % n) * c.workers;
  }
  const uint64_t bytes = Ring::bytes(c.depth);
  for (uint32_t r = 0; r < c.rings; ++r) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      release();
      return refuse("rings", "rings that fit in memory", "mmap of ring " + std::to_string(r) +
                                                             " failed");
    }
    rings_.push_back(Ring{static_cast<uint8_t*>(p), c.depth});
    g_live_rings.fetch_add(1);
  }
  mapped_ = true;
  return true;
}

void Engine::release() {
  for (auto& r : rings_) {
    munmap(r.base, Ring::bytes(r.depth));
    g_live_rings.fetch_sub(1);
  }
  rings_.clear();
  mapped_ = false;
}

bool Engine::start(EngineError& err) {
  stats_.assign(cfg_.workers, WorkerStats{});
  ready_.store(0);
  try {
    for (uint32_t w = 0; w < cfg_.workers; ++w) threads_.emplace_back(&Engine::worker_main, this, w);
  } catch (const std::system_error& e) {
    EngineError s;
    s.kind = "bad_arguments";
    s.who = "engine";
    s.field = "workers";
    s.allowed = "as many threads as the system can start";
    s.message = std::string("could not start a worker thread: ") + e.what();
    fail(s);
  }
  // Every started worker reports ready (or fails); a worker never waits on us here.
  while (ready_.load(std::memory_order_acquire) < threads_.size() && !failed()) cpu_relax();
  if (failed()) {
    EngineError ignored;
    stop(ignored);
    err = first_error();
    return false;
  }
  return true;
}

bool Engine::stop(EngineError& err) {
  stop_.store(true, std::memory_order_release);
  for (auto& t : threads_) t.join();
  threads_.clear();
  if (failed()) {
    err = first_error();
    return false;
  }
  return true;
}

void Engine::worker_main(uint32_t w) {
  WorkerStats& st = stats_[w];
  const std::string who = "worker " + std::to_string(w);
  auto fail_here = [&](EngineError e) {
    e.who = who;
    fail(e);
    ready_.fetch_add(1);
  };
  if (!cfg_.cores.empty()) {
    const int core = cfg_.cores[w % cfg_.cores.size()];
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
      EngineError e;
      e.kind = "pin";
      e.field = "proxy_cores";
      e.allowed = "cores in this rank's CPU set";
      e.message = who + " could not be pinned to core " + std::to_string(core);
      fail_here(e);
      return;
    }
  }
  if (cfg_.precondition == Precondition::kWarm)
    busy_for(cfg_.precondition_ns);
  else if (cfg_.precondition_ns > 0)
    std::this_thread::sleep_for(std::chrono::nanoseconds(cfg_.precondition_ns));
  st.core = sched_getcpu();
  st.khz = core_khz(st.core);
  if (on_verbs()) {
    verbs_worker(w);
    return;
  }

  // My lanes; each lane's SQ resumes where its memory says.
  std::vector<WorkerLane<Mlx5Poster>> mine;
  std::vector<int> lane_slot(lanes_.size(), -1);
  for (uint32_t i = 0; i < lanes_.size(); ++i) {
    if (owner(i) != w) continue;
    uint16_t retired = 0;
    if (const char* why = attach_retired(lanes_[i].sq, lanes_[i].cq, retired)) {
      EngineError e;
      e.kind = "queue_state";
      e.qpn = lanes_[i].sq.qpn;
      e.message = "QP " + qpn_hex(e.qpn) + ": cannot tell what is outstanding: " + why;
      fail_here(e);
      return;
    }
    lane_slot[i] = static_cast<int>(mine.size());
    const host::Lane& l = lanes_[i];
    mine.emplace_back(l, Mlx5Poster(l, retired, l.src, l.dst, cfg_.inline_payload), cfg_.batch);
  }
  drive(w, mine, lane_slot);
}

}  // namespace proxy
}  // namespace gicbench
