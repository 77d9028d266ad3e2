// The host submitter's loops on mlx5 queues in memory: CPU threads post mlx5 WQEs and poll CQEs
// directly (the host-verbs control the first paper compares against), the loop shapes of
// loop_shapes.hpp over Mlx5Poster. Python only configures and collects. Failures come back as a
// LoopError with the queue state (pi, retired, cq_ci in WQEBBs; syndromes of an error CQE).
#pragma once

#include <cstdint>
#include <vector>

#include "lane.hpp"
#include "loop_error.hpp"
#include "wait.hpp"

namespace gicbench {
namespace host {

enum class SingleOpMode : int { kIssue = 0, kPutCompletion = 1, kRoundTrip = 2 };

// WQEBBs of one RDMA write as the loops build it (0: more than 63 segments, not buildable).
uint32_t write_wqebbs(bool inline_payload, uint32_t size, bool dc, bool compact_av);

struct SingleOpArgs {
  SingleOpMode mode = SingleOpMode::kIssue;
  uint32_t size = 8;
  bool inline_payload = true;
  // put-completion waits on every configured lane as NVSHMEM's quiet does: each QP's posted index
  // is read from its doorbell record and its CQ is polled from the consumer index in memory until
  // that work is retired (work posted outside this loop included); else the selected lane only.
  bool scope_all = false;
  uint32_t selected = 0;   // lane that carries the operation
  Buffer src;              // local payload source (pattern + sequence in the last 8 bytes)
  Buffer dst;              // remote target
  Buffer reply;            // round trip: local word the peer's reply lands in (last 8 bytes)
  uint32_t iters = 0;
  uint32_t warmup = 0;
  int64_t timeout_ns = 0;
};

// Requester side of single-op; fills `out` with `iters` samples (ns). Returns false on failure.
bool single_op(std::vector<Lane>& lanes, const SingleOpArgs& a, Progress progress, int64_t* out,
               LoopError& err);

// Responder side of the round trip: waits for each request's sequence number in `watch` (last 8
// bytes of the local landing buffer) and writes the same bytes back through `lane`.
bool rtt_respond(Lane& lane, uint32_t size, bool inline_payload, Buffer watch, Buffer src,
                 Buffer dst, uint32_t count, int64_t timeout_ns, Progress progress, LoopError& err);

struct MsgRateArgs {
  uint32_t threads = 1;
  uint32_t batch = 1;  // WQEs per doorbell
  uint32_t size = 8;
  bool inline_payload = true;
  uint64_t messages_per_thread = 0;
  uint64_t warmup_per_thread = 0;
  uint64_t window = 0;  // messages per recorded window
  int64_t timeout_ns = 0;
};

struct MsgRateResult {
  std::vector<int64_t> windows_ns;  // every thread's windows, thread after thread
  int64_t elapsed_ns = 0;           // first timed post of any thread to the last completion of any
  uint64_t messages = 0;
  uint64_t doorbells = 0;
  uint64_t cqes = 0;
};

// Many writes outstanding: thread t owns lanes t, t+T, ...; each lane writes slot k mod slots of
// its own destination region (k: the lane's message count) from the same offset of its source
// region; batches of `batch` WQEs per doorbell, periodic reclamation through signaled WQEs,
// final drain included in the time. Refused (bad_arguments) unless every lane's SQ holds a
// whole batch: batch x write_wqebbs <= wqebb_cnt.
bool msg_rate(std::vector<Lane>& lanes, const MsgRateArgs& a, Progress progress,
              MsgRateResult& res, LoopError& err);

struct CycleArgs {
  uint32_t threads = 1;             // submitting units
  uint32_t writes_per_visit = 32;   // W
  uint32_t batch = 32;              // writes per doorbell within a visit (chains of min(batch, W))
  uint32_t size = 8;
  bool inline_payload = true;
  uint64_t visits_per_thread = 0;   // timed visits of each unit
  uint64_t warmup_visits = 0;       // each unit's, before the timed region
  uint64_t window = 0;              // messages per recorded window
  int64_t timeout_ns = 0;
};

// Active connections: lanes that share an SQ are one QP (a DCI) with several destinations, the
// others one connection each. QPs are numbered by their first lane in the table; unit t owns
// QPs t, t+T, ... and cycles the lanes of its QPs in table order, W writes per visit (in chains
// of min(batch, W), one doorbell each), the k-th write of a lane to slot k mod slots of its
// regions; signaled as msg-rate's lanes (signal_every of the chain) plus each QP's last write;
// the final drain is timed. Refused (bad_arguments) unless every QP's SQ holds a chain and its
// CQ the completions that can be outstanding.
bool cycle(std::vector<Lane>& lanes, const CycleArgs& a, Progress progress, MsgRateResult& res,
           LoopError& err);

}  // namespace host
}  // namespace gicbench
