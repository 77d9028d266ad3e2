"""The run directory: decided once, by rank 0, before anything is written; never reused.

A run writes into a directory that does not exist yet, or exists and is empty. Anything else
(a file, a symbolic link, a directory holding a run or anything at all, a directory another user
owns or can write, a place that cannot be created) is refused before any resource exists, so an
earlier run is never touched and no other user can plant links where the run writes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import stat
from pathlib import Path

from . import safe_files
from .errors import ConfigError


def default_run_dir(experiments: list[str]) -> Path:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    label = experiments[0] if len(experiments) == 1 else "suite"
    return Path("runs") / f"{label}-{stamp}"


def claim(path: Path) -> bool:
    """Create `path` for a new run (or accept it empty). Returns True when this call created
    it (so a run refused later can remove it again). Raises ConfigError naming -o."""
    label = "out (-o)"
    try:
        st: os.stat_result | None = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise ConfigError(label, str(path), f"a path this user can reach ({e.strerror})") from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise ConfigError(
                label, str(path), f"a new or empty directory, not {safe_files.describe(path)}: "
                "a run never writes through a link; give the directory itself",
            )  # fmt: skip
        if not stat.S_ISDIR(st.st_mode):
            what = safe_files.describe(path)
            raise ConfigError(label, str(path), f"a new or empty directory (this is {what})")
        with safe_files.opened_dir(path, label) as fd:
            held = sorted(os.listdir(fd))
        if held:
            what = "an earlier run" if "run.json" in held else "other files"
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
        created = safe_files.make_dir(path)
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise ConfigError(label, str(path), f"a directory that can be created ({why})") from None
    if not created:  # appeared since the lstat: judge it as an existing one
        return claim(path)
    return True


def release(path: Path, created: bool) -> None:
    """Undo claim() for a run that was refused before writing anything."""
    if created:
        with contextlib.suppress(OSError):
            path.rmdir()
