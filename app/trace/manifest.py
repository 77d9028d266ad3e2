"""The run manifest `RUN/run.json`, written by rank 0 atomically and never through a link
(gicbench.safe_files: the directory checked, a new temporary file renamed over run.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gicbench import safe_files
from gicbench.errors import TraceError

from . import files, schema
from .provenance import git_revision, tool_version

MANIFEST_FIELDS = (
    "schema", "tool_version", "git_rev", "experiments", "config", "world_size", "provider",
    "submitter", "argv", "start_utc", "end_utc", "status", "hosts",
)
OPTIONAL_FIELDS = ("failed_ranks", "reason", schema.RUN_ID, schema.POINTS_PER_RANK)
# What run.json's fields must be where present (a `config: null` was taken for a run's config).
FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "config": dict,
    "experiments": list,
    "status": str,
    "provider": str,
    "submitter": str,
    "argv": list,
    "hosts": list,
}
_KIND_NAMES = {dict: "a JSON object", list: "a JSON list", str: "a string"}
REQUIRED_VALUES = ("status",)  # never null in a run's manifest


def manifest_path(run_dir: Path) -> Path:
    return Path(run_dir) / schema.MANIFEST_NAME


def write_manifest(run_dir: Path, manifest: dict[str, Any]) -> Path:
    """Write run.json atomically. schema, tool_version and git_rev are filled in when absent.

    Required: world_size (positive int) and status (running, complete or incomplete). Fields of
    MANIFEST_FIELDS that are missing are written as null so every manifest has the same keys.
    """
    data = dict(manifest)
    data.setdefault("schema", schema.SCHEMA_VERSION)
    data.setdefault("tool_version", tool_version())
    if "git_rev" not in data:
        data["git_rev"] = git_revision()
    status = data.get("status")
    if status not in schema.MANIFEST_STATUSES:
        raise TraceError(
            f"invalid manifest status={status!r}: allowed {list(schema.MANIFEST_STATUSES)}"
        )
    world_size = data.get("world_size")
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise TraceError(f"invalid manifest world_size={world_size!r}: a positive int")
    for key in MANIFEST_FIELDS:
        data.setdefault(key, None)
    text = schema.to_json(data)
    path = manifest_path(run_dir)
    body = json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"
    return safe_files.write_text(path, body, "run directory", create_dir=True)


def read_manifest(run_dir: Path) -> dict[str, Any]:
    """Load run.json; raises TraceError if it is missing, unreadable or not a JSON object.

    run.json must be a regular file (links are followed) of at most schema.MAX_MANIFEST_BYTES:
    a FIFO, a device or a huge file is refused before anything is read.
    """
    path = manifest_path(run_dir)
    if not Path(run_dir).is_dir():
        what = safe_files.describe(run_dir)
        raise TraceError(
            f"{run_dir} is not a directory ({what}): expected a gicbench run directory"
        )
    try:
        text = files.read_regular(path, schema.MAX_MANIFEST_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise TraceError(
            f"{path} is missing: not a gicbench run directory, or rank 0 died before starting"
        ) from None
    except (files.NotARegularFile, files.TooLarge) as exc:
        raise TraceError(f"{exc}: refusing to read it as the run manifest") from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path} is not text (damaged?): byte {exc.start} is not UTF-8") from None
    except OSError as exc:
        raise TraceError(f"{path} cannot be read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise TraceError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise TraceError(f"{path} must hold a JSON object, got {type(data).__name__}")
    if data.get("schema") not in schema.KNOWN_SCHEMAS:
        return data  # the reader refuses it by its schema, the clearer reason
    for key, kind in FIELD_TYPES.items():
        absent = data.get(key) is None and key not in REQUIRED_VALUES  # written as null
        if key in data and not absent and not isinstance(data[key], kind):
            raise TraceError(
                f"{path}: {key} is {json.dumps(data[key])[:60]}, expected "
                f"{_KIND_NAMES[kind]} (damaged, or not written by gicbench)"
            )
    return data
