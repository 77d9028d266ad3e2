// gicbench's loop shapes over NVSHMEM's device API: what `--submitter nvshmem` launches.
//
// Addresses handed to NVSHMEM here are the emulated NIC's own (the lanes' NIC addresses): the
// submitter fills the device state so that the symmetric heap is the whole NIC address space in
// one key chunk (heap_base 0, every peer_heap_base_remote 0), so NVSHMEM's raddr equals the
// lane's remote address and its key lookups return the lane's keys (docs/nvshmem.md, "Through
// the harness"). NVSHMEM picks the QP itself (rc_map_type CTA: slot = CTA id mod
// num_default_rc_per_pe): a launch puts the unit that drives slot s of a peer in CTA s (single)
// or CTA d * slots + s (rate), and the submitter checks that choice with gicbench_nvshmem_qp_of.
//
// Every wait of gicbench's own (a polled sequence word) is bounded by the job's timeout and ends
// with a status; NVSHMEM's own polls (its quiet, its slot reservation) have no bound, so the host
// bounds the launch and reads NVSHMEM's QP bookkeeping when it expires.
#pragma once

#include "nvshmem/gicbench_nvshmem.cuh"

enum gicbench_nvshmem_mode : uint32_t {
  GICBENCH_NVSHMEM_MODE_LATENCY = 0,  // op, then its quiet; issue and completion timed
  GICBENCH_NVSHMEM_MODE_RTT = 1,      // op, then wait for the peer's answer in `watch`
  GICBENCH_NVSHMEM_MODE_RESPOND = 2,  // wait for request n in `watch`, then answer with the op
};

enum gicbench_nvshmem_status : uint32_t {
  GICBENCH_NVSHMEM_OK = 0,
  GICBENCH_NVSHMEM_NO_SEQ = 2,   // the sequence word did not reach the expected value in time
  GICBENCH_NVSHMEM_ABORTED = 3,  // the host set the abort word (a signal)
};

// One issuing thread's job (single-op's latency, round trip and responder).
struct gicbench_nvshmem_single_job {
  uint64_t dst;         // the lane's remote address (NVSHMEM address, see above)
  uint64_t src;         // the lane's local source (NIC address)
  uint64_t src_dev;     // the same source as the GPU reaches it: its last 8 bytes are stamped
  uint64_t watch_dev;   // GPU address of the 8-byte sequence word polled (RTT, RESPOND)
  uint64_t timeout_ns;  // bound of each wait for a sequence word
  uint32_t size;        // bytes per op (the sequence word is its last 8)
  uint32_t iters;       // ops (warm-up included)
  uint32_t pe;          // the destination PE
  uint32_t mode;        // gicbench_nvshmem_mode
  uint32_t quiet;       // gicbench_nvshmem_quiet after each op (LATENCY)
  uint32_t cta;         // the CTA that issues (the lane's QP slot); the others return
};
static_assert(sizeof(gicbench_nvshmem_single_job) == 64, "layout.py SINGLE_JOB_DTYPE");

struct gicbench_nvshmem_single_result {
  uint32_t status;  // gicbench_nvshmem_status
  uint32_t done;    // ops completed
  uint64_t seen;    // the sequence word's value when a wait gave up
};
static_assert(sizeof(gicbench_nvshmem_single_result) == 16, "layout.py RESULT_DTYPE");

// One CTA of a rate launch: the lane it drives, or none (pe < 0: a slot no lane uses).
struct gicbench_nvshmem_rate_lane {
  uint64_t dst;      // remote address of the lane's slice
  uint64_t src;      // NIC address of the lane's source slice
  uint64_t src_dev;  // GPU copy of the source slice (P reads its values there)
  int32_t pe;
  uint32_t pad;
};
static_assert(sizeof(gicbench_nvshmem_rate_lane) == 32, "layout.py RATE_LANE_DTYPE");

struct gicbench_nvshmem_rate_job {
  uint32_t size;         // bytes per message
  uint32_t per_thread;   // messages each thread posts in this launch
  uint32_t first;        // messages each thread posted in earlier launches (slot numbering)
  uint32_t slots;        // messages a lane slice holds (message k lands in slot k mod slots)
  uint32_t window;       // messages of one thread between two timestamps (0: none)
  uint32_t max_windows;  // timestamps per thread in `marks`
  uint32_t quiet;        // gicbench_nvshmem_quiet at the end of each CTA
  uint32_t pad;
};
static_assert(sizeof(gicbench_nvshmem_rate_job) == 32, "layout.py RATE_JOB_DTYPE");

struct gicbench_nvshmem_rate_result {
  uint64_t start_ns;  // the thread's first message
  uint64_t end_ns;    // after its CTA's quiet (the drain)
  uint64_t posted;    // messages it posted (fewer than per_thread only when aborted)
};
static_assert(sizeof(gicbench_nvshmem_rate_result) == 24, "layout.py RATE_RESULT_DTYPE");

#ifdef __CUDA_ARCH__

__device__ inline uint64_t gicbench_nvshmem_ld_seq(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// The op of a lane: PUT `size` bytes, P one uint64 `value`, PUT_SIGNAL `size - 8` bytes and a
// signal add of 1 on the destination's last 8 bytes (the sequence word).
template <gicbench_nvshmem_path PATH, gicbench_nvshmem_op OP>
__device__ inline void gicbench_nvshmem_op_at(uint64_t dst, uint64_t src, uint32_t size,
                                              uint64_t value, int pe) {
  void* d = reinterpret_cast<void*>(dst);
  void* s = reinterpret_cast<void*>(src);
  if constexpr (PATH == GICBENCH_NVSHMEM_INTERNAL) {
    if constexpr (OP == GICBENCH_NVSHMEM_PUT) {
      nvshmemi_ibgda_rma_nbi<NVSHMEMI_THREADGROUP_THREAD, NVSHMEMI_OP_PUT>(
          d, s, size, pe, NVSHMEMX_QP_DEFAULT, nullptr);
    } else if constexpr (OP == GICBENCH_NVSHMEM_P) {
      nvshmemi_ibgda_rma_p<uint64_t>(d, value, pe);
    } else {
      nvshmemi_ibgda_put_signal<NVSHMEMI_THREADGROUP_THREAD>(
          d, s, size - 8, reinterpret_cast<void*>(dst + size - 8), 1, NVSHMEMI_AMO_SIGNAL_ADD, pe,
          true);
    }
  } else {
    if constexpr (OP == GICBENCH_NVSHMEM_PUT) {
      nvshmem_putmem_nbi(d, s, size, pe);
    } else if constexpr (OP == GICBENCH_NVSHMEM_P) {
      nvshmem_uint64_p(reinterpret_cast<uint64_t*>(d), value, pe);
    } else {
      nvshmem_putmem_signal_nbi(d, s, size - 8, reinterpret_cast<uint64_t*>(dst + size - 8), 1,
                                NVSHMEM_SIGNAL_ADD, pe);
    }
  }
}

template <gicbench_nvshmem_path PATH>
__device__ inline void gicbench_nvshmem_quiet_as(uint32_t quiet, int pe) {
  if (quiet == GICBENCH_NVSHMEM_QUIET_ALL) {
    gicbench_nvshmem_wait<PATH, GICBENCH_NVSHMEM_QUIET_ALL>(pe);
  } else if constexpr (PATH == GICBENCH_NVSHMEM_INTERNAL) {
    gicbench_nvshmem_wait<PATH, GICBENCH_NVSHMEM_QUIET_QP>(pe);
  } else {
    gicbench_nvshmem_wait<PATH, GICBENCH_NVSHMEM_QUIET_PE>(pe);
  }
}

// The host's abort word (pinned, mapped): non-zero once a signal asked the launch to end.
__device__ inline bool gicbench_nvshmem_aborted(const uint32_t* abort) {
  return *reinterpret_cast<const volatile uint32_t*>(abort) != 0;
}

// Waits until *word == want: OK, or NO_SEQ (and *seen) when timeout_ns passed first, or ABORTED.
__device__ inline uint32_t gicbench_nvshmem_wait_seq(const uint64_t* word, uint64_t want,
                                                     uint64_t timeout_ns, uint64_t* seen,
                                                     const uint32_t* abort) {
  const uint64_t t0 = gicbench_nvshmem_globaltimer();
  uint64_t v = gicbench_nvshmem_ld_seq(word);
  for (uint32_t n = 1; v != want; ++n) {
    if (gicbench_nvshmem_globaltimer() - t0 > timeout_ns) {
      *seen = v;
      return GICBENCH_NVSHMEM_NO_SEQ;
    }
    if (n % 1024 == 0 && gicbench_nvshmem_aborted(abort)) return GICBENCH_NVSHMEM_ABORTED;
    v = gicbench_nvshmem_ld_seq(word);
  }
  return GICBENCH_NVSHMEM_OK;
}

// One thread of CTA job.cta issues job.iters ops on the lane (op i carries sequence number
// i + 1 in its last 8 bytes), timed per op as gicbench_nvshmem_latency does.
template <gicbench_nvshmem_path PATH, gicbench_nvshmem_op OP>
__device__ inline void gicbench_nvshmem_single(const gicbench_nvshmem_single_job* job,
                                               gicbench_nvshmem_sample* out,
                                               gicbench_nvshmem_single_result* res,
                                               const uint32_t* abort) {
  if (threadIdx.x != 0 || blockIdx.x != job->cta) return;
  const gicbench_nvshmem_single_job j = *job;
  const int pe = static_cast<int>(j.pe);
  uint64_t* stamp = reinterpret_cast<uint64_t*>(j.src_dev + j.size - 8);
  const uint64_t* watch = reinterpret_cast<const uint64_t*>(j.watch_dev);
  gicbench_nvshmem_single_result r{GICBENCH_NVSHMEM_OK, 0, 0};
  for (uint32_t i = 0; i < j.iters; ++i) {
    const uint64_t seq = i + 1;
    if (gicbench_nvshmem_aborted(abort)) {  // outside the timed section
      r.status = GICBENCH_NVSHMEM_ABORTED;
      break;
    }
    if (j.mode == GICBENCH_NVSHMEM_MODE_RESPOND &&
        (r.status = gicbench_nvshmem_wait_seq(watch, seq, j.timeout_ns, &r.seen, abort)) != 0)
      break;
    // A PUT carries the sequence word in its source; NVSHMEM's put fences before it rings.
    if constexpr (OP == GICBENCH_NVSHMEM_PUT) *reinterpret_cast<volatile uint64_t*>(stamp) = seq;
    const uint64_t g0 = gicbench_nvshmem_globaltimer();
    const long long t0 = clock64();
    gicbench_nvshmem_op_at<PATH, OP>(j.dst, j.src, j.size, seq, pe);
    const long long t1 = clock64();
    const uint64_t g1 = gicbench_nvshmem_globaltimer();
    if (j.mode == GICBENCH_NVSHMEM_MODE_LATENCY) {
      gicbench_nvshmem_quiet_as<PATH>(j.quiet, pe);
    } else if (j.mode == GICBENCH_NVSHMEM_MODE_RTT &&
               (r.status = gicbench_nvshmem_wait_seq(watch, seq, j.timeout_ns, &r.seen,
                                                     abort)) != 0) {
      break;
    }
    const long long t2 = clock64();
    const uint64_t g2 = gicbench_nvshmem_globaltimer();
    if (j.mode != GICBENCH_NVSHMEM_MODE_RESPOND)
      out[i] = {static_cast<uint64_t>(t1 - t0), static_cast<uint64_t>(t2 - t0), g1 - g0, g2 - g0};
    r.done = i + 1;
  }
  // Every op of the launch completed before the kernel ends (a round trip's and the
  // responder's ops were never quieted one by one).
  if (j.mode != GICBENCH_NVSHMEM_MODE_LATENCY)
    gicbench_nvshmem_wait<PATH, GICBENCH_NVSHMEM_QUIET_ALL>(pe);
  *res = r;
}

// Rate: CTA b drives lanes[b] with blockDim.x threads; thread t's m-th message of the launch is
// the lane's message k = (first + m) * blockDim.x + t, in slot k mod slots of the lane's slice.
template <gicbench_nvshmem_path PATH, gicbench_nvshmem_op OP>
__device__ inline void gicbench_nvshmem_rate(const gicbench_nvshmem_rate_job* job,
                                             const gicbench_nvshmem_rate_lane* lanes,
                                             gicbench_nvshmem_rate_result* res, uint64_t* marks,
                                             const uint32_t* abort) {
  const gicbench_nvshmem_rate_lane ln = lanes[blockIdx.x];
  if (ln.pe < 0) return;  // a QP slot no lane of this launch uses
  const gicbench_nvshmem_rate_job j = *job;
  const uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x;
  uint64_t* my_marks = marks + static_cast<uint64_t>(tid) * j.max_windows;
  uint32_t w = 0;
  const uint64_t start = gicbench_nvshmem_globaltimer();
  uint32_t m = 0;
  for (; m < j.per_thread; ++m) {
    // a read across PCIe every 64 messages of a thread: a signal ends the launch promptly
    if (m % 64 == 0 && gicbench_nvshmem_aborted(abort)) break;
    const uint64_t k = static_cast<uint64_t>(j.first + m) * blockDim.x + threadIdx.x;
    const uint64_t off = (k % j.slots) * j.size;
    uint64_t value = 0;
    if constexpr (OP == GICBENCH_NVSHMEM_P)
      value = *reinterpret_cast<const uint64_t*>(ln.src_dev + off);
    gicbench_nvshmem_op_at<PATH, OP>(ln.dst + off, ln.src + off, j.size, value, ln.pe);
    if (j.window && (m + 1) % j.window == 0 && w < j.max_windows)
      my_marks[w++] = gicbench_nvshmem_globaltimer() - start;
  }
  __syncthreads();
  if (threadIdx.x == 0) gicbench_nvshmem_quiet_as<PATH>(j.quiet, ln.pe);
  __syncthreads();
  res[tid] = {start, gicbench_nvshmem_globaltimer(), m};
}

// For each CTA b < n: the QP number NVSHMEM's own choice gives for pes[b] (what rate and single
// launches rely on), or 0 where pes[b] < 0.
__device__ inline void gicbench_nvshmem_qp_of_impl(const int32_t* pes, uint32_t* qpn) {
  if (threadIdx.x != 0) return;
  const int pe = pes[blockIdx.x];
  if (pe < 0) {
    qpn[blockIdx.x] = 0;
    return;
  }
  bool shared = false;
  qpn[blockIdx.x] = ibgda_get_qp(pe, &shared)->qpn;
}

#endif  // __CUDA_ARCH__
