// gicbench's GPI descriptor: the 64-byte GPU-Friendly Descriptor of the emulated NIC's GPI queues
// (docs/gpi.md gives every field, the owner rule, windows and errors). __host__ __device__: the
// engine core decodes it (cuda/emu_core.cuh), a GPU producer encodes it; its numpy twin is
// app/fabric/emu/gpi_format.py, compared field by field in tests/test_emu_gpi_format.py.
//
// Eight segments s0..s7, little-endian 64-bit words; bit 63 of each is the owner bit, so a
// descriptor whose segments are not all of the current lap is seen as torn, never executed.
#pragma once

#include "mlx5.cuh"  // the integer types under NVRTC, GB_HD

namespace gicbench {
namespace gpi {

constexpr uint32_t kDescBytes = 64;
constexpr uint32_t kSegs = 8;
constexpr uint64_t kOwnerBit = 1ull << 63;
constexpr uint64_t kField63 = kOwnerBit - 1;
constexpr uint32_t kMaxFanout = 8;
constexpr uint32_t kMaxInline = 8;

enum Op : uint8_t {
  kOpNop = 0,
  kOpWrite = 1,
  kOpWriteSignal = 2,
  kOpSignal = 3,
  kOpWriteInline = 4,
  kOpWriteInlineSignal = 5,
  kOpFanout = 6,
};
enum Flag : uint8_t {
  kFlagSignal32 = 1,  // 4-byte signal words (else 8-byte)
  kFlagNoSignal = 2,  // FANOUT: the writes alone
};
constexpr uint8_t kFlagsKnown = kFlagSignal32 | kFlagNoSignal;

// The owner bit descriptor `index` carries in a ring of 2^log_depth: 1 on the first lap (a zeroed
// ring holds no descriptor), 0 on the second, and so on.
GB_HD uint64_t owner_for(uint64_t index, uint32_t log_depth) {
  return ((index >> log_depth) & 1) ^ 1;
}

// Segments of `w` whose owner bit is `owner` (8: the whole descriptor of this lap is there).
GB_HD uint32_t owned_segments(const uint64_t* w, uint64_t owner) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < kSegs; ++i) n += ((w[i] >> 63) == owner) ? 1u : 0u;
  return n;
}

struct Dest {  // one destination of a fan-out
  uint8_t rank;
  uint16_t slot;   // 15 bits
  uint8_t signal;  // index from the descriptor's signal base
};

// A descriptor's fields (the union of both kinds; a field a kind does not have is 0).
struct Desc {
  uint8_t op, flags;
  uint16_t counter;
  uint8_t src_win, dst_win, sig_win;
  uint8_t k;           // FANOUT: destinations (0 for the other ops)
  uint32_t size;
  uint16_t dst_rank;   // one destination
  uint64_t src_off;    // 63 bits
  uint64_t dst_off;    // one destination, 63 bits
  uint64_t sig_off;    // one destination, 63 bits
  int64_t value;       // signal value (63 bits signed; FANOUT: 32 bits signed)
  uint8_t inline_data[kMaxInline];
  uint32_t stride;     // FANOUT, 31 bits
  uint32_t sig_base;   // FANOUT, 31 bits
  Dest dest[kMaxFanout];
};

GB_HD uint64_t bits(uint64_t w, uint32_t lo, uint32_t n) { return (w >> lo) & ((1ull << n) - 1); }
GB_HD int64_t sign_extend(uint64_t v, uint32_t n) {
  const uint64_t m = 1ull << (n - 1);
  return static_cast<int64_t>((v ^ m) - m);
}

GB_HD Desc decode(const uint64_t* w) {
  Desc d{};
  d.op = static_cast<uint8_t>(bits(w[0], 0, 8));
  d.flags = static_cast<uint8_t>(bits(w[0], 8, 8));
  d.counter = static_cast<uint16_t>(bits(w[0], 16, 16));
  d.src_win = static_cast<uint8_t>(bits(w[0], 32, 8));
  d.dst_win = static_cast<uint8_t>(bits(w[0], 40, 8));
  d.sig_win = static_cast<uint8_t>(bits(w[0], 48, 8));
  d.size = static_cast<uint32_t>(bits(w[1], 0, 32));
  d.k = static_cast<uint8_t>(bits(w[0], 56, 4));
  d.src_off = w[2] & kField63;
  if (d.op == kOpFanout) {
    d.stride = static_cast<uint32_t>(bits(w[1], 32, 31));
    d.value = sign_extend(bits(w[3], 0, 32), 32);
    d.sig_base = static_cast<uint32_t>(bits(w[3], 32, 31));
    for (uint32_t j = 0; j < kMaxFanout; ++j) {
      const uint64_t e = bits(w[4 + j / 2], 31 * (j % 2), 31);
      d.dest[j] = Dest{static_cast<uint8_t>(bits(e, 0, 8)), static_cast<uint16_t>(bits(e, 8, 15)),
                       static_cast<uint8_t>(bits(e, 23, 8))};
    }
    return d;
  }
  d.dst_rank = static_cast<uint16_t>(bits(w[1], 32, 16));
  d.dst_off = w[3] & kField63;
  d.sig_off = w[4] & kField63;
  d.value = sign_extend(w[5] & kField63, 63);
  for (uint32_t i = 0; i < 4; ++i) {
    d.inline_data[i] = static_cast<uint8_t>(w[6] >> (8 * i));
    d.inline_data[4 + i] = static_cast<uint8_t>(w[7] >> (8 * i));
  }
  return d;
}

// The eight segments of `d` with owner bit `owner` (fields beyond their width are cut).
GB_HD void encode(const Desc& d, uint64_t owner, uint64_t* w) {
  const bool fan = d.op == kOpFanout;
  w[0] = uint64_t{d.op} | uint64_t{d.flags} << 8 | uint64_t{d.counter} << 16 |
         uint64_t{d.src_win} << 32 | uint64_t{d.dst_win} << 40 | uint64_t{d.sig_win} << 48 |
         uint64_t{d.k & 0xfu} << 56;
  w[2] = d.src_off & kField63;
  if (fan) {
    w[1] = uint64_t{d.size} | uint64_t{d.stride & 0x7fffffffu} << 32;
    w[3] = (static_cast<uint64_t>(d.value) & 0xffffffffull) |
           uint64_t{d.sig_base & 0x7fffffffu} << 32;
    for (uint32_t i = 4; i < kSegs; ++i) w[i] = 0;
    for (uint32_t j = 0; j < kMaxFanout; ++j) {
      const uint64_t e = uint64_t{d.dest[j].rank} | uint64_t{d.dest[j].slot & 0x7fffu} << 8 |
                         uint64_t{d.dest[j].signal} << 23;
      w[4 + j / 2] |= e << (31 * (j % 2));
    }
  } else {
    w[1] = uint64_t{d.size} | uint64_t{d.dst_rank} << 32;
    w[3] = d.dst_off & kField63;
    w[4] = d.sig_off & kField63;
    w[5] = static_cast<uint64_t>(d.value) & kField63;
    w[6] = w[7] = 0;
    for (uint32_t i = 0; i < 4; ++i) {
      w[6] |= uint64_t{d.inline_data[i]} << (8 * i);
      w[7] |= uint64_t{d.inline_data[4 + i]} << (8 * i);
    }
  }
  for (uint32_t i = 0; i < kSegs; ++i) w[i] = (w[i] & kField63) | (owner << 63);
}

// ---- the queue's control block (offsets from the queue's base) -------------------------------
constexpr uint32_t kOffPi = 0;           // producers' reservation counter
constexpr uint32_t kOffCi = 64;          // descriptors consumed (the engine's, release)
constexpr uint32_t kOffErrors = 128;     // descriptors that failed
constexpr uint32_t kOffLastError = 136;  // bit 63: any error; [0:32) index, [32:40) syndrome,
                                         // [40:48) destination
constexpr uint32_t kOffCounters = 256;   // ncounters x 8 bytes
constexpr uint64_t kCounterError = 1ull << 62;
constexpr uint64_t kCounterCountMask = (1ull << 56) - 1;
constexpr uint64_t kLastErrorValid = 1ull << 63;

GB_HD uint64_t last_error_word(uint64_t index, uint8_t syndrome, uint32_t dest) {
  return kLastErrorValid | (index & 0xffffffffull) | uint64_t{syndrome} << 32 |
         uint64_t{dest & 0xffu} << 40;
}

}  // namespace gpi
}  // namespace gicbench
