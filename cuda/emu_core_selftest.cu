// Self-test of cuda/emu_core.cuh as a CUDA engine instantiates it: an environment over one flat
// buffer (the loopback responder is this QP's own memory) with device atomics on the GPU and GCC
// builtins on the host, and a scenario that posts WQEs with mlx5.cuh, rings with IBGDA's and
// rdma-core's conventions and lets the core execute them. The same scenario runs in a kernel
// (emu_core_selftest) and on the CPU (tests/conformance/c/emu_core_host.cu); the results are
// checked by tests/conformance/test_emu_core_cuda.py.
//
// Buffer layout (kBufBytes, zeroed by the caller); results: kNumOut 64-bit words at `out`.
#include "emu_core.cuh"

#if defined(__CUDACC__)
#include <cuda/atomic>
#endif

namespace gicbench {
namespace core_selftest {

namespace m5 = gicbench::mlx5;
namespace ec = gicbench::emu_core;

constexpr uint32_t kSqWqebbs = 16;
constexpr uint32_t kSqOff = 0, kDbrecOff = 1024, kCqOff = 2048, kCqCiOff = 2304, kNcqe = 8;
constexpr uint32_t kSrcOff = 4096, kDstOff = 8192, kResOff = 12288;
constexpr uint32_t kBufBytes = 16384;
constexpr uint32_t kQpn = 0x000101, kKey = 0x0155, kPd = 3;
constexpr uint32_t kNumOut = 16;
// Output words
enum Out : uint32_t {
  kOutExecuted,   // WQEs executed
  kOutErrors,     // WQEs failed
  kOutFlushed,
  kOutDoorbells,
  kOutStale,
  kOutLag,
  kOutCqPi,       // CQEs written
  kOutState,      // final QP state
  kOutCi,         // final consumer index
  kOutBytes,
  kOutGpiCi,      // GPI: descriptors consumed
  kOutGpiErrors,  // GPI: descriptors that failed
  kOutGpiTorn,    // GPI: torn waits
  kOutGpiWrites,  // GPI: RDMA writes realized
  kOutGpiSignals,
  kOutReuse,      // reuse_scenario: executed | stale << 8 | CQEs << 16
};
static_assert(kOutReuse < kNumOut, "output words");
// GPI queue: control block (2 counters) and a ring of 4 descriptors; its writes land from
// kDstOff + kGpiDst, its signal words at kDstOff + kGpiSig.
constexpr uint32_t kGpiCtlOff = 2560, kGpiRingOff = 3072, kGpiDepthLog = 2;
constexpr uint32_t kGpiDst = 256, kGpiSig = 512;

struct Env {
  uint8_t* mem;
  uint64_t* out;
  uint32_t state = ec::kRts;
  uint32_t cq_status = 0, cq_pi = 0, cq_dropped = 0;
  bool reuse = false;  // reuse_scenario: every CQE frees the next slot, which is then zeroed
  struct Resp {
    int unused;
  };

  GB_HD uint32_t ld_acq32(const uint32_t* p) const {
#if defined(__CUDA_ARCH__)
    return cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*const_cast<uint32_t*>(p))
        .load(cuda::memory_order_acquire);
#else
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
  }
  GB_HD void st_rel32(uint32_t* p, uint32_t v) const {
#if defined(__CUDA_ARCH__)
    cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*p).store(v, cuda::memory_order_release);
#else
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
#endif
  }
  GB_HD void st_rel8(uint8_t* p, uint8_t v) const {
#if defined(__CUDA_ARCH__)
    __threadfence_system();
    *reinterpret_cast<volatile uint8_t*>(p) = v;
#else
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
#endif
  }
  GB_HD uint64_t fetch_add64(uint64_t* p, uint64_t v) const {
#if defined(__CUDA_ARCH__)
    return atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
#else
    return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL);
#endif
  }
  GB_HD uint64_t cas64(uint64_t* p, uint64_t expected, uint64_t desired) const {
#if defined(__CUDA_ARCH__)
    return atomicCAS(reinterpret_cast<unsigned long long*>(p), expected, desired);
#else
    __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    return expected;
#endif
  }
  GB_HD uint32_t cas32(uint32_t* p, uint32_t expected, uint32_t desired) const {
#if defined(__CUDA_ARCH__)
    return atomicCAS(reinterpret_cast<unsigned int*>(p), expected, desired);
#else
    __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    return expected;
#endif
  }
  GB_HD void copy(uint8_t* dst, const uint8_t* src, uint32_t n) const {
    for (uint32_t i = 0; i < n; ++i) dst[i] = src[i];
  }
  GB_HD uint32_t qp_state() const { return state; }
  GB_HD void qp_to_error() { state = ec::kErr; }
  GB_HD bool responder(const uint8_t*, Resp&) const { return true; }  // loopback RC
  // One MR: the whole buffer from kSrcOff, key kKey, pd kPd, every access.
  GB_HD uint8_t* translate(uint32_t key, uint64_t addr, uint64_t len, uint32_t pd) const {
    const uint64_t lo = reinterpret_cast<uint64_t>(mem + kSrcOff);
    const uint64_t hi = reinterpret_cast<uint64_t>(mem + kBufBytes);
    if (key != kKey || pd != kPd || addr < lo || addr + len > hi) return nullptr;
    return reinterpret_cast<uint8_t*>(addr);
  }
  GB_HD uint8_t* local(uint32_t key, uint64_t addr, uint64_t len, uint32_t, uint32_t pd) const {
    return translate(key, addr, len, pd);
  }
  GB_HD uint8_t* remote(const Resp&, uint32_t key, uint64_t addr, uint64_t len, uint32_t) const {
    return translate(key, addr, len, kPd);
  }
  GB_HD bool recv_begin(const Resp&, ec::RecvSlot&) const { return false; }  // no RQ
  GB_HD void recv_end(const Resp&, const ec::RecvSlot&, uint8_t, uint8_t, uint32_t,
                      uint32_t) const {}
  GB_HD ec::CqRef cq() {
    return ec::CqRef{mem + kCqOff, reinterpret_cast<const uint32_t*>(mem + kCqCiOff), &cq_status,
                     &cq_pi, &cq_dropped, kNcqe, ec::kCqOverrunIgnore};
  }
  GB_HD void req_cqe(uint8_t op, uint16_t idx, uint32_t bytes) {
    if (reuse) {
      uint8_t* next = mem + kSqOff + ((idx + 1u) % kSqWqebbs) * 64u;
      for (uint32_t i = 0; i < 64; ++i) next[i] = 0;
    }
    ec::write_cqe(*this, cq(), [&](uint8_t* b, uint8_t owner) {
      return m5::fill_req_cqe(b, kQpn, op, idx, bytes, 0, owner);
    });
  }
  GB_HD void err_cqe(uint8_t synd, uint8_t vendor, uint8_t op, uint16_t idx, bool) {
    ec::write_cqe(*this, cq(), [&](uint8_t* b, uint8_t owner) {
      return m5::fill_err_cqe(b, m5::kCqeReqErr, synd, vendor, kQpn, op, idx, owner);
    });
  }
  GB_HD void event(ec::Event ev, uint32_t expected, uint32_t) {
    switch (ev) {
      case ec::kEvExecuted:
        ++out[kOutExecuted];
        out[kOutBytes] += expected;
        break;
      case ec::kEvError: ++out[kOutErrors]; break;
      case ec::kEvFlushed: ++out[kOutFlushed]; break;
      case ec::kEvDoorbell: ++out[kOutDoorbells]; break;
      case ec::kEvStale: ++out[kOutStale]; break;
      case ec::kEvDbrecLag: ++out[kOutLag]; break;
      default: break;
    }
  }
};

// The environment of gpi_serve over the same buffer: one rank (0), three windows (0 the source,
// 1 the GPI destinations, 2 the signal words), all under kKey in pd kPd.
struct GEnv {
  uint8_t* mem;
  uint64_t* out;
  GB_HD uint64_t ld_acq64(const uint64_t* p) const {
#if defined(__CUDA_ARCH__)
    return cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(*const_cast<uint64_t*>(p))
        .load(cuda::memory_order_acquire);
#else
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
  }
  GB_HD void st_rel64(uint64_t* p, uint64_t v) const {
#if defined(__CUDA_ARCH__)
    cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(*p).store(v, cuda::memory_order_release);
#else
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
#endif
  }
  GB_HD uint64_t fetch_add64(uint64_t* p, uint64_t v) const {
    return Env{mem, out}.fetch_add64(p, v);
  }
  GB_HD uint64_t cas64(uint64_t* p, uint64_t e, uint64_t d) const {
    return Env{mem, out}.cas64(p, e, d);
  }
  GB_HD uint32_t cas32(uint32_t* p, uint32_t e, uint32_t d) const {
    return Env{mem, out}.cas32(p, e, d);
  }
  GB_HD void copy(uint8_t* dst, const uint8_t* src, uint32_t n) const {
    for (uint32_t i = 0; i < n; ++i) dst[i] = src[i];
  }
  GB_HD uint32_t self_rank() const { return 0; }
  GB_HD bool reachable(uint32_t rank) const { return rank == 0; }
  GB_HD bool window(uint32_t handle, uint32_t rank, ec::GpiWindow& w) const {
    const uint64_t base = reinterpret_cast<uint64_t>(mem);
    if (rank != 0 || handle > 2) return false;
    const uint64_t at[3] = {base + kSrcOff, base + kDstOff + kGpiDst, base + kDstOff + kGpiSig};
    w = ec::GpiWindow{at[handle], 256, kKey};
    return true;
  }
  GB_HD uint8_t* local(uint32_t key, uint64_t addr, uint64_t len) const {
    return Env{mem, out}.translate(key, addr, len, kPd);
  }
  GB_HD uint8_t* remote(uint32_t, uint32_t key, uint64_t addr, uint64_t len, uint32_t) const {
    return Env{mem, out}.translate(key, addr, len, kPd);
  }
  GB_HD void gpi_event(ec::GpiEvent ev, uint64_t a, uint64_t b, uint64_t) {
    switch (ev) {
      case ec::kGpiDone:
        out[kOutGpiWrites] += a;
        out[kOutGpiSignals] += b;
        break;
      case ec::kGpiTorn: ++out[kOutGpiTorn]; break;
      case ec::kGpiError: ++out[kOutGpiErrors]; break;
    }
  }
};

// GPI (expected results in tests/conformance/test_emu_core_cuda.py): descriptor 0, a write of 8
// source bytes with a signal add of 5, posted torn (segments 0..5), is not executed until its last
// two segments land; descriptor 1 fans 4 source bytes out to slots 1 and 3 (stride 16) with a
// signal each; descriptor 2 names window 7 (not in the table): an error on it, counter 1 flagged.
GB_HD void gpi_scenario(uint8_t* mem, uint64_t* out) {
  GEnv env{mem, out};
  uint64_t* ring = reinterpret_cast<uint64_t*>(mem + kGpiRingOff);
  const ec::GpiParams q{ring, kGpiDepthLog, mem + kGpiCtlOff, 2, 3};
  ec::GpiState st;
  gicbench::gpi::Desc d{};
  d.op = gicbench::gpi::kOpWriteSignal;
  d.counter = 0;
  d.src_win = 0;
  d.dst_win = 1;
  d.sig_win = 2;
  d.size = 8;
  d.src_off = 16;
  d.dst_off = 0;
  d.sig_off = 8;
  d.value = 5;
  uint64_t w[8];
  gicbench::gpi::encode(d, gicbench::gpi::owner_for(0, kGpiDepthLog), w);
  for (uint32_t i = 0; i < 6; ++i) ring[i] = w[i];
  ec::gpi_serve(env, st, q);  // torn: waits
  ec::gpi_serve(env, st, q);  // still torn: counted once
  ring[6] = w[6];
  ring[7] = w[7];
  gicbench::gpi::Desc f{};
  f.op = gicbench::gpi::kOpFanout;
  f.counter = 1;
  f.dst_win = 1;
  f.sig_win = 2;
  f.k = 2;
  f.size = 4;
  f.src_off = 32;
  f.stride = 16;
  f.value = -1;
  f.sig_base = 2;
  f.dest[0] = gicbench::gpi::Dest{0, 1, 0};
  f.dest[1] = gicbench::gpi::Dest{0, 3, 1};
  gicbench::gpi::encode(f, gicbench::gpi::owner_for(1, kGpiDepthLog), ring + 8);
  f.dst_win = 7;  // no such window
  gicbench::gpi::encode(f, gicbench::gpi::owner_for(2, kGpiDepthLog), ring + 16);
  ec::gpi_serve(env, st, q);
  out[kOutGpiCi] = st.ci;
}

// Posting code that reuses slot i + 1 as soon as the CQE of WQE i lands (DOCA's collapsed-CQ
// slot wait frees one slot early): two signaled inline writes under one doorbell, every CQE
// zeroing the next slot. A NIC has read WQE 1 before it completes WQE 0, so both execute.
GB_HD void reuse_scenario(uint8_t* mem, uint64_t* out) {
  uint64_t o[kNumOut] = {};
  Env env{mem, o};
  env.reuse = true;
  for (uint32_t i = 0; i < kNcqe; ++i) m5::cqe_init(mem + kCqOff + i * m5::kCqeBytes);
  for (uint32_t i = 0; i < 8; ++i) mem[kSrcOff + i] = static_cast<uint8_t>(0xa0 + i);
  const m5::SqRing ring{mem + kSqOff, kSqWqebbs};
  const ec::SqParams q{ring, kQpn, 0, 0, kPd, false,
                       reinterpret_cast<const uint32_t*>(mem + kDbrecOff) + m5::kSndDbr};
  ec::SqState st;
  const uint64_t dst = reinterpret_cast<uint64_t>(mem) + kDstOff + 896;
  uint32_t pi = 0;
  pi += m5::build_rdma_write(ring, pi, kQpn, dst, kKey, mem + kSrcOff, 4, 0, 0, m5::kCqUpdate,
                             false, 0);
  const uint32_t last = pi;
  pi += m5::build_rdma_write(ring, pi, kQpn, dst + 4, kKey, mem + kSrcOff + 4, 4, 0, 0,
                             m5::kCqUpdate, false, 0);
  reinterpret_cast<uint32_t*>(mem + kDbrecOff)[m5::kSndDbr] = m5::dbrec_value(pi);
  ec::on_doorbell(env, st, q, m5::doorbell_value(ring.wqe(last)));
  out[kOutReuse] = o[kOutExecuted] | (o[kOutStale] << 8) | (uint64_t{env.cq_pi} << 16);
}

// Post, record, ring, serve. Expected results (tests/conformance/test_emu_core_cuda.py):
// dst[0..8) = src[0..8), dst[8..16) = src[32..40) (gather), 8 B at res = 7 (old value), the word
// at kDstOff+64 = 7 + 5; a 4-byte masked fetch-add of 0x01010101 with byte fields on 0x01ff7f00
// at kDstOff+80 (0x02008001, old value at res+8) and an 8-byte masked compare-and-swap at
// kDstOff+88 (0x1111222233334444 -> 0x11112222aaaa4444, old value at res+16); CQEs: WQE 1
// (write), 5 (fetch-add, retiring the unsignaled masked ones at 2 and 3), then an error CQE (bad
// rkey) at 6 and a flush at 7.
GB_HD void scenario(uint8_t* mem, uint64_t* out) {
  reuse_scenario(mem, out);  // first: the main scenario below rewrites the SQ and the CQ
  Env env{mem, out};
  for (uint32_t i = 0; i < 256; ++i) mem[kSrcOff + i] = static_cast<uint8_t>(i);
  *reinterpret_cast<uint64_t*>(mem + kDstOff + 64) = 7;
  *reinterpret_cast<uint32_t*>(mem + kDstOff + 80) = 0x01ff7f00u;
  *reinterpret_cast<uint64_t*>(mem + kDstOff + 88) = 0x1111222233334444ull;
  for (uint32_t i = 0; i < kNcqe; ++i) m5::cqe_init(mem + kCqOff + i * m5::kCqeBytes);
  const m5::SqRing ring{mem + kSqOff, kSqWqebbs};
  const ec::SqParams q{ring, kQpn, 0, 0, kPd, false,
                       reinterpret_cast<const uint32_t*>(mem + kDbrecOff) + m5::kSndDbr};
  ec::SqState st;
  const uint64_t base = reinterpret_cast<uint64_t>(mem);
  // 1. an unsignaled inline write, then a signaled gather write (two pointer segments); IBGDA's
  //    doorbell: the record, then the next producer index with opcode 0 and ds 0.
  uint32_t pi = 0;
  pi += m5::build_rdma_write(ring, pi, kQpn, base + kDstOff, kKey, mem + kSrcOff, 4, 0, 0, 0,
                             false, 0);
  {
    const uint32_t idx = pi;
    m5::set_raddr_seg(ring.seg(idx, 1), base + kDstOff + 4, kKey);
    m5::set_data_seg(ring.seg(idx, 2), 4, kKey, base + kSrcOff + 4);
    m5::set_data_seg(ring.seg(idx, 3), 8, kKey, base + kSrcOff + 32);
    m5::set_ctrl_seg(ring.wqe(idx), static_cast<uint16_t>(idx), m5::kOpRdmaWrite, 0, kQpn,
                     m5::kCqUpdate, 4, 0, 0);
    pi += 1;
  }
  reinterpret_cast<uint32_t*>(mem + kDbrecOff)[m5::kSndDbr] = m5::dbrec_value(pi);
  uint8_t ctrl[16] = {};
  m5::set_ctrl_seg(ctrl, static_cast<uint16_t>(pi), 0, 0, kQpn, 0, 0, 0, 0);
  ec::on_doorbell(env, st, q, m5::doorbell_value(ctrl));
  // 2. two unsignaled extended atomics (a 4-byte masked fetch-add with byte-wide fields, an
  //    8-byte masked compare-and-swap of two segments), then a fetch-add; rdma-core's doorbell
  //    (the ctrl of the last WQE)
  pi += m5::build_masked_fetch_add(ring, pi, kQpn, base + kDstOff + 80, kKey, 4, 0x01010101u,
                                   0x80808080u, kKey, base + kResOff + 8, 0);
  pi += m5::build_masked_cmp_swap(ring, pi, kQpn, base + kDstOff + 88, kKey, 8, 0xaaaa0000u,
                                  0x1111000000000000ull, 0xffff0000u, 0xffff000000000000ull, kKey,
                                  base + kResOff + 16, 0);
  const uint32_t fa = pi;
  pi += m5::build_fetch_add(ring, pi, kQpn, base + kDstOff + 64, kKey, 5, kKey, base + kResOff,
                            m5::kCqUpdate);
  reinterpret_cast<uint32_t*>(mem + kDbrecOff)[m5::kSndDbr] = m5::dbrec_value(pi);
  ec::on_doorbell(env, st, q, m5::doorbell_value(ring.wqe(fa)));
  // 3. a write with a bad rkey: error CQE, QP to ERR; 4. a NOP after it: flushed
  const uint32_t bad = pi;
  pi += m5::build_rdma_write(ring, pi, kQpn, base + kDstOff, kKey ^ 0x100, mem + kSrcOff, 8, 0, 0,
                             0, false, 0);
  const uint32_t nop = pi;
  pi += m5::build_nop(ring, pi, kQpn, 0);
  reinterpret_cast<uint32_t*>(mem + kDbrecOff)[m5::kSndDbr] = m5::dbrec_value(pi);
  ec::on_doorbell(env, st, q, m5::doorbell_value(ring.wqe(nop)));
  (void)bad;
  out[kOutCqPi] = env.cq_pi;
  out[kOutState] = env.state;
  out[kOutCi] = st.ci;
  gpi_scenario(mem, out);
}

}  // namespace core_selftest
}  // namespace gicbench

#if defined(__CUDACC__)
extern "C" __global__ void emu_core_selftest(uint8_t* mem, unsigned long long* out) {
  if (threadIdx.x == 0 && blockIdx.x == 0)
    gicbench::core_selftest::scenario(mem, reinterpret_cast<uint64_t*>(out));
}
#endif
