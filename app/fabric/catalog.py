"""Which fabric providers exist and whether each can run on this machine (for doctor and run)."""

from __future__ import annotations

from ..platform import Probe
from .base import ProviderCaps


def provider_caps(probes: dict[str, Probe]) -> list[ProviderCaps]:
    shm = probes["shm"]
    try:
        from .. import _native  # noqa: F401

        native, why = True, ""
    except ImportError as e:
        native, why = False, f"native module missing ({e}); run `make setup`"
    emu = ProviderCaps(
        "emu",
        native and shm.ok,
        why or ("" if shm.ok else shm.detail),
        multi_node=False,
        dc=True,
        details={"what": "software mlx5 NIC over POSIX shared memory; one node"},
    )
    from .verbs.provider import caps as verbs_caps

    verbs = verbs_caps(probes)
    if verbs.available:  # the provider works here; `gicbench run` does not open it yet
        verbs.available = False
        verbs.reason = (
            f"device ready ({verbs.details.get('selected')}); not yet wired into `gicbench run` "
            "(app/bootstrap opens emu only)"
        )
    mlx5 = ProviderCaps(
        "mlx5",
        False,
        "not implemented in this release (planned: DevX QPs/CQs, DC, GPU-mapped UAR)"
        if probes["rdma"].ok
        else "needs a ConnectX device with DevX: " + probes["rdma"].detail,
        multi_node=True,
        dc=True,
        gpu_queues=True,
    )
    return [emu, verbs, mlx5]


def submitter_caps(probes: dict[str, Probe]) -> list[ProviderCaps]:
    host = ProviderCaps("host", True, "", details={"what": "native C++ loops post WQEs, poll CQEs"})
    gpu_ok = probes["cupy"].ok
    gpu = ProviderCaps(
        "gpu",
        False,
        "not implemented in this release (planned: mini-gda kernels from cuda/)"
        if gpu_ok
        else "needs CuPy and an NVIDIA GPU: " + probes["cupy"].detail,
        gpu_queues=True,
    )
    proxy = ProviderCaps("proxy", False, "not implemented in this release (planned: mini-proxy)")
    return [host, proxy, gpu]
