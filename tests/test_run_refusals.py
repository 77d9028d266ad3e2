"""What a careful or hostile user does to `gicbench run` before it starts: bad and
reused run directories, one rank, unavailable providers and submitters, malformed fault specs,
repeated bad configurations. Each is refused collectively, once, with exit status 2, before
anything is created, and an earlier run is never touched."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from launching import launch

QUICK = ["single-op", "-n", "50", "-w", "5", "--quiet"]


def shm_segments() -> set[str]:
    return {p for p in os.listdir("/dev/shm") if p.startswith("gicbench-")}


def digest(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


def refused_once(r, text: str) -> None:
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count(text) == 1, r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("where", ["file", "under-file", "proc"])
def test_bad_run_directory_is_refused_by_every_rank(tmp_path: Path, where: str) -> None:
    """Before: a traceback on rank 0, then a hang of up to 300 s."""
    f = tmp_path / "afile"
    f.write_text("not a directory")
    out = {"file": f, "under-file": f / "sub", "proc": Path("/proc/gicbench-x")}[where]
    r = launch(2, "run", *QUICK, "-o", str(out), timeout=60)
    refused_once(r, "invalid out (-o)=")
    assert f.read_text() == "not a directory"


def test_earlier_complete_run_is_never_modified(tmp_path: Path) -> None:
    """Before: run.json was replaced (status running, new config) before the refusal."""
    out = tmp_path / "done"
    r = launch(2, "run", *QUICK, "-o", str(out))
    assert r.returncode == 0, r.stderr
    before = digest(out)
    r = launch(2, "run", *QUICK, "-b", "16", "-o", str(out))
    refused_once(r, "holds an earlier run")
    assert digest(out) == before


def test_mixed_final_and_partial_files_refused_on_all_ranks(tmp_path: Path) -> None:
    """Before: some ranks refused, the others went on into bring-up: hang, leaked segments,
    the old .partial overwritten."""
    out = tmp_path / "mixed"
    out.mkdir()
    (out / "rank-00000.h5").write_bytes(b"old final")
    (out / "rank-00002.h5.partial").write_bytes(b"old partial")
    segments = shm_segments()
    r = launch(4, "run", *QUICK, "-o", str(out), timeout=90)
    refused_once(r, "invalid out (-o)=")
    assert (out / "rank-00002.h5.partial").read_bytes() == b"old partial"
    assert sorted(p.name for p in out.iterdir()) == ["rank-00000.h5", "rank-00002.h5.partial"]
    assert shm_segments() <= segments


@pytest.mark.parametrize("action", ["raise", "term"])
def test_job_ending_during_bring_up_leaks_no_shared_memory(tmp_path: Path, action: str) -> None:
    """Before: the NIC was opened inside a phase whose check could raise before the cleanup
    started; segments of the other ranks leaked."""
    segments = shm_segments()
    out = tmp_path / action
    r = launch(
        3, "run", *QUICK, "-o", str(out), env={"GICBENCH_FAULT": f"{action}:1:open"}, timeout=90
    )
    assert r.returncode != 0
    assert shm_segments() <= segments
    manifest = json.loads((out / "run.json").read_text())
    if action == "raise":  # the collective check ends the job: rank 0 marks the run
        assert manifest["status"] == "incomplete"
    else:  # the launcher ends it, and may SIGKILL rank 0 before it writes: never "complete"
        assert manifest["status"] in ("incomplete", "running")


def test_bad_configuration_message_is_never_lost() -> None:
    """Before: in 2 runs of 12 the error line was missing (another rank's exit killed rank 0
    before it printed)."""
    for _ in range(6):
        r = launch(2, "run", "single-op", "-q", "0", timeout=60)
        refused_once(r, "invalid qps (-q)=0")


def test_one_rank_and_unavailable_provider_exit_2_before_anything(tmp_path: Path) -> None:
    out = tmp_path / "one"
    r = launch(1, "run", *QUICK, "-o", str(out))
    refused_once(r, "invalid ranks=1")
    assert not out.exists()
    r = launch(2, "run", *QUICK, "--provider", "verbs", "-o", str(out))
    refused_once(r, "provider verbs is not available here")
    assert not out.exists()


def test_gpu_submitter_says_why_it_is_not_available(tmp_path: Path) -> None:
    out = tmp_path / "gpu"
    r = launch(2, "run", *QUICK, "--submitter", "gpu", "-o", str(out))
    refused_once(r, "submitter gpu is not available here")
    assert not out.exists()


def test_malformed_fault_spec_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "fault"
    r = launch(2, "run", *QUICK, "-o", str(out), env={"GICBENCH_FAULT": "explode:1"})
    refused_once(r, "invalid GICBENCH_FAULT=")
    assert not out.exists()


def test_json_output_on_refusal_and_on_failure(tmp_path: Path) -> None:
    r = launch(2, "run", "single-op", "-q", "0", "--json")
    assert r.returncode == 2
    assert json.loads(r.stdout)["status"] == "refused"
    out = tmp_path / "failjson"
    r = launch(2, "run", *QUICK, "--json", "-o", str(out), env={"GICBENCH_FAULT": "raise:1:0"})
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["status"] == "incomplete" and doc["failed_ranks"] == [1]
