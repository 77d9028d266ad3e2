// mini-proxy's GPU producers (CuPy RawModule; app/submit/proxy/gpu.py launches them): the two
// handoff protocols of the paper (arXiv 2610.01380, §4.2) writing descriptors into host rings
// mapped into the GPU.
// - baseline: a device atomic reserves the ring index, every publish reads the worker's progress
//   from host memory (a PCIe read), word1 is stored and word0 published with a system-scope
//   release store;
// - tuned: one producer per ring, progress cached and re-read only when the ring looks full, one
//   16-byte store of both words (validity is the sequence encoded in them).
// Every spin loop gives up at a deadline (globaltimer) or when the host sets the abort bit in
// ring 0's control word, and says why in `status`.
typedef unsigned long long u64;
typedef long long i64;
// The ring layout is the native module's (proxy/src/proxy_ring.hpp, exported as
// gicbench._native.proxy): the loader defines it (app/submit/proxy/gpu_kernels.py, options()).
#if !defined(HEAD_OFF) || !defined(COMPLETED_OFF) || !defined(CONTROL_OFF) || \
    !defined(HEADER_BYTES) || !defined(MAX_LENGTH)
#error "define HEAD_OFF, COMPLETED_OFF, CONTROL_OFF, HEADER_BYTES and MAX_LENGTH (gpu_kernels.py)"
#endif
#define CTL_STOP 1ULL
#define CTL_ABORT 2ULL
// status codes (per block): 0 ok, 1 timeout, 2 aborted by the host
#define ST_OK 0
#define ST_TIMEOUT 1
#define ST_ABORT 2

// Every PTX instruction of the producers is in these five helpers, so a CPU build of this
// source (tests/proxy_gpu_cpu.py: PX_CPU, the helpers over host atomics) runs the same kernels
// against a real engine and checks what they make land.
#ifndef PX_CPU
__device__ __forceinline__ u64 ld_sys(const u64* p) {
  u64 v;
  asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ u64 gtime() {
  u64 t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void st_word(u64* p, u64 v) {
  asm volatile("st.volatile.global.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void st_release_sys(u64* p, u64 v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}
// One 16-byte store of both descriptor words (tuned).
__device__ __forceinline__ void st_pair(u64* p, u64 w0, u64 w1) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" :: "l"(p), "l"(w0), "l"(w1)
               : "memory");
}
#endif
__device__ __forceinline__ u64* word(unsigned char* ring, int off) {
  return reinterpret_cast<u64*>(ring + off);
}

struct Waiter {
  u64 deadline;
  const u64* control;
  int status;
  __device__ bool ok() {
    if (ld_sys(control) & CTL_ABORT) { status = ST_ABORT; return false; }
    if (gtime() > deadline) { status = ST_TIMEOUT; return false; }
    return true;
  }
};

struct Producer {
  u64 next;    // tuned: the ring's next index (one producer per ring)
  u64 cached;  // tuned: the worker's progress as last read
};

// One descriptor on `ring` of `len` bytes through `lane`, at offset offset_of(index) of the
// lane's regions (the index is known once the handoff gave it).
template <class Offset>
__device__ bool publish(unsigned char* ring, u64* reserve, int handoff, Producer& p,
                        unsigned depth, unsigned lane, unsigned len, Offset offset_of, Waiter& w,
                        u64& idx) {
  const u64* head = word(ring, HEAD_OFF);
  if (handoff == 0) {
    idx = atomicAdd(reserve, 1ULL);
    while (idx - ld_sys(head) >= depth)
      if (!w.ok()) return false;
  } else {
    idx = p.next++;
    while (idx - p.cached >= depth) {
      p.cached = ld_sys(head);
      if (idx - p.cached < depth) break;
      if (!w.ok()) return false;
    }
  }
  const u64 s = idx + 1;
  const u64 w0 = (s & 0xffffffffULL) | ((u64)lane << 32);
  const u64 w1 = offset_of(idx) | (((u64)len & MAX_LENGTH) << 32) | ((s & 0x7ffULL) << 53);
  u64* slot = reinterpret_cast<u64*>(ring + HEADER_BYTES + (idx & (depth - 1)) * 16);
  if (handoff == 0) {
    st_word(slot + 1, w1);
    st_release_sys(slot, w0);
  } else {
    st_pair(slot, w0, w1);
  }
  return true;
}

// One descriptor on `ring`: slot (slot0 + index mod slots) of `len` bytes, through `lane`.
__device__ bool enqueue(unsigned char* ring, u64* reserve, int handoff, Producer& p,
                        unsigned depth, unsigned lane, unsigned slot0, u64 slots, unsigned len,
                        Waiter& w, u64& idx) {
  auto offset_of = [=](u64 i) { return ((u64)slot0 + i % slots) * len; };
  return publish(ring, reserve, handoff, p, depth, lane, len, offset_of, w, idx);
}

// A producer block's timing, as the host producers' rate loop times itself (proxy_host.cpp
// `stream`), in globaltimer nanoseconds (one clock for every SM): after `warmup` descriptors the
// block's timed region starts (t_start); each `window` descriptors after it close a window
// (out[0 .. max_windows)) while descriptors remain; the last window stays open (t_open) until
// the drain, which the host closes at the latest t_end of all blocks.
struct Windows {
  u64 warmup, total, window, next_window, t_window;
  unsigned nw, max_windows;
  i64* out;
  u64* t_start;
  __device__ Windows(u64 warmup_, u64 total_, u64 window_, unsigned max_windows_, i64* out_,
                     u64* t_start_)
      : warmup(warmup_), total(total_), window(window_), next_window(warmup_ + window_),
        t_window(warmup_ == 0 ? gtime() : 0), nw(0), max_windows(max_windows_), out(out_),
        t_start(t_start_) {
    *t_start = t_window;
  }
  // After the n-th descriptor was published.
  __device__ void posted(u64 n) {
    if (n == warmup) *t_start = t_window = gtime();
    if (n >= next_window && next_window < total) {
      const u64 t1 = gtime();
      while (n >= next_window && next_window < total) {
        if (nw < max_windows) out[nw++] = (i64)(t1 - t_window);
        t_window = t1;
        next_window += window;
      }
    }
  }
};

__device__ bool wait_completed(unsigned char* ring, u64 count, Waiter& w) {
  const u64* done = word(ring, COMPLETED_OFF);
  while (ld_sys(done) < count)
    if (!w.ok()) return false;
  return true;
}

extern "C" {

// SM clock: clock64 against globaltimer over ~`ns` nanoseconds (out: cycles, ns).
__global__ void px_clock(i64 ns, i64* out) {
  const u64 g0 = gtime();
  const i64 c0 = clock64();
  while (gtime() - g0 < (u64)ns) {}
  out[0] = clock64() - c0;
  out[1] = (i64)(gtime() - g0);
}

// One thread: `warmup + iters` operations on ring 0 (its lane, slot 0). mode 0: the enqueue is
// timed (completion waited untimed); mode 1: enqueue until the ring's counter shows it.
// Each operation first stamps its sequence into the source's last word (`src_word`), as the
// host producers do, so the landing says which write arrived last (single-op validates it).
// --scope all: mode 1 also reads the counters of the `nothers` rings of the other configured
// QPs (given nothing, one read each), as the host producers' quiet does.
// Samples are clock64 cycles.
__global__ void px_latency(unsigned char* ring, u64* reserve, int handoff, unsigned depth,
                           unsigned lane, unsigned len, int mode, u64* src_word,
                           unsigned char* const* others, unsigned nothers, unsigned iters,
                           unsigned warmup, i64 timeout_ns, const u64* control, i64* out,
                           int* status, u64* where) {
  Waiter w{gtime() + (u64)timeout_ns, control, ST_OK};
  Producer p{0, 0};
  for (unsigned i = 0; i < warmup + iters; ++i) {
    w.deadline = gtime() + (u64)timeout_ns;
    u64 idx = 0;
    st_word(src_word, (u64)i + 1);
    // The worker reads the payload when it takes the descriptor (see px_probe): tuned's plain
    // 16-byte publish does not order the stamp before it, so tuned fences (outside the timing).
    if (handoff != 0) __threadfence_system();
    const i64 t0 = clock64();
    bool ok = enqueue(ring, reserve, handoff, p, depth, lane, 0, 1, len, w, idx);
    i64 t1 = clock64();
    if (ok) ok = wait_completed(ring, idx + 1, w);
    for (unsigned r = 0; ok && mode == 1 && r < nothers; ++r) ok = wait_completed(others[r], 0, w);
    if (mode == 1) t1 = clock64();
    if (!ok) { status[0] = w.status; where[0] = i; return; }
    if (i >= warmup) out[i - warmup] = t1 - t0;
  }
  status[0] = ST_OK;
}

// Block b (thread 0) is producer b: rings b, b+P, ... when P <= R, else ring b mod R; its k-th
// descriptor goes to ring mine[k mod n], slot (index mod slots[ring]) of lanes[ring]. Timed by
// Windows (windows[b * max_windows + i], nwin[b] of them); the drain: the block waits until
// each of its rings' counters reach what every producer gave it (`given`), and t_end[b] is
// when it saw that.
__global__ void px_rate(unsigned char** rings, u64* reserve, int handoff, unsigned nrings,
                        unsigned depth, const unsigned* lanes, const u64* slots, unsigned len,
                        u64 warmup, u64 messages, u64 window, const u64* given,
                        unsigned max_windows, i64 timeout_ns, const u64* control, u64* sent,
                        int* status, u64* t_start, u64* t_open, u64* t_end, i64* windows,
                        unsigned* nwin) {
  if (threadIdx.x != 0) return;
  const unsigned P = gridDim.x, b = blockIdx.x;
  Producer prod[32];
  for (int i = 0; i < 32; ++i) prod[i] = Producer{0, 0};
  unsigned mine[32];
  unsigned n = 0;
  if (P <= nrings) {
    for (unsigned r = b; r < nrings; r += P) mine[n++] = r;
  } else {
    mine[n++] = b % nrings;
  }
  Waiter w{0, control, ST_OK};
  const u64 total = warmup + messages;
  Windows win(warmup, total, window, max_windows, windows + (u64)b * max_windows, t_start + b);
  u64 k = 0;
  for (; k < total; ++k) {
    w.deadline = gtime() + (u64)timeout_ns;
    const unsigned j = (unsigned)(k % n), r = mine[j];
    u64 idx;
    if (!enqueue(rings[r], reserve + r, handoff, prod[j], depth, lanes[r], 0, slots[r], len, w,
                 idx))
      break;
    win.posted(k + 1);
  }
  sent[b] = k;
  nwin[b] = win.nw;
  t_open[b] = win.t_window;
  if (k != total) { status[b] = w.status; return; }
  for (unsigned j = 0; j < n; ++j) {  // the drain (timed, as the host loop's)
    w.deadline = gtime() + (u64)timeout_ns;
    if (!wait_completed(rings[mine[j]], given[mine[j]], w)) { status[b] = w.status; return; }
  }
  t_end[b] = gtime();
  status[b] = ST_OK;
}

// Active connections: block u (thread 0) is unit u on ring u, cycling its lanes
// lanes[first[u] .. first[u+1]) (slots[i]: lane i's slots of `len` bytes). Its k-th write is
// on visit v = k div W, lane j = v mod n, that lane's ((v div n) W + k mod W)-th write, to slot
// (that mod slots[j]): the host producers' rule (proxy_host.cpp `cycle`). `warmup` and
// `messages` count writes. Timed by Windows; the drain waits for ring u's counter.
__global__ void px_cycle(unsigned char** rings, u64* reserve, int handoff, unsigned depth,
                         const unsigned* lanes, const u64* slots, const unsigned* first,
                         unsigned len, u64 writes_per_visit, u64 warmup, u64 messages,
                         u64 window, unsigned max_windows, i64 timeout_ns, const u64* control,
                         u64* sent, int* status, u64* t_start, u64* t_open, u64* t_end,
                         i64* windows, unsigned* nwin) {
  if (threadIdx.x != 0) return;
  const unsigned u = blockIdx.x;
  const unsigned lo = first[u], n = first[u + 1] - lo;
  const u64 W = writes_per_visit;
  Producer prod{0, 0};
  Waiter w{0, control, ST_OK};
  const u64 total = warmup + messages;
  Windows win(warmup, total, window, max_windows, windows + (u64)u * max_windows, t_start + u);
  // write k of the unit: visit v = k div W (its lane pos = v mod n, lap = v div n), write jv =
  // k mod W of the visit; counted, not divided, per write
  u64 k = 0, lap = 0, jv = 0;
  unsigned pos = 0;
  for (; k < total; ++k) {
    w.deadline = gtime() + (u64)timeout_ns;
    const unsigned j = lo + pos;
    const u64 off = ((lap * W + jv) % slots[j]) * len;
    u64 idx;
    if (!publish(rings[u], reserve + u, handoff, prod, depth, lanes[j], len,
                 [=](u64) { return off; }, w, idx))
      break;
    win.posted(k + 1);
    if (++jv == W) {
      jv = 0;
      if (++pos == n) {
        pos = 0;
        ++lap;
      }
    }
  }
  sent[u] = k;
  nwin[u] = win.nw;
  t_open[u] = win.t_window;
  if (k != total) { status[u] = w.status; return; }
  w.deadline = gtime() + (u64)timeout_ns;
  if (!wait_completed(rings[u], total, w)) { status[u] = w.status; return; }
  t_end[u] = gtime();
  status[u] = ST_OK;
}

// Background: block b loads rings first + (b, b+P, ...) (or first + b mod n) with descriptors
// to slots 1.. of each ring's lane until the host sets the stop bit; paced to `per_block_ns`
// nanoseconds per descriptor when non-zero.
__global__ void px_background(unsigned char** rings, u64* reserve, int handoff, unsigned first,
                              unsigned nrings, unsigned depth, const unsigned* lanes,
                              const u64* slots, unsigned len, double per_block_ns,
                              i64 timeout_ns, const u64* control, u64* sent, int* status) {
  if (threadIdx.x != 0) return;
  const unsigned P = gridDim.x, b = blockIdx.x, avail = nrings - first;
  Producer prod[32];
  for (int i = 0; i < 32; ++i) prod[i] = Producer{0, 0};
  unsigned mine[32];
  unsigned n = 0;
  if (P <= avail) {
    for (unsigned r = first + b; r < nrings; r += P) mine[n++] = r;
  } else {
    mine[n++] = first + b % avail;
  }
  Waiter w{0, control, ST_OK};
  const u64 g0 = gtime();
  u64 k = 0;
  status[b] = ST_OK;
  // The host's stop/abort word is read every 64 descriptors (a PCIe read each), and by every
  // wait; reading it per descriptor would add a PCIe read to each enqueue.
  for (;;) {
    if ((k & 63) == 0 && (ld_sys(control) & (CTL_STOP | CTL_ABORT))) break;
    if (per_block_ns > 0 && (double)(gtime() - g0) < (double)k * per_block_ns) continue;
    w.deadline = gtime() + (u64)timeout_ns;
    const unsigned j = (unsigned)(k % n), r = mine[j];
    u64 idx;
    if (!enqueue(rings[r], reserve + r, handoff, prod[j], depth, lanes[r], 1, slots[r] - 1, len,
                 w, idx)) {
      if (!(ld_sys(control) & CTL_STOP)) status[b] = w.status;
      break;
    }
    ++k;
    sent[b * 32 + j] += 1;
  }
}

// The probe's round trip on ring 0 (shared with the background's device reservation counter
// when the queue is shared): stamp the sequence into the source word, enqueue, wait for the
// reply word; responder = 1 answers instead (wait, stamp, enqueue). Samples in cycles.
__global__ void px_probe(unsigned char* ring, u64* reserve, int handoff, unsigned depth,
                         unsigned lane, unsigned len, int responder, u64* src_word,
                         const u64* reply_word, unsigned iters, unsigned warmup,
                         i64 timeout_ns, const u64* control, i64* out, int* status,
                         u64* where) {
  Waiter w{0, control, ST_OK};
  Producer p{0, 0};
  for (unsigned i = 0; i < warmup + iters; ++i) {
    w.deadline = gtime() + (u64)timeout_ns;
    const u64 seq = i + 1;
    u64 idx = 0;
    bool ok = true;
    i64 t0 = 0, t1 = 0;
    if (responder) {
      while (ok && ld_sys(reply_word) != seq) ok = w.ok();
    }
    if (ok) {
      st_word(src_word, seq);
      // The worker copies the payload when it takes the descriptor: the payload's store must be
      // visible to the CPU first. baseline's system-scope release orders it; tuned's plain
      // 16-byte store does not, so tuned fences here (before t0: not part of the enqueue).
      if (handoff != 0) __threadfence_system();
      t0 = clock64();
      ok = enqueue(ring, reserve, handoff, p, depth, lane, 0, 1, len, w, idx);
    }
    if (ok && !responder) {
      while (ok && ld_sys(reply_word) != seq) ok = w.ok();
      t1 = clock64();
    }
    if (ok) ok = wait_completed(ring, idx + 1, w);
    if (!ok) { status[0] = w.status; where[0] = i; return; }
    if (!responder && i >= warmup) out[i - warmup] = t1 - t0;
  }
  status[0] = ST_OK;
}

}  // extern "C"
