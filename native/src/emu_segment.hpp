// One rank's emulated-NIC segment: create (owner), attach (peer), typed views, unlink.
// (The janitor for segments of dead processes is Python: gicbench.fabric.emu.janitor.)
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "emu_layout.hpp"

namespace gicbench {
namespace emu {

// create() found the name taken (shm_open: EEXIST). Python sees FileExistsError and retries
// under a new name: another user may have made ours first.
struct SegmentExists : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Limits {
  uint32_t max_mrs = 1024;
  uint32_t max_qps = 1024;
  uint32_t max_cqs = 1024;
  uint32_t max_dcts = 256;
};

// Where each part of a segment goes for given limits (one place for this arithmetic: create()
// and bytes_needed() both use it).
struct Plan {
  uint64_t mr_off, qp_off, cq_off, dct_off, err_off;
  uint64_t queue_off, db_off, qp_dbrec_off, cq_dbrec_off, dct_dbrec_off, ring_off;
};
Plan plan(const Limits& lim);
// Bytes one ring of `bytes` takes in the queue arena (rings are page aligned and padded).
inline uint64_t ring_footprint(uint64_t bytes) { return (bytes + kPage - 1) & ~(kPage - 1); }
// Bytes one memory region of `length` takes in the memory arena.
inline uint64_t mr_footprint(uint64_t length) { return (length + 63) & ~uint64_t{63}; }
// The exact segment size for `lim` tables, rings whose footprints sum to `ring_bytes` and memory
// regions whose footprints sum to `mr_bytes` (page rounded).
uint64_t bytes_needed(const Limits& lim, uint64_t ring_bytes, uint64_t mr_bytes);

// Where each part of one GPI queue's region goes (bytes from its start): create_gpi() and
// gpi_footprint() both use it.
struct GpiPlan {
  uint64_t win_off, ring_off, bytes;
};
GpiPlan gpi_plan(uint32_t depth, uint32_t ncounters, uint32_t nwindows, uint32_t world);
inline uint64_t gpi_footprint(uint32_t depth, uint32_t ncounters, uint32_t nwindows,
                              uint32_t world) {
  return ring_footprint(gpi_plan(depth, ncounters, nwindows, world).bytes);
}

// A mapping of some rank's segment in this process. Owners and peers use the same view.
class Segment {
 public:
  Segment() = default;
  ~Segment() { unmap(); }
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  Segment(Segment&& o) noexcept { *this = std::move(o); }
  Segment& operator=(Segment&& o) noexcept;

  // Owner: shm_open(O_CREAT|O_EXCL) + ftruncate + mmap, header and tables initialised.
  static Segment create(const std::string& name, int rank, int world, uint64_t bytes,
                        const Limits& lim);
  // Peer: shm_open + mmap, checks magic, layout version and size.
  static Segment attach(const std::string& name, uint64_t bytes);

  bool mapped() const { return base_ != nullptr; }
  uint8_t* base() const { return base_; }
  uint64_t bytes() const { return bytes_; }
  const std::string& name() const { return name_; }
  Header* hdr() const { return reinterpret_cast<Header*>(base_); }
  MrEntry* mrs() const { return reinterpret_cast<MrEntry*>(base_ + hdr()->mr_off); }
  QpEntry* qps() const { return reinterpret_cast<QpEntry*>(base_ + hdr()->qp_off); }
  CqEntry* cqs() const { return reinterpret_cast<CqEntry*>(base_ + hdr()->cq_off); }
  DctEntry* dcts() const { return reinterpret_cast<DctEntry*>(base_ + hdr()->dct_off); }
  GpiEntry* gpis() const { return reinterpret_cast<GpiEntry*>(base_ + kGpiTableOff); }
  // Doorbell register of QP slot i (kDbStride bytes; the engine reads its first 8 bytes).
  uint64_t* doorbell(uint32_t i) const {
    return reinterpret_cast<uint64_t*>(base_ + hdr()->db_off + uint64_t{i} * kDbStride);
  }
  uint64_t qp_dbrec(uint32_t i) const { return hdr()->qp_dbrec_off + uint64_t{i} * kDbrecStride; }
  uint64_t cq_dbrec(uint32_t i) const { return hdr()->cq_dbrec_off + uint64_t{i} * kDbrecStride; }
  uint64_t dct_dbrec(uint32_t i) const {
    return hdr()->dct_dbrec_off + uint64_t{i} * kDbrecStride;
  }
  // The queue arena in use: [queue_off, ring_off + ring_used), page aligned at both ends.
  uint64_t queue_bytes() const { return hdr()->ring_off + hdr()->ring_used - hdr()->queue_off; }
  ErrRecord* errs() const { return reinterpret_cast<ErrRecord*>(base_ + hdr()->err_off); }
  uint8_t* at(uint64_t off) const { return base_ + off; }

  // Allocation (owner's control thread only); throws, naming the counts, when the segment is full.
  uint64_t alloc_ring(uint64_t bytes, const char* what);  // queue arena, page aligned
  uint64_t alloc_mr(uint64_t length);                     // memory arena, 64-byte aligned

  // Append an error record (any engine may; lock-free ticket).
  void push_error(uint32_t kind, uint32_t qpn, uint32_t expected, uint32_t found, uint32_t cqn,
                  int32_t rank) const;
  void count(Counter c, uint64_t v = 1) const { add_rlx(&hdr()->counters[c], v); }
  // (key, addr, len) through this segment's MR table: the memory, or null on any violation
  // (unknown key, bounds, access, another protection domain).
  uint8_t* mr_ptr(uint32_t key, uint64_t addr, uint64_t len, uint32_t need, uint32_t pd) const;

  bool unlink();  // shm_unlink(name) once; true if this call removed it
  void unmap();

 private:
  uint8_t* base_ = nullptr;
  uint64_t bytes_ = 0;
  std::string name_;
  bool unlinked_ = false;
};

}  // namespace emu
}  // namespace gicbench
