// The verbs provider's objects over libibverbs (see verbs_nic.hpp). Every failing call throws
// std::runtime_error naming the call and errno's text; Python turns it into FabricError.
#ifdef GICBENCH_HAVE_VERBS
#include "verbs_nic.hpp"

#include <arpa/inet.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace gicbench {
namespace verbs {
namespace {

[[noreturn]] void fail(const std::string& what, int err) {
  throw std::runtime_error(what + ": " + std::strerror(err) + " (errno " + std::to_string(err) +
                           ")");
}

}  // namespace

Nic::Nic(const std::string& device) : device_(device) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) fail("ibv_get_device_list", errno);
  for (int i = 0; i < n && ctx_ == nullptr; ++i) {
    if (device == ibv_get_device_name(list[i])) {
      ctx_ = ibv_open_device(list[i]);
      if (ctx_ == nullptr) {
        const int e = errno;
        ibv_free_device_list(list);
        fail("ibv_open_device(" + device + ")", e);
      }
    }
  }
  ibv_free_device_list(list);
  if (ctx_ == nullptr) throw std::runtime_error("no RDMA device named " + device);
  pd_ = ibv_alloc_pd(ctx_);
  if (pd_ == nullptr) {
    const int e = errno;
    ibv_close_device(ctx_);
    ctx_ = nullptr;
    fail("ibv_alloc_pd", e);
  }
}

Nic::~Nic() { close(); }

void Nic::close() {
  for (auto& [qpn, qp] : qps_) ibv_destroy_qp(qp);
  qps_.clear();
  for (auto& [id, cq] : cqs_) ibv_destroy_cq(cq);
  cqs_.clear();
  for (auto& [mr, mem] : mrs_) {
    ibv_dereg_mr(mr);
    std::free(mem);
  }
  mrs_.clear();
  if (pd_ != nullptr) ibv_dealloc_pd(pd_);
  pd_ = nullptr;
  if (ctx_ != nullptr) ibv_close_device(ctx_);
  ctx_ = nullptr;
}

std::tuple<uint64_t, uint32_t, uint32_t> Nic::reg_mr(uint64_t length, int access) {
  if (closed()) throw std::runtime_error("reg_mr: the NIC is closed");
  const long page = sysconf(_SC_PAGESIZE);
  void* mem = nullptr;
  const uint64_t rounded = (length + page - 1) / page * page;
  if (posix_memalign(&mem, page, rounded) != 0) fail("posix_memalign", ENOMEM);
  std::memset(mem, 0, rounded);
  ibv_mr* mr = ibv_reg_mr(pd_, mem, length, access);
  if (mr == nullptr) {
    const int e = errno;
    std::free(mem);
    fail("ibv_reg_mr(" + std::to_string(length) + " B)", e);
  }
  mrs_.emplace_back(mr, mem);
  return {reinterpret_cast<uint64_t>(mem), mr->lkey, mr->rkey};
}

std::pair<uint32_t, int> Nic::create_cq(int ncqe) {
  if (closed()) throw std::runtime_error("create_cq: the NIC is closed");
  ibv_cq* cq = ibv_create_cq(ctx_, ncqe, nullptr, nullptr, 0);
  if (cq == nullptr) fail("ibv_create_cq(" + std::to_string(ncqe) + ")", errno);
  const uint32_t id = next_cq_++;
  cqs_[id] = cq;
  return {id, cq->cqe};
}

ibv_cq* Nic::cq(uint32_t id) const {
  auto it = cqs_.find(id);
  if (it == cqs_.end()) throw std::invalid_argument("no CQ " + std::to_string(id) + " here");
  return it->second;
}

ibv_qp* Nic::qp(uint32_t qpn) const {
  auto it = qps_.find(qpn);
  if (it == qps_.end()) throw std::invalid_argument("no QP " + std::to_string(qpn) + " here");
  return it->second;
}

std::tuple<uint32_t, uint32_t, uint32_t> Nic::create_qp(uint32_t send_cq, uint32_t recv_cq,
                                                        uint32_t max_send_wr,
                                                        uint32_t max_recv_wr,
                                                        uint32_t max_inline) {
  if (closed()) throw std::runtime_error("create_qp: the NIC is closed");
  ibv_qp_init_attr attr{};
  attr.send_cq = cq(send_cq);
  attr.recv_cq = cq(recv_cq);
  attr.qp_type = IBV_QPT_RC;
  attr.sq_sig_all = 0;
  attr.cap.max_send_wr = max_send_wr;
  attr.cap.max_recv_wr = max_recv_wr;
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  ibv_qp* qp = nullptr;
  int err = 0;
  // A device without inline support refuses the first attempt.
  for (uint32_t inl : {max_inline, 0u}) {
    attr.cap.max_inline_data = inl;
    qp = ibv_create_qp(pd_, &attr);
    if (qp != nullptr) break;
    err = errno;
    if (inl == 0) break;
  }
  if (qp == nullptr) fail("ibv_create_qp", err);
  qps_[qp->qp_num] = qp;
  return {qp->qp_num, attr.cap.max_inline_data, attr.cap.max_send_wr};
}

void Nic::to_init(uint32_t qpn, uint8_t port, int access) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = port;
  a.qp_access_flags = access;
  const int rc = ibv_modify_qp(qp(qpn), &a,
                               IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (rc) fail("ibv_modify_qp(INIT)", rc);
}

void Nic::to_rtr(uint32_t qpn, const RtrArgs& r) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = static_cast<ibv_mtu>(r.path_mtu);
  a.dest_qp_num = r.dest_qpn;
  a.rq_psn = r.rq_psn;
  a.max_dest_rd_atomic = r.max_dest_rd_atomic;
  a.min_rnr_timer = r.min_rnr_timer;
  a.ah_attr.dlid = r.dlid;
  a.ah_attr.port_num = r.port;
  if (r.global) {
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, r.dgid, 16);
    a.ah_attr.grh.sgid_index = r.sgid_index;
    a.ah_attr.grh.hop_limit = 64;
  }
  const int rc = ibv_modify_qp(qp(qpn), &a,
                               IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                   IBV_QP_MIN_RNR_TIMER);
  if (rc) fail("ibv_modify_qp(RTR)", rc);
}

void Nic::to_rts(uint32_t qpn, uint32_t sq_psn, uint8_t timeout, uint8_t retry_cnt,
                 uint8_t rnr_retry, uint8_t max_rd_atomic) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = sq_psn;
  a.timeout = timeout;
  a.retry_cnt = retry_cnt;
  a.rnr_retry = rnr_retry;
  a.max_rd_atomic = max_rd_atomic;
  const int rc = ibv_modify_qp(qp(qpn), &a,
                               IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                   IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
  if (rc) fail("ibv_modify_qp(RTS)", rc);
}

int Nic::qp_state(uint32_t qpn) {
  ibv_qp_attr a{};
  ibv_qp_init_attr init{};
  const int rc = ibv_query_qp(qp(qpn), &a, IBV_QP_STATE, &init);
  if (rc) fail("ibv_query_qp", rc);
  return a.qp_state;
}

void Nic::post_send(uint32_t qpn, const std::vector<Op>& ops) {
  if (ops.empty()) return;
  std::vector<ibv_sge> sges(ops.size());
  std::vector<ibv_send_wr> wrs(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& o = ops[i];
    sges[i] = ibv_sge{o.laddr, o.size, o.lkey};
    ibv_send_wr& w = wrs[i];
    w = ibv_send_wr{};
    w.wr_id = o.wr_id;
    w.sg_list = &sges[i];
    w.num_sge = 1;
    w.opcode = static_cast<ibv_wr_opcode>(o.opcode);
    w.send_flags = o.flags;
    w.wr.rdma.remote_addr = o.raddr;
    w.wr.rdma.rkey = o.rkey;
    if (o.has_imm) w.imm_data = htonl(o.imm);
    w.next = i + 1 < ops.size() ? &wrs[i + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(qp(qpn), wrs.data(), &bad);
  if (rc) fail("ibv_post_send of " + std::to_string(ops.size()) + " WR(s)", rc);
}

void Nic::post_recv(uint32_t qpn, int n, uint64_t addr, uint32_t length, uint32_t lkey) {
  ibv_sge sge{addr, length, lkey};
  ibv_recv_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_qp* q = qp(qpn);
  for (int i = 0; i < n; ++i) {
    ibv_recv_wr* bad = nullptr;
    const int rc = ibv_post_recv(q, &wr, &bad);
    if (rc) fail("ibv_post_recv", rc);
  }
}

int Nic::poll(uint32_t id, int max, std::vector<ibv_wc>& out) {
  out.resize(max > 0 ? max : 0);
  const int got = ibv_poll_cq(cq(id), max, out.data());
  if (got < 0) throw std::runtime_error("ibv_poll_cq failed on CQ " + std::to_string(id));
  out.resize(got);
  return got;
}

}  // namespace verbs
}  // namespace gicbench
#endif  // GICBENCH_HAVE_VERBS
