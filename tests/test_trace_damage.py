"""Damaged and mismatched traces (issue 9 rows 9, 10, 13 and the small items): the reader counts
what it expects, analyze/report refuse without --allow-incomplete and never show a traceback."""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from trace_helpers import make_run

from gicbench.analysis.cli import add_analyze_args, add_report_args, run_analyze, run_report
from gicbench.analysis.load import load_run
from gicbench.errors import TraceError
from gicbench.trace import TraceWriter, open_run, write_manifest


def _analyze(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    add_analyze_args(parser)
    return run_analyze(parser.parse_args(argv))


def _report(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    add_report_args(parser)
    return run_report(parser.parse_args(argv))


def _write(run_dir: Path, sizes: tuple[int, ...] = (8, 64), world: int = 2, iters: int = 50,
           run_id: str | None = None, rank_ids: dict[int, str] | None = None,
           config: dict[str, Any] | None = None, points_per_rank: int | None = None,
           short: dict[int, int] | None = None) -> Path:
    """A run as the harness writes it: every rank records every point; senders sample."""
    config = config if config is not None else {"sizes": list(sizes), "iters": iters}
    manifest: dict[str, Any] = {"world_size": world, "status": "complete", "config": config}
    if run_id is not None:
        manifest["run_id"] = run_id
    if points_per_rank is not None:
        manifest["points_per_rank"] = points_per_rank
    for rank in range(world):
        meta: dict[str, Any] = {"config": config}
        rid = (rank_ids or {}).get(rank, run_id)
        if rid is not None:
            meta["run_id"] = rid
        with TraceWriter(run_dir, rank, world, meta) as w:
            for size in sizes:
                with w.begin_point("single-op", {"size": size, "iters": iters}) as p:
                    n = iters - (short or {}).get(rank, 0)
                    p.add_samples("rtt_ns", np.arange(1000, 1000 + n, dtype=np.int64))
                    p.set_results({"role": "sender", "validated": True})
    write_manifest(run_dir, manifest)
    return run_dir


def _problems(run_dir: Path) -> list[str]:
    with open_run(run_dir) as run:
        return run.problems


# ---- row 13 and the run.json mode --------------------------------------------------------------


def test_run_json_of_random_bytes_is_a_trace_error(tmp_path: Path, capsys) -> None:
    make_run(tmp_path, world_size=1, n=10)
    (tmp_path / "run.json").write_bytes(np.random.default_rng(1).bytes(256) + b"\xff\xfe")
    with pytest.raises(TraceError, match="not text"):
        open_run(tmp_path)
    assert _analyze([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "run.json is not text" in err and "Traceback" not in err


def test_run_json_has_the_mode_of_the_rank_files(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        make_run(tmp_path, world_size=1, n=10)
    finally:
        os.umask(old)
    mode = (tmp_path / "run.json").stat().st_mode & 0o777
    assert mode == (tmp_path / "rank-00000.h5").stat().st_mode & 0o777 == 0o644


# ---- row 9: damaged rank files -----------------------------------------------------------------


def test_random_bytes_anywhere_in_a_rank_file_never_pass_silently(tmp_path: Path,
                                                                  capsys) -> None:
    """256 random bytes at offsets across a rank file: analyze either refuses (exit 2, one line,
    no traceback) or prints exactly the clean output (the bytes hit unused space)."""
    base = make_run(tmp_path / "base", world_size=2, n=40)
    assert _analyze([str(base), "--json"]) == 0
    clean = json.loads(capsys.readouterr().out)["experiments"]
    size = (base / "rank-00001.h5").stat().st_size
    rng = np.random.default_rng(7)
    refused = 0
    for offset in range(0, size, max(size // 24, 512)):
        run = tmp_path / f"at-{offset}"
        shutil.copytree(base, run)
        with open(run / "rank-00001.h5", "r+b") as f:
            f.seek(offset)
            f.write(rng.bytes(256))
        code = _analyze([str(run), "--json"])
        out, err = capsys.readouterr()
        assert "Traceback" not in err, (offset, err)
        if code == 0:
            assert json.loads(out)["experiments"] == clean, f"silent change at offset {offset}"
        else:
            assert code == 2 and err.startswith("gicbench analyze: "), (offset, err)
            refused += 1
            assert _analyze([str(run), "--allow-incomplete"]) in (0, 2)
            assert "Traceback" not in capsys.readouterr().err
    assert refused >= 3


def test_an_unreadable_point_is_named_and_the_rest_kept(tmp_path: Path, capsys) -> None:
    make_run(tmp_path, world_size=2, n=20)
    with h5py.File(tmp_path / "rank-00001.h5", "a") as f:
        f["points/00004"].attrs["params"] = "[1, 2]"  # a list where a dict belongs
    problems = _problems(tmp_path)
    assert any("rank 1: 1 unreadable point(s)" in p and "00004" in p for p in problems)
    assert _analyze([str(tmp_path)]) == 2
    assert "unreadable point" in capsys.readouterr().err
    df = load_run(tmp_path, allow_incomplete=True)
    assert sorted(df.loc[df["rank"] == 1, "point"]) == [i for i in range(15) if i != 4]


def test_a_missing_point_is_reported(tmp_path: Path) -> None:
    make_run(tmp_path, world_size=2, n=20)
    with h5py.File(tmp_path / "rank-00000.h5", "a") as f:
        del f["points/00003"]
    problems = _problems(tmp_path)
    assert "rank 0: points [3] are missing" in problems
    assert any("different numbers of points" in p for p in problems)


def test_lost_trailing_points_are_counted_against_points_per_rank(tmp_path: Path) -> None:
    _write(tmp_path, sizes=(8, 64, 512), points_per_rank=3)
    assert _problems(tmp_path) == []
    with h5py.File(tmp_path / "rank-00001.h5", "a") as f:
        del f["points/00002"]  # the last point: no gap to notice
    assert "rank 1: 2 of 3 points (run.json points_per_rank)" in _problems(tmp_path)


def test_sample_counts_are_checked_against_iters_and_across_ranks(tmp_path: Path) -> None:
    _write(tmp_path, short={1: 3})
    problems = _problems(tmp_path)
    assert "rank 1: point 0 rtt_ns has 47 samples, its iters is 50 x 1 destination(s)" in problems
    assert any("point 0 rtt_ns: ranks of role sender hold different sample counts "
               "{0: 50, 1: 47}" in p for p in problems)
    with pytest.raises(TraceError, match="47 samples"):
        load_run(tmp_path)


# ---- row 10: a rank file from another run -----------------------------------------------------


def test_a_rank_file_from_another_run_is_flagged_without_run_ids(tmp_path: Path) -> None:
    a = _write(tmp_path / "a", sizes=(8, 64))
    b = _write(tmp_path / "b", sizes=(16, 128))
    shutil.copy(b / "rank-00001.h5", a / "rank-00001.h5")
    problems = _problems(a)
    assert any("rank 1: rank-00001.h5 was written with another config" in p for p in problems)
    assert any("rank 1: point 0 is single-op {'size': 16" in p for p in problems)


def test_run_ids_tie_rank_files_to_their_run(tmp_path: Path, capsys) -> None:
    run = _write(tmp_path, run_id="run-aaa", rank_ids={1: "run-bbb"})
    assert any("rank 1: rank-00001.h5 belongs to run 'run-bbb', run.json is run 'run-aaa'" in p
               for p in _problems(run))
    assert _analyze([str(run)]) == 2
    assert "belongs to run" in capsys.readouterr().err


def test_a_rank_file_without_the_run_id_its_run_json_has(tmp_path: Path) -> None:
    run = _write(tmp_path, run_id="run-aaa", rank_ids={0: None})  # type: ignore[dict-item]
    assert any("rank 0: rank-00000.h5 belongs to run None" in p for p in _problems(run))


def test_old_runs_without_run_ids_stay_valid(tmp_path: Path) -> None:
    assert _problems(_write(tmp_path)) == []


# ---- analyze -x unknown, report on damaged data -------------------------------------------------


def test_analyze_unknown_experiment_exits_2(tmp_path: Path, capsys) -> None:
    make_run(tmp_path, world_size=1, n=10)
    assert _analyze([str(tmp_path), "-x", "nope"]) == 2
    err = capsys.readouterr().err
    assert "invalid --experiment (-x)='nope'" in err and "single-op" in err


def test_report_on_undrawable_data_notes_it_and_never_shows_a_traceback(tmp_path: Path,
                                                                        capsys) -> None:
    write_manifest(tmp_path, {"world_size": 1, "status": "complete"})
    with TraceWriter(tmp_path, 0, 1, {}) as w, w.begin_point("msg-rate", {"size": 8}) as p:
        p.set_results({"msg_rate_mps": "fast"})  # damaged: not a number
    assert _report([str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "could not be drawn" in err
    assert "Plot missing" in (tmp_path / "report.md").read_text()
    assert _report([str(tmp_path), "--allow-incomplete"]) == 0
