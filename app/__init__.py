"""gicbench: dissect GPU-initiated and CPU-proxy RDMA communication.

The package is layered top to bottom as the data flows (docs/architecture.md): cli -> analysis
-> sweep -> harness -> plan -> experiments -> submit | bootstrap -> fabric -> trace, mlx5 and the
rest, each importing only the layers below it.
"""

from .cuda_host import reserve_hardware_queues

__version__ = "0.1.0"

reserve_hardware_queues()  # before any CUDA context: CuPy creates one on first use
