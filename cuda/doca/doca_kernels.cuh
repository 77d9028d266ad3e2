// Kernels that post through DOCA GPUNetIO's device verbs on gicbench's queues.
//
// One template per (NIC handler, resource sharing mode, execution scope); the operation is a
// run-time argument. Each issuing unit (a thread, or a warp in warp scope) posts `iters`
// operations on its QP through DOCA's one-sided API exactly as NVSHMEM/NCCL GIN call it
// (doca_gpu_dev_verbs_put/p/put_signal/p_signal/signal), then waits for its last ticket. GPU_SM_BF
// is not dispatched by DOCA's one-sided submit, so its variant builds the WQE with DOCA's own
// prepare function and rings with doca_gpu_dev_verbs_submit_bf (thread: a TMA bulk copy from
// shared memory) or doca_gpu_dev_verbs_submit_bf_warp.
//
// Which QP a unit uses follows the sharing mode: EXCLUSIVE: one unit per QP (unit i -> QP i);
// CTA: one block per QP, its units share it (block b -> QP b); GPU: unit u uses QP u % nqps.
// Slots in the destination are unique per operation of a QP: with R units per QP and op
// n = first + i of the unit of rank r on its QP, slot = n * R + r (x 32 + lane in warp scope),
// at dst + (slot mod slots) * size (slots = 0: no wrap), read from src at the same offset. So the
// ops of a QP cover slots 0, 1, 2, ... contiguously whatever the launch split (gicbench's
// msg-rate validates that). Payload flags: VALUE_FROM_SRC (p writes the source's 8 bytes at the
// offset: msg-rate), SEQ (the unit's op number n + 1 is stamped into the source's last 8 bytes
// of the message before the post, and is p's value: single-op's sequence word); the stamping
// happens before the op's timing starts.
//
// The final wait is a bounded poll (DOCA's non-blocking poll_one_cq_at against %globaltimer), so
// a completion that never comes ends the kernel with ETIMEDOUT instead of hanging it. DOCA's own
// slot-availability wait inside reserve (a blocking CQ poll once a unit wraps the SQ) is kept as
// production code has it; the host bounds the kernel as a whole.
#pragma once

#include "doca/gicbench_doca.cuh"

enum gicbench_doca_op : uint32_t {
  GICBENCH_DOCA_PUT = 0,         // RDMA WRITE from a registered local buffer
  GICBENCH_DOCA_P = 1,           // RDMA WRITE of one inline uint64
  GICBENCH_DOCA_PUT_SIGNAL = 2,  // WRITE + ATOMIC_FA on a remote 8-byte signal
  GICBENCH_DOCA_P_SIGNAL = 3,    // inline WRITE + ATOMIC_FA
  GICBENCH_DOCA_SIGNAL = 4,      // ATOMIC_FA alone
  GICBENCH_DOCA_NUM_OPS = 5,
};

// Per-unit status codes (0 = every operation completed without error).
enum : int32_t {
  GICBENCH_DOCA_OK = 0,
  GICBENCH_DOCA_EUNSUPPORTED = 1,  // op not offered by DOCA for this handler/scope (no WQE posted)
  GICBENCH_DOCA_ETIMEDOUT = 2,     // the last ticket's CQE did not arrive within timeout_ns
  GICBENCH_DOCA_ECQE = 3,          // an error CQE (REQ_ERR) for the last ticket
  GICBENCH_DOCA_EBADARG = 4,       // job inconsistent with the launch (units vs QPs)
  GICBENCH_DOCA_ENOSEQ = 5,        // round trip: the peer's sequence word did not arrive in time
};

// What the latency kernel does per op (gicbench_doca_job.mode).
enum : uint32_t {
  GICBENCH_DOCA_MODE_LATENCY = 0,  // post, wait the ticket (issue and put+completion cycles)
  GICBENCH_DOCA_MODE_RTT = 1,      // post, wait for the peer's reply (sequence word at `reply`)
  GICBENCH_DOCA_MODE_RESPOND = 2,  // wait for the peer's request at `reply`, then post the answer
};

// Per-QP addresses and keys (keys big-endian, as DOCA_GPUNETIO_VERBS_MKEY_SWAPPED says).
struct gicbench_doca_lane {
  uint64_t src;        // local source (PUT), the NIC's address
  uint64_t dst;        // remote destination base (address in the peer's NIC space)
  uint64_t sig_remote; // remote 8-byte signal word
  uint64_t sig_local;  // local 8-byte word receiving the fetched old value
  uint32_t src_lkey_be, dst_rkey_be, sig_rkey_be, sig_lkey_be;
  uint64_t src_dev;    // the GPU's address of src (payload flags read/stamp it; 0: unused)
};
static_assert(sizeof(gicbench_doca_lane) == 56, "layout.py LANE_DTYPE");

enum : uint32_t {
  GICBENCH_DOCA_VALUE_FROM_SRC = 1u,  // p's value: the 8 source bytes at the op's offset
  GICBENCH_DOCA_SEQ = 2u,             // stamp op number + 1 into the message's last 8 bytes
};

struct gicbench_doca_job {
  uint32_t op;          // gicbench_doca_op
  uint32_t size;        // bytes per PUT (P writes 8)
  uint32_t iters;       // operations per unit
  uint32_t nqps;        // QPs in the array
  uint64_t seed;        // P writes seed + slot
  uint64_t sig_val;     // added by every signal
  uint64_t timeout_ns;  // bound of the final wait
  uint32_t first;       // op number of this launch's first op per unit (earlier launches' ops)
  uint32_t slots;       // destination slots per QP before wrapping (0: no wrap)
  uint32_t flags;       // GICBENCH_DOCA_VALUE_FROM_SRC | GICBENCH_DOCA_SEQ
  uint32_t nquiet;      // latency: after each op, also wait the last ticket of QPs [0, nquiet)
  uint32_t window;      // rate: record a time mark every `window` ops of a unit (0: none)
  uint32_t max_windows; // rate: marks per unit
  uint64_t reply;       // round trip: GPU address of the landing buffer whose last 8 bytes (of
                        // `size`) carry the peer's sequence word (requester: the reply; responder:
                        // the request)
  uint32_t mode;        // GICBENCH_DOCA_MODE_* (latency kernel)
  uint32_t reserved;
};
static_assert(sizeof(gicbench_doca_job) == 80, "layout.py JOB_DTYPE");

struct gicbench_doca_result {
  int32_t status;     // GICBENCH_DOCA_*
  int32_t cq_status;  // what DOCA's poll returned for the last ticket (0, EBUSY, -EIO)
  uint64_t ticket;    // last WQE index posted
  uint64_t post_ns;   // rate: %globaltimer first post -> last post returned; round trip
                      // (ENOSEQ): the sequence word last seen
  uint64_t total_ns;  // %globaltimer: first post -> last ticket completed
};
static_assert(sizeof(gicbench_doca_result) == 32, "layout.py RESULT_DTYPE");

template <doca_gpu_dev_verbs_resource_sharing_mode S>
__device__ inline void gicbench_doca_unit(uint32_t unit, uint32_t nunits, uint32_t nqps,
                                          uint32_t* qp_idx, uint32_t* rank_on_qp,
                                          uint32_t* per_qp) {
  if (S == DOCA_GPUNETIO_VERBS_RESOURCE_SHARING_MODE_EXCLUSIVE) {
    *qp_idx = unit;
    *rank_on_qp = 0;
    *per_qp = 1;
  } else if (S == DOCA_GPUNETIO_VERBS_RESOURCE_SHARING_MODE_CTA) {
    *qp_idx = blockIdx.x;  // one block per QP: CTA sharing synchronises within a block only
    *per_qp = nunits / gridDim.x;
    *rank_on_qp = unit % *per_qp;
  } else {
    *qp_idx = unit % nqps;
    *rank_on_qp = unit / nqps;
    *per_qp = nqps ? (nunits + nqps - 1) / nqps : 0;
  }
}

// Where op i of this unit (this lane) writes, and p's value (see the flags above). Stamps the
// sequence word into the source (SEQ) and makes it visible to the NIC before the post.
__device__ inline void gicbench_doca_payload(const gicbench_doca_lane& l,
                                             const gicbench_doca_job& job, uint32_t rank,
                                             uint32_t per_qp, uint32_t i, uint32_t lane_id,
                                             bool warp, uint32_t sz, uint64_t* off,
                                             uint64_t* value) {
  const uint64_t n = (uint64_t)job.first + i;
  uint64_t slot = n * per_qp + rank;
  if (warp) slot = slot * DOCA_GPUNETIO_VERBS_WARP_SIZE + lane_id;
  *off = (job.slots ? slot % job.slots : slot) * sz;
  *value = job.seed + slot;
  if ((job.flags & GICBENCH_DOCA_VALUE_FROM_SRC) && l.src_dev)
    *value = *reinterpret_cast<const volatile uint64_t*>(l.src_dev + *off);
  if (job.flags & GICBENCH_DOCA_SEQ) {
    *value = n + 1;
    if (l.src_dev && sz >= sizeof(uint64_t) &&
        (job.op == GICBENCH_DOCA_PUT || job.op == GICBENCH_DOCA_PUT_SIGNAL)) {
      *reinterpret_cast<volatile uint64_t*>(l.src_dev + *off + sz - sizeof(uint64_t)) = n + 1;
      __threadfence_system();  // the NIC reads the payload from host memory after the doorbell
    }
  }
}

// Bounded wait for `ticket` through DOCA's non-blocking poll.
template <doca_gpu_dev_verbs_resource_sharing_mode S>
__device__ inline int32_t gicbench_doca_wait(doca_gpu_dev_verbs_qp* qp, uint64_t ticket,
                                             uint64_t timeout_ns, int32_t* cq_status) {
  const uint64_t t0 = doca_gpu_dev_verbs_query_globaltimer();
  int s;
  while ((s = doca_gpu_dev_verbs_poll_one_cq_at<S>(qp, ticket)) == EBUSY) {
    if (doca_gpu_dev_verbs_query_globaltimer() - t0 > timeout_ns) break;
  }
  *cq_status = s;
  if (s == EBUSY) return GICBENCH_DOCA_ETIMEDOUT;
  return s == 0 ? GICBENCH_DOCA_OK : GICBENCH_DOCA_ECQE;
}

// The 8-byte sequence word a round trip polls (the peer's write lands it; volatile loads, as
// mini-gda's load_seq: an equality test on a torn read can only succeed on the final value).
__device__ inline uint64_t gicbench_doca_load_seq(uint64_t addr) {
  if ((addr & 7) == 0) return *reinterpret_cast<const volatile uint64_t*>(addr);
  uint64_t v = 0;
  for (int k = 0; k < 8; ++k)
    v |= (uint64_t)reinterpret_cast<const volatile uint8_t*>(addr)[k] << (8 * k);
  return v;
}

// Bounded wait until the word at `addr` equals `want`; *seen: what it held last.
__device__ inline int32_t gicbench_doca_await_seq(uint64_t addr, uint64_t want,
                                                  uint64_t timeout_ns, uint64_t* seen) {
  const uint64_t t0 = doca_gpu_dev_verbs_query_globaltimer();
  while ((*seen = gicbench_doca_load_seq(addr)) != want) {
    if (doca_gpu_dev_verbs_query_globaltimer() - t0 > timeout_ns) return GICBENCH_DOCA_ENOSEQ;
  }
  __threadfence();  // the rest of the peer's message is read after its last word
  return GICBENCH_DOCA_OK;
}

__device__ inline doca_gpu_dev_verbs_addr gicbench_doca_addr(uint64_t a, uint32_t key_be) {
  doca_gpu_dev_verbs_addr r;
  r.addr = a;
  r.key = key_be;
  return r;
}

// GPU_SM_BF, thread scope: DOCA's WQE preparation into the SQ and into this thread's shared
// memory slot, then doca_gpu_dev_verbs_submit_bf (TMA bulk copy of the 64-byte WQE to the BF
// register, record, second ring). The async proxy must see the generic stores to shared memory
// before the bulk copy reads them (fence.proxy.async), and the slot is reused only after the copy
// read it (commit/wait group).
template <doca_gpu_dev_verbs_resource_sharing_mode S>
__device__ inline uint64_t gicbench_doca_bf_thread(doca_gpu_dev_verbs_qp* qp,
                                                   doca_gpu_dev_verbs_wqe* smem, uint32_t op,
                                                   const gicbench_doca_lane& l, uint64_t off,
                                                   uint32_t size, uint64_t value) {
  const uint64_t idx =
      doca_gpu_dev_verbs_reserve_wq_slots<S, DOCA_GPUNETIO_VERBS_QP_SQ>(qp, 1);
  const auto flags = doca_gpu_dev_verbs_get_ctrl_flags<DOCA_GPUNETIO_VERBS_QP_SQ>(
      qp, DOCA_GPUNETIO_VERBS_GPU_CODE_OPT_DEFAULT);
  doca_gpu_dev_verbs_wqe* wqe = doca_gpu_dev_verbs_get_wqe_ptr(qp, idx);
  for (doca_gpu_dev_verbs_wqe* w : {smem, wqe}) {
    if (op == GICBENCH_DOCA_PUT) {
      doca_gpu_dev_verbs_wqe_prepare_write(qp, w, idx, DOCA_GPUNETIO_IB_MLX5_OPCODE_RDMA_WRITE,
                                           flags, 0, l.dst + off, l.dst_rkey_be, l.src + off,
                                           l.src_lkey_be, size);
    } else {
      doca_gpu_dev_verbs_prepare_inl_rdma_write_wqe_header(qp, w, idx, flags, l.dst + off,
                                                           l.dst_rkey_be, sizeof(uint64_t));
      doca_gpu_dev_verbs_prepare_inl_rdma_write_wqe_data<uint64_t>(qp, w, value);
    }
  }
  doca_gpu_dev_verbs_mark_wqes_ready<S>(qp, idx, idx);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
  doca_gpu_dev_verbs_submit_bf<S, DOCA_GPUNETIO_VERBS_SYNC_SCOPE_GPU>(qp, idx + 1, smem);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.commit_group;\n\tcp.async.bulk.wait_group.read 0;" ::: "memory");
#endif
  return idx;
}

// GPU_SM_BF, warp scope: each lane prepares its WQE in the SQ (PUT only, as DOCA's put_warp),
// lane 0 marks them ready, the warp rings BlueFlame with the last WQE of the batch.
template <doca_gpu_dev_verbs_resource_sharing_mode S>
__device__ inline uint64_t gicbench_doca_bf_warp(doca_gpu_dev_verbs_qp* qp,
                                                 const gicbench_doca_lane& l, uint64_t off,
                                                 uint32_t size) {
  const uint32_t lane = doca_gpu_dev_verbs_get_lane_id();
  uint64_t base = 0;
  if (lane == 0)
    base = doca_gpu_dev_verbs_reserve_wq_slots<S, DOCA_GPUNETIO_VERBS_QP_SQ>(
        qp, DOCA_GPUNETIO_VERBS_WARP_SIZE);
  base = __shfl_sync(DOCA_GPUNETIO_VERBS_WARP_FULL_MASK, base, 0);
  const uint64_t idx = base + lane;
  doca_gpu_dev_verbs_wqe_prepare_write(
      qp, doca_gpu_dev_verbs_get_wqe_ptr(qp, idx), idx, DOCA_GPUNETIO_IB_MLX5_OPCODE_RDMA_WRITE,
      doca_gpu_dev_verbs_get_ctrl_flags<DOCA_GPUNETIO_VERBS_QP_SQ>(
          qp, DOCA_GPUNETIO_VERBS_GPU_CODE_OPT_DEFAULT),
      0, l.dst + off, l.dst_rkey_be, l.src + off, l.src_lkey_be, size);
  __syncwarp();
  if (lane == 0)
    doca_gpu_dev_verbs_mark_wqes_ready<S>(qp, base, base + DOCA_GPUNETIO_VERBS_WARP_SIZE - 1);
  __syncwarp();
  doca_gpu_dev_verbs_submit_bf_warp<S, DOCA_GPUNETIO_VERBS_SYNC_SCOPE_GPU>(
      qp, base + DOCA_GPUNETIO_VERBS_WARP_SIZE,
      doca_gpu_dev_verbs_get_wqe_ptr(qp, base + DOCA_GPUNETIO_VERBS_WARP_SIZE - 1));
  return idx;
}

__device__ inline uint64_t base_ticket_max(uint64_t t) {
  const uint32_t hi = __reduce_max_sync(DOCA_GPUNETIO_VERBS_WARP_FULL_MASK, (uint32_t)(t >> 32));
  const uint32_t lo = __reduce_max_sync(DOCA_GPUNETIO_VERBS_WARP_FULL_MASK,
                                        (uint32_t)(t >> 32) == hi ? (uint32_t)t : 0u);
  return (uint64_t)hi << 32 | lo;
}

// Can this (handler, scope) run `op`? DOCA's warp-scope p/put_signal/p_signal/signal are stubs
// that post nothing (onesided.cuh), and GPU_SM_BF is rung here for PUT and P only.
__host__ __device__ constexpr bool gicbench_doca_supported(doca_gpu_dev_verbs_nic_handler h,
                                                           doca_gpu_dev_verbs_exec_scope e,
                                                           uint32_t op) {
  return op < GICBENCH_DOCA_NUM_OPS &&
         (e == DOCA_GPUNETIO_VERBS_EXEC_SCOPE_THREAD ? (h != DOCA_GPUNETIO_VERBS_NIC_HANDLER_GPU_SM_BF ||
                                                        op <= GICBENCH_DOCA_P)
                                                     : op == GICBENCH_DOCA_PUT);
}

__device__ inline uint32_t gicbench_doca_size(const gicbench_doca_job& job) {
  return job.op == GICBENCH_DOCA_PUT || job.op == GICBENCH_DOCA_PUT_SIGNAL
             ? job.size
             : (uint32_t)sizeof(uint64_t);
}

// One operation of `job` by this unit (this lane, in warp scope) at offset `off` (p: `value`):
// DOCA's one-sided call for the op, or the BlueFlame path. Returns the op's last ticket.
template <doca_gpu_dev_verbs_nic_handler H, doca_gpu_dev_verbs_resource_sharing_mode S,
          doca_gpu_dev_verbs_exec_scope E>
__device__ inline uint64_t gicbench_doca_issue(doca_gpu_dev_verbs_qp* qp,
                                               doca_gpu_dev_verbs_wqe* smem,
                                               const gicbench_doca_lane& l,
                                               const gicbench_doca_job& job, uint64_t off,
                                               uint64_t value) {
  const bool warp = E == DOCA_GPUNETIO_VERBS_EXEC_SCOPE_WARP;
  const uint32_t sz = gicbench_doca_size(job);
  const doca_gpu_dev_verbs_addr ra = gicbench_doca_addr(l.dst + off, l.dst_rkey_be);
  const doca_gpu_dev_verbs_addr la = gicbench_doca_addr(l.src + off, l.src_lkey_be);
  const doca_gpu_dev_verbs_addr sr = gicbench_doca_addr(l.sig_remote, l.sig_rkey_be);
  const doca_gpu_dev_verbs_addr sl = gicbench_doca_addr(l.sig_local, l.sig_lkey_be);
  uint64_t ticket = 0;
  if (H == DOCA_GPUNETIO_VERBS_NIC_HANDLER_GPU_SM_BF)
    return warp ? gicbench_doca_bf_warp<S>(qp, l, off, sz)
                : gicbench_doca_bf_thread<S>(qp, smem, job.op, l, off, sz, value);
  switch (job.op) {
    case GICBENCH_DOCA_PUT:
      doca_gpu_dev_verbs_put<S, H, E>(qp, ra, la, sz, &ticket);
      break;
    case GICBENCH_DOCA_P:
      doca_gpu_dev_verbs_p<uint64_t, S, H>(qp, ra, value, &ticket);
      break;
    case GICBENCH_DOCA_PUT_SIGNAL:
      doca_gpu_dev_verbs_put_signal<DOCA_GPUNETIO_VERBS_SIGNAL_OP_ADD, S, H>(
          qp, ra, la, sz, sr, sl, job.sig_val, &ticket);
      break;
    case GICBENCH_DOCA_P_SIGNAL:
      doca_gpu_dev_verbs_p_signal<uint64_t, DOCA_GPUNETIO_VERBS_SIGNAL_OP_ADD, S, H>(
          qp, ra, value, sr, sl, job.sig_val, &ticket);
      break;
    default:
      doca_gpu_dev_verbs_signal<DOCA_GPUNETIO_VERBS_SIGNAL_OP_ADD, S, H>(qp, sr, sl, job.sig_val,
                                                                         &ticket);
      break;
  }
  return ticket;
}

// Where this unit stands in the launch, and whether the launch fits the sharing mode. units =
// threads (thread scope) or warps (warp scope): EXCLUSIVE needs units == nqps, CTA blocks ==
// nqps; otherwise every unit reports EBADARG and nothing is posted.
struct gicbench_doca_place {
  uint32_t unit, nunits, lane_id, q, rank, per_qp;
  int32_t status;
};

template <doca_gpu_dev_verbs_nic_handler H, doca_gpu_dev_verbs_resource_sharing_mode S,
          doca_gpu_dev_verbs_exec_scope E>
__device__ inline gicbench_doca_place gicbench_doca_where(const gicbench_doca_job& job) {
  const bool warp = E == DOCA_GPUNETIO_VERBS_EXEC_SCOPE_WARP;
  const uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x;
  gicbench_doca_place p = {};
  p.lane_id = warp ? (threadIdx.x % DOCA_GPUNETIO_VERBS_WARP_SIZE) : 0;
  p.unit = warp ? tid / DOCA_GPUNETIO_VERBS_WARP_SIZE : tid;
  p.nunits = gridDim.x * blockDim.x / (warp ? DOCA_GPUNETIO_VERBS_WARP_SIZE : 1);
  gicbench_doca_unit<S>(p.unit, p.nunits, job.nqps, &p.q, &p.rank, &p.per_qp);
  if (!gicbench_doca_supported(H, E, job.op))
    p.status = GICBENCH_DOCA_EUNSUPPORTED;
  else if (job.nqps == 0 || p.q >= job.nqps ||
           (S == DOCA_GPUNETIO_VERBS_RESOURCE_SHARING_MODE_EXCLUSIVE && p.nunits != job.nqps) ||
           (S == DOCA_GPUNETIO_VERBS_RESOURCE_SHARING_MODE_CTA && gridDim.x != job.nqps))
    p.status = GICBENCH_DOCA_EBADARG;
  return p;
}

// Rate shape: every unit posts `iters` ops back to back, then waits for its last ticket.
template <doca_gpu_dev_verbs_nic_handler H, doca_gpu_dev_verbs_resource_sharing_mode S,
          doca_gpu_dev_verbs_exec_scope E>
__device__ inline void gicbench_doca_post(doca_gpu_dev_verbs_qp* qps,
                                          const gicbench_doca_lane* lanes,
                                          const gicbench_doca_job* jobp,
                                          gicbench_doca_result* results, uint64_t* marks) {
  extern __shared__ doca_gpu_dev_verbs_wqe gicbench_doca_smem[];
  const gicbench_doca_job job = *jobp;
  const bool warp = E == DOCA_GPUNETIO_VERBS_EXEC_SCOPE_WARP;
  const gicbench_doca_place p = gicbench_doca_where<H, S, E>(job);
  gicbench_doca_result r = {};
  r.status = p.status;
  if (p.status == GICBENCH_DOCA_OK) {
    doca_gpu_dev_verbs_qp* qp = &qps[p.q];
    const gicbench_doca_lane l = lanes[p.q];
    uint64_t ticket = 0;
    const uint32_t sz = gicbench_doca_size(job);
    const uint64_t t0 = doca_gpu_dev_verbs_query_globaltimer();
    for (uint32_t i = 0; i < job.iters; ++i) {
      uint64_t off, value;
      gicbench_doca_payload(l, job, p.rank, p.per_qp, i, p.lane_id, warp, sz, &off, &value);
      ticket = gicbench_doca_issue<H, S, E>(qp, &gicbench_doca_smem[threadIdx.x], l, job, off,
                                            value);
      // a time mark every `window` ops (msg-rate's windows), by the unit's first lane
      const uint32_t k = (i + 1) / (job.window ? job.window : 1) - 1;
      if (marks && job.window && (i + 1) % job.window == 0 && k < job.max_windows &&
          (!warp || p.lane_id == 0))
        marks[(uint64_t)p.unit * job.max_windows + k] = doca_gpu_dev_verbs_query_globaltimer() - t0;
    }
    const uint64_t t1 = doca_gpu_dev_verbs_query_globaltimer();
    r.ticket = ticket;
    r.status = job.iters ? gicbench_doca_wait<S>(qp, ticket, job.timeout_ns, &r.cq_status) : 0;
    r.post_ns = t1 - t0;
    r.total_ns = doca_gpu_dev_verbs_query_globaltimer() - t0;
    if (warp) {  // the warp's result: the worst status of its lanes, the last ticket
      r.status = __reduce_max_sync(DOCA_GPUNETIO_VERBS_WARP_FULL_MASK, r.status);
      r.ticket = base_ticket_max(r.ticket);
    }
  }
  if (!warp || p.lane_id == 0) results[p.unit] = r;
}

// Latency shape (single-op / completion-scope): every unit posts one op, waits for its ticket,
// and records, per iteration, issue cycles (the DOCA call) and put+completion cycles (call to
// completed ticket) from clock64 into cycles[(unit * iters + i) * 2 + {0, 1}]; the harness turns
// cycles into ns with its measured SM clock. The first failing wait ends the unit's loop.
// Round trip (job.mode RTT): column 1 is call -> the peer's reply (its sequence word n + 1 in the
// last 8 bytes of `reply`); the ticket is waited after, untimed. Responder (job.mode RESPOND):
// per op, wait for the request's sequence word n + 1 at `reply`, then post the answer (stamped
// n + 1 as every SEQ op) and wait its ticket; nothing is timed. mini-gda's gda_single_op and
// gda_respond follow the same protocol, so either submitter answers the other's requests.
template <doca_gpu_dev_verbs_nic_handler H, doca_gpu_dev_verbs_resource_sharing_mode S,
          doca_gpu_dev_verbs_exec_scope E>
__device__ inline void gicbench_doca_latency(doca_gpu_dev_verbs_qp* qps,
                                             const gicbench_doca_lane* lanes,
                                             const gicbench_doca_job* jobp,
                                             gicbench_doca_result* results, uint64_t* cycles) {
  extern __shared__ doca_gpu_dev_verbs_wqe gicbench_doca_smem[];
  const gicbench_doca_job job = *jobp;
  const bool warp = E == DOCA_GPUNETIO_VERBS_EXEC_SCOPE_WARP;
  const gicbench_doca_place p = gicbench_doca_where<H, S, E>(job);
  gicbench_doca_result r = {};
  r.status = p.status;
  if (p.status == GICBENCH_DOCA_OK && job.mode > GICBENCH_DOCA_MODE_RESPOND)
    r.status = GICBENCH_DOCA_EBADARG;
  if (r.status == GICBENCH_DOCA_OK) {
    doca_gpu_dev_verbs_qp* qp = &qps[p.q];
    const gicbench_doca_lane l = lanes[p.q];
    const uint32_t sz = gicbench_doca_size(job);
    const uint64_t word = job.reply + sz - sizeof(uint64_t);  // the peer's sequence word
    const uint64_t t0 = doca_gpu_dev_verbs_query_globaltimer();
    for (uint32_t i = 0; i < job.iters; ++i) {
      uint64_t off, value, seen = 0;
      const uint64_t seq = (uint64_t)job.first + i + 1;
      gicbench_doca_payload(l, job, p.rank, p.per_qp, i, p.lane_id, warp, sz, &off, &value);
      if (job.mode == GICBENCH_DOCA_MODE_RESPOND) {
        r.status = gicbench_doca_await_seq(word, seq, job.timeout_ns, &seen);
        if (warp) r.status = __reduce_max_sync(DOCA_GPUNETIO_VERBS_WARP_FULL_MASK, r.status);
        if (r.status != GICBENCH_DOCA_OK) {
          r.post_ns = seen;
          break;
        }
      }
      const long long c0 = clock64();
      const uint64_t ticket =
          gicbench_doca_issue<H, S, E>(qp, &gicbench_doca_smem[threadIdx.x], l, job, off, value);
      const long long c1 = clock64();
      long long c2 = 0;
      if (job.mode == GICBENCH_DOCA_MODE_RTT) {
        r.status = gicbench_doca_await_seq(word, seq, job.timeout_ns, &seen);
        c2 = clock64();
        if (r.status != GICBENCH_DOCA_OK) r.post_ns = seen;
        else r.status = gicbench_doca_wait<S>(qp, ticket, job.timeout_ns, &r.cq_status);
      } else {
        r.status = gicbench_doca_wait<S>(qp, ticket, job.timeout_ns, &r.cq_status);
        // An all-QP quiet (completion-scope --scope all): every other QP's last posted WQE too,
        // read from its DOCA structure and CQ in memory, as NVSHMEM's PE-wide quiet walks them.
        for (uint32_t j = 0; j < job.nquiet && r.status == GICBENCH_DOCA_OK; ++j) {
          if (j == p.q) continue;
          const uint64_t last =
              *reinterpret_cast<const volatile uint64_t*>(&qps[j].sq_rsvd_index);
          int32_t st = 0;
          if (last) r.status = gicbench_doca_wait<S>(&qps[j], last - 1, job.timeout_ns, &st);
        }
        c2 = clock64();
      }
      r.ticket = ticket;
      if (warp) {
        r.status = __reduce_max_sync(DOCA_GPUNETIO_VERBS_WARP_FULL_MASK, r.status);
        r.ticket = base_ticket_max(r.ticket);
      }
      if ((!warp || p.lane_id == 0) && job.mode != GICBENCH_DOCA_MODE_RESPOND) {
        uint64_t* c = cycles + ((uint64_t)p.unit * job.iters + i) * 2;
        c[0] = (uint64_t)(c1 - c0);
        c[1] = (uint64_t)(c2 - c0);
      }
      if (r.status != GICBENCH_DOCA_OK) break;
    }
    r.total_ns = doca_gpu_dev_verbs_query_globaltimer() - t0;
  }
  if (!warp || p.lane_id == 0) results[p.unit] = r;
}
