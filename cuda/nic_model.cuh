// The NIC model of the emulated NIC: what a NIC pays for each WQE, as stated mechanisms with
// parameters (app/fabric/emu/nic_models.toml gives each preset's constants and their sources).
//
// __host__ __device__ arithmetic over explicit state, so the CPU engine (native/src/emu_model.cpp)
// and a CUDA engine can charge the same model. Times are picoseconds (uint64) of one clock every
// engine of the node shares (the CPU engine: CLOCK_MONOTONIC); bandwidths are femtoseconds per
// byte, so every charge is integer arithmetic a test can compute by hand.
//
// One WQE, in the order a NIC handles it (plan_tx, then plan_rx at the responder, then finish):
//   doorbell delivery  t_nic = t_seen + doorbell      (the MMIO write reaching the NIC)
//   WQE fetch          a DMA read of its 64-byte basic blocks: latency + bytes at the DMA rate;
//                      WQE fetches queue behind each other (the NIC fetches ahead of the
//                      payload reads, which queue separately at the same rate)
//   send-side context  looked up when the doorbell arrives (the doorbell names the QP), fetched
//                      beside the WQE on a miss: it delays the WQE only when slower than the fetch
//   DCI destination    a DCI sending to a destination other than the one it is connected to, or
//                      after it drained, first waits for its outstanding acks, then connects
//   payload read       pointer payloads: a DMA read (latency + bandwidth); inline: none
//   per-message        the send pipeline's cost per message (the port's message-rate ceiling)
//   link               serialisation of payload + per-packet headers at the line rate, cut
//                      through behind the payload read; then the wire (one way)
//   responder          its receive pipeline (per message, plus a busy time on a receive-side
//                      context miss, whose fetch also delays this message), then the payload
//                      written to memory (DMA write) or, for READ and atomics, read from it
//   completion         the ack (or READ/atomic response) back over the wire, then the CQE write
// A QP's responder finishes its messages in order, and its CQEs are in order.
//
// The context cache: one per NIC, fully associative, least recently used, measured in lines.
// A send-side context (a QP that sends) takes send_ctx_lines, a receive-side context (a QP or
// DCT that receives) recv_ctx_lines; both sides share the lines, so a NIC that sends and receives
// holds both and they evict each other.
#pragma once

#include "mlx5.cuh"

namespace gicbench {
namespace nic_model {

namespace m5 = mlx5;

// ---- parameters (integer units; app/fabric/emu/nic_model.py converts a preset) ------------------
struct Params {
  uint64_t doorbell_ps;         // doorbell delivery: MMIO write to the NIC
  uint64_t dma_read_ps;         // DMA read latency (WQE fetch, payload read, READ at responder)
  uint64_t dma_fs_per_byte;     // DMA read bandwidth
  uint64_t dma_write_ps;        // posted DMA write reaching memory (landing, CQE)
  uint64_t tx_msg_ps;           // send pipeline, per message (the port's message ceiling)
  uint64_t rx_msg_ps;           // receive pipeline, per message
  uint64_t link_fs_per_byte;    // line rate
  uint64_t wire_ps;             // one way: link, switch and the far end's pipeline latency
  uint64_t ctx_fetch_ps;        // a context missing from the cache: fetched by a DMA read
  uint64_t recv_miss_busy_ps;   // receive pipeline busy time per receive-side context miss
  uint64_t dc_connect_ps;       // a DCI connecting to a destination
  uint64_t slack_ps;            // an event made visible later than this past its time is late
  uint32_t mtu;                 // payload bytes per packet
  uint32_t packet_header_bytes; // per packet on the wire
  uint32_t request_header_bytes;  // first packet of a WRITE/READ/atomic request (RETH)
  uint32_t cache_lines;         // 0: no context cache (every lookup hits)
  uint32_t send_ctx_lines;
  uint32_t recv_ctx_lines;
};

// ---- what the model needs of a WQE ---------------------------------------------------------------
enum Kind : uint8_t { kNop = 0, kWrite = 1, kSend = 2, kRead = 3, kAtomic = 4 };

struct WqeDesc {
  uint8_t kind;
  uint8_t pointer;  // payload named by data segments (read by DMA), not inline
  uint8_t dci;
  uint32_t nbb;     // 64-byte basic blocks
  uint32_t bytes;   // payload bytes
  int32_t dest_rank;  // responder's rank (DCI: from the address vector), -1 unknown
  uint32_t dest_num;  // responder's QPN or DCT number (its receive-side context)
};

// Read what the model needs from the WQE at `ci` (its ctrl checked ready by the core). A malformed
// WQE gives a NOP-like description: the core's execute() reports its error.
GB_HD WqeDesc describe(const m5::SqRing& sq, uint32_t ci, bool dci, int32_t rc_rank,
                       uint32_t rc_qpn) {
  const m5::CtrlView c = m5::get_ctrl_seg(sq.wqe(ci));
  WqeDesc w{kNop, 0, static_cast<uint8_t>(dci), m5::ds_to_wqebbs(c.ds ? c.ds : 1), 0, rc_rank,
            rc_qpn};
  const uint8_t op = c.opcode;
  w.kind = op == m5::kOpRdmaWrite || op == m5::kOpRdmaWriteImm ? kWrite
           : op == m5::kOpSend || op == m5::kOpSendImm         ? kSend
           : op == m5::kOpRdmaRead                              ? kRead
           : op == m5::kOpAtomicFa || op == m5::kOpAtomicCs     ? kAtomic
                                                                : kNop;
  if (w.kind == kNop || c.ds == 0 || w.nbb > sq.wqebb_cnt) {
    w.kind = kNop;
    return w;
  }
  uint32_t seg = 1;
  if (dci) {
    if (c.ds < 2) {
      w.kind = kNop;
      return w;
    }
    const uint8_t* av = sq.seg(ci, seg);
    const m5::AvView v = m5::get_av(av);
    w.dest_rank = static_cast<int32_t>(m5::get_be16(av + 14)) - 1;  // LID = rank + 1
    w.dest_num = v.dqp_dct & 0xffffff;
    seg += v.ext ? m5::kDsAvFull : m5::kDsAvCompact;
  }
  if (w.kind != kSend) ++seg;  // the remote-address segment
  if (w.kind == kAtomic) {
    w.bytes = 8;
    return w;
  }
  if (seg < c.ds && m5::is_inline(sq.seg(ci, seg))) {
    w.bytes = m5::get_be32(sq.seg(ci, seg)) & ~m5::kInlineFlag;
    return w;
  }
  w.pointer = 1;
  uint64_t total = 0;
  for (; seg < c.ds; ++seg) total += m5::get_data_seg(sq.seg(ci, seg)).byte_count;
  w.bytes = total > 0x80000000ull ? 0x80000000u : static_cast<uint32_t>(total);
  return w;
}

// ---- arithmetic ----------------------------------------------------------------------------------
GB_HD uint64_t max64(uint64_t a, uint64_t b) { return a > b ? a : b; }
GB_HD uint64_t xfer_ps(uint64_t bytes, uint64_t fs_per_byte) {
  return (bytes * fs_per_byte + 500) / 1000;  // rounded to the nearest picosecond
}
GB_HD uint32_t packets(const Params& p, uint32_t bytes) {
  return bytes ? (bytes + p.mtu - 1) / p.mtu : 1;
}
// Bytes on the wire for `payload` bytes in packets, `request` adding the request header once.
GB_HD uint64_t wire_bytes(const Params& p, uint32_t payload, bool request) {
  return uint64_t{payload} + uint64_t{packets(p, payload)} * p.packet_header_bytes +
         (request ? p.request_header_bytes : 0);
}
GB_HD uint32_t last_packet_payload(const Params& p, uint32_t bytes) {
  return bytes == 0 ? 0 : bytes - (packets(p, bytes) - 1) * p.mtu;
}

// ---- state ---------------------------------------------------------------------------------------
// The requester side of one NIC (only its engine plans on it).
struct Tx {
  uint64_t fetch_free = 0;  // WQE fetches: their DMA read queue is busy until
  uint64_t dma_free = 0;   // payload reads: their DMA read queue is busy until
  uint64_t tx_free = 0;    // the send pipeline is busy until
  uint64_t link_free = 0;  // the link is serialising until
};

// One QP as the model sees it (only its engine plans on it).
struct Qp {
  uint64_t last_touch = 0;  // the responder finished this QP's previous message
  uint64_t last_cqe = 0;    // this QP's previous CQE
  uint64_t last_ack = 0;    // the last ack or response of this QP arrives back
  int32_t dest_rank = -1;   // DCI: connected destination (rank, DCT number)
  uint32_t dest_num = 0;
};

// Times of one planned WQE (picoseconds).
struct TxOut {
  uint64_t t_nic;      // doorbell reached the NIC
  uint64_t t_fetched;  // WQE fetched
  uint64_t t_ready;    // WQE, context and (DCI) connection ready
  uint64_t t_depart;   // last byte on the wire
  uint64_t t_arrive;   // last byte at the responder
  uint8_t connected;   // the DCI connected for this WQE
};
struct RxOut {
  uint64_t t_touch;   // the responder's memory written (WRITE, SEND), read (READ) or updated
  uint64_t t_reply;   // the ack or the response's last byte leaves the responder
};
struct Times {
  uint64_t t_exec;  // landing visible (the engine executes the WQE then)
  uint64_t t_cqe;   // the requester's CQE visible
};

// The requester's part: doorbell, fetch, context, connection, payload read, send pipeline, link.
GB_HD TxOut plan_tx(const Params& p, Tx& tx, Qp& qp, const WqeDesc& w, uint64_t t_seen,
                    bool send_hit) {
  TxOut o{};
  o.t_nic = t_seen + p.doorbell_ps;
  uint64_t s = max64(o.t_nic, tx.fetch_free);
  tx.fetch_free = s + xfer_ps(uint64_t{w.nbb} * m5::kWqebbBytes, p.dma_fs_per_byte);
  o.t_fetched = tx.fetch_free + p.dma_read_ps;
  o.t_ready = max64(o.t_fetched, send_hit ? o.t_nic : o.t_nic + p.ctx_fetch_ps);
  if (w.kind == kNop) {
    o.t_depart = o.t_arrive = o.t_ready;
    return o;
  }
  if (w.dci) {
    const bool same = qp.dest_rank == w.dest_rank && qp.dest_num == w.dest_num;
    if (!same || qp.last_ack <= t_seen) {  // another destination, or drained: connect
      o.t_ready = max64(o.t_ready, qp.last_ack) + p.dc_connect_ps;
      qp.dest_rank = w.dest_rank;
      qp.dest_num = w.dest_num;
      o.connected = 1;
    }
  }
  const bool payload_out = w.kind == kWrite || w.kind == kSend;
  uint64_t t_first = o.t_ready, t_all = o.t_ready;
  if (payload_out && w.pointer && w.bytes) {
    s = max64(o.t_ready, tx.dma_free);
    tx.dma_free = s + xfer_ps(w.bytes, p.dma_fs_per_byte);
    const uint32_t first = w.bytes < p.mtu ? w.bytes : p.mtu;
    t_first = s + xfer_ps(first, p.dma_fs_per_byte) + p.dma_read_ps;
    t_all = tx.dma_free + p.dma_read_ps;
  }
  s = max64(t_first, tx.tx_free);
  tx.tx_free = s + p.tx_msg_ps;
  const uint32_t sent = payload_out ? w.bytes : (w.kind == kAtomic ? 8u : 0u);
  const uint64_t wb = wire_bytes(p, sent, w.kind != kSend);
  s = max64(tx.tx_free, tx.link_free);
  uint64_t depart = s + xfer_ps(wb, p.link_fs_per_byte);
  if (payload_out) {  // the last packet cannot leave before its payload is read
    const uint64_t tail = t_all + xfer_ps(uint64_t{last_packet_payload(p, sent)} +
                                              p.packet_header_bytes, p.link_fs_per_byte);
    depart = max64(depart, tail);
  }
  tx.link_free = depart;
  o.t_depart = depart;
  o.t_arrive = depart + p.wire_ps;
  return o;
}

// The responder's part, on its receive pipeline (`rx_free`: shared by every requester).
GB_HD RxOut plan_rx(const Params& p, uint64_t& rx_free, const WqeDesc& w, uint64_t t_arrive,
                    bool recv_hit) {
  RxOut o{};
  if (w.kind == kNop) {
    o.t_touch = o.t_reply = t_arrive;
    return o;
  }
  const uint64_t s = max64(t_arrive, rx_free);
  rx_free = s + p.rx_msg_ps + (recv_hit ? 0 : p.recv_miss_busy_ps);
  const uint64_t done = s + p.rx_msg_ps + (recv_hit ? 0 : p.ctx_fetch_ps);
  if (w.kind == kWrite || w.kind == kSend) {
    o.t_touch = done + p.dma_write_ps;
    o.t_reply = done;  // the ack leaves once the packet is processed
    return o;
  }
  // READ and atomics read the responder's memory, then send the response.
  const uint32_t back = w.kind == kAtomic ? 8u : w.bytes;
  o.t_touch = done + p.dma_read_ps + xfer_ps(back, p.dma_fs_per_byte);
  o.t_reply = o.t_touch + xfer_ps(wire_bytes(p, back, false), p.link_fs_per_byte);
  return o;
}

// The completion: responder order, the ack or response back, the CQE write, CQE order.
GB_HD Times finish(const Params& p, Qp& qp, const TxOut& tx, const RxOut& rx, const WqeDesc& w) {
  Times t{};
  if (w.kind == kNop) {  // local: no message
    t.t_exec = tx.t_ready;
    t.t_cqe = max64(tx.t_ready + p.dma_write_ps, qp.last_cqe);
    qp.last_cqe = t.t_cqe;
    return t;
  }
  t.t_exec = max64(rx.t_touch, qp.last_touch);
  qp.last_touch = t.t_exec;
  const uint64_t back = rx.t_reply + p.wire_ps;
  qp.last_ack = max64(qp.last_ack, back);
  t.t_cqe = max64(back + p.dma_write_ps, qp.last_cqe);
  t.t_cqe = max64(t.t_cqe, t.t_exec);
  qp.last_cqe = t.t_cqe;
  return t;
}

// ---- the context cache ---------------------------------------------------------------------------
// Fully associative LRU over lines, in memory every engine that charges this NIC reaches (the
// caller holds the lock). Nodes and buckets hold index + 1 (0: none). Linear probing with
// backward-shift deletion: no tombstones, so a lookup never degrades.
struct CacheHdr {
  uint32_t cap_lines;
  uint32_t used_lines;
  uint32_t max_nodes;
  uint32_t nbuckets;  // a power of two >= 2 * max_nodes
  uint32_t head;      // most recently used
  uint32_t tail;      // least recently used
  uint32_t free_head;
  uint32_t resident;
};
struct CacheNode {
  uint32_t key;  // 0: free
  uint32_t lines;
  uint32_t prev;
  uint32_t next;
};

// Context keys: the object's number (QPN or DCT number, 24 bits) and its side.
GB_HD uint32_t send_key(uint32_t num) { return ((num & 0xffffff) << 1) | 1u; }
GB_HD uint32_t recv_key(uint32_t num) { return (num & 0xffffff) << 1; }  // num is never 0

GB_HD uint32_t cache_nodes(const Params& p) {
  const uint32_t lo = p.send_ctx_lines < p.recv_ctx_lines ? p.send_ctx_lines : p.recv_ctx_lines;
  return p.cache_lines && lo ? p.cache_lines / lo + 1 : 0;
}
GB_HD uint32_t cache_buckets(const Params& p) {
  uint32_t b = 1;
  while (b < 2 * cache_nodes(p)) b <<= 1;
  return cache_nodes(p) ? b : 0;
}
GB_HD uint64_t cache_bytes(const Params& p) {
  return cache_nodes(p) ? sizeof(CacheHdr) + uint64_t{cache_nodes(p)} * sizeof(CacheNode) +
                              uint64_t{cache_buckets(p)} * 4
                        : 0;
}

struct Cache {
  CacheHdr* h;
  CacheNode* nodes;
  uint32_t* buckets;

  // Carve a cache of max_nodes nodes out of `mem` (cache_bytes(p), 8-byte aligned); its
  // buckets follow the nodes.
  GB_HD static Cache at(void* mem, uint32_t max_nodes) {
    uint8_t* b = static_cast<uint8_t*>(mem);
    CacheNode* n = reinterpret_cast<CacheNode*>(b + sizeof(CacheHdr));
    return Cache{reinterpret_cast<CacheHdr*>(b), n, reinterpret_cast<uint32_t*>(n + max_nodes)};
  }
  GB_HD void init(const Params& p) {
    h->cap_lines = p.cache_lines;
    h->used_lines = 0;
    h->max_nodes = cache_nodes(p);
    h->nbuckets = cache_buckets(p);
    h->head = h->tail = 0;
    h->resident = 0;
    for (uint32_t i = 0; i < h->max_nodes; ++i)
      nodes[i] = CacheNode{0, 0, 0, i + 1 < h->max_nodes ? i + 2 : 0};
    h->free_head = h->max_nodes ? 1 : 0;
    for (uint32_t i = 0; i < h->nbuckets; ++i) buckets[i] = 0;
  }
  GB_HD uint32_t home(uint32_t key) const {
    uint32_t x = key;  // murmur3's finaliser: neighbouring numbers spread over the buckets
    x ^= x >> 16;
    x *= 0x85ebca6bu;
    x ^= x >> 13;
    x *= 0xc2b2ae35u;
    x ^= x >> 16;
    return x & (h->nbuckets - 1);
  }
  GB_HD void unlink(uint32_t n) {
    CacheNode& c = nodes[n - 1];
    if (c.prev) nodes[c.prev - 1].next = c.next; else h->head = c.next;
    if (c.next) nodes[c.next - 1].prev = c.prev; else h->tail = c.prev;
    c.prev = c.next = 0;
  }
  GB_HD void push_front(uint32_t n) {
    CacheNode& c = nodes[n - 1];
    c.prev = 0;
    c.next = h->head;
    if (h->head) nodes[h->head - 1].prev = n; else h->tail = n;
    h->head = n;
  }
  GB_HD void erase_bucket(uint32_t i) {
    const uint32_t mask = h->nbuckets - 1;
    for (uint32_t j = (i + 1) & mask; buckets[j]; j = (j + 1) & mask) {
      const uint32_t k = home(nodes[buckets[j] - 1].key);
      // Move j's entry back to i unless its home lies cyclically in (i, j].
      const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
      if (!stays) {
        buckets[i] = buckets[j];
        i = j;
      }
    }
    buckets[i] = 0;
  }
  GB_HD void evict_lru() {
    const uint32_t n = h->tail;
    CacheNode& c = nodes[n - 1];
    uint32_t i = home(c.key);
    while (buckets[i] != n) i = (i + 1) & (h->nbuckets - 1);
    erase_bucket(i);
    unlink(n);
    h->used_lines -= c.lines;
    --h->resident;
    c = CacheNode{0, 0, 0, h->free_head};
    h->free_head = n;
  }
  // Touch the context `key` of `lines` lines: true on a hit. A miss evicts least recently used
  // contexts until it fits, then holds it.
  GB_HD bool touch(uint32_t key, uint32_t lines) {
    const uint32_t mask = h->nbuckets - 1;
    for (uint32_t i = home(key); buckets[i]; i = (i + 1) & mask) {
      const uint32_t n = buckets[i];
      if (nodes[n - 1].key == key) {
        if (h->head != n) {
          unlink(n);
          push_front(n);
        }
        return true;
      }
    }
    while (h->tail && h->used_lines + lines > h->cap_lines) evict_lru();
    const uint32_t n = h->free_head;
    if (!n || lines > h->cap_lines) return false;  // cannot hold it (refused by validation)
    h->free_head = nodes[n - 1].next;
    nodes[n - 1] = CacheNode{key, lines, 0, 0};
    uint32_t i = home(key);
    while (buckets[i]) i = (i + 1) & mask;
    buckets[i] = n;
    push_front(n);
    h->used_lines += lines;
    ++h->resident;
    return false;
  }
};

// ---- what a NIC shares with the engines that charge it -------------------------------------------
// One region per NIC, in memory every engine of the node reaches (the CPU engine: the rank's
// segment). Its own engine plans sends on it, the engines of its peers plan what they deliver to
// it: the receive pipeline and the context cache, under `lock`. Counters: atomics.
enum Counter : uint32_t {
  kCntWqes,         // WQEs this NIC's engine planned
  kCntCqes,         // CQEs it deferred to their modelled time
  kCntLate,         // of both, made visible later than slack past their modelled time
  kCntSendMisses,   // send-side context misses at this NIC
  kCntRecvMisses,   // receive-side context misses at this NIC (charged by the requesters)
  kCntDciConnects,  // DCI connections made by this NIC
  kNumCounters,
};
constexpr uint32_t kSharedMagic = 0x6d63696eu;  // "nicm"

struct Shared {
  uint32_t magic;  // published last (release) once the region is initialised
  uint32_t lock;
  uint64_t rx_free;  // the receive pipeline is busy until (ps)
  uint64_t counters[kNumCounters];
  uint32_t cache;  // 1: a Cache (CacheHdr, nodes, buckets) follows
  uint32_t pad32;
  uint64_t pad[13 - kNumCounters];
};
static_assert(sizeof(Shared) == 128, "the cache after Shared stays aligned");

GB_HD uint64_t shared_bytes(const Params& p) { return sizeof(Shared) + cache_bytes(p); }
// The cache of a region; its geometry comes from its own header (the owner sized it), so a
// requester with other parameters still reads it right.
GB_HD Cache shared_cache(Shared* s) {
  uint8_t* b = reinterpret_cast<uint8_t*>(s) + sizeof(Shared);
  const CacheHdr* h = reinterpret_cast<const CacheHdr*>(b);
  return Cache::at(b, h->max_nodes);
}
// Owner: initialise a zeroed region of shared_bytes(p); the caller publishes magic last.
GB_HD void shared_init(Shared* s, const Params& p) {
  s->rx_free = 0;
  for (uint32_t i = 0; i < kNumCounters; ++i) s->counters[i] = 0;
  s->cache = cache_nodes(p) ? 1 : 0;
  if (s->cache) {
    Cache c = Cache::at(reinterpret_cast<uint8_t*>(s) + sizeof(Shared), cache_nodes(p));
    c.init(p);
  }
}
GB_HD bool has_cache(const Shared* s) { return s->cache != 0; }

// ---- one WQE, planned ----------------------------------------------------------------------------
struct Planned {
  TxOut tx;
  RxOut rx;
  Times t;
  uint8_t send_hit, recv_hit;
};

// Plan one WQE of QP `own_num` of this NIC (`own`: its shared region) seen at `t_seen`: the send
// side here, the receive side at the responder's region `resp` (null: a responder without a
// model; its receive pipeline is then `spare_rx_free`, nobody else's, and every lookup hits).
// `Sync` is the engine's: lock(uint32_t*), unlock(uint32_t*), add(uint64_t*, uint64_t).
template <class Sync>
GB_HD Planned plan_wqe(const Params& p, Tx& tx, Qp& qp, Shared* own, Shared* resp,
                       uint64_t& spare_rx_free, const WqeDesc& w, uint32_t own_num,
                       uint64_t t_seen, Sync& sync) {
  Planned o{};
  o.send_hit = 1;
  if (w.kind != kNop && has_cache(own)) {
    sync.lock(&own->lock);
    Cache c = shared_cache(own);
    o.send_hit = c.touch(send_key(own_num), p.send_ctx_lines);
    sync.unlock(&own->lock);
    if (!o.send_hit) sync.add(&own->counters[kCntSendMisses], 1);
  }
  o.tx = plan_tx(p, tx, qp, w, t_seen, o.send_hit);
  if (o.tx.connected) sync.add(&own->counters[kCntDciConnects], 1);
  o.recv_hit = 1;
  if (w.kind == kNop) {
    o.rx = plan_rx(p, spare_rx_free, w, o.tx.t_arrive, true);
  } else if (resp) {
    sync.lock(&resp->lock);
    if (has_cache(resp)) {
      Cache c = shared_cache(resp);
      o.recv_hit = c.touch(recv_key(w.dest_num), p.recv_ctx_lines);
    }
    o.rx = plan_rx(p, resp->rx_free, w, o.tx.t_arrive, o.recv_hit);
    sync.unlock(&resp->lock);
    if (!o.recv_hit) sync.add(&resp->counters[kCntRecvMisses], 1);
  } else {
    o.rx = plan_rx(p, spare_rx_free, w, o.tx.t_arrive, true);
  }
  o.t = finish(p, qp, o.tx, o.rx, w);
  return o;  // the caller counts kCntWqes (often, so an engine may keep it locally)
}

}  // namespace nic_model
}  // namespace gicbench
