"""A second local user for the security tests: created with useradd for the test, removed after.

The tests play a hostile local user who plants links, directories and shared-memory names for
root's (or the tester's) gicbench to trip over. They need root (to create the user) and useradd;
without either they skip and say which.
"""

from __future__ import annotations

import os
import secrets
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class OtherUser:
    name: str
    uid: int
    gid: int

    def run(self, *cmd: str, check: bool = True, timeout: float = 120,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """Run a command as this user (its own process, its own uid and gid)."""
        r = subprocess.run(
            list(cmd), user=self.uid, group=self.gid, extra_groups=[], capture_output=True,
            text=True, timeout=timeout, check=False, cwd="/", env=env,
        )  # fmt: skip
        if check and r.returncode != 0:
            raise AssertionError(f"as {self.name}: {cmd} exited {r.returncode}: {r.stderr}")
        return r

    def python(self, code: str, check: bool = True) -> subprocess.CompletedProcess:
        """Python code run as this user, with this environment's packages importable."""
        exe = self._interpreter()
        env = {"PATH": os.defpath, "PYTHONPATH": os.pathsep.join(site.getsitepackages()),
               "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
        return self.run(exe, "-c", code, check=check, env=env)

    def _interpreter(self) -> str:
        """This interpreter when the user may run it (a venv's may live in a private home),
        else the system's of the same version."""
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        for exe in (sys.executable, shutil.which(version, path="/usr/local/bin:/usr/bin")):
            if exe is None:
                continue
            try:
                if self.run(exe, "-c", "pass", check=False).returncode == 0:
                    return exe
            except PermissionError:
                continue
        pytest.skip(f"no {version} that user {self.name} may run")


@pytest.fixture
def other_user() -> Iterator[OtherUser]:
    if os.geteuid() != 0:
        pytest.skip("needs root to create a second local user (useradd)")
    useradd, userdel = shutil.which("useradd"), shutil.which("userdel")
    if useradd is None or userdel is None:
        pytest.skip("needs useradd and userdel to create a second local user")
    name = "gbsec" + secrets.token_hex(3)
    r = subprocess.run(
        [useradd, "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if r.returncode != 0:
        pytest.skip(f"useradd {name} failed: {r.stderr.strip()}")
    import pwd

    pw = pwd.getpwnam(name)
    try:
        yield OtherUser(name, pw.pw_uid, pw.pw_gid)
    finally:
        subprocess.run([userdel, name], capture_output=True, check=False)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every user can reach and make entries in (pytest's tmp_path is private to
    the tester): ours, sticky and writable by all like /tmp (mode 1777), removed after."""
    d = Path(tempfile.mkdtemp(prefix="gicbench-sec-", dir="/tmp"))
    os.chmod(d, 0o1777)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def root_only_file(d: Path, text: str = "root's secret\n") -> Path:
    """A file only its owner may read or write, outside the run: what must never change."""
    p = d / "victim"
    p.write_text(text)
    os.chmod(p, 0o600)
    return p
