"""A job failure names each distinct reason once with its ranks (the same
sentence was repeated 32 times on one line)."""

from __future__ import annotations

from gicbench.bootstrap.collective import JobFailure


def test_identical_reasons_are_grouped_by_rank_span() -> None:
    why = "FabricError: emu segment full"
    e = JobFailure("bring-up", [(r, why) for r in range(32)])
    assert str(e).count(why) == 1
    assert "failed on 32 rank(s): ranks 0-31: " + why in str(e)
    mixed = JobFailure("p", [(0, "a"), (1, "a"), (2, "b"), (5, "a"), (7, "a"), (8, "a")])
    assert str(mixed) == "p failed on 6 rank(s): ranks 0-1,5,7-8: a; rank 2: b"
    assert mixed.failures[2] == (2, "b")
