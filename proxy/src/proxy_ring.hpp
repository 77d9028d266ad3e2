// mini-proxy's request rings (the paper, arXiv 2610.01380, §4.2): host memory that producers
// (GPU threads through a mapping, or host threads) fill with 16-byte descriptors and CPU
// workers drain. One place for the layout and the descriptor encoding; the GPU producers'
// kernels (cuda/proxy/kernels.cu) are compiled with its constants, taken from the bindings
// (app/submit/proxy/gpu_kernels.py).
#pragma once

#include <cstdint>

namespace gicbench {
namespace proxy {

// A ring: a header of four cache lines, then `depth` 16-byte slots (depth a power of two).
// Offsets in bytes from the ring's base; each word is 8 bytes, written by one side only.
constexpr uint32_t kHeadOff = 0;        // worker: descriptors consumed ("host-resident progress")
constexpr uint32_t kCompletedOff = 64;  // worker: descriptors whose writes completed (the counter)
constexpr uint32_t kReserveOff = 128;   // baseline host producers: the reservation counter
constexpr uint32_t kControlOff = 192;   // host -> GPU producers (ring 0): 1 stop, 2 abort
constexpr uint32_t kHeaderBytes = 256;
constexpr uint32_t kSlotBytes = 16;

// Descriptor of ring index i (sequence s = i + 1, so zeroed memory is never valid):
//   word0 = s[31:0] | lane << 32 | flags << 48
//   word1 = offset[31:0] | length[20:0] << 32 | s[10:0] << 53
// The sequence in both words lets the worker see a slot from this lap, whole: baseline producers
// store word1 and then release word0; tuned producers store both words at once (one 16-byte
// store), and the check in word1 catches a store observed torn.
constexpr uint32_t kMaxLength = (1u << 21) - 1;
constexpr uint32_t kMaxLane = 0xffff;

inline uint64_t desc_word0(uint64_t index, uint32_t lane, uint32_t flags) {
  return ((index + 1) & 0xffffffffull) | (static_cast<uint64_t>(lane) << 32) |
         (static_cast<uint64_t>(flags & 0xffff) << 48);
}
inline uint64_t desc_word1(uint64_t index, uint32_t offset, uint32_t length) {
  return offset | (static_cast<uint64_t>(length & kMaxLength) << 32) |
         (((index + 1) & 0x7ffull) << 53);
}
inline bool desc_valid(uint64_t index, uint64_t w0, uint64_t w1) {
  return (w0 & 0xffffffffull) == ((index + 1) & 0xffffffffull) &&
         (w1 >> 53) == ((index + 1) & 0x7ffull);
}
inline uint32_t desc_lane(uint64_t w0) { return static_cast<uint32_t>((w0 >> 32) & 0xffff); }
inline uint32_t desc_offset(uint64_t w1) { return static_cast<uint32_t>(w1 & 0xffffffffull); }
inline uint32_t desc_length(uint64_t w1) { return static_cast<uint32_t>((w1 >> 32) & kMaxLength); }

struct Ring {
  uint8_t* base = nullptr;
  uint32_t depth = 0;
  uint64_t* word(uint32_t off) const { return reinterpret_cast<uint64_t*>(base + off); }
  uint64_t* slot(uint64_t index) const {
    return reinterpret_cast<uint64_t*>(base + kHeaderBytes + (index & (depth - 1)) * kSlotBytes);
  }
  static uint64_t bytes(uint32_t depth) { return kHeaderBytes + uint64_t{depth} * kSlotBytes; }
};

}  // namespace proxy
}  // namespace gicbench
