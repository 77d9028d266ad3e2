// The poster (poster.hpp) of a lane with mlx5 queues in memory: writes become WQEs in the SQ ring
// (SqProducer), a chain ends with one doorbell, completions are CQEs read from the CQ ring
// (CqConsumer). Room is counted in 64-byte WQEBBs; a tag is the full SQ index of a WQE.
#pragma once

#include <cstdint>

#include "lane.hpp"
#include "loop_error.hpp"
#include "poster.hpp"
#include "queues.hpp"

namespace gicbench {

class Mlx5Poster {
 public:
  struct Completion {
    uint64_t tag = 0;
    mlx5::CqeView cqe{};
  };
  // A poll is one load of the next CQE's owner byte: as cheap as reading the awaited word.
  static constexpr uint32_t kWordReadsPerPoll = 1;
  static constexpr bool kReapEveryBatch = true;

  // Attach to `lane`'s queues: the SQ resumes at the producer index of its doorbell record with
  // work up to `retired` (low 16 bits; attach_retired in queues.hpp) retired, the CQ at the
  // consumer index of its doorbell record. Writes read `src` and land in `dst`.
  Mlx5Poster(const host::Lane& lane, uint16_t retired, const host::Buffer& src,
             const host::Buffer& dst, bool inline_payload)
      : lane_(&lane), src_(src), dst_(dst), inline_(inline_payload), sq_(lane.sq, retired),
        cq_(lane.cq) {}

  uint32_t qpn() const { return lane_->sq.qpn; }
  uint32_t cost(uint32_t length) const {
    return SqProducer::write_wqebbs(inline_, length, lane_->dc, lane_->compact_av);
  }
  uint64_t capacity() const { return lane_->sq.wqebb_cnt; }
  bool room(uint64_t cost) const { return sq_.free_wqebbs() >= cost; }
  uint64_t outstanding() const { return sq_.outstanding(); }
  uint64_t region() const { return src_.length < dst_.length ? src_.length : dst_.length; }

  bool post(const Write* w, uint32_t n, LoopError&) {
    for (uint32_t k = 0; k < n; ++k) last_ = sq_.post_write(op(w[k]));
    sq_.ring();
    return true;
  }
  uint64_t last_tag() const { return last_; }

  int poll(Completion& c, LoopError& e) {
    if (!cq_.poll(c.cqe)) return 0;
    ++taken_;
    if (cqe_is_error(c.cqe)) {
      fail(e, "cqe_error");
      describe(c, e);
      return -1;
    }
    // The full index of the WQE the CQE names: it lies in [retired, pi).
    const uint32_t pi = sq_.pi();
    c.tag = pi - static_cast<uint16_t>(static_cast<uint16_t>(pi) - c.cqe.wqe_counter);
    return 1;
  }
  void retire(const Completion& c) { sq_.retire(c.cqe.wqe_counter); }
  void describe(const Completion& c, LoopError& e) const {
    e.syndrome = c.cqe.syndrome;
    e.vendor_syndrome = c.cqe.vendor_syndrome;
    e.wqe_counter = c.cqe.wqe_counter;
  }
  void fail(LoopError& e, const char* kind) const {
    e.failed = true;
    e.kind = kind;
    e.qpn = lane_->sq.qpn;
    e.pi = sq_.pi();
    e.retired = sq_.retired();
    e.cq_ci = cq_.ci();
  }
  uint64_t completions() const { return taken_; }
  void observe_posted() { sq_.observe_posted(); }
  // Point the next writes at another lane of the same QP (a DCI changing destination): its
  // address vector and regions; the queues and what is outstanding on them stay.
  void aim(const host::Lane& lane) {
    lane_ = &lane;
    src_ = lane.src;
    dst_ = lane.dst;
  }

 private:
  WriteOp op(const Write& w) const {
    WriteOp o;
    o.raddr = dst_.addr + w.offset;
    o.rkey = dst_.key;
    o.length = w.length;
    if (inline_) {
      o.inline_data = reinterpret_cast<const void*>(src_.addr + w.offset);
    } else {
      o.laddr = src_.addr + w.offset;
      o.lkey = src_.key;
    }
    o.signaled = w.signaled;
    if (lane_->dc) {
      o.av = &lane_->av;
      o.compact_av = lane_->compact_av;
    }
    return o;
  }

  const host::Lane* lane_;
  host::Buffer src_, dst_;
  bool inline_;
  SqProducer sq_;
  CqConsumer cq_;
  uint32_t last_ = 0;
  uint64_t taken_ = 0;
};

}  // namespace gicbench
