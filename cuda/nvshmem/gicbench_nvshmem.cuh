// gicbench -> NVSHMEM: NVSHMEM's device API and its IBGDA transport, included unchanged.
//
// NVSHMEM's device code (the Apache-2.0 headers of the nvidia-nvshmem-cu13 wheel, fetched into
// .cache/nvshmem/<version>/ by gicbench.submit.nvshmem.headers) posts through two __constant__
// device states that NVSHMEM's host library normally fills: nvshmemi_device_state_d (PE numbers,
// the symmetric heap's bases, which transport) and nvshmemi_ibgda_device_state_d (the RC QPs and
// their CQs, the key tables, the batching threshold). gicbench fills both from its own fabric
// objects (docs/nvshmem.md, gicbench.submit.nvshmem.layout), so every WQE, doorbell and CQ poll
// below is NVSHMEM's code on gicbench's queues.
//
// What a TU needs to compile NVSHMEM's device code without libnvshmem_device:
// - NVSHMEM_ENABLE_ALL_DEVICE_INLINING: the public API (nvshmem_putmem_nbi, nvshmem_p,
//   nvshmem_quiet) then inlines the transport (transfer_device.cuh) instead of calling the
//   noinline definitions libnvshmem_device.a would link in (nvshmemi_transfer_api.cuh).
// - <infiniband/mlx5dv.h> (rdma-core's libibverbs-dev): with the inlining, NVSHMEM's build
//   options drop IBGDA where it is missing; checked below.
// - a whole-program (non -rdc) compile: EXTERN_CONSTANT (device_host/nvshmemi_extern_constant.h)
//   is then a plain __constant__, so the headers themselves define the device states in this
//   module (nvshmemi_device_state_d, nvshmemi_ibgda_device_state_d, and the unused
//   nvshmemi_gpunetio_device_state_d, nvshmemi_device_lib_version_d): the convention of
//   nvshmemx_cumodule_init, which fills them by name (cuModuleGetGlobal). With -rdc they would be
//   extern and unresolved without libnvshmem_device, so -rdc is refused.
// GICBENCH_NVSHMEM_GPUMEM_ONLY=1 builds NVSHMEM's GPU-memory-only variant
// (NVSHMEM_IBGDA_SUPPORT_GPUMEM_ONLY: dbrec and doorbell as st.release.gpu stores, relaxed
// gpu-scope index loads, __threadfence instead of __threadfence_system).
#pragma once

#if defined(__CUDACC_RDC__)
#error "cuda/nvshmem needs a whole-program compile (no -rdc): the device states are this module's"
#endif

#ifndef NVSHMEM_ENABLE_ALL_DEVICE_INLINING
#define NVSHMEM_ENABLE_ALL_DEVICE_INLINING
#endif
#if defined(GICBENCH_NVSHMEM_GPUMEM_ONLY) && GICBENCH_NVSHMEM_GPUMEM_ONLY
#define NVSHMEM_IBGDA_SUPPORT_GPUMEM_ONLY
#endif

#include <stddef.h>
#include <stdint.h>

#include "nvshmem.h"
#include "non_abi/device/pt-to-pt/ibgda_device.cuh"

#ifndef NVSHMEM_IBGDA_SUPPORT
#error "NVSHMEM's IBGDA transport is off: <infiniband/mlx5dv.h> is missing (libibverbs-dev)"
#endif

// The version and structure sizes gicbench.submit.nvshmem.layout was written against; another
// NVSHMEM may move fields (tests/test_nvshmem_layout.py checks every offset gicbench writes).
static_assert(NVSHMEM_VENDOR_MAJOR_VERSION == 3 && NVSHMEM_VENDOR_MINOR_VERSION == 8,
              "cuda/nvshmem was written for NVSHMEM 3.8");
static_assert(sizeof(nvshmemi_ibgda_device_state_t) == 8384, "layout.py IBGDA_STATE_BYTES");
static_assert(sizeof(nvshmemi_ibgda_device_qp_t) == 184, "layout.py QP_BYTES");
static_assert(sizeof(nvshmemi_ibgda_device_cq_t) == 72, "layout.py CQ_BYTES");
static_assert(sizeof(nvshmemi_device_host_state_t) == 848, "layout.py DEVICE_STATE_BYTES");

// What one issuing thread does: which API, which op, which quiet.
enum gicbench_nvshmem_path : uint32_t {
  GICBENCH_NVSHMEM_INTERNAL = 0,  // nvshmemi_ibgda_rma_nbi / _rma_p / _put_signal, IBGDA's quiet
  GICBENCH_NVSHMEM_PUBLIC = 1,    // nvshmem_putmem_nbi / nvshmem_uint64_p /
                                  // nvshmem_putmem_signal_nbi, nvshmem_quiet / nvshmemx_qp_quiet
};
enum gicbench_nvshmem_op : uint32_t {
  GICBENCH_NVSHMEM_PUT = 0,         // RDMA WRITE of `size` bytes from `src`
  GICBENCH_NVSHMEM_P = 1,           // inline RDMA WRITE of one uint64
  GICBENCH_NVSHMEM_PUT_SIGNAL = 2,  // WRITE, then a masked fetch-add of `value` on `sig`
};
enum gicbench_nvshmem_quiet : uint32_t {
  GICBENCH_NVSHMEM_QUIET_QP = 0,   // internal only: the one QP the op used (ibgda_quiet)
  GICBENCH_NVSHMEM_QUIET_PE = 1,   // the default QPs to the op's PE (nvshmemx_qp_quiet)
  GICBENCH_NVSHMEM_QUIET_ALL = 2,  // every configured QP of every PE (nvshmem_quiet)
};

// One op sequence. Addresses are NVSHMEM's: symmetric-heap addresses (heap_base + offset, for
// the peer's data too) or a registered local-only buffer; NVSHMEM translates them through the
// key tables and peer_heap_base_remote.
struct gicbench_nvshmem_job {
  uint64_t dst;     // symmetric address of op 0's destination
  uint64_t src;     // local source of op 0 (PUT, PUT_SIGNAL)
  uint64_t sig;     // symmetric address of the peer's 8-byte signal word (PUT_SIGNAL)
  uint64_t value;   // P writes value + i; PUT_SIGNAL adds value to the signal per op
  uint32_t size;    // bytes per PUT / PUT_SIGNAL (P writes 8)
  uint32_t iters;   // ops
  uint32_t pe;      // the destination PE (never this PE: RC QPs do not loop back)
  uint32_t stride;  // bytes between the destinations (and sources) of consecutive ops
};
static_assert(sizeof(gicbench_nvshmem_job) == 48, "layout.py JOB_DTYPE");

// Per op, from the call's start to the call's return (issue) and to the quiet's return
// (complete): clock64 cycles, and %globaltimer nanoseconds (the GPU's wall clock, as gicbench's
// other GPU submitters time their ops).
struct gicbench_nvshmem_sample {
  uint64_t issue;
  uint64_t complete;
  uint64_t issue_ns;
  uint64_t complete_ns;
};
static_assert(sizeof(gicbench_nvshmem_sample) == 32, "layout.py SAMPLE_DTYPE");

#ifdef __CUDA_ARCH__

__device__ inline uint64_t gicbench_nvshmem_globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

template <gicbench_nvshmem_path PATH, gicbench_nvshmem_op OP>
__device__ inline void gicbench_nvshmem_issue(const gicbench_nvshmem_job& j, uint32_t i) {
  char* dst = reinterpret_cast<char*>(j.dst) + static_cast<uint64_t>(i) * j.stride;
  char* src = reinterpret_cast<char*>(j.src) + static_cast<uint64_t>(i) * j.stride;
  const int pe = static_cast<int>(j.pe);
  if constexpr (PATH == GICBENCH_NVSHMEM_INTERNAL) {
    if constexpr (OP == GICBENCH_NVSHMEM_PUT) {
      nvshmemi_ibgda_rma_nbi<NVSHMEMI_THREADGROUP_THREAD, NVSHMEMI_OP_PUT>(
          dst, src, j.size, pe, NVSHMEMX_QP_DEFAULT, nullptr);
    } else if constexpr (OP == GICBENCH_NVSHMEM_P) {
      nvshmemi_ibgda_rma_p<uint64_t>(dst, j.value + i, pe);
    } else {
      nvshmemi_ibgda_put_signal<NVSHMEMI_THREADGROUP_THREAD>(
          dst, src, j.size, reinterpret_cast<void*>(j.sig), j.value, NVSHMEMI_AMO_SIGNAL_ADD, pe,
          true);
    }
  } else {
    if constexpr (OP == GICBENCH_NVSHMEM_PUT) {
      nvshmem_putmem_nbi(dst, src, j.size, pe);
    } else if constexpr (OP == GICBENCH_NVSHMEM_P) {
      nvshmem_uint64_p(reinterpret_cast<uint64_t*>(dst), j.value + i, pe);
    } else {
      nvshmem_putmem_signal_nbi(dst, src, j.size, reinterpret_cast<uint64_t*>(j.sig), j.value,
                                NVSHMEM_SIGNAL_ADD, pe);
    }
  }
}

template <gicbench_nvshmem_path PATH, gicbench_nvshmem_quiet Q>
__device__ inline void gicbench_nvshmem_wait(int pe) {
  static_assert(PATH == GICBENCH_NVSHMEM_INTERNAL || Q != GICBENCH_NVSHMEM_QUIET_QP,
                "the public API has no one-QP quiet");
  if constexpr (PATH == GICBENCH_NVSHMEM_INTERNAL) {
    if constexpr (Q == GICBENCH_NVSHMEM_QUIET_QP) {
      // The QP the op took: with rc_map_type CTA the choice depends on the block only.
      bool shared = false;
      ibgda_quiet(ibgda_get_qp(pe, &shared));
    } else {
      nvshmemi_ibgda_qp_quiet<NVSHMEMI_THREADGROUP_THREAD>(
          false, Q == GICBENCH_NVSHMEM_QUIET_PE ? pe : NVSHMEMX_PE_ANY, nullptr,
          Q == GICBENCH_NVSHMEM_QUIET_PE ? NVSHMEMX_QP_DEFAULT : NVSHMEMX_QP_ALL);
    }
  } else if constexpr (Q == GICBENCH_NVSHMEM_QUIET_PE) {
    nvshmemx_qp_quiet(pe, nullptr, NVSHMEMX_QP_DEFAULT);
  } else {
    nvshmem_quiet();
  }
}

// One thread per block issues; every op is followed by its quiet (single-op's latency shape).
template <gicbench_nvshmem_path PATH, gicbench_nvshmem_op OP, gicbench_nvshmem_quiet Q>
__device__ inline void gicbench_nvshmem_latency(const gicbench_nvshmem_job* job,
                                                gicbench_nvshmem_sample* out) {
  if (threadIdx.x != 0) return;
  const gicbench_nvshmem_job j = *job;
  for (uint32_t i = 0; i < j.iters; ++i) {
    const uint64_t g0 = gicbench_nvshmem_globaltimer();
    const long long t0 = clock64();
    gicbench_nvshmem_issue<PATH, OP>(j, i);
    const long long t1 = clock64();
    const uint64_t g1 = gicbench_nvshmem_globaltimer();
    gicbench_nvshmem_wait<PATH, Q>(static_cast<int>(j.pe));
    const long long t2 = clock64();
    const uint64_t g2 = gicbench_nvshmem_globaltimer();
    out[static_cast<uint64_t>(blockIdx.x) * j.iters + i] = {
        static_cast<uint64_t>(t1 - t0), static_cast<uint64_t>(t2 - t0), g1 - g0, g2 - g0};
  }
}

#endif  // __CUDA_ARCH__
