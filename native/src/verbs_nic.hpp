// The verbs provider's objects, owned here over libibverbs: device context, PD, MRs, CQs and RC
// QPs of one rank, plus post_send/post_recv/poll_cq (the submitter's loops over them:
// verbs_loops.hpp).
//
// Why native ownership: the loops need raw ibv_qp*/ibv_cq* pointers, which pyverbs keeps private
// (Cython attributes). So the data path lives here; pyverbs stays for probing devices, ports and
// GIDs (app/fabric/verbs/device.py, `gicbench doctor`).
#pragma once
#ifdef GICBENCH_HAVE_VERBS

#include <infiniband/verbs.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace gicbench {
namespace verbs {

// One send work request as Python describes it (tests and the Posting API).
struct Op {
  int opcode = IBV_WR_RDMA_WRITE;
  uint64_t laddr = 0;
  uint32_t lkey = 0;
  uint64_t raddr = 0;
  uint32_t rkey = 0;
  uint32_t size = 0;
  int flags = 0;
  bool has_imm = false;
  uint32_t imm = 0;  // host order; sent big-endian as the verbs ABI wants
  uint64_t wr_id = 0;
};

// What the RTR transition needs about the remote QP and the path to it.
struct RtrArgs {
  uint32_t dest_qpn = 0;
  uint32_t rq_psn = 0;
  int path_mtu = IBV_MTU_1024;
  uint16_t dlid = 0;
  bool global = true;  // RoCE (and IB with a GID): a global route to dgid
  uint8_t dgid[16] = {};
  uint8_t sgid_index = 0;
  uint8_t port = 1;
  uint8_t min_rnr_timer = 12;
  uint8_t max_dest_rd_atomic = 1;
};

class Nic {
 public:
  explicit Nic(const std::string& device);
  ~Nic();
  Nic(const Nic&) = delete;
  Nic& operator=(const Nic&) = delete;

  void close();  // children first: QPs, CQs, MRs, then PD and context; idempotent
  bool closed() const { return ctx_ == nullptr; }
  const std::string& device() const { return device_; }

  // Page-aligned, zeroed host memory, registered: (addr, lkey, rkey).
  std::tuple<uint64_t, uint32_t, uint32_t> reg_mr(uint64_t length, int access);
  std::pair<uint32_t, int> create_cq(int ncqe);  // (our CQ number, CQEs the device gave)
  // (qpn, max inline bytes accepted, max send WRs accepted); retries without inline data
  // where the device refuses it.
  std::tuple<uint32_t, uint32_t, uint32_t> create_qp(uint32_t send_cq, uint32_t recv_cq,
                                                     uint32_t max_send_wr, uint32_t max_recv_wr,
                                                     uint32_t max_inline);
  void to_init(uint32_t qpn, uint8_t port, int access);
  void to_rtr(uint32_t qpn, const RtrArgs& a);
  void to_rts(uint32_t qpn, uint32_t sq_psn, uint8_t timeout, uint8_t retry_cnt,
              uint8_t rnr_retry, uint8_t max_rd_atomic);
  int qp_state(uint32_t qpn);

  void post_send(uint32_t qpn, const std::vector<Op>& ops);  // one call, a chain of ops
  void post_recv(uint32_t qpn, int n, uint64_t addr, uint32_t length, uint32_t lkey);
  int poll(uint32_t cq, int max, std::vector<ibv_wc>& out);

  ibv_qp* qp(uint32_t qpn) const;
  ibv_cq* cq(uint32_t id) const;

 private:
  std::string device_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  std::map<uint32_t, ibv_cq*> cqs_;
  uint32_t next_cq_ = 1;
  std::map<uint32_t, ibv_qp*> qps_;
  std::vector<std::pair<ibv_mr*, void*>> mrs_;
};

}  // namespace verbs
}  // namespace gicbench

#endif  // GICBENCH_HAVE_VERBS
