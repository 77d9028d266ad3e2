"""Names of emu shared-memory segments, and the cleanup of those crashed runs left behind.

A segment is `/dev/shm/gicbench-<job>-<pid>-r<rank>-<nonce>`: the nonce (64 random bits) makes
the name unpredictable, so no local user can make a run fail by creating its name first (job
ids and pids are easy to guess); a name that is taken all the same gets a new nonce
(create_segment). Peers learn each name through the endpoint exchange, never by deriving it.

A rank unlinks its own name once every peer has mapped it (EmuFabric.seal), at close, at exit
and on SIGTERM; a rank killed before that leaves its segment. The janitor removes those whose
creator pid no longer exists, and touches nothing else: only regular files of this user whose
name has this form (lstat, never following a link); anything it cannot judge or remove is
skipped, so the janitor never fails a run.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

SHM_DIR = Path("/dev/shm")
PREFIX = "gicbench-"
NAME_TRIES = 8  # taken names in a row before giving up (each has 2**-64 odds by chance)
# (names without a nonce are those of earlier versions: still cleaned)
_NAME = re.compile(
    r"^gicbench-(?P<job>[A-Za-z0-9_.-]+)-(?P<pid>\d+)-r(?P<rank>\d+)(?:-(?P<nonce>[0-9a-f]{16}))?$"
)

T = TypeVar("T")


def new_nonce() -> str:
    return secrets.token_hex(8)


def segment_name(job: str, pid: int, rank: int, nonce: str) -> str:
    """The POSIX shm name (with its leading slash) of `rank`'s segment."""
    return f"/{PREFIX}{job}-{pid}-r{rank}-{nonce}"


def create_segment(create: Callable[[str], T], job: str, rank: int) -> tuple[str, T]:
    """create(name) under a fresh name; a name taken already (FileExistsError) is retried
    with a new nonce. Returns (name, what create returned)."""
    for attempt in range(NAME_TRIES):
        name = segment_name(job, os.getpid(), rank, new_nonce())
        try:
            return name, create(name)
        except FileExistsError:
            if attempt == NAME_TRIES - 1:
                raise
    raise AssertionError("not reached")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # exists, owned by someone else (or not a pid: never judged dead)
    return True


def _stale(d: Path, name: str, uid: int) -> bool:
    m = _NAME.match(name)
    if m is None:
        return False
    st = os.lstat(d / name)
    return stat.S_ISREG(st.st_mode) and st.st_uid == uid and not pid_alive(int(m["pid"]))


def janitor(shm_dir: Path | str = SHM_DIR) -> list[str]:
    """Remove this user's gicbench segments whose creator process is dead; returns the names
    removed. Never raises: what cannot be judged or removed is left where it is."""
    removed: list[str] = []
    d = Path(shm_dir)
    uid = os.geteuid()
    try:
        names = os.listdir(d)
    except OSError:
        return removed
    for name in names:
        with contextlib.suppress(OSError):  # gone, not ours, not removable: not our business
            if _stale(d, name, uid):
                os.unlink(d / name)
                removed.append(name)
    return removed
