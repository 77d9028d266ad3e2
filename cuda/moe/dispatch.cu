// MoE token dispatch on mini-gda (the paper, arXiv 2611.12362, §II-B/C): the send kernel of the
// four backends, the receive kernel, a one-thread delay kernel and a drain. Compiled at run time
// (CuPy RawModule, NVRTC) once per ordering with -DGDA_ORDERING=n like cuda/gda/kernels.cu;
// tests compile it with nvcc for sm_90.
//
// moe_send   CTA c stages tokens c, c + grid, ... (a copy into the staging buffer the NIC reads)
//            and copies those bound for this rank's own experts into their landing slices; warp
//            0 then hands each (token, expert) to the NIC:
//              gdaki      an RDMA write on the expert's lane (QP e towards its rank): reserve an
//                         SQ slot (fetch-add), build the WQE (queue.cuh), then in reservation
//                         order the doorbell record and the doorbell (threads of every CTA share
//                         the QP), as gda_msg_rate's per-thread publication;
//              free-flow  the same WQE, marked ready in the QP's ready array; a host thread rings;
//              gpi        one WRITE descriptor (gpi.cuh) into the rank's GPI queue: its index by
//                         a fetch-add on pi, a credit against ci, whole-segment stores with owner
//                         bits;
//              gpi-mc     one FANOUT descriptor per token (NO_SIGNAL) for its remote experts (one
//                         per window group its experts fall in, where a window cannot address
//                         every local expert's slice: the format's 15-bit slots).
//            Signals (the DeepEP low-latency rule): every (source, expert) gets exactly one,
//            (count + 1) added to the count word of its slice, after the source's writes to that
//            expert. The thread whose write completes an expert's count (a fetch-add on kSent)
//            posts it, so its reservation comes after every write's: on the same QP (a masked
//            fetch-add, opcode 0x15, 8 bytes, boundary 0) or in the same GPI queue (SIGNAL), it
//            executes after them. Experts sent nothing get theirs first.
// moe_recv   CTA (e, s): poll the count word of source s for local expert e until nonzero,
//            count = value - 1, copy that many slots into the expert-major buffer, zero the word.
// moe_delay  one thread spins on globaltimer for `ns` and records how long it spun.
// moe_drain  one thread per lane: every WQE posted is retired (after the last iteration).
//
// Every wait has a deadline and watches the host abort word (gda/calls.cuh): a call never hangs.
#include "moe/dispatch.cuh"

using namespace gicbench;
using namespace gicbench::gda;
using namespace gicbench::moe;

namespace {

struct Args {
  const uint64_t* w;
  __device__ uint64_t operator[](int i) const { return w[i]; }
  template <typename T>
  __device__ T* ptr(int i) const {
    return reinterpret_cast<T*>(w[i]);
  }
};

// `n` bytes from `src` to `dst` by the threads of the block, in the widest words all three
// allow: 16 bytes (tokens of 2H bytes, H a multiple of 8, at 16-byte aligned slots), 8 (slices
// of T_max slots and a count word), else bytes. `fresh`: memory another agent (the NIC) writes,
// read with loads that bypass the caches (.cv), so a slot is read afresh in every iteration.
template <bool fresh>
__device__ __forceinline__ void block_copy(uint8_t* dst, const uint8_t* src, uint64_t n) {
  const uint64_t align = reinterpret_cast<uint64_t>(dst) | reinterpret_cast<uint64_t>(src) | n;
  if ((align & 15) == 0) {
    uint4* d = reinterpret_cast<uint4*>(dst);
    const uint4* s = reinterpret_cast<const uint4*>(src);
    for (uint64_t i = threadIdx.x; i < n / 16; i += blockDim.x) d[i] = fresh ? __ldcv(s + i) : s[i];
  } else if ((align & 7) == 0) {
    unsigned long long* d = reinterpret_cast<unsigned long long*>(dst);
    const unsigned long long* s = reinterpret_cast<const unsigned long long*>(src);
    for (uint64_t i = threadIdx.x; i < n / 8; i += blockDim.x) d[i] = fresh ? __ldcv(s + i) : s[i];
  } else {
    for (uint64_t i = threadIdx.x; i < n; i += blockDim.x)
      dst[i] = fresh ? ld_volatile8(src + i) : src[i];
  }
}

__device__ __forceinline__ void st_volatile_v2u64(void* p, uint64_t a, uint64_t b) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}

// The count signal at producer index `pi`: a masked fetch-add of `add` (8 bytes, field boundary
// 0: a plain add) on the word at raddr, its old value to laddr, built by mlx5.cuh's encoder
// (body first, ctrl last); always signaled (a lane's last WQE of a call, so the drain retires
// everything). Returns the doorbell value, composed in registers (never read back from the SQ).
__device__ __forceinline__ uint64_t build_count_signal(const Lane& l, uint32_t pi, uint64_t raddr,
                                                       uint64_t add, uint32_t lkey,
                                                       uint64_t laddr) {
  const m5::SqRing sq{l.sq(), l.wqebbs()};
  m5::build_masked_fetch_add(sq, pi, l.qpn(), raddr, static_cast<uint32_t>(l[kRkey]), 8, add, 0,
                             lkey, laddr, m5::kCqUpdate);
  const uint8_t opmod = m5::ext_atomic_opmod(8);
  const uint32_t ds = m5::ds_masked_atomic(m5::kOpAtomicMaskedFa, 8, false, false);
  const uint32_t w0 = m5::bswap32((static_cast<uint32_t>(opmod) << 24) | ((pi & 0xffff) << 8) |
                                  m5::kOpAtomicMaskedFa);
  const uint32_t w1 = m5::bswap32((l.qpn() << 8) | (ds & m5::kDsMask));
  return (static_cast<uint64_t>(w1) << 32) | w0;
}

// One WQE (a token's write, or with `signal` the count signal) on lane `li`, shared by threads of
// every CTA: reserve one WQEBB (both WQEs are one: RC, pointer payload), wait for room, build,
// then publish in reservation order (gdaki) or mark it ready (free-flow: no hand-off).
__device__ bool post_wqe(const Ctl& c, const Args& a, const uint64_t* lanes, QpState* states,
                         int li, bool signal, uint64_t raddr, uint64_t laddr, uint64_t add) {
  const Lane l = lane_at(lanes, li);
  QpState* s = state_of(states, l);
  uint64_t reaped = 0;
  const uint32_t pi = atomicAdd(&s->resv, 1u);
  if (!wait_room(c, li, l, s, pi + 1, reaped)) return false;
  const uint32_t lkey = static_cast<uint32_t>(a[signal ? kFetchKey : kStagingKey]);
  uint64_t db;
  if (signal) {
    db = build_count_signal(l, pi, raddr, add, lkey, laddr);
  } else {
    const bool sig = ((pi + 1) & (static_cast<uint32_t>(a[kSignalEvery]) - 1)) == 0;
    const Payload p{nullptr, static_cast<uint32_t>(a[kSlotBytes]), false, 0};
    db = build_write(l, pi, raddr, false, p, laddr, sig);
  }
  if (l[kReady]) {
    mark_wqe_ready(l, pi, 1);
    atomicMax(&s->pub, pi + 1);  // diagnostics only: the host thread rings
    return true;
  }
  Wait w(c);
  while (ld_acquire_gpu32(&s->pub) != pi)
    if (!w.tick(li, &l, s)) return false;
  publish(l.dbrec(), l.doorbell(), pi + 1, db);
  st_release_gpu32(&s->pub, pi + 1);
  return true;
}

// Descriptor `idx` of the GPI queue: wait for its credit (idx - ci < depth, ci re-read only when
// the shadow says no room), then its eight segments as four 16-byte stores, each owner bit set.
__device__ bool gpi_put(const Ctl& c, const Args& a, uint64_t idx, const gpi::Desc& d,
                        uint64_t& ci_shadow) {
  const uint32_t log_depth = static_cast<uint32_t>(a[kGpiLogDepth]);
  const uint64_t depth = 1ull << log_depth;
  const uint64_t* base = a.ptr<uint64_t>(kGpiBase);
  Wait w(c);
  while (idx - ci_shadow >= depth) {
    ci_shadow = ld_acquire_sys64(base + gpi::kOffCi / 8);
    if (idx - ci_shadow < depth) break;
    if (!w.tick(-1, nullptr, nullptr, ci_shadow, idx)) return false;
  }
  uint64_t seg[gpi::kSegs];
  gpi::encode(d, gpi::owner_for(idx, log_depth), seg);
  uint64_t* slot = a.ptr<uint64_t>(kGpiRing) + (idx & (depth - 1)) * gpi::kSegs;
  for (uint32_t i = 0; i < gpi::kSegs; i += 2) st_volatile_v2u64(slot + i, seg[i], seg[i + 1]);
  return true;
}

// `n` descriptor indices by a fetch-add: one order for every producer thread.
__device__ __forceinline__ uint64_t gpi_reserve(const Args& a, uint32_t n) {
  return atomicAdd(a.ptr<unsigned long long>(kGpiPi), static_cast<unsigned long long>(n));
}

// The count signal of expert x (this rank's tokens to it: `count`), once its writes are issued.
__device__ bool signal_expert(const Ctl& c, const Args& a, const uint64_t* lanes, QpState* states,
                              uint32_t x, uint32_t count, uint64_t& ci_shadow) {
  const uint32_t el = static_cast<uint32_t>(a[kExpertsLocal]);
  const uint32_t d = x / el, e = x % el;
  const uint64_t value = static_cast<uint64_t>(count) + 1;
  const uint64_t coff = a[kCounterOff];
  if (d == a[kRank]) {  // own expert: the slots were copied and fenced before
    uint8_t* word = reinterpret_cast<uint8_t*>(a.ptr<const uint64_t>(kSelfRecv)[e]) + coff;
    st_release_sys64(word, value);
    return true;
  }
  const uint32_t backend = static_cast<uint32_t>(a[kBackend]);
  if (backend == kGdaki || backend == kFreeFlow) {
    const int li = a.ptr<const int32_t>(kLaneOf)[x];
    const Lane l = lane_at(lanes, li);
    return post_wqe(c, a, lanes, states, li, true, l[kDstAddr] + coff,
                    a[kFetchNic] + 8ull * static_cast<uint64_t>(li), value);
  }
  gpi::Desc g{};
  g.op = gpi::kOpSignal;
  g.src_win = g.dst_win = g.sig_win = static_cast<uint8_t>(e);
  g.dst_rank = static_cast<uint16_t>(d);
  g.sig_off = coff;
  g.value = static_cast<int64_t>(value);
  return gpi_put(c, a, gpi_reserve(a, 1), g, ci_shadow);
}

// After this thread's write to expert x is issued: count it; the write that completes x's count
// posts x's signal (and resets the count for the next call).
__device__ bool count_write(const Ctl& c, const Args& a, const uint64_t* lanes, QpState* states,
                            uint32_t x, uint64_t& ci_shadow) {
  uint32_t* sent = a.ptr<uint32_t>(kSent);
  const uint32_t count = static_cast<uint32_t>(a.ptr<const int32_t>(kCount)[x]);
  fence_acq_rel_gpu();  // this write's reservation before the count (and the signal's after it)
  if (atomicAdd(sent + x, 1u) + 1 != count) return true;
  fence_acq_rel_gpu();
  sent[x] = 0;
  return signal_expert(c, a, lanes, states, x, count, ci_shadow);
}

}  // namespace

// ---- send ----------------------------------------------------------------------------------------
// Grid: the SM cap; block: a multiple of 32. gt: {earliest CTA start, latest CTA end} of this
// call by globaltimer (the launcher sets them to {~0, 0}).
extern "C" __global__ void moe_send(const uint64_t* args, const uint64_t* lanes, QpState* states,
                                    unsigned long long* gt, unsigned long long* status,
                                    const uint32_t* abort) {
  const Args a{args};
  const Ctl c{status, abort, a[kTimeoutNs]};
  if (threadIdx.x == 0) atomicMin(&gt[0], static_cast<unsigned long long>(globaltimer()));
  const uint32_t T = static_cast<uint32_t>(a[kTokens]);
  const uint32_t k = static_cast<uint32_t>(a[kTopk]);
  const uint32_t E = static_cast<uint32_t>(a[kExperts]);
  const uint32_t el = static_cast<uint32_t>(a[kExpertsLocal]);
  const uint32_t rank = static_cast<uint32_t>(a[kRank]);
  const uint32_t backend = static_cast<uint32_t>(a[kBackend]);
  const uint64_t sb = a[kSlotBytes];
  const int32_t* route = a.ptr<const int32_t>(kRoute);
  const int32_t* slot = a.ptr<const int32_t>(kSlot);
  const int32_t* count = a.ptr<const int32_t>(kCount);
  const int32_t* lane_of = a.ptr<const int32_t>(kLaneOf);
  const uint64_t* self_recv = a.ptr<const uint64_t>(kSelfRecv);
  const uint8_t* tokens = a.ptr<const uint8_t>(kTokensDev);
  uint8_t* staging = a.ptr<uint8_t>(kStagingDev);
  uint64_t ci_shadow = 0;
  bool ok = true;

  // Experts this rank sends nothing: their signal (value 1) at once.
  const uint32_t g = blockIdx.x * blockDim.x + threadIdx.x;
  for (uint32_t x = g; x < E && ok; x += gridDim.x * blockDim.x)
    if (count[x] == 0) ok = signal_expert(c, a, lanes, states, x, 0, ci_shadow);
  ok = !__syncthreads_or(!ok);  // one value in the block: warp 0 posts in lockstep below

  for (uint32_t t = blockIdx.x; t < T; t += gridDim.x) {
    const uint8_t* tok = tokens + t * sb;
    block_copy<false>(staging + t * sb, tok, sb);
    for (uint32_t j = 0; j < k; ++j) {
      const uint32_t x = static_cast<uint32_t>(route[t * k + j]);
      if (x / el == rank) {
        uint8_t* dst = reinterpret_cast<uint8_t*>(self_recv[x % el]);
        block_copy<false>(dst + static_cast<uint64_t>(slot[t * k + j]) * sb, tok, sb);
      }
    }
    __threadfence_system();  // staged bytes visible to the NIC before any thread posts them
    __syncthreads();
    if (threadIdx.x < 32 && ok) {
      const uint32_t j = threadIdx.x;
      const uint32_t x = j < k ? static_cast<uint32_t>(route[t * k + j]) : 0;
      const uint32_t d = x / el, e = x % el;
      const bool mine = j < k;
      const bool remote = mine && d != rank;
      const uint64_t dslot = mine ? static_cast<uint64_t>(slot[t * k + j]) : 0;
      const uint64_t laddr = a[kStagingNic] + t * sb;
      if (backend == kGdaki || backend == kFreeFlow) {
        if (remote) {
          const int li = lane_of[x];
          const Lane l = lane_at(lanes, li);
          ok = post_wqe(c, a, lanes, states, li, false, l[kDstAddr] + dslot * sb, laddr, 0);
        }
      } else {
        const unsigned rm = __ballot_sync(0xffffffffu, remote);
        const uint32_t leader = rm ? __ffs(rm) - 1 : 0;
        uint64_t i0 = 0;
        if (backend == kGpi) {
          if (remote && j == leader) i0 = gpi_reserve(a, __popc(rm));
          i0 = __shfl_sync(0xffffffffu, i0, leader);
          __syncwarp();  // the leader's reservation before any lane's count (count_write)
          if (remote) {
            gpi::Desc w{};
            w.op = gpi::kOpWrite;
            w.src_win = static_cast<uint8_t>(src_window(el));
            w.dst_win = w.sig_win = static_cast<uint8_t>(e);
            w.size = static_cast<uint32_t>(sb);
            w.dst_rank = static_cast<uint16_t>(d);
            w.src_off = t * sb;
            w.dst_off = dslot * sb;
            const unsigned below = rm & ((1u << j) - 1);
            ok = gpi_put(c, a, i0 + __popc(below), w, ci_shadow);
          }
        } else if (rm) {  // gpi-mc: lane 0 writes the token's fan-out, one per window group
          if (j == 0) {
            const uint32_t group = static_cast<uint32_t>(a[kFanGroup]);
            uint32_t left = rm;  // remote destinations not yet in a descriptor
            while (left && ok) {
              const uint32_t g = (static_cast<uint32_t>(route[t * k + __ffs(left) - 1]) % el) /
                                 group;
              gpi::Desc f{};
              f.op = gpi::kOpFanout;
              f.flags = gpi::kFlagNoSignal;
              f.src_win = static_cast<uint8_t>(src_window(el));
              f.dst_win = f.sig_win = static_cast<uint8_t>(fan_window(el, g));
              f.size = static_cast<uint32_t>(sb);
              f.stride = static_cast<uint32_t>(a[kFanStride]);
              f.src_off = t * sb;
              uint32_t n = 0;
              for (uint32_t i = 0; i < k; ++i) {
                const uint32_t xi = static_cast<uint32_t>(route[t * k + i]);
                if (!((left >> i) & 1) || (xi % el) / group != g) continue;
                left &= ~(1u << i);
                const uint64_t s = (xi % el - g * group) * a[kFanPitch] +
                                   static_cast<uint64_t>(slot[t * k + i]) * a[kFanToken];
                f.dest[n++] =
                    gpi::Dest{static_cast<uint8_t>(xi / el), static_cast<uint16_t>(s), 0};
              }
              f.k = static_cast<uint8_t>(n);
              ok = gpi_put(c, a, gpi_reserve(a, 1), f, ci_shadow);
            }
          }
          ok = __shfl_sync(0xffffffffu, ok, 0);
          __syncwarp();  // the fan-out's reservation before any lane's count (count_write)
        }
      }
      if (ok && mine) {
        if (!remote) fence_acq_rel_sys();  // the block's copy into the own slice came first
        ok = count_write(c, a, lanes, states, x, ci_shadow);
      }
    }
    if (__syncthreads_or(!ok)) break;
  }
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(&gt[1], static_cast<unsigned long long>(globaltimer()));
}

// ---- receive -------------------------------------------------------------------------------------
// CTA i = e * world + s (expert-major: local expert e, source s in rank order). words[i]: device
// address of the count word; slots[i]: of slot 0 of that landing slice; rows[i]: the first row
// of (e, s) in the expert-major buffer; room[i]: rows it may fill (the plan's count). received[i]
// gets the count read; more than room is copied up to room (the validation reports the count).
extern "C" __global__ void moe_recv(const uint64_t* words, const uint64_t* slots,
                                    const int64_t* rows, const int32_t* room, uint8_t* out,
                                    int32_t* received, uint64_t slot_bytes, uint64_t timeout_ns,
                                    unsigned long long* status, const uint32_t* abort) {
  const Ctl c{status, abort, timeout_ns};
  const uint32_t i = blockIdx.x;
  uint8_t* word = reinterpret_cast<uint8_t*>(words[i]);
  __shared__ uint64_t n;
  if (threadIdx.x == 0) {
    Wait w(c);
    uint64_t v;
    bool ok = true;
    while ((v = ld_acquire_sys64(word)) == 0)
      if (!w.tick(static_cast<int>(i), nullptr, nullptr, 0, 1)) {
        ok = false;
        break;
      }
    const uint64_t got = ok ? v - 1 : 0;
    received[i] = ok ? static_cast<int32_t>(got) : -1;
    const uint64_t cap = static_cast<uint64_t>(room[i] > 0 ? room[i] : 0);
    n = got < cap ? got : cap;
  }
  __syncthreads();
  block_copy<true>(out + static_cast<uint64_t>(rows[i]) * slot_bytes,
                   reinterpret_cast<const uint8_t*>(slots[i]), n * slot_bytes);
  __syncthreads();
  if (threadIdx.x == 0 && received[i] >= 0) st_volatile64(word, 0);  // ready for the next call
}

// ---- delay ---------------------------------------------------------------------------------------
// One thread spins `ns` of globaltimer (the work a real model overlaps with the dispatch);
// out[0] = how long it spun.
extern "C" __global__ void moe_delay(uint64_t ns, int64_t* out) {
  const uint64_t t0 = globaltimer();
  uint64_t t = t0;
  while (t - t0 < ns) t = globaltimer();
  out[0] = static_cast<int64_t>(t - t0);
}

// ---- drain ---------------------------------------------------------------------------------------
// One thread per lane after the last iteration: everything reserved is retired (the last WQE of
// every lane is its signaled count signal).
extern "C" __global__ void moe_drain(const uint64_t* lanes, int nlanes, QpState* states,
                                     uint64_t timeout_ns, unsigned long long* status,
                                     const uint32_t* abort) {
  const Ctl c{status, abort, timeout_ns};
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= nlanes) return;
  const Lane l = lane_at(lanes, i);
  QpState* s = state_of(states, l);
  uint64_t reaped = 0;
  wait_retired(c, i, l, s, ld_volatile32(&s->resv), reaped);
}
