"""Damaged and mismatched traces: the reader counts
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


# ---- run.json's bytes and mode -------------------------------------------------------------------


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


# ---- damaged rank files --------------------------------------------------------------------------


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


# ---- a rank file from another run -------------------------------------------------------------


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


# ---- damage the checksums must catch -------------------------------------------------------------


def _refused(code: int, err: str, *texts: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert lines and all(line.startswith("gicbench analyze: ") for line in lines), err
    for text in texts:
        assert text in err, err


@pytest.mark.parametrize("target", ["points/00001/samples/rtt_ns", "points/00001/samples"])
def test_a_deleted_sample_dataset_is_refused(tmp_path: Path, target: str, capsys) -> None:
    """A point that loses its samples used to give a row of '-' in a complete run."""
    _write(tmp_path, run_id="run-a", points_per_rank=2)
    with h5py.File(tmp_path / "rank-00000.h5", "a") as f:
        del f[target]
    _refused(_analyze([str(tmp_path)]), capsys.readouterr().err, "rank 0", "point 1")
    df = load_run(tmp_path, allow_incomplete=True)  # the other point of rank 0 is kept
    assert sorted(df.loc[df["rank"] == 0, "point"]) == [0]


@pytest.mark.parametrize(
    ("where", "name"),
    [
        ("points/00000", "results"),
        ("points/00000", "params"),
        ("points/00000", "closed"),
        ("points/00000", "experiment"),
        ("/", "config"),
        ("/", "run_id"),
        ("/", "end_utc"),
    ],
)
def test_a_deleted_attribute_is_refused(tmp_path: Path, where: str, name: str, capsys) -> None:
    _write(tmp_path, run_id="run-a", points_per_rank=2)
    with h5py.File(tmp_path / "rank-00001.h5", "a") as f:
        del f[where].attrs[name]
    _refused(_analyze([str(tmp_path)]), capsys.readouterr().err, "rank 1")


def test_a_changed_sample_is_refused(tmp_path: Path, capsys) -> None:
    """Samples rewritten in place (valid HDF5, valid fletcher32): only a digest can tell."""
    _write(tmp_path, run_id="run-a", points_per_rank=2)
    with h5py.File(tmp_path / "rank-00001.h5", "a") as f:
        f["points/00000/samples/rtt_ns"][3] += 1
    _refused(_analyze([str(tmp_path)]), capsys.readouterr().err, "rank 1", "point 0", "rtt_ns")


def test_samples_rewritten_as_floats_are_refused(tmp_path: Path, capsys) -> None:
    """Same length, and the same hash once truncated to int64: the dtype must be int64 too."""
    _write(tmp_path, run_id="run-a", points_per_rank=2)
    with h5py.File(tmp_path / "rank-00001.h5", "a") as f:
        values = f["points/00000/samples/rtt_ns"][()]
        del f["points/00000/samples/rtt_ns"]
        f["points/00000/samples/rtt_ns"] = values + 0.5
    _refused(_analyze([str(tmp_path)]), capsys.readouterr().err, "rank 1", "float64, not int64")


def test_changed_results_and_counters_are_refused(tmp_path: Path, capsys) -> None:
    make_run(tmp_path, world_size=2, n=20)
    with h5py.File(tmp_path / "rank-00000.h5", "a") as f:
        f["points/00002"].attrs["counters_after"] = json.dumps({"wqes": 7, "doorbells": 20})
    _refused(_analyze([str(tmp_path)]), capsys.readouterr().err, "rank 0", "point 2")


# What results are computed from, read straight from the file (no gicbench checks): a flip that
# leaves all of it unchanged is harmless, whatever it hit.
_POINT_KEYS = ("experiment", "params", "results", "counters_before", "counters_after", "closed")


def _values(path: Path) -> str:
    from gicbench.trace import schema

    try:
        with h5py.File(path, "r", locking=False) as f:
            out: dict[str, Any] = {"/": schema.decode_attrs(f.attrs)}
            for name, group in f["points"].items():
                samples = {m: d[()].tolist() for m, d in group["samples"].items()}
                out[name] = {**schema.decode_attrs(group.attrs, _POINT_KEYS), "samples": samples}
            return json.dumps(out, sort_keys=True, default=repr)
    except Exception as exc:  # any damage h5py or the JSON decoder notices
        return f"unreadable: {type(exc).__name__}"


def test_bit_flips_in_a_rank_file_are_refused_or_harmless(tmp_path: Path, capsys) -> None:
    """200 seeded 2-bit flips in a copy of a rank file: each one is either refused (exit 2, one
    line per problem, no traceback) or leaves every value results come from unchanged and the
    analysis identical. Before the checksums some flips changed values and passed with exit 0."""
    base = _write(tmp_path / "base", iters=20, run_id="run-a", points_per_rank=2)
    assert _analyze([str(base), "--json"]) == 0
    clean = json.loads(capsys.readouterr().out)["experiments"]
    name = "rank-00001.h5"
    data = (base / name).read_bytes()
    clean_values = _values(base / name)
    run = tmp_path / "run"
    shutil.copytree(base, run)
    rng = np.random.default_rng(20261201)
    refused = 0
    for flip in range(200):
        damaged = bytearray(data)
        for _ in range(2):
            damaged[int(rng.integers(len(damaged)))] ^= 1 << int(rng.integers(8))
        (run / name).write_bytes(bytes(damaged))
        code = _analyze([str(run), "--json"])
        out, err = capsys.readouterr()
        assert "Traceback" not in err, (flip, err)
        if code == 0:
            assert _values(run / name) == clean_values, f"flip {flip}: a value changed silently"
            assert json.loads(out)["experiments"] == clean, f"flip {flip}: results changed"
        else:
            assert code == 2, (flip, err)
            assert err and all(ln.startswith("gicbench analyze: ") for ln in err.splitlines())
            refused += 1
    assert refused >= 20  # the flips did hit what matters


# ---- what a hostile user tries -------------------------------------------------------------------


def test_a_truncated_rank_file_is_refused(tmp_path: Path, capsys) -> None:
    _write(tmp_path, run_id="run-a", points_per_rank=2)
    path = tmp_path / "rank-00001.h5"
    for size in (path.stat().st_size // 2, path.stat().st_size - 100, 0):
        os.truncate(path, size)
        _refused(_analyze([str(tmp_path)]), capsys.readouterr().err, "rank 1")


def test_swapped_rank_files_are_refused(tmp_path: Path, capsys) -> None:
    _write(tmp_path, run_id="run-a", points_per_rank=2)
    (tmp_path / "rank-00000.h5").rename(tmp_path / "tmp.h5")
    (tmp_path / "rank-00001.h5").rename(tmp_path / "rank-00000.h5")
    (tmp_path / "tmp.h5").rename(tmp_path / "rank-00001.h5")
    _refused(_analyze([str(tmp_path)]), capsys.readouterr().err, "rank 0: rank-00000.h5 says "
             "rank=1", "rank 1: rank-00001.h5 says rank=0")


def test_a_rank_file_of_another_run_is_refused(tmp_path: Path, capsys) -> None:
    a = _write(tmp_path / "a", run_id="run-a", points_per_rank=2)
    b = _write(tmp_path / "b", run_id="run-b", points_per_rank=2)
    shutil.copy(b / "rank-00000.h5", a / "rank-00000.h5")
    _refused(_analyze([str(a)]), capsys.readouterr().err, "belongs to run 'run-b'")


def test_run_json_that_is_a_directory_is_refused(tmp_path: Path, capsys) -> None:
    _write(tmp_path, run_id="run-a")
    (tmp_path / "run.json").unlink()
    (tmp_path / "run.json").mkdir()
    _refused(_analyze([str(tmp_path)]), capsys.readouterr().err, "run.json", "directory")


@pytest.mark.parametrize("where", ["/", "points/00001"])
def test_a_huge_attribute_is_refused(tmp_path: Path, where: str, capsys) -> None:
    """A 32 MB attribute in place of one that results come from."""
    _write(tmp_path, run_id="run-a", points_per_rank=2)
    name = "config" if where == "/" else "results"
    with h5py.File(tmp_path / "rank-00001.h5", "a") as f:
        f[where].attrs[name] = json.dumps({"junk": "x" * (32 << 20)})
    _refused(_analyze([str(tmp_path)]), capsys.readouterr().err, "rank 1")


def test_a_run_directory_named_to_break_lines_is_refused_in_one_line(tmp_path: Path,
                                                                     capsys) -> None:
    run = _write(tmp_path / "evil\nname\x1b[31m", run_id="run-a", points_per_rank=2)
    (run / "rank-00001.h5").unlink()
    code = _analyze([str(run)])
    err = capsys.readouterr().err
    _refused(code, err, "rank 1: trace file rank-00001.h5 is missing")
    assert len(err.splitlines()) == 1 and "\x1b" not in err, repr(err)


# ---- one line per problem ---------------------------------------------------------------------


@pytest.mark.parametrize("missing", [1, 3, 40])
def test_a_refusal_prints_one_line_per_problem(tmp_path: Path, missing: int, capsys) -> None:
    """Each missing rank (none next to another: a run of them is one problem) is one line, up
    to a cap and a '... N more' line."""
    world = 2 * missing + 1
    _write(tmp_path, sizes=(8,), world=world, iters=5, run_id="run-a", points_per_rank=1)
    for rank in range(1, world, 2):
        (tmp_path / f"rank-{rank:05d}.h5").unlink()
    for command in (_analyze, _report):
        code = command([str(tmp_path)])
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err
        lines = err.splitlines()
        name = "analyze" if command is _analyze else "report"
        assert all(line.startswith(f"gicbench {name}: ") for line in lines), err
        assert len(lines) == min(missing, 20), err
        if missing > 20:
            assert lines[-1].endswith(f"... and {missing - 19} more problems "
                                      "(--allow-incomplete analyses what is there)"), err
        else:
            assert "--allow-incomplete" in lines[-1], err
