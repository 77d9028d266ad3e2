"""The verbs provider's entry in the provider registry: `caps(probes)` and `open(cfg, topo,
job)`. The registry (app/fabric/__init__.py, the lead's) calls these two."""

from __future__ import annotations

from typing import Any

from ..base import ProviderCaps

NAME = "verbs"


def _caps_fields(**flags: bool) -> dict[str, Any]:
    """The seams issue adds mlx5_queues/post_send to ProviderCaps; pass them where it has them."""
    have = getattr(ProviderCaps, "__dataclass_fields__", {})
    return {k: v for k, v in flags.items() if k in have}


def caps(probes: dict[str, Any]) -> ProviderCaps:
    """Whether verbs runs here: pyverbs importable and an ACTIVE port with a usable GID."""
    flags = {"mlx5_queues": False, "post_send": True}
    base = {"multi_node": True, "dc": False, "gpu_queues": False, **_caps_fields(**flags)}
    details: dict[str, Any] = {
        "what": "any RDMA device through pyverbs; RC; posting path (post_send chains, poll_cq)",
        **flags,
    }
    try:
        from .compat import enum_style
        from .device import list_ports, select

        details["pyverbs_enums"] = enum_style()
        ports = list_ports()
        details["ports"] = [p.as_dict() for p in ports]
        sel = select()
    except Exception as e:  # UnsupportedError / ConfigError carry the reason
        return ProviderCaps(NAME, False, str(e), details=details, **base)
    details["selected"] = f"{sel.device}:{sel.port.port} GID {sel.gid.index} ({sel.gid.type})"
    reason = ""
    if sel.device.startswith("mlx5"):
        reason = (
            f"{sel.device} is an mlx5 device: verbs posts through libibverbs; the mlx5 provider "
            "(DevX, later) gives direct WQE access to submitters"
        )
    return ProviderCaps(NAME, True, reason, details=details, **base)


def open(cfg: Any, topo: Any, job: str) -> Any:  # the registry's name
    """One rank's VerbsFabric; `--ib-dev`/`--gid-index` from cfg where it has them."""
    from .fabric import VerbsFabric

    return VerbsFabric(
        rank=topo.rank,
        world_size=topo.size,
        job=job,
        ib_dev=getattr(cfg, "ib_dev", None),
        gid_index=getattr(cfg, "gid_index", None),
    )
