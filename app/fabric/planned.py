"""Providers that are designed (docs/architecture.md) but not implemented in this release: listed
so that `gicbench doctor` and `--provider` say what is missing here, and refused before any
resource."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import UnsupportedError
from ..platform import Probe
from .base import Fabric, Posting, ProviderCaps
from .registry import FabricPlan, Provider, register


@register
class Mlx5Provider(Provider):
    name = "mlx5"
    summary = "ConnectX through DevX: QPs/CQs on umem in GPU or host memory, DC, GPU-mapped UAR"

    @classmethod
    def caps(cls, probes: Mapping[str, Probe]) -> ProviderCaps:
        reason = (
            "not implemented in this release (planned: DevX QPs/CQs, DC, GPU-mapped UAR)"
            if probes["rdma"].ok
            else "needs a ConnectX device with DevX: " + probes["rdma"].detail
        )
        return ProviderCaps(
            cls.name,
            False,
            reason,
            multi_node=True,
            dc=True,
            gpu_queues=True,
            posting=(Posting.MLX5_QUEUES.value,),
            memory_domains=("host", "host-mapped", "device"),
        )

    @classmethod
    def open(cls, plan: FabricPlan, topo: Any, job: str, settings: dict[str, Any]) -> Fabric:
        raise UnsupportedError(f"provider {cls.name} is not implemented in this release")
