// mini-proxy's host producers: CPU threads in the place of the GPU threads (machines without a
// GPU, CI), with the same two handoff protocols (the paper, arXiv 2610.01380, §4.2):
// - baseline: an atomic reservation of the ring index, a read of the worker's progress from
//   ring memory before every publish, then word1, a full fence and a release store of word0;
// - tuned: one producer per ring, progress cached and re-read only when the ring looks full,
//   and the descriptor published with one 16-byte store (validity encoded in it).
#pragma once

#include <cstdint>
#include <vector>

#include "proxy_engine.hpp"

namespace gicbench {
namespace proxy {

struct ProducerCache {
  uint64_t next = 0;         // tuned: the next ring index (one producer per ring)
  uint64_t cached_head = 0;  // tuned: the worker's progress as last read
};

// Where a descriptor's write goes in its lane's regions: slot (first + index mod slots), each
// slot `length` bytes, so the offset follows the ring index the handoff gave.
struct Slots {
  uint32_t first = 0;
  uint64_t count = 1;
};

// Enqueue one descriptor on ring r (lane, slot, length); returns its ring index through
// `index`. Waits for room (timeout, engine failure, signal) and fills err with `who`.
bool enqueue(Engine& e, uint32_t r, Handoff h, ProducerCache& c, uint32_t lane, Slots slots,
             uint32_t length, uint64_t& index, const char* who, EngineError& err);

// Wait until ring r's completion counter reaches `count`.
bool wait_completed(Engine& e, uint32_t r, uint64_t count, const char* who, EngineError& err);

enum class Mode : int { kIssue = 0, kPutCompletion = 1, kRoundTrip = 2 };

struct LatencyArgs {
  Mode mode = Mode::kIssue;
  Handoff handoff = Handoff::kTuned;
  uint32_t ring = 0;   // the probe's ring; its lane carries the writes at offset 0
  uint32_t size = 8;
  bool scope_all = false;  // put+completion waits on every ring's counter
  uint64_t reply = 0;  // round trip: address of the 8-byte word the reply's sequence lands in
  uint32_t iters = 0, warmup = 0;
};

// Per-operation samples (ns): issue = the enqueue; put+completion = enqueue until the ring's
// counter shows it; round trip = enqueue until the peer's reply lands.
bool latency(Engine& e, const LatencyArgs& a, int64_t* out, EngineError& err);

// Answer `count` requests that land in `watch` (the last 8 bytes carry the sequence) with a
// write of `size` bytes from offset 0 of ring `ring`'s lane.
bool respond(Engine& e, uint32_t ring, Handoff h, uint32_t size, uint64_t watch, uint32_t count,
             EngineError& err);

struct RateArgs {
  uint32_t producers = 1;  // host threads; tuned needs producers <= rings
  Handoff handoff = Handoff::kTuned;
  uint32_t size = 8;
  uint64_t messages_per_producer = 0, warmup_per_producer = 0, window = 0;
};

struct RateResult {
  std::vector<int64_t> windows_ns;  // producer after producer
  std::vector<int64_t> enqueue_ns;  // the summed enqueue time of each producer (timed region)
  int64_t elapsed_ns = 0;           // first timed enqueue to the last completion
  uint64_t messages = 0;
  std::vector<uint64_t> ring_messages;  // descriptors each ring carried (warm-up included)
};

// Producer p uses rings p, p+P, ... (when P <= R; else ring p mod R, shared: baseline only);
// its k-th message on a ring goes to slot (ring index mod slots) of the ring's lane region.
bool rate(Engine& e, const RateArgs& a, RateResult& res, EngineError& err);

struct CycleArgs {
  Handoff handoff = Handoff::kTuned;
  uint32_t size = 8;
  uint32_t writes_per_visit = 1;  // W
  uint64_t visits = 0, warmup_visits = 0, window = 0;
  // unit u's lanes in visit order; unit u is a host thread filling ring u, and its lanes are
  // owned by that ring's worker (Engine::assign_lanes)
  std::vector<std::vector<uint32_t>> unit_lanes;
};

// Active connections: unit u's v-th visit posts W descriptors on lane unit_lanes[u][v mod n]
// (the worker chains them, B per doorbell); that lane's k-th write goes to slot k mod slots of
// its regions. `warmup_visits` untimed visits, then `visits` timed ones, the drain inside.
bool cycle(Engine& e, const CycleArgs& a, RateResult& res, EngineError& err);

struct LoadedArgs {
  bool requester = true;     // false: the responder side of the probe's round trip
  Handoff handoff = Handoff::kBaseline;
  bool reserved = false;     // the probe's ring 0 carries no background (else shared with it)
  uint32_t producers = 1;    // background producer threads
  double pace_mps = 0;       // background target rate (M msg/s over all producers), 0: unpaced
  uint32_t size = 8;         // probe and background payload
  uint64_t reply = 0;        // requester: where the reply's sequence lands; responder: watch
  uint32_t iters = 0, warmup = 0;
};

struct LoadedResult {
  std::vector<int64_t> rtt_ns;  // requester only
  uint64_t background = 0;      // background descriptors completed while the probe ran
  int64_t probe_ns = 0;         // how long the probe ran
  std::vector<uint64_t> ring_messages;
};

// Background producers load rings (1..R-1 when reserved, all when shared; slots 1.. of their
// lanes) while the calling thread runs the probe's round trip (or answers it) on ring 0.
bool loaded(Engine& e, const LoadedArgs& a, LoadedResult& res, EngineError& err);

}  // namespace proxy
}  // namespace gicbench
