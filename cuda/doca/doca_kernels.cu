// Every DOCA posting variant as extern "C" kernels, for nvcc (-cubin at run time, -c in the
// compile test) and for CuPy's RawModule(path=cubin). Names (rate and latency shapes):
//   gicbench_doca_post_<handler>_<sharing>_<scope>, gicbench_doca_latency_<handler>_<sharing>_<scope>
// handler: gpu_sm_db gpu_sm_no_dbr gpu_sm_bf cpu_proxy cpu_proxy_free_flow;
// sharing: exclusive cta gpu; scope: thread warp. gicbench_doca_init builds DOCA's QP structures.
#include "doca/doca_kernels.cuh"

extern "C" __global__ void gicbench_doca_init(const gicbench_doca_queue* queues, int n,
                                              doca_gpu_dev_verbs_qp* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) gicbench_doca_build(queues[i], &out[i]);
}

#define GICBENCH_DOCA_KERNEL(h, H, s, S, e, E)                                              \
  extern "C" __global__ void gicbench_doca_post_##h##_##s##_##e(                            \
      doca_gpu_dev_verbs_qp* qps, const gicbench_doca_lane* lanes,                          \
      const gicbench_doca_job* job, gicbench_doca_result* results, uint64_t* marks) {       \
    gicbench_doca_post<DOCA_GPUNETIO_VERBS_NIC_HANDLER_##H,                                 \
                       DOCA_GPUNETIO_VERBS_RESOURCE_SHARING_MODE_##S,                       \
                       DOCA_GPUNETIO_VERBS_EXEC_SCOPE_##E>(qps, lanes, job, results, marks); \
  }                                                                                         \
  extern "C" __global__ void gicbench_doca_latency_##h##_##s##_##e(                         \
      doca_gpu_dev_verbs_qp* qps, const gicbench_doca_lane* lanes,                          \
      const gicbench_doca_job* job, gicbench_doca_result* results, uint64_t* cycles) {      \
    gicbench_doca_latency<DOCA_GPUNETIO_VERBS_NIC_HANDLER_##H,                              \
                          DOCA_GPUNETIO_VERBS_RESOURCE_SHARING_MODE_##S,                    \
                          DOCA_GPUNETIO_VERBS_EXEC_SCOPE_##E>(qps, lanes, job, results,    \
                                                              cycles);                      \
  }
#define GICBENCH_DOCA_SCOPES(h, H, s, S)             \
  GICBENCH_DOCA_KERNEL(h, H, s, S, thread, THREAD) \
  GICBENCH_DOCA_KERNEL(h, H, s, S, warp, WARP)
#define GICBENCH_DOCA_SHARING(h, H)                        \
  GICBENCH_DOCA_SCOPES(h, H, exclusive, EXCLUSIVE)         \
  GICBENCH_DOCA_SCOPES(h, H, cta, CTA)                     \
  GICBENCH_DOCA_SCOPES(h, H, gpu, GPU)

GICBENCH_DOCA_SHARING(gpu_sm_db, GPU_SM_DB)
GICBENCH_DOCA_SHARING(gpu_sm_no_dbr, GPU_SM_NO_DBR)
GICBENCH_DOCA_SHARING(gpu_sm_bf, GPU_SM_BF)
GICBENCH_DOCA_SHARING(cpu_proxy, CPU_PROXY)
GICBENCH_DOCA_SHARING(cpu_proxy_free_flow, CPU_PROXY_FREE_FLOW)
