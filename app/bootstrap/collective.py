"""Failure handling across ranks: every failure reaches every rank, none is left in a collective.

Phases end with `check_all`: each rank contributes its exception (or None) to an allgather; if any
rank failed, every rank raises JobFailure naming the failing ranks and their reasons. A rank stuck
waiting on a dead peer is bounded by the completion timeout, so it reaches the check too.
"""

from __future__ import annotations

import time

from ..errors import GicbenchError

# How long a rank waits at a rendezvous for the others before declaring the job hung. Ranks stuck
# in a native loop give up after their completion timeout, so this only fires for a rank that is
# gone without the launcher noticing.
RENDEZVOUS_TIMEOUT_S = 300.0


class JobFailure(GicbenchError):
    """One or more ranks failed in `phase`; `failures` lists (rank, reason)."""

    def __init__(self, phase: str, failures: list[tuple[int, str]]) -> None:
        self.phase, self.failures = phase, failures
        super().__init__(f"{phase} failed on {len(failures)} rank(s): {_grouped(failures)}")


def _grouped(failures: list[tuple[int, str]]) -> str:
    """One line per distinct reason with the ranks that gave it (32 ranks failing alike read
    as one reason, not the same sentence 32 times)."""
    by_reason: dict[str, list[int]] = {}
    for rank, why in failures:
        by_reason.setdefault(why, []).append(rank)
    parts = []
    for why, ranks in by_reason.items():
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {_span(ranks)}"
        parts.append(f"{who}: {why}")
    return "; ".join(parts)


def _span(ranks: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8'."""

    def run(lo: int, hi: int) -> str:
        return str(lo) if lo == hi else f"{lo}-{hi}"

    out, start, prev = [], ranks[0], ranks[0]
    for r in ranks[1:]:
        if r != prev + 1:
            out.append(run(start, prev))
            start = r
        prev = r
    out.append(run(start, prev))
    return ",".join(out)


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def rendezvous(comm, what: str, timeout_s: float = RENDEZVOUS_TIMEOUT_S) -> None:
    """A barrier that keeps the interpreter responsive: it polls a non-blocking barrier, so a
    SIGTERM from the launcher (a peer died) runs the Python handler that marks the trace
    incomplete, instead of waiting inside MPI until the launcher's SIGKILL."""
    req = comm.Ibarrier()
    deadline = time.monotonic() + timeout_s
    pause = 1e-6
    while not req.Test():
        if time.monotonic() > deadline:
            raise GicbenchError(
                f"rank {comm.rank} waited {timeout_s:g} s at {what} for ranks that never arrived"
            )
        time.sleep(pause)
        pause = min(pause * 2, 1e-3)


def check_all(comm, phase: str, exc: BaseException | None) -> None:
    rendezvous(comm, phase)
    reasons = comm.allgather(None if exc is None else describe(exc))
    failures = [(r, why) for r, why in enumerate(reasons) if why is not None]
    if failures:
        raise JobFailure(phase, failures) from exc


class Phase:
    """`with Phase(comm, "bring-up"):` runs the body and then check_all, on every rank."""

    def __init__(self, comm, name: str) -> None:
        self.comm, self.name = comm, name

    def __enter__(self) -> Phase:
        return self

    def __exit__(self, et, exc, tb) -> bool:
        if exc is not None and not isinstance(exc, Exception):
            return False  # KeyboardInterrupt/SystemExit: let it through, the signal path aborts
        check_all(self.comm, self.name, exc)
        return False
