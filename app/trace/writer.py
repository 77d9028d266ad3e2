"""Per-rank trace writer: one HDF5 file per rank, written under a temporary name.

The file is created as `rank-NNNNN.h5.partial` with status "incomplete" and renamed to
`rank-NNNNN.h5` by finish() or abort(); a rank killed outright leaves only the .partial file,
which readers treat as incomplete. Every point is flushed when it closes, so a killed run still
leaves the points it finished readable. The digests of schema 2 (schema.py) are computed here
from the values as they are written.

A full disk: before each write of a point's data (samples one chunk at a time) the writer checks
that the file system has room for it plus SPACE_RESERVE_BYTES, which it keeps back for what
HDF5's chunk cache has yet to write and so that abort() can still mark the trace incomplete
and close it. Too little room, or any write that fails anyway (a quota, another
process filling the disk), stops the writer with one TraceError naming the file, what it was
writing and the bytes it needed. HDF5 cannot be trusted to write again after one of its writes
failed, so then the writer only closes the file; the .partial is kept if it is an HDF5 file
(its closed points stay readable) and removed if it is not (nothing in it can be read).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import h5py
import numpy as np

from gicbench.errors import TraceError

from . import schema
from .provenance import git_revision, tool_version, utc_now

# HDF5's chunk cache per dataset: samples written but not yet on disk are at most this much.
CHUNK_CACHE_BYTES = 1 << 20
# Room kept free: what the chunk cache may still write, then abort()'s final attributes,
# HDF5's metadata flush and the rename.
SPACE_RESERVE_BYTES = CHUNK_CACHE_BYTES + (1 << 20)
# What HDF5 adds to a write besides the payload (object headers, B-tree nodes, the flush).
WRITE_OVERHEAD_BYTES = 4096
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on the file system holding `path`."""
    return shutil.disk_usage(path).free


_NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_HDF5_CAUSE = re.compile(r"errno = (\d+), error message = '([^']*)'")


def _cause(exc: BaseException) -> str:
    """The cause of a failed write in a few words (HDF5's message spans lines)."""
    errnum = getattr(exc, "errno", None)
    found = _HDF5_CAUSE.search(str(exc))
    if found and errnum is None:
        errnum = int(found.group(1))
    if errnum in _NO_SPACE:
        return f"no space left on device ({os.strerror(errnum)})"
    if errnum is not None:
        return os.strerror(errnum)
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {first}"


def _is_write_failure(exc: BaseException) -> bool:
    """h5py raises OSError or RuntimeError when HDF5's I/O fails; ValueError or KeyError only
    for misuse, unless HDF5's message shows a failed write underneath."""
    if isinstance(exc, (OSError, RuntimeError)):
        return True
    return "write failed" in str(exc) or _HDF5_CAUSE.search(str(exc)) is not None


# HDF5 closes an object when its last Python reference goes; when that close has to write and
# the write fails, h5py reports it as an "unraisable" exception with a traceback on stderr, and
# nothing else learns of it. The hooks below hand such reports about a file a TraceWriter
# writes to that writer (its next operation fails with the cause), and pass every other report
# on unchanged.
_writers: weakref.WeakValueDictionary[str, TraceWriter] = weakref.WeakValueDictionary()
_failed_paths: set[str] = set()  # files whose writes failed: HDF5 may still report on them
_hooked = False


def _is_h5py_dealloc(tb: TracebackType | None) -> bool:
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename.endswith("_objects.pyx") and "dealloc" in code.co_name:
            return True
        tb = tb.tb_next
    return False


def _claim(exc: BaseException | None) -> bool:
    """Give an h5py close failure to the writer of its file; True if one took it."""
    text = str(exc)
    claimed = False
    for path in [*_writers.keys(), *_failed_paths]:
        if path in text:
            claimed = True
            writer = _writers.get(path)
            if writer is not None and writer._late_failure is None:
                writer._late_failure = exc
    # One that names no file follows one that did: HDF5's state is broken already.
    return claimed or ("filename = " not in text and bool(_failed_paths))


def _install_hooks() -> None:
    global _hooked
    if _hooked:
        return
    _hooked = True
    previous_unraisable, previous_except = sys.unraisablehook, sys.excepthook

    def unraisable(report: Any) -> None:
        if "ObjectID.__dealloc__" in str(report.object) and _claim(report.exc_value):
            return
        previous_unraisable(report)

    def excepthook(kind: type[BaseException], value: BaseException,
                   tb: TracebackType | None) -> None:
        # h5py prints the traceback of a failed close through sys.excepthook first.
        if _is_h5py_dealloc(tb) and _claim(value):
            return
        previous_except(kind, value, tb)

    sys.unraisablehook, sys.excepthook = unraisable, excepthook


class PointWriter:
    """One sweep point: parameters, raw samples per metric, NIC counters and derived results."""

    def __init__(self, owner: TraceWriter, group: h5py.Group, index: int,
                 values: dict[str, Any]) -> None:
        self._owner = owner
        self._group = group
        self.index = index
        self._samples = group.create_group(schema.SAMPLES_GROUP)
        self._results: dict[str, Any] = {}
        # The digested attributes as a reader will decode them, and each dataset's running hash.
        self._values = {k: v for k, v in values.items() if k in schema.POINT_DIGEST_KEYS}
        self._hashes: dict[str, Any] = {}
        self._counts: dict[str, int] = {}
        self.closed = False

    def _check_open(self) -> None:
        if self.closed:
            raise TraceError(f"point {self.index} is closed; begin a new point to write more")
        if self._owner.finished:
            raise TraceError(f"point {self.index}: the trace was already finished or aborted")

    def _set(self, values: dict[str, Any]) -> None:
        schema.encode_attrs(self._group.attrs, values)
        self._values.update({k: schema.stored_form(v) for k, v in values.items()})

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
        arr = np.ascontiguousarray(arr, dtype=schema.SAMPLE_DTYPE)
        what = f"{arr.nbytes:,} bytes of samples {metric} of point {self.index}"
        digest = self._hashes.setdefault(metric, schema.samples_hash())
        # One chunk at a time: the room checked for is one chunk's, however large the point.
        for start in range(0, max(arr.size, 1), schema.SAMPLE_CHUNK):
            part = arr[start : start + schema.SAMPLE_CHUNK]
            with self._owner._writing(what, part.nbytes):
                self._append(metric, part, arr.size)
            digest.update(part.data)
            self._counts[metric] = self._counts.get(metric, 0) + part.size

    def _append(self, metric: str, part: np.ndarray, total: int) -> None:
        if metric in self._samples:
            ds = self._samples[metric]
            start = ds.shape[0]
            ds.resize((start + part.size,))
            ds[start:] = part
        else:
            chunk = (min(schema.SAMPLE_CHUNK, max(total, 1024)),)
            self._samples.create_dataset(
                metric, data=part, maxshape=(None,), chunks=chunk, dtype=schema.SAMPLE_DTYPE,
                compression="gzip", compression_opts=1, shuffle=True, fletcher32=True,
            )

    def set_counters(self, before: dict[str, int], after: dict[str, int]) -> None:
        """NIC counters sampled before and after the point; the analysis computes deltas."""
        self._check_open()
        for name, counters in (("before", before), ("after", after)):
            if not isinstance(counters, dict):
                raise TraceError(f"counters {name} must be a dict, got {type(counters).__name__}")
        values = {
            "counters_before": {str(k): int(v) for k, v in before.items()},
            "counters_after": {str(k): int(v) for k, v in after.items()},
        }
        with self._owner._writing(f"the NIC counters of point {self.index}"):
            self._set(values)

    def set_results(self, d: dict[str, Any]) -> None:
        """Derived numbers the rank computed (msg_rate_mps, bytes_moved, validated, ...).

        Calls merge: a later value for the same key replaces the earlier one.
        """
        self._check_open()
        if not isinstance(d, dict):
            raise TraceError(f"results must be a dict, got {type(d).__name__}")
        self._results.update({str(k): v for k, v in d.items()})
        text = schema.to_json(self._results)
        with self._owner._writing(f"the results of point {self.index}", len(text)):
            self._set({"results": self._results})

    def close(self) -> None:
        """Mark the point closed and seal it with its digest (sample_digests, then digest)."""
        if self.closed:
            return
        sample_digests = {
            m: {"n": self._counts[m], "sha256": h.hexdigest()} for m, h in self._hashes.items()
        }
        with self._owner._writing(f"the end of point {self.index}", space=False):
            self._set({"closed": True, schema.SAMPLE_DIGESTS_ATTR: sample_digests})
            schema.set_text(self._group.attrs, schema.DIGEST_ATTR,
                            schema.point_digest(self.index, self._values))
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
        self._file: h5py.File | None = None
        # Why writing stopped: too little room (the file is intact) or a failed write (broken).
        self._stopped: str | None = None
        self._broken: str | None = None
        self._late_failure: BaseException | None = None
        self._root: dict[str, Any] = {}
        self._next_index = 0
        self._open_point: PointWriter | None = None
        _install_hooks()
        _writers[str(self.partial_path)] = self
        root = {
            "schema": schema.SCHEMA_VERSION,
            "tool_version": tool_version(),
            "git_rev": git_revision(),
            "rank": rank,
            "world_size": world_size,
            "start_utc": utc_now(),
            "status": schema.STATUS_INCOMPLETE,
        }
        try:
            with self._writing("the file's first attributes"):
                # "x": create exclusively, so a file that appeared since the check is never
                # truncated.
                try:
                    self._file = h5py.File(self.partial_path, "x", libver=schema.FILE_LIBVER,
                                           rdcc_nbytes=CHUNK_CACHE_BYTES)
                except FileExistsError:
                    raise TraceError(
                        f"{self.partial_path} appeared while opening: another run writes this "
                        "directory"
                    ) from None
                self._set_root({**root, **meta})
                self._points = self._file.create_group(schema.POINTS_GROUP)
                self._file.flush()
        except TraceError:
            if self._file is not None or self._broken is not None:
                self._give_up()
            raise

    @property
    def finished(self) -> bool:
        return self._file is None

    def _require_file(self) -> h5py.File:
        if self._file is None:
            raise TraceError(f"trace of rank {self.rank} is already finished ({self.final_path})")
        return self._file

    def _set_root(self, values: dict[str, Any]) -> None:
        assert self._file is not None
        schema.encode_attrs(self._file.attrs, values)
        self._root.update({k: schema.stored_form(v) for k, v in values.items()})

    @contextlib.contextmanager
    def _writing(self, what: str, nbytes: int = 0, *, space: bool = True,
                 closing: bool = False) -> Iterator[None]:
        """Every write goes through here and turns a failure into one TraceError. space: check
        the room for `what` (`nbytes` of payload) first; the small writes that seal a point or
        flush it do not, they use the reserve. closing: the writes of finish() and abort(),
        which a writer stopped for want of room still makes."""
        if self._broken is not None:
            raise TraceError(self._broken)
        if self._stopped is not None and not closing:
            raise TraceError(self._stopped)
        if space:
            need = nbytes + WRITE_OVERHEAD_BYTES + SPACE_RESERVE_BYTES
            free = free_bytes(self.run_dir)
            if free < need:
                self._stopped = (
                    f"cannot write {self.partial_path}: no space for {what}: {free:,} bytes "
                    f"free on its file system, {need:,} needed ({nbytes + WRITE_OVERHEAD_BYTES:,}"
                    f" to write next, {SPACE_RESERVE_BYTES:,} kept back to close the trace)")
                raise TraceError(self._stopped)
        try:
            yield
        except TraceError:
            raise
        except (OSError, RuntimeError, ValueError, KeyError) as exc:
            if not _is_write_failure(exc):
                raise  # a mistake of the caller's (a bad name, say), not the file system's
            self._broken = f"cannot write {self.partial_path}: {_cause(exc)} (writing {what})"
            raise TraceError(self._broken) from None
        if self._late_failure is not None:
            self._broken = (f"cannot write {self.partial_path}: {_cause(self._late_failure)} "
                            f"(writing {what})")
            raise TraceError(self._broken)

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
        with self._writing(f"point {index}", len(schema.to_json(values["params"]))):
            group = self._points.create_group(schema.point_name(index))
            self._next_index += 1
            schema.encode_attrs(group.attrs, values)
            point = PointWriter(self, group, index,
                                {k: schema.stored_form(v) for k, v in values.items()})
        self._open_point = point
        return point

    def _point_closed(self, point: PointWriter) -> None:
        if self._open_point is point:
            self._open_point = None
        if self._file is not None:
            with self._writing(f"point {point.index} to disk", space=False):
                self._file.flush()

    def _close_and_rename(self, status: str, failure: str | None) -> None:
        f = self._require_file()
        values: dict[str, Any] = {"status": status, "end_utc": utc_now(),
                                  schema.POINT_COUNT_ATTR: self._next_index}
        if failure is not None:
            values["failure"] = failure
        try:
            with self._writing("the trace's final attributes", space=False, closing=True):
                self._set_root(values)
                schema.set_text(f.attrs, schema.DIGEST_ATTR, schema.root_digest(self._root))
                f.close()
                self._file = None
                fd = os.open(self.partial_path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(self.partial_path, self.final_path)
        except TraceError:
            self._give_up()
            raise
        _writers.pop(str(self.partial_path), None)

    def _give_up(self) -> None:
        """After a failed write: close the file without writing more; keep the .partial only
        if it is an HDF5 file (a reader can still take its closed points from it)."""
        if self._file is not None:
            f, self._file = self._file, None
            with contextlib.suppress(Exception):
                f.close()
        with contextlib.suppress(OSError):
            with open(self.partial_path, "rb") as fh:
                head = fh.read(len(HDF5_SIGNATURE))
            if head != HDF5_SIGNATURE:
                self.partial_path.unlink()
        self._open_point = None
        # HDF5 may still report failed closes of this file as its objects go: keep taking them.
        _failed_paths.add(str(self.partial_path))

    def finish(self, status: str = schema.STATUS_COMPLETE) -> Path:
        """Close the file with `status` and rename it to its final name; returns that path."""
        if status not in schema.FILE_STATUSES:
            raise TraceError(f"invalid status={status!r}: allowed {list(schema.FILE_STATUSES)}")
        self._require_file()
        if self._stopped is not None:  # some points lack data: never call such a trace done
            raise TraceError(self._stopped)
        if self._open_point is not None:
            self._open_point.close()
        self._close_and_rename(status, None)
        return self.final_path

    def abort(self, reason: str) -> Path | None:
        """Mark the trace incomplete with `reason`, close and rename it. No-op once finished.

        An open point is left unclosed so the analysis sees it was interrupted. Never raises:
        this is the failure path. When even this cannot be written, the file is left as
        .partial (see the module docstring) and None is returned.
        """
        if self._file is None:
            return None
        self._open_point = None
        if self._broken is not None:
            self._give_up()
            return None
        try:
            self._close_and_rename(schema.STATUS_INCOMPLETE, str(reason))
        except TraceError:
            return None
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
