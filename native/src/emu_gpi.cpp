// GPI queues of the emulated NIC (docs/gpi.md): their creation and window table (control), and
// the CPU engine's pass over them: the core's gpi_serve (cuda/emu_core.cuh) over this rank's
// segment and its peers' (the same MR checks as the WQE path), its events as the gpi_* counters
// and error records.
#include <cstring>
#include <stdexcept>
#include <string>

#include "emu_nic.hpp"

namespace gicbench {
namespace emu {

namespace {

std::string hex(uint32_t v) {
  char b[16];
  snprintf(b, sizeof b, "0x%06x", v);
  return b;
}

bool pow2(uint64_t v) { return v && !(v & (v - 1)); }

void check_range(const char* field, uint64_t v, uint64_t lo, uint64_t hi, const char* what) {
  if (v < lo || v > hi)
    throw std::invalid_argument(std::string("invalid ") + field + "=" + std::to_string(v) +
                                ": allowed " + what);
}

}  // namespace

GpiInfo Nic::create_gpi(uint32_t depth, uint32_t ncounters, uint32_t nwindows, uint32_t pd) {
  std::lock_guard<std::mutex> g(ctl_);
  if (!pow2(depth) || depth > 32768)
    throw std::invalid_argument("invalid depth=" + std::to_string(depth) +
                                ": allowed a power of two, 1..32768");
  check_range("ncounters", ncounters, 1, 65536, "1..65536");
  check_range("nwindows", nwindows, 1, 256, "1..256");
  Header* h = self_.hdr();
  const uint32_t idx = h->n_gpis;
  if (idx >= kMaxGpis)
    throw std::runtime_error("emu rank " + std::to_string(rank_) + ": GPI table full (" +
                             std::to_string(kMaxGpis - 1) + " GPI queues)");
  const uint32_t world = static_cast<uint32_t>(world_);
  const GpiPlan pl = gpi_plan(depth, ncounters, nwindows, world);
  const uint64_t base = self_.alloc_ring(pl.bytes, "GPI queue");
  // The arena is zero-filled: every owner bit 0 (no descriptor of lap 0), no window set.
  GpiEntry& e = self_.gpis()[idx];
  e.num = make_num(rank_, idx);
  e.log_depth = static_cast<uint32_t>(__builtin_ctz(depth));
  e.pd = pd;
  e.base_off = base;
  e.win_off = base + pl.win_off;
  e.ring_off = base + pl.ring_off;
  e.nwindows = nwindows;
  e.ncounters = ncounters;
  e.world = world;
  lock_engine();  // the engine's state of this slot starts at descriptor 0
  gpi_eng_[idx] = emu_core::GpiState{};
  unlock_engine();
  st_rel(&e.state, 1u);
  st_rel(&h->n_gpis, idx + 1);
  auto addr = [&](uint64_t off) { return reinterpret_cast<uint64_t>(self_.at(off)); };
  return GpiInfo{e.num, addr(e.base_off), addr(e.ring_off), depth};
}

const GpiEntry& Nic::gpi_entry(uint32_t num) const {
  const uint32_t i = num_index(num);
  if (num_rank(num) != (static_cast<uint32_t>(rank_) & 0xff) || i == 0 ||
      i >= ld_acq(&self_.hdr()->n_gpis))
    throw std::invalid_argument("invalid gpi=" + hex(num) + ": not a GPI queue of rank " +
                                std::to_string(rank_));
  return self_.gpis()[i];
}

void Nic::set_gpi_window(uint32_t num, uint32_t handle, uint32_t rank, uint64_t addr,
                         uint64_t length, uint32_t key) {
  std::lock_guard<std::mutex> g(ctl_);
  const GpiEntry& e = gpi_entry(num);
  check_range("handle", handle, 0, e.nwindows - 1, ("0.." + std::to_string(e.nwindows - 1) +
                                                    " (the queue's nwindows)").c_str());
  check_range("rank", rank, 0, e.world - 1, ("0.." + std::to_string(e.world - 1)).c_str());
  GpiWinEntry& w = reinterpret_cast<GpiWinEntry*>(self_.at(e.win_off))[handle * e.world + rank];
  lock_engine();  // no descriptor reads the entry half rewritten
  st_rel(&w.valid, 0u);
  w.addr = addr;
  w.length = length;
  w.key = key;
  st_rel(&w.valid, 1u);
  unlock_engine();
}

// ---- the engine's pass ---------------------------------------------------------------------------
struct Nic::GpiEnv {
  Nic& nic;
  const GpiEntry& g;
  const GpiWinEntry* win;

  uint64_t ld_acq64(const uint64_t* p) const { return ld_acq(p); }
  void st_rel64(uint64_t* p, uint64_t v) const { st_rel(p, v); }
  uint64_t fetch_add64(uint64_t* p, uint64_t v) const {
    return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL);
  }
  uint64_t cas64(uint64_t* p, uint64_t expected, uint64_t desired) const {
    __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    return expected;
  }
  uint32_t cas32(uint32_t* p, uint32_t expected, uint32_t desired) const {
    __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    return expected;
  }
  void copy(uint8_t* dst, const uint8_t* src, uint32_t n) const { std::memcpy(dst, src, n); }
  uint32_t self_rank() const { return static_cast<uint32_t>(nic.rank_); }
  bool reachable(uint32_t r) const { return r < g.world && nic.seg_[r] != nullptr; }
  bool window(uint32_t handle, uint32_t rank, emu_core::GpiWindow& w) const {
    const GpiWinEntry& e = win[handle * g.world + rank];
    if (!ld_acq(&e.valid)) return false;
    w = emu_core::GpiWindow{e.addr, e.length, e.key};
    return true;
  }
  uint8_t* local(uint32_t key, uint64_t addr, uint64_t len) const {
    return nic.self_.mr_ptr(key, addr, len, 0, g.pd);
  }
  uint8_t* remote(uint32_t rank, uint32_t key, uint64_t addr, uint64_t len, uint32_t need) const {
    return nic.seg_[rank]->mr_ptr(key, addr, len, need, g.pd);
  }
  void gpi_event(emu_core::GpiEvent ev, uint64_t a, uint64_t b, uint64_t c) const {
    uint64_t* n = nic.gpi_local_;
    switch (ev) {
      case emu_core::kGpiDone:
        ++n[kGpiCntDescriptors];
        n[kGpiCntWrites] += a;
        n[kGpiCntSignals] += b;
        n[kGpiCntBytes] += c;
        break;
      case emu_core::kGpiTorn: ++n[kGpiCntTornWaits]; break;
      case emu_core::kGpiError:
        ++n[kGpiCntErrors];
        nic.self_.push_error(kErrGpi, g.num, static_cast<uint32_t>(a), static_cast<uint32_t>(b),
                             static_cast<uint32_t>(c), nic.rank_);
        break;
    }
  }
};

size_t Nic::serve_gpis() {
  Header* h = self_.hdr();
  const uint32_t n = ld_acq(&h->n_gpis);
  if (n <= 1) return 0;  // no GPI queue: the WQE path's passes pay one load
  size_t work = 0;
  for (uint32_t i = 1; i < n; ++i) {
    const GpiEntry& g = self_.gpis()[i];
    if (!ld_acq(&g.state)) continue;
    GpiEnv env{*this, g, reinterpret_cast<const GpiWinEntry*>(self_.at(g.win_off))};
    const emu_core::GpiParams q{reinterpret_cast<const uint64_t*>(self_.at(g.ring_off)),
                                g.log_depth, self_.at(g.base_off), g.ncounters, g.nwindows};
    work += emu_core::gpi_serve(env, gpi_eng_[i], q);
  }
  for (uint32_t c = 0; c < kNumGpiCounters; ++c) {
    if (gpi_local_[c]) {
      add_rlx(&h->gpi_counters[c], gpi_local_[c]);
      gpi_local_[c] = 0;
    }
  }
  return work;
}

}  // namespace emu
}  // namespace gicbench
