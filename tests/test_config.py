"""RunConfig validation (the Python API gets the same errors as the command line)."""

from __future__ import annotations

import pytest

from gicbench.config import ORDERINGS, RunConfig, parse_size, size_sweep
from gicbench.errors import ConfigError


def test_defaults_are_valid() -> None:
    cfg = RunConfig()
    assert cfg.sizes == [8]
    assert cfg.to_dict()["experiments"] == ["single-op"]


def test_size_sweep_and_parsing() -> None:
    assert size_sweep(8, 64, 2) == [8, 16, 32, 64]
    assert size_sweep(8, 100, 4) == [8, 32]
    assert [parse_size(s) for s in ("8", "4K", "4k", "1M", "2G", "16KiB")] == [
        8,
        4096,
        4096,
        1 << 20,
        2 << 30,
        16384,
    ]
    assert RunConfig(payload="pointer", min_size=8, max_size=1 << 20, size_factor=4).sizes[-1] == (
        1 << 19
    )
    assert RunConfig(payload="pointer", max_size=1 << 20).sizes[-1] == (1 << 20)


def test_seven_orderings_of_table_4() -> None:
    assert len(ORDERINGS) == 7
    for o in ORDERINGS:
        RunConfig(ordering=o)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"qps": 0}, "qps (-q)"),
        ({"threads": 0}, "threads (-t)"),
        ({"sq_depth": 100}, "sq_depth"),
        ({"batch": 200, "sq_depth": 256}, "batch"),
        ({"timeout_s": -1}, "timeout_s"),
        ({"timeout_s": float("nan")}, "timeout_s"),
        ({"json": True, "csv": True}, "output"),
        ({"experiments": []}, "experiment"),
        ({"iters": True}, "iters (-n)"),
        ({"scope": "pe"}, "scope"),
        ({"progress": "poll"}, "progress"),
    ],
)
def test_each_field_is_checked(kwargs, field) -> None:
    with pytest.raises(ConfigError) as e:
        RunConfig(**kwargs)
    assert e.value.field == field
    assert field in str(e.value) and "allowed" in str(e.value)


def test_qps_raise_bring_up_counts() -> None:
    assert RunConfig(qps=8).qps_per_peer == 8
    assert RunConfig(qps=4, transport="dc").dcis == 4
