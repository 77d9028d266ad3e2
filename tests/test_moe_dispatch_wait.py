"""The host's wait for a dispatch call's kernels is bounded (no GPU: fake events). On the H200 a
gpi send kernel that wrote to an unmapped queue never ended, and the wait hung the test run; now
the call's timeout sets the abort word, a kernel that stops then fails the call with the state,
and one that does not is left running (recorded), never a hang."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from gicbench.errors import CompletionTimeout
from gicbench.submit.gpu import dispatch


class Event:
    """Done once the abort word is set, after `stop_after` queries (None: never)."""

    def __init__(self, sub: SimpleNamespace, stop_after: int | None) -> None:
        self.sub, self.stop_after, self.queries = sub, stop_after, 0

    @property
    def done(self) -> bool:
        if self.sub._abort[0] and self.stop_after is not None:
            self.queries += 1
            return self.queries > self.stop_after
        return False

    def synchronize(self) -> None:
        raise AssertionError("synchronize on a kernel that may never end")


@pytest.fixture
def sub(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    monkeypatch.setattr(dispatch, "STUCK_GRACE_S", 0.05)
    stuck: list[str] = []
    monkeypatch.setattr(dispatch, "note_stuck_kernel", stuck.append)
    return SimpleNamespace(rank=3, timeout_ns=50_000_000, _abort=np.zeros(1, np.uint32),
                           stuck=stuck)  # fmt: skip


def test_a_kernel_that_stops_when_aborted_fails_the_call_with_the_state(sub) -> None:
    state = "GPI queue 0x1: ci 0"
    with pytest.raises(CompletionTimeout, match=r"rank 3: dispatch gpi iteration 0 still "
                       r"running .* stopped when aborted; GPI queue 0x1: ci 0"):  # fmt: skip
        dispatch._wait(sub, Event(sub, 2), "dispatch gpi iteration 0", lambda: state)
    assert sub._abort[0] == 1 and sub.stuck == []


def test_a_kernel_that_does_not_stop_is_left_running_and_recorded(sub) -> None:
    with pytest.raises(CompletionTimeout, match="did not stop when aborted"):
        dispatch._wait(sub, Event(sub, None), "dispatch gpi drain", lambda: "state")
    assert sub.stuck == ["dispatch gpi drain"]


def test_a_finished_kernel_returns_at_once(sub) -> None:
    ev = SimpleNamespace(done=True)
    dispatch._wait(sub, ev, "dispatch gdaki iteration 0", lambda: "unused")
    assert sub._abort[0] == 0
