"""The DOCA GPUNetIO submitter's parts: NVIDIA's device verbs posting on gicbench's queues.

headers: where the BSD-3 device-verbs headers come from (the nvidia-nvshmem-cu13 wheel), their
    version, and the refusal reason where they are missing.
layout: the plain description of one gicbench QP/CQ (addresses, sizes, QPN) that cuda/doca/
    turns into DOCA's device QP structure, filled from gicbench's fabric objects.
build: compiling cuda/doca/doca_kernels.cu with nvcc against those headers (at run time).
proxy: the host threads of the CPU_PROXY and CPU_PROXY_FREE_FLOW NIC handlers.
docs/doca.md says which field comes from where and what each handler does.
"""
