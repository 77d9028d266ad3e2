"""Where a trace came from: tool version, git revision, UTC timestamps."""

from __future__ import annotations

import datetime as _dt
import functools
import os
import subprocess
from pathlib import Path

import gicbench

UNKNOWN = "unknown"


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")


def tool_version() -> str:
    return gicbench.__version__


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _is_gicbench_checkout(top: Path) -> bool:
    try:
        return 'name = "gicbench"' in (top / "pyproject.toml").read_text()
    except OSError:
        return False


@functools.cache
def git_revision() -> str:
    """HEAD of the gicbench checkout the run was started from, "-dirty" if modified.

    Best effort: the installed package lives in site-packages, so we look at the working
    directory (runs start from the checkout) and accept it only if it is a gicbench checkout.
    GICBENCH_GIT_REV overrides (for packaged installs that know their revision).
    """
    if os.environ.get("GICBENCH_GIT_REV"):
        return os.environ["GICBENCH_GIT_REV"]
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        top = _git(["rev-parse", "--show-toplevel"], start)
        if not top or not _is_gicbench_checkout(Path(top)):
            continue
        rev = _git(["rev-parse", "HEAD"], Path(top))
        if not rev:
            continue
        dirty = _git(["status", "--porcelain", "--untracked-files=no"], Path(top))
        return rev + ("-dirty" if dirty else "")
    return UNKNOWN
