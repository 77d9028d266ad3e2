"""Per-rank trace writer: one HDF5 file per rank, written under a temporary name.

The file is created as `rank-NNNNN.h5.partial` with status "incomplete" and renamed to
`rank-NNNNN.h5` by finish() or abort(); a rank killed outright leaves only the .partial file,
which readers treat as incomplete. Every point is flushed when it closes, so a killed run still
leaves the points it finished readable.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType
from typing import Any

import h5py
import numpy as np

from gicbench.errors import TraceError

from . import schema
from .provenance import git_revision, tool_version, utc_now


class PointWriter:
    """One sweep point: parameters, raw samples per metric, NIC counters and derived results."""

    def __init__(self, owner: TraceWriter, group: h5py.Group, index: int) -> None:
        self._owner = owner
        self._group = group
        self.index = index
        self._samples = group.create_group(schema.SAMPLES_GROUP)
        self._results: dict[str, Any] = {}
        self.closed = False

    def _check_open(self) -> None:
        if self.closed:
            raise TraceError(f"point {self.index} is closed; begin a new point to write more")
        if self._owner.finished:
            raise TraceError(f"point {self.index}: the trace was already finished or aborted")

    def add_samples(self, metric: str, ns: np.ndarray) -> None:
        """Append raw per-operation samples (integer nanoseconds) to dataset samples/<metric>."""
        self._check_open()
        if not isinstance(metric, str) or not metric or "/" in metric:
            raise TraceError(f"invalid metric name {metric!r}: a non-empty str without '/'")
        arr = np.asarray(ns)
        if arr.ndim != 1:
            raise TraceError(f"samples for {metric!r} must be 1-D, got shape {arr.shape}")
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise TraceError(
                f"samples for {metric!r} must be integer nanoseconds, got dtype {arr.dtype}"
            )
        if np.issubdtype(arr.dtype, np.unsignedinteger) and arr.size and arr.max() > 2**63 - 1:
            raise TraceError(f"samples for {metric!r} overflow int64 nanoseconds")
        arr = arr.astype(schema.SAMPLE_DTYPE, copy=False)
        if metric in self._samples:
            ds = self._samples[metric]
            start = ds.shape[0]
            ds.resize((start + arr.size,))
            ds[start:] = arr
        else:
            chunk = (min(schema.SAMPLE_CHUNK, max(arr.size, 1024)),)
            self._samples.create_dataset(
                metric, data=arr, maxshape=(None,), chunks=chunk, dtype=schema.SAMPLE_DTYPE,
                compression="gzip", compression_opts=1, shuffle=True, fletcher32=True,
            )

    def set_counters(self, before: dict[str, int], after: dict[str, int]) -> None:
        """NIC counters sampled before and after the point; the analysis computes deltas."""
        self._check_open()
        for name, counters in (("before", before), ("after", after)):
            if not isinstance(counters, dict):
                raise TraceError(f"counters {name} must be a dict, got {type(counters).__name__}")
        schema.encode_attrs(
            self._group.attrs,
            {
                "counters_before": {str(k): int(v) for k, v in before.items()},
                "counters_after": {str(k): int(v) for k, v in after.items()},
            },
        )

    def set_results(self, d: dict[str, Any]) -> None:
        """Derived numbers the rank computed (msg_rate_mps, bytes_moved, validated, ...).

        Calls merge: a later value for the same key replaces the earlier one.
        """
        self._check_open()
        if not isinstance(d, dict):
            raise TraceError(f"results must be a dict, got {type(d).__name__}")
        self._results.update({str(k): v for k, v in d.items()})
        schema.encode_attrs(self._group.attrs, {"results": self._results})

    def close(self) -> None:
        if self.closed:
            return
        self._group.attrs["closed"] = True
        self.closed = True
        self._owner._point_closed(self)

    def __enter__(self) -> PointWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # A point interrupted by an exception stays unclosed (closed=False): the reader flags it.
        if exc_type is None:
            self.close()


class TraceWriter:
    """The trace of one rank. Use as a context manager, or call finish()/abort() yourself."""

    def __init__(self, run_dir: Path, rank: int, world_size: int, meta: dict[str, Any]) -> None:
        if not isinstance(world_size, int) or world_size < 1:
            raise TraceError(f"invalid world_size={world_size!r}: a positive int")
        if not isinstance(rank, int) or not 0 <= rank < world_size:
            raise TraceError(f"invalid rank={rank!r}: an int in 0..{world_size - 1}")
        clash = schema.RESERVED_ROOT_ATTRS.intersection(meta)
        if clash:
            raise TraceError(
                f"meta keys {sorted(clash)} are written by the trace itself; reserved: "
                f"{sorted(schema.RESERVED_ROOT_ATTRS)}"
            )
        self.run_dir = Path(run_dir)
        self.rank = rank
        self.world_size = world_size
        self.final_path = schema.rank_file(self.run_dir, rank)
        self.partial_path = schema.partial_file(self.run_dir, rank)
        for existing in (self.final_path, self.partial_path):
            if existing.exists():
                raise TraceError(
                    f"{existing} already exists: refusing to overwrite another run's trace "
                    "(choose a new run directory)"
                )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # "x": create exclusively, so a file that appeared since the check is never truncated.
        try:
            self._file: h5py.File | None = h5py.File(self.partial_path, "x")
        except FileExistsError:
            raise TraceError(
                f"{self.partial_path} appeared while opening: another run writes this directory"
            ) from None
        root = {
            "schema": schema.SCHEMA_VERSION,
            "tool_version": tool_version(),
            "git_rev": git_revision(),
            "rank": rank,
            "world_size": world_size,
            "start_utc": utc_now(),
            "status": schema.STATUS_INCOMPLETE,
        }
        schema.encode_attrs(self._file.attrs, {**root, **meta})
        self._points = self._file.create_group(schema.POINTS_GROUP)
        self._next_index = 0
        self._open_point: PointWriter | None = None
        self._file.flush()

    @property
    def finished(self) -> bool:
        return self._file is None

    def _require_file(self) -> h5py.File:
        if self._file is None:
            raise TraceError(f"trace of rank {self.rank} is already finished ({self.final_path})")
        return self._file

    def begin_point(self, experiment: str, params: dict[str, Any]) -> PointWriter:
        """Start the next point (/points/00000, 00001, ... in call order)."""
        self._require_file()
        if self._open_point is not None:
            raise TraceError(
                f"point {self._open_point.index} is still open: close it before beginning another"
            )
        if not isinstance(experiment, str) or not experiment:
            raise TraceError(f"invalid experiment={experiment!r}: a non-empty str")
        if not isinstance(params, dict):
            raise TraceError(f"params must be a dict, got {type(params).__name__}")
        index = self._next_index
        group = self._points.create_group(schema.point_name(index))
        values: dict[str, Any] = {
            "experiment": experiment,
            "params": dict(params),
            "closed": False,
            "start_utc": utc_now(),
        }
        # Scalar params also as their own attributes so h5ls/h5dump show them directly.
        for key, value in params.items():
            if schema.is_scalar(value) and key not in schema.RESERVED_POINT_ATTRS:
                values[str(key)] = value
        schema.encode_attrs(group.attrs, values)
        self._next_index += 1
        self._open_point = PointWriter(self, group, index)
        return self._open_point

    def _point_closed(self, point: PointWriter) -> None:
        if self._open_point is point:
            self._open_point = None
        if self._file is not None:
            self._file.flush()

    def _close_and_rename(self, status: str, failure: str | None) -> None:
        f = self._require_file()
        values: dict[str, Any] = {"status": status, "end_utc": utc_now()}
        if failure is not None:
            values["failure"] = failure
        schema.encode_attrs(f.attrs, values)
        f.close()
        self._file = None
        fd = os.open(self.partial_path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(self.partial_path, self.final_path)

    def finish(self, status: str = schema.STATUS_COMPLETE) -> Path:
        """Close the file with `status` and rename it to its final name; returns that path."""
        if status not in schema.FILE_STATUSES:
            raise TraceError(f"invalid status={status!r}: allowed {list(schema.FILE_STATUSES)}")
        if self._open_point is not None:
            self._open_point.close()
        self._close_and_rename(status, None)
        return self.final_path

    def abort(self, reason: str) -> Path | None:
        """Mark the trace incomplete with `reason`, close and rename it. No-op once finished.

        An open point is left unclosed so the analysis sees it was interrupted.
        """
        if self._file is None:
            return None
        self._open_point = None
        self._close_and_rename(schema.STATUS_INCOMPLETE, str(reason))
        return self.final_path

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._file is None:
            return
        if exc_type is None:
            self.finish()
        else:
            self.abort(f"{exc_type.__name__}: {exc}")
