"""The live table and `gicbench analyze` print the same numbers (msg-rate's
"M msg/s" was the median per pair live and the sum over pairs offline)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agreement import assert_live_matches_offline
from launching import launch


@pytest.mark.parametrize(
    ("ranks", "args"),
    [
        (
            2,
            [
                "--suite",
                "default",
                "-b",
                "8",
                "-e",
                "64",
                "-f",
                "8",
                "-n",
                "100",
                "--messages",
                "3000",
            ],
        ),
        (4, ["msg-rate", "-q", "2", "-t", "2", "--messages", "3000"]),
        (3, ["msg-rate", "--pattern", "all-to-all", "-q", "1", "--messages", "2000"]),
        (3, ["single-op", "--pattern", "fan-in", "--modes", "issue,put_completion", "-n", "80"]),
    ],
)
def test_live_rows_equal_offline_rows(tmp_path: Path, ranks: int, args: list[str]) -> None:
    out = tmp_path / "run"
    r = launch(ranks, "run", *args, "-w", "10", "--json", "-o", str(out))
    assert r.returncode == 0, r.stderr
    live = json.loads(r.stdout)["results"]
    assert live and all(row.get("validated") is True for row in live)
    assert_live_matches_offline(out, live)
