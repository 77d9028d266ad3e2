"""Open and validate a run directory; read rank traces point by point, samples on demand.

open_run() refuses what cannot be analysed at all (no manifest, unknown or mixed schema
versions) with TraceError, and records everything else that makes a run incomplete in
Run.problems, so callers decide whether to refuse or to flag. It counts what it expects:

- every rank of world_size has a final file, of this run (run_id, when the run recorded one, and
  the config must match run.json's);
- every point group is readable (attributes and sample datasets), the point indices run 0..N-1
  without gaps, and every rank holds run.json's points_per_rank points (runs from before that
  field: the same number on every rank);
- a point has the same experiment and parameters on every rank;
- sample counts: a point whose parameters give `iters` holds that many samples per dataset; the
  ranks of one role hold the same number of samples of a metric at a point.

Unreadable points are left out of RankTrace.points() (RankTrace.unreadable names them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import h5py
import numpy as np

from gicbench.errors import TraceError

from . import schema
from .manifest import read_manifest

_RANK_FILE = re.compile(r"^rank-(\d{5,})\.h5(\.partial)?$")


@dataclass(frozen=True)
class Point:
    """One sweep point of one rank, without its samples (load those with RankTrace.samples)."""

    index: int
    experiment: str
    params: dict[str, Any]
    results: dict[str, Any]
    counters_before: dict[str, int]
    counters_after: dict[str, int]
    metrics: list[str]
    closed: bool = True

    @property
    def counter_deltas(self) -> dict[str, int]:
        """after - before for every counter present in both."""
        return {
            k: self.counters_after[k] - self.counters_before[k]
            for k in self.counters_after
            if k in self.counters_before
        }


class RankTrace:
    """The trace file of one rank. The file is opened on first use and kept until close()."""

    def __init__(self, path: Path, rank: int, attrs: dict[str, Any], partial: bool,
                 unreadable: Sequence[str] = ()) -> None:
        self.path = path
        self.rank = rank
        self.attrs = attrs
        self.partial = partial
        self.unreadable = frozenset(unreadable)  # point group names open_run could not read
        self._file: h5py.File | None = None

    @property
    def status(self) -> str:
        return schema.STATUS_INCOMPLETE if self.partial else str(self.attrs.get("status"))

    def _h5(self) -> h5py.File:
        if self._file is None:
            self._file = _open_h5(self.path)
        return self._file

    def _point_group(self, index: int) -> h5py.Group:
        points = self._h5().get(schema.POINTS_GROUP)
        name = schema.point_name(index)
        if points is None or name not in points:
            raise TraceError(f"{self.path.name}: no point {index}")
        return points[name]

    def point_count(self) -> int:
        points = self._h5().get(schema.POINTS_GROUP)
        return 0 if points is None else len(points)

    def points(self) -> Iterator[Point]:
        points = self._h5().get(schema.POINTS_GROUP)
        if points is None:
            return
        for name in sorted(points):
            if name not in self.unreadable:
                yield _point_from_group(int(name), points[name])

    def point(self, index: int) -> Point:
        return _point_from_group(index, self._point_group(index))

    def samples(self, point_index: int, metric: str) -> np.ndarray:
        """Raw samples (int64 ns) of one metric of one point, read from disk now."""
        samples = self._point_group(point_index).get(schema.SAMPLES_GROUP)
        if samples is None or metric not in samples:
            have = [] if samples is None else sorted(samples)
            raise TraceError(
                f"{self.path.name}: point {point_index} has no metric {metric!r} (has {have})"
            )
        return samples[metric][()]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> RankTrace:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RankTrace(rank={self.rank}, path={str(self.path)!r}, status={self.status!r})"


@dataclass
class Run:
    """A validated run directory. status is "complete" only when problems is empty."""

    path: Path
    manifest: dict[str, Any]
    ranks: list[RankTrace]
    problems: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        return schema.STATUS_INCOMPLETE if self.problems else schema.STATUS_COMPLETE

    @property
    def world_size(self) -> int:
        return int(self.manifest["world_size"])

    @property
    def experiments(self) -> list[str]:
        exps = self.manifest.get("experiments") or []
        return [exps] if isinstance(exps, str) else list(exps)

    def close(self) -> None:
        for rank in self.ranks:
            rank.close()

    def __enter__(self) -> Run:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _open_h5(path: Path) -> h5py.File:
    # locking=False: a .partial file may still be held by a live (or dead) writer.
    return h5py.File(path, "r", locking=False)


_POINT_KEYS = ("experiment", "params", "results", "counters_before", "counters_after", "closed")


def _point_from_group(index: int, group: h5py.Group) -> Point:
    # Only the attributes a Point needs: each h5py attribute read costs tens of µs, and the
    # scalar copies of the params would double the reads.
    if not isinstance(group, h5py.Group):
        raise TraceError(f"point {index} is not a group")
    attrs = schema.decode_attrs(group.attrs, _POINT_KEYS)
    for key in ("params", "results", "counters_before", "counters_after"):
        if attrs.get(key) is not None and not isinstance(attrs[key], dict):
            raise TraceError(f"point {index}: {key} is {type(attrs[key]).__name__}, not a dict")
    samples = group.get(schema.SAMPLES_GROUP)
    if samples is not None and not isinstance(samples, h5py.Group):
        raise TraceError(f"point {index}: {schema.SAMPLES_GROUP} is not a group")
    return Point(
        index=index,
        experiment=str(attrs.get("experiment", "")),
        params=dict(attrs.get("params") or {}),
        results=dict(attrs.get("results") or {}),
        counters_before=dict(attrs.get("counters_before") or {}),
        counters_after=dict(attrs.get("counters_after") or {}),
        metrics=[] if samples is None else sorted(samples),
        closed=bool(attrs.get("closed", False)),
    )


# What h5py, the JSON decoder and our own checks raise on damaged bytes.
READ_ERRORS = (OSError, KeyError, ValueError, RuntimeError, TypeError, AttributeError,
               TraceError)


@dataclass
class _Inventory:
    """What one rank file holds, read from attributes and dataset shapes (no sample data)."""

    points: dict[int, Point] = field(default_factory=dict)
    counts: dict[int, dict[str, int]] = field(default_factory=dict)  # point -> metric -> samples
    unreadable: dict[str, str] = field(default_factory=dict)  # group name -> why


def _inventory(f: h5py.File) -> _Inventory:
    inv = _Inventory()
    points = f.get(schema.POINTS_GROUP)
    if points is None:
        return inv
    if not isinstance(points, h5py.Group):
        raise TraceError(f"/{schema.POINTS_GROUP} is not a group")
    for name in sorted(points):
        try:
            if not name.isdigit():
                raise TraceError("not a point index")
            point = _point_from_group(int(name), points[name])
            samples = points[name].get(schema.SAMPLES_GROUP)
            counts = {m: int(samples[m].shape[0]) for m in point.metrics} if samples else {}
        except READ_ERRORS as exc:
            inv.unreadable[name] = f"{type(exc).__name__}: {exc}"
            continue
        inv.points[point.index] = point
        inv.counts[point.index] = counts
    return inv


def _scan_rank_files(run_dir: Path) -> dict[int, list[Path]]:
    found: dict[int, list[Path]] = {}
    for entry in run_dir.iterdir():
        m = _RANK_FILE.match(entry.name)
        if m:
            found.setdefault(int(m.group(1)), []).append(entry)
    return found


def _check_schemas(run_dir: Path, versions: dict[str, str]) -> None:
    known = list(schema.KNOWN_SCHEMAS)
    distinct = sorted(set(versions.values()))
    if len(distinct) > 1:
        listing = ", ".join(f"{name}={ver}" for name, ver in sorted(versions.items()))
        raise TraceError(
            f"mixed schema versions in {run_dir}: {listing} (known: {known}); "
            "files from different gicbench versions cannot be analysed together"
        )
    for name, ver in versions.items():
        if ver not in schema.KNOWN_SCHEMAS:
            raise TraceError(
                f"unknown trace schema version {ver!r} in {run_dir / name} (known: {known}); "
                "it was written by a different gicbench version"
            )


def open_run(run_dir: Path | str) -> Run:
    """Open a run directory, validate it and return a Run (rank files are read lazily)."""
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    versions = {schema.MANIFEST_NAME: str(manifest.get("schema"))}
    world_size = manifest.get("world_size")
    if not isinstance(world_size, int) or world_size < 1:
        _check_schemas(run_dir, versions)
        raise TraceError(f"{run_dir / schema.MANIFEST_NAME}: invalid world_size={world_size!r}")

    problems: list[str] = []
    status = manifest.get("status")
    if status == schema.STATUS_RUNNING:
        problems.append("run.json status is 'running': rank 0 never finished the run (killed?)")
    elif status != schema.STATUS_COMPLETE:
        detail = f": {manifest['reason']}" if manifest.get("reason") else ""
        failed = manifest.get("failed_ranks")
        extra = f" (failed ranks: {failed})" if failed else ""
        problems.append(f"run.json status is {status!r}{detail}{extra}")

    found = _scan_rank_files(run_dir)
    for rank in sorted(r for r in found if r >= world_size):
        names = ", ".join(p.name for p in found[rank])
        problems.append(f"unexpected file {names}: world_size is {world_size}")

    ranks: list[RankTrace] = []
    inventories: dict[int, _Inventory] = {}
    for rank in range(world_size):
        final = schema.rank_file(run_dir, rank)
        partial = schema.partial_file(run_dir, rank)
        if final.exists():
            path, is_partial = final, False
            if partial.exists():
                problems.append(f"rank {rank}: stale {partial.name} next to {final.name}")
        elif partial.exists():
            path, is_partial = partial, True
            problems.append(
                f"rank {rank}: only {partial.name} (the rank was killed or is still running)"
            )
        else:
            problems.append(f"rank {rank}: trace file {final.name} is missing")
            continue
        try:
            with _open_h5(path) as f:
                attrs = schema.decode_attrs(f.attrs)
                inv = _inventory(f)
        except READ_ERRORS as exc:
            problems.append(f"rank {rank}: cannot read {path.name}: {exc}")
            continue
        versions[path.name] = str(attrs.get("schema"))
        problems += _rank_problems(rank, path, attrs, manifest, is_partial)
        if inv.unreadable:
            listing = ", ".join(f"{n} ({why})" for n, why in list(inv.unreadable.items())[:5])
            problems.append(f"rank {rank}: {len(inv.unreadable)} unreadable point(s) in "
                            f"{path.name}: {listing}")
        interrupted = sorted(i for i, p in inv.points.items() if not p.closed)
        if interrupted:
            problems.append(f"rank {rank}: points {interrupted} were interrupted")
        inventories[rank] = inv
        ranks.append(RankTrace(path, rank, attrs, is_partial, tuple(inv.unreadable)))

    _check_schemas(run_dir, versions)
    problems += _count_problems(manifest, inventories)
    return Run(path=run_dir, manifest=manifest, ranks=ranks, problems=problems)


def _rank_problems(rank: int, path: Path, attrs: dict[str, Any], manifest: dict[str, Any],
                   is_partial: bool) -> list[str]:
    """What ties (or fails to tie) one rank file to this run."""
    problems: list[str] = []
    world_size = manifest["world_size"]
    if attrs.get("rank") != rank:
        problems.append(f"rank {rank}: {path.name} says rank={attrs.get('rank')!r}")
    if attrs.get("world_size") != world_size:
        problems.append(
            f"rank {rank}: {path.name} says world_size={attrs.get('world_size')!r}, "
            f"run.json says {world_size}"
        )
    if not is_partial and attrs.get("status") != schema.STATUS_COMPLETE:
        why = f" ({attrs['failure']})" if attrs.get("failure") else ""
        problems.append(f"rank {rank}: status {attrs.get('status')!r}{why}")
    run_id, own = manifest.get(schema.RUN_ID), attrs.get(schema.RUN_ID)
    if (run_id is not None or own is not None) and own != run_id:
        problems.append(f"rank {rank}: {path.name} belongs to run {own!r}, run.json is run "
                            f"{run_id!r} (a file from another run?)")
    config = attrs.get("config")
    theirs = manifest.get("config")
    if config is not None and theirs is not None and _canonical(config) != _canonical(theirs):
        problems.append(f"rank {rank}: {path.name} was written with another config than "
                        "run.json's (a file from another run?)")
    return problems


def _canonical(value: Any) -> str:
    return json.dumps(json.loads(schema.to_json(value)), sort_keys=True)


def _count_problems(manifest: dict[str, Any], inventories: dict[int, _Inventory]) -> list[str]:
    """Points per rank, the same points on every rank, and sample counts."""
    problems: list[str] = []
    expected = manifest.get(schema.POINTS_PER_RANK)
    if expected is not None and (not isinstance(expected, int) or isinstance(expected, bool)
                                 or expected < 0):
        problems.append(f"run.json: invalid points_per_rank={expected!r}")
        expected = None
    for rank, inv in sorted(inventories.items()):
        found = sorted(inv.points)
        have = len(found) + len(inv.unreadable)
        top = max([*found, *(int(n) for n in inv.unreadable if n.isdigit())], default=-1)
        gaps = sorted(set(range(top + 1)) - set(found)
                      - {int(n) for n in inv.unreadable if n.isdigit()})
        if gaps:
            problems.append(f"rank {rank}: points {_span(gaps)} are missing")
        if expected is not None and have < expected:
            problems.append(f"rank {rank}: {have} of {expected} points (run.json "
                            "points_per_rank)")
        elif expected is not None and have > expected:
            problems.append(f"rank {rank}: {have} points, run.json says {expected}")
    if expected is None and inventories:
        sizes = {r: len(inv.points) + len(inv.unreadable) for r, inv in inventories.items()}
        if len(set(sizes.values())) > 1:
            most = max(sizes.values())
            short = {r: n for r, n in sizes.items() if n != most}
            problems.append(f"ranks hold different numbers of points: {most} on most, "
                            f"{short} on others")
    problems += _point_agreement(inventories)
    return problems


def _point_agreement(inventories: dict[int, _Inventory]) -> list[str]:
    problems: list[str] = []
    reference: dict[int, tuple[int, Point]] = {}
    role_counts: dict[tuple[int, str, str], dict[int, int]] = {}
    role_metrics: dict[tuple[int, str], dict[int, list[str]]] = {}
    for rank, inv in sorted(inventories.items()):
        for index, point in sorted(inv.points.items()):
            role = str(point.results.get("role") or "")
            role_metrics.setdefault((index, role), {})[rank] = point.metrics
            ref = reference.setdefault(index, (rank, point))
            if ref[1].experiment != point.experiment or _canonical(ref[1].params) != _canonical(
                    point.params):
                problems.append(
                    f"rank {rank}: point {index} is {point.experiment} {point.params}, rank "
                    f"{ref[0]} has {ref[1].experiment} {ref[1].params} (a file from another "
                    "run?)")
            iters = point.params.get("iters")
            # A sender measures each of its destinations in turn: iters samples per destination.
            dests = point.results.get("destinations", 1)
            for metric, n in inv.counts.get(index, {}).items():
                if isinstance(iters, int) and not isinstance(iters, bool) and isinstance(
                        dests, int) and n != iters * dests:
                    problems.append(f"rank {rank}: point {index} {metric} has {n} samples, "
                                    f"its iters is {iters} x {dests} destination(s)")
                role_counts.setdefault((index, role, metric), {})[rank] = n
    for (index, role), by_rank in sorted(role_metrics.items()):
        if len({tuple(m) for m in by_rank.values()}) > 1:
            problems.append(f"point {index}: ranks{' of role ' + role if role else ''} "
                            f"record different sample datasets {by_rank}")
    for (index, role, metric), by_rank in sorted(role_counts.items()):
        if len(set(by_rank.values())) > 1:
            problems.append(f"point {index} {metric}: ranks{' of role ' + role if role else ''} "
                            f"hold different sample counts {by_rank}")
    return problems


def _span(indices: list[int]) -> str:
    return str(indices) if len(indices) <= 8 else f"[{indices[0]} .. {indices[-1]}] "\
        f"({len(indices)} points)"
