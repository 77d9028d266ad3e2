"""NVSHMEM's own IBGDA device path on gicbench's queues (docs/nvshmem.md): the headers, the
records gicbench writes into NVSHMEM's device state, the nvcc build."""
