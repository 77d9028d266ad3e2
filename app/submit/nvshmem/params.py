"""The nvshmem submitter's knobs, declared once: which of NVSHMEM's APIs posts, its doorbell
batching threshold, and which build of its device code."""

from __future__ import annotations

from dataclasses import dataclass

from ...knobs import KIND_INT, KIND_STR, knob
from . import layout

PATHS = ("internal", "public")
BUILDS = {"wheel": "default", "gpumem-only": "gpumem-only"}  # knob value -> build.VARIANTS


@dataclass(frozen=True)
class NvshmemParams:
    nvshmem_path: str = knob(
        "internal",
        flag="--nvshmem-path",
        kind=KIND_STR,
        choices=PATHS,
        help="internal: nvshmemi_ibgda_rma_nbi / _rma_p / _put_signal and IBGDA's quiet; public: "
        "nvshmem_putmem_nbi / nvshmem_uint64_p / nvshmem_putmem_signal_nbi and nvshmem_quiet",
    )
    nvshmem_batch: int = knob(
        layout.DEFAULT_REQUESTS_IN_BATCH,
        flag="--nvshmem-batch",
        kind=KIND_INT,
        lo=1,
        hi=layout.MIN_QP_DEPTH,
        help="NVSHMEM_IBGDA_NUM_REQUESTS_IN_BATCH: ring once a submission crosses a multiple of "
        "this many WQEs (a power of two)",
    )
    nvshmem_build: str = knob(
        "wheel",
        flag="--nvshmem-build",
        kind=KIND_STR,
        choices=tuple(BUILDS),
        help="NVSHMEM's device code as the wheel builds it, or its GPU-memory-only build "
        "(NVSHMEM_IBGDA_SUPPORT_GPUMEM_ONLY: release-store doorbells, GPU-scope fences; needs "
        "--queues device)",
    )

    @property
    def variant(self) -> str:
        """The build variant (build.VARIANTS) of the cubin these knobs run."""
        return BUILDS[self.nvshmem_build]
