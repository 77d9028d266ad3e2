"""Submitters designed in DESIGN.md but not implemented in this release. They are registered so
that `--submitter gpu` is refused in pre-flight with the reason, and `gicbench doctor`
says what this machine would need; none of them runs anything."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..fabric.base import Posting
from ..knobs import KIND_STR, knob
from ..platform import Probe
from .base import Shape, Submitter, register

# The seven GPU-side orderings of the paper (arXiv 2610.01380), Table 4: a build-time choice of
# the GPU kernels.
ORDERINGS = (
    "none",
    "gpu-fence",
    "gpu-fence-dbrec",
    "gpu-release-store",
    "threadfence",
    "sys-release-store",
    "sys-fence",
)


@dataclass(frozen=True)
class GpuParams:
    ordering: str = knob(
        "gpu-fence",
        flag="--ordering",
        kind=KIND_STR,
        choices=ORDERINGS,
        help="ordering before the doorbell (the paper's Table 4)",
    )


@register
class GpuSubmitter(Submitter):
    name = "gpu"
    summary = "mini-gda: GPU threads build WQEs, ring doorbells and poll CQs (CUDA kernels)"
    shapes = frozenset({Shape.LATENCY, Shape.RESPOND, Shape.RATE})
    posting = (Posting.MLX5_QUEUES.value,)
    needs_gpu = True
    cpu_progress = False
    Params = GpuParams

    @classmethod
    def availability(cls, probes: Mapping[str, Probe]) -> str | None:
        cupy = probes["cupy"]
        if not cupy.ok:
            return (
                "the GPU submitter (mini-gda) needs an NVIDIA GPU and CuPy "
                f"({cupy.detail}); it is also not implemented in this release"
            )
        return "the GPU submitter (mini-gda) is not implemented in this release"


__all__ = ["ORDERINGS", "GpuParams"]
