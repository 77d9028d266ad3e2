"""Which ranks a failed run names (run.json's failed_ranks): the most direct cause, never a rank
that only recorded the others' failure or that the launcher ended."""

from __future__ import annotations

from gicbench.bootstrap.collective import (
    FAILED,
    LAUNCHER,
    OK,
    SIGNAL,
    TIMEOUT,
    JobFailure,
    Verdict,
    blame,
)


def v(rank: int, kind: str) -> Verdict:
    return Verdict(rank, kind, f"{kind} on {rank}", 1)


def test_a_signal_meant_for_a_rank_names_it_not_the_ranks_it_left_waiting() -> None:
    assert blame([v(0, SIGNAL), v(1, OK), v(2, TIMEOUT)], [], 3) == [0]
    assert blame([v(1, SIGNAL)], [0], 2) == [1]  # rank 0 busy in a long point


def test_a_stopped_rank_is_named_not_the_one_that_timed_out_on_it() -> None:
    assert blame([v(0, TIMEOUT)], [1], 2) == [1]


def test_the_launcher_ending_the_job_after_a_death_names_the_dead() -> None:
    assert blame([v(0, LAUNCHER), v(2, LAUNCHER)], [1], 3) == [1]
    assert blame([v(0, LAUNCHER), v(1, LAUNCHER)], [], 2) == []  # ^C, scancel: nobody


def test_failures_of_their_own_and_timeouts_alone() -> None:
    assert blame([v(1, FAILED), v(0, TIMEOUT)], [], 2) == [1]
    assert blame([v(0, TIMEOUT), v(1, TIMEOUT)], [], 2) == [0, 1]  # nothing else to go on


def test_the_message_names_the_ranks_that_do_not_answer() -> None:
    e = JobFailure("point 3", [(0, "CompletionTimeout: x")], [1, 2, 3],
                   verdicts=[v(0, TIMEOUT)], waited_s=6.0, world=4)  # fmt: skip
    assert str(e) == (
        "point 3 failed on 1 rank(s): rank 0: CompletionTimeout: x; ranks 1-3 did not answer "
        "within 6 s (busy in a long loop, stopped, hung or gone)"
    )
    assert e.blamed == [1, 2, 3] and not JobFailure("p", [(1, "a")]).missing


def _named_after_launcher(tmp_path, died_first, gone_now) -> tuple[list[int], str, list[str]]:
    """run.json as the leading rank writes it when the launcher ends the job: rank 0 spoke,
    ranks 1 and 2 are silent and `gone_now`; `died_first` were dead before the launcher began."""
    from gicbench.harness import _name_dead_ranks

    record = {"world_size": 3, "status": "incomplete", "reason": "rank 0 terminated"}
    order: list[str] = []
    _name_dead_ranks(
        tmp_path,
        record,
        lambda: {0: v(0, LAUNCHER)},
        lambda r: r in gone_now,
        died_first,
        after_first_write=lambda: order.append("trace"),
    )
    return record["failed_ranks"], record["reason"], order


def test_a_rank_the_launcher_killed_before_it_spoke_is_not_blamed(tmp_path) -> None:
    """On a loaded machine the launcher's SIGKILL can take a rank before it says anything: only
    the rank already dead when the launcher began is named (failed_ranks was [1, 2])."""
    failed, reason, order = _named_after_launcher(tmp_path, {2}, {1, 2})
    assert failed == [2], reason
    assert "rank(s) 2 left no finished trace" in reason
    assert "rank(s) 1 ended by the launcher" in reason
    assert order == ["trace"]  # the leader's own trace is closed once run.json says incomplete


def test_without_knowing_who_died_first_every_silent_dead_rank_is_named(tmp_path) -> None:
    failed, reason, _ = _named_after_launcher(tmp_path, None, {1, 2})
    assert failed == [1, 2], reason
