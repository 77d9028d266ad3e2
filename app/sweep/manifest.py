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
from .spec import SCHEMA

MANIFEST = "sweep.json"
POINTS = "points"
ASIDE = "aside"
# Point states: pending (never started), running (started; if found at resume the job died),
# complete, failed (the run exited 1 or 2), interrupted (stopped by a signal or time limit).
STATES = ("pending", "running", "complete", "failed", "interrupted")


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def manifest_path(sweep_dir: Path) -> Path:
    return Path(sweep_dir) / MANIFEST


def is_sweep(path: str | Path) -> bool:
    return manifest_path(Path(path)).is_file()


def load_manifest(sweep_dir: str | Path) -> dict[str, Any]:
    path = manifest_path(Path(sweep_dir))
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(
            "sweep directory", str(sweep_dir), f"a directory with {MANIFEST}"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError("sweep manifest", str(path), f"readable JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ConfigError(
            "sweep manifest schema", doc.get("schema") if isinstance(doc, dict) else doc, SCHEMA
        )
    return doc


def write_manifest(sweep_dir: Path, doc: dict[str, Any]) -> None:
    doc["updated"] = utc_now()
    safe_files.write_text(manifest_path(sweep_dir), json.dumps(doc, indent=1) + "\n",
                          "sweep directory")  # fmt: skip


def run_status(run_dir: Path) -> str | None:
    """A point's run directory status from its run.json (None: missing or unreadable)."""
    try:
        doc = json.loads((run_dir / "run.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
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
