// kernel-cost's communication call on mini-proxy's GPU producers (the paper, arXiv 2610.01380,
// §4.2, §4.3.2): thread 0 of a block pushes one message descriptor into a host ring (mapped into
// the GPU) that the proxy's pinned CPU workers drain and post as RDMA writes; with `wait` it
// then polls the ring's completion counter, which the worker advances after the write's CQE.
//
// The handoff is cuda/proxy/kernels.cu's baseline protocol, the one that lets many producers
// share a ring: a device atomic reserves the ring index, the worker's progress is read from host
// memory while the ring looks full, word1 is stored and word0 published with a system-scope
// release store. The descriptor words are proxy_ring.hpp's (desc_word0/desc_word1), the ring
// layout is the native module's (HEAD_OFF, ... defined by the launcher).
//
// Placement (app/submit/proxy/kernel_cost.py mirrors it): block b writes through lane
// b mod nlanes, as mini-gda's call; the lane belongs to worker lane mod workers (the engine's
// rule), and the block uses ring w + workers x ((b div workers) mod n) among that worker's n
// rings w, w + workers, ... (ring b mod nrings when workers divides both).
#pragma once

#include <stdint.h>

#if !defined(HEAD_OFF) || !defined(COMPLETED_OFF) || !defined(CONTROL_OFF) || \
    !defined(HEADER_BYTES) || !defined(MAX_LENGTH)
#error "define HEAD_OFF, COMPLETED_OFF, CONTROL_OFF, HEADER_BYTES and MAX_LENGTH (the ring layout)"
#endif

namespace gicbench {
namespace kcost {

// What every call of one launch shares (passed by pointer: one argument register pair).
struct SendArgs {
  unsigned char* const* rings;        // GPU addresses of the rings (host memory, mapped)
  unsigned long long* reserve;        // per ring: its next index (GPU memory, device atomics)
  const unsigned long long* control;  // ring 0's control word: the host's abort bit
  unsigned long long* status;         // first failure: code << 32 | ring
  uint64_t timeout_ns;
  uint32_t nrings;
  uint32_t workers;
  uint32_t nlanes;
  uint32_t depth;  // descriptors per ring (a power of two)
  uint32_t size;   // bytes of each message
  uint32_t pad;
};
// The launcher packs these bytes (gicbench.submit.proxy.kernel_cost.send_args).
static_assert(sizeof(SendArgs) == 64, "SendArgs is 64 bytes (proxy kernel_cost.SEND_ARGS_BYTES)");
static_assert(offsetof(SendArgs, timeout_ns) == 32 && offsetof(SendArgs, nrings) == 40 &&
                  offsetof(SendArgs, size) == 56,
              "SendArgs field offsets (proxy kernel_cost.send_args)");

namespace proxy {

constexpr unsigned long long kAbort = 2ull;  // the control word's abort bit (gpu.py ABORT)
constexpr unsigned long long kTimeout = 1ull, kAborted = 2ull;  // status codes (gpu.py STATUS)

__device__ __forceinline__ unsigned long long ld_sys(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long gtime() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned long long* word(unsigned char* ring, int off) {
  return reinterpret_cast<unsigned long long*>(ring + off);
}

// false (status set) once the host asks to abort or the deadline passes.
__device__ __forceinline__ bool keep_waiting(const SendArgs* a, unsigned long long deadline,
                                             uint32_t r) {
  unsigned long long why = 0;
  if (ld_sys(a->control) & kAbort)
    why = kAborted;
  else if (gtime() > deadline)
    why = kTimeout;
  if (!why) return true;
  atomicCAS(a->status, 0ull, why << 32 | r);
  return false;
}

__device__ __forceinline__ uint32_t ring_of(const SendArgs* a, int block) {
  const uint32_t lane = static_cast<uint32_t>(block) % a->nlanes;
  const uint32_t w = lane % a->workers;
  const uint32_t n = (a->nrings - w + a->workers - 1) / a->workers;
  return w + a->workers * ((static_cast<uint32_t>(block) / a->workers) % n);
}

}  // namespace proxy

// Message `k` of block `block`: bytes [k * size, (k + 1) * size) of its lane's source region
// to the same offset of its destination. Returns false on a failure (status is set).
__device__ __forceinline__ bool send_body(const SendArgs* a, int block, uint32_t k, int wait) {
  using namespace proxy;
  const uint32_t lane = static_cast<uint32_t>(block) % a->nlanes;
  const uint32_t r = ring_of(a, block);
  unsigned char* ring = a->rings[r];
  const unsigned long long deadline = gtime() + a->timeout_ns;
  const unsigned long long idx = atomicAdd(&a->reserve[r], 1ull);
  while (idx - ld_sys(word(ring, HEAD_OFF)) >= a->depth)
    if (!keep_waiting(a, deadline, r)) return false;
  const unsigned long long s = idx + 1;
  const unsigned long long off = static_cast<unsigned long long>(k) * a->size;
  const unsigned long long w0 = (s & 0xffffffffull) | (static_cast<unsigned long long>(lane) << 32);
  const unsigned long long w1 = off | ((static_cast<unsigned long long>(a->size) & MAX_LENGTH) << 32) |
                                ((s & 0x7ffull) << 53);
  unsigned long long* slot =
      reinterpret_cast<unsigned long long*>(ring + HEADER_BYTES + (idx & (a->depth - 1)) * 16);
  asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(slot + 1), "l"(w1) : "memory");
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(slot), "l"(w0) : "memory");
  if (!wait) return true;
  while (ld_sys(word(ring, COMPLETED_OFF)) < s)
    if (!keep_waiting(a, deadline, r)) return false;
  return true;
}

// Drain unit i (a ring): until the workers have completed every descriptor given to it.
__device__ __forceinline__ void drain_body(const SendArgs* a, int i) {
  using namespace proxy;
  if (i >= static_cast<int>(a->nrings)) return;
  unsigned char* ring = a->rings[i];
  const unsigned long long given = ld_sys(&a->reserve[i]);
  const unsigned long long deadline = gtime() + a->timeout_ns;
  while (ld_sys(word(ring, COMPLETED_OFF)) < given)
    if (!keep_waiting(a, deadline, static_cast<uint32_t>(i))) return;
}

}  // namespace kcost
}  // namespace gicbench
