"""Is a rank's process still there? For ranks on this host, from /proc: a process is named by
its host, pid and start time (a pid may be reused, the start time tells). Used when the launcher
ends the job and a rank says nothing: dead (SIGKILL, a crash) or only slow to answer."""

from __future__ import annotations

import os
import socket
from pathlib import Path

Identity = tuple[str, int, int]  # host, pid, start time (clock ticks after boot)


def _start_time(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):  # a zombie, or dead: gone
        return None
    return int(fields[19])  # field 22, starttime


def identity() -> Identity:
    pid = os.getpid()
    return socket.gethostname(), pid, _start_time(pid) or 0


def gone(ident: Identity) -> bool | None:
    """True: the process has exited; False: it is there (running, sleeping or stopped); None:
    on another host, this rank cannot tell."""
    host, pid, start = ident
    if host != socket.gethostname():
        return None
    return _start_time(pid) != start
