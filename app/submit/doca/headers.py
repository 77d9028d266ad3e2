"""DOCA GPUNetIO's device-verbs headers: where they come from, where they are kept, which version.

NVIDIA ships the device side of DOCA GPUNetIO (GDAKI) as BSD-3-Clause CUDA headers inside the
`nvidia-nvshmem-cu13` wheel (`nvidia/nvshmem/include/gpunetio/`). gicbench compiles its DOCA
kernels against them. `fetch()` extracts only the headers the device verbs need, plus the wheel's
license file, into `<root>/<wheel version>/` (default root `.cache/gpunetio`, ignored by git), and
writes `VERSION` (wheel version, DOCA GPUNetIO version, the wheel's sha256). `find()` looks, in
order, at $GICBENCH_GPUNETIO_DIR, the cache under the current directory (what set-up fetched, the
pinned version first), and the installed wheel (the `gpu` extra; an image may carry another
version); `unavailable_reason()` says why none is usable. The download, extraction and search
are `gicbench.submit.vendor_wheel`'s, shared with NVSHMEM's headers (the same wheel).

    python -m gicbench.submit.doca.headers fetch [--root DIR] [--wheel FILE]
    python -m gicbench.submit.doca.headers show
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .. import vendor_wheel
from ..vendor_wheel import LICENSE, OFFLINE_MARK, WHEEL, WHEEL_VERSION  # noqa: F401 (re-exported)

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
ENV_DIR = "GICBENCH_GPUNETIO_DIR"
DEFAULT_ROOT = Path(".cache") / "gpunetio"
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


SPEC = vendor_wheel.HeaderSet(
    label="DOCA GPUNetIO",
    module="gicbench.submit.doca.headers",
    prefix=PREFIX,
    headers=HEADERS,
    marker="doca_gpunetio_device.h",
    env_dir=ENV_DIR,
    default_root=DEFAULT_ROOT,
    notices=(_SPDX,),
    versions=(("doca", doca_version),),
)


def missing(include: Path) -> list[str]:
    return vendor_wheel.missing(SPEC, include)


def _installed_include() -> tuple[Path, str] | None:
    return vendor_wheel.installed_include(SPEC)


def _candidates() -> list[tuple[Path, str, str]]:
    """(include dir, wheel version, source) in search order."""
    return vendor_wheel.candidates(SPEC, _installed_include)


def find() -> Gpunetio | None:
    """The first complete header set, or None (see unavailable_reason())."""
    hit = vendor_wheel.first_complete(SPEC, _candidates())
    if hit is None:
        return None
    inc, ver, src = hit
    return Gpunetio(inc, ver, doca_version(inc), src)


def unavailable_reason() -> str:
    """Why find() returned None, naming what was looked at and how to fix it."""
    return vendor_wheel.unavailable_reason(SPEC, _candidates())


def offline_reason(root: Path = DEFAULT_ROOT) -> str | None:
    """The reason fetch() recorded when no package index was reachable, else None."""
    return vendor_wheel.offline_reason(root)


def network_absent() -> str | None:
    """A reason string when no package index host can be reached at all, else None."""
    return vendor_wheel.network_absent()


def _download(tmp: Path) -> Path:
    return vendor_wheel.download(tmp)


def extract(wheel: Path, root: Path) -> Path:
    """Extract HEADERS and the license from `wheel` into root/<version>/; return that dir."""
    return vendor_wheel.extract(SPEC, wheel, root)


def fetch(root: Path = DEFAULT_ROOT, wheel: Path | None = None) -> Path:
    """Headers into root/<version>/ from `wheel`, the installed wheel, or a pip download of the
    pinned version. Already there: nothing is downloaded."""
    return vendor_wheel.fetch(SPEC, root, wheel, lambda tmp: _download(tmp))


def main(argv: list[str] | None = None) -> int:
    return vendor_wheel.main(SPEC, argv, do_fetch=fetch, find=find, reason=unavailable_reason,
                             offline=network_absent)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
