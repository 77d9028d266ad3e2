"""Vendor device headers taken from one pinned wheel: download, extract, find, refusal reason.

Two header sets come from the same `nvidia-nvshmem-cu13` wheel: DOCA GPUNetIO's device verbs
(`gicbench.submit.doca.headers`) and NVSHMEM's own device API with its IBGDA transport
(`gicbench.submit.nvshmem.headers`). Each is described by a `HeaderSet` (where in the wheel, which
files, which license notices a file must carry, where it is cached, the environment variable that
overrides the search); the functions here do the rest for either, so the download, the
extraction (only the listed files, byte for byte, plus the wheel's license file, into
`<root>/<wheel version>/` with a `VERSION` file, atomically), the offline rule of set-up and the
search order live in one place. Nothing here is committed: the cache directories are ignored by
git.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

WHEEL = "nvidia-nvshmem-cu13"
WHEEL_VERSION = "3.8.0"  # what both adaptors (cuda/doca/, cuda/nvshmem/) were checked against
LICENSE = "License.txt"  # the wheel's dist-info/licenses/License.txt, kept beside the headers
OFFLINE_MARK = "OFFLINE"  # written by main() when no package index is reachable
WHEEL_CACHE = Path(".cache") / "wheels"  # the downloaded wheel, kept for the other header set
SHOWN = 10  # missing headers a refusal names before it counts the rest


@dataclass(frozen=True)
class HeaderSet:
    """One set of headers in the wheel.

    prefix: their directory in the wheel (ends with '/'); headers: paths below it; marker: the
    header whose presence in an installed wheel identifies the include directory (a path below
    prefix); notices: a header must carry one of these byte strings (its license notice), in the
    order they are tried; versions: (VERSION key, function of the include directory) pairs
    written after `wheel=`; count_notices: also write `licenses=` (how many headers carry each
    notice)."""

    label: str
    module: str
    prefix: str
    headers: tuple[str, ...]
    marker: str
    env_dir: str
    default_root: Path
    notices: tuple[str, ...]
    versions: tuple[tuple[str, Callable[[Path], str]], ...] = ()
    count_notices: bool = False


def missing(spec: HeaderSet, include: Path) -> list[str]:
    return [h for h in spec.headers if not (include / h).is_file()]


def read_version_file(d: Path) -> dict[str, str]:
    out = {}
    f = d / "VERSION"
    if f.is_file():
        for line in f.read_text().splitlines():
            k, _, v = line.partition("=")
            out[k.strip()] = v.strip()
    return out


def installed_include(spec: HeaderSet) -> tuple[Path, str] | None:
    """(include directory, version) of the installed wheel, if it holds spec's marker."""
    try:
        dist = importlib.metadata.distribution(WHEEL)
    except importlib.metadata.PackageNotFoundError:
        return None
    want = spec.prefix + spec.marker
    for f in dist.files or ():
        if str(f).endswith(want):
            path = Path(str(dist.locate_file(f)))
            for _ in Path(spec.marker).parts:
                path = path.parent
            return path, dist.version
    return None


def candidates(
    spec: HeaderSet, installed: Callable[[], tuple[Path, str] | None]
) -> list[tuple[Path, str, str]]:
    """(include dir, wheel version, source) in search order: $env_dir, the cache under the
    current directory (the pinned version first), the installed wheel."""
    out: list[tuple[Path, str, str]] = []
    env = os.environ.get(spec.env_dir)
    if env:
        d = Path(env)
        out.append((d / "include" if (d / "include").is_dir() else d,
                    read_version_file(d).get("wheel", "unknown"), "env"))  # fmt: skip
    root = Path.cwd() / spec.default_root
    if root.is_dir():
        for d in sorted(root.iterdir(), key=lambda p: p.name != WHEEL_VERSION):
            if (d / "VERSION").is_file():
                out.append((d / "include", read_version_file(d).get("wheel", d.name), "cache"))
    inst = installed()
    if inst:
        out.append((inst[0], inst[1], "installed wheel"))
    return out


def first_complete(
    spec: HeaderSet, cands: Sequence[tuple[Path, str, str]]
) -> tuple[Path, str, str] | None:
    """The first candidate holding every header of spec (include resolved, version, source)."""
    for inc, ver, src in cands:
        if inc.is_dir() and not missing(spec, inc):
            return inc.resolve(), ver, src
    return None


def unavailable_reason(spec: HeaderSet, cands: Sequence[tuple[Path, str, str]]) -> str:
    """Why no candidate is complete, naming what was looked at and the three fixes."""
    looked = []
    for inc, _, src in cands:
        gone = missing(spec, inc)
        shown = ", ".join(gone[:SHOWN])
        if len(gone) > SHOWN:
            shown += f" and {len(gone) - SHOWN} more"
        looked.append(f"{src} {inc} (missing {shown or 'nothing'})")
    where = "; ".join(looked) if looked else "no candidate directory exists"
    return (
        f"{spec.label} headers not found ({where}): install the gpu extra "
        f"(pip install 'gicbench[gpu]', which pulls {WHEEL}), or run "
        f"'python -m {spec.module} fetch' in the repository (make setup does it "
        f"where nvcc exists), or set {spec.env_dir}"
    )


def offline_reason(root: Path) -> str | None:
    """The reason main() recorded when no package index was reachable, else None."""
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


def download(tmp: Path) -> Path:
    """The pinned wheel: the copy an earlier fetch kept in WHEEL_CACHE (under the current
    directory; both header sets come from it, so set-up downloads it once), else a pip download
    into WHEEL_CACHE (`tmp` where that cannot be created)."""
    cache = Path.cwd() / WHEEL_CACHE
    pattern = f"{WHEEL.replace('-', '_')}-{WHEEL_VERSION}-*.whl"
    kept = sorted(cache.glob(pattern))
    if kept and zipfile.is_zipfile(kept[0]):
        return kept[0]
    try:
        cache.mkdir(parents=True, exist_ok=True)
        dest = cache
    except OSError:
        dest = tmp
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "-d", str(dest), f"{WHEEL}=={WHEEL_VERSION}"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob(pattern))
    if proc.returncode != 0 or not wheels:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return wheels[0]


def _short(notice: str) -> str:
    """A notice as VERSION names it: the SPDX identifier, or the file it refers to."""
    if notice.startswith("SPDX-License-Identifier:"):
        return notice.split(":", 1)[1].strip()
    return LICENSE if LICENSE in notice else notice


def _notice(spec: HeaderSet, data: bytes) -> str | None:
    return next((n for n in spec.notices if n.encode() in data), None)


def extract(spec: HeaderSet, wheel: Path, root: Path) -> Path:
    """Extract spec's headers and the wheel's license from `wheel` into root/<version>/ (through
    a partial directory renamed at the end); return that directory."""
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    counts: dict[str, int] = {}
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = next((n for n in sorted(names) if n.endswith(".dist-info/METADATA")), None)
        if meta is None:
            raise RuntimeError(f"{wheel}: no dist-info/METADATA")
        version = next(
            (ln.split(":", 1)[1].strip() for ln in z.read(meta).decode().splitlines()
             if ln.startswith("Version:")), "unknown",
        )  # fmt: skip
        lic = next((n for n in sorted(names) if n.endswith("/licenses/" + LICENSE)), None)
        absent = [h for h in spec.headers if spec.prefix + h not in names]
        if absent or lic is None:
            raise RuntimeError(f"{wheel}: lacks {absent or [LICENSE]}")
        dest = root / version
        tmp = root / f".{version}.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        for h in spec.headers:
            data = z.read(spec.prefix + h)
            notice = _notice(spec, data)
            if notice is None:
                shutil.rmtree(tmp, ignore_errors=True)
                want = " or ".join(f"'{n}'" for n in spec.notices)
                raise RuntimeError(f"{wheel}: {h} does not carry {want}")
            counts[notice] = counts.get(notice, 0) + 1
            out = tmp / "include" / h
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)
        (tmp / LICENSE).write_bytes(z.read(lic))
    nbytes = sum(f.stat().st_size for f in (tmp / "include").rglob("*") if f.is_file())
    lines = [f"wheel={version}"]
    lines += [f"{key}={fn(tmp / 'include')}" for key, fn in spec.versions]
    lines += [f"sha256={sha}", f"source={WHEEL}", f"headers_bytes={nbytes}"]
    if spec.count_notices:
        lines.append("licenses=" + ",".join(f"{_short(n)}:{c}" for n, c in counts.items()))
    (tmp / "VERSION").write_text("\n".join(lines) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    (root / OFFLINE_MARK).unlink(missing_ok=True)
    return dest


def fetch(spec: HeaderSet, root: Path, wheel: Path | None,
          get: Callable[[Path], Path] = download) -> Path:  # fmt: skip
    """Headers into root/<version>/ from `wheel` or from `get` (a download of the pinned version
    into a temporary directory). Already there: nothing is downloaded."""
    done = root / WHEEL_VERSION
    if wheel is None and (done / "VERSION").is_file() and not missing(spec, done / "include"):
        return done
    root.mkdir(parents=True, exist_ok=True)
    if wheel is not None:
        return extract(spec, wheel, root)
    with tempfile.TemporaryDirectory() as tmp:
        return extract(spec, get(Path(tmp)), root)


def main(
    spec: HeaderSet,
    argv: list[str] | None,
    *,
    do_fetch: Callable[[Path, Path | None], Path],
    find: Callable[[], object | None],
    reason: Callable[[], str],
    offline: Callable[[], str | None] = network_absent,
    extra: Mapping[str, Callable[[argparse.Namespace], int]] | None = None,
) -> int:
    """`fetch [--root DIR] [--wheel FILE]` and `show` for one header set. A failed download fails
    (exit 1) while a package index answers; with none reachable it leaves the OFFLINE mark (the
    nvcc tests read it and skip) and exits 0, so set-up does not fail offline."""
    ap = argparse.ArgumentParser(prog=f"python -m {spec.module}")
    sub = ap.add_subparsers(dest="cmd", required=True)
    what = f"extract the {spec.label} headers ({len(spec.headers)}) of {WHEEL}=={WHEEL_VERSION}"
    f = sub.add_parser("fetch", help=what)
    f.add_argument("--root", type=Path, default=spec.default_root)
    f.add_argument("--wheel", type=Path, default=None, help="a wheel file already downloaded")
    sub.add_parser("show", help="which headers find() uses")
    for name in extra or {}:
        sub.add_parser(name)
    a = ap.parse_args(argv)
    if extra and a.cmd in extra:
        return extra[a.cmd](a)
    if a.cmd == "show":
        g = find()
        print(g if g else reason())
        return 0 if g else 1
    try:
        d = do_fetch(a.root, a.wheel)
    except RuntimeError as e:
        why = offline() if a.wheel is None else None
        if why:
            a.root.mkdir(parents=True, exist_ok=True)
            (a.root / OFFLINE_MARK).write_text(why + "\n")
            print(f"warning: {spec.label} headers not fetched: {why}", file=sys.stderr)
            return 0
        print(f"error: fetching the {spec.label} headers failed: {e}", file=sys.stderr)
        return 1
    print(f"{spec.label} headers: {d} ({read_version_file(d)})")
    return 0
