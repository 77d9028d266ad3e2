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
    verbs_reason = (
        "not implemented in this release (planned: pyverbs RC, Soft-RoCE tested)"
        if probes["pyverbs"].ok and probes["rdma"].ok
        else "needs pyverbs and an RDMA device: "
        + "; ".join(p.detail for p in (probes["pyverbs"], probes["rdma"]) if not p.ok)
    )
    verbs = ProviderCaps("verbs", False, verbs_reason, multi_node=True)
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
