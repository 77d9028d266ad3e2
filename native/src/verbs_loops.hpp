// The host submitter's loops on the verbs provider: loop_shapes.hpp's single-op, responder,
// msg-rate and active-connections cycle over VerbsPoster (ibv_post_send chains of pre-linked work requests, ibv_poll_cq), one
// submitting thread. Failures come back as a LoopError whose queue state counts work requests
// (pi: posted, retired: known complete) and whose error completion is the ibv_wc's.
#pragma once
#ifdef GICBENCH_HAVE_VERBS

#include <infiniband/verbs.h>

#include <cstdint>
#include <vector>

#include "lane.hpp"
#include "loop_error.hpp"

namespace gicbench {
namespace verbs {

using Side = host::Buffer;  // (addr, key, length)

// One QP and its send CQ; qpn names it in reports.
struct Queue {
  ibv_qp* qp = nullptr;
  ibv_cq* cq = nullptr;
  uint32_t qpn = 0;
};

struct LatencyArgs {
  Queue q;
  int mode = 0;  // 0 issue, 1 put+completion, 2 round trip
  Side src, dst, reply;
  uint32_t size = 8;  // >= 8: the sequence rides in the last 8 bytes
  bool inline_payload = false;
  uint64_t iters = 0, warmup = 0;
  uint64_t timeout_ns = 0;
};

struct RespondArgs {
  Queue q;
  Side src, dst, watch;
  uint32_t size = 8;
  bool inline_payload = false;
  uint64_t count = 0;
  uint64_t timeout_ns = 0;
};

struct RateLane {
  Queue q;
  Side src, dst;  // the lane's slices; message k goes to slot k mod (min length / size)
};

struct RateArgs {
  uint32_t batch = 1;
  uint32_t size = 8;
  bool inline_payload = true;
  uint64_t messages = 0, warmup = 0, window = 1;
  uint64_t timeout_ns = 0;
};

struct RateStats {
  uint64_t elapsed_ns = 0, messages = 0, doorbells = 0, cqes = 0;
};

bool single_op(const LatencyArgs& a, int64_t* samples, LoopError& err);
bool respond(const RespondArgs& a, LoopError& err);
// Every lane's depth is the smallest max_send_wr of their QPs; batch must be 1..depth.
bool msg_rate(const std::vector<RateLane>& lanes, const RateArgs& a,
              std::vector<int64_t>& windows, RateStats& stats, LoopError& err);

struct CycleArgs {
  uint32_t writes_per_visit = 32;  // W
  uint32_t batch = 32;             // writes per post_send chain within a visit
  uint32_t size = 8;
  bool inline_payload = true;
  uint64_t visits = 0, warmup_visits = 0, window = 1;
  uint64_t timeout_ns = 0;
};

// Active connections on one submitting thread: lane v mod n takes visit v, W writes in chains
// of min(batch, W) (one ibv_post_send each); chains must fit the smallest SQ depth.
bool cycle(const std::vector<RateLane>& lanes, const CycleArgs& a,
           std::vector<int64_t>& windows, RateStats& stats, LoopError& err);

}  // namespace verbs
}  // namespace gicbench

#endif  // GICBENCH_HAVE_VERBS
