// The CPU engine's side of the NIC model (cuda/nic_model.cuh): per-QP plans of modelled times,
// CQEs held back until their modelled time, the log tests and benchmarks read.
//
// How time is charged. A WQE the engine finds announced and readable is planned at the end of a
// pass (the send side on this NIC, the receive side on the responder's shared region) and its
// modelled times are kept; the pass's clock reading is its doorbell time. A NIC with work on
// several QPs arbitrates between them round-robin, one WQE of each in turn, so a cycle over many
// QPs meets the context cache in the order it was posted, not QP by QP as the engine walks its
// queues; and it takes up work only up to kPlanAheadPs ahead of its clock, so a requester whose
// deliveries miss at a responder meets that responder's cache at about the modelled pace.
// The WQE is executed -- its payload copied into place, its atomic applied, its responder CQE
// written -- only once the clock has reached its modelled landing time: the copy
// is deferred, not the visibility of bytes already copied, so a poller never sees a byte before
// its modelled time and validation sees every byte, as without a model. Its requester CQE (and a
// flush or error CQE after it) is queued and written at its modelled CQE time. The engine never
// makes anything visible earlier than the model says; when it can only do so later (it is slower
// than the modelled NIC), the event is counted late (kCntLate) and the run flags the point.
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "emu_segment.hpp"
#include "nic_model.cuh"

namespace gicbench {
namespace emu {

// Header::reserved slot that holds the offset of the rank's nic_model::Shared region (0: none).
constexpr uint32_t kHdrNicModel = 7;

inline uint64_t model_now_ps() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec)) * 1000ull;
}

// One entry of the model's log: a planned WQE, what the model said and what the engine did.
struct ModelLogEntry {
  uint32_t qpn;
  uint16_t idx;
  uint8_t kind;
  uint8_t flags;  // 1 pointer payload, 2 send-side miss, 4 receive-side miss, 8 DCI connected
  uint32_t bytes;
  uint64_t t_seen, t_exec, t_cqe;  // modelled (ps)
  uint64_t exec_at, cqe_at;        // when the engine executed it and wrote its CQE (0: not yet)
};
constexpr uint32_t kModelLog = 8192;

struct PendingCqe {
  uint64_t t;        // modelled time (ps)
  uint32_t log;      // log entry + 1 (0: none)
  uint16_t idx;
  uint8_t opcode;
  uint8_t synd;      // 0: a requester CQE, else an error CQE with this syndrome
  uint8_t vendor;
  uint8_t flush;
  uint32_t bytes;
};

// A QP's queued CQEs in order: no memory until used (a deque allocates on construction, and
// a rank may have 32,768 QPs).
struct CqeFifo {
  std::vector<PendingCqe> v;
  size_t head = 0;
  bool empty() const { return head == v.size(); }
  const PendingCqe& front() const { return v[head]; }
  const PendingCqe& back() const { return v.back(); }
  void push_back(const PendingCqe& c) { v.push_back(c); }
  void pop_front() {
    if (++head == v.size()) {
      v.clear();
      head = 0;
    }
  }
};

struct ModelQp {
  nic_model::Qp m;
  uint32_t plan_end = 0;         // running WQEBB index up to which WQEs are planned
  std::vector<uint64_t> exec;    // modelled landing time, by the WQE's first WQEBB
  std::vector<uint64_t> cqe;     // modelled CQE time
  std::vector<uint32_t> log;     // log entry + 1
  uint64_t cur_cqe = 0;          // the admitted WQE's
  uint32_t cur_log = 0;
  CqeFifo cqes;
  bool listed = false;           // in ModelState::with_cqes
  uint32_t plan_to = 0;          // announced up to (running WQEBB index)
  uint8_t plan_state = 0;        // ModelState::to_plan: 0 not in it, 1 in it, 2 in it, drained
};

struct ModelState {
  nic_model::Params p{};
  nic_model::Shared* own = nullptr;
  nic_model::Tx tx;
  uint64_t spare_rx_free = 0;
  std::vector<ModelQp> qps;           // by QP slot
  std::vector<uint32_t> with_cqes;    // QP slots with queued CQEs
  // QP slots with WQEs announced beyond their plan, in the order the engine found them, and the
  // next one's turn: planned one WQE of each in turn (Nic::model_plan), across passes.
  std::vector<uint32_t> to_plan;
  size_t plan_cursor = 0;
  // How far past the clock the NIC plans: an unqueued WQE's own latency plus kPlanAheadPs.
  uint64_t plan_ahead_ps = 0;
  std::atomic<uint64_t> queued{0};    // CQEs queued
  std::atomic<uint32_t> held{0};      // the last complete pass held a WQE back
  uint32_t held_pass = 0;             // this pass has (engine only)
  std::vector<ModelLogEntry> log = std::vector<ModelLogEntry>(kModelLog);
  uint64_t log_n = 0;                 // entries written (the ring keeps the last kModelLog)
  // The clock as last read this pass (0: not yet) and admissions since: a clock read costs
  // about as much as the rest of an admission, so admissions use the pass's reading, read
  // again every kClockReuse admissions. A stale reading is earlier than the truth: a WQE is
  // never admitted early, at worst a pass late, and lateness is underestimated by no more than
  // kClockReuse executions, far below the slack.
  uint64_t now = 0;
  uint32_t since_read = 0;
  // This NIC's counts of kCntWqes, kCntCqes and kCntLate, added to the shared ones each pass.
  uint64_t local[nic_model::kNumCounters] = {};
};
constexpr uint32_t kClockReuse = 16;
// The NIC takes up work no further than this ahead of its clock (beyond an unqueued WQE's own
// latency): what it has taken up it has met in the context caches, so a requester that pays
// receive-side misses reaches its responder's cache at about the modelled pace, not in one burst
// of the engine. A few tens of messages at a miss of microseconds; thousands within the cache.
constexpr uint64_t kPlanAheadPs = 50'000'000;

// The region of a (mapped) segment, or null when its rank runs no model.
inline nic_model::Shared* model_shared(const Segment& s) {
  const uint64_t off = ld_acq(&s.hdr()->reserved[kHdrNicModel]);
  if (!off || off + sizeof(nic_model::Shared) > s.bytes()) return nullptr;
  auto* r = reinterpret_cast<nic_model::Shared*>(s.base() + off);
  return ld_acq(&r->magic) == nic_model::kSharedMagic ? r : nullptr;
}

}  // namespace emu
}  // namespace gicbench
