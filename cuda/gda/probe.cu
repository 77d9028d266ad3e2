// The bare publication mechanism mini-gda's issue is measured against (bench/gda_probe.py): one
// thread writes a 64-byte RDMA-write WQE as four 16-byte stores (body first, control segment
// last), then publishes the doorbell record and the doorbell with the build's ordering: the same
// publish() of ordering.cuh that mini-gda uses (-DGDA_ORDERING=n). Nothing consumes the queue;
// it is placed where a run places its queues (GPU memory or host memory mapped into the GPU).
//
// gda_probe     per op: idle for idle_ns (0: back to back), then time the WQE and the publication
//               with globaltimer and clock64; out = {first op's start, last op's end} of the timed
//               ops (their mean is the pipelined cost per op)
#include "gda/ordering.cuh"
#include "smclock.cuh"

using namespace gicbench;
using namespace gicbench::gda;

extern "C" __global__ void gda_probe(uint8_t* sq, uint32_t wqebbs, uint32_t* dbrec,
                                     uint64_t* doorbell, uint32_t qpn, uint32_t iters,
                                     uint32_t warmup, uint64_t idle_ns, int64_t* samples,
                                     int64_t* cycles, int64_t* span) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const uint32_t mask = wqebbs * mlx5::kWqebbBytes - 1;
  const uint32_t total = warmup + iters;
  uint64_t first = 0, last = 0;
  for (uint32_t i = 0; i < total; ++i) {
    if (idle_ns) {  // single-shot: the previous op's stores drained before this one starts
      const uint64_t t = globaltimer();
      while (globaltimer() - t < idle_ns) {
      }
    }
    const uint32_t pi = i;
    // What a write's words depend on, composed before the timer as mini-gda holds them.
    const uint64_t raddr = 0x100000ull + 64ull * (pi & 1023);
    const uint32_t w0 = mlx5::bswap32(((pi & 0xffff) << 8) | mlx5::kOpRdmaWrite);
    const uint32_t w1 = mlx5::bswap32((qpn << 8) | 4u);  // ctrl, raddr, data, pad: 4 segments
    uint8_t* wqe = sq + ((pi * mlx5::kWqebbBytes) & mask);
    compiler_barrier();
    const uint64_t t0 = globaltimer();
    const uint64_t c0 = clock64_now();
    st_global_v4(wqe + 16, make_uint4(mlx5::bswap32(static_cast<uint32_t>(raddr >> 32)),
                                      mlx5::bswap32(static_cast<uint32_t>(raddr)), 0x01020304u, 0));
    st_global_v4(wqe + 32, make_uint4(mlx5::bswap32(8u), 0x05060708u, 0, mlx5::bswap32(pi)));
    st_global_v4(wqe + 48, make_uint4(0, 0, 0, 0));
    compiler_barrier();  // the body before the control segment, as mini-gda emits them
    st_global_v4(wqe, make_uint4(w0, w1, static_cast<uint32_t>(mlx5::kCqUpdate) << 24, 0));
    publish(dbrec, doorbell, pi + 1, (static_cast<uint64_t>(w1) << 32) | w0);
    const uint64_t t1 = globaltimer();
    const uint64_t c1 = clock64_now();
    if (i >= warmup) {
      samples[i - warmup] = static_cast<int64_t>(t1 - t0);
      cycles[i - warmup] = static_cast<int64_t>(c1 - c0);
      if (i == warmup) first = t0;
      last = t1;
    }
  }
  span[0] = static_cast<int64_t>(first);
  span[1] = static_cast<int64_t>(last);
}
