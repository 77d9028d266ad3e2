// Kernels of bench/cuda_engine.py around the CUDA engine (cuda/emu_engine.cu): a producer that
// prefills SQs with 8-byte inline RDMA WRITEs (not timed), a ringer that publishes them (the
// record, then an IBGDA-style doorbell) and stamps the start, a waiter that stamps when every
// QP's last CQE is there, the bare-bones kernel the engine is compared with, and a one-thread
// pinger for doorbell-to-CQE latency. Times: %globaltimer (ns).
#include "mlx5.cuh"

namespace m5 = gicbench::mlx5;

namespace {
__device__ __forceinline__ uint64_t gtime() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
template <class T>
__device__ __forceinline__ T ld_vol(const T* p) {
  return *reinterpret_cast<const volatile T*>(p);
}
template <class T>
__device__ __forceinline__ void st_vol(T* p, T v) {
  *reinterpret_cast<volatile T*>(p) = v;
}
// The target word of WQE k of QP q: every WQE of a lap writes its own 8 bytes.
__device__ __forceinline__ uint64_t target(uint64_t base, uint32_t q, uint32_t depth, uint32_t k) {
  return base + (static_cast<uint64_t>(q) * depth + k) * 8;
}
constexpr uint64_t kSpinNs = 2000000000ull;  // a waiter gives up after 2 s (reported, no hang)
}  // namespace

// Thread (q, k): WQE lap*depth + k of QP q, signaled every 32nd (the 32nd, 64th, ...).
extern "C" __global__ void bench_fill(const uint64_t* rings, const uint32_t* qpns, uint32_t nqps,
                                      uint32_t depth, uint32_t lap, uint64_t raddr, uint32_t rkey) {
  const uint64_t t = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  if (t >= static_cast<uint64_t>(nqps) * depth) return;
  const uint32_t q = static_cast<uint32_t>(t / depth), k = static_cast<uint32_t>(t % depth);
  const m5::SqRing sq{reinterpret_cast<uint8_t*>(rings[q]), depth};
  const uint32_t pi = lap * depth + k;
  const uint64_t payload = (static_cast<uint64_t>(q + 1) << 32) | pi;  // never 0
  m5::build_rdma_write(sq, pi, qpns[q], target(raddr, q, depth, k), rkey, &payload, 8, 0, 0,
                       (k % 32 == 31) ? m5::kCqUpdate : 0, false, 0);
}

// Thread q: QP q's record, then its doorbell (next producer index, opcode 0, ds 0).
extern "C" __global__ void bench_ring(const uint64_t* dbrecs, const uint64_t* doorbells,
                                      const uint32_t* qpns, uint32_t nqps, uint32_t pi,
                                      unsigned long long* t_start) {
  const uint32_t q = blockIdx.x * blockDim.x + threadIdx.x;
  if (q == 0) *t_start = gtime();
  if (q >= nqps) return;
  __threadfence();
  st_vol(reinterpret_cast<uint32_t*>(dbrecs[q]) + m5::kSndDbr, m5::dbrec_value(pi));
  __threadfence_system();
  uint8_t ctrl[16];
  m5::set_ctrl_seg(ctrl, static_cast<uint16_t>(pi), 0, 0, qpns[q], 0, 0, 0, 0);
  st_vol(reinterpret_cast<uint64_t*>(doorbells[q]), m5::doorbell_value(ctrl));
}

// Thread q: waits until QP q's CQ holds the CQE of WQE `last` at consumer index `ci` (the lap's
// last CQE); t_end = the latest arrival. failed counts QPs that gave up.
extern "C" __global__ void bench_wait(const uint64_t* cqs, uint32_t nqps, uint32_t ncqe, uint32_t ci,
                                      uint32_t last, unsigned long long* t_end,
                                      unsigned int* failed) {
  const uint32_t q = blockIdx.x * blockDim.x + threadIdx.x;
  if (q >= nqps) return;
  const uint8_t* cqe = reinterpret_cast<const uint8_t*>(cqs[q]) + (ci & (ncqe - 1)) * m5::kCqeBytes;
  const uint64_t t0 = gtime();
  for (;;) {
    const uint8_t op_own = ld_vol(cqe + m5::kCqeOpOwn);
    if ((op_own >> 4) != m5::kCqeInvalid && (op_own & 1) == m5::cqe_owner_for(ci, ncqe)) {
      const uint16_t wc = m5::bswap16(ld_vol(reinterpret_cast<const uint16_t*>(cqe + m5::kCqeWqeCounter)));
      if (wc == (last & 0xffff)) break;
    }
    if (gtime() - t0 > kSpinNs) {
      atomicAdd(failed, 1u);
      return;
    }
  }
  atomicMax(t_end, static_cast<unsigned long long>(gtime()));
}

// The bare-bones engine: warp w takes QP w's prefilled WQEs 32 at a time, checks each index and
// QPN, decodes the raddr, stores the 8-byte payload and writes one CQE per 32 (no doorbells, no
// keys, no counters).
extern "C" __global__ void bench_bare(const uint64_t* rings, const uint64_t* cqs, const uint32_t* qpns,
                                      uint32_t nqps, uint32_t depth, uint32_t lap, uint32_t ncqe,
                                      unsigned int* bad) {
  const uint32_t lane = threadIdx.x & 31;
  const uint32_t q = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (q >= nqps) return;
  const m5::SqRing sq{reinterpret_cast<uint8_t*>(rings[q]), depth};
  uint8_t* cq = reinterpret_cast<uint8_t*>(cqs[q]);
  const uint32_t qpn = qpns[q];
  for (uint32_t k = 0; k < depth; k += 32) {
    const uint32_t pi = lap * depth + k + lane;
    const m5::CtrlView c = m5::get_ctrl_seg(sq.wqe(pi));
    const bool ok = c.wqe_index == (pi & 0xffff) && c.qpn == qpn;
    if (ok) {
      const m5::RaddrView ra = m5::get_raddr_seg(sq.seg(pi, 1));
      const uint32_t* w = reinterpret_cast<const uint32_t*>(sq.seg(pi, 2) + 4);  // 4-aligned
      const uint64_t v = w[0] | (static_cast<uint64_t>(w[1]) << 32);
      *reinterpret_cast<uint64_t*>(ra.raddr) = v;
    } else {
      atomicAdd(bad, 1u);
    }
    __syncwarp();
    if (lane == 31) {
      const uint32_t ci = (lap * depth + k) / 32;
      uint8_t* cqe = cq + (ci & (ncqe - 1)) * m5::kCqeBytes;
      __threadfence();
      const uint8_t op_own = m5::fill_req_cqe(cqe, qpn, m5::kOpRdmaWrite, static_cast<uint16_t>(pi),
                                              8, 0, m5::cqe_owner_for(ci, ncqe));
      __threadfence();
      st_vol(cqe + m5::kCqeOpOwn, op_own);
    }
  }
}

// One thread: n signaled 8-byte inline writes on one QP, one at a time; out[i] = ns from the
// doorbell store to the CQE. WQE indices from pi0, CQ consumer index from ci0 (published after
// each CQE). out[i] = 0 from the first that gave up (2 s).
extern "C" __global__ void bench_ping(uint8_t* ring, uint32_t wqebbs, uint32_t* dbrec,
                                      uint64_t* doorbell, uint8_t* cq, uint32_t* cq_dbrec,
                                      uint32_t ncqe, uint32_t qpn, uint64_t raddr, uint32_t rkey,
                                      uint32_t n, uint32_t pi0, uint32_t ci0,
                                      unsigned long long* out, unsigned long long* t0_out) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const m5::SqRing sq{ring, wqebbs};
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t pi = pi0 + i, ci = ci0 + i;
    const uint64_t payload = pi;
    m5::build_rdma_write(sq, pi, qpn, raddr + 8 * (i % 64), rkey, &payload, 8, 0, 0, m5::kCqUpdate,
                         false, 0);
    __threadfence_system();
    st_vol(dbrec + m5::kSndDbr, m5::dbrec_value(pi + 1));
    __threadfence_system();
    uint8_t ctrl[16];
    m5::set_ctrl_seg(ctrl, static_cast<uint16_t>(pi + 1), 0, 0, qpn, 0, 0, 0, 0);
    const uint64_t t0 = gtime();
    st_vol(doorbell, m5::doorbell_value(ctrl));
    const uint8_t* cqe = cq + (ci & (ncqe - 1)) * m5::kCqeBytes;
    for (;;) {
      const uint8_t op_own = ld_vol(cqe + m5::kCqeOpOwn);
      if ((op_own >> 4) != m5::kCqeInvalid && (op_own & 1) == m5::cqe_owner_for(ci, ncqe)) break;
      if (gtime() - t0 > kSpinNs) {
        for (uint32_t j = i; j < n; ++j) out[j] = 0;
        return;
      }
    }
    out[i] = gtime() - t0;
    if (t0_out) t0_out[i] = t0;  // the doorbell's time, for the engine's stamps (--stamps)
    st_vol(cq_dbrec, m5::cq_ci_value(ci + 1));
  }
}

// The floor of the doorbell-to-CQE hand-off on one GPU, for the pinger above: lane 0 of one warp
// polls the doorbell word (as the engine's pass does), reads the WQE's 8-byte inline payload,
// stores it at the WQE's raddr, fences at GPU scope (payload before CQE), and writes the CQE's
// op_own with the owner bit the pinger waits for. Every check, lock and count of the engine is
// left out: what remains is the mechanism (two GPU kernels handing two words back and forth
// through L2). Serves n doorbells; gives up after kSpinNs without one (*failed set).
extern "C" __global__ void bench_echo(const uint64_t* doorbell, const uint8_t* ring,
                                      uint32_t wqebbs, uint8_t* cq, uint32_t ncqe, uint32_t n,
                                      uint32_t pi0, uint32_t* failed) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const m5::SqRing sq{const_cast<uint8_t*>(ring), wqebbs};
  uint64_t last = 0;  // the doorbell word starts zeroed; every ring stores a new value
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t t0 = gtime();
    uint64_t db;
    while ((db = ld_vol(doorbell)) == last) {
      if (gtime() - t0 > kSpinNs) {
        *failed = 1;
        return;
      }
    }
    last = db;
    __threadfence();  // acquire: the WQE the doorbell announces, not a stale line of the ring
    const uint64_t raddr = m5::get_raddr_seg(sq.wqe(pi0 + i) + m5::kSegBytes).raddr;
    uint64_t v;
    m5::get_inline_payload(sq, pi0 + i, 2, &v, 8);  // ctrl, raddr, then the inline segment
    st_vol(reinterpret_cast<uint64_t*>(raddr), v);
    __threadfence();  // the payload before the CQE, for this GPU's threads
    st_vol(cq + ((pi0 + i) & (ncqe - 1)) * m5::kCqeBytes + m5::kCqeOpOwn,
           static_cast<uint8_t>((m5::kCqeReq << 4) | m5::cqe_owner_for(pi0 + i, ncqe)));
  }
}
