// Runs gicbench_doca_build (cuda/doca/gicbench_doca.cuh) on the CPU: reads gicbench_doca_queue
// records from stdin, writes for each the field values of the DOCA QP it built, one
// "name value" pair per line, the field read through DOCA's own struct (so its offsets are
// DOCA's). First line: the sizes of the structures Python mirrors.
#include <cstdio>

#include "doca/doca_kernels.cuh"

#define F(name, expr) std::printf("%s %llu\n", name, (unsigned long long)(expr))

int main() {
  std::printf("sizes %zu %zu %zu %zu %zu\n", sizeof(gicbench_doca_queue), sizeof(gicbench_doca_lane),
              sizeof(gicbench_doca_job), sizeof(gicbench_doca_result), sizeof(doca_gpu_dev_verbs_qp));
  gicbench_doca_queue q;
  while (std::fread(&q, sizeof(q), 1, stdin) == 1) {
    doca_gpu_dev_verbs_qp qp;
    gicbench_doca_build(q, &qp);
    const doca_gpu_dev_verbs_cq& cq = qp.cq_sq;
    F("sq_rsvd_index", qp.sq_rsvd_index);
    F("sq_ready_index", qp.sq_ready_index);
    F("sq_wqe_pi", qp.sq_wqe_pi);
    F("sq_num", qp.sq_num);
    F("sq_num_shift8", qp.sq_num_shift8);
    F("sq_num_shift8_be", qp.sq_num_shift8_be);
    F("sq_num_shift8_be_1ds", qp.sq_num_shift8_be_1ds);
    F("sq_num_shift8_be_3ds", qp.sq_num_shift8_be_3ds);
    F("sq_num_shift8_be_4ds", qp.sq_num_shift8_be_4ds);
    F("sq_num_shift8_be_5ds", qp.sq_num_shift8_be_5ds);
    F("sq_lock", qp.sq_lock);
    F("sq_wqe_num", qp.sq_wqe_num);
    F("sq_wqe_mask", qp.sq_wqe_mask);
    F("sq_wqe_daddr", (uintptr_t)qp.sq_wqe_daddr);
    F("sq_dbrec", (uintptr_t)qp.sq_dbrec);
    F("sq_db", (uintptr_t)qp.sq_db);
    F("cqe_daddr", (uintptr_t)cq.cqe_daddr);
    F("cq_num", cq.cq_num);
    F("cqe_num", cq.cqe_num);
    F("cq_dbrec", (uintptr_t)cq.dbrec);
    F("cqe_ci", cq.cqe_ci);
    F("cqe_mask", cq.cqe_mask);
    F("cqe_size", cq.cqe_size);
    F("cq_type", cq.cq_type);
    F("cqe_rsvd", cq.cqe_rsvd);
    F("cq_mem_type", cq.mem_type);
    F("nic_handler", qp.nic_handler);
    F("mem_type", qp.mem_type);
    F("supported", (gicbench_doca_supported(qp.nic_handler, DOCA_GPUNETIO_VERBS_EXEC_SCOPE_THREAD, 0) << 0) |
                       (gicbench_doca_supported(qp.nic_handler, DOCA_GPUNETIO_VERBS_EXEC_SCOPE_THREAD, 1) << 1) |
                       (gicbench_doca_supported(qp.nic_handler, DOCA_GPUNETIO_VERBS_EXEC_SCOPE_THREAD, 2) << 2) |
                       (gicbench_doca_supported(qp.nic_handler, DOCA_GPUNETIO_VERBS_EXEC_SCOPE_THREAD, 3) << 3) |
                       (gicbench_doca_supported(qp.nic_handler, DOCA_GPUNETIO_VERBS_EXEC_SCOPE_THREAD, 4) << 4) |
                       (gicbench_doca_supported(qp.nic_handler, DOCA_GPUNETIO_VERBS_EXEC_SCOPE_WARP, 0) << 5) |
                       (gicbench_doca_supported(qp.nic_handler, DOCA_GPUNETIO_VERBS_EXEC_SCOPE_WARP, 1) << 6));
    std::printf("end\n");
  }
  return 0;
}
