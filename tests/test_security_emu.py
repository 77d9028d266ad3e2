"""The emulated NIC's shared-memory names against a hostile local user: nothing another user
puts in /dev/shm stops a run (the janitor skips what is not a stale segment of this user; names
are unpredictable and a taken one is retried), and the janitor never removes another user's
segment or fails a run."""

from __future__ import annotations

import importlib
import os
import re
import uuid
from pathlib import Path

import pytest
import security_helpers
from security_helpers import OtherUser

from gicbench.fabric.emu import EmuFabric, janitor

# (the package's `janitor` attribute is the function: the module by its full name)
janitor_mod = importlib.import_module("gicbench.fabric.emu.janitor")

SHM = Path("/dev/shm")
SMALL = 2 << 20
DEAD = 4_194_305  # above the kernel's PID_MAX_LIMIT (4194304): no process ever has it

# fixtures of the second local user (tests/security_helpers.py)
other_user = security_helpers.other_user
shared_dir = security_helpers.shared_dir


def _job() -> str:
    return "sec" + uuid.uuid4().hex[:8]


def _open(job: str) -> EmuFabric:
    return EmuFabric(0, 1, job, progress="inline", segment_bytes=SMALL)


@pytest.fixture
def shm_entries():
    """Entries a test makes in /dev/shm, removed after whatever happened."""
    made: list[Path] = []
    yield made
    for p in made:
        p.unlink(missing_ok=True)


# The janitor's cases run in a directory like /dev/shm (sticky, writable by all) of the test's
# own: entries of a dead pid in the real one would be removed by, or trip, the janitor of any
# other gicbench run on the machine while the test runs.


def test_a_directory_named_like_a_segment_stops_nothing(shared_dir: Path) -> None:
    d = shared_dir / f"gicbench-{_job()}-{DEAD}-r0"
    d.mkdir()
    assert janitor(shared_dir) == []
    assert d.is_dir()


def test_links_and_fifos_named_like_segments_are_left_alone(
    tmp_path: Path, shared_dir: Path
) -> None:
    target = tmp_path / "target"
    target.write_text("kept\n")
    link = shared_dir / f"gicbench-{_job()}-{DEAD}-r0"
    link.symlink_to(target)
    fifo = shared_dir / f"gicbench-{_job()}-{DEAD}-r1"
    os.mkfifo(fifo)
    stale = shared_dir / f"gicbench-{_job()}-{DEAD}-r2-0123456789abcdef"
    stale.write_bytes(b"")
    assert janitor(shared_dir) == [stale.name]  # only the regular file of this user
    assert link.is_symlink() and target.read_text() == "kept\n" and fifo.exists()


def test_janitor_leaves_another_users_stale_segment(
    other_user: OtherUser, shared_dir: Path
) -> None:
    theirs = shared_dir / f"gicbench-{_job()}-{DEAD}-r0"
    other_user.run("touch", str(theirs))
    assert janitor(shared_dir) == []
    assert theirs.exists()


def test_another_users_janitor_is_not_stopped_by_our_stale_segment(
    other_user: OtherUser, shared_dir: Path
) -> None:
    ours = shared_dir / f"gicbench-{_job()}-{DEAD}-r0"
    ours.write_bytes(b"")
    r = other_user.python(
        f"from gicbench.fabric.emu import janitor; print(janitor({str(shared_dir)!r}))",
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert ours.exists()


def test_a_name_created_first_by_another_user_does_not_stop_a_run(
    other_user: OtherUser, shm_entries, monkeypatch
) -> None:
    """With SLURM_JOB_ID the job, pid and rank are known in advance: the old name
    gicbench-<job>-<pid>-r<rank>, and the first random name this run will draw, are made first
    by another user; the segment is made under another name all the same."""
    job = _job()
    predictable = SHM / f"gicbench-{job}-{os.getpid()}-r0"
    drawn = iter(["0123456789abcdef", "fedcba9876543210"])
    monkeypatch.setattr(janitor_mod, "new_nonce", lambda: next(drawn), raising=False)
    first = SHM / f"gicbench-{job}-{os.getpid()}-r0-0123456789abcdef"
    for p in (predictable, first):
        other_user.run("touch", str(p))
        shm_entries.append(p)
    f = _open(job)
    try:
        assert f.shm_name == f"/gicbench-{job}-{os.getpid()}-r0-fedcba9876543210"
        assert (SHM / f.shm_name.lstrip("/")).exists()
    finally:
        f.close()
    assert predictable.exists() and first.exists()  # theirs, untouched


def test_segment_names_are_unpredictable() -> None:
    job = _job()
    names = []
    for _ in range(2):
        f = _open(job)
        names.append(f.shm_name)
        f.close()
    assert names[0] != names[1]
    for name in names:
        assert re.fullmatch(rf"/gicbench-{job}-{os.getpid()}-r0-[0-9a-f]{{16}}", name), name


def test_peers_attach_the_names_they_were_given() -> None:
    """Names are exchanged (local_info), not derived: two ranks with random names connect."""
    job = _job()
    f0 = EmuFabric(0, 2, job, progress="inline", segment_bytes=SMALL)
    f1 = EmuFabric(1, 2, job, progress="inline", segment_bytes=SMALL)
    try:
        infos = [f0.local_info(), f1.local_info()]
        f0.add_peers(infos)
        f1.add_peers(infos)
        assert [i["shm"] for i in infos] == [f0.shm_name, f1.shm_name]
        assert all(re.search(r"-[0-9a-f]{16}$", i["shm"]) for i in infos)
    finally:
        f0.close()
        f1.close()
