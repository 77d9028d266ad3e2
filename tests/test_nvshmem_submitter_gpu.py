"""--submitter nvshmem end to end on a GPU (marked gpu; skipped without one, without NVSHMEM's
headers, or with two GPU ranks on one GPU and no MPS): `mpiexec gicbench run` with NVSHMEM's own
device code posting, through its internal calls and its public API, with NVSHMEM's default two
QPs per peer and sixteen, the selected QP's and the PE-wide quiet, its round trip through
put-with-signal, msg-rate in NVSHMEM's best shape (16 QPs, 256 threads per CTA), an odd world
(3 ranks, all-to-all) and the CUDA engine with GPU-memory queues (also NVSHMEM's GPU-memory-only
build). Every point validated by the harness (the payloads where the experiments expect them)
and the engine's fidelity counters zero (the submitter refuses a call otherwise)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_helpers import cupy_or_skip, ranks_share_gpus_or_skip

pytestmark = pytest.mark.gpu

COMMON = ["--submitter", "nvshmem", "--timeout", "10", "--json"]
CPU = ["--progress", "thread"]  # emu's CPU engine, an engine thread per rank
RUNS = {
    "single-inline-2qp": ["single-op", "-q", "2", "-n", "200", "-w", "20"],
    "single-pointer-16qp-all-public": [
        "single-op", "--payload", "pointer", "-b", "16", "-e", "4096", "-q", "16", "--scope",
        "all", "-n", "100", "-w", "10", "--nvshmem-path", "public"],
    "single-pointer-put-completion": [
        "single-op", "--payload", "pointer", "-b", "8", "-e", "64", "--modes",
        "issue,put_completion", "-n", "100", "-w", "10"],
    "rate-16qp-256-threads": [
        "msg-rate", "-q", "16", "-t", "4096", "--payload", "pointer", "-b", "64",
        "--messages", "2000", "-w", "20"],
    "rate-inline-public": [
        "msg-rate", "-q", "2", "-t", "64", "--messages", "2000", "-w", "20", "--nvshmem-path",
        "public", "--nvshmem-batch", "4"],
    "completion-scope": ["completion-scope", "-q", "4", "-n", "100", "-w", "10"],
}  # fmt: skip
CUDA = ["--engine", "cuda", "--queues", "device"]


def _mpiexec(n: int) -> list[str]:
    exe = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    if exe is None:
        pytest.skip("mpiexec not found")
    return [exe, "--bind-to", "none", "-n", str(n), sys.executable, "-m", "gicbench", "run"]


def _gpu(ranks: int) -> None:
    from gicbench.submit.nvshmem.headers import find, unavailable_reason

    cp = cupy_or_skip()
    if find() is None:
        pytest.skip(unavailable_reason())
    ranks_share_gpus_or_skip(cp, ranks)


def _run(tmp_path: Path, name: str, args: list[str], ranks: int = 2) -> list[dict]:
    """`gicbench run` on `ranks` ranks; the JSON document's results, every one validated."""
    _gpu(ranks)
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}  # fmt: skip
    out = tmp_path / name
    engine = [] if "--engine" in args else CPU
    r = subprocess.run([*_mpiexec(ranks), *args, *COMMON, *engine, "-o", str(out)],
                       capture_output=True,
                       text=True, timeout=150, env=env)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "incomplete" not in r.stdout and '"validated": true' in r.stdout, r.stdout[-2000:]
    doc = json.loads(r.stdout)
    rows = doc["results"]
    seen = [x["validated"] for x in rows if "validated" in x]
    assert seen and all(seen), rows
    assert doc["config"]["submitter"] == "nvshmem"
    return rows


@pytest.mark.timeout(420)
@pytest.mark.parametrize("name", sorted(RUNS))
def test_nvshmem_runs_end_to_end(tmp_path: Path, name: str) -> None:
    _run(tmp_path, name, RUNS[name])


@pytest.mark.timeout(420)
def test_nvshmem_three_ranks_all_to_all(tmp_path: Path) -> None:
    """Every rank sends to two peers: NVSHMEM's table has both, its PE-wide quiet walks both."""
    _run(tmp_path, "a2a3", ["single-op", "--pattern", "all-to-all", "--modes",
                            "issue,put_completion", "--scope", "all", "-q", "2", "-n", "100",
                            "-w", "10"], ranks=3)  # fmt: skip
    _run(tmp_path, "a2a3-rate", ["msg-rate", "--pattern", "all-to-all", "-q", "2", "-t", "128",
                                 "--messages", "1000", "-w", "10"], ranks=3)  # fmt: skip


@pytest.mark.timeout(420)
def test_nvshmem_three_ranks_pairs_leave_a_pe_unconnected(tmp_path: Path) -> None:
    """pairs at 3 ranks: a rank has no QP to some PE, whose idle entries the quiet walks."""
    _run(tmp_path, "pairs3", ["single-op", "--pattern", "pairs", "--modes",
                              "issue,put_completion", "--scope", "all", "-n", "100", "-w",
                              "10"], ranks=3)  # fmt: skip


@pytest.mark.timeout(420)
@pytest.mark.parametrize("build", ["wheel", "gpumem-only"])
def test_nvshmem_on_the_cuda_engine(tmp_path: Path, build: str) -> None:
    extra = [*CUDA, "--nvshmem-build", build]
    _run(tmp_path, f"cuda-single-{build}", ["single-op", "-q", "2", "-n", "100", "-w", "10",
                                            *extra])  # fmt: skip
    _run(tmp_path, f"cuda-rate-{build}", ["msg-rate", "-q", "16", "-t", "1024", "--payload",
                                          "pointer", "-b", "64", "--messages", "1000", *extra])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("exp", ["msg-rate", "single-op"])
def test_a_signal_ends_nvshmems_loops_promptly(tmp_path: Path, exp: str) -> None:
    """SIGTERM to the launcher mid-launch: the abort word ends NVSHMEM's loops (a rate launch of
    10^9 messages a thread; a round trip of 10^8 requests) within seconds, the run marked
    incomplete."""
    import signal

    from rank_procs import start, wait_running
    from test_run_signals import ended_incomplete

    _gpu(2)
    long = {"msg-rate": ["msg-rate", "-q", "2", "-t", "64", "--messages", "1000000000", "-w",
                         "0"],
            "single-op": ["single-op", "--modes", "round_trip", "-n", "100000000", "-w", "0"]}
    out = tmp_path / "run"
    # the CUDA engine (rank_procs' mpiexec binds each rank to a core: no engine thread)
    proc = start(out, [*long[exp], *COMMON[:-1], *CUDA, "--quiet"])
    wait_running(out, proc)
    proc.send_signal(signal.SIGTERM)
    ended_incomplete(out, proc, within=60)
