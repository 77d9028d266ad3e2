// The host submitter's timing loops: CPU threads post mlx5 WQEs and poll CQEs directly (the
// host-verbs control of seed 000). Python only configures and collects; every timed region is here.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "queues.hpp"

namespace gicbench {
namespace host {

struct Buffer {
  uint64_t addr = 0;
  uint32_t key = 0;  // lkey for local buffers, rkey for remote ones
  uint64_t length = 0;
};

// One queue pair as the submitter sees it: its SQ, its send CQ, for DC the address vector of
// the target this QP sends to, and the lane's own source and destination regions (msg-rate).
struct Lane {
  SqDesc sq;
  CqDesc cq;
  bool dc = false;
  bool compact_av = false;
  mlx5::AvFields av{};
  Buffer src;
  Buffer dst;
};

// Set by a SIGTERM/SIGINT handler (install_interrupt_handler): loops give up promptly so the
// rank can mark its trace incomplete instead of spinning until its completion timeout. Every loop
// reads it once per iteration (operation, request or batch) and every 256 polls while waiting.
extern std::atomic<int> g_interrupt;
void install_interrupt_handler();
inline bool interrupted() { return g_interrupt.load(std::memory_order_relaxed) != 0; }

// A failure inside a loop, reported to Python with everything needed to diagnose it.
struct LoopError {
  bool failed = false;
  // "timeout" | "cqe_error" | "interrupted" | "bad_arguments" (field, allowed, message) |
  // "queue_state" (a QP whose memory cannot say what is outstanding; message)
  std::string kind;
  std::string field;    // bad_arguments: the argument refused
  std::string allowed;  // bad_arguments: what would be accepted
  std::string message;  // a human sentence for bad_arguments and queue_state
  uint64_t done = 0;    // operations (single-op, responder) or messages (msg-rate) completed or
                        // posted before the failure, warm-up included
  uint64_t total = 0;   // ... out of this many requested
  uint32_t qpn = 0;
  uint32_t pi = 0;        // SQ producer index (WQEBBs)
  uint32_t retired = 0;   // SQ index retired by CQEs
  uint32_t cq_ci = 0;     // CQ consumer index
  uint32_t syndrome = 0;  // error CQEs
  uint32_t vendor_syndrome = 0;
  uint32_t wqe_counter = 0;
  uint64_t word_seen = 0;  // round trip: value last seen in the polled word
  uint64_t word_expected = 0;
};

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
  int64_t elapsed_ns = 0;           // first post to last completion, slowest thread
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

}  // namespace host
}  // namespace gicbench
