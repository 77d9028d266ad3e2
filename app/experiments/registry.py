"""Experiment registry: each experiment module registers one class; the harness runs it by name.

An experiment declares its knobs (the RunConfig fields it reads, shown by `gicbench list`), the
submitters it supports, and its sweep (`points`). The harness (app/harness.py) owns bring-up,
warm-up, timing, validation, traces and printing; the experiment only fills the per-point contract.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..harness import RankContext

# Modules that hold experiments; importing one registers it.
_MODULES = ("single_op", "msg_rate")
_REGISTRY: dict[str, type[Experiment]] = {}
_loaded = False


@dataclass
class PointResult:
    """What one rank measured at one sweep point."""

    samples: dict[str, np.ndarray] = field(default_factory=dict)  # metric -> int64 ns
    results: dict[str, Any] = field(default_factory=dict)  # derived numbers (rates, bytes)
    role: str = "sender"  # sender ranks own the samples; receivers validate


@dataclass(frozen=True)
class Column:
    """One column of the rank-0 table: header (with unit) and how to compute it from a row."""

    header: str
    key: str
    fmt: str = "{:.2f}"
    width: int = 10


class Experiment(ABC):
    name: ClassVar[str]
    summary: ClassVar[str]
    seed_section: ClassVar[str]  # where the method comes from
    knobs: ClassVar[tuple[str, ...]]  # RunConfig fields this experiment reads
    submitters: ClassVar[tuple[str, ...]] = ("host",)

    @abstractmethod
    def points(self, cfg: RunConfig) -> list[dict[str, Any]]:
        """The sweep: one dict of parameters per point, in run order."""

    @abstractmethod
    def run_point(self, ctx: RankContext, params: dict[str, Any]) -> PointResult:
        """Measure one point on this rank (native loops do the timing)."""

    @abstractmethod
    def columns(self) -> list[Column]:
        """Table columns for rank 0's output, computed from aggregated rows."""

    def expected_landing(
        self, params: dict[str, Any], is_sender: bool, peer_src: np.ndarray
    ) -> np.ndarray | None:
        """What this rank's landing buffer must hold after the point, given the bytes the peer's
        source buffer held before it (None: nothing lands here). The harness compares."""
        return None


def register(cls: type[Experiment]) -> type[Experiment]:
    if cls.name in _REGISTRY:
        raise RuntimeError(f"experiment {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def _load() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for mod in _MODULES:
            importlib.import_module(f"{__package__}.{mod}")


def names() -> tuple[str, ...]:
    _load()
    return tuple(_REGISTRY)


def get(name: str) -> type[Experiment]:
    _load()
    return _REGISTRY[name]


SUITES: dict[str, tuple[str, ...]] = {
    # What `make run` runs: the host submitter's single-op and msg-rate on the embedded NIC.
    "default": ("single-op", "msg-rate"),
}
