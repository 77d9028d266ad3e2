"""Failure handling across ranks: every failure reaches every rank, no rank waits unbounded.

Every step that synchronises the ranks (a phase's check, a rendezvous, the gather of a row) is
non-blocking and polled, on a communicator of its own (a Dup), so a waiting rank stays
responsive to signals and to failure notices:

- A rank that fails (an exception in a phase, a signal meant for it) prints its diagnostic at
  once, then sends its verdict to every other rank, then takes part in the step.
- A rank that learns of a failure (its own or a notice) answers every rank with its own verdict
  (a roll call) and waits at most `fail_wait_s` more: a peer stuck in a loop on the failed rank
  gives up after its completion timeout (--timeout), so the bound follows it. A rank not heard
  from by then does not answer (stopped, hung or gone) and is named.
- With no failure known, a step waits up to RENDEZVOUS_TIMEOUT_S (a peer may be deep in a long
  point), then calls the roll the same way.

When every rank took part in the step, the failure is "clean": the same JobFailure on every rank,
nothing left pending, MPI may finalize. Otherwise a step was left pending (a rank left the
sequence, or does not answer) and the ranks leave without MPI_Finalize (`JobFailure.clean`).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import DEFAULT_TIMEOUT_S
from ..errors import CompletionTimeout, GicbenchError
from . import procs
from .signals import RunTerminated

# With no failure known, how long a step waits before calling the roll: a peer may be in a long
# point (msg-rate with 10^12 messages), so this is generous.
RENDEZVOUS_TIMEOUT_S = 300.0
# Once a failure is known: the completion timeout of a peer stuck on the failed rank, and this.
FAIL_GRACE_S = 5.0
SIGNALLED_WAIT_S = 2.0  # ... when a rank got a signal meant for it (it is leaving)
# After a failure, how long a rank waits for the others to say they have recorded theirs.
SETTLE_WAIT_S = 5.0

TAG_VERDICT, TAG_DATA, TAG_DONE = 7101, 7102, 7103

OK, FAILED, TIMEOUT, HUNG = "ok", "failed", "timeout", "hung"
SIGNAL, LAUNCHER = "signal", "launcher"
OUTSIDE = -1  # Verdict.step of a rank that left the sequence of steps (it joins no other)


def fail_wait_for(timeout_s: float) -> float:
    return max(2.0 * timeout_s, timeout_s + FAIL_GRACE_S)


@dataclass(frozen=True)
class Verdict:
    """What a rank says about itself: `kind` (OK, FAILED, TIMEOUT: a completion timeout, which a
    failed peer causes, SIGNAL: a signal meant for it, LAUNCHER: the launcher ends the job, HUNG:
    it waited a whole RENDEZVOUS_TIMEOUT_S), why, and the step it waits in (or OUTSIDE)."""

    rank: int
    kind: str
    reason: str
    step: int
    where: str = ""  # the phase or step the rank was in
    epoch: int = 0  # clean failures before it (older ones are stale)


def verdict_of(
    rank: int, exc: BaseException, step: int, where: str = "", epoch: int = 0
) -> Verdict:
    if isinstance(exc, RunTerminated):
        kind, reason = LAUNCHER if exc.launcher else SIGNAL, str(exc)
    else:
        kind, reason = TIMEOUT if isinstance(exc, CompletionTimeout) else FAILED, describe(exc)
    return Verdict(rank, kind, reason, step, where, epoch)


def blame(verdicts: list[Verdict], missing: list[int], world: int) -> list[int]:
    """The ranks to name for a failure, most direct cause first: the ranks that failed on their
    own or got a signal meant for them; failing those, the ranks that do not answer (stopped,
    hung, dead); failing those, the ranks whose completions timed out. A rank the launcher ended
    is never named, nor one that timed out waiting on a named rank; a rank that does not answer
    while another was signalled is most likely busy in a long point (it is in the reason, not
    named). When every rank got a signal the job was ended as a whole: nobody is named."""
    signalled = {v.rank for v in verdicts if v.kind in (SIGNAL, LAUNCHER)}
    if not missing and len(signalled) == world:
        return []
    for tier in (
        {v.rank for v in verdicts if v.kind in (FAILED, SIGNAL)},
        set(missing),
        {v.rank for v in verdicts if v.kind in (TIMEOUT, HUNG)},
    ):
        if tier:
            return sorted(tier)
    return []


class JobFailure(GicbenchError):
    """One or more ranks failed in `phase`: `failures` lists (rank, reason), `missing` the ranks
    that did not answer within `waited_s`; `blamed` the ranks to name (see `blame`)."""

    def __init__(
        self,
        phase: str,
        failures: list[tuple[int, str]],
        missing: list[int] | None = None,
        *,
        verdicts: list[Verdict] | None = None,
        waited_s: float = 0.0,
        world: int = 0,
        clean: bool = True,
    ) -> None:
        self.phase, self.failures = phase, failures
        self.missing = sorted(missing or [])
        self.verdicts = verdicts or [Verdict(r, FAILED, why, 0) for r, why in failures]
        self.clean = clean
        world = world or max(self.ranks(), default=0) + 1
        self.blamed = blame(self.verdicts, self.missing, world)
        text = (
            f"{phase} failed on {len(failures)} rank(s): {_grouped(failures)}"
            if failures
            else (f"{phase} failed")
        )
        if self.missing:
            who = "rank" if len(self.missing) == 1 else "ranks"
            text += (
                f"; {who} {_span(self.missing)} did not answer within {waited_s:.3g} s "
                "(busy in a long loop, stopped, hung or gone)"
            )
        super().__init__(text)

    def ranks(self) -> list[int]:
        return [r for r, _ in self.failures] + self.missing


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


@dataclass
class _Link:
    """The failure protocol's state on one communicator."""

    parent: Any
    comm: Any  # the Dup the protocol talks on
    fail_wait_s: float
    step: int = 0
    epoch: int = 0  # clean failures so far: the same on every rank
    heard: dict[int, Verdict] = field(default_factory=dict)
    own: Verdict | None = None
    flagged: list[int] | None = None  # ranks the completed check says failed on entry
    answered: bool = False  # this rank's verdict went to every other rank
    failed_at: float | None = None  # when this rank learned of a failure
    dirty: bool = False  # a step was left pending: no MPI_Finalize
    sends: list = field(default_factory=list)
    procs: list[procs.Identity] = field(default_factory=list)  # every rank's process

    @property
    def rank(self) -> int:
        return self.comm.rank

    @property
    def size(self) -> int:
        return self.comm.size

    def failure_known(self) -> bool:
        return (
            self.own is not None
            or bool(self.flagged)
            or any(v.kind != OK for v in self.heard.values())
        )

    def send_all(self, obj: object, tag: int) -> None:
        for r in range(self.size):
            if r != self.rank:
                # A peer that is gone: the roll call names it.
                with contextlib.suppress(Exception):
                    self.sends.append(self.comm.isend(obj, dest=r, tag=tag))
        self.sends = [q for q in self.sends if not _test(q)]

    def answer(self, step: int) -> None:
        """Tell every rank where this rank stands (its failure, or that it is here, in `step`)."""
        if self.failed_at is None:
            self.failed_at = time.monotonic()
        if not self.answered:
            here = Verdict(self.rank, OK, "", step, epoch=self.epoch)
            self.send_all(self.own or here, TAG_VERDICT)
            self.answered = True

    def drain(self) -> None:
        """Take in the verdicts that have arrived. Those of an earlier epoch are stale (a roll
        call's answers that came after its step ended in a clean failure)."""
        while True:
            try:
                msg = self.comm.improbe(tag=TAG_VERDICT)
            except Exception:
                return
            if msg is None:
                return
            v: Verdict = msg.recv()
            if v.epoch < self.epoch:
                continue
            old = self.heard.get(v.rank)
            if old is None or old.kind == OK:
                self.heard[v.rank] = v

    def verdicts(self) -> list[Verdict]:
        mine = [self.own] if self.own is not None else []
        return sorted([*self.heard.values(), *mine], key=lambda v: v.rank)

    def reset(self) -> None:
        """After a clean failure every rank is past the step; the next one starts afresh."""
        self.heard.clear()
        self.own, self.flagged, self.answered, self.failed_at = None, None, False, None
        self.epoch += 1


def _test(req: Any) -> bool:
    try:
        return bool(req.Test())
    except Exception:
        return True


_links: dict[int, _Link] = {}


def attach(comm: Any, timeout_s: float | None = None) -> None:
    """Set up the protocol on `comm` (collective: a Dup and an allgather of every rank's
    process), bounded by the run's completion timeout."""
    link = _link(comm)
    if timeout_s is not None:
        link.fail_wait_s = fail_wait_for(timeout_s)
    link.procs = link.comm.allgather(procs.identity())


def gone(comm: Any, rank: int) -> bool | None:
    """Whether `rank`'s process has exited (None: unknown, e.g. on another host)."""
    link = _links.get(id(comm))
    if link is None or not link.procs:
        return None
    return procs.gone(link.procs[rank])


def _link(comm: Any) -> _Link:
    link = _links.get(id(comm))
    if link is None or link.parent is not comm:
        # A communicator never attached: --timeout's default.
        link = _Link(comm, comm.Dup(), fail_wait_for(DEFAULT_TIMEOUT_S))
        _links[id(comm)] = link
    return link


def _announce(link: _Link, what: str, v: Verdict) -> None:
    """This rank's own failure: its diagnostic now, on its own stderr, then its verdict to every
    rank (the launcher's ending is said once, by rank 0, for the whole job)."""
    link.own = v
    if v.kind != LAUNCHER:
        print(f"gicbench: rank {link.rank}: {what}: {v.reason}", file=sys.stderr, flush=True)
    link.answered = False
    link.answer(v.step)


def _wait(link: _Link, what: str, done: Callable[[], bool], step: int) -> None:
    """Poll `done()` (the step's own requests) while watching for failures; returns when the
    step completed with no failure known, else raises JobFailure."""
    start = time.monotonic()
    pause = 1e-6
    while True:
        try:
            complete = done()
            link.drain()
            if link.failure_known():
                link.answer(step)
                _end_step(link, what, complete, step)
            elif complete:
                return
            elif time.monotonic() - start > RENDEZVOUS_TIMEOUT_S:
                why = f"waited {RENDEZVOUS_TIMEOUT_S:g} s at {what} for the other ranks"
                _announce(link, what, Verdict(link.rank, HUNG, why, step, what, link.epoch))
            time.sleep(pause)
            pause = min(pause * 2, 1e-3)
        except RunTerminated as e:
            if e.launcher:
                link.dirty = True
                raise
            if link.own is None:
                # Its part in this step is given already (as not failed): it leaves the
                # sequence, and its word must count in whichever step the others are in.
                _announce(link, what, verdict_of(link.rank, e, OUTSIDE, what, link.epoch))


def _end_step(link: _Link, what: str, complete: bool, step: int) -> None:
    """A failure is known. Raise when the check completed and names exactly the failures heard
    (clean: every rank raises the same), or every rank has answered and the step cannot complete
    or is complete already, or the bound has passed (the silent ranks are named)."""
    others = [r for r in range(link.size) if r != link.rank]
    verdicts = link.verdicts()
    failed = [v.rank for v in verdicts if v.kind != OK]
    failures = [(v.rank, v.reason) for v in verdicts if v.kind != OK]
    heard_all = all(r in link.heard for r in others)
    in_step = all(v.step == step for v in verdicts)
    waited = time.monotonic() - (link.failed_at or time.monotonic())
    # Name the phase where the failure happened (a notice may reach a rank in an earlier step).
    first = next((v for v in verdicts if v.kind != OK and v.rank == link.rank), None) or next(
        (v for v in verdicts if v.kind != OK), None
    )
    what = (first.where if first is not None else "") or what
    if complete and link.flagged is not None and failed == link.flagged:
        raise _failure(link, what, failures, [], verdicts, waited, clean=True)
    if heard_all and (complete or not in_step):
        link.dirty = link.dirty or not complete
        raise _failure(link, what, failures, [], verdicts, waited, clean=False)
    # A rank a signal is meant for is leaving anyway, and is the one to name whatever the others
    # say: the ranks wait only for those that can answer at once (the launcher ends the rest).
    bound = link.fail_wait_s
    if any(v.kind == SIGNAL for v in verdicts):
        bound = min(bound, SIGNALLED_WAIT_S)
    if waited > bound:
        link.dirty = link.dirty or not complete
        missing = [r for r in others if r not in link.heard]
        raise _failure(link, what, failures, missing, verdicts, bound, clean=False)


def _failure(
    link: _Link,
    what: str,
    failures: list[tuple[int, str]],
    missing: list[int],
    verdicts: list[Verdict],
    waited: float,
    clean: bool,
) -> JobFailure:
    e = JobFailure(
        what, failures, missing, verdicts=verdicts, waited_s=waited, world=link.size, clean=clean
    )
    if clean:
        link.reset()
    return e


def check_all(comm: Any, phase: str, exc: BaseException | None, value: int = 0) -> list[int]:
    """Every rank's `value` once every rank has reached this point with no failure; otherwise
    JobFailure on every rank that can be told (see the module's docstring)."""
    link = _link(comm)
    link.step += 1
    step = link.step
    if exc is not None and link.own is None:
        _announce(link, phase, verdict_of(link.rank, exc, step, phase, link.epoch))
    mine = np.array([0 if link.own is None else 1, value], dtype=np.int64)
    table = np.zeros((link.size, 2), dtype=np.int64)
    req = link.comm.Iallgather(mine, table)
    link.flagged = None

    def done() -> bool:
        if link.flagged is None and req.Test():
            link.flagged = [int(r) for r in np.flatnonzero(table[:, 0])]
        return link.flagged is not None

    _wait(link, phase, done, step)
    link.flagged = None
    return [int(v) for v in table[:, 1]]


def rendezvous(comm: Any, what: str) -> None:
    """A barrier that keeps the interpreter responsive (a SIGTERM runs its Python handler) and
    ends in JobFailure rather than waiting on a rank that failed or does not answer."""
    check_all(comm, what, None)


def gather(comm: Any, what: str, obj: object, root: int = 0) -> list[object] | None:
    """`comm.gather`, polled: the root's list, None elsewhere."""
    link = _link(comm)
    link.step += 1
    step = link.step
    got: dict[int, object] = {link.rank: obj}
    if link.rank != root:
        link.sends.append(link.comm.isend((step, obj), dest=root, tag=TAG_DATA))

    def done() -> bool:
        if link.rank != root:
            return True
        for r in range(link.size):
            while r not in got:
                msg = link.comm.improbe(source=r, tag=TAG_DATA)
                if msg is None:
                    break
                s, item = msg.recv()
                if s == step:
                    got[r] = item
        return len(got) == link.size

    _wait(link, what, done, step)
    return [got[r] for r in range(link.size)] if link.rank == root else None


def fail_outside(comm: Any, what: str, exc: BaseException) -> JobFailure:
    """This rank failed between steps (a signal meant for it, an error outside any phase): it
    tells every rank, waits for the roll call, and returns the JobFailure it ends with."""
    link = _link(comm)
    if link.own is None:
        _announce(link, what, verdict_of(link.rank, exc, OUTSIDE, what, link.epoch))
    link.dirty = True
    try:
        _wait(link, what, lambda: False, link.step + 1)
    except JobFailure as e:
        return e
    raise AssertionError("unreachable: a known failure always ends the wait")


def tell(comm: Any, exc: BaseException) -> None:
    """Send this rank's verdict to every rank without waiting (the launcher is ending the job)."""
    link = _link(comm)
    if link.own is None or link.own.kind != LAUNCHER:
        link.own = verdict_of(link.rank, exc, OUTSIDE, "", link.epoch)
        link.answered = False
        link.answer(OUTSIDE)
    link.dirty = True


def heard(comm: Any) -> dict[int, Verdict]:
    """The verdicts received so far (this rank's own included), without waiting."""
    link = _link(comm)
    link.drain()
    return {v.rank: v for v in link.verdicts()}


def is_dirty(comm: Any) -> bool:
    """True when a step was left pending: this rank must leave without MPI_Finalize."""
    link = _links.get(id(comm))
    return link is not None and link.dirty


def settle(comm: Any, ranks: list[int], timeout_s: float = SETTLE_WAIT_S) -> None:
    """After a failure: tell `ranks` this rank has recorded its part and wait (bounded) until
    they say the same, so no rank's exit (which makes the launcher end the others) cuts another
    short while it writes."""
    link = _link(comm)
    ranks = [r for r in ranks if r != link.rank]
    for r in ranks:
        with contextlib.suppress(Exception):
            link.sends.append(link.comm.isend(None, dest=r, tag=TAG_DONE))
    left = set(ranks)
    deadline = time.monotonic() + timeout_s
    while left and time.monotonic() < deadline:
        for r in list(left):
            try:
                msg = link.comm.improbe(source=r, tag=TAG_DONE)
            except Exception:
                left.discard(r)
                continue
            if msg is not None:
                msg.recv()
                left.discard(r)
        time.sleep(1e-3)


class Phase:
    """`with Phase(comm, "bring-up") as ph:` runs the body and then check_all, on every rank;
    `ph.value` (set in the body) is gathered into `ph.values`. A signal meant for this rank
    (RunTerminated) becomes its verdict in the check; the launcher's, and KeyboardInterrupt,
    pass through (the job is being ended: no time to wait on anyone)."""

    def __init__(self, comm, name: str) -> None:
        self.comm, self.name = comm, name
        self.value = 0
        self.values: list[int] = []

    def __enter__(self) -> Phase:
        return self

    def __exit__(self, et, exc, tb) -> bool:
        targeted = isinstance(exc, RunTerminated) and not exc.launcher
        if exc is not None and not isinstance(exc, Exception) and not targeted:
            return False
        self.values = check_all(self.comm, self.name, exc, self.value)
        return False
