"""SIGTERM/SIGINT end every native host loop promptly (a signal used to wait for the loop's
end).

msg-rate checked the interrupt flag only inside a long wait, so a sender that never had to wait
ignored SIGTERM until its messages ran out (114 s in the report). A child process runs a loop whose
work cannot finish for days; the parent signals it once the loop is visibly running and expects
the loop to return "interrupted" with less done than requested, the Python handler to have run
too, and the process to exit on its own. No timing is asserted: a loop that ignores the signal
simply never returns and the child is killed at the generous deadline. The child installs the
native handler twice: a second install used to save itself as the handler to chain to, so the
first signal spun forever inside the handler.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from host_world import emu_world, post_outside

from gicbench import _native
from gicbench.submit.native_lanes import lane_table

CHILD = Path(__file__).with_name("host_loop_child.py")
DEADLINE_S = 120  # far beyond "promptly": only a loop that ignores the signal gets near it


@pytest.mark.parametrize(
    ("loop", "sig"),
    [
        ("msg_rate", signal.SIGTERM),
        ("msg_rate", signal.SIGINT),
        ("single_op", signal.SIGTERM),
        ("rtt_respond", signal.SIGINT),
    ],
)
def test_signal_ends_the_loop(loop: str, sig: signal.Signals) -> None:
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), loop],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        ready, _, _ = select.select([proc.stdout], [], [], DEADLINE_S)
        assert ready, "the child never started its loop"
        line = proc.stdout.readline().strip()
        assert line == "started", (line, proc.stderr.read() if proc.poll() is not None else "")
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"{loop} ignored {sig.name}: still running {DEADLINE_S} s later")
    assert proc.returncode == 0, err
    res = json.loads(out.strip().splitlines()[-1])
    assert res["ok"] is False and res["kind"] == "interrupted", res
    assert res["done"] < res["total"], res
    if loop != "rtt_respond":
        assert res["done"] > 0, res  # it was interrupted while running, not before
    assert res["handled"] == [int(sig)]  # Python's own handler still ran (chained)


def test_a_failing_thread_stops_its_siblings() -> None:
    # Lane 1 starts with an error completion pending (a bad rkey posted outside the loop): its
    # thread fails on its first CQE, and the thread of lane 0 must stop too instead of sending
    # its share of messages; the reported error is the real one, not the sibling's "stopped".
    with emu_world(nqps=2, depth=64, timeout_s=60.0) as w:
        _src, landing = w.bufs[0][0], w.bufs[1][1]
        post_outside(w.rc[1][0], landing.addr, landing.rkey ^ 0x100, b"q" * 8)
        per_thread = 5_000_000
        ok, _, _, err = _native.host.msg_rate(
            lane_table(w.lanes(2)),
            2,
            4,
            64,
            True,
            per_thread,
            0,
            per_thread,
            60 * 10**9,
            w.fabrics[0].progress_hook(),
            w.fabrics[0].progress_ctx(),
        )
        assert not ok and err["kind"] == "cqe_error" and err["qpn"] == w.rc[1][0].qpn
        assert err["total"] == 2 * per_thread and err["done"] < per_thread
