"""active-connections on Soft-RoCE (rxe0 in the guest): a short host-verbs sweep at 2 ranks
(the post-send path: one submitting thread cycling RC QPs, W writes per visit), send-only and
send-receive, every point's landing validated and the rate recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from launching import launch

from gicbench.trace import open_run


@pytest.mark.parametrize("pattern", ["pairs", "all-to-all"])
def test_host_verbs_sweep_at_two_ranks(tmp_path: Path, rxe_device: str, pattern: str) -> None:
    out = tmp_path / pattern
    r = launch(
        2, "run", "active-connections", "--provider", "verbs", "--ib-dev", rxe_device,
        "--gid-index", "1", "--pattern", pattern, "--active", "4,16", "--writes-per-visit", "4",
        "--messages", "400", "--passes", "2", "--quiet", "--json", "-o", str(out), timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    rows = [row for row in doc["results"] if row["experiment"] == "active-connections"]
    assert [(row["pass"], row["connections"]) for row in rows] == [
        (1, 2), (1, 4), (1, 16), (2, 2), (2, 4), (2, 16)]  # fmt: skip
    assert all(row["validated"] and row["msg_rate_mps"] > 0 for row in rows)
    run = open_run(out)  # every landed payload was checked before the run was called complete
    assert run.status == "complete" and not run.problems
