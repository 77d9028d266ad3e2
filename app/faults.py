"""Test hook: GICBENCH_FAULT=ACTION:RANK:WHERE makes one rank fail on purpose.

ACTION: `kill` (the rank dies by SIGKILL: a rank lost mid-run), `term` (the rank gets SIGTERM,
as from a user's `kill`), `int` (the rank gets SIGINT), `raise` (a rank-local exception the
collective check must carry to every rank). RANK: a rank of the job. WHERE: a point index,
`open` (right after the NIC opened, inside bring-up) or `start` (as soon as MPI is up, before
pre-flight: start-up). A malformed value, or a rank the job does not have, is refused with the
rest of the configuration (exit 2).
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

from .errors import ConfigError

ENV = "GICBENCH_FAULT"
ACTIONS = ("kill", "term", "int", "raise")
PLACES = ("open", "start")
_SIGNALS = {"kill": signal.SIGKILL, "term": signal.SIGTERM, "int": signal.SIGINT}


@dataclass(frozen=True)
class Fault:
    action: str
    rank: int
    where: str  # a point index as text, or one of PLACES

    def fire(self, where: str | int, rank: int) -> None:
        if rank != self.rank or str(where) != self.where:
            return
        if self.action in _SIGNALS:
            os.kill(os.getpid(), _SIGNALS[self.action])
        else:
            place = f"point {where}" if str(where).isdigit() else str(where)
            raise RuntimeError(f"injected fault at {place}")


def _allowed(world_size: int | None) -> str:
    ranks = "RANK a rank" if world_size is None else f"RANK in 0..{world_size - 1}"
    return (
        f"ACTION:RANK:WHERE with ACTION in {'|'.join(ACTIONS)}, {ranks}, "
        f"WHERE a point or {'|'.join(PLACES)}"
    )


def from_env(world_size: int | None = None) -> Fault | None:
    """The fault GICBENCH_FAULT asks for; ConfigError when malformed or when RANK is not a rank
    of a job of `world_size` ranks."""
    spec = os.environ.get(ENV, "")
    if not spec:
        return None
    parts = spec.split(":")
    if len(parts) != 3 or parts[0] not in ACTIONS:
        raise ConfigError(ENV, spec, _allowed(world_size))
    action, rank, where = parts
    ascii_digits = rank.isascii() and rank.isdigit()
    if not ascii_digits or not ((where.isascii() and where.isdigit()) or where in PLACES):
        raise ConfigError(ENV, spec, _allowed(world_size))
    if world_size is not None and int(rank) >= world_size:
        raise ConfigError(ENV, spec, _allowed(world_size))
    return Fault(action, int(rank), where)


def early_from_env() -> Fault | None:
    """The fault for `start`, read before pre-flight; a malformed spec is pre-flight's to refuse."""
    try:
        return from_env()
    except ConfigError:
        return None


def fire(fault: Fault | None, where: str | int, rank: int) -> None:
    if fault is not None:
        fault.fire(where, rank)
