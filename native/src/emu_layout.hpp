// Layout of one rank's emulated-NIC shared-memory segment (POSIX shm, mapped by every rank of the
// node). Everything a peer's engine may touch lives here: MR table (rkey lookup), QP/DCT tables
// (responder state, receive queues), CQ table (responder CQEs, overrun state), the rings, the
// doorbell page and the registered buffers. Plain structs, accessed with __atomic builtins: the
// segment is shared between processes, so no constructors run on it.
#pragma once

#include <cstdint>

// The number and key arithmetic is also used by the CUDA engine (cuda/emu_engine.cu).
#if defined(__CUDACC__)
#define GB_EMU_HD __host__ __device__
#else
#define GB_EMU_HD
#endif

namespace gicbench {
namespace emu {

constexpr uint64_t kMagic = 0x3175'6d65'6263'6967ull;  // "gicbemu1" little-endian
constexpr uint32_t kLayoutVersion = 3;
constexpr uint32_t kHeaderBytes = 4096;
constexpr uint32_t kErrRing = 256;  // error records kept (older ones are overwritten)
constexpr uint32_t kMaxRanks = 256;  // numbers carry (rank & 0xff) << 16
constexpr uint32_t kMaxQps = 0x7fff;  // bit 15 of a number's index marks a DCT
constexpr uint32_t kDctBit = 0x8000;
// Doorbell registers sit 64 bytes apart, like a UAR's BlueFlame registers: a 64-byte BlueFlame copy
// of a WQEBB lands on its own QP's register only. Doorbell records: one 64-byte slot per object.
constexpr uint32_t kDbStride = 64;
constexpr uint32_t kDbrecStride = 64;
constexpr uint64_t kPage = 4096;
// GPI queues (docs/gpi.md): a table of kMaxGpis entries in the header page, at kGpiTableOff.
constexpr uint32_t kMaxGpis = 16;
constexpr uint32_t kGpiTableOff = 2048;

// Object numbers (QPN, DCT number, CQN): one 24-bit namespace per node.
GB_EMU_HD inline uint32_t make_num(uint32_t rank, uint32_t index) { return ((rank & 0xff) << 16) | index; }
GB_EMU_HD inline uint32_t num_rank(uint32_t num) { return (num >> 16) & 0xff; }
GB_EMU_HD inline uint32_t num_index(uint32_t num) { return num & 0xffff; }

// Keys: (mr_index << 8) | key_byte, like mlx5 mkeys (index 0 is never used, so no key is 0).
GB_EMU_HD inline uint32_t key_index(uint32_t key) { return key >> 8; }

enum QpState : uint32_t { kReset = 0, kInit = 1, kRtr = 2, kRts = 3, kErr = 6 };
enum QpType : uint32_t { kNone = 0, kRc = 1, kDci = 2 };
enum Access : uint32_t { kLocalWrite = 1, kRemoteWrite = 2, kRemoteRead = 4, kRemoteAtomic = 8 };
// mlx5_ifc.h cqc status values
enum CqStatus : uint32_t { kCqOk = 0, kCqOverflow = 9 };
// CQ creation flags (mlx5_ifc.h cqc.cc, cqc.oi).
enum CqFlags : uint32_t { kCqCollapsed = 1, kCqOverrunIgnore = 2 };
// QP creation flags: no send doorbell record (the producer index comes from the doorbell, as
// ConnectX-7's DBR-less SQ), and the WQE signature check (MLX5_QP_FLAG_SIGNATURE).
enum QpFlags : uint32_t { kQpNoDbr = 1, kQpWqeSig = 2 };

// Rank-wide counters (index into Header::counters).
enum Counter : uint32_t {
  kCntWqes,            // WQEs executed (not counting flushed or stale ones)
  kCntDoorbells,       // doorbell-word changes seen
  kCntBytes,           // payload bytes moved (writes, 8 per atomic)
  kCntMessages,        // RDMA operations issued (write, write_imm, atomic)
  kCntErrors,          // error CQEs written (excluding flushes)
  kCntStaleWqes,       // WQEs whose ctrl index was not the expected one (not executed)
  kCntFlushed,         // WQEs completed with WR_FLUSH
  kCntCqOverruns,      // CQs of this rank that overflowed
  kCntCqes,            // CQEs written into this rank's CQs
  kCntCqeDropped,      // CQEs lost because the CQ was in error
  kCntNotRts,          // doorbells on a QP not in RTS (ignored, as hardware does)
  kCntBadDoorbells,    // doorbells naming a QPN or index outside the posted window
  kCntRecvConsumed,    // receives consumed by WRITE_IMM arriving at this rank
  kCntDcKeyViolations, // packets dropped at this rank's DCTs for a wrong DC key
  kCntRnr,             // WRITE_IMM/SEND that found no receive posted (requester side)
  kCntDbrecLag,        // doorbells that named WQEs the send doorbell record had not yet published
  kCntColdWakeups,     // doorbells found by the rotating sweep (QP not in the recently-rung set)
  kCntQpFatal,         // QPs moved to ERR because their CQ overran
  kCntLockSteals,      // responder-CQ locks taken over from a dead owner process
  kNumCounters,
};

// What an error record reports (Python raises FabricError from these).
enum ErrKind : uint32_t {
  kErrStaleWqe = 1,     // expected = consumer index, found = index in ctrl
  kErrNotRts = 2,       // expected = QP state, found = WQE index the doorbell named
  kErrCqOverrun = 3,    // cqn set; expected = consumer index, found = producer index
  kErrBadDoorbell = 4,  // expected = consumer index, found = doorbell's index (or QPN)
  kErrCompletion = 5,   // an error CQE was written: expected = syndrome, found = wqe index
  kErrQpFatal = 6,      // QP moved to ERR by the overrun of CQ cqn (the fatal QP event)
  kErrDoorbellQpn = 7,  // doorbell value carries another QPN: expected = QPN, found = its QPN
  kErrBadDbrec = 8,     // send doorbell record outside the window: expected = ci, found = record
  kErrDeadOwner = 9,    // lock of CQ cqn held by dead pid `found`: taken over
  kErrGpi = 10,         // a GPI descriptor failed: qpn = the queue's number, expected = syndrome,
                        // found = descriptor index (low 32 bits), cqn = its destination
};

// Rank-wide counters of the GPI queues (Header::gpi_counters), apart from the WQE path's.
enum GpiCounter : uint32_t {
  kGpiCntDescriptors,  // descriptors executed
  kGpiCntWrites,       // RDMA writes they were realized as (k per fan-out)
  kGpiCntSignals,      // signal adds
  kGpiCntBytes,        // bytes written
  kGpiCntTornWaits,    // descriptors found torn (counted once each)
  kGpiCntErrors,       // descriptors that failed
  kNumGpiCounters,
};

struct ErrRecord {
  uint64_t seq;  // ticket + 1 once the record is complete (release store)
  uint32_t kind;
  uint32_t qpn;
  uint32_t expected;
  uint32_t found;
  uint32_t cqn;
  int32_t rank;  // the engine that detected it
};
static_assert(sizeof(ErrRecord) == 32, "ErrRecord layout");

struct MrEntry {
  uint32_t key;  // 0 = free; published last with a release store
  uint32_t access;
  uint64_t offset;  // in the owner's segment
  uint64_t length;
  uint64_t addr;  // the address the owner reported (its mapping base + offset)
  uint32_t pd;    // protection domain: only QPs/DCTs of the same pd may use the key
  uint32_t pad;
  uint64_t reserved;  // 1: GPU memory (the CUDA engine's; offset wraps to its GPU address)
};
static_assert(sizeof(MrEntry) == 48, "MrEntry layout");

struct CqEntry {
  uint32_t lock;  // spinlock: responder CQEs come from other ranks' engines
  uint32_t status;
  uint32_t ncqe;
  uint32_t cqn;
  uint64_t buf_off;
  uint64_t dbrec_off;
  uint32_t pi;  // producer index (under lock)
  uint32_t dropped;
  uint32_t flags;  // CqFlags
  uint32_t pad;
  uint64_t reserved[2];  // [0]: GPU address of the CUDA engine's DevCq when the CQ is in GPU memory
};
static_assert(sizeof(CqEntry) == 64, "CqEntry layout");

// A receive queue of 16-byte entries (consumed by WRITE_IMM; the entries' contents are not used:
// the payload goes to raddr). Producer index: BE32 at dbrec_off (RCV_DBR word).
struct RqState {
  uint64_t buf_off;
  uint64_t dbrec_off;  // address of the receive producer word
  uint32_t wqe_cnt;    // 0 = no RQ
  uint32_t ci;         // consumer index, under the receive CQ's lock
  uint32_t cqn;
  uint32_t pad;
};

struct QpEntry {
  uint32_t state;  // QpState; written by control and by the engine (-> ERR)
  uint32_t type;
  uint32_t qpn;
  uint32_t wqebb_cnt;
  uint64_t sq_off;
  uint64_t dbrec_off;  // the QP's doorbell record (2 words: [RCV], [SND])
  uint32_t send_cqn;
  int32_t remote_rank;
  uint32_t remote_qpn;
  uint32_t sq_ci;  // engine's consumer index (mirror for inspection)
  RqState rq;
  uint64_t wqes, doorbells, errors, stale;  // per-QP counters (owner engine only)
  uint32_t flags;       // QpFlags
  uint32_t max_inline;  // inline payload bytes allowed per WQE (0: what ds allows)
  uint32_t pd;
  uint32_t dbrec_lag;   // doorbells that ran ahead of the doorbell record (owner engine only)
};
static_assert(sizeof(QpEntry) == 128, "QpEntry layout");

struct DctEntry {
  uint32_t state;  // kRtr when usable
  uint32_t dctn;
  uint64_t dc_key;
  RqState rq;  // rq.cqn is the DCT's CQ
  uint32_t key_violations;
  uint32_t pad;
  uint32_t pd;
  uint32_t pad2;
};
static_assert(sizeof(DctEntry) == 64, "DctEntry layout");

// One GPI queue: its region in the queue arena holds the control block (pi, ci, errors,
// last_error, counters; cuda/gpi.cuh), the window table and the descriptor ring.
struct GpiEntry {
  uint32_t state;  // 0 unused, 1 live (published last with a release store)
  uint32_t num;    // (rank & 0xff) << 16 | index, its own namespace
  uint32_t log_depth;
  uint32_t pd;
  uint64_t base_off;  // the control block
  uint64_t win_off;   // nwindows x world GpiWinEntry, handle-major
  uint64_t ring_off;  // 2^log_depth descriptors of 64 bytes
  uint32_t nwindows, ncounters;
  uint32_t world;
  uint32_t pad[3];
};
static_assert(sizeof(GpiEntry) == 64, "GpiEntry layout");

struct GpiWinEntry {
  uint64_t addr;    // as the owner reports it (MrEntry::addr space)
  uint64_t length;  // bytes a descriptor may name from addr
  uint32_t key;
  uint32_t valid;  // published last (release)
  uint64_t pad;
};
static_assert(sizeof(GpiWinEntry) == 32, "GpiWinEntry layout");

struct Header {
  uint64_t magic;
  uint32_t version;
  uint32_t header_bytes;
  uint64_t total_bytes;
  int32_t rank;
  int32_t world;
  int32_t pid;
  uint32_t max_mrs, max_qps, max_cqs, max_dcts;
  uint32_t pad0;
  uint64_t mr_off, qp_off, cq_off, dct_off, err_off;
  // Queue arena (page aligned): doorbell registers, doorbell records, then the rings (bump up).
  uint64_t queue_off, db_off, qp_dbrec_off, cq_dbrec_off, dct_dbrec_off, ring_off;
  uint32_t n_mrs, n_qps, n_cqs, n_dcts;  // high-water marks (slot 0 unused), release-published
  uint64_t ring_used;                     // rings: bump allocator up from ring_off
  uint64_t mr_used;                       // memory regions: bump allocator down from the end
  uint64_t err_head;                      // error-record tickets
  uint32_t n_gpis;                        // GPI table high-water mark (slot 0 unused)
  uint32_t pad1;
  uint64_t gpi_counters[kNumGpiCounters];
  uint64_t reserved[1];
  alignas(64) uint64_t counters[kNumCounters];
};
static_assert(sizeof(Header) <= kGpiTableOff, "header below the GPI table");
static_assert(kGpiTableOff + kMaxGpis * sizeof(GpiEntry) <= kHeaderBytes, "GPI table fits");

// ---- __atomic helpers over the shared mapping --------------------------------------------------
template <class T>
inline T ld_acq(const T* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
template <class T>
inline T ld_rlx(const T* p) {
  return __atomic_load_n(p, __ATOMIC_RELAXED);
}
template <class T>
inline void st_rel(T* p, T v) {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
template <class T>
inline void st_rlx(T* p, T v) {
  __atomic_store_n(p, v, __ATOMIC_RELAXED);
}
template <class T>
inline T add_rlx(T* p, T v) {
  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

inline void cpu_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Spinlock word in shared memory holding the owner's pid (0 = free). A waiter that has spun for a
// long time checks whether the owner process still exists; if it died holding the lock (a rank
// killed inside a responder CQE), the lock is taken over instead of waiting forever. Returns the
// dead owner's pid when it took over, else 0.
bool pid_alive(uint32_t pid);
inline uint32_t spin_lock(uint32_t* l, uint32_t me) {
  uint32_t spins = 0;
  for (;;) {
    uint32_t cur = 0;
    if (__atomic_compare_exchange_n(l, &cur, me, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
      return 0;
    while ((cur = ld_rlx(l)) != 0) {
      cpu_pause();
      if (++spins % (1u << 20) == 0 && cur != me && !pid_alive(cur)) {
        if (__atomic_compare_exchange_n(l, &cur, me, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
          return cur;
      }
    }
  }
}
inline void spin_unlock(uint32_t* l) { st_rel(l, 0u); }

}  // namespace emu
}  // namespace gicbench
