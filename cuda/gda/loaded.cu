// loaded-rtt on mini-gda (the paper, arXiv 2610.01380, §4.2, Figure 6, Table 11): background CTAs
// load the endpoint with bulk writes while one thread measures (requester) or answers
// (responder) an 8-byte probe's round trip, on a QP shared with the background or a private one.
// Compiled at run time like kernels.cu (one module per ordering, -DGDA_ORDERING=n); it includes
// kernels.cu for mini-gda's producer/consumer helpers (reservation, room, reaping, deadlines), so
// the posting code is the same code msg-rate and single-op measure.
//
// gda_load_background  C CTAs of one warp each, CTA c posting on lane first + c: the leader
//                      reserves `batch` WQEs, the warp builds them in lockstep, the leader
//                      publishes in reservation order (the QP may be shared) and rings once;
//                      until the probe's stop word, a failure or the host's abort word
// gda_load_probe       one thread on lane 0 (shared: the QP of background CTA 0; private: a QP no
//                      CTA touches): waits for every background CTA to run, then round trips;
//                      snapshots the background's retired WQEs around the measured ones; sets
//                      the stop word however it ends
//
// Lanes: 0 the probe's; background CTA c on lane first + c (first 0: shared, 1: private). Every
// background WQE goes to slots 1.. of its lane's slice (slot 0 is the probe's), inline from the
// device copy of the lane's source slice. The last WQE of each batch is signaled, so every batch
// retires by its own CQE (a stopping CTA drains its last batch).
#include "gda/kernels.cu"

namespace {

// Words of the call's control block (GPU memory, uint64 each).
enum LoadWord : int {
  kLwStop = 0,    // the probe ended (any outcome): background CTAs finish their batch and stop
  kLwStarted,     // background CTAs running
  kLwT0,          // globaltimer at the first measured probe
  kLwT1,          // globaltimer after the last measured probe retired
  kLwBackground,  // background WQEBBs retired between T0 and T1
  kLwProbes,      // probes done (warm-up included)
  kLwWords = 8
};

// Per background CTA out words.
enum CtaWord : int { kCwPosted = 0, kCwDoorbells, kCwCqes, kCwWords };

constexpr uint32_t kAbortEvery = 64;  // batches between reads of the host's abort word (PCIe)

__device__ __forceinline__ bool stopped(const Ctl& c, const unsigned long long* lw,
                                        uint64_t batches) {
  if (ld_volatile64(&lw[kLwStop]) != 0 || ld_volatile64(&c.status[kStCode]) != 0) return true;
  return batches % kAbortEvery == 0 && ld_volatile32(c.abort) != 0;
}

// Post one write on a QP other threads may post on: reserve, wait for room, build, publish after
// every earlier reservation (the slot handoff of msg-rate's publish=thread). False on failure.
__device__ bool post_shared(const Ctl& c, int li, const Lane& l, QpState* s, uint32_t bbs,
                            const Payload& p, uint64_t raddr, uint64_t laddr, uint32_t& end,
                            uint64_t& reaped) {
  const uint32_t start = atomicAdd(&s->resv, bbs);
  end = start + bbs;
  if (!wait_room(c, li, l, s, end, reaped)) return false;
  const uint64_t db = build_write(l, start, raddr, true, p, laddr, true);
  Wait w(c);
  while (ld_acquire_gpu32(&s->pub) != start)
    if (!w.tick(li, &l, s)) return false;
  publish(l.dbrec(), l.doorbell(), end, db);
  st_release_gpu32(&s->pub, end);
  return true;
}

// Sum over the background lanes of their retired WQEBBs, each relative to `snap` (and stored
// into it when `take`).
__device__ uint64_t retired_since(const uint64_t* lanes, int first, int nbg, QpState* states,
                                  uint32_t* snap, bool take) {
  uint64_t sum = 0;
  for (int i = 0; i < nbg; ++i) {
    const Lane l = lane_at(lanes, first + i);
    const uint32_t r = ld_acquire_gpu32(&state_of(states, l)->retired);
    if (take) {
      snap[i] = r;
    } else {
      sum += static_cast<uint32_t>(r - snap[i]);
    }
  }
  return sum;
}

__device__ void probe_body(const Ctl& c, const uint64_t* lanes, int first, int nbg,
                           QpState* states, int requester, uint32_t size, const uint8_t* src,
                           const uint8_t* watch, uint32_t iters, uint32_t warmup, uint32_t ctas,
                           unsigned long long* lw, uint32_t* snap, int64_t* samples) {
  const Lane l = lane_at(lanes, 0);
  QpState* s = state_of(states, l);
  const uint32_t bbs = ld_volatile32(&s->bbs);
  {  // unloaded probes would measure nothing: every background CTA runs first
    Wait w(c);
    uint64_t seen;
    while ((seen = ld_volatile64(&lw[kLwStarted])) < ctas)
      if (!w.tick(0, &l, s, seen, ctas)) return;
  }
  const uint8_t* word = watch + size - 8;
  const uint64_t total = static_cast<uint64_t>(warmup) + iters;
  for (uint64_t i = 0; i < total; ++i) {
    const uint64_t seq = i + 1;
    const Payload p{src, size, true, seq};
    uint64_t reaped = 0, seen;
    uint32_t end = 0;
    if (i == warmup) {
      retired_since(lanes, first, nbg, states, snap, true);
      st_volatile64(&lw[kLwT0], globaltimer());
    }
    Wait w(c);
    if (requester) {
      const uint64_t t0 = globaltimer();
      if (!post_shared(c, 0, l, s, bbs, p, l[kDstAddr], l[kSrcAddr], end, reaped)) return;
      while ((seen = load_seq(word)) != seq)
        if (!try_reap(c, 0, l, s, reaped) || !w.tick(0, &l, s, seen, seq)) return;
      const uint64_t t1 = globaltimer();
      if (i >= warmup) samples[i - warmup] = static_cast<int64_t>(t1 - t0);
    } else {
      while ((seen = load_seq(word)) != seq)
        if (!w.tick(0, &l, s, seen, seq)) return;
      if (!post_shared(c, 0, l, s, bbs, p, l[kDstAddr], l[kSrcAddr], end, reaped)) return;
    }
    if (!wait_retired(c, 0, l, s, end, reaped)) return;
    st_volatile64(&lw[kLwProbes], seq);
  }
  if (warmup >= total) {  // nothing measured: an empty window
    retired_since(lanes, first, nbg, states, snap, true);
    st_volatile64(&lw[kLwT0], globaltimer());
  }
  st_volatile64(&lw[kLwBackground], retired_since(lanes, first, nbg, states, snap, false));
  st_volatile64(&lw[kLwT1], globaltimer());
  c.status[kStDone] = total;
}

}  // namespace

// ---- background ----------------------------------------------------------------------------------
// grid: C CTAs, block: 32 threads. batch <= 32 WQEs per doorbell. pace_ps: picoseconds per
// message per CTA (0: unpaced). cta_out: per CTA kCwWords int64.
extern "C" __global__ void gda_load_background(const uint64_t* lanes, int first, QpState* states,
                                               uint32_t batch, uint32_t size, uint64_t pace_ps,
                                               uint64_t timeout_ns, unsigned long long* lw,
                                               int64_t* cta_out, unsigned long long* status,
                                               const uint32_t* abort) {
  const Ctl c{status, abort, timeout_ns};
  const uint32_t lane_id = threadIdx.x & 31;
  const bool leader = lane_id == 0;
  const unsigned mask = 0xffffffffu;
  const int li = first + static_cast<int>(blockIdx.x);
  const Lane l = lane_at(lanes, li);
  QpState* s = state_of(states, l);
  const uint32_t bbs = ld_volatile32(&s->bbs);
  const uint32_t base = ld_volatile32(&s->base);
  const uint64_t slots = l[kRegion] / size;  // >= 2 (the host checks): slot 0 is the probe's
  const uint8_t* src_dev = reinterpret_cast<const uint8_t*>(l[kSrcDev]);
  uint64_t posted = 0, doorbells = 0, reaped = 0, batches = 0;
  uint32_t last_end = 0;
  bool ok = true;
  if (leader) atomicAdd(&lw[kLwStarted], 1ull);
  const uint64_t t_begin = globaltimer();
  for (;;) {
    int go = 0;
    uint32_t start = 0;
    if (leader) {
      go = ok && !stopped(c, lw, batches);
      if (go) {
        start = atomicAdd(&s->resv, batch * bbs);
        ok = wait_room(c, li, l, s, start + batch * bbs, reaped);
        go = ok;
      }
    }
    go = __shfl_sync(mask, go, 0);
    if (!go) break;
    start = __shfl_sync(mask, start, 0);
    uint64_t db = 0;
    for (uint32_t j = lane_id; j < batch; j += 32) {
      const uint32_t pi = start + j * bbs;
      const uint64_t k = (pi - base) / bbs;
      const uint64_t off = (1 + k % (slots - 1)) * size;
      const Payload p{src_dev + off, size, false, 0};
      db = build_write(l, pi, l[kDstAddr] + off, true, p, l[kSrcAddr] + off, j + 1 == batch);
    }
    db = __shfl_sync(mask, db, (batch - 1) & 31);
    __syncwarp(mask);
    if (leader) {
      const uint32_t end = start + batch * bbs;
      Wait w(c);
      while (ok && ld_acquire_gpu32(&s->pub) != start)
        if (!w.tick(li, &l, s)) ok = false;
      if (ok) {
        publish(l.dbrec(), l.doorbell(), end, db);
        st_release_gpu32(&s->pub, end);
        ++doorbells;
        last_end = end;
        posted += batch;
        ++batches;
        ok = try_reap(c, li, l, s, reaped);
      }
      if (ok && pace_ps) {  // paced: the CTA's posted messages may not run ahead of the clock
        const uint64_t due = t_begin + posted * pace_ps / 1000;
        while (globaltimer() < due && !stopped(c, lw, 0)) {
        }
      }
    }
  }
  if (!leader) return;
  if (ok && last_end) ok = wait_retired(c, li, l, s, last_end, reaped);
  int64_t* out = cta_out + static_cast<uint64_t>(blockIdx.x) * kCwWords;
  out[kCwPosted] = static_cast<int64_t>(posted);
  out[kCwDoorbells] = static_cast<int64_t>(doorbells);
  out[kCwCqes] = static_cast<int64_t>(reaped);
}

// ---- probe ---------------------------------------------------------------------------------------
// One thread. src: device copy of lane 0's source slice (inline payload, last 8 bytes = seq);
// watch: the landing slice the reply (requester) or the request (responder) arrives in. nbg
// background lanes from `first`. snap: nbg uint32 of scratch. samples: iters int64 ns.
extern "C" __global__ void gda_load_probe(const uint64_t* lanes, int first, int nbg,
                                          QpState* states, int requester, uint32_t size,
                                          const uint8_t* src, const uint8_t* watch,
                                          uint32_t iters, uint32_t warmup, uint32_t ctas,
                                          uint64_t timeout_ns, unsigned long long* lw,
                                          uint32_t* snap, int64_t* samples,
                                          unsigned long long* status, const uint32_t* abort) {
  const Ctl c{status, abort, timeout_ns};
  probe_body(c, lanes, first, nbg, states, requester, size, src, watch, iters, warmup, ctas, lw,
             snap, samples);
  __threadfence();
  st_volatile64(&lw[kLwStop], 1);  // however the probe ended, the background stops
  __threadfence();
}
