"""SM clock control (the clock-control shape, for the clock sweep): lock the graphics clock with
`nvidia-smi -lgc f,f`, always restore it with `nvidia-smi -rgc` (on success, failure, signal and
at exit), and the tolerance within which the clock measured in a kernel must match the lock."""

from __future__ import annotations

import atexit
import contextlib
import shutil
import subprocess
from collections.abc import Iterator

from ...errors import FabricError, UnsupportedError

TOLERANCE = 0.10  # measured clock within 10% of the locked one, else the lock did not hold
_LOCKED: set[str] = set()  # GPUs (PCI bus ids) this process has locked and not yet restored


def nvidia_smi() -> str:
    path = shutil.which("nvidia-smi")
    if path is None:
        raise UnsupportedError("the clock sweep needs nvidia-smi (to lock the SM clock): not found")
    return path


def _smi(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([nvidia_smi(), *args], capture_output=True, text=True, timeout=30)


def lock(gpu: str, mhz: int) -> None:
    _LOCKED.add(gpu)
    r = _smi("-i", gpu, "-lgc", f"{mhz},{mhz}")
    if r.returncode != 0:
        raise FabricError(
            f"nvidia-smi -i {gpu} -lgc {mhz},{mhz} failed ({r.returncode}): "
            f"{(r.stderr or r.stdout).strip()} (locking clocks needs root)"
        )


def restore(gpu: str) -> None:
    """Give the GPU its default clocks back (idempotent)."""
    r = _smi("-i", gpu, "-rgc")
    _LOCKED.discard(gpu)
    if r.returncode != 0:
        raise FabricError(f"nvidia-smi -i {gpu} -rgc failed: {(r.stderr or r.stdout).strip()}")


@atexit.register
def _restore_all() -> None:
    for gpu in list(_LOCKED):
        with contextlib.suppress(Exception):
            restore(gpu)


@contextlib.contextmanager
def locked(gpu: str, mhz: int) -> Iterator[None]:
    """The SM clock of `gpu` locked at `mhz` inside the block, restored however it ends (an
    exception the harness raises on SIGTERM/SIGINT included)."""
    try:
        lock(gpu, mhz)
        yield
    finally:
        restore(gpu)


def check_measured(mhz: int, measured_hz: float) -> None:
    if not abs(measured_hz / 1e6 - mhz) <= TOLERANCE * mhz:
        raise FabricError(
            f"SM clock locked at {mhz} MHz but measured {measured_hz / 1e6:.0f} MHz in a kernel "
            f"(clock64 over globaltimer): the lock did not hold (a clock the GPU does not "
            "support, or a power/thermal cap)"
        )
