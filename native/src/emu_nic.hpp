// The emulated NIC of one rank: its segment, the mapped segments of its peers, the control verbs
// (register, create CQ/QP/DCT, modify QP) and the CPU engine that executes mlx5 WQEs.
//
// The engine of rank r only reads r's send queues; it writes into peers' memory, peers' CQs and
// consumes peers' receives directly through their mapped segments (the requester does the
// responder's work, as there is no wire). Ordering: WQE memory is read after an acquire load of
// the doorbell word; payload lands before the CQE body, and op_own is published last (release).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "emu_core.cuh"
#include "emu_model.hpp"
#include "emu_segment.hpp"
#include "mlx5.cuh"

namespace gicbench {
namespace emu {

struct MrInfo {
  uint64_t addr, length;
  uint32_t key;
};
struct CqInfo {
  uint32_t cqn;
  uint64_t buf, dbrec;
  uint32_t ncqe;
};
struct RqInfo {
  uint64_t buf, dbrec;
  uint32_t wqe_cnt;
};
struct QpInfo {
  uint32_t qpn;
  uint64_t sq_buf, dbrec, doorbell;
  uint32_t wqebb_cnt;
  RqInfo rq;
};
struct DctInfo {
  uint32_t dctn;
  RqInfo rq;
};
struct GpiInfo {
  uint32_t num;
  uint64_t base, ring;  // the control block and the descriptor ring (this process's addresses)
  uint32_t depth;
};

class Nic {
 public:
  Nic(const std::string& name, int rank, int world, uint64_t bytes, const Limits& lim);
  ~Nic();
  Nic(const Nic&) = delete;
  Nic& operator=(const Nic&) = delete;

  // ---- control (one Python thread; each takes the control mutex) -----------------------------
  MrInfo reg_mr(uint64_t length, uint32_t access, uint32_t pd = 0);
  CqInfo create_cq(uint32_t ncqe, uint32_t flags = 0);  // CqFlags
  // flags: QpFlags; max_inline 0 = what ds allows; pd: protection domain of the QP.
  QpInfo create_qp(uint32_t send_cqn, uint32_t sq_wqebbs, uint32_t recv_cqn, uint32_t rq_wqes,
                   bool dci, uint32_t flags = 0, uint32_t max_inline = 0, uint32_t pd = 0);
  DctInfo create_dct(uint32_t cqn, uint64_t dc_key, uint32_t rq_wqes, uint32_t pd = 0);
  // A GPI queue (docs/gpi.md): `depth` descriptors (a power of two), `ncounters` completion
  // counters, a window table of `nwindows` handles x the world's ranks, protection domain `pd`.
  GpiInfo create_gpi(uint32_t depth, uint32_t ncounters, uint32_t nwindows, uint32_t pd = 0);
  // Window (handle, rank) of GPI queue `num`: `length` bytes from `addr` (the owner's address of
  // an MR of that rank) under `key`.
  void set_gpi_window(uint32_t num, uint32_t handle, uint32_t rank, uint64_t addr,
                      uint64_t length, uint32_t key);
  // RESET->INIT->RTR->RTS, any->ERR, any->RESET; RTR of an RC QP needs the remote.
  void modify_qp(uint32_t qpn, uint32_t state, int remote_rank, uint32_t remote_qpn);
  uint32_t qp_state(uint32_t qpn) const;
  void attach_peer(int rank, const std::string& name, uint64_t bytes);
  // The CUDA engine (cuda/emu_engine.cu) puts some objects in GPU memory. A CQ: `devcq` is the
  // GPU address of its DevCq (ring, record, lock, status, producer index). A memory region at
  // GPU address `addr`, which engines reach at base_dev + offset (base_dev: the GPU's address of
  // this segment). The entries' reserved fields mark them.
  void relocate_cq(uint32_t cqn, uint64_t devcq);
  void relocate_mr(uint32_t key, uint64_t addr, uint64_t base_dev);
  // The mapping of rank r's segment in this process (0 when not attached).
  uint64_t seg_base(int r) const;
  bool seal();  // unlink our name: every peer has mapped us
  void close();

  // ---- NIC model (emu_model.cpp; cuda/nic_model.cuh) --------------------------------------------
  // Charge every WQE of this rank's engine the model's times (before the engine serves work):
  // its shared region (receive pipeline, context cache, counters) is carved from the memory
  // arena, model_bytes(p) bytes the segment must have room for.
  void set_model(const nic_model::Params& p);
  static uint64_t model_bytes(const nic_model::Params& p);
  bool model_on() const { return model_ != nullptr; }
  std::vector<ModelLogEntry> model_log();
  std::vector<uint64_t> model_counters() const;  // nic_model::Counter order; empty: no model

  // ---- engine ----------------------------------------------------------------------------------
  // The engine's threads (shards): QP slot i is served by shard (i - 1) % n only, each shard with
  // its own hot set, sweep, counters and lock, so a rank's NIC executes n QPs at once and no two
  // threads ever serve one QP (a QP's WQEs stay in order). What QPs share is already safe between
  // ranks' engines: CQs and receive queues under the CQ's lock, atomics, counters, error records.
  // GPI queues and the NIC model are served by shard 0, so a model refuses n > 1 (its clock and
  // plans are one thread's). Set before start_thread; throws otherwise.
  static constexpr uint32_t kMaxEngineThreads = 64;
  void set_engine_threads(uint32_t n);
  uint32_t engine_threads() const { return static_cast<uint32_t>(shards_.size()); }
  std::vector<uint64_t> shard_wqes() const;  // WQEs each engine thread executed, by shard
  // One pass of every shard: the recently rung QPs, then the next window of the shard's rotating
  // sweep over its doorbell registers; returns the work done (0 = idle).
  size_t progress();
  void start_thread();  // one thread per shard
  void stop_thread();
  bool thread_running() const { return shards_[0]->thread.joinable(); }
  void quiesce();  // returns once every doorbell rung before the call has been handled

  // ---- inspection ------------------------------------------------------------------------------
  const Segment& seg() const { return self_; }
  int rank() const { return rank_; }
  std::vector<ErrRecord> drain_errors(uint64_t* lost);
  const QpEntry& qp_entry(uint32_t qpn) const;
  const DctEntry& dct_entry(uint32_t dctn) const;
  const CqEntry& cq_entry(uint32_t cqn) const;
  const GpiEntry& gpi_entry(uint32_t num) const;

 private:
  // Engine-private state of one QP slot (only the engine, or control under the engine lock).
  struct QpEng {
    emu_core::SqState sq;  // the core's SQ state machine
    uint64_t active = 0;   // pass of the last doorbell or work
  };
  // One engine thread's state (see set_engine_threads); its own cache line against false sharing.
  struct alignas(64) Shard {
    uint32_t busy = 0;   // its lock: one progress pass at a time (its thread, inline, control)
    uint32_t index = 0;  // serves slots index + 1, index + 1 + n, ...
    uint32_t cursor = 1;               // next slot of its rotating sweep
    bool wrapped = false;              // the last pass completed a sweep
    uint64_t pass = 0;
    uint64_t last_cold_pass = 0;       // the last pass whose sweep found a rung QP not hot
    std::vector<uint32_t> hot;         // its slots rung recently or with work pending
    uint64_t local[kNumCounters] = {};  // counters, added to the segment's after a busy pass
    std::atomic<uint64_t> sweeps{0};   // completed sweeps over its doorbell registers
    std::atomic<uint64_t> wqes{0};     // WQEs it executed (the threads' balance)
    std::thread thread;
  };
  struct Env;  // the core's environment over this rank's segment (emu_engine.cpp)
  struct GpiEnv;  // gpi_serve's environment (emu_gpi.cpp)

  QpEntry& qp_at(uint32_t qpn) const;
  emu_core::SqParams sq_params(uint32_t i) const;
  size_t serve_qp(uint32_t i, uint64_t db, bool rung, uint64_t* local);
  size_t progress_shard(Shard& sh);
  template <class Fill>
  bool post_cqe(const Segment& s, uint32_t cqn, uint32_t qpn, Fill fill);
  template <class Fill>
  bool post_cqe_locked(const Segment& s, CqEntry& cq, uint32_t qpn, Fill fill);
  void lock_cq(const Segment& s, CqEntry& cq);
  void cq_fatal(const Segment& s, CqEntry& cq);
  size_t serve_gpis();  // one pass over this rank's GPI queues (emu_gpi.cpp)
  void engine_loop(Shard& sh);
  // NIC model hooks: admission of the WQE at ci (false: hold it), CQEs queued for their time.
  bool model_admit(uint32_t slot, const emu_core::SqParams& q, uint32_t ci, uint32_t avail);
  void model_defer(uint32_t slot, PendingCqe c);
  size_t model_flush();
  void model_reset_qp(uint32_t slot);
  void model_plan(bool one_turn);
  bool model_plan_next(uint32_t slot, uint64_t now, uint64_t& t_exec);
  void model_end_pass();
  bool model_pending() const;
  void write_deferred_cqe(uint32_t slot, const PendingCqe& c);
  void lock_engine();  // every shard's lock: no pass runs while control changes engine state
  void unlock_engine();

  int rank_, world_;
  Segment self_;
  std::vector<Segment> peers_;       // by rank; our own entry stays unmapped
  std::vector<const Segment*> seg_;  // by rank: the mapping to use (self or peer), or null
  std::mutex ctl_;
  uint8_t key_byte_;

  // Engine-private state per QP slot, each touched by its slot's shard only. last_db_ and
  // is_hot_ are dense: the sweep reads only them.
  std::vector<uint64_t> last_db_;
  std::vector<uint8_t> is_hot_;
  std::vector<QpEng> eng_;
  std::vector<std::unique_ptr<Shard>> shards_;  // at least one
  emu_core::GpiState gpi_eng_[kMaxGpis] = {};  // the core's state of each GPI queue (shard 0)
  uint64_t gpi_local_[kNumGpiCounters] = {};
  uint32_t pid_;
  std::atomic<bool> stop_{false};
  uint64_t err_cursor_ = 0;
  bool closed_ = false;
  std::unique_ptr<ModelState> model_;  // null: no NIC model (nothing is charged)
};

}  // namespace emu
}  // namespace gicbench

// The inline-progress entry point native polling loops call: ctx is a Nic*.
extern "C" void gicbench_emu_progress(void* ctx);
