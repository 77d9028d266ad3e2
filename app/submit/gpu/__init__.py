"""mini-gda, the GPU submitter: CUDA kernels (cuda/gda/) build mlx5 WQEs, publish doorbell
records, ring doorbells and poll CQs through device addresses, on any engine whose queues the
GPU reaches (the emulated NIC's CPU engine with host-mapped queues, a CUDA engine with
GPU-resident queues)."""

from .params import ORDERINGS, PUBLISH, GpuParams
from .submitter import GpuSubmitter

__all__ = ["ORDERINGS", "PUBLISH", "GpuParams", "GpuSubmitter"]
