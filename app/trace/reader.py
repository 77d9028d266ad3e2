"""Open and validate a run directory; read rank traces point by point, samples on demand.

open_run() refuses what cannot be analysed at all (no manifest, unknown or mixed schema
versions, a world_size out of bounds) with TraceError, and records everything else that makes a
run incomplete in Run.problems, so callers decide whether to refuse or to flag. It counts what it
expects (docs/traces.md):

- run.json and rank files are regular files (a FIFO or a device is refused, never opened for
  reading data), run.json at most schema.MAX_MANIFEST_BYTES, world_size at most
  schema.MAX_WORLD_SIZE, point indices and points_per_rank at most schema.MAX_POINTS_PER_RANK;
- schema 2: every closed point matches its digest (its attributes and the count and hash of each
  sample dataset it lists, and exactly those datasets), and every final rank file matches its
  root digest and holds point_count points; the samples themselves are checked against their
  hashes as RankTrace.samples reads them. Schema 1 files have no digests: Run.warnings says so;

- every rank of world_size has a final file, of this run (run_id, when the run recorded one, and
  the config must match run.json's);
- every point group is readable (attributes and sample datasets), the point indices run 0..N-1
  without gaps, and every rank holds run.json's points_per_rank points (runs from before that
  field: the same number on every rank);
- a point has the same experiment and parameters on every rank;
- sample counts: a point whose parameters give `iters` holds that many samples per dataset; the
  ranks of one role hold the same number of samples of a metric at a point.

Unreadable points (damaged ones included) are left out of RankTrace.points()
(RankTrace.unreadable names them).
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

from . import files, schema
from .manifest import read_manifest

_RANK_FILE = re.compile(r"^rank-(\d{5,})\.h5(\.partial)?$")


class TraceWarning(UserWarning):
    """What a reader could not check (a schema without digests); the run is still read."""


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
    # metric -> {"n": count, "sha256": hex} from the point's digest; None where nothing is
    # recorded to check the samples against (schema 1, or a point interrupted before closing).
    sample_digests: dict[str, dict[str, Any]] | None = None

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
        self._points: dict[int, Point] = {}  # what points()/point() read: samples() checks

    @property
    def checked(self) -> bool:
        """Whether this file's schema has digests to check it against."""
        return self.attrs.get("schema") not in schema.UNCHECKED_SCHEMAS

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
                point = _point_from_group(int(name), points[name], self.checked)
                self._points[point.index] = point
                yield point

    def point(self, index: int) -> Point:
        point = _point_from_group(index, self._point_group(index), self.checked)
        self._points[index] = point
        return point

    def samples(self, point_index: int, metric: str) -> np.ndarray:
        """Raw samples (int64 ns) of one metric of one point, read from disk now and checked
        against the hash its point's digest records (TraceError if they differ)."""
        point = self._points.get(point_index) or self.point(point_index)
        samples = self._point_group(point_index).get(schema.SAMPLES_GROUP)
        if samples is None or metric not in samples:
            have = [] if samples is None else sorted(samples)
            raise TraceError(
                f"{self.path.name}: point {point_index} has no metric {metric!r} (has {have})"
            )
        dataset = samples[metric]
        if point.sample_digests is None:
            return dataset[()]
        expected = point.sample_digests.get(metric)
        if expected is None:
            raise TraceError(f"{self.path.name}: point {point_index} samples/{metric} is not "
                             "in the point's digest (added after the point closed?)")
        if dataset.dtype != schema.SAMPLE_DTYPE:
            raise TraceError(f"{self.path.name}: point {point_index} samples/{metric} are "
                             f"{dataset.dtype}, not int64 (damaged)")
        if dataset.shape != (expected["n"],):
            raise TraceError(f"{self.path.name}: point {point_index} samples/{metric} has shape "
                             f"{dataset.shape}, its digest says {expected['n']} samples "
                             "(damaged)")
        data = dataset[()]
        got = schema.samples_hash()
        got.update(np.ascontiguousarray(data).data)
        if got.hexdigest() != expected["sha256"]:
            raise TraceError(f"{self.path.name}: point {point_index} samples/{metric} do not "
                             "match their checksum (damaged)")
        return data

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
    # What the reader could not check (schema 1 files have no digests); not problems.
    warnings: list[str] = field(default_factory=list)

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
    # Regular files only: HDF5 would block opening a FIFO and read a device without end.
    files.check_regular(path)
    # locking=False: a .partial file may still be held by a live (or dead) writer.
    return h5py.File(path, "r", locking=False)


_POINT_KEYS = (*schema.POINT_DIGEST_KEYS, schema.DIGEST_ATTR)


def _point_from_group(index: int, group: h5py.Group, checked: bool = True) -> Point:
    """The point at `index`; TraceError when it is damaged. checked: the file's schema has
    digests, so a closed point must match its own."""
    # Only the attributes a Point needs: each h5py attribute read costs tens of µs, and the
    # scalar copies of the params would double the reads.
    if not isinstance(group, h5py.Group):
        raise TraceError(f"point {index} is not a group")
    attrs = schema.decode_attrs(group.attrs, _POINT_KEYS)
    for key in ("params", "results", "counters_before", "counters_after",
                schema.SAMPLE_DIGESTS_ATTR):
        if attrs.get(key) is not None and not isinstance(attrs[key], dict):
            raise TraceError(f"point {index}: {key} is {type(attrs[key]).__name__}, not a dict")
    samples = group.get(schema.SAMPLES_GROUP)
    if samples is None:
        raise TraceError(f"point {index}: its {schema.SAMPLES_GROUP} group is missing")
    if not isinstance(samples, h5py.Group):
        raise TraceError(f"point {index}: {schema.SAMPLES_GROUP} is not a group")
    closed = attrs.get("closed", False)
    sample_digests = None
    if checked and (closed is not False or schema.DIGEST_ATTR in attrs):
        sample_digests = _check_point_digest(index, attrs, samples)
    return Point(
        index=index,
        experiment=str(attrs.get("experiment", "")),
        params=dict(attrs.get("params") or {}),
        results=dict(attrs.get("results") or {}),
        counters_before=dict(attrs.get("counters_before") or {}),
        counters_after=dict(attrs.get("counters_after") or {}),
        metrics=sorted(samples),
        closed=bool(closed),
        sample_digests=sample_digests,
    )


def _check_point_digest(index: int, attrs: dict[str, Any],
                        samples: h5py.Group) -> dict[str, dict[str, Any]]:
    """The point's attributes match its digest, and its datasets are those it lists, of the
    lengths it records; returns what the samples are checked against when read."""
    recorded = attrs.get(schema.DIGEST_ATTR)
    if recorded is None:
        raise TraceError(f"point {index} has no digest (damaged, or not closed by gicbench)")
    if schema.point_digest(index, attrs) != recorded:
        raise TraceError(f"point {index} does not match its digest (damaged)")
    digests = attrs.get(schema.SAMPLE_DIGESTS_ATTR)
    if not isinstance(digests, dict) or not all(
            isinstance(d, dict) and isinstance(d.get("n"), int) for d in digests.values()):
        raise TraceError(f"point {index}: its digest holds no valid sample_digests")
    have = sorted(samples)
    if have != sorted(digests):
        raise TraceError(f"point {index}: sample datasets {have}, its digest lists "
                         f"{sorted(digests)} (damaged)")
    for metric, expected in digests.items():
        shape, dtype = samples[metric].shape, samples[metric].dtype
        if dtype != schema.SAMPLE_DTYPE:
            raise TraceError(f"point {index}: samples/{metric} are {dtype}, not int64 (damaged)")
        if shape != (expected["n"],):
            raise TraceError(f"point {index}: samples/{metric} has shape {shape}, its digest "
                             f"says {expected['n']} samples (damaged)")
    return digests


# What h5py, the JSON decoder and our own checks raise on damaged bytes.
READ_ERRORS = (OSError, KeyError, ValueError, RuntimeError, TypeError, AttributeError,
               OverflowError, MemoryError, TraceError)


@dataclass
class _Inventory:
    """What one rank file holds, read from attributes and dataset shapes (no sample data)."""

    points: dict[int, Point] = field(default_factory=dict)
    counts: dict[int, dict[str, int]] = field(default_factory=dict)  # point -> metric -> samples
    unreadable: dict[str, str] = field(default_factory=dict)  # group name -> why


def _point_index(name: str) -> int:
    """The index a point group's name stands for; TraceError unless it is one."""
    if not name.isdigit() or schema.point_name(int(name)) != name:
        raise TraceError("not a point name (five or more digits)")
    index = int(name)
    if index >= schema.MAX_POINTS_PER_RANK:
        raise TraceError(f"point index {index} out of range (at most "
                         f"{schema.MAX_POINTS_PER_RANK - 1})")
    return index


def _is_point_index(name: str) -> bool:
    try:
        _point_index(name)
    except TraceError:
        return False
    return True


def _inventory(f: h5py.File, checked: bool) -> _Inventory:
    inv = _Inventory()
    points = f.get(schema.POINTS_GROUP)
    if points is None:
        return inv
    if not isinstance(points, h5py.Group):
        raise TraceError(f"/{schema.POINTS_GROUP} is not a group")
    for name in sorted(points):
        try:
            point = _point_from_group(_point_index(name), points[name], checked)
            samples = points[name][schema.SAMPLES_GROUP]
            counts = {m: int(samples[m].shape[0]) for m in point.metrics}
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


def _world_size(run_dir: Path, manifest: dict[str, Any]) -> int:
    world_size = manifest.get("world_size")
    if (isinstance(world_size, bool) or not isinstance(world_size, int)
            or not 1 <= world_size <= schema.MAX_WORLD_SIZE):
        shown = repr(world_size)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        raise TraceError(f"{run_dir / schema.MANIFEST_NAME}: invalid world_size={shown}: "
                         f"allowed an int in 1..{schema.MAX_WORLD_SIZE}")
    return world_size


def _missing(ranks: list[int]) -> list[str]:
    """One problem per run of consecutive missing ranks (a world of 10^6 with two files is
    one line, not a million)."""
    problems: list[str] = []
    start = 0
    while start < len(ranks):
        end = start
        while end + 1 < len(ranks) and ranks[end + 1] == ranks[end] + 1:
            end += 1
        lo, hi = ranks[start], ranks[end]
        if lo == hi:
            problems.append(f"rank {lo}: trace file {schema.rank_file_name(lo)} is missing")
        else:
            problems.append(f"ranks {lo}..{hi} ({hi - lo + 1} ranks): trace files "
                            "rank-NNNNN.h5 are missing")
        start = end + 1
    return problems


def open_run(run_dir: Path | str) -> Run:
    """Open a run directory, validate it and return a Run (rank files are read lazily)."""
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    versions = {schema.MANIFEST_NAME: str(manifest.get("schema"))}
    try:
        world_size = _world_size(run_dir, manifest)
    except TraceError:
        _check_schemas(run_dir, versions)  # an unknown version explains a strange manifest
        raise

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
    names = {p.name for paths in found.values() for p in paths}

    ranks: list[RankTrace] = []
    inventories: dict[int, _Inventory] = {}
    missing: list[int] = []
    for rank in range(world_size):
        final = schema.rank_file(run_dir, rank)
        partial = schema.partial_file(run_dir, rank)
        if final.name in names:
            path, is_partial = final, False
            if partial.name in names:
                problems.append(f"rank {rank}: stale {partial.name} next to {final.name}")
        elif partial.name in names:
            path, is_partial = partial, True
            problems.append(
                f"rank {rank}: only {partial.name} (the rank was killed or is still running)"
            )
        else:
            missing.append(rank)
            continue
        try:
            with _open_h5(path) as f:
                attrs = schema.decode_attrs(f.attrs)
                checked = attrs.get("schema") not in schema.UNCHECKED_SCHEMAS
                inv = _inventory(f, checked)
                groups = len(f[schema.POINTS_GROUP]) if schema.POINTS_GROUP in f else 0
        except READ_ERRORS as exc:
            problems.append(f"rank {rank}: cannot read {path.name}: {exc}")
            continue
        versions[path.name] = str(attrs.get("schema"))
        problems += _rank_problems(rank, path, attrs, manifest, is_partial)
        if checked and not is_partial:
            problems += _root_problems(rank, path, attrs, groups)
        if inv.unreadable:
            listing = ", ".join(f"{n} ({why})" for n, why in list(inv.unreadable.items())[:5])
            problems.append(f"rank {rank}: {len(inv.unreadable)} unreadable point(s) in "
                            f"{path.name}: {listing}")
        interrupted = sorted(i for i, p in inv.points.items() if not p.closed)
        if interrupted:
            problems.append(f"rank {rank}: points {_span(interrupted)} were interrupted")
        inventories[rank] = inv
        ranks.append(RankTrace(path, rank, attrs, is_partial, tuple(inv.unreadable)))
    problems += _missing(missing)

    _check_schemas(run_dir, versions)
    problems += _count_problems(manifest, inventories)
    warnings = []
    unchecked = sorted(set(versions.values()) & set(schema.UNCHECKED_SCHEMAS))
    if unchecked:
        warnings.append(f"{run_dir} is trace schema {unchecked[0]}, which has no digests: damage "
                        "to its samples or attributes cannot be detected (runs of this gicbench "
                        f"are {schema.SCHEMA_VERSION})")
    return Run(path=run_dir, manifest=manifest, ranks=ranks, problems=problems,
               warnings=warnings)


def _root_problems(rank: int, path: Path, attrs: dict[str, Any], groups: int) -> list[str]:
    """A final schema-2 file matches its root digest and holds the points it says."""
    recorded = attrs.get(schema.DIGEST_ATTR)
    if recorded is None:
        return [f"rank {rank}: {path.name} has no digest (damaged, or not closed by gicbench)"]
    if schema.root_digest(attrs) != recorded:
        return [f"rank {rank}: the attributes of {path.name} do not match its digest (damaged)"]
    count = attrs.get(schema.POINT_COUNT_ATTR)
    if count != groups:
        return [f"rank {rank}: {path.name} holds {groups} point group(s), it was closed with "
                f"{count!r} (damaged)"]
    return []


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
    if config is not None and theirs is None:
        problems.append(f"rank {rank}: {path.name} has a config, run.json has none to check it "
                        "against (run.json damaged or not gicbench's)")
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
                                 or not 0 <= expected <= schema.MAX_POINTS_PER_RANK):
        shown = repr(expected)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        problems.append(f"run.json: invalid points_per_rank={shown}: allowed an int in "
                        f"0..{schema.MAX_POINTS_PER_RANK}")
        expected = None
    for rank, inv in sorted(inventories.items()):
        found = sorted(inv.points)
        have = len(found) + len(inv.unreadable)
        # Indices are bounded (_point_index), so counting up to the largest is bounded too.
        damaged = {int(n) for n in inv.unreadable if _is_point_index(n)}
        top = max([*found, *damaged], default=-1)
        gaps = sorted(set(range(top + 1)) - set(found) - damaged)
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
