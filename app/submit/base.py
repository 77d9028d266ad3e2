"""The submitter interface: who posts work to the NIC, and the typed work it is given.

A submitter is registered by name and declares what it can run: the loop shapes (latency,
respond, rate), the posting interfaces it drives (mlx5 queues in memory, or a post-send call),
whether it needs a GPU, and whether its loops can drive a CPU progress hook. `availability`
says whether it can run on this machine and, if not, why. The harness refuses an unavailable or
mismatched choice in pre-flight, before any MPI or NIC resource exists.

Experiments hand a submitter typed work (LatencyWork, RespondWork, RateWork) made of Lanes; how a
submitter lays out its lanes (a native table, a GPU array) is its own business.
"""

from __future__ import annotations

import enum
import importlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import ConfigError
from ..fabric.base import Fabric, MemoryRegion, ProgressPolicy, ProviderCaps, QueuePair
from ..fabric.registry import QueueOptions
from ..platform import Probe

SUBMITTER_MODULES = (
    "gicbench.submit.host",
    "gicbench.submit.gpu",
    "gicbench.submit.proxy",
    "gicbench.submit.doca.submitter",
)
_REGISTRY: dict[str, type[Submitter]] = {}


class Shape(str, enum.Enum):
    """Loop shapes an experiment asks for."""

    LATENCY = "latency"  # one operation at a time, timed per operation
    RESPOND = "respond"  # answer a peer's requests (the far side of a round trip)
    RATE = "rate"  # many operations outstanding, timed over windows


@dataclass(frozen=True)
class Buffer:
    """A byte range the NIC reaches: local (key = lkey) or remote (key = rkey)."""

    addr: int
    key: int
    length: int

    @classmethod
    def local(cls, mr: MemoryRegion, offset: int = 0, length: int | None = None) -> Buffer:
        n = mr.length - offset if length is None else length
        if offset < 0 or n <= 0 or offset + n > mr.length:
            raise ValueError(f"slice [{offset}, {offset + n}) outside a {mr.length}-byte region")
        return cls(mr.addr + offset, mr.lkey, n)

    def slice(self, offset: int, length: int) -> Buffer:
        if offset < 0 or length <= 0 or offset + length > self.length:
            raise ValueError(f"slice [{offset}, {offset + length}) outside {self.length} bytes")
        return Buffer(self.addr + offset, self.key, length)


@dataclass(frozen=True)
class DcAddress:
    """The address vector a DCI puts in each WQE to reach a peer's DC target."""

    dctn: int
    dc_key: int
    lid: int


@dataclass(frozen=True)
class Lane:
    """One QP driven towards one peer: where it reads (src) and where it writes (dst)."""

    qp: QueuePair
    peer: int
    src: Buffer
    dst: Buffer
    dc: DcAddress | None = None


@dataclass(frozen=True)
class LatencyWork:
    """Operations one at a time on lanes[selected]; `lanes` are all configured QPs (the scope
    of an all-QP quiet). `reply` is the local buffer a round trip's answer lands in."""

    lanes: tuple[Lane, ...]
    selected: int
    mode: str  # issue | put_completion | round_trip
    size: int
    inline: bool
    scope_all: bool
    iters: int
    warmup: int
    reply: Buffer | None = None


@dataclass(frozen=True)
class RespondWork:
    """Answer `count` round-trip requests that land in `watch`, writing back through `lane`."""

    lane: Lane
    watch: Buffer
    size: int
    inline: bool
    count: int


@dataclass(frozen=True)
class RateWork:
    """Many writes outstanding: thread t owns lanes t, t+T, ...; `batch` WQEs per doorbell."""

    lanes: tuple[Lane, ...]
    threads: int
    batch: int
    size: int
    inline: bool
    messages_per_thread: int
    warmup_per_thread: int
    window: int


@dataclass
class RateResult:
    windows_ns: np.ndarray
    elapsed_ns: int
    messages: int
    doorbells: int
    cqes: int


@dataclass(frozen=True)
class NoParams:
    """A submitter without knobs of its own."""


class Submitter(ABC):
    name: ClassVar[str]
    summary: ClassVar[str]
    shapes: ClassVar[frozenset[Shape]]
    posting: ClassVar[tuple[str, ...]]  # fabric.base.Posting values it can drive
    needs_gpu: ClassVar[bool] = False
    cpu_progress: ClassVar[bool] = True  # its waits can call a provider's CPU progress hook
    threads_share_lanes: ClassVar[bool] = False  # rate: more threads than lanes may share them
    Params: ClassVar[type] = NoParams  # knobs of this submitter (see experiments.knobs)

    @classmethod
    @abstractmethod
    def availability(cls, probes: Mapping[str, Probe]) -> str | None:
        """None when it can run on this machine, else the reason it cannot."""

    @classmethod
    def caps(cls, probes: Mapping[str, Probe]) -> ProviderCaps:
        why = cls.availability(probes)
        return ProviderCaps(
            cls.name,
            why is None,
            why or "",
            posting=cls.posting,
            details={"what": cls.summary, "shapes": sorted(s.value for s in cls.shapes)},
        )

    @classmethod
    def queue_options(cls, params: Any, sq_depth: int) -> QueueOptions:
        """How bring-up must create this submitter's RC QPs and their send CQs (the plan puts
        it in the FabricPlan, before anything exists); the default: the provider's defaults."""
        return QueueOptions()

    @classmethod
    def preload(cls, params: Any, local_rank: int) -> None:
        """Called by the harness before the NIC opens, on every rank: compile and load what
        this submitter's loops will launch on the rank's GPU (node-local rank i takes GPU i mod
        count). A provider may start a persistent kernel at open (emu's CUDA engine); under
        CUDA's lazy loading a kernel first loaded while it runs may wait for a context
        synchronisation that never comes. Default: nothing."""
        return None

    @classmethod
    def check_points(cls, params: Any, points: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        """Refuse (ConfigError/UnsupportedError), in pre-flight, points this submitter cannot
        run with `params` ((experiment name, point) pairs, as the experiments list them)."""
        return None

    @classmethod
    def check_rate_lanes(cls, knobs: Mapping[str, Any], lanes: int) -> None:
        """Refuse (ConfigError), in pre-flight, knobs that cannot drive a rate loop over `lanes`
        lanes (-q x the rank's destinations: known once the rank's pattern is, so called from
        the experiment's check_rank). Default: anything goes."""
        return None

    @classmethod
    def check_provider(
        cls,
        params: Any,
        points: Sequence[tuple[str, Mapping[str, Any]]],
        provider: str,
        caps: ProviderCaps,
        provider_params: Any,
    ) -> None:
        """Refuse (ConfigError/UnsupportedError), in pre-flight, what this submitter cannot run
        on `provider`: its caps say how it posts, `provider_params` are its own knobs (e.g.
        emu's queue placement). Default: nothing beyond the posting match the plan checks."""
        return None

    def __init__(
        self,
        *,
        rank: int,
        fabric: Fabric,
        progress: ProgressPolicy,
        timeout_s: float,
        params: Any = None,
    ) -> None:
        self.rank, self.fabric, self.progress = rank, fabric, progress
        self.timeout_ns = int(timeout_s * 1e9)
        self.params = params if params is not None else self.Params()

    def attach_queues(self, qps: Sequence[QueuePair]) -> None:
        """Called once by the harness after bring-up with every QP this rank brought up,
        before any loop: the place to prepare them (initialise CQ rings, map them into the
        GPU, register the scratch region QueueOptions asked for). Default: nothing."""
        return None

    def latency(self, work: LatencyWork) -> np.ndarray:
        """Per-operation samples (int64 ns) of `work.iters` operations."""
        raise NotImplementedError(f"submitter {self.name} has no latency loop")

    def respond(self, work: RespondWork) -> None:
        raise NotImplementedError(f"submitter {self.name} has no responder loop")

    def rate(self, work: RateWork) -> RateResult:
        raise NotImplementedError(f"submitter {self.name} has no rate loop")

    def rate_lane_messages(
        self, nlanes: int, threads: int, batch: int, per_thread: int
    ) -> list[int] | None:
        """Messages each lane of a rate call carries, where this submitter hands them out
        differently from msg-rate's thread-per-lane rule (None: that rule)."""
        return None

    def point_details(self) -> dict[str, float]:
        """Numbers the last loop measured besides its samples (e.g. the effective SM clock);
        the harness adds them to the point's results."""
        return {}

    def close(self) -> None:
        """Release what the submitter holds (threads, GPU memory); the harness calls it."""
        return None


def register(cls: type[Submitter]) -> type[Submitter]:
    if cls.name in _REGISTRY:
        raise RuntimeError(f"submitter {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def _load() -> None:
    for mod in SUBMITTER_MODULES:
        importlib.import_module(mod)


def names() -> tuple[str, ...]:
    _load()
    return tuple(_REGISTRY)


def get(name: str) -> type[Submitter]:
    _load()
    if name not in _REGISTRY:
        raise ConfigError("submitter (--submitter)", name, "one of " + ", ".join(_REGISTRY))
    return _REGISTRY[name]


def catalog(probes: Mapping[str, Probe]) -> list[ProviderCaps]:
    """Every registered submitter and whether it can run on this machine (doctor)."""
    return [get(n).caps(probes) for n in names()]
