// A poster is one lane as a loop posts to it: its QP, its send CQ and the regions its writes read
// (src) and land in (dst, at the same offset). The loops are written once over a poster type P
// (loop_shapes.hpp: the host submitter's single-op, responder and msg-rate; proxy_worker.hpp:
// mini-proxy's worker); two posters implement it:
//   Mlx5Poster (mlx5_poster.hpp)  mlx5 queues in memory: WQEs built in the SQ ring, one doorbell
//                                 per chain, CQEs read from the CQ ring;
//   VerbsPoster (verbs_poster.hpp) ibv_post_send of pre-linked work requests, ibv_poll_cq.
// What a poster P has:
//   P::Completion                        one completion; .tag names the work it ends
//   P::kWordReadsPerPoll                 word reads per CQ poll while a round trip waits for a
//                                        word (how much dearer than a load a poll is)
//   P::kReapEveryBatch                   a rate loop polls once after each batch it posts
//   uint32_t qpn() const
//   uint32_t cost(uint32_t length) const the room one write of `length` bytes takes
//   uint64_t capacity() const            the room of an empty send queue
//   bool room(uint64_t cost) const       writes of this total cost can be posted now
//   uint64_t outstanding() const         room taken by work not yet retired (0: quiet)
//   uint64_t region() const              bytes of src and dst a write may use
//   bool post(const Write*, n, LoopError&)  n writes as one chain, one doorbell (room checked)
//   uint64_t last_tag() const            the tag of the last write posted
//   int poll(Completion&, LoopError&)    1: a completion (retire it), 0: none yet, -1: failure
//   void retire(const Completion&)       the work up to the completion's is done
//   void describe(const Completion&, LoopError&) const  the completion's fields, for a report
//   void fail(LoopError&, const char* kind) const       failed, kind and the queue state
//   uint64_t completions() const         completions taken since it was made
//   void observe_posted()                adopt work another producer rang on the QP (mlx5)
// Waiting is the loop's: between empty polls it calls its own idle step (progress an inline NIC,
// pause), reads the clock and the interrupt flag.
#pragma once

#include <algorithm>
#include <cstdint>

namespace gicbench {

// One RDMA write of a chain: `length` bytes from src + offset to dst + offset.
struct Write {
  uint64_t offset = 0;
  uint32_t length = 0;
  bool signaled = false;
};

// How often a rate loop signals on a lane. A lane waits before each batch until its send queue
// has room for the whole batch; room only comes back through signaled work, and up to
// signal_every - 1 writes after the last signaled one stay outstanding until a later signal. So
//   (signal_every - 1 + batch) x cost <= capacity
// makes every wait finite: a quarter of the queue when that allows, fewer when the batch is
// large, 1 (every write signaled) when batch x cost == capacity. Needs batch x cost <= capacity.
inline uint32_t signal_every(uint64_t capacity, uint32_t cost, uint32_t batch) {
  const uint64_t max_writes = capacity / cost;  // writes the queue holds at once
  return static_cast<uint32_t>(
      std::max<uint64_t>(1, std::min<uint64_t>(capacity / (4ull * cost), max_writes - batch + 1)));
}

}  // namespace gicbench
