"""DOCA GPUNetIO's device-verbs headers: where they come from, where they are kept, which version.

NVIDIA ships the device side of DOCA GPUNetIO (GDAKI) as BSD-3-Clause CUDA headers inside the
`nvidia-nvshmem-cu13` wheel (`nvidia/nvshmem/include/gpunetio/`). gicbench compiles its DOCA
kernels against them. `fetch()` extracts only the headers the device verbs need, plus the wheel's
license file, into `<root>/<wheel version>/` (default root `.cache/gpunetio`, ignored by git), and
writes `VERSION` (wheel version, DOCA GPUNetIO version, the wheel's sha256). `find()` looks, in
order, at $GICBENCH_GPUNETIO_DIR, the cache under the current directory (what set-up fetched, the
pinned version first), and the installed wheel (the `gpu` extra; an image may carry another
version); `unavailable_reason()` says why none is usable.

    python -m gicbench.submit.doca.headers fetch [--root DIR] [--wheel FILE]
    python -m gicbench.submit.doca.headers show
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

WHEEL = "nvidia-nvshmem-cu13"
WHEEL_VERSION = "3.8.0"  # the version the adaptor (cuda/doca/) was written and checked against
PREFIX = "nvidia/nvshmem/include/gpunetio/"
# What the device verbs include (doca_gpunetio_device.h and everything it pulls in); the host
# library's headers (host/, doca_gpunetio_host.h) are not needed by device code.
HEADERS = (
    "doca_gpunetio_device.h",
    "doca_gpunetio_config.h",
    "common/doca_gpunetio_verbs_def.h",
    "common/doca_gpunetio_verbs_dev.h",
    "device/doca_gpunetio_dev_verbs_common.cuh",
    "device/doca_gpunetio_dev_verbs_cq.cuh",
    "device/doca_gpunetio_dev_verbs_qp.cuh",
    "device/doca_gpunetio_dev_verbs_onesided.cuh",
    "device/doca_gpunetio_dev_verbs_counter.cuh",
)
LICENSE = "License.txt"  # the wheel's dist-info/licenses/License.txt, kept beside the headers
ENV_DIR = "GICBENCH_GPUNETIO_DIR"
DEFAULT_ROOT = Path(".cache") / "gpunetio"
OFFLINE_MARK = "OFFLINE"  # written by fetch() when no package index is reachable
_SPDX = "SPDX-License-Identifier: BSD-3-Clause"
_VER = re.compile(r"#define DOCA_GPUNETIO_VERSION_(MAJOR|MINOR|PATCH) (\d+)")


@dataclass(frozen=True)
class Gpunetio:
    """A usable header set: `include` is the directory to pass as -I (it holds
    doca_gpunetio_device.h); `wheel_version`/`doca_version` are recorded in traces."""

    include: Path
    wheel_version: str
    doca_version: str
    source: str  # "env", "installed wheel" or "cache"


def doca_version(include: Path) -> str:
    """DOCA GPUNetIO's own version, from common/doca_gpunetio_verbs_def.h."""
    text = (include / "common" / "doca_gpunetio_verbs_def.h").read_text()
    parts = dict(_VER.findall(text))
    if set(parts) != {"MAJOR", "MINOR", "PATCH"}:
        raise ValueError(f"{include}: no DOCA_GPUNETIO_VERSION_MAJOR/MINOR/PATCH defines")
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"


def missing(include: Path) -> list[str]:
    return [h for h in HEADERS if not (include / h).is_file()]


def _read_version_file(d: Path) -> dict[str, str]:
    out = {}
    f = d / "VERSION"
    if f.is_file():
        for line in f.read_text().splitlines():
            k, _, v = line.partition("=")
            out[k.strip()] = v.strip()
    return out


def _installed_include() -> tuple[Path, str] | None:
    try:
        dist = importlib.metadata.distribution(WHEEL)
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if str(f).endswith(PREFIX + "doca_gpunetio_device.h"):
            return Path(str(dist.locate_file(f))).parent, dist.version
    return None


def _candidates() -> list[tuple[Path, str, str]]:
    """(include dir, wheel version, source) in search order."""
    out: list[tuple[Path, str, str]] = []
    env = os.environ.get(ENV_DIR)
    if env:
        d = Path(env)
        out.append((d / "include" if (d / "include").is_dir() else d,
                    _read_version_file(d).get("wheel", "unknown"), "env"))  # fmt: skip
    root = Path.cwd() / DEFAULT_ROOT
    if root.is_dir():
        for d in sorted(root.iterdir(), key=lambda p: p.name != WHEEL_VERSION):
            if (d / "VERSION").is_file():
                out.append((d / "include", _read_version_file(d).get("wheel", d.name), "cache"))
    inst = _installed_include()
    if inst:
        out.append((inst[0], inst[1], "installed wheel"))
    return out


def find() -> Gpunetio | None:
    """The first complete header set, or None (see unavailable_reason())."""
    for inc, ver, src in _candidates():
        if inc.is_dir() and not missing(inc):
            return Gpunetio(inc.resolve(), ver, doca_version(inc), src)
    return None


def unavailable_reason() -> str:
    """Why find() returned None, naming what was looked at and how to fix it."""
    looked = [f"{src} {inc} (missing {', '.join(missing(inc)) or 'nothing'})"
              for inc, _, src in _candidates()]  # fmt: skip
    where = "; ".join(looked) if looked else "no candidate directory exists"
    return (
        f"DOCA GPUNetIO headers not found ({where}): install the gpu extra "
        f"(pip install 'gicbench[gpu]', which pulls {WHEEL}), or run "
        f"'python -m gicbench.submit.doca.headers fetch' in the repository (make setup does it "
        f"where nvcc exists), or set {ENV_DIR}"
    )


def offline_reason(root: Path = DEFAULT_ROOT) -> str | None:
    """The reason fetch() recorded when no package index was reachable, else None."""
    f = root / OFFLINE_MARK
    return f.read_text().strip() if f.is_file() else None


# ---- fetch ---------------------------------------------------------------------------------------
def _index_hosts() -> list[tuple[str, int]]:
    urls = [os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple")]
    try:
        cfg = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"],
                             capture_output=True, text=True, timeout=30)  # fmt: skip
        if cfg.returncode == 0 and cfg.stdout.strip():
            urls.insert(0, cfg.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    out = []
    for u in urls:
        p = urlparse(u)
        if p.scheme in ("http", "https") and p.hostname:
            out.append((p.hostname, p.port or (443 if p.scheme == "https" else 80)))
    return out


def network_absent() -> str | None:
    """A reason string when no package index host can be reached at all, else None."""
    hosts = _index_hosts()
    for host, port in hosts:
        try:
            with socket.create_connection((host, port), timeout=5):
                return None
        except OSError:
            continue
    return f"no package index reachable ({', '.join(f'{h}:{p}' for h, p in hosts)})"


def _download(tmp: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "-d", str(tmp), f"{WHEEL}=={WHEEL_VERSION}"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(tmp.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return wheels[0]


def extract(wheel: Path, root: Path) -> Path:
    """Extract HEADERS and the license from `wheel` into root/<version>/; return that dir."""
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = next((n for n in names if n.endswith(".dist-info/METADATA")), None)
        if meta is None:
            raise RuntimeError(f"{wheel}: no dist-info/METADATA")
        version = next(
            (ln.split(":", 1)[1].strip() for ln in z.read(meta).decode().splitlines()
             if ln.startswith("Version:")), "unknown",
        )  # fmt: skip
        lic = next((n for n in names if n.endswith("/licenses/" + LICENSE)), None)
        absent = [h for h in HEADERS if PREFIX + h not in names]
        if absent or lic is None:
            raise RuntimeError(f"{wheel}: lacks {absent or [LICENSE]}")
        dest = root / version
        tmp = root / f".{version}.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        for h in HEADERS:
            data = z.read(PREFIX + h)
            if _SPDX.encode() not in data:
                raise RuntimeError(f"{wheel}: {h} does not carry '{_SPDX}'")
            out = tmp / "include" / h
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)
        (tmp / LICENSE).write_bytes(z.read(lic))
    nbytes = sum(f.stat().st_size for f in (tmp / "include").rglob("*") if f.is_file())
    (tmp / "VERSION").write_text(
        f"wheel={version}\ndoca={doca_version(tmp / 'include')}\nsha256={sha}\n"
        f"source={WHEEL}\nheaders_bytes={nbytes}\n"
    )
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    (root / OFFLINE_MARK).unlink(missing_ok=True)
    return dest


def fetch(root: Path = DEFAULT_ROOT, wheel: Path | None = None) -> Path:
    """Headers into root/<version>/ from `wheel`, the installed wheel, or a pip download of the
    pinned version. Already there: nothing is downloaded."""
    done = root / WHEEL_VERSION
    if wheel is None and (done / "VERSION").is_file() and not missing(done / "include"):
        return done
    root.mkdir(parents=True, exist_ok=True)
    if wheel is not None:
        return extract(wheel, root)
    with tempfile.TemporaryDirectory() as tmp:
        return extract(_download(Path(tmp)), root)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gicbench.submit.doca.headers")
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help=f"extract the GPUNetIO headers of {WHEEL}=={WHEEL_VERSION}")
    f.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    f.add_argument("--wheel", type=Path, default=None, help="a wheel file already downloaded")
    sub.add_parser("show", help="which headers find() uses")
    a = ap.parse_args(argv)
    if a.cmd == "show":
        g = find()
        print(g if g else unavailable_reason())
        return 0 if g else 1
    try:
        d = fetch(a.root, a.wheel)
    except RuntimeError as e:
        why = network_absent() if a.wheel is None else None
        if why:  # no network at all: say so, leave a mark the nvcc tests read, do not fail set-up
            a.root.mkdir(parents=True, exist_ok=True)
            (a.root / OFFLINE_MARK).write_text(why + "\n")
            print(f"warning: GPUNetIO headers not fetched: {why}", file=sys.stderr)
            return 0
        print(f"error: fetching the GPUNetIO headers failed: {e}", file=sys.stderr)
        return 1
    print(f"GPUNetIO headers: {d} ({_read_version_file(d)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
