"""A rank that stops, gets a signal or dies mid-run: the job ends within a bound that follows
--timeout (not the 300 s a rendezvous waits for a healthy peer), run.json and stderr name the
rank to blame (the stopped one, the one the signal was meant for, the dead one; never a rank
that only recorded the others' failure), and every rank that lives marks its trace."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from launching import launch
from rank_procs import manifest, rank_failures, rank_pid, start, wait_running

QUICK = ["single-op", "-n", "50", "-w", "5", "--quiet"]
# Round trips for minutes (the warm-up alone), each waiting at most 1 s for the peer.
LONG_ROUND_TRIPS = ["single-op", "--modes", "round_trip", "-n", "10", "-w", "10000000"]
# Generous for a loaded machine: the job ends ~7 s after the stop (1 s timeout, then the
# failed rank waits max(2 x 1, 1 + 5) s for the others); before, nothing for 300 s.
STOPPED_BOUND_S = 90


@pytest.mark.parametrize("stopped", [1, 0])
def test_a_stopped_rank_is_named_and_the_job_ends(tmp_path: Path, stopped: int) -> None:
    out = tmp_path / "run"
    proc = start(out, [*LONG_ROUND_TRIPS, "--timeout", "1", "--quiet"])
    wait_running(out, proc)
    pids = [rank_pid(out, r) for r in range(2)]
    os.kill(pids[stopped], signal.SIGSTOP)
    try:
        _, err = proc.communicate(timeout=STOPPED_BOUND_S)
    except subprocess.TimeoutExpired:
        _kill(out, pids, proc)
        _, err = proc.communicate(timeout=60)
        pytest.fail(
            f"the job did not end within {STOPPED_BOUND_S} s of SIGSTOP to rank {stopped}; "
            f"stderr: {err[-2000:]}"
        )
    finally:
        _kill(out, pids, proc)
    live = 1 - stopped
    # The rank whose loop timed out said so at once, then named the one that does not answer.
    assert f"gicbench: rank {live}: " in err and "CompletionTimeout" in err, err
    assert f"rank {stopped} did not answer within" in err, err
    m = manifest(out)
    assert m["status"] == "incomplete" and m["failed_ranks"] == [stopped], m


def _kill(out: Path, pids: list[int], proc: subprocess.Popen) -> None:
    """The ranks still running (a stopped one too) and the launcher, so that no pipe stays
    open; a pid is signalled only while it is still a rank of this run."""
    for pid in pids:
        try:
            ours = str(out).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        for sig in (signal.SIGCONT, signal.SIGKILL) if ours else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    if proc.poll() is None:
        proc.kill()


def _ended(r: subprocess.CompletedProcess, out: Path, ranks: int, blamed: int) -> dict:
    assert r.returncode != 0, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    m = manifest(out)
    assert m["status"] == "incomplete", (m["status"], r.stderr[-3000:])
    assert m["failed_ranks"] == [blamed], (m["failed_ranks"], m["reason"], r.stderr)
    return m


@pytest.mark.parametrize(
    ("ranks", "rank", "where"),
    [(2, 0, "open"), (2, 1, "open"), (3, 2, "0"), (3, 0, "1"), (3, 1, "open")],
)
def test_sigterm_names_the_rank_that_got_it(tmp_path: Path, ranks: int, rank: int, where: str):
    """run.json said failed_ranks [1] after SIGTERM to rank 0 (rank 1's file held its reason),
    and rank 0 waited 3 s for traces before it left."""
    out = tmp_path / "run"
    fault = f"term:{rank}:{where}"
    r = launch(ranks, "run", *QUICK, "-o", str(out), env={"GICBENCH_FAULT": fault}, timeout=120)
    _ended(r, out, ranks, rank)
    assert f"gicbench: rank {rank}: " in r.stderr and "terminated by SIGTERM" in r.stderr
    reasons = rank_failures(out, ranks)
    for other in set(range(ranks)) - {rank}:  # each knows whose signal ended the run
        assert f"rank {rank}: terminated by SIGTERM" in reasons[other], reasons


@pytest.mark.parametrize(("ranks", "rank", "where"), [(2, 0, "open"), (3, 0, "1"), (3, 2, "0")])
def test_sigkill_names_the_dead_rank(tmp_path: Path, ranks: int, rank: int, where: str) -> None:
    """The launcher ends the others within a fraction of a second (SIGCONT, SIGTERM, SIGKILL):
    the lowest rank left names the dead one, in run.json and on stderr (rank 0 dead: run.json
    stayed 'running')."""
    out = tmp_path / "run"
    fault = f"kill:{rank}:{where}"
    r = launch(ranks, "run", *QUICK, "-o", str(out), env={"GICBENCH_FAULT": fault}, timeout=120)
    _ended(r, out, ranks, rank)
    assert f"rank(s) {rank} left no finished trace" in r.stderr, r.stderr


def test_sigint_to_a_rank_is_named_like_sigterm(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = launch(2, "run", *QUICK, "-o", str(out), env={"GICBENCH_FAULT": "int:1:0"}, timeout=120)
    _ended(r, out, 2, 1)
    assert "gicbench: rank 1: " in r.stderr and "terminated by SIGINT" in r.stderr


def test_sigint_during_start_up_is_one_line(tmp_path: Path) -> None:
    """A KeyboardInterrupt traceback, before the handlers were installed."""
    out = tmp_path / "run"
    r = launch(2, "run", *QUICK, "-o", str(out), env={"GICBENCH_FAULT": "int:1:start"}, timeout=120)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr and "KeyboardInterrupt" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("gicbench:")]
    assert lines == ["gicbench: rank 1: terminated by SIGINT (sent to this rank) during start-up"]
    assert not out.exists()  # nothing was made yet


def test_repeated_sigterms_while_the_run_is_recorded(tmp_path: Path) -> None:
    """A second SIGTERM during the rewrite of run.json raised a traceback out of the handler."""
    out = tmp_path / "run"
    proc = start(out, ["msg-rate", "--messages", "1000000000000", "-w", "0", "--quiet"])
    wait_running(out, proc)
    pid = rank_pid(out, 0)
    deadline = time.monotonic() + 3
    with contextlib.suppress(ProcessLookupError):
        while time.monotonic() < deadline and proc.poll() is None:
            os.kill(pid, signal.SIGTERM)
            time.sleep(0.01)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the job did not end after the SIGTERMs")
    assert "Traceback" not in err, err
    m = manifest(out)  # whole JSON, written atomically
    assert m["status"] == "incomplete" and m["failed_ranks"] == [0], m


def test_sigterm_to_the_receiver_of_a_long_msg_rate_names_it(tmp_path: Path) -> None:
    """The sender is busy with its 10^12 messages and answers nobody: the receiver, which got
    the signal, is named (not the busy sender), and the job ends within seconds."""
    out = tmp_path / "run"
    proc = start(out, ["msg-rate", "--messages", "1000000000000", "-w", "0", "--quiet"])
    wait_running(out, proc)
    os.kill(rank_pid(out, 1), signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the job did not end within 120 s of the SIGTERM")
    assert "gicbench: rank 1: " in err and "terminated by SIGTERM" in err, err
    m = manifest(out)
    assert m["status"] == "incomplete" and m["failed_ranks"] == [1], m


def test_a_fault_for_a_rank_the_job_does_not_have_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = launch(2, "run", *QUICK, "-o", str(out), env={"GICBENCH_FAULT": "kill:99:1"}, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("invalid GICBENCH_FAULT='kill:99:1': allowed") == 1, r.stderr
    assert "RANK in 0..1" in r.stderr
    assert not out.exists()
