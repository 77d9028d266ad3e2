"""The verbs provider in the provider registry: what it offers here (`caps`), its knobs
(`--ib-dev`, `--gid-index`), pre-flight (device, port and GID chosen before anything is created)
and `open(plan, topo, job, settings)`, which `gicbench run` calls like emu's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError, UnsupportedError
from ...knobs import KIND_STR, knob
from ...platform import Probe
from ..base import Fabric, MemoryDomain, Posting, ProviderCaps
from ..registry import FabricPlan, Provider, register

NAME = "verbs"
MAX_GID_INDEX = 255


def mlx5_hint(device: str) -> str:
    """What an mlx5 device would offer that this provider does not ("" for other devices)."""
    if not device.startswith("mlx5"):
        return ""
    return (
        f"{device} is an mlx5 device: the mlx5 provider (DevX, a later issue) gives direct WQE "
        "access (queues in memory) to submitters; verbs posts through libibverbs"
    )


@dataclass(frozen=True)
class VerbsParams:
    ib_dev: str | None = knob(
        None,
        flag="--ib-dev",
        kind=KIND_STR,
        help="RDMA device[:port], NCCL_IB_HCA syntax (mlx5_0:1,mlx5_1; =exact; ^exclude); "
        "default: $GICBENCH_IB_HCA, else the first ACTIVE port",
    )
    gid_index: int | None = knob(
        None,
        flag="--gid-index",
        lo=0,
        hi=MAX_GID_INDEX,
        help="GID table index (default: the port's RoCEv2 GID, IPv4-mapped first; 0 on IB)",
    )


def caps(probes: Mapping[str, Any]) -> ProviderCaps:
    """Whether verbs runs here: pyverbs importable and an ACTIVE port with a usable GID."""
    flags = {"mlx5_queues": False, "post_send": True}
    base: dict[str, Any] = {
        "multi_node": True,
        "dc": False,
        "gpu_queues": False,
        "posting": (Posting.POST_SEND.value,),
        "memory_domains": (MemoryDomain.HOST.value,),
    }
    details: dict[str, Any] = {
        "what": "any RDMA device through libibverbs; RC; posting path (post_send chains, poll_cq)",
        **flags,
    }
    try:
        from .compat import enum_style
        from .device import list_ports, select

        details["pyverbs_enums"] = enum_style()
        ports = list_ports()
        details["ports"] = [p.as_dict() for p in ports]
        sel = select(env={})  # can verbs run here at all: any ACTIVE port with a usable GID
    except Exception as e:  # UnsupportedError / ConfigError carry the reason
        return ProviderCaps(NAME, False, str(e), details=details, **base)
    try:  # what a run without --ib-dev uses ($GICBENCH_IB_HCA applies; pre-flight refuses it)
        sel = select()
        details["selected"] = f"{sel.device}:{sel.port.port} GID {sel.gid.index} ({sel.gid.type})"
    except (ConfigError, UnsupportedError) as e:
        details["selected"] = f"none: {e}"
    hint = mlx5_hint(sel.device)
    if hint:
        details["mlx5_hint"] = hint
    return ProviderCaps(NAME, True, hint, details=details, **base)


@register
class VerbsProvider(Provider):
    name = NAME
    summary = "any RDMA device through libibverbs (RC; post_send posting path)"
    Params = VerbsParams

    @classmethod
    def caps(cls, probes: Mapping[str, Probe]) -> ProviderCaps:
        return caps(probes)

    @classmethod
    def preflight(cls, plan: FabricPlan, topo: Any, probes: Mapping[str, Probe]) -> dict[str, Any]:
        super().preflight(plan, topo, probes)
        if plan.dcis or plan.dcts:
            raise UnsupportedError(
                "provider verbs has no DC transport (DCIs/DCTs need the mlx5 provider); "
                "use --transport rc"
            )
        from .device import select

        p = plan.params if plan.params is not None else VerbsParams()
        sel = select(p.ib_dev, p.gid_index)  # ConfigError names --ib-dev / --gid-index
        settings: dict[str, Any] = {
            "device": sel.device,
            "port": sel.port.port,
            "gid_index": sel.gid.index,
            "gid_type": sel.gid.type,
            "link_layer": sel.port.link_layer,
            "progress": "hardware",
        }
        return settings

    @classmethod
    def open(cls, plan: FabricPlan, topo: Any, job: str, settings: dict[str, Any]) -> Fabric:
        from .fabric import VerbsFabric

        # Exactly the device:port and GID pre-flight chose (and the trace records).
        return VerbsFabric(
            rank=topo.rank,
            world_size=topo.size,
            job=job,
            ib_dev=f"={settings['device']}:{settings['port']}",
            gid_index=settings["gid_index"],
        )
