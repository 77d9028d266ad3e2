"""The trace schema: names, versions, limits, the rule for storing values as HDF5 attributes,
and the digests that let a reader prove a trace is what its writer wrote (docs/traces.md).

Layout of a run directory::

    RUN/run.json            manifest, written by rank 0 (status running -> complete/incomplete);
                            run_id (str) and points_per_rank (int) let the reader check that
                            every rank file belongs to the run and holds every point
    RUN/rank-00000.h5       one file per rank; `rank-00000.h5.partial` while it is being written

Layout of a rank file::

    /                       root attributes: schema, tool_version, git_rev, rank, world_size,
                            start_utc, end_utc, status, failure, and every key of the writer's meta
                            (run_id: the run.json run_id of the run that wrote the file);
                            point_count and digest, written when the file is closed
    /points/00000           one group per sweep point, in the order the experiment ran them
        attrs               experiment, params (JSON), each scalar param as its own attribute,
                            results (JSON), counters_before/counters_after (JSON), closed;
                            sample_digests (JSON) and digest, written when the point closes
        samples/<metric>    raw per-operation samples, int64 nanoseconds, chunked, extendable

Digests (schema 2): a point's `digest` is the SHA-256 of the canonical JSON (point_digest_text)
of its index and every attribute in POINT_DIGEST_KEYS, sample_digests included, which holds the
count and SHA-256 of each sample dataset's little-endian int64 bytes. The root `digest` covers
every root attribute but itself and json_keys. The writer computes them from what it writes, as
it writes (no second pass over the samples); readers recompute them from what they read.
Schema 1 traces have no digests: they are read with a warning that damage cannot be detected.

Attribute rule: a scalar (bool, int, float including NaN, str) is stored as a native HDF5
attribute; anything else (dict, list, tuple, None) is stored as a JSON string and its name is
listed in the group's `json_keys` attribute, so a reader decodes exactly those and nothing else.
Schema 2 stores text as fixed-length UTF-8 and writes files in HDF5's 1.8 format (FILE_LIBVER),
so HDF5's own checksums cover the metadata and the attributes; schema 1 used variable-length
strings and the earliest format. Readers take both.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

SCHEMA_VERSION = "gicbench-trace/2"
SCHEMA_V1 = "gicbench-trace/1"
KNOWN_SCHEMAS: tuple[str, ...] = (SCHEMA_V1, SCHEMA_VERSION)
# Versions without digests: readable, with a warning that damage cannot be detected.
UNCHECKED_SCHEMAS: tuple[str, ...] = (SCHEMA_V1,)

MANIFEST_NAME = "run.json"
PARTIAL_SUFFIX = ".partial"
POINTS_GROUP = "points"
SAMPLES_GROUP = "samples"
JSON_KEYS_ATTR = "json_keys"

# Ties a rank file to its run: run.json's run_id and the rank file's root attribute of that name.
RUN_ID = "run_id"
# run.json: how many points every rank file holds when the run completes.
POINTS_PER_RANK = "points_per_rank"

# The digests (schema 2).
DIGEST_ATTR = "digest"
SAMPLE_DIGESTS_ATTR = "sample_digests"
POINT_COUNT_ATTR = "point_count"
DIGEST_PREFIX = "sha256:"
# The point attributes results are computed from: covered by the point's digest. The scalar
# copies of the params and start_utc are for people reading the file with h5ls; no result
# comes from them and the digest leaves them out (reading every attribute doubles load time).
POINT_DIGEST_KEYS = ("experiment", "params", "results", "counters_before", "counters_after",
                     "closed", SAMPLE_DIGESTS_ATTR)

# Bounds on what a reader takes from a manifest or a file name before it loops or allocates.
MAX_WORLD_SIZE = 1 << 20
MAX_POINTS_PER_RANK = 1 << 20
MAX_MANIFEST_BYTES = 16 << 20

STATUS_COMPLETE = "complete"
STATUS_INCOMPLETE = "incomplete"
STATUS_RUNNING = "running"
FILE_STATUSES = (STATUS_COMPLETE, STATUS_INCOMPLETE)
MANIFEST_STATUSES = (STATUS_RUNNING, STATUS_COMPLETE, STATUS_INCOMPLETE)

# Root attributes the writer owns; meta may not override them.
RESERVED_ROOT_ATTRS = frozenset(
    {"schema", "tool_version", "git_rev", "rank", "world_size", "start_utc", "end_utc",
     "status", "failure", JSON_KEYS_ATTR, DIGEST_ATTR, POINT_COUNT_ATTR}
)
# Point attributes the writer owns; params with these names live only inside the params JSON.
RESERVED_POINT_ATTRS = frozenset(
    {"experiment", "params", "results", "counters_before", "counters_after", "closed",
     "start_utc", "index", JSON_KEYS_ATTR, DIGEST_ATTR, SAMPLE_DIGESTS_ATTR}
)

# Files in HDF5's 1.8 format: checksummed object headers (attributes included), not the 1.10
# format, whose consistency flags make a file its writer never closed (a killed rank) unreadable.
FILE_LIBVER = ("v108", "v108")
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
        if is_scalar(value) and not (isinstance(value, str) and "\0" in value):
            value = value.item() if isinstance(value, np.generic) else value
            if isinstance(value, str):
                set_text(attrs, key, value)
            else:
                attrs[key] = value
            json_keys.discard(key)
        else:  # (a str holding NUL too: fixed-length strings end at the first NUL)
            set_text(attrs, key, to_json(value))
            json_keys.add(key)
    set_text(attrs, JSON_KEYS_ATTR, json.dumps(sorted(json_keys)))


def set_text(attrs: Any, key: str, text: str) -> None:
    # Fixed-length UTF-8, not h5py's variable-length default: the bytes then live in the object
    # header, which HDF5 checksums (file format 1.8), not in the unchecked global heap.
    attrs.create(key, data=np.bytes_(text.encode("utf-8")))


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
        elif isinstance(value, bytes):  # fixed-length text (numpy.bytes_ is also np.generic)
            out[key] = value.decode()
        elif isinstance(value, np.generic):
            out[key] = value.item()
        else:
            out[key] = value
    return out


def stored_form(value: object) -> Any:
    """What decode_attrs gives back for `value` once encode_attrs has stored it: the writer
    digests this, so writer and reader digest the same thing without reading the file back."""
    if is_scalar(value):
        return value.item() if isinstance(value, np.generic) else value
    return json.loads(to_json(value))


def digest_text(values: dict[str, Any]) -> str:
    """The canonical JSON a digest is taken of: sorted keys, no spaces, NaN spelled NaN."""
    return json.dumps(values, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=True)


def digest(values: dict[str, Any]) -> str:
    return DIGEST_PREFIX + hashlib.sha256(digest_text(values).encode()).hexdigest()


def point_digest(index: int, attrs: dict[str, Any]) -> str:
    """The digest of point `index` from its decoded attributes (absent ones count as absent)."""
    return digest({"index": index, **{k: attrs[k] for k in POINT_DIGEST_KEYS if k in attrs}})


def root_digest(attrs: dict[str, Any]) -> str:
    return digest({k: v for k, v in attrs.items() if k not in (DIGEST_ATTR, JSON_KEYS_ATTR)})


def samples_hash() -> Any:
    """The running hash of one sample dataset: fed the little-endian int64 bytes in order."""
    return hashlib.sha256()
