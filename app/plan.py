"""A run's plan: the configuration checked against the experiments, the submitter and the
provider, before MPI or any NIC resource exists.

`make_plan(cfg)` builds each experiment's Params from the knob values, refuses knobs that no
chosen experiment or submitter uses, checks the submitter against the experiments' loop shapes
and its own availability here, and derives what bring-up must create. `fabric_plan` adds the
facts only MPI knows (world size, ranks per node, nodes).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .config import RunConfig
from .errors import ConfigError, UnsupportedError
from .experiments import registry
from .experiments.context import Layout, plan_layout
from .experiments.registry import Experiment
from .fabric import registry as providers
from .fabric.base import Posting
from .fabric.registry import FabricPlan, Provider, QueueOptions
from .knobs import build, knob_fields
from .patterns import max_neighbours
from .platform import LazyProbes
from .submit import base as submitters
from .submit.base import Submitter

DEFAULT_DCTS = 1


@dataclass
class RunPlan:
    cfg: RunConfig
    experiments: list[Experiment]
    points: list[tuple[Experiment, list[dict[str, Any]]]]
    submitter: type[Submitter]
    submitter_params: Any
    provider: type[Provider]
    probes: LazyProbes
    provider_params: Any = None

    @property
    def lanes(self) -> int:
        """The most lanes any experiment drives towards one peer."""
        return self.lanes_at(2)

    def lanes_at(self, world_size: int) -> int:
        """The same in a world of `world_size` ranks."""
        return max(e.lanes_per_peer_at(world_size) for e in self.experiments)

    @property
    def uses_dc(self) -> bool:
        return any(e.transport == "dc" for e in self.experiments)

    @property
    def max_message(self) -> int:
        return max(e.max_message for e in self.experiments)

    def rc_qps_per_peer(self, world_size: int = 2) -> int:
        rc = [e.lanes_per_peer_at(world_size) for e in self.experiments if e.transport == "rc"]
        return max([self.cfg.qps_per_peer or 0, *rc, 1])

    def layout(self, world_size: int) -> Layout:
        return plan_layout(
            self.max_message,
            self.lanes_at(world_size),
            max_neighbours(self.cfg.pattern, world_size),
            self.cfg.landing_bytes,
        )

    def dci_count(self, neighbours: int, world_size: int = 2) -> int:
        if not self.uses_dc:
            return 0
        dc = [e.dci_pool(neighbours, world_size) for e in self.experiments if e.transport == "dc"]
        return max(self.cfg.dcis or 0, max(dc))

    def dct_count(self) -> int:
        return (self.cfg.dcts or DEFAULT_DCTS) if self.uses_dc else 0

    def queue_options(self) -> QueueOptions:
        """The submitter's QueueOptions, less the GPI queues' room when no experiment of the run
        creates GPI queues (a provider sizing its memory up front would reserve it for nothing)."""
        qo = self.submitter.queue_options(self.submitter_params, self.cfg.sq_depth)
        if qo.gpis and not any(e.uses_gpi_queues() for e in self.experiments):
            qo = dataclasses.replace(qo, gpis=())
        return qo

    def fabric_plan(self, topo: Any, neighbours: int, layout: Layout) -> FabricPlan:
        """What bring-up creates on a rank with `neighbours` peers, its landing `layout`
        computed once (RunPlan.layout) and passed down."""
        return FabricPlan(
            world_size=topo.size,
            local_size=topo.local_size,
            nodes=topo.nodes,
            rc_peers=neighbours,
            rc_qps_per_peer=self.rc_qps_per_peer(topo.size),
            dcis=self.dci_count(neighbours, topo.size),
            dcts=self.dct_count(),
            sq_depth=self.cfg.sq_depth,
            mr_sizes=(layout.region_bytes, layout.region_bytes * max(1, neighbours)),
            progress=self.cfg.progress,
            autonomous_progress=not self.submitter.cpu_progress,
            mr_domain="host-mapped" if self.submitter.needs_gpu else None,
            queue_options=self.queue_options(),
            params=self.provider_params,
        )


def _used_knobs(
    exps: list[type[Experiment]], sub: type[Submitter], provider: type[Provider]
) -> dict[str, list[str]]:
    used: dict[str, list[str]] = {}
    for e in exps:
        for f in dataclasses.fields(e.Params):
            used.setdefault(f.name, []).append(e.name)
    for f in dataclasses.fields(sub.Params):
        used.setdefault(f.name, []).append(f"--submitter {sub.name}")
    for f in dataclasses.fields(provider.Params):
        used.setdefault(f.name, []).append(f"--provider {provider.name}")
    return used


def all_knobs() -> dict[str, Any]:
    """Every knob a run can take, by field name (shared, experiments', submitters'); the same
    name must be the same Knob object wherever it is declared."""
    out: dict[str, Any] = {f.name: k for f, k in knob_fields(RunConfig)}
    owners = [registry.get(n).Params for n in registry.names()]
    owners += [submitters.get(n).Params for n in submitters.names()]
    owners += [providers.get(n).Params for n in providers.names()]
    for cls in owners:
        for f, k in knob_fields(cls):
            if out.setdefault(f.name, k) is not k:
                raise RuntimeError(f"knob {f.name!r} is declared twice with different meanings")
    return out


def make_plan(cfg: RunConfig, probes: LazyProbes | None = None, *, here: bool = True) -> RunPlan:
    """The checked plan of a run. here=False checks a run that will start elsewhere (a sweep
    file read on a login node): everything but whether this machine can run the submitter and
    the provider."""
    probes = probes if probes is not None else LazyProbes()
    sub = submitters.get(cfg.submitter)
    why = sub.availability(probes) if here else None
    if why is not None:
        raise UnsupportedError(f"submitter {sub.name} is not available here: {why}")
    provider = providers.get(cfg.provider)
    caps = provider.caps(probes)
    if here and not caps.available:
        raise UnsupportedError(f"provider {provider.name} is not available here: {caps.reason}")
    if not set(sub.posting) & set(caps.posting):
        raise UnsupportedError(
            f"submitter {sub.name} posts through {', '.join(sub.posting)}; provider "
            f"{provider.name} offers {', '.join(caps.posting) or 'nothing'}"
        )
    classes = [registry.get(name) for name in cfg.experiments]
    used = _used_knobs(classes, sub, provider)
    for name in cfg.knobs:
        if name not in used:
            known = all_knobs()
            if name not in known:
                raise ConfigError(name, cfg.knobs[name], "a knob of " + ", ".join(cfg.experiments))
            raise ConfigError(
                known[name].label(name),
                cfg.knobs[name],
                f"only with {_owners(name)} (it does nothing for "
                f"{', '.join(cfg.experiments)} with --submitter {sub.name} "
                f"--provider {provider.name})",
            )
    # The submitter's and the provider's typed knobs, built once: experiments ask the
    # submitter's pre-flight questions with them, bring-up and the loops use the same objects.
    sub_params = build(sub.Params, cfg.knobs, sub.name)
    provider_params = build(provider.Params, cfg.knobs, provider.name)
    exps = [cls.from_config(cfg, sub, sub_params) for cls in classes]
    for e in exps:
        if e.transport == "dc" and not caps.dc:
            raise UnsupportedError(f"provider {provider.name} has no DC transport")
        _check_queues_in_memory(e, provider.name, caps)
    if not any(e.transport == "dc" for e in exps):
        for name in ("dcis", "dcts"):
            if getattr(cfg, name) is not None:
                raise ConfigError(
                    f"{name} (--{name})",
                    getattr(cfg, name),
                    "only with --transport dc (no experiment here uses DC)",
                )
    points = [(e, e.points()) for e in exps]
    named = [(e.name, pt) for e, pts in points for pt in pts]
    sub.check_points(sub_params, named)
    sub.check_provider(sub_params, named, provider.name, caps, provider_params)
    plan = RunPlan(cfg, exps, points, sub, sub_params, provider, probes, provider_params)
    plan.layout(2)  # the smallest world: refuses a landing budget too small for any run
    return plan


def _owners(name: str) -> str:
    owners = [
        n
        for n in registry.names()
        if name in {f.name for f in dataclasses.fields(registry.get(n).Params)}
    ]
    owners += [
        f"--submitter {n}"
        for n in submitters.names()
        if name in {f.name for f in dataclasses.fields(submitters.get(n).Params)}
    ]
    owners += [
        f"--provider {n}"
        for n in providers.names()
        if name in {f.name for f in dataclasses.fields(providers.get(n).Params)}
    ]
    return ", ".join(owners)


def _check_queues_in_memory(exp: Experiment, provider: str, caps: Any) -> None:
    """A provider without mlx5 queues in memory (post-send only) cannot run what reads them."""
    if Posting.MLX5_QUEUES.value in caps.posting:
        return
    why = exp.needs_queues_in_memory()
    if why:
        mlx5 = caps.details.get("mlx5_hint", "")
        raise UnsupportedError(
            f"experiment {exp.name}: {why}; provider {provider} has no mlx5 queues in memory "
            f"(it posts through {', '.join(caps.posting)}){'. ' + mlx5 if mlx5 else ''}"
        )
