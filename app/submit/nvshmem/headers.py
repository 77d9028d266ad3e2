"""NVSHMEM's device headers with its IBGDA transport: where they come from, where they are kept.

The `nvidia-nvshmem-cu13` wheel that carries DOCA GPUNetIO's device verbs also carries NVSHMEM's
own device API (`nvshmem.h`: `nvshmem_putmem_nbi`, `nvshmem_p`, `nvshmem_quiet`, ...) and its
IBGDA transport (`non_abi/device/pt-to-pt/ibgda_device.cuh`: the WQE builders, the slot
reservation, the doorbell, the CQ poll, the PE-wide quiet), whose device state
(`device_host_transport/nvshmem_common_ibgda.h`) NVSHMEM's host transport normally fills.
gicbench compiles them unchanged (cuda/nvshmem/, docs/nvshmem.md). `fetch()` extracts HEADERS,
the closure nvcc finds for cuda/nvshmem/nvshmem_kernels.cu (`build.header_closure()`;
tests/test_nvshmem_compile.py checks the list is that closure, no more, no less), plus the
wheel's license file, into `<root>/<wheel version>/` (default `.cache/nvshmem`, ignored by git)
with `VERSION` (wheel, NVSHMEM version, DOCA GPUNetIO version of the gpunetio/ headers in the
closure, the wheel's sha256, bytes, licenses). The download and extraction are
`gicbench.submit.vendor_wheel`'s, shared with DOCA's headers.

Licenses: NVSHMEM's headers carry `SPDX-License-Identifier: Apache-2.0`, the gpunetio/ ones
BSD-3-Clause; one (`non_abi/device/pt-to-pt/tma_device.cuh`) says only "See License.txt for
license information", the wheel's license kept beside the headers. Extraction refuses a header
with none of the three notices.

    python -m gicbench.submit.nvshmem.headers fetch [--root DIR] [--wheel FILE]
    python -m gicbench.submit.nvshmem.headers show
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .. import vendor_wheel
from ..vendor_wheel import LICENSE, OFFLINE_MARK, WHEEL, WHEEL_VERSION  # noqa: F401 (re-exported)

PREFIX = "nvidia/nvshmem/include/"
# The include closure of cuda/nvshmem/nvshmem_kernels.cu (nvshmem.h's device API with
# NVSHMEM_ENABLE_ALL_DEVICE_INLINING, and ibgda_device.cuh), as nvcc -M lists it for 3.8.0. It
# holds NVSHMEM's host API headers too (nvshmem.h includes nvshmem_host.h for any non-NVRTC
# compile) and DOCA GPUNetIO's (transfer_device.cuh includes the GDAKI transport beside IBGDA).
HEADERS = (
    "bootstrap_device_host/nvshmem_uniqueid.h",
    "device/logical_endpoint_device.cuh",
    "device/nvshmem_coll_defines.cuh",
    "device/nvshmem_defines.h",
    "device/nvshmem_device_macros.h",
    "device/nvshmemx_coll_defines.cuh",
    "device/nvshmemx_collective_launch_apis.h",
    "device/nvshmemx_defines.h",
    "device_host/logical_endpoint_types.h",
    "device_host/nvshmem_common.cuh",
    "device_host/nvshmem_proxy_channel.h",
    "device_host/nvshmem_tensor.h",
    "device_host/nvshmem_types.h",
    "device_host/nvshmemi_extern_constant.h",
    "device_host_transport/nvshmem_common_batch_rma_pending_qps.hpp",
    "device_host_transport/nvshmem_common_gpunetio.h",
    "device_host_transport/nvshmem_common_ibgda.h",
    "device_host_transport/nvshmem_common_transport.h",
    "device_host_transport/nvshmem_constants.h",
    "gpunetio/common/doca_gpunetio_verbs_def.h",
    "gpunetio/common/doca_gpunetio_verbs_dev.h",
    "gpunetio/device/doca_gpunetio_dev_verbs_common.cuh",
    "gpunetio/device/doca_gpunetio_dev_verbs_counter.cuh",
    "gpunetio/device/doca_gpunetio_dev_verbs_cq.cuh",
    "gpunetio/device/doca_gpunetio_dev_verbs_onesided.cuh",
    "gpunetio/device/doca_gpunetio_dev_verbs_qp.cuh",
    "gpunetio/doca_gpunetio_config.h",
    "gpunetio/doca_gpunetio_device.h",
    "gpunetio/doca_gpunetio_host.h",
    "gpunetio/host/doca_error.h",
    "gpunetio/host/doca_gpunetio.h",
    "gpunetio/host/doca_gpunetio_high_level.h",
    "gpunetio/host/doca_verbs.h",
    "gpunetio/host/mlx5_ifc.h",
    "gpunetio/host/mlx5_prm.h",
    "host/nvshmem_api.h",
    "host/nvshmem_coll_api.h",
    "host/nvshmem_macros.h",
    "host/nvshmemx_api.h",
    "host/nvshmemx_coll_api.h",
    "non_abi/device/coll/alltoall.cuh",
    "non_abi/device/coll/barrier.cuh",
    "non_abi/device/coll/broadcast.cuh",
    "non_abi/device/coll/defines.cuh",
    "non_abi/device/coll/fcollect.cuh",
    "non_abi/device/coll/reduce.cuh",
    "non_abi/device/coll/reducescatter.cuh",
    "non_abi/device/coll/utils.cuh",
    "non_abi/device/common/nvshmemi_batch_rma_pending_qps.cuh",
    "non_abi/device/common/nvshmemi_common_device.cuh",
    "non_abi/device/common/nvshmemi_path_predicates.cuh",
    "non_abi/device/common/nvshmemi_region_device.cuh",
    "non_abi/device/common/nvshmemi_region_state.cuh",
    "non_abi/device/common/nvshmemi_tile_utils.cuh",
    "non_abi/device/pt-to-pt/counted_device.cuh",
    "non_abi/device/pt-to-pt/gdaki_device.cuh",
    "non_abi/device/pt-to-pt/ibgda_device.cuh",
    "non_abi/device/pt-to-pt/nvshmemi_transfer_api.cuh",
    "non_abi/device/pt-to-pt/proxy_device.cuh",
    "non_abi/device/pt-to-pt/tma_device.cuh",
    "non_abi/device/pt-to-pt/transfer_device.cuh",
    "non_abi/device/pt-to-pt/utils_device.h",
    "non_abi/device/team/nvshmemi_team_defines.cuh",
    "non_abi/device/threadgroup/nvshmemi_common_device_defines.cuh",
    "non_abi/device/wait/nvshmemi_wait_until_apis.cuh",
    "non_abi/nvshmem_build_options.h",
    "non_abi/nvshmem_version.h",
    "non_abi/nvshmemi_cccl_compat.h",
    "non_abi/nvshmemi_region_constants.h",
    "non_abi/nvshmemi_region_types.h",
    "non_abi/nvshmemx_error.h",
    "nvshmem.h",
    "nvshmem_host.h",
)
MARKER = "nvshmem.h"
IBGDA_DEVICE = "non_abi/device/pt-to-pt/ibgda_device.cuh"
IBGDA_STATE = "device_host_transport/nvshmem_common_ibgda.h"
ENV_DIR = "GICBENCH_NVSHMEM_DIR"
DEFAULT_ROOT = Path(".cache") / "nvshmem"
NOTICES = (
    "SPDX-License-Identifier: Apache-2.0",
    "SPDX-License-Identifier: BSD-3-Clause",
    "See License.txt for license information",
)
_VER = re.compile(r"#define NVSHMEM_VENDOR_(MAJOR|MINOR|PATCH)_VERSION (\d+)")
_DOCA_VER = re.compile(r"#define DOCA_GPUNETIO_VERSION_(MAJOR|MINOR|PATCH) (\d+)")


@dataclass(frozen=True)
class Nvshmem:
    """A usable header set: `include` is the directory to pass as -I (it holds nvshmem.h);
    the versions are recorded in traces."""

    include: Path
    wheel_version: str
    nvshmem_version: str
    source: str  # "env", "installed wheel" or "cache"


def _version(path: Path, pattern: re.Pattern[str], what: str) -> str:
    parts = dict(pattern.findall(path.read_text()))
    if set(parts) != {"MAJOR", "MINOR", "PATCH"}:
        raise ValueError(f"{path}: no {what} MAJOR/MINOR/PATCH defines")
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"


def nvshmem_version(include: Path) -> str:
    """NVSHMEM's own version, from non_abi/nvshmem_version.h."""
    return _version(include / "non_abi" / "nvshmem_version.h", _VER, "NVSHMEM_VENDOR_*_VERSION")


def doca_version(include: Path) -> str:
    """The DOCA GPUNetIO version of the gpunetio/ headers in the closure."""
    path = include / "gpunetio" / "common" / "doca_gpunetio_verbs_def.h"
    return _version(path, _DOCA_VER, "DOCA_GPUNETIO_VERSION_*")


SPEC = vendor_wheel.HeaderSet(
    label="NVSHMEM",
    module="gicbench.submit.nvshmem.headers",
    prefix=PREFIX,
    headers=HEADERS,
    marker=MARKER,
    env_dir=ENV_DIR,
    default_root=DEFAULT_ROOT,
    notices=NOTICES,
    versions=(("nvshmem", nvshmem_version), ("doca", doca_version)),
    count_notices=True,
)


def missing(include: Path) -> list[str]:
    return vendor_wheel.missing(SPEC, include)


def _installed_include() -> tuple[Path, str] | None:
    return vendor_wheel.installed_include(SPEC)


def _candidates() -> list[tuple[Path, str, str]]:
    return vendor_wheel.candidates(SPEC, _installed_include)


def find() -> Nvshmem | None:
    """The first complete header set ($GICBENCH_NVSHMEM_DIR, ./.cache/nvshmem/*, the installed
    wheel), or None (see unavailable_reason())."""
    hit = vendor_wheel.first_complete(SPEC, _candidates())
    if hit is None:
        return None
    inc, ver, src = hit
    return Nvshmem(inc, ver, nvshmem_version(inc), src)


def unavailable_reason() -> str:
    """Why find() returned None, naming what was looked at and how to fix it."""
    return vendor_wheel.unavailable_reason(SPEC, _candidates())


def offline_reason(root: Path = DEFAULT_ROOT) -> str | None:
    return vendor_wheel.offline_reason(root)


def network_absent() -> str | None:
    return vendor_wheel.network_absent()


def _download(tmp: Path) -> Path:
    return vendor_wheel.download(tmp)


def extract(wheel: Path, root: Path) -> Path:
    return vendor_wheel.extract(SPEC, wheel, root)


def fetch(root: Path = DEFAULT_ROOT, wheel: Path | None = None) -> Path:
    """Headers into root/<version>/ from `wheel` or a pip download of the pinned version;
    already there: nothing is downloaded."""
    return vendor_wheel.fetch(SPEC, root, wheel, lambda tmp: _download(tmp))


def main(argv: list[str] | None = None) -> int:
    return vendor_wheel.main(SPEC, argv, do_fetch=fetch, find=find, reason=unavailable_reason,
                             offline=network_absent)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
