"""`SWEEP_DIR/sweep.json`: the sweep, every point and its attempts. Written atomically (temporary
file, fsync, rename: gicbench.safe_files, never through a link) after every change, so a job
killed at any moment leaves a readable manifest whose `running` point is known to be unfinished."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .. import safe_files
from ..errors import ConfigError
from ..trace import files
from ..trace.schema import MANIFEST_NAME as RUN_MANIFEST
from ..trace.schema import MAX_MANIFEST_BYTES as MAX_RUN_MANIFEST_BYTES
from .spec import SCHEMA

MANIFEST = "sweep.json"
POINTS = "points"
ASIDE = "aside"
# Point states: pending (never started), running (started; if found at resume the job died),
# complete, failed (the run exited 1 or 2), interrupted (stopped by a signal or time limit).
STATES = ("pending", "running", "complete", "failed", "interrupted")
# sweep.json holds every point and attempt: far more than any sweep writes, far less than memory.
MAX_MANIFEST_BYTES = 256 << 20


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def manifest_path(sweep_dir: Path) -> Path:
    return Path(sweep_dir) / MANIFEST


def is_sweep(path: str | Path) -> bool:
    return manifest_path(Path(path)).is_file()


def load_manifest(sweep_dir: str | Path) -> dict[str, Any]:
    """sweep.json, checked before use: a regular file (a FIFO or a device is refused before it is
    read) of at most MAX_MANIFEST_BYTES, the known schema, and points that name directories
    inside the sweep."""
    path = manifest_path(Path(sweep_dir))
    try:
        doc = json.loads(files.read_regular(path, MAX_MANIFEST_BYTES))
    except FileNotFoundError:
        raise ConfigError(
            "sweep directory", str(sweep_dir), f"a directory with {MANIFEST}"
        ) from None
    except (OSError, ValueError, RecursionError) as e:  # the JSON and file checks are ValueErrors
        raise ConfigError("sweep manifest", str(path), f"readable JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ConfigError(
            "sweep manifest schema", doc.get("schema") if isinstance(doc, dict) else doc, SCHEMA
        )
    _check_points(path, doc.get("points"))
    return doc


def _check_points(path: Path, points: object) -> None:
    allowed = ("a list of points, each with a name (one directory name), a status "
               f"({', '.join(STATES)}) and a list of attempts")
    if not isinstance(points, list):
        raise ConfigError("sweep manifest", str(path), allowed)
    for p in points:
        ok = (isinstance(p, dict) and isinstance(p.get("name"), str)
              and p["name"] not in ("", ".", "..") and "/" not in p["name"]
              and "\0" not in p["name"] and p.get("status") in STATES
              and isinstance(p.get("attempts"), list))
        if not ok:
            shown = repr(p)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            raise ConfigError("sweep manifest", str(path), f"{allowed}; got the point {shown}")


def write_manifest(sweep_dir: Path, doc: dict[str, Any]) -> None:
    doc["updated"] = utc_now()
    safe_files.write_text(manifest_path(sweep_dir), json.dumps(doc, indent=1) + "\n",
                          "sweep directory")  # fmt: skip


def run_status(run_dir: Path) -> str | None:
    """A point's run directory status from its run.json (None: missing or unreadable)."""
    try:
        doc = json.loads(files.read_regular(run_dir / RUN_MANIFEST, MAX_RUN_MANIFEST_BYTES))
    except (OSError, ValueError, RecursionError):  # JSON and file checks raise ValueErrors
        return None
    return doc.get("status") if isinstance(doc, dict) else None


def point_runs(sweep_dir: str | Path) -> list[Path]:
    """The run directories of the sweep's finished points, in point order: what `gicbench analyze
    SWEEP_DIR` analyses as one run. A point counts only when the manifest says complete and its
    own run.json agrees (a half-written point is never included)."""
    root = Path(sweep_dir)
    doc = load_manifest(root)
    out = []
    for p in doc["points"]:
        run_dir = root / POINTS / p["name"]
        if p["status"] == "complete" and run_status(run_dir) == "complete":
            out.append(run_dir)
    return out
