// The poster (poster.hpp) of a verbs QP (no mlx5 queues in memory): a chain of k writes is the
// suffix starting at wr[max_chain - k] of pre-linked work requests, posted with one
// ibv_post_send (so nothing is relinked per chain); completions come from ibv_poll_cq. Room is
// counted in work requests; a tag is the QP's running count of work requests up to and including
// that one (its wr_id), so a completion retires everything up to its wr_id.
#pragma once
#ifdef GICBENCH_HAVE_VERBS

#include <infiniband/verbs.h>

#include <cstring>
#include <memory>
#include <string>

#include "lane.hpp"
#include "loop_error.hpp"
#include "poster.hpp"

namespace gicbench {

class VerbsPoster {
 public:
  struct Completion {
    uint64_t tag = 0;
    ibv_wc wc{};
  };
  // ibv_poll_cq takes the CQ's lock and walks its ring (on rxe a queue shared with the kernel)
  // while a word read is one load: a round trip reads its word this many times per poll, and
  // sees the reply one poll sooner. An error completion (no reply will come) is still seen
  // within that many reads.
  static constexpr uint32_t kWordReadsPerPoll = 32;
  // A rate loop polls only when it needs room (each poll takes the CQ's lock).
  static constexpr bool kReapEveryBatch = false;
  static constexpr int kPollBatch = 16;  // completions one ibv_poll_cq may take

  // `depth`: work requests the QP may have outstanding; `max_chain`: the longest chain posted.
  VerbsPoster(ibv_qp* qp, ibv_cq* cq, uint32_t qpn, uint32_t depth, uint32_t max_chain,
              const host::Buffer& src, const host::Buffer& dst, bool inline_payload)
      : qp_(qp), cq_(cq), qpn_(qpn), depth_(depth), max_chain_(max_chain), src_(src), dst_(dst),
        inline_(inline_payload), wrs_(new ibv_send_wr[max_chain]()),
        sges_(new ibv_sge[max_chain]()), wcs_(new ibv_wc[kPollBatch]()) {
    // Heap arrays stay in place when the poster moves: the WRs point at each other and at their
    // SGEs.
    for (uint32_t j = 0; j < max_chain; ++j) {
      ibv_send_wr& w = wrs_[j];
      w.sg_list = &sges_[j];
      w.num_sge = 1;
      w.opcode = IBV_WR_RDMA_WRITE;
      w.wr.rdma.rkey = dst.key;
      sges_[j].lkey = src.key;
      w.next = j + 1 < max_chain ? &wrs_[j + 1] : nullptr;
    }
  }

  uint32_t qpn() const { return qpn_; }
  uint32_t cost(uint32_t) const { return 1; }
  uint64_t capacity() const { return depth_; }
  bool room(uint64_t cost) const { return depth_ - outstanding() >= cost; }
  uint64_t outstanding() const { return posted_ - retired_; }
  uint64_t region() const { return src_.length < dst_.length ? src_.length : dst_.length; }

  bool post(const Write* w, uint32_t n, LoopError& e) {
    const uint32_t base = max_chain_ - n;
    for (uint32_t k = 0; k < n; ++k) {
      ibv_send_wr& r = wrs_[base + k];
      sges_[base + k].addr = src_.addr + w[k].offset;
      sges_[base + k].length = w[k].length;
      r.wr.rdma.remote_addr = dst_.addr + w[k].offset;
      r.send_flags = (w[k].signaled ? IBV_SEND_SIGNALED : 0) | (inline_ ? IBV_SEND_INLINE : 0);
      r.wr_id = posted_ + k + 1;
    }
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(qp_, &wrs_[base], &bad);
    if (rc) {
      fail(e, "post_failed");
      e.message = "ibv_post_send of a chain of " + std::to_string(n) + " WR(s) on QP " +
                  qpn_hex(qpn_) + ": " + std::strerror(rc);
      return false;
    }
    posted_ += n;
    return true;
  }
  uint64_t last_tag() const { return posted_; }

  int poll(Completion& c, LoopError& e) {
    if (next_ == got_) {
      const int got = ibv_poll_cq(cq_, kPollBatch, wcs_.get());
      if (got <= 0) {
        if (got == 0) return 0;
        fail(e, "poll_failed");
        e.message = "ibv_poll_cq returned " + std::to_string(got) + " on QP " + qpn_hex(qpn_) +
                    "'s CQ";
        return -1;
      }
      got_ = got;
      next_ = 0;
    }
    c.wc = wcs_[next_++];
    ++taken_;
    if (c.wc.status != IBV_WC_SUCCESS) {
      fail(e, "cqe_error");
      describe(c, e);
      e.message = ibv_wc_status_str(c.wc.status);
      return -1;
    }
    c.tag = c.wc.wr_id;
    return 1;
  }
  void retire(const Completion& c) { retired_ = c.tag; }
  void describe(const Completion& c, LoopError& e) const {
    e.wc_status = c.wc.status;
    e.vendor_err = c.wc.vendor_err;
    e.wr_id = c.wc.wr_id;
    e.wc_qpn = c.wc.qp_num;
  }
  void fail(LoopError& e, const char* kind) const {
    e.failed = true;
    e.kind = kind;
    e.qpn = qpn_;
    e.pi = posted_;
    e.retired = retired_;
    e.cq_ci = static_cast<uint32_t>(taken_);
  }
  uint64_t completions() const { return taken_; }
  void observe_posted() {}  // only this poster posts on a verbs QP it drives

 private:
  ibv_qp* qp_;
  ibv_cq* cq_;
  uint32_t qpn_;
  uint32_t depth_, max_chain_;
  host::Buffer src_, dst_;
  bool inline_;
  std::unique_ptr<ibv_send_wr[]> wrs_;
  std::unique_ptr<ibv_sge[]> sges_;
  std::unique_ptr<ibv_wc[]> wcs_;  // taken by the last ibv_poll_cq, handed out one by one
  int got_ = 0, next_ = 0;
  uint64_t posted_ = 0, retired_ = 0;  // work requests
  uint64_t taken_ = 0;                 // completions
};

}  // namespace gicbench

#endif  // GICBENCH_HAVE_VERBS
