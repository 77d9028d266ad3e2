"""The run directory: decided once, by rank 0, before anything is written; never reused.

A run writes into a directory that does not exist yet, or exists and is empty. Anything else
(a file, a directory holding a run or anything at all, a place that cannot be created) is
refused before any resource exists, so an earlier run is never touched.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from pathlib import Path

from .errors import ConfigError


def default_run_dir(experiments: list[str]) -> Path:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    label = experiments[0] if len(experiments) == 1 else "suite"
    return Path("runs") / f"{label}-{stamp}"


def claim(path: Path) -> bool:
    """Create `path` for a new run (or accept it empty). Returns True when this call created
    it (so a run refused later can remove it again). Raises ConfigError naming -o."""
    label = "out (-o)"
    if path.exists() or path.is_symlink():
        if not path.is_dir():
            raise ConfigError(label, str(path), "a new or empty directory (this is a file)")
        held = sorted(p.name for p in path.iterdir())
        if held:
            what = "an earlier run" if (path / "run.json").exists() else "other files"
            shown = ", ".join(held[:4]) + (" ..." if len(held) > 4 else "")
            raise ConfigError(
                label,
                str(path),
                f"a new or empty directory; it holds {what} ({shown}), which a run never "
                "overwrites: choose another -o",
            )
        if not os.access(path, os.W_OK | os.X_OK):
            raise ConfigError(label, str(path), "a directory this user can write")
        return False
    try:
        path.mkdir(parents=True)
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise ConfigError(label, str(path), f"a directory that can be created ({why})") from None
    return True


def release(path: Path, created: bool) -> None:
    """Undo claim() for a run that was refused before writing anything."""
    if created:
        with contextlib.suppress(OSError):
            path.rmdir()
