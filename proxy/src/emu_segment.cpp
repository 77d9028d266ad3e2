// Shared-memory segment of the emulated NIC: creation, attachment, allocation, error records.
#include "emu_segment.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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

Segment Segment::create(const std::string& name, int rank, int world, uint64_t bytes,
                        const Limits& lim) {
  // Tables first (each 64-byte aligned), then the arena (4 KiB aligned).
  uint64_t off = kHeaderBytes;
  auto table = [&](uint64_t n, uint64_t each) {
    const uint64_t at = off;
    off = align_up(off + n * each, 64);
    return at;
  };
  const uint64_t mr_off = table(lim.max_mrs, sizeof(MrEntry));
  const uint64_t qp_off = table(lim.max_qps, sizeof(QpEntry));
  const uint64_t cq_off = table(lim.max_cqs, sizeof(CqEntry));
  const uint64_t dct_off = table(lim.max_dcts, sizeof(DctEntry));
  const uint64_t db_off = table(lim.max_qps, sizeof(uint64_t));
  const uint64_t err_off = table(kErrRing, sizeof(ErrRecord));
  const uint64_t arena_off = align_up(off, 4096);
  if (bytes < arena_off + 4096)
    throw std::invalid_argument("segment_bytes=" + std::to_string(bytes) +
                                " too small: the tables alone need " + std::to_string(arena_off) +
                                " bytes plus an arena");

  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
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
  h->mr_off = mr_off;
  h->qp_off = qp_off;
  h->cq_off = cq_off;
  h->dct_off = dct_off;
  h->db_off = db_off;
  h->err_off = err_off;
  h->arena_off = arena_off;
  h->arena_bytes = bytes - arena_off;
  h->n_mrs = h->n_qps = h->n_cqs = h->n_dcts = 1;  // slot 0 is never used
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

uint64_t Segment::alloc(uint64_t bytes, uint64_t align, const char* what) {
  Header* h = hdr();
  const uint64_t at = align_up(h->arena_used, align);
  if (at + bytes > h->arena_bytes)
    throw std::runtime_error(std::string("emu segment full: ") + what + " needs " +
                             std::to_string(bytes) + " bytes, " +
                             std::to_string(h->arena_bytes - std::min(at, h->arena_bytes)) +
                             " left of " + std::to_string(h->arena_bytes) +
                             " (raise segment_bytes)");
  h->arena_used = at + bytes;
  return h->arena_off + at;
}

void Segment::push_error(uint32_t kind, uint32_t qpn, uint32_t expected, uint32_t found,
                         uint32_t cqn, int32_t rank) const {
  const uint64_t t = add_rlx(&hdr()->err_head, uint64_t{1});
  ErrRecord& r = errs()[t % kErrRing];
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
