// NVSHMEM's posting paths as extern "C" kernels, for nvcc (-cubin; a whole-program compile, see
// gicbench_nvshmem.cuh). Names: gicbench_nvshmem_<path>_<op>_<quiet>
//   path: internal public; op: put p put_signal; quiet: qp (internal only) pe all.
// The module also holds NVSHMEM's own __constant__ device states, which the host fills by name
// before a launch (gicbench.submit.nvshmem.layout: IBGDA_STATE_SYMBOL, DEVICE_STATE_SYMBOL).
#include "nvshmem/gicbench_nvshmem.cuh"
#include "nvshmem/gicbench_nvshmem_loops.cuh"

#define GICBENCH_NVSHMEM_KERNEL(pa, PA, op, OP, qu, QU)                                    \
  extern "C" __global__ void gicbench_nvshmem_##pa##_##op##_##qu(                          \
      const gicbench_nvshmem_job* job, gicbench_nvshmem_sample* out) {                     \
    gicbench_nvshmem_latency<GICBENCH_NVSHMEM_##PA, GICBENCH_NVSHMEM_##OP,                 \
                             GICBENCH_NVSHMEM_QUIET_##QU>(job, out);                       \
  }
#define GICBENCH_NVSHMEM_OPS(pa, PA, qu, QU)                    \
  GICBENCH_NVSHMEM_KERNEL(pa, PA, put, PUT, qu, QU)             \
  GICBENCH_NVSHMEM_KERNEL(pa, PA, p, P, qu, QU)                 \
  GICBENCH_NVSHMEM_KERNEL(pa, PA, put_signal, PUT_SIGNAL, qu, QU)

GICBENCH_NVSHMEM_OPS(internal, INTERNAL, qp, QP)
GICBENCH_NVSHMEM_OPS(internal, INTERNAL, pe, PE)
GICBENCH_NVSHMEM_OPS(internal, INTERNAL, all, ALL)
GICBENCH_NVSHMEM_OPS(public, PUBLIC, pe, PE)
GICBENCH_NVSHMEM_OPS(public, PUBLIC, all, ALL)

// The harness's loops (gicbench_nvshmem_loops.cuh), what `--submitter nvshmem` launches:
//   gicbench_nvshmem_single_<path>_<op>  (op: put p put_signal), gicbench_nvshmem_rate_<path>_<op>
//   (op: put p), gicbench_nvshmem_qp_of.
#define GICBENCH_NVSHMEM_SINGLE(pa, PA, op, OP)                                            \
  extern "C" __global__ void gicbench_nvshmem_single_##pa##_##op(                          \
      const gicbench_nvshmem_single_job* job, gicbench_nvshmem_sample* out,                \
      gicbench_nvshmem_single_result* res, const uint32_t* abort) {                        \
    gicbench_nvshmem_single<GICBENCH_NVSHMEM_##PA, GICBENCH_NVSHMEM_##OP>(job, out, res,   \
                                                                          abort);          \
  }
#define GICBENCH_NVSHMEM_RATE(pa, PA, op, OP)                                              \
  extern "C" __global__ void gicbench_nvshmem_rate_##pa##_##op(                            \
      const gicbench_nvshmem_rate_job* job, const gicbench_nvshmem_rate_lane* lanes,       \
      gicbench_nvshmem_rate_result* res, uint64_t* marks, const uint32_t* abort) {         \
    gicbench_nvshmem_rate<GICBENCH_NVSHMEM_##PA, GICBENCH_NVSHMEM_##OP>(job, lanes, res,   \
                                                                        marks, abort);     \
  }
#define GICBENCH_NVSHMEM_PATH_LOOPS(pa, PA)               \
  GICBENCH_NVSHMEM_SINGLE(pa, PA, put, PUT)               \
  GICBENCH_NVSHMEM_SINGLE(pa, PA, p, P)                   \
  GICBENCH_NVSHMEM_SINGLE(pa, PA, put_signal, PUT_SIGNAL) \
  GICBENCH_NVSHMEM_RATE(pa, PA, put, PUT)                 \
  GICBENCH_NVSHMEM_RATE(pa, PA, p, P)

GICBENCH_NVSHMEM_PATH_LOOPS(internal, INTERNAL)
GICBENCH_NVSHMEM_PATH_LOOPS(public, PUBLIC)

extern "C" __global__ void gicbench_nvshmem_qp_of(const int32_t* pes, uint32_t* qpn) {
  gicbench_nvshmem_qp_of_impl(pes, qpn);
}

// The generic addresses of NVSHMEM's two device states as this module's code sees them: the host
// compares them with what cuModuleGetGlobal returns (the states are local symbols of a
// whole-program cubin) and reads the states back through them after filling.
extern "C" __global__ void gicbench_nvshmem_state_addrs(uint64_t* out) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    out[0] = reinterpret_cast<uint64_t>(&nvshmemi_device_state_d);
    out[1] = reinterpret_cast<uint64_t>(&nvshmemi_ibgda_device_state_d);
  }
}

// Copies `n` bytes of the two states into `out` (device state first): what the module's code
// reads after the host filled them.
extern "C" __global__ void gicbench_nvshmem_state_read(uint8_t* out) {
  const uint8_t* d = reinterpret_cast<const uint8_t*>(&nvshmemi_device_state_d);
  const uint8_t* g = reinterpret_cast<const uint8_t*>(&nvshmemi_ibgda_device_state_d);
  for (uint32_t i = threadIdx.x; i < sizeof(nvshmemi_device_state_d); i += blockDim.x) out[i] = d[i];
  for (uint32_t i = threadIdx.x; i < sizeof(nvshmemi_ibgda_device_state_d); i += blockDim.x)
    out[sizeof(nvshmemi_device_state_d) + i] = g[i];
}
