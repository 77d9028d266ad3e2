"""What this machine has: Python, MPI, CUDA, CuPy, pyverbs, GPUs, RDMA devices and their NUMA
placement. Probes never initialise MPI or a GPU context beyond a device count; each answers with
data or with the reason it could not tell."""

from __future__ import annotations

import contextlib
import glob
import importlib
import os
import platform
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Probe:
    name: str
    ok: bool
    detail: str = ""
    data: dict[str, Any] = field(default_factory=dict)


def _run(cmd: list[str], timeout: float = 10.0) -> str | None:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 else None


def probe_python() -> Probe:
    return Probe(
        "python", True, f"{platform.python_version()} ({platform.python_implementation()})"
    )


def probe_mpi() -> Probe:
    try:
        import mpi4py

        mpi4py.rc.initialize = False  # doctor must not start MPI
        mpi4py.rc.finalize = False
        from mpi4py import MPI
    except Exception as e:
        return Probe("mpi", False, f"mpi4py not importable: {e}")
    lib = MPI.Get_library_version().strip().splitlines()[0]
    launcher = next(
        (
            k
            for k in ("SLURM_JOB_ID", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")
            if k in os.environ
        ),
        None,
    )
    return Probe(
        "mpi",
        True,
        f"mpi4py {mpi4py.__version__}; {lib}",
        {"launcher_env": launcher or "none (not under mpiexec/srun)"},
    )


def probe_gpus() -> Probe:
    out = _run(
        [
            "nvidia-smi",
            "--query-gpu=index,name,pci.bus_id,clocks.sm,clocks.max.sm,driver_version,memory.total",
            "--format=csv,noheader,nounits",
        ]
    )
    if out is None:
        return Probe("gpus", False, "no NVIDIA GPU (nvidia-smi absent or failed)")
    gpus = []
    for line in out.strip().splitlines():
        idx, name, bus, sm, smmax, drv, mem = (x.strip() for x in line.split(","))
        gpus.append(
            {
                "index": int(idx),
                "name": name,
                "pci": bus.lower(),
                "sm_clock_mhz": sm,
                "max_sm_clock_mhz": smmax,
                "driver": drv,
                "memory_mib": mem,
                "numa_node": _pci_numa(bus),
            }
        )
    return Probe("gpus", bool(gpus), f"{len(gpus)} GPU(s)", {"gpus": gpus})


def _pci_numa(bus_id: str) -> int | None:
    # nvidia-smi prints 00000000:1B:00.0; sysfs uses 0000:1b:00.0
    bid = bus_id.lower()
    if len(bid.split(":")[0]) == 8:
        bid = bid[4:]
    p = Path(f"/sys/bus/pci/devices/{bid}/numa_node")
    try:
        return int(p.read_text())
    except (OSError, ValueError):
        return None


def probe_cuda_toolkit() -> Probe:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return Probe("nvcc", False, "nvcc not on PATH (CuPy compiles cuda/ at run time via NVRTC)")
    out = _run([nvcc, "--version"]) or ""
    rel = next((ln.strip() for ln in out.splitlines() if "release" in ln), "unknown version")
    return Probe("nvcc", True, rel)


def probe_cupy() -> Probe:
    try:
        cp = importlib.import_module("cupy")
    except Exception as e:
        return Probe("cupy", False, f"not importable ({type(e).__name__})")
    try:
        n = cp.cuda.runtime.getDeviceCount()
    except Exception as e:
        return Probe("cupy", False, f"CuPy {cp.__version__}, no usable GPU: {e}")
    return Probe("cupy", n > 0, f"CuPy {cp.__version__}, {n} device(s)")


def probe_pyverbs() -> Probe:
    try:
        importlib.import_module("pyverbs.device")
    except Exception as e:
        return Probe("pyverbs", False, f"not importable ({type(e).__name__}: {e})")
    return Probe("pyverbs", True, "importable")


def probe_rdma_devices() -> Probe:
    devs = []
    for d in sorted(glob.glob("/sys/class/infiniband/*")):
        p = Path(d)
        info: dict[str, Any] = {"name": p.name}
        for key, rel in (
            ("node_guid", "node_guid"),
            ("fw_ver", "fw_ver"),
            ("numa_node", "device/numa_node"),
        ):
            with contextlib.suppress(OSError):
                info[key] = (p / rel).read_text().strip()
        info["ports"] = (
            sorted(x.name for x in (p / "ports").glob("*")) if (p / "ports").exists() else []
        )
        info["port_info"] = [rdma_port(p / "ports" / n) for n in info["ports"]]
        with contextlib.suppress(OSError):
            info["pci"] = os.path.basename(os.path.realpath(p / "device"))
        devs.append(info)
    if not devs:
        return Probe("rdma", False, "no RDMA device in /sys/class/infiniband")
    return Probe(
        "rdma",
        True,
        f"{len(devs)} device(s): " + ", ".join(d["name"] for d in devs),
        {"devices": devs},
    )


def _read(p: Path) -> str | None:
    try:
        return p.read_text().strip()
    except OSError:
        return None


def rdma_port(p: Path) -> dict[str, Any]:
    """One port from sysfs, as `ibv_devinfo -v` shows what matters here: state, link layer,
    LID and the populated GIDs with their type (IB / RoCE v1 / RoCE v2) and netdev."""
    port: dict[str, Any] = {"port": int(p.name) if p.name.isdigit() else p.name}
    for key in ("state", "phys_state", "link_layer", "lid", "rate"):
        port[key] = _read(p / key)
    gids = []
    for g in sorted((p / "gids").glob("*"), key=lambda x: int(x.name) if x.name.isdigit() else 0):
        gid = _read(g)
        if not gid or gid.replace(":", "").strip("0") == "":
            continue
        gids.append(
            {
                "index": int(g.name),
                "gid": gid,
                "type": _read(p / "gid_attrs" / "types" / g.name),
                "ndev": _read(p / "gid_attrs" / "ndevs" / g.name),
            }
        )
    port["gids"] = gids
    return port


MPS_START = (
    "export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log; "
    "mkdir -p /tmp/mps_pipe /tmp/mps_log; nvidia-cuda-mps-control -d "
    "(stop: echo quit | nvidia-cuda-mps-control)"
)
# One sentence for doctor, the run's pre-flight and the job templates (jobs/*.sbatch carry it).
MPS_RULE = (
    "several ranks on one GPU need CUDA MPS (without it their kernels time-slice, milliseconds "
    f"a turn): start it before the run with {MPS_START}; or run one rank per GPU"
)


# Set by `gicbench jobs bind` (which leaves each task one visible GPU): the node-local ranks
# that share this task's GPU.
RANKS_PER_GPU_VAR = "GICBENCH_RANKS_PER_GPU"


def ranks_per_gpu(local_size: int, gpus: list[dict[str, Any]]) -> int:
    """Ranks on this process's GPU: what `gicbench jobs bind` said, else the node's ranks
    spread over the GPUs this process may use (visible_gpu_count), rounded up."""
    bound = os.environ.get(RANKS_PER_GPU_VAR, "").strip()
    if re.fullmatch(r"[1-9][0-9]{0,5}", bound, re.ASCII):
        return int(bound)
    return -(-local_size // max(1, visible_gpu_count(gpus)))


def visible_gpu_count(gpus: list[dict[str, Any]]) -> int:
    """GPUs this process may use: those of probe_gpus (nvidia-smi: no CUDA call), as many as
    CUDA_VISIBLE_DEVICES names at most."""
    ngpu = len(gpus)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible and visible.strip() not in ("", "-1"):
        ngpu = min(ngpu, len([v for v in visible.split(",") if v.strip()]))
    return ngpu


def probe_mps() -> Probe:
    """Whether the CUDA MPS control daemon runs (its control pipe exists in the pipe directory
    clients use, or an nvidia-cuda-mps process is alive): without it, kernels of several
    processes on one GPU time-slice (milliseconds a turn)."""
    pipe = Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"))
    if (pipe / "control").exists():
        return Probe("mps", True, f"MPS control pipe in {pipe}: several ranks may share a GPU",
                     {"pipe_dir": str(pipe)})  # fmt: skip
    procs = []
    for comm in glob.glob("/proc/[0-9]*/comm"):
        with contextlib.suppress(OSError):
            name = Path(comm).read_text().strip()
            if name.startswith("nvidia-cuda-mps"):
                procs.append(name)
    if procs:
        return Probe("mps", True, f"{procs[0]} running (pipe directory not {pipe}?)",
                     {"pipe_dir": str(pipe)})  # fmt: skip
    return Probe("mps", False, f"MPS not running (no control pipe in {pipe}); {MPS_RULE}")


def probe_shm() -> Probe:
    ok = os.access("/dev/shm", os.W_OK)
    return Probe("shm", ok, "/dev/shm writable" if ok else "/dev/shm not writable (emu needs it)")


def gpu_nic_affinity(gpus: list[dict], nics: list[dict]) -> list[dict[str, Any]]:
    """Pair each GPU with the NICs on its NUMA node (a proxy for 'same PCIe switch')."""
    rows = []
    for g in gpus:
        near = [n["name"] for n in nics if str(n.get("numa_node")) == str(g.get("numa_node"))]
        rows.append({"gpu": g["index"], "numa_node": g.get("numa_node"), "nics": near})
    return rows


PROBES = {
    "python": probe_python,
    "mpi": probe_mpi,
    "gpus": probe_gpus,
    "nvcc": probe_cuda_toolkit,
    "cupy": probe_cupy,
    "pyverbs": probe_pyverbs,
    "rdma": probe_rdma_devices,
    "shm": probe_shm,
    "mps": probe_mps,
}


class LazyProbes(dict):
    """Probes run on first use only: a run's pre-flight asks for the few it needs."""

    def __missing__(self, name: str) -> Probe:
        probe = PROBES[name]()
        self[name] = probe
        return probe


def probe_all() -> dict[str, Probe]:
    probes = [
        probe_python(),
        probe_mpi(),
        probe_gpus(),
        probe_cuda_toolkit(),
        probe_cupy(),
        probe_pyverbs(),
        probe_rdma_devices(),
        probe_shm(),
        probe_mps(),
    ]
    return {p.name: p for p in probes}


def as_dict(probes: dict[str, Probe]) -> dict[str, Any]:
    return {k: asdict(v) for k, v in probes.items()}
