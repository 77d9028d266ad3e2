"""Where the GPU reaches each queue and buffer: device addresses only (every GPU submitter).

Two sources, in this order: the objects' own device fields (`SendQueue.device_buf`, ...,
`MemoryRegion.device_addr`: a provider that hands out GPU-reachable objects, such as a CUDA engine
with GPU-resident queues, fills them), else the emulated NIC's `register_cuda()`, which maps the
queue arena and every "host-mapped" memory region of its shared-memory segment into the GPU.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from ...errors import UnsupportedError
from ...fabric.base import CompletionQueue, Fabric, SendQueue, host_view


@dataclass
class DeviceMap:
    qps: dict[int, dict[str, int]] = field(default_factory=dict)
    cqs: dict[int, dict[str, int]] = field(default_factory=dict)
    mr_starts: list[int] = field(default_factory=list)  # sorted host addresses
    mr_dev: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, fabric: Fabric) -> DeviceMap:
        m = cls()
        reg = getattr(fabric, "register_cuda", None)
        if reg is not None:
            info: dict[str, Any] = reg()
            m.qps = {int(k): dict(v) for k, v in info["qps"].items()}
            m.cqs = {int(k): dict(v) for k, v in info["cqs"].items()}
            for host in sorted(info["mrs"]):
                m.mr_starts.append(int(host))
                m.mr_dev.append(int(info["mrs"][host]))
        return m

    def sq(self, sq: SendQueue) -> tuple[int, int, int]:
        if sq.device_buf and sq.device_dbrec and sq.device_doorbell:
            return sq.device_buf, sq.device_dbrec, sq.device_doorbell
        d = self.qps.get(sq.qpn)
        if d is None:
            raise UnsupportedError(
                f"QP {sq.qpn:#x} is not reachable from the GPU (no device addresses): the GPU "
                "submitter needs queues in GPU memory or host memory mapped into the GPU"
            )
        return d["buf"], d["dbrec"], d["doorbell"]

    def cq(self, cq: CompletionQueue) -> tuple[int, int]:
        if cq.device_buf and cq.device_dbrec:
            return cq.device_buf, cq.device_dbrec
        d = self.cqs.get(cq.cqn)
        if d is None:
            raise UnsupportedError(f"CQ {cq.cqn:#x} is not reachable from the GPU")
        return d["buf"], d["dbrec"]

    def local(self, addr: int, what: str) -> int:
        """The device address of a local buffer address (in a host-mapped region)."""
        i = bisect.bisect_right(self.mr_starts, addr) - 1
        if i < 0:
            raise UnsupportedError(
                f"{what} at {addr:#x} is not in a memory region mapped into the GPU (register "
                "it with domain='host-mapped' before the submitter starts)"
            )
        return self.mr_dev[i] + (addr - self.mr_starts[i])


def stage(cp: Any, bufs: list[Any]) -> tuple[Any, list[int]]:
    """Device copies of host source slices (Buffers), back to back in one GPU allocation: a
    kernel that reads payload bytes itself (inline payloads) reads GPU memory, not host memory
    across PCIe. Returns (the allocation, to keep alive while kernels run; each slice's address)."""
    total = sum(b.length for b in bufs)
    dev = cp.empty(max(total, 8), dtype=cp.uint8)
    ptrs, off = [], 0
    for b in bufs:
        dev[off : off + b.length].set(host_view(b.addr, b.length))
        ptrs.append(int(dev.data.ptr) + off)
        off += b.length
    return dev, ptrs
