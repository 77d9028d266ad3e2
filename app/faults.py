"""Test hook: GICBENCH_FAULT=ACTION:RANK:WHERE makes one rank fail on purpose.

ACTION: `kill` (the rank dies by SIGKILL: a rank lost mid-run), `term` (the rank gets SIGTERM,
as from a launcher ending the job), `raise` (a rank-local exception the collective check must
carry to every rank). WHERE: a point index, or `open` (right after the NIC opened, inside
bring-up). A malformed value is refused with the rest of the configuration (exit 2).
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

from .errors import ConfigError

ENV = "GICBENCH_FAULT"
ACTIONS = ("kill", "term", "raise")
PLACES = ("open",)


@dataclass(frozen=True)
class Fault:
    action: str
    rank: int
    where: str  # a point index as text, or one of PLACES

    def fire(self, where: str | int, rank: int) -> None:
        if rank != self.rank or str(where) != self.where:
            return
        if self.action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif self.action == "term":
            os.kill(os.getpid(), signal.SIGTERM)
        else:
            place = f"point {where}" if str(where).isdigit() else str(where)
            raise RuntimeError(f"injected fault at {place}")


def from_env() -> Fault | None:
    spec = os.environ.get(ENV, "")
    if not spec:
        return None
    parts = spec.split(":")
    allowed = f"ACTION:RANK:WHERE with ACTION in {'|'.join(ACTIONS)}, WHERE a point or open"
    if len(parts) != 3 or parts[0] not in ACTIONS:
        raise ConfigError(ENV, spec, allowed)
    action, rank, where = parts
    if not rank.isdigit() or not (where.isdigit() or where in PLACES):
        raise ConfigError(ENV, spec, allowed)
    return Fault(action, int(rank), where)


def fire(fault: Fault | None, where: str | int, rank: int) -> None:
    if fault is not None:
        fault.fire(where, rank)
