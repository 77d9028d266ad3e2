"""TraceWriter / PointWriter / write_manifest: layout, attribute rule, atomic finish and abort."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np
import pytest

from gicbench import __version__
from gicbench.errors import TraceError
from gicbench.trace import SCHEMA_VERSION, TraceWriter, open_run, read_manifest, write_manifest

META = {
    "experiments": ["single-op"],
    "config": {"iterations": 5, "sizes": [8, 16], "nested": {"a": None}},
    "provider": "emu",
    "host": "node1",
    "local_rank": 0,
    "sm_clock_hz": float("nan"),
    "argv": ["gicbench", "run"],
    "env": {"OMPI_COMM_WORLD_SIZE": "1"},
    "gpu": {"name": "H100", "sms": 132},
    "dry": False,
}


def test_root_attributes_follow_the_rule(tmp_path: Path) -> None:
    w = TraceWriter(tmp_path, 0, 1, META)
    assert w.partial_path.name == "rank-00000.h5.partial" and w.partial_path.exists()
    with h5py.File(w.partial_path, "r") as f:
        # Text is fixed-length UTF-8 (HDF5 checksums it with the object header): bytes to h5py.
        assert f.attrs["status"] == b"incomplete"  # written at once, before any point
        assert f.attrs.get_id("status").get_type().get_class() == h5py.h5t.STRING
        assert not f.attrs.get_id("status").get_type().is_variable_str()
        assert f.attrs["schema"].decode() == SCHEMA_VERSION
        assert f.attrs["tool_version"].decode() == __version__
        assert isinstance(f.attrs["git_rev"], bytes) and f.attrs["git_rev"]
        assert f.attrs["provider"] == b"emu" and f.attrs["local_rank"] == 0
        assert math.isnan(f.attrs["sm_clock_hz"])
        assert json.loads(f.attrs["config"]) == META["config"]  # dicts as JSON strings
        assert json.loads(f.attrs["argv"]) == META["argv"]
        assert set(json.loads(f.attrs["json_keys"])) == {
            "config",
            "argv",
            "env",
            "gpu",
            "experiments",
        }
    path = w.finish()
    assert path.name == "rank-00000.h5" and not w.partial_path.exists()
    rank = open_run_for(tmp_path, 1).ranks[0]
    assert rank.attrs["config"] == META["config"] and rank.attrs["gpu"] == META["gpu"]
    assert rank.attrs["dry"] is False and rank.attrs["status"] == "complete"
    assert rank.attrs["end_utc"] >= rank.attrs["start_utc"]


def open_run_for(run_dir: Path, world_size: int):
    write_manifest(run_dir, {"world_size": world_size, "status": "complete"})
    return open_run(run_dir)


def test_points_samples_counters_results(tmp_path: Path) -> None:
    with TraceWriter(tmp_path, 0, 1, META) as w:
        for size in (8, 16):
            with w.begin_point("single-op", {"size": size, "mode": "issue", "sweep": [1, 2]}) as p:
                p.add_samples("issue_ns", np.arange(3, dtype=np.int32) + size)
                p.add_samples("issue_ns", np.array([99], dtype=np.uint64))  # appends
                p.add_samples("empty_ns", np.array([], dtype=np.int64))
                p.set_counters({"wqes": 10, "bytes": 0}, {"wqes": 14, "bytes": 32})
                p.set_results({"validated": True, "bytes_moved": 32})
                p.set_results({"bytes_moved": 64})  # merges
    with h5py.File(tmp_path / "rank-00000.h5", "r") as f:
        g = f["points/00001"]
        assert g.attrs["experiment"] == b"single-op" and g.attrs["size"] == 16
        assert "sweep" not in g.attrs  # only scalar params as their own attributes
        assert json.loads(g.attrs["params"])["sweep"] == [1, 2]
        ds = g["samples/issue_ns"]
        assert ds.dtype == np.int64 and ds.chunks is not None and ds.maxshape == (None,)
        assert ds[()].tolist() == [16, 17, 18, 99]
    point = open_run_for(tmp_path, 1).ranks[0].point(1)
    assert point.params == {"size": 16, "mode": "issue", "sweep": [1, 2]}
    assert point.results == {"validated": True, "bytes_moved": 64}
    assert point.counter_deltas == {"wqes": 4, "bytes": 32}
    assert point.metrics == ["empty_ns", "issue_ns"] and point.closed


@pytest.mark.parametrize(
    ("samples", "message"),
    [
        (np.array([1.5, 2.0]), "integer nanoseconds"),
        (np.zeros((2, 2), dtype=np.int64), "1-D"),
        (np.array([2**64 - 1], dtype=np.uint64), "overflow"),
    ],
)
def test_bad_samples_are_refused(tmp_path: Path, samples: np.ndarray, message: str) -> None:
    with TraceWriter(tmp_path, 0, 1, {}) as w, w.begin_point("x", {}) as p:
        with pytest.raises(TraceError, match=message):
            p.add_samples("lat_ns", samples)
        with pytest.raises(TraceError, match="metric name"):
            p.add_samples("a/b", np.arange(2))


def test_bad_writer_input(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="rank"):
        TraceWriter(tmp_path, 2, 2, {})
    with pytest.raises(TraceError, match="world_size"):
        TraceWriter(tmp_path, 0, 0, {})
    with pytest.raises(TraceError, match="reserved"):
        TraceWriter(tmp_path, 0, 1, {"status": "complete"})
    w = TraceWriter(tmp_path, 0, 1, {})
    p = w.begin_point("x", {})
    with pytest.raises(TraceError, match="still open"):
        w.begin_point("x", {})
    p.close()
    with pytest.raises(TraceError, match="closed"):
        p.add_samples("a", np.arange(2))
    with pytest.raises(TraceError, match="status"):
        w.finish(status="done")
    w.finish()
    with pytest.raises(TraceError, match="already finished"):
        w.begin_point("x", {})
    with pytest.raises(TraceError, match="already exists"):
        TraceWriter(tmp_path, 0, 1, {})


def test_abort_renames_with_failure_and_leaves_point_unclosed(tmp_path: Path) -> None:
    w = TraceWriter(tmp_path, 0, 1, {})
    with w.begin_point("x", {"size": 8}) as p:
        p.add_samples("lat_ns", np.arange(4))
    p2 = w.begin_point("x", {"size": 16})
    p2.add_samples("lat_ns", np.arange(2))
    assert w.abort("peer rank 1 died") == tmp_path / "rank-00000.h5"
    assert w.abort("again") is None  # idempotent
    with pytest.raises(TraceError, match="finished or aborted"):
        p2.add_samples("lat_ns", np.arange(2))
    run = open_run_for(tmp_path, 1)
    assert run.ranks[0].attrs["status"] == "incomplete"
    assert run.ranks[0].attrs["failure"] == "peer rank 1 died"
    assert [pt.closed for pt in run.ranks[0].points()] == [True, False]
    assert any("peer rank 1 died" in p for p in run.problems)
    assert any("interrupted" in p for p in run.problems)


def test_context_manager_aborts_on_exception(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), TraceWriter(tmp_path, 0, 1, {}) as w:
        w.begin_point("x", {})
        raise RuntimeError("validation failed at size 64")
    with h5py.File(tmp_path / "rank-00000.h5", "r") as f:
        assert f.attrs["status"] == b"incomplete"
        assert b"validation failed at size 64" in f.attrs["failure"]


def test_sigkilled_rank_leaves_a_readable_partial_file(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import os, signal, numpy as np
        from gicbench.trace import TraceWriter, write_manifest
        write_manifest({str(tmp_path)!r}, {{"world_size": 1, "status": "running"}})
        w = TraceWriter({str(tmp_path)!r}, 0, 1, {{"provider": "emu"}})
        for size in (8, 16, 32):
            with w.begin_point("single-op", {{"size": size}}) as p:
                p.add_samples("rtt_ns", np.arange(1000) + size)
        w.begin_point("single-op", {{"size": 64}}).add_samples("rtt_ns", np.arange(10))
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], check=False)
    assert done.returncode == -signal.SIGKILL
    assert not (tmp_path / "rank-00000.h5").exists()
    run = open_run(tmp_path)
    assert run.status == "incomplete"
    assert any("rank-00000.h5.partial" in p for p in run.problems)
    assert any("running" in p for p in run.problems)
    rank = run.ranks[0]
    assert rank.partial and rank.status == "incomplete"
    closed = [pt for pt in rank.points() if pt.closed]
    assert [pt.params["size"] for pt in closed] == [8, 16, 32]
    assert rank.samples(2, "rtt_ns")[-1] == 999 + 32
    run.close()


def test_manifest_atomic_defaults_and_validation(tmp_path: Path) -> None:
    write_manifest(tmp_path, {"world_size": 4, "status": "running", "experiments": ["a"]})
    m = read_manifest(tmp_path)
    assert m["schema"] == SCHEMA_VERSION and m["tool_version"] == __version__
    assert m["hosts"] is None and m["end_utc"] is None  # every field present
    write_manifest(
        tmp_path,
        {
            **m,
            "status": "incomplete",
            "failed_ranks": [3],
            "reason": "rank 3: CompletionTimeout",
            "sm": float("nan"),
        },
    )
    m2 = read_manifest(tmp_path)
    assert m2["failed_ranks"] == [3] and m2["sm"] is None  # NaN would be invalid JSON
    assert sorted(os.listdir(tmp_path)) == ["run.json"]  # no temporary left behind
    with pytest.raises(TraceError, match="status"):
        write_manifest(tmp_path, {"world_size": 1, "status": "done"})
    with pytest.raises(TraceError, match="world_size"):
        write_manifest(tmp_path, {"world_size": 0, "status": "running"})
    with pytest.raises(TypeError, match="cannot store"):
        write_manifest(tmp_path, {"world_size": 1, "status": "running", "x": object()})
    assert read_manifest(tmp_path)["status"] == "incomplete"  # failed writes changed nothing
