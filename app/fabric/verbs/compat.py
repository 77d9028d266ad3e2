"""pyverbs across rdma-core versions: one place that imports it and its enums.

rdma-core <= 58 (Debian bookworm ships 44) exposes the verbs enums as `pyverbs.enums`; 59+
moved them to `pyverbs.libibverbs_enums`. Everything in this provider reads enums through
`enums()`. pyverbs is not on PyPI: `make setup` links the distribution's package (Debian's
python3-pyverbs) into the venv (see the Makefile's pyverbs rule).
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType

from ...errors import UnsupportedError

ENUM_MODULES = ("pyverbs.libibverbs_enums", "pyverbs.enums")  # 59+ first, then <= 58


@functools.cache
def enums() -> ModuleType:
    """The module holding IBV_* enums, whichever rdma-core style this pyverbs uses."""
    errors = []
    for name in ENUM_MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError as e:
            errors.append(f"{name}: {e}")
            continue
        if hasattr(mod, "IBV_WR_RDMA_WRITE"):
            return mod
        errors.append(f"{name}: has no IBV_WR_RDMA_WRITE")
    raise UnsupportedError(
        "pyverbs is not importable (" + "; ".join(errors) + "). Install rdma-core's "
        "python3-pyverbs (apt-get install python3-pyverbs) and run `make setup`, which links it "
        "into .venv"
    )


def pyverbs_version() -> str:
    """pyverbs' own version string where it has one, else 'unknown'."""
    try:
        mod = importlib.import_module("pyverbs")
    except ImportError:
        return "absent"
    return str(getattr(mod, "__version__", "unknown"))


def enum_style() -> str:
    """'libibverbs_enums' (rdma-core 59+) or 'enums' (<= 58)."""
    return enums().__name__.rsplit(".", 1)[-1]
