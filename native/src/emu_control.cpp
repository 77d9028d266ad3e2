// Control verbs of the emulated NIC: objects in the segment, the QP state machine, peers.
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "emu_nic.hpp"

namespace gicbench {
namespace emu {

namespace {

bool pow2(uint64_t v) { return v && !(v & (v - 1)); }

std::string hex(uint32_t v) {
  char b[16];
  snprintf(b, sizeof b, "0x%06x", v);
  return b;
}

const char* state_name(uint32_t s) {
  switch (s) {
    case kReset: return "RESET";
    case kInit: return "INIT";
    case kRtr: return "RTR";
    case kRts: return "RTS";
    case kErr: return "ERR";
    default: return "?";
  }
}

// Table sizes include the reserved slot 0: `lo` is 1 where a table may hold no object.
void check_limit(const char* field, uint32_t v, uint32_t hi, uint32_t lo = 2) {
  if (v < lo || v > hi)
    throw std::invalid_argument(std::string("invalid ") + field + "=" + std::to_string(v) +
                                ": allowed " + std::to_string(lo) + ".." + std::to_string(hi));
}

}  // namespace

Nic::Nic(const std::string& name, int rank, int world, uint64_t bytes, const Limits& lim)
    : rank_(rank), world_(world) {
  if (world < 1 || world > static_cast<int>(kMaxRanks))
    throw std::invalid_argument("invalid world=" + std::to_string(world) + ": allowed 1..256");
  if (rank < 0 || rank >= world)
    throw std::invalid_argument("invalid rank=" + std::to_string(rank) + ": allowed 0.." +
                                std::to_string(world - 1));
  check_limit("max_qps", lim.max_qps, kMaxQps);
  check_limit("max_dcts", lim.max_dcts, kMaxQps, 1);
  check_limit("max_cqs", lim.max_cqs, 0xffff);
  check_limit("max_mrs", lim.max_mrs, 0xffffff);
  self_ = Segment::create(name, rank, world, bytes, lim);
  peers_.resize(world);
  seg_.assign(world, nullptr);
  seg_[rank] = &self_;
  last_db_.assign(lim.max_qps, 0);
  is_hot_.assign(lim.max_qps, 0);
  eng_.assign(lim.max_qps, QpEng{});
  shards_.push_back(std::make_unique<Shard>());
  pid_ = static_cast<uint32_t>(getpid());
  key_byte_ = static_cast<uint8_t>(getpid() * 131u + rank * 29u);
}

Nic::~Nic() { close(); }

void Nic::lock_engine() {
  for (auto& sh : shards_) {  // in index order: control holds ctl_, so one locker at a time
    while (__atomic_exchange_n(&sh->busy, 1u, __ATOMIC_ACQUIRE)) {
      while (ld_rlx(&sh->busy)) cpu_pause();
    }
  }
}

void Nic::unlock_engine() {
  for (auto& sh : shards_) st_rel(&sh->busy, 0u);
}

MrInfo Nic::reg_mr(uint64_t length, uint32_t access, uint32_t pd) {
  std::lock_guard<std::mutex> g(ctl_);
  Header* h = self_.hdr();
  const uint32_t idx = h->n_mrs;
  if (idx >= h->max_mrs)
    throw std::runtime_error("emu rank " + std::to_string(rank_) + ": MR table full (" +
                             std::to_string(h->max_mrs - 1) + " MRs; raise max_mrs)");
  if (length == 0) throw std::invalid_argument("invalid length=0: allowed >= 1");
  if (access & ~0xfu) throw std::invalid_argument("invalid access=" + std::to_string(access));
  const uint64_t off = self_.alloc_mr(length);
  MrEntry& m = self_.mrs()[idx];
  m.access = access;
  m.pd = pd;
  m.offset = off;
  m.length = length;
  m.addr = reinterpret_cast<uint64_t>(self_.at(off));
  uint8_t kb = static_cast<uint8_t>(key_byte_ + idx * 0x3bu);
  if (kb == 0) kb = 1;
  const uint32_t key = (idx << 8) | kb;
  st_rel(&m.key, key);
  st_rel(&h->n_mrs, idx + 1);
  return MrInfo{m.addr, length, key};
}

CqInfo Nic::create_cq(uint32_t ncqe, uint32_t flags) {
  std::lock_guard<std::mutex> g(ctl_);
  if (!pow2(ncqe) || ncqe > (1u << 22))
    throw std::invalid_argument("invalid ncqe=" + std::to_string(ncqe) +
                                ": allowed a power of two, 1..4194304");
  Header* h = self_.hdr();
  const uint32_t idx = h->n_cqs;
  if (flags & ~uint32_t{kCqCollapsed | kCqOverrunIgnore})
    throw std::invalid_argument("invalid cq flags=" + std::to_string(flags));
  if (idx >= h->max_cqs)
    throw std::runtime_error("emu: CQ table full (" + std::to_string(h->max_cqs - 1) +
                             " CQs; raise max_cqs)");
  const uint64_t buf = self_.alloc_ring(uint64_t{ncqe} * mlx5::kCqeBytes, "CQ ring");
  const uint64_t dbrec = self_.cq_dbrec(idx);
  for (uint32_t i = 0; i < ncqe; ++i) mlx5::cqe_init(self_.at(buf) + i * mlx5::kCqeBytes);
  CqEntry& cq = self_.cqs()[idx];
  cq.ncqe = ncqe;
  cq.cqn = make_num(rank_, idx);
  cq.buf_off = buf;
  cq.dbrec_off = dbrec;
  cq.status = kCqOk;
  cq.flags = flags;
  cq.pi = 0;
  st_rel(&h->n_cqs, idx + 1);
  return CqInfo{cq.cqn, reinterpret_cast<uint64_t>(self_.at(buf)),
                reinterpret_cast<uint64_t>(self_.at(dbrec)), ncqe};
}

void Nic::relocate_cq(uint32_t cqn, uint64_t devcq) {
  std::lock_guard<std::mutex> g(ctl_);
  CqEntry& cq = self_.cqs()[num_index(cq_entry(cqn).cqn)];
  st_rel(&cq.reserved[0], devcq);
}

void Nic::relocate_mr(uint32_t key, uint64_t addr, uint64_t base_dev) {
  std::lock_guard<std::mutex> g(ctl_);
  const uint32_t i = key_index(key);
  if (i == 0 || i >= self_.hdr()->n_mrs || self_.mrs()[i].key != key)
    throw std::invalid_argument("invalid key=" + hex(key) + ": not an MR of rank " +
                                std::to_string(rank_));
  MrEntry& m = self_.mrs()[i];
  m.addr = addr;
  m.offset = addr - base_dev;
  st_rel(&m.reserved, uint64_t{1});
}

uint64_t Nic::seg_base(int r) const {
  if (r < 0 || r >= world_ || !seg_[r]) return 0;
  return reinterpret_cast<uint64_t>(seg_[r]->base());
}

static void check_own_cq(const Segment& s, int rank, uint32_t cqn, const char* field) {
  const uint32_t i = num_index(cqn);
  if (num_rank(cqn) != (static_cast<uint32_t>(rank) & 0xff) || i == 0 || i >= s.hdr()->n_cqs)
    throw std::invalid_argument(std::string("invalid ") + field + "=" + hex(cqn) +
                                ": not a CQ of rank " + std::to_string(rank));
}

QpInfo Nic::create_qp(uint32_t send_cqn, uint32_t sq_wqebbs, uint32_t recv_cqn, uint32_t rq_wqes,
                      bool dci, uint32_t flags, uint32_t max_inline, uint32_t pd) {
  std::lock_guard<std::mutex> g(ctl_);
  check_own_cq(self_, rank_, send_cqn, "send_cq");
  if (!pow2(sq_wqebbs) || sq_wqebbs > 32768)
    throw std::invalid_argument("invalid sq_wqebbs=" + std::to_string(sq_wqebbs) +
                                ": allowed a power of two, 1..32768");
  if (rq_wqes && (!pow2(rq_wqes) || rq_wqes > 32768))
    throw std::invalid_argument("invalid rq_wqes=" + std::to_string(rq_wqes) +
                                ": allowed 0 or a power of two up to 32768");
  if (rq_wqes) check_own_cq(self_, rank_, recv_cqn, "recv_cq");
  Header* h = self_.hdr();
  const uint32_t idx = h->n_qps;
  if (flags & ~uint32_t{kQpNoDbr | kQpWqeSig})
    throw std::invalid_argument("invalid qp flags=" + std::to_string(flags));
  if (idx >= h->max_qps)
    throw std::runtime_error("emu: QP table full (" + std::to_string(h->max_qps - 1) +
                             " QPs; raise max_qps)");
  const uint64_t sq = self_.alloc_ring(uint64_t{sq_wqebbs} * mlx5::kWqebbBytes, "SQ ring");
  const uint64_t dbrec = self_.qp_dbrec(idx);
  const uint64_t rq = rq_wqes ? self_.alloc_ring(uint64_t{rq_wqes} * 16, "RQ ring") : 0;
  QpEntry& q = self_.qps()[idx];
  q.type = dci ? kDci : kRc;
  q.qpn = make_num(rank_, idx);
  q.wqebb_cnt = sq_wqebbs;
  q.sq_off = sq;
  q.dbrec_off = dbrec;
  q.send_cqn = send_cqn;
  q.remote_rank = -1;
  q.rq.buf_off = rq;
  q.rq.dbrec_off = dbrec + 4 * mlx5::kRcvDbr;
  q.rq.wqe_cnt = rq_wqes;
  q.rq.cqn = rq_wqes ? recv_cqn : 0;
  q.flags = flags;
  q.max_inline = max_inline;
  q.pd = pd;
  st_rel(&q.state, static_cast<uint32_t>(kReset));
  st_rel(&h->n_qps, idx + 1);
  auto addr = [&](uint64_t off) { return reinterpret_cast<uint64_t>(self_.at(off)); };
  return QpInfo{q.qpn,
                addr(sq),
                addr(dbrec),
                reinterpret_cast<uint64_t>(self_.doorbell(idx)),
                sq_wqebbs,
                RqInfo{rq ? addr(rq) : 0, addr(dbrec), rq_wqes}};
}

DctInfo Nic::create_dct(uint32_t cqn, uint64_t dc_key, uint32_t rq_wqes, uint32_t pd) {
  std::lock_guard<std::mutex> g(ctl_);
  check_own_cq(self_, rank_, cqn, "cq");
  if (rq_wqes && (!pow2(rq_wqes) || rq_wqes > 32768))
    throw std::invalid_argument("invalid rq_wqes=" + std::to_string(rq_wqes) +
                                ": allowed 0 or a power of two up to 32768");
  Header* h = self_.hdr();
  const uint32_t idx = h->n_dcts;
  if (idx >= h->max_dcts)
    throw std::runtime_error("emu: DCT table full (" + std::to_string(h->max_dcts - 1) +
                             " DCTs; raise max_dcts)");
  const uint64_t dbrec = self_.dct_dbrec(idx);
  const uint64_t rq = rq_wqes ? self_.alloc_ring(uint64_t{rq_wqes} * 16, "DCT RQ ring") : 0;
  DctEntry& d = self_.dcts()[idx];
  d.dctn = make_num(rank_, kDctBit | idx);
  d.dc_key = dc_key;
  d.rq.buf_off = rq;
  d.rq.dbrec_off = dbrec + 4 * mlx5::kRcvDbr;
  d.rq.wqe_cnt = rq_wqes;
  d.rq.cqn = cqn;
  d.pd = pd;
  st_rel(&d.state, static_cast<uint32_t>(kRtr));  // a DCT is ready once created
  st_rel(&h->n_dcts, idx + 1);
  return DctInfo{d.dctn, RqInfo{rq ? reinterpret_cast<uint64_t>(self_.at(rq)) : 0,
                                reinterpret_cast<uint64_t>(self_.at(dbrec)), rq_wqes}};
}

QpEntry& Nic::qp_at(uint32_t qpn) const {
  const uint32_t i = num_index(qpn);
  if (num_rank(qpn) != (static_cast<uint32_t>(rank_) & 0xff) || i == 0 || (i & kDctBit) ||
      i >= ld_acq(&self_.hdr()->n_qps))
    throw std::invalid_argument("invalid qpn=" + hex(qpn) + ": not a QP of rank " +
                                std::to_string(rank_));
  return self_.qps()[i];
}

const QpEntry& Nic::qp_entry(uint32_t qpn) const { return qp_at(qpn); }

const DctEntry& Nic::dct_entry(uint32_t dctn) const {
  const uint32_t i = num_index(dctn) & ~kDctBit;
  if (num_rank(dctn) != (static_cast<uint32_t>(rank_) & 0xff) || !(num_index(dctn) & kDctBit) ||
      i == 0 || i >= ld_acq(&self_.hdr()->n_dcts))
    throw std::invalid_argument("invalid dctn=" + hex(dctn) + ": not a DCT of rank " +
                                std::to_string(rank_));
  return self_.dcts()[i];
}

const CqEntry& Nic::cq_entry(uint32_t cqn) const {
  check_own_cq(self_, rank_, cqn, "cqn");
  return self_.cqs()[num_index(cqn)];
}

uint32_t Nic::qp_state(uint32_t qpn) const { return ld_acq(&qp_at(qpn).state); }

void Nic::modify_qp(uint32_t qpn, uint32_t state, int remote_rank, uint32_t remote_qpn) {
  std::lock_guard<std::mutex> g(ctl_);
  QpEntry& q = qp_at(qpn);
  const uint32_t cur = ld_acq(&q.state);
  const bool ok = state == kReset || state == kErr || (cur == kReset && state == kInit) ||
                  (cur == kInit && state == kInit) || (cur == kInit && state == kRtr) ||
                  (cur == kRtr && state == kRts) || (cur == kRts && state == kRts);
  if (!ok)
    throw std::invalid_argument("QP " + hex(qpn) + ": transition " + state_name(cur) + "->" +
                                state_name(state) +
                                " not allowed (RESET->INIT->RTR->RTS, any->ERR, any->RESET)");
  if (state == kRtr && q.type == kRc) {
    if (remote_rank < 0 || remote_rank >= world_ ||
        num_rank(remote_qpn) != (static_cast<uint32_t>(remote_rank) & 0xff))
      throw std::invalid_argument("QP " + hex(qpn) + ": invalid remote rank=" +
                                  std::to_string(remote_rank) + " qpn=" + hex(remote_qpn));
    if (!seg_[remote_rank])
      throw std::runtime_error("QP " + hex(qpn) + ": rank " + std::to_string(remote_rank) +
                               " is not attached (add_peers first)");
  }
  // The engine must not be inside this QP's batch while its state changes.
  lock_engine();
  const uint32_t i = num_index(qpn);
  if (state == kRtr && q.type == kRc) {
    q.remote_rank = remote_rank;
    q.remote_qpn = remote_qpn;
  }
  if (state == kReset) {
    // Indices restart at 0, as after the driver's modify to RESET.
    eng_[i] = QpEng{};
    if (model_) model_reset_qp(i);
    last_db_[i] = 0;
    std::memset(self_.doorbell(i), 0, kDbStride);
    st_rlx(&q.sq_ci, 0u);
    uint32_t* db = reinterpret_cast<uint32_t*>(self_.at(q.dbrec_off));
    db[0] = db[1] = 0;
    if (q.rq.wqe_cnt) {
      CqEntry& rcq = self_.cqs()[num_index(q.rq.cqn)];
      lock_cq(self_, rcq);
      q.rq.ci = 0;
      spin_unlock(&rcq.lock);
    }
    q.remote_rank = -1;
  }
  st_rel(&q.state, state);
  unlock_engine();
}

void Nic::attach_peer(int rank, const std::string& name, uint64_t bytes) {
  std::lock_guard<std::mutex> g(ctl_);
  if (rank < 0 || rank >= world_ || rank == rank_)
    throw std::invalid_argument("invalid peer rank=" + std::to_string(rank) + " (self " +
                                std::to_string(rank_) + ", world " + std::to_string(world_) + ")");
  Segment s = Segment::attach(name, bytes);
  if (s.hdr()->rank != rank || s.hdr()->world != world_)
    throw std::runtime_error("segment " + name + " belongs to rank " +
                             std::to_string(s.hdr()->rank) + " of world " +
                             std::to_string(s.hdr()->world) + ", expected rank " +
                             std::to_string(rank) + " of " + std::to_string(world_));
  lock_engine();
  peers_[rank] = std::move(s);
  seg_[rank] = &peers_[rank];
  unlock_engine();
}

bool Nic::seal() {
  std::lock_guard<std::mutex> g(ctl_);
  return self_.unlink();
}

void Nic::close() {
  if (closed_) return;
  stop_thread();
  std::lock_guard<std::mutex> g(ctl_);
  lock_engine();  // an inline caller may still hold the progress hook
  closed_ = true;
  self_.unlink();
  for (auto& p : peers_) p.unmap();
  for (auto& s : seg_) s = nullptr;
  self_.unmap();
  unlock_engine();
}

}  // namespace emu
}  // namespace gicbench
