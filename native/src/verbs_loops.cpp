// The host submitter's loops on the verbs provider: ibv_post_send chains and ibv_poll_cq, the
// same loop shapes and contracts as host_loops.cpp's WQE loops (sequence number in the payload's
// last 8 bytes, lane l's k-th rate message in slot k mod slots, signaled every depth/4, drain
// inside the timed region). Every wait reads the interrupt flag and the clock every 256 polls.
#ifdef GICBENCH_HAVE_VERBS
#include <time.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "host_loops.hpp"  // host::interrupted()
#include "verbs_nic.hpp"

namespace gicbench {
namespace verbs {
namespace {

constexpr uint32_t kCheckEvery = 256;  // polls between clock/interrupt checks
// While a round trip waits for its reply word, the send CQ is polled once per this many reads
// of the word: ibv_poll_cq takes the CQ's lock and walks its ring (on rxe a queue shared with
// the kernel), a word read is one load, and the reply is seen one poll sooner. An error
// completion (no reply will come) is still seen within this many spins.
constexpr uint32_t kWordSpinsPerPoll = 32;

inline uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

inline uint64_t load_word(uint64_t addr) {
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(addr), __ATOMIC_ACQUIRE);
}

inline void store_word(uint64_t addr, uint64_t v) {
  __atomic_store_n(reinterpret_cast<uint64_t*>(addr), v, __ATOMIC_RELEASE);
}

// Where a loop is, for its error report.
struct Where {
  uint32_t qpn;
  uint64_t posted = 0;
  uint64_t completed = 0;
};

bool set_fail(LoopError& err, const char* kind, const Where& w, const std::string& message = "") {
  err.failed = true;
  err.kind = kind;
  err.qpn = w.qpn;
  err.posted = w.posted;
  err.completed = w.completed;
  err.message = message;
  return false;
}

bool cqe_fail(LoopError& err, const Where& w, const ibv_wc& wc) {
  set_fail(err, "cqe_error", w);
  err.status = wc.status;
  err.vendor_err = wc.vendor_err;
  err.wr_id = wc.wr_id;
  err.wc_qpn = wc.qp_num;
  return false;
}

// Waits for stop() while polling nothing else: interrupt and deadline checks only.
struct Waiter {
  uint64_t timeout_ns;
  uint64_t deadline = 0;
  uint32_t spins = 0;
  // false: give up (interrupted or past the deadline); `why` says which.
  bool keep_going(const char*& why) {
    if (++spins % kCheckEvery) return true;
    if (host::interrupted()) {
      why = "interrupted";
      return false;
    }
    const uint64_t t = now_ns();
    if (deadline == 0) deadline = t + timeout_ns;
    if (t > deadline) {
      why = "timeout";
      return false;
    }
    return true;
  }
};

// One completion from `cq` (a signaled WR of `w.qpn`); error status or timeout fail.
bool wait_cqe(ibv_cq* cq, Where& w, uint64_t timeout_ns, LoopError& err) {
  ibv_wc wc;
  Waiter wt{timeout_ns};
  const char* why = nullptr;
  for (;;) {
    const int got = ibv_poll_cq(cq, 1, &wc);
    if (got < 0) return set_fail(err, "poll_failed", w, "ibv_poll_cq returned an error");
    if (got == 1) {
      if (wc.status != IBV_WC_SUCCESS) return cqe_fail(err, w, wc);
      ++w.completed;
      return true;
    }
    if (!wt.keep_going(why)) return set_fail(err, why, w);
  }
}

// Spin until the word at `addr` holds `seq`, consuming send completions from `cq` meanwhile
// (an error completion of our request shows there). `cqes` counts those consumed.
bool wait_word(uint64_t addr, uint64_t seq, ibv_cq* cq, Where& w, uint64_t timeout_ns,
               uint64_t& cqes, LoopError& err) {
  ibv_wc wc;
  Waiter wt{timeout_ns};
  const char* why = nullptr;
  uint32_t spins = 0;
  while (load_word(addr) != seq) {
    if (++spins % kWordSpinsPerPoll) continue;
    const int got = ibv_poll_cq(cq, 1, &wc);
    if (got < 0) return set_fail(err, "poll_failed", w, "ibv_poll_cq returned an error");
    if (got == 1) {
      if (wc.status != IBV_WC_SUCCESS) return cqe_fail(err, w, wc);
      ++w.completed;
      ++cqes;
    }
    if (!wt.keep_going(why)) {  // counts polls: clock and interrupt every 256 * 32 word reads
      set_fail(err, why, w);
      err.word_seen = load_word(addr);
      err.word_expected = seq;
      return false;
    }
  }
  return true;
}

int flags_for(bool inline_payload, bool signaled) {
  return (signaled ? IBV_SEND_SIGNALED : 0) | (inline_payload ? IBV_SEND_INLINE : 0);
}

// One signaled RDMA WRITE of `size` bytes from src to dst (the single-op and responder loops
// post it again and again, the sequence in the payload's last word); the WR points at its SGE.
struct OneWrite {
  ibv_sge sge;
  ibv_send_wr wr{};
  template <class Region>
  OneWrite(const Region& src, const Region& dst, uint32_t size, bool inline_payload)
      : sge{src.addr, size, src.key} {
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = flags_for(inline_payload, true);
    wr.wr.rdma.remote_addr = dst.addr;
    wr.wr.rdma.rkey = dst.key;
  }
  OneWrite(const OneWrite&) = delete;  // wr.sg_list points into this object
  OneWrite& operator=(const OneWrite&) = delete;
};

}  // namespace

bool single_op(Nic& nic, const LatencyArgs& a, int64_t* samples, LoopError& err) {
  ibv_qp* qp = nic.qp(a.qpn);
  ibv_cq* cq = nic.cq(a.cq);
  Where w{a.qpn};
  OneWrite one(a.src, a.dst, a.size, a.inline_payload);
  ibv_send_wr& wr = one.wr;
  const uint64_t seq_addr = a.src.addr + a.size - 8;
  const uint64_t reply_addr = a.reply.addr + a.size - 8;
  const uint64_t total = a.warmup + a.iters;
  err.total = total;
  for (uint64_t i = 0; i < total; ++i) {
    if (host::interrupted()) {
      err.done = i;
      return set_fail(err, "interrupted", w);
    }
    const uint64_t seq = i + 1;
    store_word(seq_addr, seq);  // the sequence number rides in the payload's last 8 bytes
    wr.wr_id = seq;
    ibv_send_wr* bad = nullptr;
    const uint64_t t0 = now_ns();
    const int rc = ibv_post_send(qp, &wr, &bad);
    uint64_t t1 = 0;
    if (rc) {
      err.done = i;
      return set_fail(err, "post_failed", w, std::strerror(rc));
    }
    ++w.posted;
    bool ok = true;
    if (a.mode == 0) {
      t1 = now_ns();
      ok = wait_cqe(cq, w, a.timeout_ns, err);
    } else if (a.mode == 1) {
      ok = wait_cqe(cq, w, a.timeout_ns, err);
      t1 = now_ns();
    } else {
      uint64_t seen = 0;
      ok = wait_word(reply_addr, seq, cq, w, a.timeout_ns, seen, err);
      t1 = now_ns();
      if (ok && w.completed < w.posted) ok = wait_cqe(cq, w, a.timeout_ns, err);
    }
    if (!ok) {
      err.done = i;
      return false;
    }
    if (i >= a.warmup) samples[i - a.warmup] = static_cast<int64_t>(t1 - t0);
  }
  err.done = total;
  return true;
}

bool respond(Nic& nic, const RespondArgs& a, LoopError& err) {
  ibv_qp* qp = nic.qp(a.qpn);
  ibv_cq* cq = nic.cq(a.cq);
  Where w{a.qpn};
  OneWrite one(a.src, a.dst, a.size, a.inline_payload);
  ibv_send_wr& wr = one.wr;
  const uint64_t seq_addr = a.src.addr + a.size - 8;
  const uint64_t watch_addr = a.watch.addr + a.size - 8;
  err.total = a.count;
  for (uint64_t seq = 1; seq <= a.count; ++seq) {
    err.done = seq - 1;
    if (host::interrupted()) return set_fail(err, "interrupted", w);
    uint64_t seen = 0;
    if (!wait_word(watch_addr, seq, cq, w, a.timeout_ns, seen, err)) return false;
    store_word(seq_addr, seq);
    wr.wr_id = seq;
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(qp, &wr, &bad);
    if (rc) return set_fail(err, "post_failed", w, std::strerror(rc));
    ++w.posted;
    // As ib_write_lat: the reply's completion before the next request is watched.
    if (!wait_cqe(cq, w, a.timeout_ns, err)) return false;
  }
  err.done = a.count;
  return true;
}

namespace {

// A lane's pre-linked work requests: w0 -> w1 -> ... -> w(n-1); a chain of k is posted as the
// suffix starting at w(n-k), one ibv_post_send (one doorbell) without relinking.
struct LaneRun {
  const RateLane* lane;
  ibv_qp* qp;
  ibv_cq* cq;
  std::vector<ibv_send_wr> wrs;
  std::vector<ibv_sge> sges;
  uint64_t slots = 1;
  uint64_t posted = 0;   // WRs posted on this lane
  uint64_t retired = 0;  // WRs known complete (wr_id of the last signaled CQE)
  uint32_t since = 0;    // WRs since the last signaled one
};

// Reap until at most depth - room WRs are outstanding on `l` (room = depth: all retired).
bool reap(LaneRun& l, uint32_t depth, uint32_t room, uint64_t timeout_ns, uint64_t& cqes,
          LoopError& err) {
  ibv_wc wcs[16];
  Waiter wt{timeout_ns};
  const char* why = nullptr;
  while (depth - (l.posted - l.retired) < room) {
    const int got = ibv_poll_cq(l.cq, 16, wcs);
    Where w{l.lane->qpn, l.posted, l.retired};
    if (got < 0) return set_fail(err, "poll_failed", w, "ibv_poll_cq returned an error");
    for (int i = 0; i < got; ++i) {
      if (wcs[i].status != IBV_WC_SUCCESS) return cqe_fail(err, w, wcs[i]);
      l.retired = wcs[i].wr_id;
    }
    cqes += got;
    if (got == 0 && !wt.keep_going(why)) return set_fail(err, why, w);
  }
  return true;
}

}  // namespace

bool msg_rate(Nic& nic, const std::vector<RateLane>& lanes, const RateArgs& a,
              std::vector<int64_t>& windows, RateStats& stats, LoopError& err) {
  const size_t n = lanes.size();
  // Chains no longer than the SQ: every lane's depth is its QP's max_send_wr.
  uint32_t depth = UINT32_MAX;
  std::vector<LaneRun> runs(n);
  for (size_t i = 0; i < n; ++i) {
    LaneRun& r = runs[i];
    r.lane = &lanes[i];
    r.qp = nic.qp(lanes[i].qpn);
    r.cq = nic.cq(lanes[i].cq);
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    if (ibv_query_qp(r.qp, &attr, IBV_QP_CAP, &init) == 0)
      depth = std::min<uint32_t>(depth, init.cap.max_send_wr);
    r.slots = std::max<uint64_t>(1, std::min(lanes[i].src.length, lanes[i].dst.length) / a.size);
  }
  if (depth == UINT32_MAX || depth == 0 || a.batch == 0 || a.batch > depth) {
    err.failed = true;
    err.kind = "bad_arguments";
    err.message = "batch must be 1.." + std::to_string(depth == UINT32_MAX ? 0 : depth) +
                  " (the SQ depth here)";
    err.wr_id = depth == UINT32_MAX ? 0 : depth;
    return false;
  }
  for (auto& r : runs) {
    r.wrs.assign(depth, ibv_send_wr{});
    r.sges.assign(depth, ibv_sge{});
    for (uint32_t j = 0; j < depth; ++j) {
      ibv_send_wr& w = r.wrs[j];
      w.sg_list = &r.sges[j];
      w.num_sge = 1;
      w.opcode = IBV_WR_RDMA_WRITE;
      w.wr.rdma.rkey = r.lane->dst.key;
      r.sges[j].lkey = r.lane->src.key;
      r.sges[j].length = a.size;
      w.next = j + 1 < depth ? &r.wrs[j + 1] : nullptr;
    }
  }
  const uint32_t signal_every = std::max<uint32_t>(1, depth / 4);
  const int sig_flags = flags_for(a.inline_payload, true);
  const int uns_flags = flags_for(a.inline_payload, false);
  const uint64_t total = a.warmup + a.messages;
  const uint64_t nbatches = (total + a.batch - 1) / a.batch;
  err.total = total;
  uint64_t doorbells = 0, cqes = 0, posted = 0;
  uint64_t t_start = a.warmup == 0 ? now_ns() : 0;
  uint64_t t_window = t_start;
  uint64_t next_window = a.warmup + a.window;
  for (uint64_t b = 0; b < nbatches; ++b) {
    if (host::interrupted()) {
      err.done = posted;
      return set_fail(err, "interrupted", Where{0, posted, 0});
    }
    LaneRun& l = runs[b % n];
    const uint32_t count = static_cast<uint32_t>(std::min<uint64_t>(a.batch, total - posted));
    const bool final_of_lane = b + n >= nbatches;
    if (depth - (l.posted - l.retired) < count &&
        !reap(l, depth, count, a.timeout_ns, cqes, err)) {
      err.done = posted;
      return false;
    }
    const uint32_t base = depth - count;
    for (uint32_t j = 0; j < count; ++j) {
      const uint64_t k = l.posted + j;  // this lane's k-th message
      bool sig = ++l.since >= signal_every || (j + 1 == count && final_of_lane);
      if (sig) l.since = 0;
      const uint64_t off = (k % l.slots) * a.size;
      ibv_send_wr& w = l.wrs[base + j];
      l.sges[base + j].addr = l.lane->src.addr + off;
      w.wr.rdma.remote_addr = l.lane->dst.addr + off;
      w.send_flags = sig ? sig_flags : uns_flags;
      w.wr_id = k + 1;  // cumulative WRs of this lane up to this one
    }
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(l.qp, &l.wrs[base], &bad);
    if (rc) {
      err.done = posted;
      return set_fail(err, "post_failed", Where{l.lane->qpn, l.posted, l.retired},
                      std::strerror(rc));
    }
    ++doorbells;
    l.posted += count;
    const uint64_t before = posted;
    posted += count;
    if (before < a.warmup && a.warmup <= posted) t_start = t_window = now_ns();
    while (posted >= next_window && next_window < total) {
      const uint64_t t = now_ns();
      windows.push_back(static_cast<int64_t>(t - t_window));
      t_window = t;
      next_window += a.window;
    }
  }
  for (auto& l : runs) {  // drain: every lane's last WR is signaled
    if (!reap(l, depth, depth, a.timeout_ns, cqes, err)) {
      err.done = posted;
      return false;
    }
  }
  const uint64_t t_end = now_ns();
  windows.push_back(static_cast<int64_t>(t_end - t_window));  // the last carries the drain
  stats.elapsed_ns = t_end - t_start;
  stats.messages = a.messages;
  stats.doorbells = doorbells;
  stats.cqes = cqes;
  err.done = total;
  return true;
}

}  // namespace verbs
}  // namespace gicbench
#endif  // GICBENCH_HAVE_VERBS
