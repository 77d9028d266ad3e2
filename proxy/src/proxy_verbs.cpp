// mini-proxy's workers on the verbs provider (no mlx5 queues in memory): a chain of up to B
// descriptors becomes one ibv_post_send of pre-linked work requests (as verbs_loops.cpp's rate
// loop: a chain of k is the suffix starting at wr[B-k], so nothing is relinked per chain), the
// last one signaled; ibv_poll_cq retires chains in order and credits the rings' counters as the
// mlx5 lanes do (proxy_worker.hpp is the one loop for both).
#include <cstring>
#include <memory>
#include <string>

#include "proxy_engine.hpp"
#include "proxy_worker.hpp"

#ifdef GICBENCH_HAVE_VERBS
#include <infiniband/verbs.h>
#endif

namespace gicbench {
namespace proxy {

#ifdef GICBENCH_HAVE_VERBS
namespace {

// One verbs lane: SQ depth in work requests (the lane's sq.wqebb_cnt), chains no more than the
// CQ has entries (every chain is signaled on its last WR: one completion each). A chain's tag
// is the lane's running count of WRs up to and including its last (its wr_id).
struct VerbsPoster {
  host::Lane* lane;
  ibv_qp* qp;
  ibv_cq* cq;
  uint32_t depth;       // send WRs the QP was created for
  uint32_t max_chains;  // completions the CQ holds
  uint32_t batch;
  // Heap arrays that a move of the poster leaves in place (the WRs point at each other and at
  // their SGEs).
  std::unique_ptr<ibv_send_wr[]> wrs;
  std::unique_ptr<ibv_sge[]> sges;
  std::deque<Chain> chains;
  int64_t last_progress = 0;
  uint64_t posted = 0, retired = 0;  // WRs
  uint32_t polled = 0;               // completions taken (the report's "CQ consumer index")

  VerbsPoster(host::Lane* l, const VerbsQueues& q, uint32_t batch)
      : lane(l), qp(q.qp), cq(q.cq), depth(l->sq.wqebb_cnt), max_chains(l->cq.ncqe),
        batch(batch), wrs(new ibv_send_wr[batch]()), sges(new ibv_sge[batch]()) {
    for (uint32_t j = 0; j < batch; ++j) {
      ibv_send_wr& w = wrs[j];
      w = ibv_send_wr{};
      w.sg_list = &sges[j];
      w.num_sge = 1;
      w.opcode = IBV_WR_RDMA_WRITE;
      w.wr.rdma.rkey = l->dst.key;
      sges[j].lkey = l->src.key;
      w.next = j + 1 < batch ? &wrs[j + 1] : nullptr;
    }
  }

  bool room(const Piece*, uint32_t n, bool) const {
    return depth - (posted - retired) >= n && chains.size() < max_chains;
  }
  bool post(const Piece* d, uint32_t n, bool inl, uint32_t ring, EngineError& e) {
    const uint32_t base = batch - n;
    for (uint32_t k = 0; k < n; ++k) {
      ibv_send_wr& w = wrs[base + k];
      sges[base + k].addr = lane->src.addr + d[k].offset;
      sges[base + k].length = d[k].length;
      w.wr.rdma.remote_addr = lane->dst.addr + d[k].offset;
      const bool last = k + 1 == n;
      w.send_flags = (last ? IBV_SEND_SIGNALED : 0) | (inl ? IBV_SEND_INLINE : 0);
      w.wr_id = posted + k + 1;
    }
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(qp, &wrs[base], &bad);
    if (rc) {
      e.kind = "post_failed";
      e.message = "ibv_post_send of a chain of " + std::to_string(n) + " WR(s) on QP " +
                  qpn_hex(lane->sq.qpn) + ": " + std::strerror(rc);
      return false;
    }
    posted += n;
    chains.push_back(Chain{posted, ring, n});
    return true;
  }
  int poll(Chain& done, EngineError& e) {
    ibv_wc wc;
    const int got = ibv_poll_cq(cq, 1, &wc);
    if (got == 0) return 0;
    if (got < 0) {
      e.kind = "poll_failed";
      e.message = "ibv_poll_cq returned " + std::to_string(got) + " on QP " +
                  qpn_hex(lane->sq.qpn) + "'s CQ";
      return -1;
    }
    ++polled;
    if (wc.status != IBV_WC_SUCCESS || chains.empty() || chains.front().tag != wc.wr_id) {
      e.kind = wc.status != IBV_WC_SUCCESS ? "cqe_error" : "queue_state";
      e.wc_status = wc.status;
      e.vendor_err = wc.vendor_err;
      e.wr_id = wc.wr_id;
      if (e.kind == "queue_state")
        e.message = "a completion for WR " + std::to_string(wc.wr_id) +
                    " that ends no chain this worker posted";
      else
        e.message = std::string(ibv_wc_status_str(wc.status));
      return -1;
    }
    done = chains.front();
    chains.pop_front();
    retired = wc.wr_id;
    return 1;
  }
  void state(EngineError& e) const {
    e.qpn = lane->sq.qpn;
    e.pi = static_cast<uint32_t>(posted);
    e.retired = static_cast<uint32_t>(retired);
    e.cq_ci = polled;
  }
};

}  // namespace

bool Engine::init_verbs(EngineError& err) {
  auto refuse = [&](const std::string& field, const std::string& allowed, const std::string& m) {
    return err.refuse(field, allowed, m);
  };
  const auto& c = cfg_;
  for (size_t i = 0; i < lanes_.size(); ++i) {
    const auto& l = lanes_[i];
    const auto& q = verbs_[i];
    const std::string where = "lane " + std::to_string(i) + " (QP " + qpn_hex(l.sq.qpn) + ")";
    if (q.qp == nullptr || q.cq == nullptr)
      return refuse("lanes", "a verbs QP and CQ per lane", where + " has none");
    if (l.sq.wqebb_cnt == 0 || l.cq.ncqe == 0)
      return refuse("lanes", "a send queue and a CQ with room", where + ": depth 0");
    if (c.batch > l.sq.wqebb_cnt)
      return refuse("batch", "1.." + std::to_string(l.sq.wqebb_cnt) + " (the SQ depth here)",
                    "batch=" + std::to_string(c.batch) + " exceeds the SQ of " + where);
    if (c.inline_payload && c.max_size > q.max_inline)
      return refuse("payload", "pointer, or inline payloads <= " + std::to_string(q.max_inline) +
                                   " B on this device",
                    "an inline write of " + std::to_string(c.max_size) + " bytes on " + where);
    if (c.max_size > l.src.length || c.max_size > l.dst.length)
      return refuse("size", "1.." + std::to_string(std::min(l.src.length, l.dst.length)),
                    "size=" + std::to_string(c.max_size) + " beyond " + where + "'s regions");
  }
  return true;
}

void Engine::verbs_worker(uint32_t w) {
  std::vector<VerbsPoster> mine;
  std::vector<int> lane_slot(lanes_.size(), -1);
  for (uint32_t i = w; i < lanes_.size(); i += cfg_.workers) {
    lane_slot[i] = static_cast<int>(mine.size());
    mine.emplace_back(&lanes_[i], verbs_[i], cfg_.batch);
  }
  drive(w, mine, lane_slot);
}

#else  // built without libibverbs: no verbs Engine can be constructed (the binding is absent)

bool Engine::init_verbs(EngineError& err) {
  err.failed = true;
  err.kind = "bad_arguments";
  err.who = "engine";
  err.field = "provider";
  err.allowed = "a build with libibverbs";
  err.message = "this module was built without libibverbs";
  return false;
}

void Engine::verbs_worker(uint32_t) {}

#endif

}  // namespace proxy
}  // namespace gicbench
