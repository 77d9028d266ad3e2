// Shared-memory segment of the emulated NIC: creation, attachment, allocation, error records.
#include "emu_segment.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <stdexcept>

namespace gicbench {
namespace emu {

namespace {

std::runtime_error sys_error(const std::string& what, const std::string& name) {
  return std::runtime_error(what + " " + name + ": " + std::strerror(errno));
}

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }

// SIGTERM cleanup: names of segments created and not yet unlinked, unlinked from the handler
// (a C handler: a Python one would wait for the interpreter, which a native loop may never
// return to). Installed only where SIGTERM still has its default action.
constexpr int kMaxNames = 64;
char g_names[kMaxNames][256];
volatile sig_atomic_t g_used[kMaxNames];
std::mutex g_names_mu;
bool g_installed = false;

void on_sigterm(int sig) {
  for (int i = 0; i < kMaxNames; ++i)
    if (g_used[i]) shm_unlink(g_names[i]);
  signal(sig, SIG_DFL);
  raise(sig);
}

void remember(const std::string& name) {
  std::lock_guard<std::mutex> g(g_names_mu);
  if (!g_installed) {
    struct sigaction cur;
    if (sigaction(SIGTERM, nullptr, &cur) == 0 && cur.sa_handler == SIG_DFL) {
      struct sigaction sa;
      std::memset(&sa, 0, sizeof sa);
      sa.sa_handler = on_sigterm;
      sigemptyset(&sa.sa_mask);
      sigaction(SIGTERM, &sa, nullptr);
    }
    g_installed = true;
  }
  for (int i = 0; i < kMaxNames; ++i) {
    if (!g_used[i] && name.size() < sizeof g_names[i]) {
      std::memcpy(g_names[i], name.c_str(), name.size() + 1);
      g_used[i] = 1;
      return;
    }
  }
}

void forget(const std::string& name) {
  std::lock_guard<std::mutex> g(g_names_mu);
  for (int i = 0; i < kMaxNames; ++i)
    if (g_used[i] && name == g_names[i]) g_used[i] = 0;
}

}  // namespace

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    unmap();
    base_ = o.base_;
    bytes_ = o.bytes_;
    name_ = std::move(o.name_);
    unlinked_ = o.unlinked_;
    o.base_ = nullptr;
    o.bytes_ = 0;
    o.unlinked_ = true;
  }
  return *this;
}

Plan plan(const Limits& lim) {
  // Header, then the tables (each 64-byte aligned), then the queue arena (page aligned): doorbell
  // registers, doorbell records, rings. Memory regions fill the segment down from its end.
  Plan p{};
  uint64_t off = kHeaderBytes;
  auto take = [&](uint64_t n, uint64_t each) {
    const uint64_t at = off;
    off = align_up(off + n * each, 64);
    return at;
  };
  p.mr_off = take(lim.max_mrs, sizeof(MrEntry));
  p.qp_off = take(lim.max_qps, sizeof(QpEntry));
  p.cq_off = take(lim.max_cqs, sizeof(CqEntry));
  p.dct_off = take(lim.max_dcts, sizeof(DctEntry));
  p.err_off = take(kErrRing, sizeof(ErrRecord));
  off = align_up(off, kPage);
  p.queue_off = off;
  p.db_off = take(lim.max_qps, kDbStride);
  p.qp_dbrec_off = take(lim.max_qps, kDbrecStride);
  p.cq_dbrec_off = take(lim.max_cqs, kDbrecStride);
  p.dct_dbrec_off = take(lim.max_dcts, kDbrecStride);
  p.ring_off = align_up(off, kPage);
  return p;
}

GpiPlan gpi_plan(uint32_t depth, uint32_t ncounters, uint32_t nwindows, uint32_t world) {
  // Control block (pi, ci, status, counters; cuda/gpi.cuh's offsets), window table, then the
  // ring on its own page.
  GpiPlan p{};
  p.win_off = align_up(256 + uint64_t{8} * ncounters, 64);
  p.ring_off = align_up(p.win_off + uint64_t{nwindows} * world * sizeof(GpiWinEntry), kPage);
  p.bytes = p.ring_off + uint64_t{depth} * 64;
  return p;
}

uint64_t bytes_needed(const Limits& lim, uint64_t ring_bytes, uint64_t mr_bytes) {
  return align_up(plan(lim).ring_off + ring_bytes + mr_bytes, kPage);
}

Segment Segment::create(const std::string& name, int rank, int world, uint64_t bytes,
                        const Limits& lim) {
  const Plan pl = plan(lim);
  if (bytes < pl.ring_off || bytes % kPage)
    throw std::invalid_argument("segment_bytes=" + std::to_string(bytes) +
                                " invalid: a multiple of 4096 of at least " +
                                std::to_string(pl.ring_off) +
                                " (the tables and doorbell pages alone) is needed");

  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 && errno == EEXIST) throw SegmentExists(sys_error("shm_open(create)", name).what());
  if (fd < 0) throw sys_error("shm_open(create)", name);
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const auto err = sys_error("ftruncate", name);
    close(fd);
    shm_unlink(name.c_str());
    throw err;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    const auto err = sys_error("mmap", name);
    shm_unlink(name.c_str());
    throw err;
  }
  Segment s;
  s.base_ = static_cast<uint8_t*>(p);
  s.bytes_ = bytes;
  s.name_ = name;
  remember(name);
  // ftruncate zero-fills: only non-zero fields are set. magic goes last so a peer that attaches
  // early sees a half-built segment as invalid rather than as valid.
  Header* h = s.hdr();
  h->version = kLayoutVersion;
  h->header_bytes = kHeaderBytes;
  h->total_bytes = bytes;
  h->rank = rank;
  h->world = world;
  h->pid = static_cast<int32_t>(getpid());
  h->max_mrs = lim.max_mrs;
  h->max_qps = lim.max_qps;
  h->max_cqs = lim.max_cqs;
  h->max_dcts = lim.max_dcts;
  h->mr_off = pl.mr_off;
  h->qp_off = pl.qp_off;
  h->cq_off = pl.cq_off;
  h->dct_off = pl.dct_off;
  h->err_off = pl.err_off;
  h->queue_off = pl.queue_off;
  h->db_off = pl.db_off;
  h->qp_dbrec_off = pl.qp_dbrec_off;
  h->cq_dbrec_off = pl.cq_dbrec_off;
  h->dct_dbrec_off = pl.dct_dbrec_off;
  h->ring_off = pl.ring_off;
  h->n_mrs = h->n_qps = h->n_cqs = h->n_dcts = h->n_gpis = 1;  // slot 0 is never used
  st_rel(&h->magic, kMagic);
  return s;
}

Segment Segment::attach(const std::string& name, uint64_t bytes) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) throw sys_error("shm_open(attach)", name);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const auto err = sys_error("fstat", name);
    close(fd);
    throw err;
  }
  if (static_cast<uint64_t>(st.st_size) != bytes) {
    close(fd);
    throw std::runtime_error("segment " + name + " has " + std::to_string(st.st_size) +
                             " bytes, its owner announced " + std::to_string(bytes));
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) throw sys_error("mmap", name);
  Segment s;
  s.base_ = static_cast<uint8_t*>(p);
  s.bytes_ = bytes;
  s.name_ = name;
  s.unlinked_ = true;  // a peer never unlinks someone else's name
  const Header* h = s.hdr();
  if (ld_acq(&h->magic) != kMagic || h->version != kLayoutVersion)
    throw std::runtime_error("segment " + name + " is not an emu segment of layout version " +
                             std::to_string(kLayoutVersion) + " (version " +
                             std::to_string(h->version) + ")");
  return s;
}

namespace {
std::runtime_error full(const Header* h, const char* what, uint64_t need) {
  const uint64_t used = h->ring_off + h->ring_used + h->mr_used;
  return std::runtime_error(
      std::string("emu segment full: ") + what + " needs " + std::to_string(need) +
      " bytes, " + std::to_string(h->total_bytes - std::min(used, h->total_bytes)) +
      " left of " + std::to_string(h->total_bytes) + " (tables and doorbell pages " +
      std::to_string(h->ring_off) + ", rings " + std::to_string(h->ring_used) +
      ", memory regions " + std::to_string(h->mr_used) + "; objects so far: " +
      std::to_string(h->n_qps - 1) + " QPs, " + std::to_string(h->n_cqs - 1) + " CQs, " +
      std::to_string(h->n_dcts - 1) + " DCTs, " + std::to_string(h->n_mrs - 1) +
      " MRs). The segment_bytes argument of EmuFabric was too small for the objects created: "
      "size it with gicbench.fabric.emu.segment_bytes_for(n_qps, n_cqs, n_dcts, sq_wqebbs, "
      "ncqe, mr_bytes, ...)");
}
}  // namespace

uint64_t Segment::alloc_ring(uint64_t bytes, const char* what) {
  Header* h = hdr();
  const uint64_t need = ring_footprint(bytes);
  if (h->ring_off + h->ring_used + need + h->mr_used > h->total_bytes) throw full(h, what, need);
  const uint64_t at = h->ring_off + h->ring_used;
  h->ring_used += need;
  return at;
}

uint64_t Segment::alloc_mr(uint64_t length) {
  Header* h = hdr();
  const uint64_t need = mr_footprint(length);
  if (h->ring_off + h->ring_used + need + h->mr_used > h->total_bytes)
    throw full(h, "memory region", need);
  h->mr_used += need;
  return h->total_bytes - h->mr_used;
}

uint8_t* Segment::mr_ptr(uint32_t key, uint64_t addr, uint64_t len, uint32_t need,
                         uint32_t pd) const {
  const uint32_t i = key_index(key);
  if (i == 0 || i >= ld_acq(&hdr()->n_mrs)) return nullptr;
  const MrEntry& m = mrs()[i];
  if (ld_acq(&m.key) != key || m.pd != pd) return nullptr;
  if (addr < m.addr || len > m.length || addr - m.addr > m.length - len) return nullptr;
  if ((m.access & need) != need) return nullptr;
  return base_ + m.offset + (addr - m.addr);
}

bool pid_alive(uint32_t pid) { return kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH; }

void Segment::push_error(uint32_t kind, uint32_t qpn, uint32_t expected, uint32_t found,
                         uint32_t cqn, int32_t rank) const {
  const uint64_t t = add_rlx(&hdr()->err_head, uint64_t{1});
  ErrRecord& r = errs()[t % kErrRing];
  // Seqlock: the record reads as incomplete (seq 0) while its fields change.
  st_rlx(&r.seq, uint64_t{0});
  std::atomic_thread_fence(std::memory_order_release);
  r.kind = kind;
  r.qpn = qpn;
  r.expected = expected;
  r.found = found;
  r.cqn = cqn;
  r.rank = rank;
  st_rel(&r.seq, t + 1);
}

bool Segment::unlink() {
  if (unlinked_ || name_.empty()) return false;
  unlinked_ = true;
  const bool ok = shm_unlink(name_.c_str()) == 0;
  forget(name_);
  return ok;
}

void Segment::unmap() {
  if (base_) munmap(base_, bytes_);
  base_ = nullptr;
  bytes_ = 0;
}

}  // namespace emu
}  // namespace gicbench
