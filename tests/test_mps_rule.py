"""One MPS rule, said the same everywhere: `gicbench doctor`'s mps probe, the CUDA engine's
pre-flight and the Slurm job scripts (which start MPS themselves when tasks outnumber GPUs) tell
that several ranks on one GPU need MPS, how to start it, or to run one rank per GPU; and
the pre-flight rule for several ranks on one GPU as it now is (MPS needed; under MPS still
refused until the eager-loading fix is seen to work on the device)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gicbench.errors import UnsupportedError
from gicbench.fabric.emu.params import EmuParams
from gicbench.fabric.emu.provider import check_cuda_engine
from gicbench.fabric.registry import FabricPlan
from gicbench.platform import MPS_RULE, Probe, probe_mps

PLAN = FabricPlan(world_size=2, local_size=2, nodes=1, rc_peers=1, rc_qps_per_peer=1, dcis=0,
                  dcts=0, sq_depth=64, mr_sizes=(4096, 4096), progress="auto",
                  autonomous_progress=True,
                  params=EmuParams(engine="cuda", queues="device"))  # fmt: skip


def probes(ngpu: int, mps: bool) -> dict[str, Probe]:
    gpus = [{"index": i} for i in range(ngpu)]
    return {
        "gpus": Probe("gpus", ngpu > 0, f"{ngpu} GPU(s)", {"gpus": gpus}),
        "cupy": Probe("cupy", True, "CuPy"),
        "nvcc": Probe("nvcc", True, "nvcc"),
        "mps": Probe("mps", mps, "MPS running" if mps else "MPS not running; ..."),
    }


def test_job_scripts_say_the_mps_rule() -> None:
    from gicbench.cli.jobs import RenderOptions, render

    shared = render("single-node", RenderOptions(ntasks_per_node=8, gpus_per_node=2))
    for words in ("several ranks on one GPU need CUDA MPS", "time-slice", "one rank per GPU",
                  "nvidia-cuda-mps-control -d", "echo quit | nvidia-cuda-mps-control"):  # fmt: skip
        assert words in shared
    for words in ("several ranks on one GPU need CUDA MPS", "time-slice", "one rank per GPU"):
        assert words in MPS_RULE
    assert "MPS" not in render("single-node", RenderOptions(ntasks_per_node=2, gpus_per_node=2))


def test_doctor_and_preflight_say_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "none"))
    p = probe_mps()
    if not p.ok:  # no MPS daemon on this machine
        assert MPS_RULE in p.detail
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(UnsupportedError) as e:
        check_cuda_engine(PLAN, probes(1, mps=False))
    assert MPS_RULE in str(e.value)


def test_two_ranks_on_one_gpu_run_under_mps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    # Two engines on one H200 under MPS ran once modules loaded eagerly (2026-11-30, ipc_*_1g).
    check_cuda_engine(PLAN, probes(1, mps=True))
    check_cuda_engine(PLAN, probes(2, mps=False))  # one rank per GPU: no MPS needed
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(UnsupportedError, match="MPS is not running"):
        check_cuda_engine(PLAN, probes(2, mps=False))


def test_importing_emu_chooses_eager_module_loading(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "CUDA_MODULE_LOADING"}
    out = subprocess.run([sys.executable, "-c", "import os, gicbench.fabric.emu; "
                          "print(os.environ['CUDA_MODULE_LOADING'])"],
                         env=env, capture_output=True, text=True, check=True)  # fmt: skip
    assert out.stdout.strip() == "EAGER"


def test_ranks_on_one_gpu_share_its_mps_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    """MPS refused a 4th gicbench rank on one H200 at 32 work queues each ("maximum number of
    device connections") and took 8 at 4, once CUDA_DEVICE_MAX_CONNECTIONS was set before CUDA
    started: `gicbench run` lowers it, first thing, from 4 ranks a GPU (the launcher's local
    size over nvidia-smi's GPUs) to each rank's share of MPS_DEVICE_CONNECTIONS, even a user's
    larger value, keeps a smaller one, and leaves up to 3 ranks alone; pre-flight records the
    value in force."""
    import os
    from dataclasses import replace

    from gicbench import platform
    from gicbench.cli.run import share_gpu_connections
    from gicbench.cuda_host import CONNECTIONS_VAR, MPS_DEVICE_CONNECTIONS

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv(CONNECTIONS_VAR, "32")  # what importing gicbench asks (cuda_host)
    gpus = [{"index": 0}]
    monkeypatch.setattr(platform, "probe_gpus", lambda: Probe("gpus", True, "1", {"gpus": gpus}))
    monkeypatch.setattr(platform, "probe_mps", lambda: Probe("mps", True, "MPS running"))
    for local in ("2", "3", "garbage"):  # up to 3 ranks a GPU ran at 32; not a count: skipped
        monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", local)
        share_gpu_connections()
        assert os.environ[CONNECTIONS_VAR] == "32"
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "8")
    share_gpu_connections()
    assert os.environ[CONNECTIONS_VAR] == str(MPS_DEVICE_CONNECTIONS // 8)
    monkeypatch.setenv(CONNECTIONS_VAR, "2")  # smaller than the share (4): kept
    share_gpu_connections()
    assert os.environ[CONNECTIONS_VAR] == "2"
    monkeypatch.setenv(CONNECTIONS_VAR, "")  # unset: CUDA's 8 is more than the share
    monkeypatch.delenv(CONNECTIONS_VAR)
    share_gpu_connections()
    assert os.environ[CONNECTIONS_VAR] == str(MPS_DEVICE_CONNECTIONS // 8)
    monkeypatch.setenv(CONNECTIONS_VAR, "32")
    gpus.append({"index": 1})  # 8 ranks on 2 GPUs: 4 a GPU, a share of 8
    share_gpu_connections()
    assert os.environ[CONNECTIONS_VAR] == str(MPS_DEVICE_CONNECTIONS // 4)
    monkeypatch.setenv("GICBENCH_RANKS_PER_GPU", "2")  # jobs bind: one visible GPU, 2 on it
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv(CONNECTIONS_VAR, "32")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "16")
    share_gpu_connections()  # 16 ranks on 8 GPUs: 2 a GPU, not 16 on the one visible
    assert os.environ[CONNECTIONS_VAR] == "32"
    monkeypatch.delenv("GICBENCH_RANKS_PER_GPU")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "8")
    gpus.pop()  # 8 ranks on one GPU again
    for junk in ("0", "abc", "\u00b2", "99"):  # not a value CUDA takes: its default (8) counts
        monkeypatch.setenv(CONNECTIONS_VAR, junk)
        share_gpu_connections()
        assert os.environ[CONNECTIONS_VAR] == str(MPS_DEVICE_CONNECTIONS // 8), junk
    monkeypatch.setenv(CONNECTIONS_VAR, "32")
    monkeypatch.setattr(platform, "probe_mps", lambda: Probe("mps", False, "MPS not running"))
    share_gpu_connections()  # no MPS: pre-flight refuses the run; nothing changed here
    assert os.environ[CONNECTIONS_VAR] == "32"
    cpu = replace(PLAN, local_size=8, params=EmuParams(engine="cpu"))
    assert check_cuda_engine(cpu, probes(1, mps=True)) == 32  # recorded as in force
    assert check_cuda_engine(replace(cpu, local_size=1), probes(1, mps=True)) is None
    check_cuda_engine(replace(cpu, local_size=16), probes(1, mps=True))  # 2 queues each
    with pytest.raises(UnsupportedError, match="17 ranks on one GPU: at most 16"):
        check_cuda_engine(replace(cpu, local_size=17), probes(1, mps=True))


def test_one_rank_per_gpu_under_jobs_bind_needs_no_mps(monkeypatch: pytest.MonkeyPatch) -> None:
    """`gicbench jobs bind` leaves each task one visible GPU and starts MPS only when ranks
    share one: with 8 ranks on 8 GPUs each task sees CUDA_VISIBLE_DEVICES=<its GPU>, so
    pre-flight counts the ranks on it from GICBENCH_RANKS_PER_GPU, not 8 on the one visible."""
    from dataclasses import replace

    cpu = replace(PLAN, local_size=8, params=EmuParams(engine="cpu"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    monkeypatch.setenv("GICBENCH_RANKS_PER_GPU", "1")
    assert check_cuda_engine(cpu, probes(8, mps=False)) is None  # no MPS needed
    monkeypatch.setenv("GICBENCH_RANKS_PER_GPU", "2")  # 16 ranks on 8 GPUs
    with pytest.raises(UnsupportedError, match="MPS is not running"):
        check_cuda_engine(replace(cpu, local_size=16), probes(8, mps=False))
    monkeypatch.delenv("GICBENCH_RANKS_PER_GPU")  # without bind's count: 8 on the one visible
    with pytest.raises(UnsupportedError, match="MPS is not running"):
        check_cuda_engine(cpu, probes(8, mps=False))
