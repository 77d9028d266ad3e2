"""Cleanup of emu shared-memory segments left behind by crashed runs.

A rank unlinks its own segment name once every peer has mapped it (EmuFabric.seal), at close,
at exit and on SIGTERM; a rank killed before that leaves `/dev/shm/gicbench-<job>-<pid>-r<rank>`.
The janitor removes those whose creator pid no longer exists.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

SHM_DIR = Path("/dev/shm")
PREFIX = "gicbench-"
_NAME = re.compile(r"^gicbench-(?P<job>[A-Za-z0-9_.-]+)-(?P<pid>\d+)-r(?P<rank>\d+)$")


def segment_name(job: str, pid: int, rank: int) -> str:
    """The POSIX shm name (with its leading slash) of `rank`'s segment."""
    return f"/{PREFIX}{job}-{pid}-r{rank}"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def janitor(shm_dir: Path | str = SHM_DIR) -> list[str]:
    """Remove gicbench segments whose creator process is dead; returns the names removed.

    Only names of this exact form are touched; a segment of a live process is never removed.
    """
    removed: list[str] = []
    d = Path(shm_dir)
    if not d.is_dir():
        return removed
    for entry in d.iterdir():
        m = _NAME.match(entry.name)
        if m is None or pid_alive(int(m["pid"])):
            continue
        try:
            entry.unlink()
            removed.append(entry.name)
        except FileNotFoundError:
            pass  # another janitor got there first
    return removed
