// The verbs provider's objects, owned here over libibverbs: device context, PD, MRs, CQs and RC
// QPs of one rank, plus post_send/post_recv/poll_cq and the submitter's timing loops over them.
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

// ---- the host submitter's loops on this NIC (verbs_loops.cpp) ----------------------------------

// A failure inside a loop, with what Python needs to name it.
struct LoopError {
  bool failed = false;
  std::string kind;  // timeout | cqe_error | interrupted | post_failed | poll_failed | bad_arguments
  std::string message;
  uint32_t qpn = 0;        // the QP the loop was driving
  uint64_t posted = 0;     // work requests posted on it
  uint64_t completed = 0;  // ... and known complete
  int status = 0;          // cqe_error: ibv_wc_status
  uint32_t vendor_err = 0;
  uint64_t wr_id = 0;
  uint32_t wc_qpn = 0;
  uint64_t word_seen = 0;  // round trip: the polled word, and the value awaited
  uint64_t word_expected = 0;
  uint64_t done = 0;  // operations (messages) done before the failure, warm-up included
  uint64_t total = 0;
};

struct Side {
  uint64_t addr = 0;
  uint32_t key = 0;
  uint64_t length = 0;
};

struct LatencyArgs {
  uint32_t qpn = 0;
  uint32_t cq = 0;
  int mode = 0;  // 0 issue, 1 put+completion, 2 round trip
  Side src, dst, reply;
  uint32_t size = 8;
  bool inline_payload = false;
  uint64_t iters = 0, warmup = 0;
  uint64_t timeout_ns = 0;
};

struct RespondArgs {
  uint32_t qpn = 0;
  uint32_t cq = 0;
  Side src, dst, watch;
  uint32_t size = 8;
  bool inline_payload = false;
  uint64_t count = 0;
  uint64_t timeout_ns = 0;
};

struct RateLane {
  uint32_t qpn = 0;
  uint32_t cq = 0;
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

bool single_op(Nic& nic, const LatencyArgs& a, int64_t* samples, LoopError& err);
bool respond(Nic& nic, const RespondArgs& a, LoopError& err);
bool msg_rate(Nic& nic, const std::vector<RateLane>& lanes, const RateArgs& a,
              std::vector<int64_t>& windows, RateStats& stats, LoopError& err);

}  // namespace verbs
}  // namespace gicbench

#endif  // GICBENCH_HAVE_VERBS
