"""mini-proxy on the verbs provider (rxe0 in the guest, mpiexec -n 2): the workers post their
chains with ibv_post_send and poll with ibv_poll_cq; single-op and proxy-rate with payloads
validated on every receiving rank, worker state recorded, and what cannot run refused in
pre-flight (exit 2, nothing created)."""

from __future__ import annotations

import json
from pathlib import Path

from launching import launch

from gicbench.trace import open_run

PROXY = ["--submitter", "proxy", "--provider", "verbs", "--precondition-s", "0"]


def _complete(r, out: Path):
    assert r.returncode == 0, r.stdout + r.stderr
    run = open_run(out)
    assert run.status == "complete", run.problems
    return run


def test_single_op_and_proxy_rate_through_ibv_post_send(tmp_path: Path) -> None:
    out = tmp_path / "proxy"
    r = launch(
        2, "run", "single-op", "proxy-rate", *PROXY, "-b", "8", "-e", "8",
        "-n", "50", "-w", "5", "--messages", "1000", "--sweep-workers", "1,2",
        "--sweep-rings", "4", "--sweep-batch", "1,16", "--quiet", "--json", "-o", str(out),
        timeout=900,
    )  # fmt: skip
    run = _complete(r, out)
    doc = json.loads(r.stdout)
    assert {row["experiment"] for row in doc["results"]} == {"single-op", "proxy-rate"}
    for rk in run.ranks:
        assert rk.attrs["submitter"] == "proxy"
        for pt in rk.points():
            assert pt.results["validated"] is True  # bytes compared somewhere, all matched
            if rk.rank == 0:  # the sender of the pair: its workers ran and posted
                assert pt.results["worker_cores"]
                assert pt.results["precondition"] == "cold"
                delta = pt.counters_after["wqes"] - pt.counters_before["wqes"]
                assert delta > 0
        if rk.rank == 1:
            assert any(pt.results["validated_bytes"] > 0 for pt in rk.points())
    rate = [row for row in doc["results"] if row["experiment"] == "proxy-rate"]
    assert len(rate) == 4 and all(row["msg_rate_mps"] > 0 for row in rate)  # T x B
    b16 = [row for row in rate if row["batch"] == 16]
    assert any(row["wqes_per_doorbell"] > 1 for row in b16)  # chains of several WRs per post


def test_inline_beyond_the_verbs_qps_is_refused_before_anything_exists(tmp_path: Path) -> None:
    out = tmp_path / "refused"
    r = launch(
        2, "run", "single-op", *PROXY, "-b", "128", "-e", "128", "--payload", "inline",
        "-o", str(out), timeout=600,
    )  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert "payload (--payload)" in r.stderr and "pointer for sizes above 64 B" in r.stderr
    assert not out.exists()
