"""Fabric providers (emu, verbs, mlx5) behind one interface (base.py), found by name through
the registry (registry.py)."""

from __future__ import annotations

from typing import Any

from .base import Fabric


def make_fabric(name: str, **kwargs: Any) -> Fabric:
    """An emu NIC built directly (tests and benchmarks); runs go through the registry."""
    if name == "emu":
        from .emu import EmuFabric

        return EmuFabric(**kwargs)
    from .registry import get

    get(name)  # refuses unknown names with the allowed ones
    raise ValueError(f"make_fabric builds emu only; open {name!r} through fabric.registry")


__all__ = ["Fabric", "make_fabric"]
