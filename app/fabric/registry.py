"""Fabric providers by name: each declares what it offers here and opens a rank's NIC.

Bring-up never names a provider: it asks the registry for `cfg.provider`, checks it in
pre-flight (before any resource exists) and opens it with a FabricPlan, the counts of what it
will create. A provider module registers itself on import; `PROVIDER_MODULES` lists them.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import ConfigError, UnsupportedError
from ..platform import Probe
from .base import Fabric, ProviderCaps

PROVIDER_MODULES = (
    "gicbench.fabric.emu.provider",
    "gicbench.fabric.verbs.provider",
    "gicbench.fabric.planned",
)
_REGISTRY: dict[str, type[Provider]] = {}


@dataclass(frozen=True)
class QueueOptions:
    """How a submitter wants each RC QP and its send CQ created (provider keyword arguments of
    create_qp/create_cq, e.g. emu's dbr=False, collapsed=True, overrun_ignore=True), and the
    host-mapped bytes per QP it registers for itself (e.g. DOCA's CPU-proxy words)."""

    qp: Mapping[str, Any] = field(default_factory=dict)
    cq: Mapping[str, Any] = field(default_factory=dict)
    scratch_per_qp: int = 0
    # GPI queues (docs/gpi.md) it may create after bring-up: (depth, ncounters, nwindows) each,
    # so a provider that sizes its memory up front leaves room for them
    gpis: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True)
class FabricPlan:
    """What bring-up will create on one rank, known before anything is created."""

    world_size: int
    local_size: int  # ranks on this node
    nodes: int
    rc_peers: int  # ranks this rank has RC QPs towards
    rc_qps_per_peer: int
    dcis: int
    dcts: int
    sq_depth: int  # WQEBBs per SQ (and CQEs per CQ)
    mr_sizes: tuple[int, ...]  # bytes of each memory region (source, landing)
    progress: str  # requested: auto | thread | inline
    autonomous_progress: bool  # the submitter cannot drive a CPU progress hook (a GPU kernel)
    mr_domain: str | None = None  # memory domain of the source and landing regions (GPU: mapped)
    # the submitter's queue wishes (DOCA: DBR-less QPs, collapsed CQs, a proxy-word region)
    queue_options: QueueOptions = field(default_factory=QueueOptions)
    params: Any = None  # the provider's own knobs (its Params), built by the plan

    @property
    def scratch_bytes(self) -> int:
        """Bytes of the one extra region the submitter registers (0: none)."""
        return self.queue_options.scratch_per_qp * self.rc_peers * self.rc_qps_per_peer

    @property
    def qps(self) -> int:
        return self.rc_peers * self.rc_qps_per_peer + self.dcis

    @property
    def cqs(self) -> int:
        return self.qps + self.dcts


@dataclass(frozen=True)
class NoParams:
    """A provider without knobs of its own."""


class Provider(ABC):
    name: ClassVar[str]
    summary: ClassVar[str]
    Params: ClassVar[type] = NoParams  # knobs of this provider (app/knobs.py), e.g. --ib-dev

    @classmethod
    @abstractmethod
    def caps(cls, probes: Mapping[str, Probe]) -> ProviderCaps:
        """What this provider offers, and whether it can run on this machine (and why not)."""

    @classmethod
    def preflight(cls, plan: FabricPlan, topo: Any, probes: Mapping[str, Probe]) -> dict[str, Any]:
        """Refuse (UnsupportedError/ConfigError) what cannot run, before anything is created.
        Returns the settings it resolved (recorded in the trace), e.g. the progress mode."""
        caps = cls.caps(probes)
        if not caps.available:
            raise UnsupportedError(f"provider {cls.name} is not available here: {caps.reason}")
        return {}

    @classmethod
    @abstractmethod
    def open(cls, plan: FabricPlan, topo: Any, job: str, settings: dict[str, Any]) -> Fabric:
        """This rank's NIC, sized for `plan`, with the settings preflight resolved."""


def register(cls: type[Provider]) -> type[Provider]:
    if cls.name in _REGISTRY:
        raise RuntimeError(f"provider {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def _load() -> None:
    for mod in PROVIDER_MODULES:
        importlib.import_module(mod)


def names() -> tuple[str, ...]:
    """In PROVIDER_MODULES order, whichever module a process happened to import first."""
    _load()
    order = {m: i for i, m in enumerate(PROVIDER_MODULES)}
    return tuple(sorted(_REGISTRY, key=lambda n: order.get(_REGISTRY[n].__module__, len(order))))


def get(name: str) -> type[Provider]:
    _load()
    if name not in _REGISTRY:
        raise ConfigError("provider (--provider)", name, "one of " + ", ".join(names()))
    return _REGISTRY[name]


def catalog(probes: Mapping[str, Probe]) -> list[ProviderCaps]:
    """Every registered provider and what it can do on this machine (doctor)."""
    return [get(n).caps(probes) for n in names()]
