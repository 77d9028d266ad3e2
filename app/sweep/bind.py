"""Per-task binding inside a job (`gicbench jobs bind -- CMD`): the GPU and NIC for this task's
node-local rank, and MPS when several ranks share a GPU. Runs before MPI starts, so it reads the
launcher's environment (srun or mpiexec), never MPI itself."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping

from .. import safe_files
from ..errors import ConfigError, UnsupportedError
from ..platform import RANKS_PER_GPU_VAR

_LOCAL_RANK = ("SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK")
_LOCAL_SIZE = ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE")
MPS_WAIT_S = 30.0


def _env_int(env: Mapping[str, str], name: str) -> int | None:
    """A count the launcher (or the user) set: None when unset, refused when it is not one."""
    v = env.get(name)
    if v is None or v == "":
        return None
    if not re.fullmatch(r"[0-9]+", v, re.ASCII):
        raise ConfigError(name, v, "a non-negative integer (as srun and mpiexec set it)")
    return int(v)


def _first_int(env: Mapping[str, str], names: tuple[str, ...]) -> int | None:
    for n in names:
        v = _env_int(env, n)
        if v is not None:
            return v
    return None


def _slurm_local_size(env: Mapping[str, str]) -> int | None:
    """Tasks on this node from SLURM_STEP_TASKS_PER_NODE ('4(x2),3' style) and SLURM_NODEID."""
    name = (
        "SLURM_STEP_TASKS_PER_NODE"
        if env.get("SLURM_STEP_TASKS_PER_NODE")
        else ("SLURM_TASKS_PER_NODE")
    )
    spec = env.get(name)
    if not spec:
        return None
    counts: list[int] = []
    for part in spec.split(","):
        m = re.fullmatch(r"([0-9]+)(?:\(x([0-9]+)\))?", part, re.ASCII)
        if not m:
            raise ConfigError(name, spec, "task counts per node as Slurm writes them, e.g. 4(x2),3")
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    node = _env_int(env, "SLURM_NODEID") or 0
    if node >= len(counts):
        raise ConfigError("SLURM_NODEID", node, f"a node of {name}={spec} (0..{len(counts) - 1})")
    return counts[node]


def launcher_local_size(env: Mapping[str, str]) -> int | None:
    """Tasks on this node as the launcher (mpiexec, srun, hydra) says, None outside one."""
    return _first_int(env, _LOCAL_SIZE) or _slurm_local_size(env)


def bind_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment this task runs with: CUDA_VISIBLE_DEVICES (one GPU), GICBENCH_NIC and
    UCX_NET_DEVICES (one NIC), and the MPS pipe directory when ranks share a GPU."""
    local_rank = _first_int(env, _LOCAL_RANK)
    local_size = launcher_local_size(env)
    if local_rank is None or local_size is None or not 0 <= local_rank < local_size:
        raise ConfigError(
            "local rank",
            f"{local_rank}/{local_size}",
            "a task started by srun or mpiexec (SLURM_LOCALID or OMPI_COMM_WORLD_LOCAL_RANK)",
        )
    out: dict[str, str] = {}
    visible = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    per_node = _env_int(env, "GICBENCH_GPUS_PER_NODE") or 0
    gpus = [g for g in visible.split(",") if g] if visible else []
    if not gpus:
        gpus = [str(i) for i in range(per_node)]
    gpu_slot = None
    if gpus:
        # Blocks of neighbouring ranks per GPU, so ranks sharing a GPU are adjacent.
        gpu_slot = local_rank * len(gpus) // local_size
        out["CUDA_VISIBLE_DEVICES"] = gpus[gpu_slot]
        # this task sees one GPU: how many share it cannot be read from CUDA_VISIBLE_DEVICES
        sharing = sum(1 for r in range(local_size) if r * len(gpus) // local_size == gpu_slot)
        out[RANKS_PER_GPU_VAR] = str(sharing)
        if local_size > len(gpus):
            job = env.get("SLURM_JOB_ID", "local")
            out["CUDA_MPS_PIPE_DIRECTORY"] = env.get(
                "CUDA_MPS_PIPE_DIRECTORY", f"/tmp/gicbench-mps-{job}/pipe"
            )
            out["CUDA_MPS_LOG_DIRECTORY"] = env.get(
                "CUDA_MPS_LOG_DIRECTORY", f"/tmp/gicbench-mps-{job}/log"
            )
            out["GICBENCH_MPS"] = "1"
    nics = [n for n in env.get("GICBENCH_NICS", "").split(",") if n]
    if nics:
        slot = (
            gpu_slot * len(nics) // len(gpus)
            if gpu_slot is not None
            else local_rank * len(nics) // local_size
        )
        nic = nics[slot]
        out["GICBENCH_NIC"] = nic
        out["UCX_NET_DEVICES"] = nic if ":" in nic else f"{nic}:1"
    out["GICBENCH_LOCAL_RANK"] = str(local_rank)
    return out


def ensure_mps(env: Mapping[str, str]) -> None:
    """Node-local rank 0 starts the MPS control daemon (all GPUs of the node, the pipe directory
    of the job); the other ranks wait for its control pipe. MPS ends with the job's processes.
    The pipe directory's name is predictable (/tmp/gicbench-mps-<job>): a directory or control
    pipe of another user there is refused, never connected to."""
    pipe = env["CUDA_MPS_PIPE_DIRECTORY"]
    control = os.path.join(pipe, "control")
    if os.path.exists(control):
        _check_mps_pipe(pipe, control)
        return
    if env.get("GICBENCH_LOCAL_RANK") == "0":
        exe = shutil.which("nvidia-cuda-mps-control")
        if exe is None:
            raise UnsupportedError(
                "several ranks share a GPU: MPS is needed and nvidia-cuda-mps-control is not on "
                "PATH (give each rank its own GPU: --ntasks-per-node <= --gpus-per-node)"
            )
        os.makedirs(pipe, exist_ok=True)
        os.makedirs(env["CUDA_MPS_LOG_DIRECTORY"], exist_ok=True)
        _check_mps_pipe(pipe, None)
        daemon_env = {k: v for k, v in env.items() if k != "CUDA_VISIBLE_DEVICES"}
        subprocess.run([exe, "-d"], env=daemon_env, check=True)
    deadline = time.monotonic() + MPS_WAIT_S
    while not os.path.exists(control):
        if time.monotonic() > deadline:
            raise UnsupportedError(f"MPS control pipe {control} did not appear in {MPS_WAIT_S} s")
        time.sleep(0.1)
    _check_mps_pipe(pipe, control)


def _check_mps_pipe(pipe: str, control: str | None) -> None:
    """The pipe directory, its parent (a job's own, under /tmp) and the control pipe are this
    user's (or root's), and no other user can write the directories (ConfigError)."""
    label = "CUDA_MPS_PIPE_DIRECTORY"
    for d in (os.path.dirname(pipe.rstrip("/")), pipe):
        with safe_files.opened_dir(d, label):
            pass
    if control is not None:
        owner = os.lstat(control).st_uid
        if owner not in (os.geteuid(), 0):
            raise ConfigError(label, pipe, "a directory whose MPS control pipe is this user's: "
                              f"{control} is owned by uid {owner}")  # fmt: skip
