// The host half of a host-forwarded doorbell: GPU threads build WQEs and mark each one ready in a
// slot array in host memory; a host thread advances the contiguous ready prefix and publishes it
// as a NIC driver does (the second paper's "GDAKI Free Flow", arXiv 2611.12362; the first paper's
// CPU-assisted doorbell, arXiv 2610.01380). Used by mini-gda's forwarder (gda_forward.cpp) and
// fits DOCA GPUNetIO's CPU_PROXY_FREE_FLOW handler (doca_proxy.cpp) unchanged.
//
// Slot format: slot[i & mask] (one 8-byte word per WQEBB of the SQ) holds the producer index just
// after the WQE that starts at WQEBB i (i + 1 for a one-WQEBB WQE: DOCA's
// doca_gpu_dev_verbs_mark_wqes_ready_free_flow marks every WQEBB so). The prefix at P is ready
// when its slot holds v with 0 < v - P <= nslots (compared on 32 bits, so a GPU writing 32-bit
// running indices and DOCA writing 64-bit ones both fit); a value left from an earlier pass of
// the ring is at most P and never reads as ready. Marks are read with acquire loads.
#pragma once

#include <cstdint>

namespace gicbench {
namespace ready {

inline uint32_t be32(uint32_t v) { return __builtin_bswap32(v); }

// One QP's forwarding state.
struct Queue {
  const uint64_t* slots;  // nslots words, host address
  uint32_t* dbrec_snd;    // the QP's MLX5_SND_DBR word (doorbell record + 4)
  uint64_t* db;           // the doorbell register
  uint32_t qpn;
  uint32_t mask;          // nslots - 1 (nslots = SQ WQEBBs, a power of two)
  uint64_t rung;          // producer index published so far (the ready prefix)
  uint64_t rings;         // doorbells rung
};

// The ready prefix from q.rung: how far the contiguous marked WQEs reach (at most one ring).
inline uint64_t prefix(const Queue& q) {
  const uint64_t nslots = uint64_t{q.mask} + 1;
  uint64_t p = q.rung;
  while (p - q.rung < nslots) {
    const uint64_t v = __atomic_load_n(&q.slots[p & q.mask], __ATOMIC_ACQUIRE);
    const uint32_t ahead = static_cast<uint32_t>(v) - static_cast<uint32_t>(p);
    if (ahead == 0 || ahead > nslots || p + ahead - q.rung > nslots) break;
    p += ahead;
  }
  return p;
}

// Publish producer index `pi`: the doorbell record (BE32 of pi & 0xffff), then the doorbell
// register with the next-index value (opcode 0, ds 0, as IBGDA and DOCA GPUNetIO ring), each a
// release store so the NIC that sees the register sees the record and the WQEs.
inline void ring(Queue& q, uint64_t pi) {
  __atomic_store_n(q.dbrec_snd, be32(static_cast<uint32_t>(pi & 0xffff)), __ATOMIC_RELEASE);
  const uint64_t v = uint64_t{be32(static_cast<uint32_t>((pi & 0xffff) << 8))} |
                     uint64_t{be32(q.qpn << 8)} << 32;
  __atomic_store_n(q.db, v, __ATOMIC_RELEASE);
  q.rung = pi;
  ++q.rings;
}

// One step: ring once if the prefix moved; true if it did.
inline bool step(Queue& q) {
  const uint64_t p = prefix(q);
  if (p == q.rung) return false;
  ring(q, p);
  return true;
}

}  // namespace ready
}  // namespace gicbench
