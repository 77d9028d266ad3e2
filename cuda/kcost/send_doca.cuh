// kernel-cost's communication call on DOCA GPUNetIO's device verbs (the paper, arXiv
// 2610.01380, §4.3.2: the library path NVSHMEM and NCCL GIN post with): thread 0 of a block
// calls doca_gpu_dev_verbs_put on its block's QP (block b: QP b mod nqps) and, with `wait`,
// polls DOCA's CQ for that put's ticket (cuda/doca's bounded poll, doca_gpu_dev_verbs_poll_one_cq_at).
// The QP structures are the doca submitter's (cuda/doca/gicbench_doca.cuh builds them from
// gicbench's queues); the NIC handler and the sharing mode are the submitter's knobs, compiled
// in (KC_DOCA_HANDLER, KC_DOCA_SHARING: DOCA's enums), as DOCA's templates take them.
#pragma once

#include "doca/doca_kernels.cuh"

#ifndef KC_DOCA_HANDLER
#define KC_DOCA_HANDLER DOCA_GPUNETIO_VERBS_NIC_HANDLER_GPU_SM_DB
#endif
#ifndef KC_DOCA_SHARING
#define KC_DOCA_SHARING DOCA_GPUNETIO_VERBS_RESOURCE_SHARING_MODE_EXCLUSIVE
#endif

namespace gicbench {
namespace kcost {

constexpr doca_gpu_dev_verbs_nic_handler kDocaHandler =
    static_cast<doca_gpu_dev_verbs_nic_handler>(KC_DOCA_HANDLER);
constexpr doca_gpu_dev_verbs_resource_sharing_mode kDocaSharing =
    static_cast<doca_gpu_dev_verbs_resource_sharing_mode>(KC_DOCA_SHARING);

// What every call of one launch shares (passed by pointer: one argument register pair).
struct SendArgs {
  doca_gpu_dev_verbs_qp* qps;        // DOCA's QP structures, one per lane (GPU memory)
  const gicbench_doca_lane* lanes;   // their addresses and keys (layout.py LANE_DTYPE)
  unsigned long long* status;        // first failure: GICBENCH_DOCA_* << 32 | QP
  uint64_t timeout_ns;
  uint32_t nqps;
  uint32_t size;  // bytes of each message
};
// The launcher packs these bytes (gicbench.submit.doca.kernel_cost.send_args).
static_assert(sizeof(SendArgs) == 40, "SendArgs is 40 bytes (doca kernel_cost.SEND_ARGS_BYTES)");
static_assert(offsetof(SendArgs, timeout_ns) == 24 && offsetof(SendArgs, nqps) == 32,
              "SendArgs field offsets (doca kernel_cost.send_args)");

__device__ __forceinline__ void doca_failed(const SendArgs* a, int32_t st, uint32_t q) {
  atomicCAS(a->status, 0ull, static_cast<unsigned long long>(st) << 32 | q);
}

// Message `k` of block `block`: bytes [k * size, (k + 1) * size) of its QP's source slice to
// the same offset of its destination slice. Returns false on a failure (status is set).
__device__ __forceinline__ bool send_body(const SendArgs* a, int block, uint32_t k, int wait) {
  const uint32_t q = static_cast<uint32_t>(block) % a->nqps;
  doca_gpu_dev_verbs_qp* qp = &a->qps[q];
  const gicbench_doca_lane& l = a->lanes[q];
  const uint64_t off = static_cast<uint64_t>(k) * a->size;
  uint64_t ticket = 0;
  doca_gpu_dev_verbs_put<kDocaSharing, kDocaHandler, DOCA_GPUNETIO_VERBS_EXEC_SCOPE_THREAD>(
      qp, gicbench_doca_addr(l.dst + off, l.dst_rkey_be),
      gicbench_doca_addr(l.src + off, l.src_lkey_be), a->size, &ticket);
  if (!wait) return true;
  int32_t cq = 0;
  const int32_t st = gicbench_doca_wait<kDocaSharing>(qp, ticket, a->timeout_ns, &cq);
  if (st != GICBENCH_DOCA_OK) doca_failed(a, st, q);
  return st == GICBENCH_DOCA_OK;
}

__device__ __forceinline__ uint64_t posted_on(const SendArgs* a, int i) {
  return *reinterpret_cast<const volatile uint64_t*>(&a->qps[i].sq_rsvd_index);
}

// Drain unit i (a QP): until the last WQE it reserved has completed (as cuda/doca's quiet).
__device__ __forceinline__ void drain_body(const SendArgs* a, int i) {
  if (i >= static_cast<int>(a->nqps)) return;
  const uint64_t last = posted_on(a, i);
  int32_t cq = 0;
  if (!last) return;
  const int32_t st = gicbench_doca_wait<kDocaSharing>(&a->qps[i], last - 1, a->timeout_ns, &cq);
  if (st != GICBENCH_DOCA_OK) doca_failed(a, st, static_cast<uint32_t>(i));
}

}  // namespace kcost
}  // namespace gicbench
