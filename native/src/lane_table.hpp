// The lane table the host and proxy submitters hand to native code: one uint64 row per lane
// with the QP's queues, its DC address vector, and the lane's own source and destination
// regions (msg-rate cycles over the slots of each lane's region). Columns: kLaneColumns, the
// Python side's LANE_COLUMNS (checked against each other in Python).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <stdexcept>
#include <vector>

#include "lane.hpp"

namespace gicbench {

constexpr size_t kLaneWidth = 17;
using LaneTable =
    nanobind::ndarray<const uint64_t, nanobind::shape<-1, kLaneWidth>, nanobind::c_contig,
                      nanobind::device::cpu>;
inline constexpr const char* kLaneColumns[kLaneWidth] = {
    "sq_buf", "wqebb_cnt", "sq_dbrec", "doorbell", "qpn",     "cq_buf",  "ncqe",    "cq_dbrec",
    "dc",     "dc_key",    "dct_num",  "rlid_compact",        "src_addr", "src_key", "dst_addr",
    "dst_key", "region_len"};

template <class T>
T* lane_ptr(uint64_t v) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(v));
}

inline std::vector<host::Lane> lanes_from(const LaneTable& t) {
  std::vector<host::Lane> lanes(t.shape(0));
  for (size_t i = 0; i < lanes.size(); ++i) {
    auto& l = lanes[i];
    l.sq = SqDesc{lane_ptr<uint8_t>(t(i, 0)), static_cast<uint32_t>(t(i, 1)),
                  lane_ptr<uint32_t>(t(i, 2)), lane_ptr<uint64_t>(t(i, 3)),
                  static_cast<uint32_t>(t(i, 4))};
    l.cq = CqDesc{lane_ptr<uint8_t>(t(i, 5)), static_cast<uint32_t>(t(i, 6)),
                  lane_ptr<uint32_t>(t(i, 7))};
    if (l.sq.wqebb_cnt == 0 || (l.sq.wqebb_cnt & (l.sq.wqebb_cnt - 1)) || l.cq.ncqe == 0 ||
        (l.cq.ncqe & (l.cq.ncqe - 1)))
      throw std::invalid_argument("lane table: wqebb_cnt and ncqe must be powers of two");
    l.dc = t(i, 8) != 0;
    l.av.dc_key = t(i, 9);
    l.av.dqp_dct = static_cast<uint32_t>(t(i, 10));
    l.av.rlid = static_cast<uint16_t>(t(i, 11) & 0xffff);
    l.compact_av = (t(i, 11) >> 32) != 0;
    l.src = host::Buffer{t(i, 12), static_cast<uint32_t>(t(i, 13)), t(i, 16)};
    l.dst = host::Buffer{t(i, 14), static_cast<uint32_t>(t(i, 15)), t(i, 16)};
  }
  return lanes;
}

}  // namespace gicbench
