"""`gicbench run --provider verbs` end to end on rxe0 (mpiexec in the guest): single-op and
msg-rate between a pair, all-to-all on 3 ranks, a rank that dies, and what the provider refuses
in pre-flight (experiments that need mlx5 queues in memory, a bad --gid-index)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from launching import launch

from gicbench.config import RunConfig
from gicbench.errors import ConfigError, UnsupportedError
from gicbench.plan import make_plan
from gicbench.trace import open_run

QUICK = ["-n", "200", "-w", "10", "--quiet"]
VERBS = ["--provider", "verbs"]


def _json(r) -> dict:
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def test_single_op_and_msg_rate_between_a_pair(tmp_path: Path, rxe_device: str) -> None:
    out = tmp_path / "pair"
    r = launch(
        2, "run", "single-op", "msg-rate", *VERBS, "--ib-dev", rxe_device, "--gid-index", "1",
        "-b", "8", "-e", "64", "-f", "8", *QUICK, "--messages", "2000", "--json", "-o", str(out),
        timeout=600,
    )  # fmt: skip
    doc = _json(r)
    assert doc["nic"]["device"] == rxe_device and doc["nic"]["gid_index"] == 1
    single = [row for row in doc["results"] if row["experiment"] == "single-op"]
    assert {row["mode"] for row in single} == {"issue", "put_completion", "round_trip"}
    assert {row["size"] for row in single} == {8, 64}
    assert all(row["p50_us"] > 0 and row["count"] == 200 for row in single)
    rate = [row for row in doc["results"] if row["experiment"] == "msg-rate"]
    assert {row["size"] for row in rate} == {8, 64} and all(r["msg_rate_mps"] > 0 for r in rate)
    run = open_run(out)  # the harness checked every landed payload before calling it complete
    assert run.status == "complete" and not run.problems
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["provider"] == "verbs" and manifest["config"]["provider"] == "verbs"


def _preflight(**values):
    """make_plan and the provider's pre-flight, as every rank runs them (one rank of two)."""
    plan = make_plan(RunConfig.build(experiments=["single-op"], provider="verbs", **values))
    topo = SimpleNamespace(rank=0, size=2, local_size=2, nodes=1, hosts=["guest", "guest"])
    fplan = plan.fabric_plan(topo, 1, plan.layout(topo.size))
    return plan.provider.preflight(fplan, topo, plan.probes)


def test_device_from_the_environment_override(tmp_path: Path, rxe_device: str, monkeypatch):
    r = launch(
        2, "run", "single-op", *VERBS, "--modes", "put_completion", *QUICK, "--json",
        "-o", str(tmp_path / "env"), env={"GICBENCH_IB_HCA": f"={rxe_device}:1"}, timeout=600,
    )  # fmt: skip
    assert _json(r)["nic"]["device"] == rxe_device
    monkeypatch.setenv("GICBENCH_IB_HCA", "mlx5_9")
    # caps (the plan's first check) already selects through the override: refused either way
    with pytest.raises((ConfigError, UnsupportedError), match=f"GICBENCH_IB_HCA.*{rxe_device}:1"):
        _preflight()
    # --ib-dev wins over the environment
    assert _preflight(ib_dev=rxe_device)["device"] == rxe_device


def test_all_to_all_msg_rate_on_three_ranks(tmp_path: Path) -> None:
    out = tmp_path / "a2a"
    r = launch(
        3, "run", "msg-rate", *VERBS, "--pattern", "all-to-all", "-b", "8", "-e", "8",
        "-w", "10", "--messages", "1000", "--batch", "8", "--quiet", "--json", "-o", str(out),
        timeout=600,
    )  # fmt: skip
    doc = _json(r)
    assert doc["world_size"] == 3 and doc["bringup"]["rc_qps"] == 2  # one QP to each peer
    (row,) = [row for row in doc["results"] if row["experiment"] == "msg-rate"]
    assert row["msg_rate_mps"] > 0
    assert open_run(out).status == "complete"


def test_rank_killed_mid_run_ends_the_job(tmp_path: Path) -> None:
    out = tmp_path / "killed"
    r = launch(
        2, "run", "single-op", *VERBS, "-b", "8", "-e", "64", *QUICK, "-o", str(out),
        env={"GICBENCH_FAULT": "kill:1:2"}, timeout=600,
    )  # fmt: skip
    assert r.returncode != 0
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["status"] != "complete"  # incomplete, or running when rank 0 died first
    assert open_run(out).status == "incomplete"
    assert (out / "rank-00001.h5.partial").exists()  # SIGKILL: never finished


def test_what_needs_mlx5_queues_in_memory_is_refused(tmp_path: Path) -> None:
    r = launch(1, "run", "single-op", *VERBS, "--scope", "all", "-o", str(tmp_path / "s"),
               timeout=600)  # fmt: skip
    assert r.returncode == 2
    assert "--scope all reads every configured QP's CQ from memory" in r.stderr
    assert "provider verbs has no mlx5 queues in memory" in r.stderr
    assert not (tmp_path / "s").exists()  # refused before anything was created
    with pytest.raises(UnsupportedError, match="provider verbs has no DC transport"):
        make_plan(RunConfig.build(experiments=["msg-rate"], provider="verbs", transport="dc"))


def test_bad_gid_index_is_refused_naming_the_flag(rxe_device: str) -> None:
    with pytest.raises(ConfigError, match=rf"gid_index \(--gid-index\).*{rxe_device}:1"):
        _preflight(gid_index=77)
    assert _preflight(gid_index=1)["gid_index"] == 1
