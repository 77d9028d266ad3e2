"""Submitters designed in DESIGN.md but not implemented in this release. They are registered so
that `--submitter proxy` is refused in pre-flight with the reason, and `gicbench doctor`
says what this machine would need; none of them runs anything. (The GPU submitter is
gicbench.submit.gpu.)"""

from __future__ import annotations

from collections.abc import Mapping

from ..fabric.base import Posting
from ..platform import Probe
from .base import Shape, Submitter, register


@register
class ProxySubmitter(Submitter):
    name = "proxy"
    summary = "mini-proxy: producers fill host rings, CPU proxy workers post WQEs"
    shapes = frozenset({Shape.LATENCY, Shape.RATE})
    posting = (Posting.MLX5_QUEUES.value, Posting.POST_SEND.value)

    @classmethod
    def availability(cls, probes: Mapping[str, Probe]) -> str | None:
        return "the proxy submitter (mini-proxy) is not implemented in this release"
