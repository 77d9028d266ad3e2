// mini-proxy's CPU workers (see proxy_engine.hpp).
#include "proxy_engine.hpp"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <fstream>
#include <system_error>

namespace gicbench {
namespace proxy {

namespace {

std::atomic<int> g_live_rings{0};

std::string hex_qpn(uint32_t qpn) {
  char b[16];
  snprintf(b, sizeof b, "0x%06x", qpn);
  return b;
}

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

struct Engine::WLane {
  host::Lane* lane;
  uint32_t index;  // in lanes_
  SqProducer sq;
  CqConsumer cq;
  std::deque<Chain> chains;  // every chain is signaled on its last WQE: one CQE each, in order
  int64_t last_progress = 0; // when a CQE last arrived (or work was first outstanding)
};

Engine::Engine(std::vector<host::Lane> lanes, EngineConfig cfg)
    : lanes_(std::move(lanes)), cfg_(std::move(cfg)) {}

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
    err.failed = true;
    err.kind = "bad_arguments";
    err.who = "engine";
    err.field = field;
    err.allowed = allowed;
    err.message = m;
    return false;
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
  for (size_t i = 0; i < lanes_.size(); ++i) {
    const auto& l = lanes_[i];
    const uint32_t bbs = SqProducer::write_wqebbs(c.inline_payload, c.max_size, l.dc, l.compact_av);
    if (bbs == 0)
      return refuse("size", "a payload that fits one WQE inline (or --payload pointer)",
                    "an inline write of " + std::to_string(c.max_size) + " bytes");
    if (uint64_t{c.batch} * bbs > l.sq.wqebb_cnt)
      return refuse("batch", "at most " + std::to_string(l.sq.wqebb_cnt / bbs) + " WQEs per chain",
                    "batch=" + std::to_string(c.batch) + " x " + std::to_string(bbs) +
                        " WQEBBs exceeds the SQ of lane " + std::to_string(i) + " (QP " +
                        hex_qpn(l.sq.qpn) + ", " + std::to_string(l.sq.wqebb_cnt) + " WQEBBs)");
    if (l.cq.ncqe < l.sq.wqebb_cnt / bbs)
      return refuse("lanes", "a CQ with an entry per possible chain",
                    "lane " + std::to_string(i) + "'s CQ has " + std::to_string(l.cq.ncqe) +
                        " entries for " + std::to_string(l.sq.wqebb_cnt / bbs) + " chains");
    if (c.max_size > l.src.length || c.max_size > l.dst.length)
      return refuse("size", "1.." + std::to_string(std::min(l.src.length, l.dst.length)),
                    "size=" + std::to_string(c.max_size) + " beyond lane " + std::to_string(i) +
                        "'s regions");
  }
  // lanes of worker w: w, w+T, ...; ring r: worker r mod T, that worker's ((r div T) mod n)-th
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
      ready_.fetch_add(1);
      return;
    }
  }
  if (cfg_.precondition == Precondition::kWarm)
    busy_for(cfg_.precondition_ns);
  else if (cfg_.precondition_ns > 0)
    std::this_thread::sleep_for(std::chrono::nanoseconds(cfg_.precondition_ns));
  st.core = sched_getcpu();
  st.khz = core_khz(st.core);

  // My lanes and rings; each lane's SQ resumes where its memory says.
  std::vector<WLane> mine;
  std::vector<int> lane_slot(lanes_.size(), -1);
  for (uint32_t i = w; i < lanes_.size(); i += cfg_.workers) {
    uint16_t retired = 0;
    if (const char* why = attach_retired(lanes_[i].sq, lanes_[i].cq, retired)) {
      EngineError e;
      e.kind = "queue_state";
      e.qpn = lanes_[i].sq.qpn;
      e.message = "QP " + hex_qpn(e.qpn) + ": cannot tell what is outstanding: " + why;
      fail_here(e);
      ready_.fetch_add(1);
      return;
    }
    lane_slot[i] = static_cast<int>(mine.size());
    mine.push_back(WLane{&lanes_[i], i, SqProducer(lanes_[i].sq, retired), CqConsumer(lanes_[i].cq),
                         {}, 0});
  }
  std::vector<uint32_t> my_rings;
  for (uint32_t r = w; r < cfg_.rings; r += cfg_.workers) my_rings.push_back(r);
  std::vector<uint64_t> head(cfg_.rings, 0);
  ready_.fetch_add(1, std::memory_order_acq_rel);

  struct Desc {
    uint32_t offset, length;
  };
  std::vector<Desc> chain(cfg_.batch);
  auto lane_state = [&](EngineError& e, const WLane& L) {
    e.qpn = L.lane->sq.qpn;
    e.pi = L.sq.pi();
    e.retired = L.sq.retired();
    e.cq_ci = L.cq.ci();
  };
  // Take CQEs of one lane; each retires one chain and credits its ring's completion counter.
  auto reap = [&](WLane& L) -> bool {
    mlx5::CqeView c;
    while (L.cq.poll(c)) {
      ++st.cqes;
      L.last_progress = now_ns();
      if (cqe_is_error(c) || L.chains.empty() ||
          static_cast<uint16_t>(L.chains.front().last_wqe) != c.wqe_counter) {
        EngineError e;
        e.kind = cqe_is_error(c) ? "cqe_error" : "queue_state";
        lane_state(e, L);
        e.syndrome = c.syndrome;
        e.vendor_syndrome = c.vendor_syndrome;
        e.wqe_counter = c.wqe_counter;
        if (!L.chains.empty()) {
          fill_ring(e, L.chains.front().ring);
          e.index = __atomic_load_n(rings_[L.chains.front().ring].word(kCompletedOff),
                                    __ATOMIC_RELAXED);
        }
        if (e.kind == "queue_state")
          e.message = "a CQE for WQE " + std::to_string(c.wqe_counter) +
                      " that ends no chain this worker posted";
        fail_here(e);
        return false;
      }
      const Chain ch = L.chains.front();
      L.chains.pop_front();
      L.sq.retire(c.wqe_counter);
      uint64_t* done = rings_[ch.ring].word(kCompletedOff);
      __atomic_store_n(done, __atomic_load_n(done, __ATOMIC_RELAXED) + ch.count, __ATOMIC_RELEASE);
    }
    return true;
  };

  for (uint32_t spins = 0;; ++spins) {
    const bool stopping = stop_.load(std::memory_order_acquire);
    if (failed()) return;
    if (host::interrupted()) {
      EngineError e;
      e.kind = "interrupted";
      fail_here(e);
      return;
    }
    bool any = false;
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
                      ", " + std::to_string(len) + " bytes; this worker owns lanes ≡ " +
                      std::to_string(w) + " mod " + std::to_string(cfg_.workers) +
                      " and payloads of 1.." + std::to_string(cfg_.max_size) + " bytes";
          fail_here(e);
          return;
        }
        if (n == 0) lane = l;
        else if (l != lane) break;  // a chain goes to one QP
        chain[n] = Desc{off, len};
      }
      if (n == 0) continue;
      WLane& L = mine[lane_slot[lane]];
      const host::Lane& ln = *L.lane;
      uint32_t need = 0;
      for (uint32_t k = 0; k < n; ++k)
        need += SqProducer::write_wqebbs(cfg_.inline_payload, chain[k].length, ln.dc, ln.compact_av);
      if (L.sq.free_wqebbs() < need) {
        if (!reap(L)) return;
        if (L.sq.free_wqebbs() < need) continue;  // its CQEs will come; the timeout watches
      }
      uint32_t last = 0;
      for (uint32_t k = 0; k < n; ++k) {
        WriteOp op;
        op.raddr = ln.dst.addr + chain[k].offset;
        op.rkey = ln.dst.key;
        op.length = chain[k].length;
        if (cfg_.inline_payload) {
          op.inline_data = reinterpret_cast<const void*>(ln.src.addr + chain[k].offset);
        } else {
          op.laddr = ln.src.addr + chain[k].offset;
          op.lkey = ln.src.key;
        }
        op.signaled = k + 1 == n;
        if (ln.dc) {
          op.av = &ln.av;
          op.compact_av = ln.compact_av;
        }
        last = L.sq.post_write(op);
      }
      L.sq.ring();
      if (L.chains.empty()) L.last_progress = now_ns();
      L.chains.push_back(Chain{last, r, n});
      head[r] += n;
      // The slots are free again once their WQEs are built: producers may reuse them.
      __atomic_store_n(R.word(kHeadOff), head[r], __ATOMIC_RELEASE);
      st.descriptors += n;
      ++st.doorbells;
      any = true;
    }
    bool outstanding = false;
    for (auto& L : mine) {
      if (!reap(L)) return;
      outstanding |= !L.chains.empty();
    }
    if (cfg_.progress.fn && !progress_busy_.test_and_set(std::memory_order_acquire)) {
      cfg_.progress();
      progress_busy_.clear(std::memory_order_release);
    }
    if (!any) {
      // Finish what the rings held when stop was asked, then leave.
      if (stopping && !outstanding) return;
      if ((spins & 255) == 255 && outstanding) {
        const int64_t t = now_ns();
        for (auto& L : mine)
          if (!L.chains.empty() && t - L.last_progress > cfg_.timeout_ns) {
            EngineError e;
            e.kind = "timeout";
            lane_state(e, L);
            fill_ring(e, L.chains.front().ring);
            e.index = e.completed;
            e.message = "no CQE for " + std::to_string(L.chains.size()) + " chain(s) on QP " +
                        hex_qpn(L.lane->sq.qpn) + " (oldest ends at WQE " +
                        std::to_string(L.chains.front().last_wqe & 0xffff) + ")";
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
