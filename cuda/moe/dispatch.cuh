// MoE token dispatch: what the kernels (cuda/moe/dispatch.cu) and the launcher
// (gicbench.submit.gpu.dispatch) agree on. The backends of the paper (arXiv 2611.12362, §II-C),
// the words of the argument table, and the window handles of the GPI queue.
#pragma once

#include "gda/calls.cuh"
#include "gpi.cuh"

namespace gicbench {
namespace moe {

// gicbench.submit.gpu.dispatch.BACKENDS, in this order.
enum Backend : uint32_t {
  kGdaki = 0,     // the GPU writes WQEs, its doorbell record and rings (shared QPs in order)
  kFreeFlow = 1,  // the same WQEs, marked ready; a host thread rings (--doorbell host's forwarder)
  kGpi = 2,       // one WRITE descriptor per (token, expert), SIGNAL descriptors
  kGpiMc = 3,     // one FANOUT descriptor per token (NO_SIGNAL), SIGNAL descriptors
};

// Words of the argument table, one uint64 each (gicbench.submit.gpu.dispatch.ARGS, same order).
// "device": a device address; "NIC": an address as the NIC reads it (under the staging's key).
enum Arg : int {
  kBackend = 0,
  kRank,
  kTokens,       // T: this rank's tokens
  kTopk,         // experts per token, 1..32 (one warp posts a token's destinations)
  kExperts,      // E
  kExpertsLocal, // E / world: rank r owns experts [r * E_local, (r + 1) * E_local)
  kSlotBytes,    // bytes of a token (2H)
  kCounterOff,   // bytes from a landing slice to its 8-byte count word
  kRoute,        // device: int32 [T, topk], this rank's experts of each token
  kSlot,         // device: int32 [T, topk], the receive slot of each (token, j)
  kCount,        // device: int32 [E], tokens this rank sends to each expert
  kLaneOf,       // device: int32 [E], the lane of a remote expert (-1: an expert of this rank)
  kSent,         // device: uint32 [E], writes issued to each expert (zero between calls)
  kTokensDev,    // device: the tokens, in GPU memory
  kStagingDev,   // device: the staging buffer as the GPU stores into it
  kStagingNic,   // NIC: the staging buffer, token t at t * slot bytes
  kStagingKey,   // its lkey
  kSelfRecv,     // device: uint64 [E_local], this rank's own landing slice of each local expert
  kFetchNic,     // NIC: where a count signal's old value lands, 8 bytes per lane
  kFetchKey,     // its lkey
  kSignalEvery,  // a power of two: every kSignalEvery-th WQE of a lane is signaled (room)
  kGpiBase,      // device: the GPI queue's control block (ci is read from it)
  kGpiPi,        // device: the queue's reservation counter, in GPU memory (this GPU is the
                 // queue's only producer; the launcher copies it to the block's pi after)
  kGpiRing,      // device: its descriptor 0
  kGpiLogDepth,  // log2 of its depth
  kFanStride,    // gpi-mc: bytes of a fan-out slot (the gcd of the token and expert pitches)
  kFanPitch,     // gpi-mc: fan-out slots between the slices of two local experts
  kFanToken,     // gpi-mc: fan-out slots of one token
  kFanGroup,     // gpi-mc: local experts a fan-out window covers (a group)
  kTimeoutNs,    // every wait's deadline
  kArgs
};

// GPI window handles: handle e < E_local is local expert e's landing slice for this source at
// each rank (data and count word); then the staging (this rank); then gpi-mc's fan-out windows,
// one a group of kFanGroup local experts: group g's slices of this source at each rank, from
// local expert g * kFanGroup's, token i of local expert e at slot (e - g * kFanGroup) *
// kFanPitch + i * kFanToken of kFanStride bytes.
__host__ __device__ constexpr uint32_t src_window(uint32_t experts_local) { return experts_local; }
__host__ __device__ constexpr uint32_t fan_window(uint32_t experts_local, uint32_t group) {
  return experts_local + 1 + group;
}

}  // namespace moe
}  // namespace gicbench
