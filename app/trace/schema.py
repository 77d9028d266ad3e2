"""The trace schema: names, versions and the rule for storing values as HDF5 attributes.

Layout of a run directory::

    RUN/run.json            manifest, written by rank 0 (status running -> complete/incomplete);
                            run_id (str) and points_per_rank (int) let the reader check that
                            every rank file belongs to the run and holds every point
    RUN/rank-00000.h5       one file per rank; `rank-00000.h5.partial` while it is being written

Layout of a rank file::

    /                       root attributes: schema, tool_version, git_rev, rank, world_size,
                            start_utc, end_utc, status, failure, and every key of the writer's meta
                            (run_id: the run.json run_id of the run that wrote the file)
    /points/00000           one group per sweep point, in the order the experiment ran them
        attrs               experiment, params (JSON), each scalar param as its own attribute,
                            results (JSON), counters_before/counters_after (JSON), closed
        samples/<metric>    raw per-operation samples, int64 nanoseconds, chunked, extendable

Attribute rule: a scalar (bool, int, float including NaN, str) is stored as a native HDF5
attribute; anything else (dict, list, tuple, None) is stored as a JSON string and its name is
listed in the group's `json_keys` attribute, so a reader decodes exactly those and nothing else.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

SCHEMA_VERSION = "gicbench-trace/1"
KNOWN_SCHEMAS: tuple[str, ...] = (SCHEMA_VERSION,)

MANIFEST_NAME = "run.json"
PARTIAL_SUFFIX = ".partial"
POINTS_GROUP = "points"
SAMPLES_GROUP = "samples"
JSON_KEYS_ATTR = "json_keys"

# Ties a rank file to its run: run.json's run_id and the rank file's root attribute of that name.
RUN_ID = "run_id"
# run.json: how many points every rank file holds when the run completes.
POINTS_PER_RANK = "points_per_rank"

STATUS_COMPLETE = "complete"
STATUS_INCOMPLETE = "incomplete"
STATUS_RUNNING = "running"
FILE_STATUSES = (STATUS_COMPLETE, STATUS_INCOMPLETE)
MANIFEST_STATUSES = (STATUS_RUNNING, STATUS_COMPLETE, STATUS_INCOMPLETE)

# Root attributes the writer owns; meta may not override them.
RESERVED_ROOT_ATTRS = frozenset(
    {"schema", "tool_version", "git_rev", "rank", "world_size", "start_utc", "end_utc",
     "status", "failure", JSON_KEYS_ATTR}
)
# Point attributes the writer owns; params with these names live only inside the params JSON.
RESERVED_POINT_ATTRS = frozenset(
    {"experiment", "params", "results", "counters_before", "counters_after", "closed",
     "start_utc", "index", JSON_KEYS_ATTR}
)

SAMPLE_DTYPE = np.dtype("<i8")
SAMPLE_CHUNK = 1 << 16  # 512 KiB chunks: large enough to stream fast, small enough to append


def rank_file_name(rank: int) -> str:
    return f"rank-{rank:05d}.h5"


def rank_file(run_dir: Path, rank: int) -> Path:
    return Path(run_dir) / rank_file_name(rank)


def partial_file(run_dir: Path, rank: int) -> Path:
    return Path(run_dir) / (rank_file_name(rank) + PARTIAL_SUFFIX)


def point_name(index: int) -> str:
    return f"{index:05d}"


def _json_default(value: object) -> object:
    """JSON for the few non-JSON types experiments hand us (numpy scalars/arrays, paths)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (Path, bytes)):
        return str(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"cannot store {type(value).__name__} in a trace: {value!r}")


def to_json(value: object) -> str:
    # allow_nan: NaN/inf would make invalid JSON; map them to null by pre-cleaning.
    return json.dumps(_clean_floats(value), default=_json_default)  # keeps the caller's order


def _clean_floats(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean_floats(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean_floats(v) for v in value]
    return value


def is_scalar(value: object) -> bool:
    return isinstance(value, (bool, int, float, str, np.bool_, np.integer, np.floating))


def encode_attrs(attrs: Any, values: dict[str, Any]) -> None:
    """Store `values` on an h5py attribute manager following the attribute rule."""
    json_keys = set(_decode_json_keys(attrs))
    for key, value in values.items():
        if not isinstance(key, str) or not key or "/" in key:
            raise ValueError(f"invalid attribute name {key!r}: a non-empty str without '/'")
        if is_scalar(value):
            attrs[key] = value.item() if isinstance(value, np.generic) else value
            json_keys.discard(key)
        else:
            attrs[key] = to_json(value)
            json_keys.add(key)
    attrs[JSON_KEYS_ATTR] = json.dumps(sorted(json_keys))


def _decode_json_keys(attrs: Any) -> list[str]:
    raw = attrs.get(JSON_KEYS_ATTR)
    return [] if raw is None else list(json.loads(_as_str(raw)))


def _as_str(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def decode_attrs(attrs: Any, keys: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Read an h5py attribute manager back into plain Python values (only `keys` if given)."""
    json_keys = set(_decode_json_keys(attrs))
    out: dict[str, Any] = {}
    items = attrs.items() if keys is None else ((k, attrs[k]) for k in keys if k in attrs)
    for key, value in items:
        if key == JSON_KEYS_ATTR:
            continue
        if key in json_keys:
            out[key] = json.loads(_as_str(value))
        elif isinstance(value, np.generic):
            out[key] = value.item()
        elif isinstance(value, bytes):
            out[key] = value.decode()
        else:
            out[key] = value
    return out
