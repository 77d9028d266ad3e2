"""active-connections through `analyze` and `report`: the NIC rate of each role, each point over
its own pass's control, the median over passes with their range, the plateau + power-law fit
per curve recovering a known onset, and the Fig. 10 figures (modelled runs say so)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from launching import gicbench

from gicbench.analysis.connections import nic_rate, pass_summary
from gicbench.trace import TraceWriter, write_manifest

ONSET, ALPHA, PLATEAU = 300.0, 0.6, 20.0  # the synthetic NIC: flat, then a power-law decline
GRID = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


def truth(x: float) -> float:
    return PLATEAU * min(1.0, (x / ONSET) ** -ALPHA)


def write_run(run_dir: Path, role: str = "send-receive", passes: int = 3, world: int = 2,
              drift: tuple[float, ...] = (1.0, 0.9, 1.1), knobs: dict | None = None,
              writes: tuple[int, ...] = (32,)) -> Path:
    """A finished run as the harness writes it: per pass the control then the grid; pass p
    runs `drift[p]` times faster overall (a pass's own reference absorbs it)."""
    config = {"knobs": knobs or {}}
    manifest = {"experiments": ["active-connections"], "config": config, "world_size": world,
                "provider": "emu", "submitter": "host", "argv": ["gicbench"], "hosts": ["h"],
                "start_utc": "2026-01-01T00:00:00+00:00"}
    write_manifest(run_dir, {**manifest, "status": "running"})
    meta = {"experiments": ["active-connections"], "config": config, "provider": "emu",
            "submitter": "host", "host": "h", "gpu": {}, "nic": {}, "sm_clock_hz": float("nan"),
            "argv": [], "env": {}}
    for rank in range(world):
        with TraceWriter(run_dir, rank, world, {**meta, "local_rank": rank}) as w:
            for n in range(1, passes + 1):
                for wpv in writes:
                    for control, x in ((True, 2), *((False, g) for g in GRID)):
                        params = {"nic_role": role, "transport": "rc", "payload": "inline",
                                  "writes_per_visit": wpv, "batch": 32, "threads": 1,
                                  "pool": max(GRID), "pass": n, "size": 8, "control": control,
                                  "connections": x}
                        rate = truth(x) * drift[n - 1] / (1 if wpv == 32 else 2)
                        _point(w, params, rate, rank, role)
    write_manifest(run_dir, {**manifest, "status": "complete",
                             "end_utc": "2026-01-01T00:00:01+00:00"})
    return run_dir


def _point(w: TraceWriter, params: dict[str, Any], rate: float, rank: int, role: str) -> None:
    receiver = role == "receive-only" and rank == 0
    sender_role = {"send-receive": "both", "send-only": "sender", "receive-only": "sender"}[role]
    with w.begin_point("active-connections", params) as p:
        if receiver:
            p.set_results({"role": "receiver", "validated": True, "validated_bytes": 64})
            return
        messages = 100_000
        elapsed = int(messages / rate * 1e3)  # rate M msg/s
        p.add_samples("window_ns", np.full(20, elapsed // 20, dtype=np.int64))
        p.set_results({"role": sender_role, "validated": True, "validated_bytes": 64,
                       "messages": messages, "elapsed_ns": elapsed, "msg_rate_mps": rate,
                       "gbps": rate * 8e-3})


def analyze_json(run: Path) -> dict:
    r = gicbench("analyze", str(run), "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_each_point_over_its_own_pass_then_the_median_over_passes(tmp_path: Path) -> None:
    doc = analyze_json(write_run(tmp_path / "run"))
    (over,) = doc["over_passes"]["active-connections"]
    rows = {r["connections"]: r for r in over["rows"] if not r["control"]}
    for x in GRID:
        # the drift of each pass is divided out: normalised exactly, absolute median at drift 1
        assert rows[x]["normalized_rate"] == pytest.approx(truth(x) / truth(2))
        assert rows[x]["normalized_rate_min"] == pytest.approx(truth(x) / truth(2))
        assert rows[x]["nic_rate_mps"] == pytest.approx(truth(x))
        assert rows[x]["nic_rate_mps_min"] == pytest.approx(truth(x) * 0.9)
        assert rows[x]["nic_rate_mps_max"] == pytest.approx(truth(x) * 1.1)
        assert rows[x]["passes"] == 3


def test_the_fit_recovers_the_onset_per_curve(tmp_path: Path) -> None:
    doc = analyze_json(write_run(tmp_path / "run", writes=(32, 8192)))
    fits = doc["fits"]["active-connections"]
    assert len(fits) == 2  # one curve per writes-per-visit
    for f in fits:
        assert f["x"] == "connections" and f["y"] == "normalized_rate"
        assert f["parameters"]["onset"]["value"] == pytest.approx(ONSET, rel=1e-3)
        assert f["parameters"]["exponent"]["value"] == pytest.approx(ALPHA, rel=1e-3)
    assert sorted(f["group"]["writes_per_visit"] for f in fits) == [32, 8192]


def test_receive_only_is_the_aggregate_over_the_common_duration() -> None:
    t = pd.DataFrame({"nic_role": ["receive-only", "send-receive"], "messages": [300, 300],
                      "elapsed_ns": [100, 100], "msg_rate_mps_per_rank": [1.0, 1.5]})
    assert nic_rate(t).tolist() == [3000.0, 1.5]  # 300 messages in 100 ns: 3,000 M msg/s


def test_a_pass_without_its_control_is_not_normalised() -> None:
    t = pd.DataFrame({"pass": [1, 1, 2], "control": [True, False, False],
                      "connections": [2, 8, 8], "nic_role": "send-only",
                      "msg_rate_mps_per_rank": [10.0, 5.0, 4.0]})
    s = pass_summary(t, ["pass", "control", "connections", "nic_role"])
    row = s[~s["control"]].iloc[0]
    assert row["normalized_rate"] == 0.5 and row["passes"] == 2  # pass 2 has no reference


def test_report_draws_both_figures_and_says_when_modelled(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", role="receive-only", world=3)
    r = gicbench("report", str(run))
    assert r.returncode == 0, r.stderr
    text = (run / "report.md").read_text()
    assert "plots/active-connections-rate.png" in text
    assert "plots/active-connections-normalized.png" in text
    assert "onset = " in text and "Modelled" not in text
    modelled = write_run(tmp_path / "model", knobs={"nic_model": "cx7-ib-200g"})
    r = gicbench("report", str(modelled))
    assert r.returncode == 0, r.stderr
    assert "Modelled, not measured (cx7-ib-200g NIC model)" in (modelled / "report.md").read_text()
