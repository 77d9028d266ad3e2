// mini-proxy's workers on the verbs provider (no mlx5 queues in memory): a chain of up to B
// descriptors becomes one ibv_post_send of pre-linked work requests through VerbsPoster (the
// host submitter's verbs loops post through it too), the last one signaled; ibv_poll_cq retires
// chains in order and credits the rings' counters as the mlx5 lanes do (proxy_worker.hpp is the
// one loop for both). A lane's SQ depth in work requests is its sq.wqebb_cnt.
#include <algorithm>
#include <string>

#include "proxy_engine.hpp"
#include "proxy_worker.hpp"
#include "verbs_poster.hpp"

namespace gicbench {
namespace proxy {

#ifdef GICBENCH_HAVE_VERBS

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
  std::vector<WorkerLane<VerbsPoster>> mine;
  std::vector<int> lane_slot(lanes_.size(), -1);
  for (uint32_t i = 0; i < lanes_.size(); ++i) {
    if (owner(i) != w) continue;
    lane_slot[i] = static_cast<int>(mine.size());
    const host::Lane& l = lanes_[i];
    const VerbsQueues& q = verbs_[i];
    mine.emplace_back(l,
                      VerbsPoster(q.qp, q.cq, l.sq.qpn, l.sq.wqebb_cnt, cfg_.batch, l.src, l.dst,
                                  cfg_.inline_payload),
                      cfg_.batch);
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
