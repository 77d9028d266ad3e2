// The CUDA engine of the emulated NIC: a persistent kernel that serves one rank's queue pairs with
// the engine core of emu_core.cuh, over the rank's POSIX shared-memory segment (registered with
// CUDA, mapped: the tables, error records and per-QP counters the CPU engine keeps, at the same
// places, so qp_counters()/errors()/check() read them unchanged; the segment-wide counts of this
// engine are per-warp rows in GPU memory that counters() adds, cfg.wcnt) and over queues in GPU
// memory or in that segment, as each QP was placed (gicbench/fabric/emu/cuda_engine.py builds the
// placement table).
//
// Work split. Warp j of CTA b (wq = j*CTAs + b of W warps) owns the QP slots i = 1 + wq + k*W,
// so consecutive slots land on different SMs. A pass reads the doorbell registers of the owned
// QPs (32 lanes read 32 registers at once, up to kScanGroups such groups in one round trip) and
// serves those rung or pending, one QP at a time. Serving a QP is:
//   1. lane 0: the doorbell (core on_doorbell with budget 0: QPN and window checks, counters,
//      IBGDA/rdma-core conventions, doorbell-record lag bookkeeping; nothing executes);
//   2. the batch (all lanes): up to kRounds rounds of 32 published WQEBBs from the consumer
//      index; in round r lane l checks WQE ci+32r+l exactly as the core would (its index, its
//      QPN, one WQEBB, an RDMA WRITE with an inline payload or one pointer segment, or a NOP;
//      the keys translate with the right access). The leading run of such WQEs executes in
//      parallel: each lane stores its payload (in lane order if two destinations of a round
//      overlap; a round's stores before the next round's), then, after a release fence, lane 0
//      writes the CQEs of the signaled ones in WQE order under one hold of the CQ lock. The
//      first WQE that is anything else ends the run;
//   3. lane 0: the core's serve (budget 32) from there: atomics, reads, sends, write-with-imm,
//      errors and error CQEs, flushes, stale and torn WQEs, DBR-less and signature QPs.
// Ordering guaranteed: within a QP, data of WQE k is visible before the CQE of any WQE >= k and
// CQEs appear in WQE order; an error stops the QP at that WQE (later ones flush), as the core
// does; overlapping writes of one batch land in WQE order. Different WQEs of a run may land in
// any order relative to each other while no CQE is visible, which a NIC's DMA engines also do
// (an RC responder places writes of different messages independently; only completion order is
// architectural). Different QPs run in parallel on different warps.
//
// Control (host-mapped `Control`): hold (the control plane changes a QP: every warp acks and
// waits), gen (objects were created or changed: warps re-read their QPs and warp 0 the MR table,
// then ack), quiesce (ack after a pass that began after the request and found no work: counters
// flushed), stop (flush and exit). Each warp checks it every kCtlPasses passes and every
// kIdleCtlPasses idle ones; the last warp (GICBENCH_ENGINE_CTL_WARP=1: the first) reads the
// host's block, the others its GPU mirror.
#include <cuda/atomic>

#include "emu_core.cuh"
#include "emu_layout.hpp"

namespace gicbench {
namespace cuda_engine {

namespace m5 = gicbench::mlx5;
namespace ec = gicbench::emu_core;
namespace el = gicbench::emu;

__device__ __forceinline__ uint64_t engine_clock_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Rounds of 32 WQEBBs the whole warp takes from one QP per serve (the batch): more rounds amortise
// a serve's fixed costs (record, responder, CQ lock, fences) over more WQEs. bench/cuda_engine.py
// builds variants with -DGICBENCH_ENGINE_ROUNDS=N to compare.
#ifndef GICBENCH_ENGINE_ROUNDS
#define GICBENCH_ENGINE_ROUNDS 8
#endif
constexpr uint32_t kRounds = GICBENCH_ENGINE_ROUNDS;
static_assert(kRounds >= 1 && kRounds <= 16, "GICBENCH_ENGINE_ROUNDS in 1..16");
constexpr uint32_t kFastMax = 32 * kRounds;  // WQEBBs the batch takes per serve
constexpr uint32_t kBatch = 32;     // WQEs the core's serve (lane 0) may handle per serve
constexpr uint32_t kScanGroups = 4;  // groups of 32 doorbells a pass loads before serving any
constexpr uint32_t kCtlPasses = 32;  // passes between reads of the control block
constexpr uint32_t kIdleCtlPasses = 8;  // consecutive idle passes between reads of it
// Idle pacing: after an idle pass a warp that owns 32 QPs or more sleeps this many ns per 128 it
// owns (0: off). On the H200, 16,384 configured QPs polled at full rate slowed one QP's latency
// 1.8-1.9x (L2 load from 128 warps polling); with HEAD_CACHE, 0 / 1000 / 2000 ns gave 1.30 /
// 1.42 / 1.26x, within the spread of runs. The control-block warp's own pacing is
// GICBENCH_ENGINE_CTL_PACE_NS.
#ifndef GICBENCH_ENGINE_IDLE_PACE_NS
#define GICBENCH_ENGINE_IDLE_PACE_NS 1000
#endif
constexpr uint32_t kIdlePaceNs = GICBENCH_ENGINE_IDLE_PACE_NS;
// Variants for bench/cuda_engine.py --variants and GICBENCH_CUDA_ENGINE_DEFINES
// (bench/cuda_engine_next.md says why each keeps the engine's guarantees, with the predictions
// and the measurements). Defaults: what met the engine's rate and latency targets on the H200
// (2026-11-30,
// bench/results/2026-11-30-h200-cuda-engine-defaults.md); 0 restores each earlier behaviour.
// GPU-scope acquires for a QP whose doorbell record is in GPU memory and for a CQ in GPU memory
// (its consumer record), and a GPU-scope CAS for a CQ lock that only this GPU's engines take
// (sys_lock false). 0: system scope everywhere.
#ifndef GICBENCH_ENGINE_SCOPE_GPU
#define GICBENCH_ENGINE_SCOPE_GPU 1
#endif
constexpr bool kScopeGpu = GICBENCH_ENGINE_SCOPE_GPU != 0;
// Which warp reads the host's control block and mirrors it: 0 the last (at small QP counts it
// owns no QP, so no doorbell waits behind its PCIe reads; CTL_PACE_NS keeps it from polling host
// memory without pause), 1 the first (it always owns QP slot 1, whose doorbells then wait behind
// those reads: p99 of one QP 20.5 µs against 14.5-16.1 µs, and 1.41-1.46x for 16,384 QPs
// configured against 1.26-1.29x, on the H200).
#ifndef GICBENCH_ENGINE_CTL_WARP
#define GICBENCH_ENGINE_CTL_WARP 0
#endif
static_assert(GICBENCH_ENGINE_CTL_WARP == 0 || GICBENCH_ENGINE_CTL_WARP == 1,
              "GICBENCH_ENGINE_CTL_WARP: 0 (last warp) or 1 (first warp)");
// ns the control-block warp sleeps after an idle pass while it owns no QP (0: it does not sleep
// and polls host memory without pause, which halved the WQE rate at 64 QPs on 16-32 CTAs). Its
// host reads come at most every kIdleCtlPasses x this: control hand-offs wait that much longer.
#ifndef GICBENCH_ENGINE_CTL_PACE_NS
#define GICBENCH_ENGINE_CTL_PACE_NS 2000
#endif
constexpr uint32_t kCtlPaceNs = GICBENCH_ENGINE_CTL_PACE_NS;
// 1: the batch reads its CQ's words (ring, record, size, flags; status, pi, dropped) once per
// hold of the CQ lock and keeps status/pi/dropped in registers, stored back before the unlock
// (0: re-read from the CQ for every CQE, after the previous CQE's fence emptied L1).
#ifndef GICBENCH_ENGINE_CQ_REGS
#define GICBENCH_ENGINE_CQ_REGS 1
#endif
constexpr bool kCqRegs = GICBENCH_ENGINE_CQ_REGS != 0;
// 1: the warps' counts go into the segment's header with system-scope atomics, as before
// 2026-11-30's counter change (an A/B of that change only: compute-sanitizer refuses those
// atomics on a PCIe host, and they are not atomic against the CPU's there). 0: per-warp rows in
// GPU memory, summed by the host (cfg.wcnt).
#ifndef GICBENCH_ENGINE_SEG_COUNTERS
#define GICBENCH_ENGINE_SEG_COUNTERS 0
#endif
// 1: while one sweep of kScanGroups groups covers every QP this warp owns (up to 128 a warp:
// 16,384 QPs on the default 16 CTAs), the sweep keeps its QPs' heads (doorbell address, last
// doorbell, live, pending) in registers between idle passes and reads only the doorbells: one
// dependent L2 round trip a pass instead of two, half the sectors. Any serve, re-read of the
// tables (gen) or hold reloads them (only those change the heads, and only this warp does them).
// 0: every pass reads the heads.
#ifndef GICBENCH_ENGINE_HEAD_CACHE
#define GICBENCH_ENGINE_HEAD_CACHE 1
#endif
constexpr bool kHeadCache = GICBENCH_ENGINE_HEAD_CACHE != 0;
// 1: a serve works on a copy of its QP's EngineQp in shared memory (served_copy, below); 0: on
// the EngineQp in GPU memory, every read an L2 round trip.
#ifndef GICBENCH_ENGINE_QP_COPY
#define GICBENCH_ENGINE_QP_COPY 1
#endif
constexpr bool kQpCopy = GICBENCH_ENGINE_QP_COPY != 0;
// Idle passes a warp waits before it stores its counts and its QPs' counters (the flush ends
// with a system-scope fence behind stores to host memory: ~0.6 us on the H200, during which a
// new doorbell waits). 0: at the first idle pass. Quiesce, hold and stop flush at once anyway,
// so counters() after quiesce stay exact. Between, the segment's per-QP counters (and sq_ci)
// lag until the warp has been idle that many passes (about 8 us) or 256 serves have passed
// (that flush stores the served QP's only): under a steady stream of doorbells less than that
// apart, until the quiesce.
#ifndef GICBENCH_ENGINE_IDLE_FLUSH_PASSES
#define GICBENCH_ENGINE_IDLE_FLUSH_PASSES 16
#endif
constexpr uint32_t kIdleFlushPasses = GICBENCH_ENGINE_IDLE_FLUSH_PASSES;
// 1: the batch finds its send CQ and reads the CQ's fixed words (ring, record, size, flags)
// before it reads the WQEs, so those loads overlap the WQE reads instead of following the CQ
// lock (own CQs in GPU memory: written once by the host before any QP uses them); the words
// the lock guards (status, pi, dropped) are still read after it. 0: all of them after the lock.
#ifndef GICBENCH_ENGINE_CQ_PREFETCH
#define GICBENCH_ENGINE_CQ_PREFETCH 1
#endif
constexpr bool kCqPrefetch = GICBENCH_ENGINE_CQ_PREFETCH != 0;
// 1: each EngineQp keeps, from its first serve after each generation its warp has acted on
// (Control.gen: every create, register and state change bumps it), its send CQ's DevCq pointer
// and fixed words and the MR entry its last batch's rkey named; a serve whose gen matches uses
// them instead of reading cq_dev, the DevCq and the MR mirror (they arrive with the QP's copy:
// two dependent L2 round trips and one fewer). Both tables are append-only and their entries
// fixed once published, and any change goes through a new gen, so the copies are what the
// reads would return. 0: read every serve.
#ifndef GICBENCH_ENGINE_SERVE_CACHE
#define GICBENCH_ENGINE_SERVE_CACHE 1
#endif
constexpr bool kServeCache = GICBENCH_ENGINE_SERVE_CACHE != 0;
// 1: the responder of an own-rank RC QP is checked from loads issued at once (the table's use
// count, the peer's live, state, qpn, pd) instead of three dependent round trips; the same
// checks on the same words. 0: each read after the check before it.
#ifndef GICBENCH_ENGINE_RESP_PAR
#define GICBENCH_ENGINE_RESP_PAR 1
#endif
constexpr bool kRespPar = GICBENCH_ENGINE_RESP_PAR != 0;
// 1: the batch takes the producer index from the doorbell record the core's doorbell step
// acquired in the same serve (lane 0, before the WQE reads either way) instead of a second
// acquire of it; later WQEs are the core's serve's (it re-reads the record). 0: the batch
// acquires it again.
#ifndef GICBENCH_ENGINE_REC_ONCE
#define GICBENCH_ENGINE_REC_ONCE 1
#endif
// 1: the batch issues its own GPU-memory CQ's lock CAS before the record read and the WQEs and
// checks it only at the CQEs, so its round trip overlaps theirs; the lock is still taken (with
// its acquire fence before the CQ's words are read) and held through the payload stores (no
// other lock is taken meanwhile), and let go on every exit. The engine cannot skip the lock for
// a CQ only one QP uses: a DCT binds a CQ at create_dct, with no gen. 0: CAS at the CQEs.
#ifndef GICBENCH_ENGINE_LOCK_EARLY
#define GICBENCH_ENGINE_LOCK_EARLY 1
#endif
constexpr bool kLockEarly = GICBENCH_ENGINE_LOCK_EARLY != 0;
static_assert(kCqPrefetch || (!kServeCache && !kLockEarly),
              "GICBENCH_ENGINE_SERVE_CACHE and _LOCK_EARLY build on GICBENCH_ENGINE_CQ_PREFETCH");
// 1: a responder of another rank (another process's, through CUDA IPC, or another engine of this
// process) is checked against that rank's engine tables in GPU memory (its EngineQp's live, state,
// QPN and pd; its MR mirror), which each engine publishes (cuda_engine.py exports them; the host
// fills cfg.peer_tables at the exchange), instead of its segment's QP and MR tables in host
// memory: a chain of dependent PCIe reads (about 1.5 us each) per serve becomes two GPU-memory
// round trips. The tables say what the segment says: the owner re-reads them at every change
// before its control call returns, and an engine that moves a peer's QP to ERR writes both. A
// peer without published tables (cfg.peer_tables[rank].qps null): the segment, as with 0.
#ifndef GICBENCH_ENGINE_PEER_TABLES
#define GICBENCH_ENGINE_PEER_TABLES 1
#endif
constexpr bool kPeerTables = GICBENCH_ENGINE_PEER_TABLES != 0;
// 1: lane 0 of the warp that owns QP slot 1 stamps %globaltimer at each stage of every serve of
// that slot that a doorbell started (the pass's doorbell read, the serve's entry, the core's
// doorbell step, the record read, the payload stores, the CQEs, the core's serve, the pass's
// end), into gicbench_engine_stamps (bench/cuda_engine.py --stamps reads it beside the pinger's
// doorbell and CQE times): where a doorbell-to-CQE microsecond goes. 0: no stamp code.
#ifndef GICBENCH_ENGINE_STAMPS
#define GICBENCH_ENGINE_STAMPS 0
#endif
constexpr bool kStamps = GICBENCH_ENGINE_STAMPS != 0;
enum : uint32_t { kStScan, kStEntry, kStDoorbell, kStRecord, kStStored, kStCqe, kStCore, kStPassEnd };
#if GICBENCH_ENGINE_STAMPS
constexpr uint32_t kStampRecords = 4096, kStampWords = 8;  // bench/cuda_engine.py reads these
extern "C" {  // unmangled: the bench finds them by name (cuModuleGetGlobal)
__device__ unsigned long long gicbench_engine_stamps[kStampRecords * kStampWords];
__device__ unsigned int gicbench_engine_stamp_n;  // records written
}
#define ENGINE_STAMP(env, k)                                                     \
  do {                                                                           \
    if ((env).stamp) (env).stamp[k] = engine_clock_ns();                         \
  } while (0)
#else
#define ENGINE_STAMP(env, k) \
  do {                       \
  } while (0)
#endif
// Threads of an engine CTA (the kernel's __launch_bounds__; cuda_engine.py's THREADS launches it).
constexpr uint32_t kCtaThreads = 256;
constexpr uint32_t kStateCheckPasses = 4096;  // passes between re-reads of QP states (peer ERR)
constexpr uint32_t kFlushServes = 256;        // serves between counter flushes while busy
constexpr uint64_t kLockSpins = 1ull << 20;   // CQ lock: take over after this many spins

// ---- shared with the host (gicbench/fabric/emu/cuda_engine.py mirrors these layouts) ----------
struct Control {  // host-mapped, written by the host
  uint32_t stop, hold, gen, quiesce;
  uint32_t ref_lo, ref_hi;  // QP slots a refresh re-reads ([lo, hi); hi 0: every slot)
};
struct WarpAck {  // host-mapped, one per warp, written by its lane 0
  uint32_t resident, held, gen, quiesce;
  uint64_t passes, served;
};
static_assert(sizeof(WarpAck) == 32, "WarpAck layout");
struct QpPlace {  // device memory, written by the host at create_qp: where the SQ lives
  uint64_t ring, dbrec, doorbell;  // addresses the GPU can use (device or mapped host)
  uint64_t flags;                  // kPlace*: which of them are in this engine's GPU memory
};
static_assert(sizeof(QpPlace) == 32, "QpPlace layout");
enum : uint32_t { kPlaceRingGpu = 1, kPlaceDbrecGpu = 2, kPlaceDoorbellGpu = 4 };
// A CQ in GPU memory: where its ring and consumer record are and the words the engines keep for
// it (the segment's CqEntry points here through reserved[0]; GPU memory, so its CQEs cost no
// PCIe round trip). The host reads status/pi/dropped for cq_status().
struct DevCq {
  uint64_t buf, ci_rec;
  uint32_t lock, status, pi, dropped, ncqe, flags, cqn, pad;
};
static_assert(sizeof(DevCq) == 48, "DevCq layout");
// A peer's segment address with bit 0 set: the peer is another process. Its GPU-memory objects
// (MRs, CQs: addresses in the other process) are reached through the peer map (CUDA IPC, below);
// one missing from it is out of reach: a write there fails as a remote access error, a receive
// as RNR, never a wild store.
constexpr uint64_t kForeign = 1;
// ---- peers: GPU memory of other processes' ranks, opened with cudaIpcOpenMemHandle -------------
// One range per exported allocation (a device MR; a device CQ's ring + record + DevCq), written
// by the host (cuda_engine.py ipc_import) before `n` counts it; append-only until close.
struct PeerRange {
  uint64_t lo, len;  // the allocation as its owner (rank) addresses it
  uint64_t local;    // where it is mapped in this process
  uint32_t rank, pad;
};
static_assert(sizeof(PeerRange) == 32, "PeerRange layout");
struct PeerMap {
  uint32_t n;
  uint32_t shared;  // 1: ranks of other processes are peers (they may map our GPU memory)
  PeerRange r[1];  // n entries (the host allocates kMaxPeerRanges)
};
// Owner `rank`'s address `a` (`len` bytes from it) as mapped here; nullptr when not exported.
__device__ __forceinline__ uint8_t* peer_translate(const PeerMap* pm, int32_t rank, uint64_t a,
                                                  uint64_t len) {
  const uint32_t n = *reinterpret_cast<const volatile uint32_t*>(&pm->n);
  for (uint32_t k = 0; k < n; ++k) {
    const volatile PeerRange& r = pm->r[k];
    if (r.rank != static_cast<uint32_t>(rank)) continue;
    const uint64_t lo = r.lo, rl = r.len;
    if (a >= lo && len <= rl && a - lo <= rl - len) return reinterpret_cast<uint8_t*>(r.local + (a - lo));
  }
  return nullptr;
}
// Another rank's engine tables as mapped here (written by the host at the exchange; qps null:
// that rank publishes none, or none is mapped yet). hdr: the owner's tables head (kTab* words).
struct PeerTables {
  struct EngineQp* qps;
  el::MrEntry* mrs;
  const uint64_t* hdr;
  uint32_t max_qps, max_mrs;
};
static_assert(sizeof(PeerTables) == 32, "PeerTables layout");
// The head of an engine's published tables (GPU memory; cuda_engine.py lays out the block): the
// MR mirror's count and the QP slots in use as u32 words 0 and 1 (refresh keeps them), then, as
// u64 words 1..5, the segment's mr/qp/cq/dct/err offsets (written once at launch), so a peer
// builds its Seg without reading the header across PCIe.
constexpr uint32_t kTabMrCount = 0, kTabNQps = 1, kTabSegOffs = 1;
struct Config {  // device memory, written by the host before launch (seg[] also on add_peers)
  uint64_t seg[el::kMaxRanks];  // each rank's segment as mapped in this process (0 = absent)
  int32_t rank, world;
  uint32_t pid, max_qps;
  Control* ctl;
  WarpAck* acks;
  const QpPlace* place;
  struct EngineQp* qps;     // max_qps slots
  el::MrEntry* mr_mirror;   // own MR table, copied to GPU memory at refresh
  uint32_t* mr_count;       // entries of mr_mirror in use
  uint32_t* n_qps;          // QP slots in use (as of the last refresh)
  const uint64_t* cq_dev;   // per own CQ slot: its DevCq (0: the CQ is in the segment)
  Control* ctl_dev;         // GPU-memory mirror of *ctl, kept by warp 0
  const PeerMap* peer_map;  // other processes' GPU memory (CUDA IPC)
  // Per warp, kNumCounters running totals of what it counted in its own segment (GPU memory,
  // written only by that warp's lane 0): the host adds their sum to the segment's counters when
  // it reads them (cuda_engine.py add_counters). No system-scope atomic on host memory: this
  // PCIe host has no native host atomics (compute-sanitizer refuses them).
  uint64_t* wcnt;
  uint64_t* tables_hdr;           // this engine's published tables' head (the kTab* words)
  const PeerTables* peer_tables;  // kMaxRanks entries: other ranks' tables (kPeerTables)
};
static_assert(sizeof(Config) == 8 * el::kMaxRanks + 16 + 13 * 8, "Config layout");

// One QP as its warp serves it (device memory; only the owning warp touches it). What a pass
// reads of every owned QP comes first, in one 32-byte sector: a warp owning many idle QPs
// (16,384 configured) then costs L2 two sectors a QP a pass (this and the doorbell), not four.
struct alignas(32) EngineQp {
  const uint64_t* doorbell;
  uint64_t last_db;
  uint32_t live;
  uint32_t want;    // e.pending as the last serve left it
  uint32_t pflags;  // QpPlace.flags
  ec::SqParams q;
  ec::SqState e;
  uint32_t state, type, send_cqn, remote_qpn;
  int32_t remote_rank;
  // The QP's counters (QpEntry's wqes, doorbells, errors, stale, dbrec_lag): running totals,
  // read from the segment when the slot is (re)initialised and stored back (plain stores: only
  // the owner engine writes them, as the CPU engine does) at each flush; dirty: not yet stored.
  uint64_t t_wqes, t_doorbells, t_errors, t_stale;
  uint32_t t_lag, dirty;
#if GICBENCH_ENGINE_SERVE_CACHE
  // Filled by the serves of generation c_gen (0: never): the send CQ c_cqn's DevCq (null: not an
  // own GPU-memory CQ, or not read yet) with its fixed words, and MR mirror entry c_mr (0: none).
  uint32_t c_gen, c_cqn, c_mr, c_pad;
  DevCq* c_cq;
  uint64_t c_buf, c_ci_rec;
  uint32_t c_ncqe, c_flags;
  el::MrEntry c_m;
#endif
};

// ---- memory operations -----------------------------------------------------------------------
__device__ __forceinline__ uint32_t ld_acq_sys(const uint32_t* p) {
  return cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*const_cast<uint32_t*>(p))
      .load(cuda::memory_order_acquire);
}
__device__ __forceinline__ uint32_t ld_acq_gpu(const uint32_t* p) {
  return cuda::atomic_ref<uint32_t, cuda::thread_scope_device>(*const_cast<uint32_t*>(p))
      .load(cuda::memory_order_acquire);
}
// A doorbell record's acquire: GPU scope under kScopeGpu when the record is in GPU memory (its
// producers are this GPU's threads, or the host through a copy that completed before the
// doorbell), else system scope.
__device__ __forceinline__ uint32_t ld_acq_rec(const uint32_t* p, bool gpu_mem) {
  return kScopeGpu && gpu_mem ? ld_acq_gpu(p) : ld_acq_sys(p);
}
__device__ __forceinline__ void st_rel_sys(uint32_t* p, uint32_t v) {
  cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*p).store(v, cuda::memory_order_release);
}
// Release / acquire fences (fence.acq_rel): what a CQE's publication and a lock need; cheaper
// than __threadfence()'s sequentially consistent fence.
__device__ __forceinline__ void fence_rel_gpu() {
  cuda::atomic_thread_fence(cuda::memory_order_release, cuda::thread_scope_device);
}
__device__ __forceinline__ void fence_acq_gpu() {
  cuda::atomic_thread_fence(cuda::memory_order_acquire, cuda::thread_scope_device);
}
__device__ __forceinline__ void fence_rel_sys() {
  cuda::atomic_thread_fence(cuda::memory_order_release, cuda::thread_scope_system);
}
template <class T>
__device__ __forceinline__ T ld_vol(const T* p) {
  return *reinterpret_cast<const volatile T*>(p);
}
template <class T>
__device__ __forceinline__ void st_vol(T* p, T v) {
  *reinterpret_cast<volatile T*>(p) = v;
}
__device__ __forceinline__ void add_sys(uint64_t* p, uint64_t v) {
  if (v) atomicAdd_system(reinterpret_cast<unsigned long long*>(p), v);
}
__device__ __forceinline__ void add_sys32(uint32_t* p, uint32_t v) {
  if (v) atomicAdd_system(p, v);
}

// Payload store: the small sizes benchmarks use as one store, otherwise bytes.
__device__ __forceinline__ void copy_bytes(uint8_t* dst, const uint8_t* src, uint32_t n) {
  const uint64_t a = reinterpret_cast<uint64_t>(dst) | reinterpret_cast<uint64_t>(src);
  if (n == 8 && (a & 7) == 0) {
    *reinterpret_cast<uint64_t*>(dst) = *reinterpret_cast<const uint64_t*>(src);
  } else if (n == 8 && (reinterpret_cast<uint64_t>(dst) & 7) == 0 &&
             (reinterpret_cast<uint64_t>(src) & 3) == 0) {  // an inline payload (ring + 4)
    const uint32_t* s = reinterpret_cast<const uint32_t*>(src);
    *reinterpret_cast<uint64_t*>(dst) = s[0] | (static_cast<uint64_t>(s[1]) << 32);
  } else if ((a & 7) == 0 && (n & 7) == 0) {
    for (uint32_t i = 0; i < n; i += 8)
      *reinterpret_cast<uint64_t*>(dst + i) = *reinterpret_cast<const uint64_t*>(src + i);
  } else {
    for (uint32_t i = 0; i < n; ++i) dst[i] = src[i];
  }
}

// A rank's segment as this process maps it.
// The table offsets are read once (they are fixed at creation): every read of the header is a
// PCIe round trip.
struct Seg {
  uint8_t* base;
  uint64_t mr_off, qp_off, cq_off, dct_off, err_off;
  int32_t peer;  // another process's rank (its GPU memory goes through the peer map), else -1
  int32_t rank;  // the segment's rank where the caller said (-1: not said)
  __device__ static Seg of(uint64_t v, int32_t rank = -1) {
    uint8_t* b = reinterpret_cast<uint8_t*>(v & ~kForeign);
    const el::Header* h = reinterpret_cast<const el::Header*>(b);
    return Seg{b, h->mr_off, h->qp_off, h->cq_off, h->dct_off, h->err_off,
               (v & kForeign) ? rank : -1, rank};
  }
  // The same, its offsets from the owner's published tables (no read of the header).
  __device__ static Seg at(uint64_t v, int32_t rank, const uint64_t* offs) {
    return Seg{reinterpret_cast<uint8_t*>(v & ~kForeign), ld_vol(offs), ld_vol(offs + 1),
               ld_vol(offs + 2), ld_vol(offs + 3), ld_vol(offs + 4),
               (v & kForeign) ? rank : -1, rank};
  }
  __device__ el::Header* hdr() const { return reinterpret_cast<el::Header*>(base); }
  __device__ el::MrEntry* mrs() const { return reinterpret_cast<el::MrEntry*>(base + mr_off); }
  __device__ el::QpEntry* qps() const { return reinterpret_cast<el::QpEntry*>(base + qp_off); }
  __device__ el::CqEntry* cqs() const { return reinterpret_cast<el::CqEntry*>(base + cq_off); }
  __device__ el::DctEntry* dcts() const { return reinterpret_cast<el::DctEntry*>(base + dct_off); }
  __device__ uint8_t* at(uint64_t off) const { return base + off; }
  __device__ void count(el::Counter c, uint64_t v = 1) const { add_sys(&hdr()->counters[c], v); }
  // Segment::push_error's seqlock, on the GPU.
  __device__ void push_error(uint32_t kind, uint32_t qpn, uint32_t expected, uint32_t found,
                             uint32_t cqn, int32_t rank) const {
    const uint64_t t =
        atomicAdd_system(reinterpret_cast<unsigned long long*>(&hdr()->err_head), 1ull);
    el::ErrRecord& r = reinterpret_cast<el::ErrRecord*>(base + err_off)[t % el::kErrRing];
    st_vol(&r.seq, uint64_t{0});
    __threadfence_system();
    st_vol(&r.kind, kind);
    st_vol(&r.qpn, qpn);
    st_vol(&r.expected, expected);
    st_vol(&r.found, found);
    st_vol(&r.cqn, cqn);
    st_vol(&r.rank, rank);
    __threadfence_system();
    st_vol(&r.seq, t + 1);
  }
};

// MR translation (emu_engine.cpp's mr_ptr) through entry m, the table's entry key_index(key).
__device__ __forceinline__ uint8_t* mr_check(const el::MrEntry& m, uint8_t* base, uint32_t key,
                                             uint64_t addr, uint64_t len, uint32_t need,
                                             uint32_t pd) {
  if (m.key != key || m.pd != pd) return nullptr;
  if (addr < m.addr || len > m.length || addr - m.addr > m.length - len) return nullptr;
  if ((m.access & need) != need) return nullptr;
  return base + m.offset + (addr - m.addr);
}
// MR translation (emu_engine.cpp's mr_ptr) over a table of n entries.
__device__ __forceinline__ uint8_t* mr_translate(const el::MrEntry* t, uint32_t n, uint8_t* base,
                                                 uint32_t key, uint64_t addr, uint64_t len,
                                                 uint32_t need, uint32_t pd) {
  const uint32_t i = el::key_index(key);
  if (i == 0 || i >= n) return nullptr;
  return mr_check(t[i], base, key, addr, len, need, pd);
}

// A table entry another engine publishes (a peer's MR mirror, GPU memory), read past this SM's L1
// in three 16-byte loads (entries are 48 bytes, 16-byte aligned in the mirror).
__device__ __forceinline__ el::MrEntry ld_mr(const el::MrEntry* e) {
  static_assert(sizeof(el::MrEntry) == 48, "three 16-byte words");
  uint4 v[3];
  const uint4* p = reinterpret_cast<const uint4*>(e);
#pragma unroll
  for (int k = 0; k < 3; ++k)
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v[k].x), "=r"(v[k].y), "=r"(v[k].z), "=r"(v[k].w)
                 : "l"(p + k));
  el::MrEntry m;
  memcpy(&m, v, sizeof(m));
  return m;
}

// ---- CQEs ------------------------------------------------------------------------------------
// sys: the CQ is in host memory (a CPU may consume it): system-scope fences; a CQ in GPU memory
// is consumed on this GPU: GPU scope, which orders this thread's (and, cumulatively, the warp's)
// payload stores to host memory too, as GPU threads observe them.
struct GpuMem {
  bool sys;
  __device__ void fence() const {  // release: the body (and payloads) before the tail
    if (sys)
      fence_rel_sys();
    else
      fence_rel_gpu();
  }
  __device__ uint32_t ld_acq32(const uint32_t* p) const {  // a CQ's consumer record
    return kScopeGpu && !sys ? ld_acq_gpu(p) : ld_acq_sys(p);
  }
  __device__ void st_rel32(uint32_t* p, uint32_t v) const {
    fence();
    st_vol(p, v);
  }
  __device__ void st_rel8(uint8_t* p, uint8_t v) const {
    fence();
    st_vol(p, v);
  }
};

struct Engine;

// The core's environment for one QP served by lane 0 of its warp.
struct Env {
  const Config& cfg;
  EngineQp& eq;
  Seg self;
  uint32_t state;  // cached for this serve (the mirror; ERR written through)
  uint32_t mr_n;   // entries of the own MR mirror, read once per serve
  uint64_t cnt[el::kNumCounters];
  struct Resp {
    Seg ts;
    el::RqState* rq;
    uint32_t num, pd;
    bool own;      // the responder is this rank: MR lookups use the GPU mirror
    bool foreign;  // the responder is another process: its GPU memory through the peer map
    const el::MrEntry* mt;  // another rank's MR mirror (its published tables), else null
    const uint32_t* mt_n;   // that mirror's entry count
    uint32_t mt_max;        // its entries allocated (an index below it is safe to load)
  };
  bool remote_sys = false;  // a responder is another process's: CQEs after its data fence at
                            // system scope (its GPU is another observer)
  bool have_rc = false;  // the RC responder, resolved once per serve
  bool rc_ok = false;
  Resp rc;
#if GICBENCH_ENGINE_STAMPS
  unsigned long long* stamp = nullptr;  // this serve's stamp record (lane 0, slot 1 only)
#endif

  uint32_t* state_home;  // the QP's state word in cfg.qps (other warps' cq_fatal write it too)
  bool peers_shared;     // peers map our GPU memory (read once a serve, not at every lock)
#if GICBENCH_ENGINE_REC_ONCE
  mutable const uint32_t* rec_p = nullptr;  // the record the core acquired this serve, its value
  mutable uint32_t rec_v = 0;
#endif

  __device__ Env(const Config& c, EngineQp& q, uint32_t* home, const Seg& s)
      : cfg(c), eq(q), self(s), state_home(home) {
    state = ld_vol(home);
    peers_shared = ld_vol(&c.peer_map->shared) != 0;
    mr_n = ld_vol(c.mr_count);
    for (uint32_t i = 0; i < el::kNumCounters; ++i) cnt[i] = 0;
  }

  __device__ uint32_t ld_acq32(const uint32_t* p) const {  // the SQ's doorbell record
#if GICBENCH_ENGINE_REC_ONCE
    rec_v = ld_acq_rec(p, (eq.pflags & kPlaceDbrecGpu) != 0);
    rec_p = p;
    return rec_v;
#else
    return ld_acq_rec(p, (eq.pflags & kPlaceDbrecGpu) != 0);
#endif
  }
  __device__ uint64_t fetch_add64(uint64_t* p, uint64_t v) const {
    return atomicAdd_system(reinterpret_cast<unsigned long long*>(p), v);
  }
  __device__ uint64_t cas64(uint64_t* p, uint64_t expected, uint64_t desired) const {
    return atomicCAS_system(reinterpret_cast<unsigned long long*>(p), expected, desired);
  }
  __device__ uint32_t cas32(uint32_t* p, uint32_t expected, uint32_t desired) const {
    return atomicCAS_system(reinterpret_cast<unsigned int*>(p), expected, desired);
  }
  __device__ void copy(uint8_t* dst, const uint8_t* src, uint32_t n) const { copy_bytes(dst, src, n); }
  __device__ uint32_t qp_state() const { return state; }
  __device__ void qp_to_error() {
    state = el::kErr;
    st_vol(&eq.state, state);
    st_vol(state_home, state);
    st_rel_sys(&self.qps()[el::num_index(eq.q.qpn)].state, state);
  }

  __device__ bool resolve_rc(Resp& r) {
    const int rr = eq.remote_rank;
    if (rr < 0 || rr >= cfg.world || !cfg.seg[rr]) return false;
    const uint32_t ri = el::num_index(eq.remote_qpn);
    if (ri == 0 || (ri & el::kDctBit)) return false;
    if (rr == cfg.rank) {  // our own QP: the GPU mirror, no PCIe read
      if constexpr (kRespPar) {
        if (ri >= cfg.max_qps) return false;  // every load below inside the table
        const EngineQp& p = cfg.qps[ri];
        const uint32_t n = ld_vol(cfg.n_qps), lv = ld_vol(&p.live), rs = ld_vol(&p.state);
        const uint32_t pq = ld_vol(&p.q.qpn), ppd = ld_vol(&p.q.pd);
        if (ri >= n || !lv || pq != eq.remote_qpn || (rs != el::kRtr && rs != el::kRts))
          return false;
        r = Resp{self, &self.qps()[ri].rq, eq.remote_qpn, ppd, true, false, nullptr, nullptr, 0};
        return true;
      }
      if (ri >= ld_vol(cfg.n_qps) || !cfg.qps[ri].live) return false;
      const EngineQp& p = cfg.qps[ri];
      const uint32_t rs = ld_vol(&p.state);
      if (p.q.qpn != eq.remote_qpn || (rs != el::kRtr && rs != el::kRts)) return false;
      r = Resp{self, &self.qps()[ri].rq, eq.remote_qpn, p.q.pd, true, false, nullptr, nullptr, 0};
      return true;
    }
    if constexpr (kPeerTables) {
      const PeerTables t = peer_tables(rr);
      if (t.qps) return resolve_rc_tables(r, rr, ri, t);
    }
    const Seg ts = Seg::of(cfg.seg[rr], rr);
    if (ri >= ld_vol(&ts.hdr()->n_qps)) return false;
    el::QpEntry& p = ts.qps()[ri];
    const uint32_t rs = ld_acq_sys(&p.state);
    if (ld_vol(&p.qpn) != eq.remote_qpn || (rs != el::kRtr && rs != el::kRts)) return false;
    r = Resp{ts, &p.rq, eq.remote_qpn, ld_vol(&p.pd), false, (cfg.seg[rr] & kForeign) != 0,
             nullptr, nullptr, 0};
    return true;
  }
  // Rank rr's published tables as mapped here (qps null: none).
  __device__ PeerTables peer_tables(int32_t rr) const {
    const PeerTables* p = &cfg.peer_tables[rr];
    return PeerTables{ld_vol(&p->qps), ld_vol(&p->mrs), ld_vol(&p->hdr), ld_vol(&p->max_qps),
                      ld_vol(&p->max_mrs)};
  }
  // resolve_rc's checks on rank rr's QP slot ri from its published tables: every word loaded at
  // once (the slot count, the QP's live, state, QPN and pd, the segment's offsets), GPU memory.
  __device__ bool resolve_rc_tables(Resp& r, int32_t rr, uint32_t ri, const PeerTables& t) const {
    if (ri >= t.max_qps) return false;
    const EngineQp& p = t.qps[ri];
    const uint32_t* w = reinterpret_cast<const uint32_t*>(t.hdr);
    const uint32_t n = ld_vol(w + kTabNQps), lv = ld_vol(&p.live), rs = ld_vol(&p.state);
    const uint32_t pq = ld_vol(&p.q.qpn), ppd = ld_vol(&p.q.pd);
    const Seg ts = Seg::at(cfg.seg[rr], rr, t.hdr + kTabSegOffs);
    if (ri >= n || !lv || pq != eq.remote_qpn || (rs != el::kRtr && rs != el::kRts)) return false;
    r = Resp{ts, &ts.qps()[ri].rq, eq.remote_qpn, ppd, false, (cfg.seg[rr] & kForeign) != 0,
             t.mrs, w + kTabMrCount, t.max_mrs};
    return true;
  }

  __device__ bool responder(const uint8_t* av, Resp& r) {
    if (eq.type == el::kDci) {
      const m5::AvView v = m5::get_av(av);
      const int trank = static_cast<int>(m5::get_be16(av + 14)) - 1;  // LID = rank + 1
      if (trank < 0 || trank >= cfg.world || !cfg.seg[trank]) return false;
      const Seg ts = Seg::of(cfg.seg[trank], trank);
      const uint32_t dn = v.dqp_dct & 0xffffff;
      const uint32_t di = el::num_index(dn) & ~el::kDctBit;
      if (el::num_rank(dn) != (static_cast<uint32_t>(trank) & 0xff) ||
          !(el::num_index(dn) & el::kDctBit) || di == 0 || di >= ld_vol(&ts.hdr()->n_dcts))
        return false;
      el::DctEntry& d = ts.dcts()[di];
      if (ld_acq_sys(&d.state) != el::kRtr) return false;
      if (ld_vol(&d.dc_key) != v.dc_key) {
        add_sys32(&d.key_violations, 1u);
        ts.count(el::kCntDcKeyViolations);
        return false;
      }
      r = Resp{ts, &d.rq, ld_vol(&d.dctn), ld_vol(&d.pd), trank == cfg.rank,
               (cfg.seg[trank] & kForeign) != 0, nullptr, nullptr, 0};
      remote_sys |= r.foreign;
      return true;
    }
    if (!have_rc) {
      have_rc = true;
      rc_ok = resolve_rc(rc);
    }
    if (rc_ok) r = rc;
    remote_sys |= rc_ok && rc.foreign;
    return rc_ok;
  }
  __device__ uint8_t* local(uint32_t key, uint64_t addr, uint64_t len, uint32_t need,
                            uint32_t pd) const {
    return mr_translate(cfg.mr_mirror, mr_n, self.base, key, addr, len, need, pd);
  }
  __device__ uint8_t* remote(const Resp& r, uint32_t key, uint64_t addr, uint64_t len,
                             uint32_t need) const {
    if (r.own) return local(key, addr, len, need, r.pd);
    const uint32_t i = el::key_index(key);
    if (kPeerTables && r.mt) {
      if (i == 0 || i >= r.mt_max) return nullptr;
      const el::MrEntry m = ld_mr(&r.mt[i]);  // with the count, not after it
      if (i >= ld_vol(r.mt_n)) return nullptr;
      return remote_at(r, m, key, addr, len, need);
    }
    uint8_t* p = mr_translate(r.ts.mrs(), ld_vol(&r.ts.hdr()->n_mrs), r.ts.base, key, addr, len,
                              need, r.pd);
    // Another process's GPU-memory MR: checked above against its table; `addr` is its GPU
    // address there, mapped here through CUDA IPC (or out of reach: nullptr).
    if (p && r.ts.peer >= 0 && ld_vol(&r.ts.mrs()[i].reserved))
      return peer_translate(cfg.peer_map, r.ts.peer, addr, len);
    return p;
  }
  // remote() through `m`, a copy of the responder's table entry key_index(key) (its mirror's).
  __device__ uint8_t* remote_at(const Resp& r, const el::MrEntry& m, uint32_t key, uint64_t addr,
                                uint64_t len, uint32_t need) const {
    uint8_t* p = mr_check(m, r.ts.base, key, addr, len, need, r.pd);
    if (p && r.ts.peer >= 0 && m.reserved) return peer_translate(cfg.peer_map, r.ts.peer, addr, len);
    return p;
  }

  // A CQ as the engine writes it: in the segment (CqEntry's words) or in GPU memory (DevCq).
  struct Cq {
    el::CqEntry* e;
    DevCq* d;
    int32_t peer;  // d is another process's (mapped through the peer map), else -1
    bool lost;     // d is another process's and not in the peer map: out of reach
    __device__ uint32_t* lock() const { return d ? &d->lock : &e->lock; }
    __device__ uint32_t cqn() const { return d ? d->cqn : e->cqn; }
  };
  // Own CQs: the GPU table says where (no PCIe read); a peer's: its CqEntry says.
  __device__ Cq cq_of(const Seg& s, uint32_t cqn) const {
    el::CqEntry* e = &s.cqs()[el::num_index(cqn)];
    uint64_t d;
    if (s.base == self.base)
      d = cfg.cq_dev[el::num_index(cqn)];
    else
      d = ld_vol(&e->reserved[0]);
    if (d && s.peer >= 0) {  // another process's DevCq: its address there, mapped here
      uint8_t* m = peer_translate(cfg.peer_map, s.peer, d, sizeof(DevCq));
      return Cq{e, reinterpret_cast<DevCq*>(m), s.peer, m == nullptr};
    }
    return Cq{e, reinterpret_cast<DevCq*>(d), -1, false};
  }
  // A peer DevCq's ring or record pointer (its owner's address) as mapped here.
  __device__ uint8_t* cq_ptr(const Cq& cq, uint64_t a, uint64_t len) const {
    return cq.peer >= 0 ? peer_translate(cfg.peer_map, cq.peer, a, len)
                        : reinterpret_cast<uint8_t*>(a);
  }
  // CQ lock (pid owner, like the CPU engine's): a holder that never lets go is taken over.
  __device__ uint32_t lock_cas(const Cq& cq, uint32_t expected, uint32_t desired) const {
    if (kScopeGpu && !sys_lock(cq)) return atomicCAS(cq.lock(), expected, desired);
    return atomicCAS_system(cq.lock(), expected, desired);
  }
  __device__ void lock_cq(const Seg& s, const Cq& cq) {
    uint64_t spins = 0;
    for (;;) {
      const uint32_t cur = lock_cas(cq, 0u, cfg.pid);
      if (cur == 0) break;
      if (++spins == kLockSpins) {
        if (lock_cas(cq, cur, cfg.pid) == cur) {
          s.count(el::kCntLockSteals);
          s.push_error(el::kErrDeadOwner, 0, 0, cur, cq.cqn(), cfg.rank);
          break;
        }
        spins = 0;
      }
    }
    if (sys_lock(cq))
      __threadfence_system();
    else
      fence_acq_gpu();  // the previous holder's pi and CQEs, not this SM's cached copy
  }
  // lock_cq after a first CAS issued earlier (kLockEarly) returned `cur`: 0, the lock is ours
  // (its acquire fence still follows, as lock_cq's), else lock_cq from the start.
  __device__ void lock_cq_from(const Seg& s, const Cq& cq, uint32_t cur) {
    if (cur != 0) {
      lock_cq(s, cq);
      return;
    }
    if (sys_lock(cq))
      __threadfence_system();
    else
      fence_acq_gpu();
  }
  // A CQ in host memory, or one that engines on another GPU lock too (a peer's, or ours once
  // peers have mapped our GPU memory): lock hand-offs at system scope.
  __device__ bool sys_lock(const Cq& cq) const {
    return !cq.d || cq.peer >= 0 || peers_shared;
  }
  __device__ void unlock_cq(const Cq& cq) {
    if (!sys_lock(cq)) {
      cuda::atomic_ref<uint32_t, cuda::thread_scope_device>(*cq.lock()).store(
          0u, cuda::memory_order_release);
    } else {
      st_rel_sys(cq.lock(), 0u);
    }
  }

  __device__ void cq_fatal(const Seg& s, uint32_t cqn) {
    const uint32_t n = ld_vol(&s.hdr()->n_qps);
    const bool own = s.base == self.base;
    for (uint32_t i = 1; i < n; ++i) {
      el::QpEntry& q = s.qps()[i];
      if (q.send_cqn != cqn && !(q.rq.wqe_cnt && q.rq.cqn == cqn)) continue;
      const uint32_t st = ld_acq_sys(&q.state);
      if (st == el::kErr || st == el::kReset) continue;
      st_rel_sys(&q.state, static_cast<uint32_t>(el::kErr));
      if (own && i < cfg.max_qps) st_vol(&cfg.qps[i].state, static_cast<uint32_t>(el::kErr));
      if (kPeerTables && !own && s.rank >= 0) {  // what peers' engines check (resolve_rc_tables)
        const PeerTables t = peer_tables(s.rank);
        if (t.qps && i < t.max_qps) st_rel_sys(&t.qps[i].state, static_cast<uint32_t>(el::kErr));
      }
      if (own && i == el::num_index(eq.q.qpn)) state = el::kErr;
      s.count(el::kCntQpFatal);
      s.push_error(el::kErrQpFatal, q.qpn, st, el::kErr, cqn, cfg.rank);
    }
  }

  // Counted locally (own segment: cnt, flushed in bulk) or in the peer's segment.
  __device__ void count_at(const Seg& s, el::Counter c) {
    if (s.base == self.base)
      ++cnt[c];
    else
      s.count(c);
  }
  // The core's view of a CQ (its lock held); false: a peer's ring outside the exported range.
  __device__ bool cq_ref(const Seg& s, const Cq& cq, ec::CqRef& ref) const {
    if (cq.d) {
      DevCq& d = *cq.d;
      ref = ec::CqRef{cq_ptr(cq, d.buf, uint64_t{d.ncqe} * 64),
                      reinterpret_cast<const uint32_t*>(cq_ptr(cq, d.ci_rec, 4)),
                      &d.status, &d.pi, &d.dropped, d.ncqe, d.flags};
      return ref.buf && ref.ci_rec;  // ring outside the exported range: never written
    }
    el::CqEntry& e = *cq.e;
    ref = ec::CqRef{s.at(e.buf_off),
                    reinterpret_cast<const uint32_t*>(s.at(e.dbrec_off)) + m5::kCqSetCi,
                    &e.status, &e.pi, &e.dropped, e.ncqe, e.flags};
    return true;
  }
  template <class Fill>
  __device__ bool post_cqe_locked(const Seg& s, const Cq& cq, uint32_t qpn, Fill fill) {
    ec::CqRef ref;
    if (!cq_ref(s, cq, ref)) return false;
    return post_with(s, cq, ref, qpn, fill);
  }
  // One CQE through `ref` (the CQ's lock held): the core's write_cqe, then the counts, and on an
  // overrun the error record and the CQ's QPs to ERR.
  template <class Fill>
  __device__ bool post_with(const Seg& s, const Cq& cq, const ec::CqRef& ref, uint32_t qpn,
                            Fill fill) {
    const uint32_t pi = *ref.pi;
    GpuMem mem{cq.d == nullptr || cq.peer >= 0 || remote_sys};
    switch (ec::write_cqe(mem, ref, fill)) {
      case ec::kCqeWritten: count_at(s, el::kCntCqes); return true;
      case ec::kCqeDropped: count_at(s, el::kCntCqeDropped); return false;
      case ec::kCqeOverrun: {
        const uint32_t ci = m5::bswap32(ld_acq_sys(ref.ci_rec)) & 0xffffff;
        s.count(el::kCntCqOverruns);
        s.count(el::kCntCqeDropped);
        s.push_error(el::kErrCqOverrun, qpn, ci, pi & 0xffffff, cq.cqn(), cfg.rank);
        cq_fatal(s, cq.cqn());
        return false;
      }
    }
    return false;
  }
  // GICBENCH_ENGINE_CQ_REGS: a CQ held for several CQEs (the batch's), its words read once and
  // status/pi/dropped kept here, stored back (release_held) before the lock is let go.
  struct HeldCq {
    ec::CqRef ref;
    uint32_t* home[3];  // status, pi, dropped where they live
    uint32_t v[3];
    bool ok;
  };
  __device__ void hold_cq(const Seg& s, const Cq& cq, HeldCq& h) const {
    h.ok = cq_ref(s, cq, h.ref);
    hold_words(h);
  }
  // hold_cq with the fixed words read before the lock (kCqPrefetch): an own CQ in GPU memory.
  __device__ void hold_cq_from(const Cq& cq, const DevCq& fixed, HeldCq& h) const {
    h.ref = ec::CqRef{reinterpret_cast<uint8_t*>(fixed.buf),
                      reinterpret_cast<const uint32_t*>(fixed.ci_rec), &cq.d->status, &cq.d->pi,
                      &cq.d->dropped, fixed.ncqe, fixed.flags};
    h.ok = h.ref.buf && h.ref.ci_rec;  // as cq_ref: a CQ without a ring is never written
    hold_words(h);
  }
  // status/pi/dropped of a held CQ (h.ref found) into registers, h.ref pointed at them.
  __device__ static void hold_words(HeldCq& h) {
    if (!h.ok) return;
    h.home[0] = h.ref.status;
    h.home[1] = h.ref.pi;
    h.home[2] = h.ref.dropped;
    for (uint32_t k = 0; k < 3; ++k) h.v[k] = *h.home[k];
    h.ref.status = &h.v[0];
    h.ref.pi = &h.v[1];
    h.ref.dropped = &h.v[2];
  }
  __device__ void release_held(HeldCq& h) const {  // before unlock_cq (its release orders these)
    if (!h.ok) return;
    for (uint32_t k = 0; k < 3; ++k) *h.home[k] = h.v[k];
    h.ok = false;
  }
  template <class Fill>
  __device__ bool post_cqe(const Seg& s, uint32_t cqn, uint32_t qpn, Fill fill) {
    const Cq cq = cq_of(s, cqn);
    if (cq.lost) return false;
    lock_cq(s, cq);
    const bool ok = post_cqe_locked(s, cq, qpn, fill);
    unlock_cq(cq);
    return ok;
  }

  __device__ bool recv_begin(const Resp& r, ec::RecvSlot& slot) {
    if (ld_vol(&r.rq->wqe_cnt) == 0) return false;
    const Cq rcq = cq_of(r.ts, ld_vol(&r.rq->cqn));
    if (rcq.lost) return false;  // another process's GPU CQ not in the peer map: RNR
    lock_cq(r.ts, rcq);
    const uint32_t rpi =
        m5::bswap32(ld_acq_sys(reinterpret_cast<const uint32_t*>(r.ts.at(r.rq->dbrec_off)))) &
        0xffff;
    const uint32_t ci = ld_vol(&r.rq->ci);
    if (((rpi - ci) & 0xffff) == 0) {
      unlock_cq(rcq);
      return false;
    }
    slot.wqe = r.ts.at(r.rq->buf_off) + (ci & (r.rq->wqe_cnt - 1)) * 16;
    slot.index = static_cast<uint16_t>(ci);
    st_vol(&r.rq->ci, ci + 1);
    return true;
  }
  __device__ void recv_end(const Resp& r, const ec::RecvSlot& slot, uint8_t cqe_op, uint8_t synd,
                           uint32_t len, uint32_t imm) {
    const Cq rcq = cq_of(r.ts, ld_vol(&r.rq->cqn));  // reachable: recv_begin checked
    post_cqe_locked(r.ts, rcq, r.num, [&](uint8_t* b, uint8_t owner) {
      if (synd)
        return m5::fill_err_cqe(b, cqe_op, synd, ec::vendor_syndrome(synd), r.num, 0, slot.index,
                                owner);
      return m5::fill_resp_cqe(b, cqe_op, r.num, slot.index, len, imm, 0, owner);
    });
    unlock_cq(rcq);
    if (!synd) count_at(r.ts, el::kCntRecvConsumed);
  }
  __device__ void req_cqe(uint8_t wqe_opcode, uint16_t idx, uint32_t bytes) {
    // The payloads before the CQE: write_cqe's release store fences (system scope).
    const uint32_t qpn = eq.q.qpn;
    post_cqe(self, eq.send_cqn, qpn, [&](uint8_t* b, uint8_t owner) {
      return m5::fill_req_cqe(b, qpn, wqe_opcode, idx, bytes, 0, owner);
    });
  }
  __device__ void err_cqe(uint8_t synd, uint8_t vendor, uint8_t wqe_opcode, uint16_t idx,
                          bool flush) {
    const uint32_t qpn = eq.q.qpn;
    post_cqe(self, eq.send_cqn, qpn, [&](uint8_t* b, uint8_t owner) {
      return m5::fill_err_cqe(b, m5::kCqeReqErr, synd, vendor, qpn, wqe_opcode, idx, owner);
    });
    if (!flush) self.push_error(el::kErrCompletion, qpn, synd, idx, eq.send_cqn, cfg.rank);
  }
  __device__ void event(ec::Event ev, uint32_t expected, uint32_t found) {
    const uint32_t qpn = eq.q.qpn;
    switch (ev) {
      case ec::kEvDoorbell:
        ++cnt[el::kCntDoorbells];
        ++eq.t_doorbells;
        break;
      case ec::kEvWrongQpn:
        ++cnt[el::kCntBadDoorbells];
        self.push_error(el::kErrDoorbellQpn, qpn, expected, found, 0, cfg.rank);
        break;
      case ec::kEvNotRts:
        ++cnt[el::kCntNotRts];
        self.push_error(el::kErrNotRts, qpn, expected, found, 0, cfg.rank);
        break;
      case ec::kEvOutOfWindow:
        ++cnt[el::kCntBadDoorbells];
        self.push_error(el::kErrBadDoorbell, qpn, expected, found, 0, cfg.rank);
        break;
      case ec::kEvBadRecord:
        ++cnt[el::kCntBadDoorbells];
        self.push_error(el::kErrBadDbrec, qpn, expected, found, 0, cfg.rank);
        break;
      case ec::kEvDbrecLag:
        ++cnt[el::kCntDbrecLag];
        ++eq.t_lag;
        break;
      case ec::kEvStale:
        ++cnt[el::kCntStaleWqes];
        ++eq.t_stale;
        self.push_error(el::kErrStaleWqe, qpn, expected, found, 0, cfg.rank);
        break;
      case ec::kEvFlushed: ++cnt[el::kCntFlushed]; break;
      case ec::kEvExecuted:
        ++cnt[el::kCntWqes];
        ++eq.t_wqes;
        cnt[el::kCntBytes] += expected;
        cnt[el::kCntMessages] += found;
        break;
      case ec::kEvError:
        ++cnt[el::kCntErrors];
        ++eq.t_errors;
        break;
      case ec::kEvRnr: ++cnt[el::kCntRnr]; break;
    }
    eq.dirty = 1;
  }
};

// ---- the batch: a leading run of plain writes and NOPs, executed by the whole warp ----------
struct Lane {
  uint8_t* dst;
  const uint8_t* src;
  uint64_t val;   // an 8-byte inline payload, read with the WQE (inl8)
  uint32_t n;
  bool ok;        // this WQE belongs to the run
  bool signaled;
  bool inl8;
  uint8_t opcode;
};
// What every lane needs of the QP being served, in registers (lane 0 reads it, the others get it
// by shuffle): after the record's acquire has emptied L1, every dependent load costs an L2 round
// trip, and the batch's per-WQE path does none.
struct Fast {
  m5::SqRing ring;
  const el::MrEntry* mrs;  // the own MR table's GPU mirror
  uint8_t* base;           // the own segment (MR offsets are relative to it)
  uint32_t qpn, max_inline, pd, mr_n;
};
constexpr uint32_t kNopBytes = 0xffffffffu;  // a NOP in a lane's per-round byte count

// One WQEBB's first 48 bytes (ctrl, raddr, the third segment), read before any check (they are
// inside the ring whatever they hold).
struct Wqe {
  uint4 c, r, s;
};
__device__ __forceinline__ Wqe load_wqe(const uint8_t* p) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(p);
  if ((reinterpret_cast<uint64_t>(w) & 15) == 0) {  // rings are page or cudaMalloc aligned
    const uint4* v = reinterpret_cast<const uint4*>(w);
    return Wqe{v[0], v[1], v[2]};
  }
  return Wqe{make_uint4(w[0], w[1], w[2], w[3]), make_uint4(w[4], w[5], w[6], w[7]),
             make_uint4(w[8], w[9], w[10], w[11])};
}

// The MR entry the batch's first WQE names, read once per serve for every lane (a WQE naming
// another key takes the full translation): `index` 0 when none was read.
struct MrCache {
  el::MrEntry m;
  uint32_t index;
};

// Whether WQE `ci` (lane's; its words in `w`) is a plain one the batch may execute: what
// execute() would do for it succeeds and is a store (or nothing). Anything else is left to the
// core.
__device__ __forceinline__ Lane check_plain(Env& env, const Fast& f, const Env::Resp& resp,
                                            bool resp_ok, const MrCache& mc, uint32_t ci,
                                            const Wqe& w) {
  Lane l{nullptr, nullptr, 0, 0, false, false, false, 0};
  const uint32_t w0 = m5::bswap32(w.c.x), w1 = m5::bswap32(w.c.y);
  const uint32_t ds = w1 & m5::kDsMask;
  // The ctrl segment as get_ctrl_seg reads it: opcode, wqe_index, qpn, ds; fm_ce_se is byte 11.
  if (((w0 >> 8) & 0xffff) != (ci & 0xffff) || (w1 >> 8) != f.qpn || ds == 0 || ds > 4) return l;
  l.opcode = static_cast<uint8_t>(w0 & 0xff);
  l.signaled = ((w.c.z >> 24) & m5::kCqUpdate) != 0;
  if (l.opcode == m5::kOpNop) {
    l.ok = true;
    return l;
  }
  if (l.opcode != m5::kOpRdmaWrite || !resp_ok || ds < 3) return l;
  const uint64_t raddr = (static_cast<uint64_t>(m5::bswap32(w.r.x)) << 32) | m5::bswap32(w.r.y);
  const uint32_t rkey = m5::bswap32(w.r.z);
  const uint32_t h = m5::bswap32(w.s.x);
  uint32_t len;
  if (h & m5::kInlineFlag) {
    len = h & ~m5::kInlineFlag;
    if (2 + m5::inline_seg_ds(len) > ds || (f.max_inline && len > f.max_inline)) return l;
    l.src = f.ring.wqe(ci) + 36;  // the third segment + 4; one WQEBB: the payload does not wrap
    if (len == 8) {
      l.val = w.s.y | (static_cast<uint64_t>(w.s.z) << 32);
      l.inl8 = true;
    }
  } else {
    if (ds != 3) return l;
    len = h;
    if (len > 0x80000000u) return l;  // the core's LOCAL_LENGTH (2 GiB: the largest message)
    if (len) {
      const uint64_t addr = (static_cast<uint64_t>(m5::bswap32(w.s.z)) << 32) | m5::bswap32(w.s.w);
      l.src = env.local(m5::bswap32(w.s.y), addr, len, 0u, f.pd);
      if (!l.src) return l;
    }
  }
  if (len) {
    if (mc.index && el::key_index(rkey) == mc.index)  // the entry read once for the batch
      l.dst = resp.own ? mr_check(mc.m, f.base, rkey, raddr, len, el::kRemoteWrite, resp.pd)
                       : env.remote_at(resp, mc.m, rkey, raddr, len, el::kRemoteWrite);
    else
      l.dst = env.remote(resp, rkey, raddr, len, el::kRemoteWrite);
    if (!l.dst) return l;
  }
  l.n = len;
  l.ok = true;
  return l;
}

__device__ __forceinline__ uint64_t shfl64(uint64_t v, int src) {
  return __shfl_sync(0xffffffffu, v, src);
}
// Every lane gets lane `src`'s copy of a small trivially copyable struct.
template <class T>
__device__ __forceinline__ void shfl_struct(T& v, int src) {
  static_assert(sizeof(T) % 4 == 0, "whole words");
  uint32_t* w = reinterpret_cast<uint32_t*>(&v);
#pragma unroll
  for (uint32_t k = 0; k < sizeof(T) / 4; ++k) w[k] = __shfl_sync(0xffffffffu, w[k], src);
}

__device__ __forceinline__ void store_lane(const Lane& l) {
  if (l.inl8 && (reinterpret_cast<uint64_t>(l.dst) & 7) == 0)
    *reinterpret_cast<uint64_t*>(l.dst) = l.val;
  else
    copy_bytes(l.dst, l.src, l.n);
}

// The payload stores of one round's run (lanes < run; all lanes call). Overlapping destinations
// land in WQE order. When every payload is one aligned 8-byte word (what benchmarks post) one
// match instruction finds duplicates; otherwise every pair is compared.
__device__ __forceinline__ void store_round(const Lane& l, uint32_t lane, uint32_t run) {
  const bool mine = lane < run && l.n;
  const uint64_t me = reinterpret_cast<uint64_t>(l.dst);
  bool overlap = false;
  if (__all_sync(0xffffffffu, !mine || (l.n == 8 && (me & 7) == 0))) {
    // Lanes without a store get keys no address has (~lane: the top bits set).
    const uint32_t same = __match_any_sync(0xffffffffu, mine ? me : ~static_cast<uint64_t>(lane));
    overlap = mine && same != (1u << lane);
  } else {
    for (uint32_t k = 0; k < run; ++k) {
      const uint64_t d = shfl64(me, k);
      const uint32_t n = __shfl_sync(0xffffffffu, mine ? l.n : 0u, k);
      if (mine && k > lane && n && d < me + l.n && me < d + n) overlap = true;
    }
  }
  if (__any_sync(0xffffffffu, overlap)) {
    for (uint32_t k = 0; k < run; ++k) {
      if (lane == k && mine) store_lane(l);
      __syncwarp();
    }
  } else if (mine) {
    store_lane(l);
  }
}

// Execute the leading run of plain WQEs from eq.e.ci (all lanes call): up to kRounds rounds of
// 32, lane l taking WQE ci + 32r + l in round r; the WQEs of up to 4 rounds are read at once,
// then those rounds are checked and their payloads stored in order (a round's before the next's).
// Then, after a release fence, lane 0 writes the signaled WQEs' CQEs in WQE order under one hold
// of the CQ's lock. Returns (lane-uniform) the WQEs executed; *more is set when the run ended at
// a WQE the core must handle.
__device__ uint32_t run_batch(Env& env, EngineQp& eq, uint32_t lane, bool* more, uint32_t gen) {
  uint32_t avail = 0, ci = 0;
  Env::Resp resp{};
  Fast f{};
  bool resp_ok = false;
  *more = true;
  Env::Cq cq{nullptr, nullptr};  // lane 0: the send CQ (found here when kCqPrefetch)
  DevCq fixed{};                  // lane 0: its fixed words, read before the WQEs
  bool prefetched = false;
  uint32_t early = 1;  // lane 0 (kLockEarly): the early lock CAS's result, 0 when it took it
  (void)gen;
  if (lane == 0 && kCqPrefetch) {
#if GICBENCH_ENGINE_SERVE_CACHE
    if (eq.c_gen != gen) {  // a new generation: nothing kept is used
      eq.c_gen = gen;
      eq.c_cq = nullptr;
      eq.c_mr = 0;
    }
    if (eq.c_cq && eq.c_cqn == eq.send_cqn) {  // what cq_of and the reads below gave
      cq = Env::Cq{&env.self.cqs()[el::num_index(eq.send_cqn)], eq.c_cq, -1, false};
      fixed.buf = eq.c_buf;
      fixed.ci_rec = eq.c_ci_rec;
      fixed.ncqe = eq.c_ncqe;
      fixed.flags = eq.c_flags;
      prefetched = true;
    } else {
      cq = env.cq_of(env.self, eq.send_cqn);
    }
#else
    cq = env.cq_of(env.self, eq.send_cqn);
#endif
    if constexpr (kLockEarly) {  // only where the batch can run (its `fast`, below)
      const bool fast = env.state == el::kRts &&
                        !(eq.q.flags & (el::kQpNoDbr | el::kQpWqeSig)) && !eq.q.dci &&
                        !eq.e.db_last_open;
      if (fast && cq.d && cq.peer < 0 && !cq.lost) early = env.lock_cas(cq, 0u, env.cfg.pid);
    }
#if GICBENCH_ENGINE_SERVE_CACHE
    if (!prefetched && cq.d && cq.peer < 0 && !cq.lost) {
#else
    if (cq.d && cq.peer < 0 && !cq.lost) {
#endif
      fixed.buf = ld_vol(&cq.d->buf);
      fixed.ci_rec = ld_vol(&cq.d->ci_rec);
      fixed.ncqe = ld_vol(&cq.d->ncqe);
      fixed.flags = ld_vol(&cq.d->flags);
      prefetched = true;
#if GICBENCH_ENGINE_SERVE_CACHE
      eq.c_cqn = eq.send_cqn;
      eq.c_cq = cq.d;
      eq.c_buf = fixed.buf;
      eq.c_ci_rec = fixed.ci_rec;
      eq.c_ncqe = fixed.ncqe;
      eq.c_flags = fixed.flags;
#endif
    }
  }
  if (lane == 0) {
    const ec::SqParams& q = eq.q;
    const bool fast = env.state == el::kRts && !(q.flags & (el::kQpNoDbr | el::kQpWqeSig)) &&
                      !q.dci && !eq.e.db_last_open;
    ci = eq.e.ci;
    f = Fast{q.ring, env.cfg.mr_mirror, env.self.base, q.qpn, q.max_inline, q.pd, env.mr_n};
    if (fast) {
      uint32_t raw;
#if GICBENCH_ENGINE_REC_ONCE
      if (env.rec_p == q.snd_dbrec)  // the core's doorbell step acquired it this serve
        raw = env.rec_v;
      else
#endif
        raw = ld_acq_rec(q.snd_dbrec, (eq.pflags & kPlaceDbrecGpu) != 0);
      const uint32_t pi = m5::bswap32(raw) & 0xffff;
      avail = (pi - ci) & 0xffff;
      if (avail > q.ring.wqebb_cnt) avail = 0;  // the core reports it
      if (avail > kFastMax) avail = kFastMax;
      if (avail) resp_ok = env.responder(nullptr, resp);
    }
    ENGINE_STAMP(env, kStRecord);
  }
  avail = __shfl_sync(0xffffffffu, avail, 0);
  if (kLockEarly && lane == 0 && early == 0 && avail == 0) env.unlock_cq(cq);
  if (avail == 0) return 0;
  ci = __shfl_sync(0xffffffffu, ci, 0);
  resp_ok = __shfl_sync(0xffffffffu, resp_ok, 0);
  shfl_struct(resp, 0);
  shfl_struct(f, 0);
  __syncwarp();  // lane 0's acquire of the record before every lane's reads of the WQEs
  constexpr uint32_t kChunk = kRounds < 4 ? kRounds : 4;  // rounds whose WQEs are read at once
  uint32_t run = 0, msgs = 0;
  uint64_t bytes = 0;
  uint32_t sig[kRounds], nb[kRounds];  // per round: signaled lanes; this lane's bytes (or NOP)
  MrCache mc{};
  bool ended = false;
#pragma unroll
  for (uint32_t r0 = 0; r0 < kRounds; r0 += kChunk) {
    Wqe w[kChunk];
#pragma unroll
    for (uint32_t j = 0; j < kChunk; ++j) {
      if (!ended && 32 * (r0 + j) + lane < avail)
        w[j] = load_wqe(f.ring.wqe(ci + 32 * (r0 + j) + lane));
      else
        w[j] = Wqe{make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
    }
    if (r0 == 0) {
      // The entry lane 0's first WQE names (rkey of an RDMA WRITE's raddr segment), for all.
      const uint32_t i = el::key_index(__shfl_sync(0xffffffffu, m5::bswap32(w[0].r.z), 0));
      if (resp_ok && resp.own && i != 0 && i < f.mr_n) {
#if GICBENCH_ENGINE_SERVE_CACHE
        if (eq.c_mr == i) {  // this generation's copy of mirror entry i (lane 0 set it)
          mc.m = eq.c_m;
        } else {
          mc.m = f.mrs[i];
          __syncwarp();  // every lane's read of c_mr before lane 0 changes it
          if (lane == 0) {
            eq.c_m = mc.m;
            eq.c_mr = i;
          }
        }
#else
        mc.m = f.mrs[i];
#endif
        mc.index = i;
      } else if (kPeerTables && resp_ok && resp.mt && i != 0 && i < resp.mt_max) {
        mc.m = ld_mr(&resp.mt[i]);  // another rank's mirror entry, loaded with its count
        if (i < ld_vol(resp.mt_n)) mc.index = i;
      }
    }
#pragma unroll
    for (uint32_t j = 0; j < kChunk; ++j) {
      const uint32_t r = r0 + j;
      sig[r] = 0;
      nb[r] = 0;
      const uint32_t base = 32 * r;
      if (ended || base >= avail) {
        ended = true;
        continue;
      }
      const uint32_t cnt = min(avail - base, 32u);
      Lane l{nullptr, nullptr, 0, 0, false, false, false, 0};
      if (lane < cnt) l = check_plain(env, f, resp, resp_ok, mc, ci + base + lane, w[j]);
      const uint32_t bad = ~__ballot_sync(0xffffffffu, l.ok) | (cnt < 32 ? ~0u << cnt : 0u);
      const uint32_t rr = bad ? __ffs(bad) - 1 : 32;
      if (rr < 32) ended = true;
      if (rr == 0) continue;
      store_round(l, lane, rr);
      __syncwarp();  // this round's stores before the next round's: overlaps land in WQE order
      const bool mine = lane < rr;
      sig[r] = __ballot_sync(0xffffffffu, mine && l.signaled);
      nb[r] = l.opcode == m5::kOpNop ? kNopBytes : l.n;
      bytes += mine ? l.n : 0;
      msgs += mine && l.opcode != m5::kOpNop ? 1 : 0;
      run += rr;
    }
  }
  *more = run < avail;
  if (lane == 0) ENGINE_STAMP(env, kStStored);
  if (kLockEarly && lane == 0 && early == 0 && run == 0) env.unlock_cq(cq);
  if (run == 0) return 0;
  for (int o = 16; o; o >>= 1) {
    bytes += shfl64(bytes, lane ^ o);  // xor butterfly: every lane ends with the sum
    msgs += __shfl_xor_sync(0xffffffffu, msgs, o);
  }
  uint32_t any = 0;
#pragma unroll
  for (uint32_t r = 0; r < kRounds; ++r) any |= sig[r];
  if (kLockEarly && lane == 0 && early == 0 && !any) env.unlock_cq(cq);
  if (any) {
    fence_rel_gpu();  // every lane's payloads before lane 0's CQEs (whose fence is system scope
    __syncwarp();     // for a CQ in host memory or a responder in another process
                      // (env.remote_sys), cumulative over these)
    Env::HeldCq held;
    held.ok = false;
    const uint32_t qpn = f.qpn;
    if (lane == 0) {
      if (!kCqPrefetch) cq = env.cq_of(env.self, eq.send_cqn);
      if (kLockEarly && prefetched)
        env.lock_cq_from(env.self, cq, early);
      else
        env.lock_cq(env.self, cq);
      if (kCqRegs && prefetched)
        env.hold_cq_from(cq, fixed, held);
      else if (kCqRegs)
        env.hold_cq(env.self, cq, held);
    }
#pragma unroll
    for (uint32_t r = 0; r < kRounds; ++r) {
      for (uint32_t m = sig[r]; m; m &= m - 1) {
        const uint32_t k = __ffs(m) - 1;
        const uint32_t n = __shfl_sync(0xffffffffu, nb[r], k);
        if (lane == 0) {
          const uint8_t op = n == kNopBytes ? m5::kOpNop : m5::kOpRdmaWrite;
          const uint32_t nbytes = n == kNopBytes ? 0 : n;
          const uint16_t idx = static_cast<uint16_t>(ci + 32 * r + k);
          const auto fill = [&](uint8_t* b, uint8_t owner) {
            return m5::fill_req_cqe(b, qpn, op, idx, nbytes, 0, owner);
          };
          if (!kCqRegs)
            env.post_cqe_locked(env.self, cq, qpn, fill);
          else if (held.ok)
            env.post_with(env.self, cq, held.ref, qpn, fill);
        }
      }
    }
    if (lane == 0) {
      env.release_held(held);
      env.unlock_cq(cq);
      ENGINE_STAMP(env, kStCqe);
    }
  }
  if (lane == 0) {
    env.cnt[el::kCntWqes] += run;
    env.cnt[el::kCntBytes] += bytes;
    env.cnt[el::kCntMessages] += msgs;
    eq.t_wqes += run;
    eq.dirty = 1;
    eq.e.ci = ci + run;
  }
  __syncwarp();
  return run;
}

// ---- the warp's loop ----------------------------------------------------------------------------
// The control block (lane 0). One warp (the last: at small QP counts it owns no QP, so no
// QP's doorbell waits behind its PCIe reads) reads the host's and mirrors it into GPU memory;
// every other warp reads the mirror, so idle warps do not flood PCIe with reads (which slows
// every system-scope operation on the GPU).
__device__ Control read_ctl(const Config& cfg, bool mirror) {
  // The host ends a hold after bumping gen (CudaEngine.hold: ref, gen, then hold = 0), and a
  // warp leaving a hold serves at once: a warp that saw hold = 0 with the old gen would serve a
  // QP the host just changed (a RESET's zeroed doorbell taken for a ring with QPN 0). So hold is
  // read first and published last, each side ordered: seeing the new hold implies the new gen.
  Control c;
  if (mirror) {
    const Control* h = cfg.ctl;
    c.hold = ld_acq_sys(&h->hold);
    c.gen = ld_acq_sys(&h->gen);  // the host stores ref_lo/ref_hi before gen
    c.stop = ld_vol(&h->stop);
    c.quiesce = ld_vol(&h->quiesce);
    c.ref_lo = ld_vol(&h->ref_lo);
    c.ref_hi = ld_vol(&h->ref_hi);
    Control* m = cfg.ctl_dev;
    st_vol(&m->ref_lo, c.ref_lo);
    st_vol(&m->ref_hi, c.ref_hi);
    __threadfence();
    st_vol(&m->quiesce, c.quiesce);
    st_vol(&m->stop, c.stop);
    st_vol(&m->gen, c.gen);
    __threadfence();
    st_vol(&m->hold, c.hold);
    __threadfence();
    return c;
  }
  const Control* m = cfg.ctl_dev;
  c.hold = ld_vol(&m->hold);
  fence_acq_gpu();  // gen (and the rest) were written before hold
  c.gen = ld_vol(&m->gen);
  c.stop = ld_vol(&m->stop);
  c.quiesce = ld_vol(&m->quiesce);
  fence_acq_gpu();  // ref_lo/ref_hi were written before gen
  c.ref_lo = ld_vol(&m->ref_lo);
  c.ref_hi = ld_vol(&m->ref_hi);
  return c;
}

struct WarpCounters {
  uint64_t c[el::kNumCounters];
};

// The QP's counters and consumer index into its QpEntry: posted stores, no read, no atomic.
__device__ void flush_qp(const Seg& self, EngineQp& eq) {
  if (!eq.dirty) return;
  el::QpEntry& qe = self.qps()[el::num_index(eq.q.qpn)];
  st_vol(&qe.wqes, eq.t_wqes);
  st_vol(&qe.doorbells, eq.t_doorbells);
  st_vol(&qe.errors, eq.t_errors);
  st_vol(&qe.stale, eq.t_stale);
  st_vol(&qe.dbrec_lag, eq.t_lag);
  st_vol(&qe.sq_ci, eq.e.ci);
  eq.dirty = 0;
}

// The core's steps for lane 0, kept out of line: inlined, their register needs would be the hot
// path's (the kernel spilled in the batch).
__device__ __noinline__ uint32_t core_doorbell(Env& env, EngineQp& eq, uint64_t db) {
  return ec::on_doorbell(env, eq.e, eq.q, db, 0);
}
__device__ __noinline__ uint32_t core_serve(Env& env, EngineQp& eq, uint32_t budget) {
  return ec::serve(env, eq.e, eq.q, budget);
}

// The QP a warp serves, copied into shared memory for the serve: the serve reads its state many
// times, each read depending on the last, and from L2 each such read cost ~0.5 us on the H200
// (bench/cuda_engine.py --stamps: about 25 dependent L2 round trips made the one-QP latency
// ~14 us). One coalesced read of the whole EngineQp at the start (all lanes), the serve works on
// the copy, and the copy is stored back at its end, except `state`: other warps move a QP to
// ERR (cq_fatal) in cfg.qps, so the serve reads and writes state there (Env::state_home). Only
// the owning warp writes the rest of an EngineQp, so nothing else is lost by the store back.
constexpr uint32_t kWarpsPerCta = kCtaThreads / 32;
constexpr uint32_t kQpWords = sizeof(EngineQp) / 4;
constexpr uint32_t kStateWord = offsetof(EngineQp, state) / 4;
static_assert(sizeof(EngineQp) % 4 == 0 && offsetof(EngineQp, state) % 4 == 0, "EngineQp words");
__device__ __forceinline__ EngineQp& served_copy(EngineQp& home, uint32_t lane) {
  if (!kQpCopy) return home;
  __shared__ alignas(32) uint32_t copies[kWarpsPerCta][kQpWords];
  uint32_t* dst = copies[threadIdx.x / 32];
  const uint32_t* src = reinterpret_cast<const uint32_t*>(&home);
  for (uint32_t w = lane; w < kQpWords; w += 32) dst[w] = ld_vol(&src[w]);
  __syncwarp();
  return *reinterpret_cast<EngineQp*>(dst);
}
__device__ __forceinline__ void store_served(EngineQp& home, const EngineQp& copy, uint32_t lane) {
  __syncwarp();  // lane 0's last writes to the copy before every lane's stores
  if (!kQpCopy) return;
  const uint32_t* src = reinterpret_cast<const uint32_t*>(&copy);
  uint32_t* dst = reinterpret_cast<uint32_t*>(&home);
  for (uint32_t w = lane; w < kQpWords; w += 32)
    if (w != kStateWord) st_vol(&dst[w], src[w]);
  __syncwarp();  // the stores before the warp goes on (flush_qp, the next pass read home)
}

// Serve QP slot i (all lanes): the doorbell (if rung), the batch, then the core. Lane 0 returns
// the work done.
__device__ uint32_t serve_qp(const Config& cfg, const Seg& self, WarpCounters& wc, uint32_t i,
                             uint64_t db, bool rung, uint32_t lane,
                             unsigned long long** stamp_rec, uint64_t t_scan, uint32_t gen) {
  EngineQp& home = cfg.qps[i];
  EngineQp& eq = served_copy(home, lane);
  Env env(cfg, eq, &home.state, self);
  uint32_t work = 0;
#if GICBENCH_ENGINE_STAMPS
  // The count through L2 (volatile): the host reads it between pings.
  const uint32_t sn = lane == 0 && rung && i == 1 ? ld_vol(&gicbench_engine_stamp_n) : kStampRecords;
  if (sn < kStampRecords) {
    st_vol(&gicbench_engine_stamp_n, sn + 1);
    env.stamp = &gicbench_engine_stamps[sn * kStampWords];
    env.stamp[kStScan] = t_scan;
    ENGINE_STAMP(env, kStEntry);
    *stamp_rec = env.stamp;
  }
#else
  (void)stamp_rec;
  (void)t_scan;
#endif
  if (lane == 0 && rung) {
    eq.last_db = db;
    core_doorbell(env, eq, db);
    ENGINE_STAMP(env, kStDoorbell);
    work = 1;
  }
  __syncwarp();
  const uint32_t state = __shfl_sync(0xffffffffu, env.state, 0);
  // A doorbell the core refused (another QPN, outside the window, not RTS) announces nothing:
  // served only if work was pending anyway, as the CPU engine does.
  const bool go = __shfl_sync(0xffffffffu, lane == 0 ? eq.e.pending : 0, 0) != 0;
  if (go && (state == el::kRts || state == el::kErr)) {
    bool more = true;
    if (state == el::kRts) work += run_batch(env, eq, lane, &more, gen);
    if (lane == 0) {
      // What the batch left (at most one batch's worth), or only the core's bookkeeping after
      // it (the record re-read, lag checks, pending): the core.
      work += core_serve(env, eq, more ? kBatch : 0);
      ENGINE_STAMP(env, kStCore);
    }
  } else if (lane == 0) {
    eq.e.pending = 0;
  }
  if (lane == 0) {
    for (uint32_t c = 0; c < el::kNumCounters; ++c) wc.c[c] += env.cnt[c];
    eq.want = eq.e.pending;
  }
  store_served(home, eq, lane);
  return work;
}

// The warp's counts into its row of cfg.wcnt (GPU memory; only this warp writes it).
__device__ void flush_counters(const Config& cfg, uint32_t w, WarpCounters& wc, uint32_t lane) {
  if (lane != 0) return;
#if GICBENCH_ENGINE_SEG_COUNTERS
  (void)w;
  el::Header* h = reinterpret_cast<el::Header*>(cfg.seg[cfg.rank] & ~kForeign);
  for (uint32_t c = 0; c < el::kNumCounters; ++c) add_sys(&h->counters[c], wc.c[c]);
#else
  uint64_t* row = cfg.wcnt + static_cast<uint64_t>(w) * el::kNumCounters;
  for (uint32_t c = 0; c < el::kNumCounters; ++c)
    if (wc.c[c]) st_vol(&row[c], ld_vol(&row[c]) + wc.c[c]);
#endif
  for (uint32_t c = 0; c < el::kNumCounters; ++c) wc.c[c] = 0;
}

// Re-read the owned QPs (slots 1 + wq + k*nw) from the segment (new slots, changed states and
// peers, RESET) and, on warp 0, append new MR entries to the GPU mirror.
__device__ void refresh(const Config& cfg, const Seg& self, uint32_t lo, uint32_t hi, uint32_t wq,
                        uint32_t w, uint32_t nw, uint32_t lane) {
  const uint32_t n = min(ld_vol(&self.hdr()->n_qps), cfg.max_qps);
  for (uint32_t base = 1 + wq; base < n; base += nw * 32) {
    const uint32_t i = base + lane * nw;
    if (i < n && (hi == 0 || (i >= lo && i < hi))) {
      EngineQp& eq = cfg.qps[i];
      el::QpEntry& qe = self.qps()[i];
      const QpPlace pl = cfg.place[i];
      const uint32_t st = ld_acq_sys(&qe.state);
      if (!eq.live || st == el::kReset) {
        eq.e = ec::SqState{};
        eq.want = 0;
        eq.last_db = 0;
        eq.t_wqes = ld_vol(&qe.wqes);  // what the segment holds (flushed before any hold)
        eq.t_doorbells = ld_vol(&qe.doorbells);
        eq.t_errors = ld_vol(&qe.errors);
        eq.t_stale = ld_vol(&qe.stale);
        eq.t_lag = ld_vol(&qe.dbrec_lag);
        eq.dirty = 0;
      }
      eq.q = ec::SqParams{m5::SqRing{reinterpret_cast<uint8_t*>(pl.ring), ld_vol(&qe.wqebb_cnt)},
                          ld_vol(&qe.qpn),
                          ld_vol(&qe.flags),
                          ld_vol(&qe.max_inline),
                          ld_vol(&qe.pd),
                          ld_vol(&qe.type) == el::kDci,
                          reinterpret_cast<const uint32_t*>(pl.dbrec) + m5::kSndDbr};
      eq.doorbell = reinterpret_cast<const uint64_t*>(pl.doorbell);
      eq.state = st;
      eq.type = ld_vol(&qe.type);
      eq.send_cqn = ld_vol(&qe.send_cqn);
      eq.remote_rank = ld_vol(&qe.remote_rank);
      eq.remote_qpn = ld_vol(&qe.remote_qpn);
      eq.pflags = static_cast<uint32_t>(pl.flags);
      eq.live = pl.ring != 0;
    }
  }
  if (w == 0) {
    const uint32_t have = ld_vol(cfg.mr_count);
    const uint32_t want = ld_vol(&self.hdr()->n_mrs);
    for (uint32_t k = have + lane; k < want; k += 32) cfg.mr_mirror[k] = self.mrs()[k];
    __threadfence();
    __syncwarp();
    if (lane == 0 && want > have) st_vol(cfg.mr_count, want);
  }
  if (w == 0 && lane == 0) st_vol(cfg.n_qps, n);
  __threadfence();
  __syncwarp();
}

}  // namespace cuda_engine
}  // namespace gicbench

using namespace gicbench::cuda_engine;

// The engine: `cfg` in GPU memory; blockDim.x a multiple of 32.
// QP ownership: warp j of CTA b owns slots 1 + wq + k*nw with wq = j*gridDim + b, so slots
// 1, 2, 3, ... go to different CTAs (SMs) first: few QPs spread over the SMs, not 8 to a CTA.
extern "C" __global__ void __launch_bounds__(kCtaThreads, 1) gicbench_emu_engine(const Config* __restrict__ pcfg) {
  const Config& cfg = *pcfg;
  const uint32_t lane = threadIdx.x & 31;
  const uint32_t wpc = blockDim.x / 32;
  const uint32_t nw = gridDim.x * wpc;
  const uint32_t w = blockIdx.x * wpc + threadIdx.x / 32;
  const uint32_t wq = (threadIdx.x / 32) * gridDim.x + blockIdx.x;
  // The warp that reads the host's control block for everyone (GICBENCH_ENGINE_CTL_WARP).
  const bool mirror = w == (GICBENCH_ENGINE_CTL_WARP ? 0u : nw - 1);
  const uint32_t stride = nw * 32;  // slots between a lane's QPs
  WarpAck& ack = cfg.acks[w];
  const Seg self = Seg::of(cfg.seg[cfg.rank]);
  WarpCounters wc;
  for (uint32_t c = 0; c < el::kNumCounters; ++c) wc.c[c] = 0;
  uint32_t gen_seen = 0xffffffffu, q_req = 0, q_acked = 0, idle_run = 0;
  bool q_pending = false;
  uint64_t pass = 0, served = 0, since_flush = 0;
  if (w == 0 && lane == 0) {  // the segment's offsets, for peers (PeerTables), before any ack
    uint64_t* o = cfg.tables_hdr + kTabSegOffs;
    st_vol(o, self.mr_off);
    st_vol(o + 1, self.qp_off);
    st_vol(o + 2, self.cq_off);
    st_vol(o + 3, self.dct_off);
    st_vol(o + 4, self.err_off);
  }
  if (lane == 0) {
    q_acked = ld_vol(&ack.quiesce);
    st_vol(&ack.resident, 1u);
    __threadfence_system();
  }
  q_acked = __shfl_sync(0xffffffffu, q_acked, 0);
  bool idle = true;
  // The heads of the owned QPs kept between idle passes (kHeadCache); valid while head_n == n.
  const uint64_t* c_ptr[kScanGroups];
  uint64_t c_last[kScanGroups];
  bool c_pend[kScanGroups];
#pragma unroll
  for (uint32_t g = 0; g < kScanGroups; ++g) {
    c_ptr[g] = nullptr;
    c_last[g] = 0;
    c_pend[g] = false;
  }
  uint32_t head_n = 0;
  unsigned long long* stamp_rec = nullptr;  // kStamps: the record a serve of slot 1 began
  for (;;) {
    // The control block every kCtlPasses passes, and every kIdleCtlPasses idle ones (a read of
    // it costs a fence: on every idle pass it would lengthen the doorbell poll).
    if (pass % kCtlPasses == 0 || (idle && ++idle_run % kIdleCtlPasses == 0)) {
      uint32_t stop = 0, hold = 0, gen = 0, qz = 0, rlo = 0, rhi = 0;
      if (lane == 0) {
        const Control c = read_ctl(cfg, mirror);
        stop = c.stop;
        hold = c.hold;
        gen = c.gen;
        qz = c.quiesce;
        rlo = c.ref_lo;
        rhi = c.ref_hi;
      }
      stop = __shfl_sync(0xffffffffu, stop, 0);
      hold = __shfl_sync(0xffffffffu, hold, 0);
      gen = __shfl_sync(0xffffffffu, gen, 0);
      qz = __shfl_sync(0xffffffffu, qz, 0);
      if (stop || hold) {
        // Flush what this warp owes the segment, then exit or wait for the hold to end.
        flush_counters(cfg, w, wc, lane);
        for (uint32_t i = 1 + wq + lane * nw; i < ld_vol(cfg.n_qps); i += stride) flush_qp(self, cfg.qps[i]);
        __threadfence_system();
        __syncwarp();
        if (lane == 0) {
          st_vol(&ack.passes, pass);
          st_vol(&ack.served, served);
        }
        if (stop) break;
        if (lane == 0) {
          st_vol(&ack.held, hold);
          __threadfence_system();
          for (;;) {
            const Control c = read_ctl(cfg, mirror);
            if (c.hold != hold || c.stop) break;
            __nanosleep(2000);
          }
        }
        __syncwarp();
        idle = true;
        idle_run = kIdleCtlPasses - 1;  // re-read the control block next (gen has moved)
        head_n = 0;
        continue;
      }
      if (gen != gen_seen) {
        uint32_t lo = 0, hi = 0;
        if (lane == 0 && gen_seen != 0xffffffffu && gen == gen_seen + 1) {
          lo = rlo;  // one step: the host says which slots changed
          hi = rhi;
        }
        lo = __shfl_sync(0xffffffffu, lo, 0);
        hi = __shfl_sync(0xffffffffu, hi, 0);
        refresh(cfg, self, lo, hi, wq, w, nw, lane);
        head_n = 0;
        gen_seen = gen;
        if (lane == 0) {
          __threadfence_system();
          st_vol(&ack.gen, gen);
        }
      }
      if (qz != q_acked && !q_pending) {
        q_pending = true;  // acknowledged after a pass (beginning below) that finds no work
        q_req = qz;
      }
    }
    // Peers' engines may move our QPs to ERR (their responder CQE overran our CQ): re-read.
    if (pass % kStateCheckPasses == kStateCheckPasses - 1) {
      for (uint32_t i = 1 + wq + lane * nw; i < ld_vol(cfg.n_qps); i += stride) {
        EngineQp& eq = cfg.qps[i];
        if (eq.live && ld_vol(&self.qps()[i].state) == el::kErr) st_vol(&eq.state, static_cast<uint32_t>(el::kErr));
      }
      __syncwarp();
    }
    // One pass over the owned QPs: kScanGroups groups of 32 doorbell registers are read at once
    // (one round trip, not one per group: a warp owning many idle QPs still polls quickly), then
    // the rung or pending ones of each group are served.
    const uint32_t n = ld_vol(cfg.n_qps);
    uint32_t work = 0;
    // One sweep covers every owned QP: its heads may stay in registers (kHeadCache).
    const bool one_sweep = kHeadCache && 1 + wq + stride * kScanGroups >= n;
    const bool cached = one_sweep && head_n == n;
    bool served_any = false;
    for (uint32_t base0 = 1 + wq; base0 < n; base0 += stride * kScanGroups) {
      const uint64_t* ptr[kScanGroups];
      uint64_t db[kScanGroups], last[kScanGroups];
      bool pend[kScanGroups];
#pragma unroll
      for (uint32_t g = 0; g < kScanGroups; ++g) {
        const uint32_t i = base0 + g * stride + lane * nw;
        ptr[g] = c_ptr[g];
        last[g] = c_last[g];
        pend[g] = c_pend[g];
        if (!cached) {
          ptr[g] = nullptr;
          last[g] = 0;
          pend[g] = false;
          if (i < n) {  // the head's words at once, then decide (no load waits on `live`)
            const EngineQp& eq = cfg.qps[i];
            const uint64_t* d = eq.doorbell;
            const uint64_t l = eq.last_db;
            const uint32_t lv = eq.live, wt = eq.want;
            ptr[g] = lv ? d : nullptr;
            last[g] = l;
            pend[g] = lv && wt;
          }
          if (one_sweep) {
            c_ptr[g] = ptr[g];
            c_last[g] = last[g];
            c_pend[g] = pend[g];
          }
        }
      }
#pragma unroll
      for (uint32_t g = 0; g < kScanGroups; ++g) db[g] = ptr[g] ? ld_vol(ptr[g]) : 0;
      uint32_t want_m[kScanGroups], rung_m[kScanGroups], groups = 0;  // groups: with work
#pragma unroll
      for (uint32_t g = 0; g < kScanGroups; ++g) {
        const bool rung = ptr[g] && db[g] != last[g];
        rung_m[g] = __ballot_sync(0xffffffffu, rung);
        want_m[g] = __ballot_sync(0xffffffffu, rung || pend[g]);
        if (want_m[g]) groups |= 1u << g;
      }
      if (groups) served_any = true;  // a serve changes heads (last doorbell, pending)
      const uint64_t t_scan = kStamps && groups ? engine_clock_ns() : 0;
#pragma unroll 1
      for (; groups; groups &= groups - 1) {  // one copy of the serve code, not four
        const uint32_t g = __ffs(groups) - 1;
        uint32_t wm = 0, rm = 0;
        uint64_t dbg = 0;
#pragma unroll
        for (uint32_t j = 0; j < kScanGroups; ++j) {  // registers, not a local-memory array
          if (j == g) {
            wm = want_m[j];
            rm = rung_m[j];
            dbg = db[j];
          }
        }
        const uint32_t base = base0 + g * stride;
        for (uint32_t m = wm; m; m &= m - 1) {
          const int k = __ffs(m) - 1;
          const uint32_t qi = base + k * nw;
          const uint64_t dbk = shfl64(dbg, k);
          work += serve_qp(cfg, self, wc, qi, dbk, (rm >> k) & 1, lane, &stamp_rec, t_scan,
                           gen_seen);
          ++served;
          if (++since_flush >= kFlushServes) {
            since_flush = 0;
            flush_counters(cfg, w, wc, lane);
            if (lane == 0) flush_qp(self, cfg.qps[qi]);
          }
        }
      }
    }
    work = __shfl_sync(0xffffffffu, work, 0);
    head_n = one_sweep && !served_any ? n : 0;
    idle = work == 0;
    if (!idle) idle_run = 0;
    if (idle && since_flush && idle_run + 1 > kIdleFlushPasses) {
      since_flush = 0;
      flush_counters(cfg, w, wc, lane);
      for (uint32_t i = 1 + wq + lane * nw; i < n; i += stride) flush_qp(self, cfg.qps[i]);
      __threadfence_system();
      __syncwarp();
    }
    if (q_pending && idle) {
      flush_counters(cfg, w, wc, lane);
      for (uint32_t i = 1 + wq + lane * nw; i < n; i += stride) flush_qp(self, cfg.qps[i]);
      __threadfence_system();
      __syncwarp();
      if (lane == 0) {
        st_vol(&ack.passes, pass);
        st_vol(&ack.served, served);
        st_vol(&ack.quiesce, q_req);
        __threadfence_system();
      }
      q_acked = q_req;
      q_pending = false;
    }
    if (kStamps && stamp_rec) {  // lane 0 only sets it: the pass that served slot 1 ends here
      stamp_rec[kStPassEnd] = engine_clock_ns();
      stamp_rec = nullptr;
    }
    // A warp that owns no QP only watches the control block: it need not spin at full rate.
    if (idle && 1 + wq >= n && !q_pending && (!mirror || kCtlPaceNs))
      __nanosleep(mirror ? kCtlPaceNs : 1000);
    if (kIdlePaceNs && idle && !q_pending && 1 + wq < n) {
      const uint32_t owned = (n - 1 - wq + nw - 1) / nw;
      if (owned >= 32) __nanosleep(kIdlePaceNs * owned / 128);
    }
    ++pass;
  }
}

// Sizes the host allocates (gicbench/fabric/emu/cuda_engine.py asks, so the layouts have one
// home): EngineQp, Config, WarpAck, QpPlace, MrEntry, DevCq.
extern "C" __global__ void gicbench_emu_engine_sizes(unsigned long long* out) {
  out[0] = sizeof(EngineQp);
  out[1] = sizeof(Config);
  out[2] = sizeof(WarpAck);
  out[3] = sizeof(QpPlace);
  out[4] = sizeof(gicbench::emu::MrEntry);
  out[5] = sizeof(DevCq);
  out[6] = gicbench::emu::kNumCounters;
}
