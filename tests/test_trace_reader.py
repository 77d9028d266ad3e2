"""open_run validation: manifest, schema versions, missing/partial/extra rank files."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
from trace_helpers import make_run

from gicbench.errors import TraceError
from gicbench.trace import TraceWriter, open_run, schema, write_manifest


def test_complete_run(tmp_path: Path) -> None:
    make_run(tmp_path, world_size=3, n=50)
    with open_run(tmp_path) as run:
        assert run.status == "complete" and run.problems == []
        assert [r.rank for r in run.ranks] == [0, 1, 2] and run.world_size == 3
        assert run.experiments == ["single-op", "msg-rate"]
        points = list(run.ranks[1].points())
        assert points[0].experiment == "single-op" and points[0].metrics == ["issue_ns"]
        assert run.ranks[1].samples(0, "issue_ns").shape == (50,)
        with pytest.raises(TraceError, match=r"no metric 'rtt_ns'.*issue_ns"):
            run.ranks[1].samples(0, "rtt_ns")
        with pytest.raises(TraceError, match="no point 999"):
            run.ranks[1].samples(999, "issue_ns")


def test_missing_manifest_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"run\.json is missing"):
        open_run(tmp_path)
    with pytest.raises(TraceError, match="not a directory"):
        open_run(tmp_path / "nope")
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(TraceError, match="not valid JSON"):
        open_run(tmp_path)


def test_unknown_schema_in_manifest_is_refused(tmp_path: Path) -> None:
    write_manifest(tmp_path, {"world_size": 1, "status": "complete", "schema": "gicbench-trace/99"})
    with pytest.raises(TraceError, match=r"gicbench-trace/99.*known.*gicbench-trace/1"):
        open_run(tmp_path)


def _set_schema(path: Path, version: str) -> None:
    with h5py.File(path, "a") as f:
        f.attrs["schema"] = version


def test_unknown_schema_everywhere_is_refused(tmp_path: Path, monkeypatch) -> None:
    make_run(tmp_path, world_size=2, n=5)
    write_manifest(tmp_path, {**_manifest(tmp_path), "schema": "gicbench-trace/7"})
    for rank in range(2):
        _set_schema(tmp_path / f"rank-{rank:05d}.h5", "gicbench-trace/7")
    with pytest.raises(TraceError, match=r"unknown trace schema version 'gicbench-trace/7'"):
        open_run(tmp_path)


def test_mixed_schema_versions_are_refused(tmp_path: Path, monkeypatch) -> None:
    make_run(tmp_path, world_size=2, n=5)
    _set_schema(tmp_path / "rank-00001.h5", "gicbench-trace/1")
    with pytest.raises(TraceError, match=r"mixed schema versions.*rank-00001\.h5=gicbench-trace/1"):
        open_run(tmp_path)
    # Even when both versions are known, they may not be mixed in one run.
    monkeypatch.setattr(schema, "KNOWN_SCHEMAS", ("gicbench-trace/1", "gicbench-trace/2"))
    with pytest.raises(TraceError, match="mixed schema versions"):
        open_run(tmp_path)


def _manifest(run_dir: Path) -> dict:
    import json

    return json.loads((run_dir / "run.json").read_text())


def test_missing_partial_and_extra_ranks_are_problems(tmp_path: Path) -> None:
    make_run(tmp_path, world_size=3, n=5)
    (tmp_path / "rank-00001.h5").unlink()
    (tmp_path / "rank-00002.h5").rename(tmp_path / "rank-00002.h5.partial")
    (tmp_path / "rank-00007.h5").write_bytes(b"")
    run = open_run(tmp_path)
    assert run.status == "incomplete"
    text = "\n".join(run.problems)
    assert "rank 1: trace file rank-00001.h5 is missing" in text
    assert "rank 2: only rank-00002.h5.partial" in text
    assert "unexpected file rank-00007.h5" in text
    assert [r.rank for r in run.ranks] == [0, 2] and run.ranks[1].partial


def test_unreadable_and_inconsistent_rank_files(tmp_path: Path) -> None:
    make_run(tmp_path, world_size=2, n=5)
    (tmp_path / "rank-00001.h5").write_bytes(b"garbage, not HDF5")
    run = open_run(tmp_path)
    assert any("rank 1: cannot read rank-00001.h5" in p for p in run.problems)
    assert [r.rank for r in run.ranks] == [0]
    # A file of a different run (world size 4) dropped into this one.
    (tmp_path / "rank-00001.h5").unlink()
    other = tmp_path / "other"
    with TraceWriter(other, 1, 4, {}) as w, w.begin_point("x", {}) as p:
        p.add_samples("a_ns", np.arange(3))
    (other / "rank-00001.h5").rename(tmp_path / "rank-00001.h5")
    run = open_run(tmp_path)
    assert any("says world_size=4" in p for p in run.problems)


def test_manifest_status_incomplete_is_a_problem(tmp_path: Path) -> None:
    make_run(tmp_path, world_size=2, n=5)
    write_manifest(
        tmp_path,
        {
            **_manifest(tmp_path),
            "status": "incomplete",
            "failed_ranks": [1],
            "reason": "rank 1: CompletionTimeout",
        },
    )
    run = open_run(tmp_path)
    assert run.status == "incomplete"
    assert run.problems == [
        "run.json status is 'incomplete': rank 1: CompletionTimeout (failed ranks: [1])"
    ]


def test_large_configuration_round_trips(tmp_path: Path) -> None:
    config = {f"key{i}": list(range(50)) for i in range(2000)}  # ~300 KB of JSON
    with TraceWriter(tmp_path, 0, 1, {"config": config}) as w:
        w.begin_point("x", {"size": 8}).close()
    write_manifest(tmp_path, {"world_size": 1, "status": "complete", "config": config})
    with open_run(tmp_path) as run:
        assert run.ranks[0].attrs["config"] == config
        assert run.manifest["config"] == config


def _as_schema_1(run_dir: Path) -> None:
    """Make a run look as gicbench wrote it before the digests (schema 1)."""
    import json

    manifest = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**manifest, "schema": "gicbench-trace/1"}))
    for path in run_dir.glob("rank-*.h5"):
        with h5py.File(path, "a") as f:
            f.attrs["schema"] = "gicbench-trace/1"
            for attrs in [f.attrs, *(g.attrs for g in f["points"].values())]:
                for name in ("digest", "sample_digests", "point_count"):
                    if name in attrs:
                        del attrs[name]


def test_schema_1_runs_are_read_with_a_warning(tmp_path: Path, capsys) -> None:
    """Traces from before the digests stay readable; the one warning line says what cannot
    be checked."""
    from test_trace_damage import _analyze

    from gicbench.analysis.load import load_run
    from gicbench.trace import TraceWarning

    make_run(tmp_path, world_size=2, n=20)
    _as_schema_1(tmp_path)
    with open_run(tmp_path) as run:
        assert run.problems == [] and len(run.warnings) == 1
        assert "has no digests" in run.warnings[0]
        assert run.ranks[1].samples(0, "issue_ns").size == 20  # unchecked, still read
    with pytest.warns(TraceWarning, match="cannot be detected"):
        assert load_run(tmp_path).attrs["warnings"] == run.warnings
    assert _analyze([str(tmp_path), "--json"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("gicbench analyze: warning: ")


def test_schema_1_points_still_need_their_samples_group(tmp_path: Path) -> None:
    make_run(tmp_path, world_size=2, n=20)
    _as_schema_1(tmp_path)
    with h5py.File(tmp_path / "rank-00001.h5", "a") as f:
        del f["points/00002/samples"]
    with open_run(tmp_path) as run:
        assert any("rank 1: 1 unreadable point(s)" in p and "samples group is missing" in p
                   for p in run.problems), run.problems
