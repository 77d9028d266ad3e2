// gicbench -> DOCA GPUNetIO: build DOCA's device QP/CQ structure from gicbench's queue addresses.
//
// DOCA GPUNetIO's device verbs (the BSD-3 headers of the nvidia-nvshmem-cu13 wheel) post through
// a `struct doca_gpu_dev_verbs_qp` that DOCA's host library normally fills. gicbench fills it
// instead, from a plain description of one of its own QPs (`gicbench_doca_queue`, built in Python
// by gicbench.submit.doca.layout from the fabric's QueuePair/CompletionQueue and the device
// addresses of EmuFabric.register_cuda()). docs/doca.md lists every field and where it comes from.
// Include path: the extracted headers' include/ directory (-I), and cuda/ for this file.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "doca_gpunetio_device.h"

// One gicbench QP as DOCA needs it. Plain data, 8-byte fields first; the Python twin is
// gicbench.submit.doca.layout.QUEUE_DTYPE (same order, same sizes).
struct gicbench_doca_queue {
  uint64_t sq_buf;     // device address of the SQ ring (sq_wqebbs x 64 bytes)
  uint64_t sq_dbrec;   // device address of the QP's doorbell record (RCV word at +0, SND at +4)
  uint64_t sq_db;      // GPU_SM_*: the doorbell register; CPU_PROXY: the 8-byte proxy word;
                       // CPU_PROXY_FREE_FLOW: an array of sq_wqebbs 8-byte ready slots
  uint64_t cq_buf;     // device address of the send CQ's ring (cq_ncqe x 64 bytes)
  uint64_t cq_dbrec;   // device address of the send CQ's consumer-index record
  uint64_t start;      // first WQE index (and CQE index): the SQ's and CQ's count so far
  uint32_t qpn;        // 24-bit QP number
  uint32_t sq_wqebbs;  // SQ size in 64-byte WQEBBs, a power of two <= 32768
  uint32_t cqn;        // CQ number
  uint32_t cq_ncqe;    // CQ entries (a power of two; >= sq_wqebbs: one CQE per WQE)
  uint32_t nic_handler;  // enum doca_gpu_dev_verbs_nic_handler (not AUTO)
  uint32_t cq_type;      // DOCA_GPUNETIO_VERBS_CQ_64B or _64B_COLLAPSED
  uint32_t mem_type;     // where the queues live: DOCA_GPUNETIO_VERBS_MEM_TYPE_HOST or _GPU
  uint32_t reserved;
};
static_assert(sizeof(gicbench_doca_queue) == 80, "gicbench_doca_queue is 80 bytes (layout.py)");
static_assert(sizeof(doca_gpu_dev_verbs_qp) == 296, "layout.py QP_BYTES");
static_assert(offsetof(gicbench_doca_queue, qpn) == 48, "layout.py QUEUE_DTYPE order");

// The DOCA version the adaptor was written against (VERSION of the extracted headers records
// the one compiled); another major version may change the structures' meaning.
static_assert(DOCA_GPUNETIO_VERSION_MAJOR == 4, "cuda/doca was written for DOCA GPUNetIO 4.x");

__host__ __device__ inline uint32_t gicbench_doca_be32(uint32_t v) {
  return (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
}

// Fill `qp` (any memory the caller can write) from `q`. Host and device: the init kernel runs it
// per QP; tests/c/doca_build_host.cu runs it on the CPU. The MLX5_SND_DBR word is at +4 of
// gicbench's record; DOCA writes the send producer index there (big-endian, 16 bits).
__host__ __device__ inline void gicbench_doca_build(const gicbench_doca_queue& q,
                                                    doca_gpu_dev_verbs_qp* qp) {
  memset(qp, 0, sizeof(*qp));
  const uint32_t s8 = (q.qpn & 0xffffffu) << 8;
  qp->sq_rsvd_index = q.start;
  qp->sq_ready_index = q.start;
  qp->sq_wqe_pi = q.start;
  qp->sq_num = q.qpn & 0xffffffu;
  qp->sq_num_shift8 = s8;
  qp->sq_num_shift8_be = gicbench_doca_be32(s8);
  qp->sq_num_shift8_be_1ds = gicbench_doca_be32(s8 | 1);
  qp->sq_num_shift8_be_2ds = gicbench_doca_be32(s8 | 2);
  qp->sq_num_shift8_be_3ds = gicbench_doca_be32(s8 | 3);
  qp->sq_num_shift8_be_4ds = gicbench_doca_be32(s8 | 4);
  qp->sq_num_shift8_be_5ds = gicbench_doca_be32(s8 | 5);
  qp->sq_lock = 0;
  qp->sq_wqe_num = static_cast<uint16_t>(q.sq_wqebbs);
  qp->sq_wqe_mask = static_cast<uint16_t>(q.sq_wqebbs - 1);
  qp->sq_wqe_daddr = reinterpret_cast<uint8_t*>(q.sq_buf);
  qp->sq_dbrec = reinterpret_cast<__be32*>(q.sq_dbrec + 4 * DOCA_GPUNETIO_IB_MLX5_SND_DBR);
  qp->sq_db = reinterpret_cast<uint64_t*>(q.sq_db);
  doca_gpu_dev_verbs_cq& cq = qp->cq_sq;
  cq.cqe_daddr = reinterpret_cast<uint8_t*>(q.cq_buf);
  cq.cq_num = q.cqn;
  cq.cqe_num = q.cq_ncqe;
  cq.dbrec = reinterpret_cast<__be32*>(q.cq_dbrec);
  cq.cqe_ci = q.start;
  cq.cqe_mask = q.cq_ncqe - 1;
  cq.cqe_size = DOCA_GPUNETIO_VERBS_CQE_SIZE;
  cq.cq_type = static_cast<doca_gpu_dev_verbs_cq_type>(q.cq_type);
  cq.cqe_rsvd = 0;
  cq.mem_type = static_cast<doca_gpu_dev_verbs_mem_type>(q.mem_type);
  qp->nic_handler = static_cast<doca_gpu_dev_verbs_nic_handler>(q.nic_handler);
  qp->mem_type = static_cast<doca_gpu_dev_verbs_mem_type>(q.mem_type);
}
