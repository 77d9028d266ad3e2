"""Experiment registry: each module in this package registers its experiment class on import;
modules are discovered, not listed.

An experiment declares its parameters (a Params dataclass of knobs, app/knobs.py), the loop
shapes it needs from a submitter, the traffic patterns it supports, the fits that apply to its
results, its sweep (`points`), and what must land where (`expected_landing`). The harness owns
bring-up, timing order, validation, traces and printing; the experiment fills this contract.

An experiment is built with the run's submitter class and that submitter's typed Params (the
plan builds both once). It asks the submitter only through the contract of the shapes it
declared (app/submit/base.py): never for its name, never past it.
"""

from __future__ import annotations

import importlib
import pkgutil
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..config import PATTERNS
from ..errors import ConfigError, UnsupportedError
from ..knobs import build

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..patterns import Traffic
    from ..submit.base import Shape, Submitter
    from .context import Layout, RankContext

_NOT_EXPERIMENTS = frozenset({"registry", "common", "context"})
_REGISTRY: dict[str, type[Experiment]] = {}
_loaded = False


@dataclass
class PointResult:
    """What one rank measured at one sweep point."""

    samples: dict[str, np.ndarray] = field(default_factory=dict)  # metric -> int64 ns
    results: dict[str, Any] = field(default_factory=dict)  # derived numbers (rates, bytes)
    role: str = "sender"  # see patterns.Traffic.role


@dataclass(frozen=True)
class Column:
    """One column of the rank-0 table: header (with unit) and the aggregated row key."""

    header: str
    key: str
    fmt: str = "{:.2f}"
    width: int = 10


class Experiment(ABC):
    name: ClassVar[str]
    summary: ClassVar[str]
    method: ClassVar[str]  # where the method comes from (the paper and section)
    Params: ClassVar[type]  # a dataclass of knobs
    shapes: ClassVar[frozenset[Shape]]  # loop shapes it asks a submitter for
    patterns: ClassVar[tuple[str, ...]] = PATTERNS
    fits: ClassVar[
        tuple[str, ...]
    ] = ()  # analysis fits that apply: clock|plateau|crossover|exposed|ratio

    def __init__(
        self, params: Any, cfg: RunConfig, submitter: type[Submitter], submitter_params: Any
    ) -> None:
        self.params, self.cfg = params, cfg
        self.submitter, self.submitter_params = submitter, submitter_params

    @classmethod
    def from_config(
        cls, cfg: RunConfig, submitter: type[Submitter], submitter_params: Any
    ) -> Experiment:
        """Build and check this experiment's Params from the run's knob values, for the run's
        submitter and its Params."""
        if cfg.pattern not in cls.patterns:
            raise ConfigError(
                "pattern (--pattern)",
                cfg.pattern,
                f"one of {', '.join(cls.patterns)} for {cls.name}",
            )
        params = build(cls.Params, cfg.knobs, cls.name)
        exp = cls(params, cfg, submitter, submitter_params)
        missing = exp.needed_shapes() - submitter.shapes
        if missing:
            raise UnsupportedError(
                f"experiment {cls.name} needs {', '.join(sorted(m.value for m in missing))} "
                f"loops, which submitter {submitter.name} does not have (submitters with them: "
                f"{', '.join(_having(exp.needed_shapes())) or 'none'})"
            )
        exp.check()
        return exp

    def check(self) -> None:
        """Checks across this experiment's fields and the shared config (raise ConfigError)."""
        return None

    def check_rank(self, traffic: Traffic) -> None:
        """Checks that need this rank's part in the pattern (pre-flight, once MPI is up)."""
        return None

    def needed_shapes(self) -> frozenset[Shape]:
        """The loop shapes this configuration runs (pre-flight checks the submitter has them):
        `shapes`, less what its chosen points never use."""
        return self.shapes

    def needs_queues_in_memory(self) -> str | None:
        """Why this configuration reads or writes mlx5 queues in memory (a provider that only
        posts through post_send refuses it), or None."""
        return None

    def uses_gpi_queues(self) -> bool:
        """Whether this configuration's loops create GPI queues after bring-up (docs/gpi.md):
        only then does the plan keep the room a submitter asks for them."""
        return False

    # What bring-up must provide.
    @property
    def lanes_per_peer(self) -> int:
        return int(getattr(self.params, "qps", 1))

    def lanes_per_peer_at(self, world_size: int) -> int:
        """Lanes towards one peer in a world of `world_size` ranks (bring-up and the landing
        layout are sized from it): `lanes_per_peer`, unless the experiment spreads a count per
        rank over its peers (active-connections)."""
        return self.lanes_per_peer

    def dci_pool(self, neighbours: int, world_size: int) -> int:
        """DCIs a rank with `neighbours` peers needs with --transport dc: by default a slice of
        the pool per peer, so that no two lanes share a DCI."""
        return self.lanes_per_peer_at(world_size) * max(1, neighbours)

    @property
    def transport(self) -> str:
        return str(getattr(self.params, "transport", "rc"))

    @property
    def max_message(self) -> int:
        """The largest message in the sweep (bytes): the landing layout is sized from it. An
        experiment whose Params is a SizeSweep has it; others override."""
        return int(self.params.top)

    @abstractmethod
    def points(self) -> list[dict[str, Any]]:
        """The sweep: one dict of parameters per point, in run order."""

    @abstractmethod
    def run_point(self, ctx: RankContext, point: dict[str, Any]) -> PointResult:
        """Measure one point on this rank (a submitter's loops do the timing)."""

    @abstractmethod
    def columns(self) -> list[Column]:
        """Table columns for rank 0's output, computed from aggregated rows."""

    def expected_landing(
        self,
        ctx: RankContext,
        point: dict[str, Any],
        source: int,
        source_bytes: np.ndarray,
        layout: Layout,
    ) -> list[tuple[int, np.ndarray]]:
        """What must hold in this rank's landing region for `source` after the point, as
        (offset in that region, bytes) pieces, given the bytes the source's send buffer held.
        Empty: nothing from that source lands here. The harness compares and counts."""
        return []


def _having(shapes: frozenset[Shape]) -> list[str]:
    from ..submit import base as submitters

    return sorted(n for n in submitters.names() if shapes <= submitters.get(n).shapes)


def register(cls: type[Experiment]) -> type[Experiment]:
    if cls.name in _REGISTRY:
        raise RuntimeError(f"experiment {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def _load() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for mod in pkgutil.iter_modules(_package_path()):
            if mod.name not in _NOT_EXPERIMENTS and not mod.name.startswith("_"):
                importlib.import_module(f"{__package__}.{mod.name}")


def _package_path() -> list[str]:
    import os

    return [os.path.dirname(__file__)]


def names() -> tuple[str, ...]:
    _load()
    return tuple(_REGISTRY)


def get(name: str) -> type[Experiment]:
    _load()
    if name not in _REGISTRY:
        raise ConfigError("experiment", name, "one of " + ", ".join(_REGISTRY))
    return _REGISTRY[name]


SUITES: dict[str, tuple[str, ...]] = {
    # What `make run` runs: the host submitter's single-op and msg-rate on the embedded NIC.
    "default": ("single-op", "msg-rate"),
    # `make run`'s second run: the same path through mini-proxy (--submitter proxy).
    "proxy": ("single-op", "proxy-rate", "loaded-rtt", "payload"),
}
