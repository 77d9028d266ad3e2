// NVSHMEM's posting paths as extern "C" kernels, for nvcc (-cubin; a whole-program compile, see
// gicbench_nvshmem.cuh). Names: gicbench_nvshmem_<path>_<op>_<quiet>
//   path: internal public; op: put p put_signal; quiet: qp (internal only) pe all.
// The module also holds NVSHMEM's own __constant__ device states, which the host fills by name
// before a launch (gicbench.submit.nvshmem.layout: IBGDA_STATE_SYMBOL, DEVICE_STATE_SYMBOL).
#include "nvshmem/gicbench_nvshmem.cuh"

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
