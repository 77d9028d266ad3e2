// A lane as the native loops see it: one queue pair, its send CQ, for DC the address vector of
// the target, and the lane's own source and destination regions. The host submitter and
// mini-proxy hand lanes in as the lane table (lane_table.hpp); on the verbs provider a lane
// carries its regions, QP number, SQ depth in work requests (sq.wqebb_cnt) and CQ entries only.
#pragma once

#include <cstdint>

#include "queues.hpp"

namespace gicbench {
namespace host {

struct Buffer {
  uint64_t addr = 0;
  uint32_t key = 0;  // lkey for local buffers, rkey for remote ones
  uint64_t length = 0;
};

struct Lane {
  SqDesc sq;
  CqDesc cq;
  bool dc = false;
  bool compact_av = false;
  mlx5::AvFields av{};
  Buffer src;
  Buffer dst;
};

}  // namespace host
}  // namespace gicbench
