"""Open and validate a run directory; read rank traces point by point, samples on demand.

open_run() refuses what cannot be analysed at all (no manifest, unknown or mixed schema
versions) with TraceError, and records everything else that makes a run incomplete (missing
ranks, .partial files, ranks that aborted, interrupted points) in Run.problems, so callers decide
whether to refuse or to flag.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
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

    def __init__(self, path: Path, rank: int, attrs: dict[str, Any], partial: bool) -> None:
        self.path = path
        self.rank = rank
        self.attrs = attrs
        self.partial = partial
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
    attrs = schema.decode_attrs(group.attrs, _POINT_KEYS)
    samples = group.get(schema.SAMPLES_GROUP)
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
                interrupted = [
                    int(name) for name, g in f.get(schema.POINTS_GROUP, {}).items()
                    if not bool(g.attrs.get("closed", False))
                ]
        except (OSError, KeyError, ValueError) as exc:
            problems.append(f"rank {rank}: cannot read {path.name}: {exc}")
            continue
        versions[path.name] = str(attrs.get("schema"))
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
        if interrupted:
            problems.append(f"rank {rank}: points {sorted(interrupted)} were interrupted")
        ranks.append(RankTrace(path, rank, attrs, is_partial))

    _check_schemas(run_dir, versions)
    return Run(path=run_dir, manifest=manifest, ranks=ranks, problems=problems)
