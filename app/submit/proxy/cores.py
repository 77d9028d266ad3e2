"""Where proxy workers run: cores near the GPU/NIC (the device's NUMA node, from sysfs), else the
rank's CPU set; ranks on one node take different cores when there are enough."""

from __future__ import annotations

import os
from pathlib import Path


def _cpulist(text: str) -> list[int]:
    out: list[int] = []
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def near_device(pci_bus_id: str | None) -> list[int]:
    """CPUs local to a PCI device (its local_cpulist), or [] when unknown."""
    if not pci_bus_id:
        return []
    path = Path("/sys/bus/pci/devices") / pci_bus_id.lower() / "local_cpulist"
    try:
        return _cpulist(path.read_text())
    except (OSError, ValueError):
        return []


def default_cores(workers: int, local_rank: int, pci_bus_id: str | None = None) -> list[int]:
    """`workers` cores for this rank's workers: near the device when known, within the rank's
    CPU set; local rank r takes the r-th group of `workers` when the set is large enough."""
    mine = sorted(os.sched_getaffinity(0))
    near = [c for c in near_device(pci_bus_id) if c in mine] or mine
    start = (local_rank * workers) % len(near)
    return [near[(start + w) % len(near)] for w in range(workers)]
