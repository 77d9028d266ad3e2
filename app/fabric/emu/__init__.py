"""emu: the emulated NIC (software mlx5 over POSIX shared memory), the embedded default provider."""

from .fabric import DEFAULT_SEGMENT_BYTES, PROGRESS_MODES, EmuErrorRecord, EmuFabric
from .janitor import janitor, segment_name
from .memory import host_view

__all__ = [
    "DEFAULT_SEGMENT_BYTES",
    "PROGRESS_MODES",
    "EmuErrorRecord",
    "EmuFabric",
    "host_view",
    "janitor",
    "segment_name",
]
