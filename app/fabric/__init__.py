"""Fabric providers: emu (software NIC), verbs, mlx5. `make_fabric` builds one by name."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from .base import Fabric

PROVIDERS = ("emu",)


def make_fabric(name: str, **kwargs: Any) -> Fabric:
    """The provider `name` for one rank; kwargs go to its constructor."""
    if name == "emu":
        from .emu import EmuFabric

        return EmuFabric(**kwargs)
    raise ConfigError("provider", name, " or ".join(PROVIDERS))


__all__ = ["PROVIDERS", "Fabric", "make_fabric"]
