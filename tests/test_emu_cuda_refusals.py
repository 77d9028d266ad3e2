"""The CUDA engine's refusals, checked where they run (any machine, GPU or not): an engine or
placement that cannot run is refused with a reason before anything is created; GPU-memory
objects are refused with the CPU engine; several ranks on one GPU need MPS."""

from __future__ import annotations

import os
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from launching import launch

from gicbench.errors import ConfigError, UnsupportedError
from gicbench.fabric.base import MemoryDomain
from gicbench.fabric.emu import EmuFabric
from gicbench.fabric.emu.params import EmuParams
from gicbench.fabric.emu.provider import check_cuda_engine
from gicbench.fabric.registry import FabricPlan
from gicbench.platform import Probe, probe_mps

QUICK = ["single-op", "-n", "20", "-w", "2", "--quiet"]


def cuda_here() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def fabric(**kw: object) -> EmuFabric:
    return EmuFabric(0, 1, "ref-" + uuid.uuid4().hex[:8], progress="inline",
                     segment_bytes=1 << 20, max_qps=4, max_cqs=4, max_mrs=4, **kw)  # fmt: skip


@pytest.mark.skipif(cuda_here(), reason="a GPU is here: the CUDA engine is not refused")
def test_cuda_engine_refused_without_a_gpu_and_leaves_nothing() -> None:
    before = {p for p in os.listdir("/dev/shm") if p.startswith("gicbench-")}
    with pytest.raises(UnsupportedError, match=r"--engine cuda needs (CuPy|a CUDA GPU)"):
        fabric(engine="cuda")
    after = {p for p in os.listdir("/dev/shm") if p.startswith("gicbench-")}
    assert after <= before  # the segment made before the refusal is gone


@pytest.mark.parametrize("what", ["qp", "cq", "mr"])
def test_device_domain_refused_on_the_cpu_engine(what: str) -> None:
    f = fabric()
    try:
        with pytest.raises(UnsupportedError, match="need the CUDA engine"):
            if what == "mr":
                f.register(4096, domain=MemoryDomain.DEVICE)
            elif what == "cq":
                f.create_cq(16, domain="device")
            else:
                f.create_qp(f.create_cq(16), 64, domain="device")
    finally:
        f.close()


def test_bad_engine_and_placement_values() -> None:
    with pytest.raises(ConfigError, match="engine"):
        fabric(engine="gpu")
    with pytest.raises(ConfigError, match="queues"):
        fabric(queues="gpu")
    with pytest.raises(UnsupportedError, match="--engine cuda"):
        fabric(queues="device")
    with pytest.raises(ConfigError, match="engine_ctas"):
        fabric(engine_ctas=4)


PLAN = FabricPlan(world_size=2, local_size=2, nodes=1, rc_peers=1, rc_qps_per_peer=1, dcis=0,
                  dcts=0, sq_depth=64, mr_sizes=(4096, 4096), progress="auto",
                  autonomous_progress=True, params=EmuParams(engine="cuda"))  # fmt: skip


def probes(gpus: int, mps: bool) -> dict[str, Probe]:
    return {
        "gpus": Probe("gpus", gpus > 0, f"{gpus} GPU(s)", {"gpus": [{}] * gpus}),
        "cupy": Probe("cupy", True, "CuPy"),
        "nvcc": Probe("nvcc", True, "12"),
        "mps": Probe("mps", mps, "MPS running" if mps else "MPS not running; start: ..."),
    }


def test_two_ranks_on_one_gpu_need_mps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(UnsupportedError, match="nvidia-cuda-mps-control -d"):
        check_cuda_engine(PLAN, probes(1, mps=False))
    check_cuda_engine(PLAN, probes(1, mps=True))  # under MPS: allowed
    check_cuda_engine(PLAN, probes(2, mps=False))  # one rank per GPU: allowed
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # two GPUs, one visible
    with pytest.raises(UnsupportedError, match="MPS"):
        check_cuda_engine(PLAN, probes(2, mps=False))


def test_gpu_submitter_ranks_sharing_a_gpu_on_the_cpu_engine_need_mps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cpu = replace(PLAN, params=EmuParams(engine="cpu"))
    with pytest.raises(UnsupportedError, match="a GPU submitter with 2 ranks on 1 GPU"):
        check_cuda_engine(cpu, probes(1, mps=False))
    check_cuda_engine(cpu, probes(1, mps=True))
    check_cuda_engine(cpu, probes(2, mps=False))
    check_cuda_engine(replace(cpu, local_size=1), probes(1, mps=False))  # one rank
    check_cuda_engine(replace(cpu, autonomous_progress=False), probes(1, mps=False))  # host
    check_cuda_engine(cpu, probes(0, mps=False))  # no GPU: the submitter refuses it itself


def test_device_queues_need_the_cuda_engine_and_a_gpu_submitter() -> None:
    with pytest.raises(UnsupportedError, match="--queues device needs --engine cuda"):
        check_cuda_engine(replace(PLAN, params=EmuParams(engine="cpu", queues="device")),
                          probes(2, True))  # fmt: skip
    with pytest.raises(UnsupportedError, match="CPU submitter"):
        check_cuda_engine(replace(PLAN, params=EmuParams(engine="cuda", queues="device"),
                                  autonomous_progress=False),
                          probes(2, True))  # fmt: skip
    with pytest.raises(UnsupportedError, match="needs gpus"):
        check_cuda_engine(PLAN, probes(0, True))


def test_mps_probe_reads_the_pipe_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path))
    p = probe_mps()
    if not p.ok:  # no MPS daemon on this machine
        assert "nvidia-cuda-mps-control -d" in p.detail
    (tmp_path / "control").touch()
    assert probe_mps().ok


@pytest.mark.skipif(cuda_here(), reason="a GPU is here: --engine cuda is not refused")
def test_run_with_engine_cuda_refused_before_bring_up() -> None:
    r = launch(2, "run", *QUICK, "--engine", "cuda", timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("--engine cuda needs") == 1, r.stderr
    assert "Traceback" not in r.stderr


def test_run_with_device_queues_refused_for_the_host_submitter() -> None:
    r = launch(2, "run", *QUICK, "--queues", "device", timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("--queues device needs --engine cuda") == 1, r.stderr
