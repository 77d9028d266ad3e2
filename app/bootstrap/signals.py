"""SIGTERM/SIGINT during a run: raised as RunTerminated in the main thread, and told apart by
who sent them.

The launcher ends a job's processes with SIGCONT, then SIGTERM, then SIGKILL: OpenMPI's prterun
about 0.25 s apart (measured), Slurm's slurmstepd KillWait seconds apart. A rank so signalled has
a fraction of a second: it marks its trace and names the dead ranks without waiting on anyone.
A SIGTERM or SIGINT without that SIGCONT (a user's `kill`, GICBENCH_FAULT=term) ends this rank
only: it tells the other ranks, which are not being ended, and takes the job down with it. The
order of arrival is read from Python's wakeup file descriptor, which the interpreter's C-level
handler writes one byte per signal to as it arrives (a Python handler runs later, in signal
number order, so SIGTERM's would run before SIGCONT's).
"""

from __future__ import annotations

import os
import signal
import time

ENDING = (signal.SIGTERM, signal.SIGINT)
# A SIGCONT this recent before SIGTERM/SIGINT marks the launcher's sequence.
LAUNCHER_WINDOW_S = 2.0


class RunTerminated(BaseException):
    """SIGTERM/SIGINT arrived. `launcher`: the launcher is ending every rank (SIGCONT came
    first); otherwise the signal was meant for this rank alone."""

    def __init__(self, signum: int, launcher: bool = False, message: str = "") -> None:
        self.signum, self.launcher = signum, launcher
        self.at = time.time()
        who = "by the launcher ending the job" if launcher else "(sent to this rank)"
        super().__init__(message or f"terminated by {signal.Signals(signum).name} {who}")


class SignalGuard:
    """While installed, SIGTERM and SIGINT raise RunTerminated until `quiet()`; then they are
    only recorded (a rank already recording its failure is not interrupted again)."""

    def __init__(self) -> None:
        self._pipe: tuple[int, int] | None = None
        self._previous: dict[int, object] = {}
        self._previous_fd = -1
        self._cont_at: float | None = None
        self.quieted = False
        self.raised: RunTerminated | None = None  # the signal that ended this rank
        self.received: list[int] = []

    def install(self) -> SignalGuard:
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        self._pipe = (r, w)
        self._previous_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        self._previous = {s: signal.signal(s, self._on_signal) for s in ENDING}
        self._previous[signal.SIGCONT] = signal.signal(signal.SIGCONT, self._on_cont)
        return self

    def restore(self) -> None:
        if self._pipe is None:
            return
        for s, h in self._previous.items():
            signal.signal(s, h)  # type: ignore[arg-type]
        signal.set_wakeup_fd(self._previous_fd)
        for fd in self._pipe:
            os.close(fd)
        self._pipe = None

    def quiet(self) -> None:
        self.quieted = True

    def _arrivals(self) -> bytes:
        if self._pipe is None:
            return b""
        try:
            data = os.read(self._pipe[0], 4096)
        except (BlockingIOError, InterruptedError):
            return b""
        if signal.SIGCONT in data:
            self._cont_at = time.monotonic()
        return data

    def _on_cont(self, _signum: int, _frame: object) -> None:
        self._arrivals()

    def _on_signal(self, signum: int, _frame: object) -> None:
        data = self._arrivals()
        before = data[: data.find(signum)] if signum in data else data
        launcher = signal.SIGCONT in before or (
            self._cont_at is not None and time.monotonic() - self._cont_at < LAUNCHER_WINDOW_S
        )
        self.received.append(signum)
        if self.quieted:
            return
        exc = RunTerminated(signum, launcher)
        if self.raised is None or launcher:
            self.raised = exc
        raise exc


__all__ = ["RunTerminated", "SignalGuard"]
