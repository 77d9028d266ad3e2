"""Per-rank HDF5 traces and the run manifest: writer, reader and schema (see schema.py)."""

from .manifest import MANIFEST_FIELDS, manifest_path, read_manifest, write_manifest
from .provenance import git_revision, utc_now
from .reader import Point, RankTrace, Run, TraceWarning, open_run
from .schema import KNOWN_SCHEMAS, SCHEMA_VERSION
from .writer import PointWriter, TraceWriter

__all__ = [
    "KNOWN_SCHEMAS",
    "MANIFEST_FIELDS",
    "SCHEMA_VERSION",
    "Point",
    "PointWriter",
    "RankTrace",
    "Run",
    "TraceWarning",
    "TraceWriter",
    "git_revision",
    "manifest_path",
    "open_run",
    "read_manifest",
    "utc_now",
    "write_manifest",
]
