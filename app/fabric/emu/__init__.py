"""emu: the emulated NIC (software mlx5 over POSIX shared memory), the embedded default provider."""

from ..base import host_view
from .fabric import DEFAULT_SEGMENT_BYTES, PROGRESS_MODES, EmuErrorRecord, EmuFabric
from .gpi import GpiQueue, GpiWindow
from .janitor import janitor, segment_name
from .sizing import segment_bytes_for

__all__ = [
    "DEFAULT_SEGMENT_BYTES",
    "PROGRESS_MODES",
    "EmuErrorRecord",
    "EmuFabric",
    "GpiQueue",
    "GpiWindow",
    "host_view",
    "janitor",
    "segment_bytes_for",
    "segment_name",
]
