"""The submitter interface: who posts work to the NIC, the one contract every submitter fills.

A submitter is registered by name and declares what it can run: the loop shapes (`Shape`, each
with its typed work and result in app/submit/work.py), the posting interfaces it drives (mlx5
queues in memory, or a post-send call), whether it needs a GPU, and whether its loops can drive
a CPU progress hook. `availability` says whether it can run on this machine and, if not, why.
The plan refuses an experiment whose shapes the submitter lacks, and an unavailable or
mismatched choice, in pre-flight, before any MPI or NIC resource exists.

An experiment asks for shapes, never for a submitter's name: it calls the method of each shape
it declared (`latency`, `respond`, `rate`, `loaded`, `proxy_rate`, `cycle`, `dispatch`,
`locked_clock`) with typed work, and the shape's pre-flight questions (`check_loaded`,
`loaded_lanes`, `loaded_queues`, `check_rate_lanes`, `dispatch_backends`, `point_fields`, ...)
with the submitter's typed Params, which the plan builds once. Nothing else of a submitter is
the experiment's business.
"""

from __future__ import annotations

import contextlib
import importlib
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import ConfigError
from ..fabric.base import Fabric, ProgressPolicy, ProviderCaps, QueuePair
from ..fabric.registry import QueueOptions
from ..platform import Probe
from .work import (
    DISPATCH_BACKENDS,
    Buffer,
    CycleWork,
    DcAddress,
    DispatchPlan,
    DispatchResult,
    DispatchWork,
    KernelCostResult,
    KernelCostWork,
    KernelResources,
    Lane,
    LatencyWork,
    LoadedResult,
    LoadedWork,
    ProxyRateWork,
    RateResult,
    RateWork,
    RespondWork,
    Shape,
)

SUBMITTER_MODULES = (
    "gicbench.submit.host",
    "gicbench.submit.gpu",
    "gicbench.submit.proxy",
    "gicbench.submit.doca.submitter",
    "gicbench.submit.nvshmem.submitter",
)
_REGISTRY: dict[str, type[Submitter]] = {}


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

    @classmethod
    def point_fields(cls, params: Any, shape: Shape, point: Mapping[str, Any]) -> dict[str, Any]:
        """Parameters of this submitter that a `shape` point carries besides the experiment's
        own (`point`), recorded with it and shown as columns headed by `point_headers`: e.g.
        mini-proxy's workers and rings for a loaded round trip. Default: none."""
        return {}

    point_headers: ClassVar[dict[str, str]] = {}  # point_fields' keys -> short column headers

    # ---- RATE: pre-flight -----------------------------------------------------------------
    @classmethod
    def check_rate_lanes(cls, params: Any, lanes: int) -> None:
        """Refuse (ConfigError), in pre-flight, knobs that cannot drive a rate loop over `lanes`
        lanes (-q x the rank's destinations: known once the rank's pattern is, so called from
        the experiment's check_rank). Default: anything goes."""
        return None

    # ---- LOADED: pre-flight ---------------------------------------------------------------
    @classmethod
    def loaded_lanes(cls, params: Any, background: int) -> int:
        """Lanes (QPs towards the peer) a loaded round trip with `background` producers
        drives; bring-up makes at least this many per peer."""
        raise NotImplementedError(f"submitter {cls.name} has no loaded loop")

    @classmethod
    def loaded_queues(cls, params: Any) -> tuple[str, ...]:
        """The probe queues ("shared", "reserved") these knobs can run: the default sweep of a
        loaded round trip."""
        return ("shared", "reserved")

    @classmethod
    def check_loaded(
        cls,
        params: Any,
        *,
        queues: Sequence[str],
        background: int,
        batch: int,
        max_size: int,
        sq_depth: int,
    ) -> None:
        """Refuse (ConfigError), in pre-flight, a loaded round trip these knobs cannot run."""
        return None

    # ---- PROXY_RATE: pre-flight -----------------------------------------------------------
    @classmethod
    def proxy_rate_producers(cls, params: Any, rings: int) -> int:
        """Producers that fill `rings` rings in a proxy-rate point with these knobs."""
        raise NotImplementedError(f"submitter {cls.name} has no proxy-rate loop")

    # ---- DISPATCH: pre-flight -------------------------------------------------------------
    @classmethod
    def dispatch_backends(
        cls, params: Any, provider: str, provider_params: Any
    ) -> dict[str, str | None]:
        """For each dispatch backend (work.DISPATCH_BACKENDS): None when these knobs can run it
        on `provider` (with its own knobs `provider_params`), else the reason it cannot. The
        experiment refuses a chosen backend with its reason in pre-flight. Default: none."""
        return {b: f"submitter {cls.name} has no dispatch loop" for b in DISPATCH_BACKENDS}

    # ---- KERNEL_COST: pre-flight ----------------------------------------------------------
    @classmethod
    def kernel_cost_refusal(cls, params: Any) -> str | None:
        """Why this submitter cannot run kernel-cost with these knobs, where it has more to say
        than that it lacks the shape (a path planned but not built; knobs its loop refuses).
        Asked before the shape check. Default: nothing to add."""
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

    def attach_peers(self, rc: Mapping[int, Sequence[QueuePair]], world: int) -> None:
        """Called once after attach_queues with this rank's RC QPs by peer rank (lane i towards
        a peer rides rc[peer][i]) and the number of ranks: for a library that chooses the QP
        itself and keeps its own table by peer and slot (NVSHMEM). Default: nothing."""
        return None

    def latency(self, work: LatencyWork) -> np.ndarray:
        """Per-operation samples (int64 ns) of `work.iters` operations."""
        raise NotImplementedError(f"submitter {self.name} has no latency loop")

    def respond(self, work: RespondWork) -> None:
        raise NotImplementedError(f"submitter {self.name} has no responder loop")

    def rate(self, work: RateWork) -> RateResult:
        raise NotImplementedError(f"submitter {self.name} has no rate loop")

    def loaded(self, work: LoadedWork) -> LoadedResult:
        """A probe's round trip (or its answer) under background load (Shape.LOADED)."""
        raise NotImplementedError(f"submitter {self.name} has no loaded loop")

    def proxy_rate(self, work: ProxyRateWork) -> RateResult:
        """Rings drained by workers in chains (Shape.PROXY_RATE)."""
        raise NotImplementedError(f"submitter {self.name} has no proxy-rate loop")

    def cycle(self, work: CycleWork) -> RateResult:
        """Units cycling an active subset of connections, W writes per visit (Shape.CYCLE):
        the rate over the timed visits, the final drain included."""
        raise NotImplementedError(f"submitter {self.name} has no connection-cycling loop")

    def dispatch(self, work: DispatchWork) -> DispatchResult:
        """MoE token dispatch (Shape.DISPATCH): per iteration the send kernel, the delay kernel
        when the plan has a wait, then the receive kernel, a host barrier between iterations."""
        raise NotImplementedError(f"submitter {self.name} has no dispatch loop")

    def kernel_cost(self, work: KernelCostWork) -> KernelCostResult:
        """A caller kernel with the communication call built in (Shape.KERNEL_COST): paired
        timed passes of the variant and its reference, resources and the caller's output."""
        raise NotImplementedError(f"submitter {self.name} has no kernel-cost loop")

    def proxy_rate_lane_messages(
        self, workers: int, rings: int, producers: int, per_producer: int
    ) -> list[int]:
        """How far into its slots each worker's lane is written by a proxy-rate call (lane
        l's k-th message in slot k mod slots), for validation."""
        raise NotImplementedError(f"submitter {self.name} has no proxy-rate loop")

    @contextlib.contextmanager
    def locked_clock(self, mhz: int) -> Iterator[float]:
        """The SM clock of the GPU this submitter's loops run on, locked at `mhz` inside the
        block and restored however it ends; yields the clock measured in a kernel (Hz), after
        checking that the lock held (Shape.CLOCK)."""
        raise NotImplementedError(f"submitter {self.name} has no clock control")
        yield 0.0

    def rate_lane_messages(
        self, nlanes: int, threads: int, batch: int, per_thread: int
    ) -> list[int] | None:
        """Messages each lane of a rate call carries, where this submitter hands them out
        differently from msg-rate's thread-per-lane rule (None: that rule)."""
        return None

    def point_details(self) -> dict[str, Any]:
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


# The contract's work types, importable from here as from app/submit/work.py.
__all__ = [
    "DISPATCH_BACKENDS",
    "Buffer",
    "CycleWork",
    "DcAddress",
    "DispatchPlan",
    "DispatchResult",
    "DispatchWork",
    "KernelCostResult",
    "KernelCostWork",
    "KernelResources",
    "Lane",
    "LatencyWork",
    "LoadedResult",
    "LoadedWork",
    "NoParams",
    "ProxyRateWork",
    "RateResult",
    "RateWork",
    "RespondWork",
    "Shape",
    "Submitter",
    "catalog",
    "get",
    "names",
    "register",
]
