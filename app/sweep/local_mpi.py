"""MPI between the ranks of one node over shared memory only: no TCP listener.

Open MPI's TCP BTL listens on every interface (0.0.0.0 and ::) during a run, even when every
rank is on the node; a run on one node needs only the shared-memory and self BTLs. The ob1 PML
goes with them (UCX's PML would choose its own transports, TCP among them). Where gicbench
launches ranks on one node (sweep points; the single-node job scripts; the Makefile's MPIEXEC,
which says the same in make) it sets these unless the user set them already. The launcher's own
channel (PRRTE's out-of-band TCP) still listens on every interface: PRRTE refuses a loopback-only
one (docs/security.md says how to restrict the rest).
"""

from __future__ import annotations

from collections.abc import Mapping

# `vader`: the shared-memory BTL as Open MPI 4 names it; Open MPI 5 (`sm`) accepts it too, and
# Open MPI 4 refuses `sm` (MPI_Init fails).
SINGLE_NODE_MPI_ENV = {"OMPI_MCA_btl": "self,vader", "OMPI_MCA_pml": "ob1"}


def single_node(environ: Mapping[str, str]) -> bool:
    """Outside Slurm, or inside a one-node allocation."""
    nodes = environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES")
    return nodes is None or nodes.strip() == "1"


def local_mpi_env(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` for launching ranks here: SINGLE_NODE_MPI_ENV added where unset, on one node."""
    env = dict(environ)
    if single_node(environ):
        for key, value in SINGLE_NODE_MPI_ENV.items():
            env.setdefault(key, value)
    return env


def shell_exports() -> list[str]:
    """The same for a job script: `export K="${K:-V}"` lines (a value set before is kept)."""
    return [f'export {k}="${{{k}:-{v}}}"' for k, v in SINGLE_NODE_MPI_ENV.items()]
