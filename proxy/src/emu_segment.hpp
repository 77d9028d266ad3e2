// One rank's emulated-NIC segment: create (owner), attach (peer), typed views, unlink.
// (The janitor for segments of dead processes is Python: gicbench.fabric.emu.janitor.)
#pragma once

#include <cstdint>
#include <string>

#include "emu_layout.hpp"

namespace gicbench {
namespace emu {

struct Limits {
  uint32_t max_mrs = 1024;
  uint32_t max_qps = 1024;
  uint32_t max_cqs = 1024;
  uint32_t max_dcts = 256;
};

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
  uint64_t* doorbells() const { return reinterpret_cast<uint64_t*>(base_ + hdr()->db_off); }
  ErrRecord* errs() const { return reinterpret_cast<ErrRecord*>(base_ + hdr()->err_off); }
  uint8_t* at(uint64_t off) const { return base_ + off; }

  // Bump allocation in the arena (owner's control thread only); throws when full.
  uint64_t alloc(uint64_t bytes, uint64_t align, const char* what);

  // Append an error record (any engine may; lock-free ticket).
  void push_error(uint32_t kind, uint32_t qpn, uint32_t expected, uint32_t found, uint32_t cqn,
                  int32_t rank) const;
  void count(Counter c, uint64_t v = 1) const { add_rlx(&hdr()->counters[c], v); }

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
