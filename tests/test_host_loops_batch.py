"""msg-rate batches are counted in 64-byte WQEBBs, not WQEs (an inline or DC batch counted in
WQEs overran the SQ).

Inline and DC writes take several WQEBBs, so a batch of WQEs that fits an SQ by count may not
fit by size: the loop waited forever for room that could never come, then reported a misleading
completion timeout. The native loop now refuses such a batch before posting anything, naming the
batch, the WQEBBs per WQE and the SQ size, and every batch it accepts completes, up to a batch
that fills the whole SQ (its reclamation is planned so that every wait for room is finite).
"""

from __future__ import annotations

import numpy as np
import pytest
from host_world import SIZE, emu_world

from gicbench import _native, mlx5
from gicbench.errors import ConfigError
from gicbench.submit.host import max_batch, write_wqebbs


def twin_wqebbs(payload: str, size: int, av: np.ndarray | None) -> int:
    """WQEBBs the numpy SqRing twin writes for the same write (raises ValueError beyond ds 63)."""
    ring = mlx5.SqRing(np.zeros(64 * 64, np.uint8), 64)
    if payload == "inline":
        return ring.post_write(0, 0x11, 0x1000, 7, payload=bytes(size), av=av)
    return ring.post_write(0, 0x11, 0x1000, 7, lkey=3, addr=0x2000, length=size, av=av)


@pytest.mark.parametrize("transport", ["rc", "dc", "dc-compact"])
@pytest.mark.parametrize("payload", ["inline", "pointer"])
def test_write_wqebbs_agrees_with_the_numpy_twin(payload, transport) -> None:
    av = {
        "rc": None,
        "dc": mlx5.av_full(0xABC, 0x12),
        "dc-compact": mlx5.av_compact(0xABC, 0x12),
    }[transport]
    dc, compact = transport != "rc", transport == "dc-compact"
    for size in [*range(1, 1100), 4096, 1 << 20]:
        try:
            want = twin_wqebbs(payload, size, av)
        except ValueError:
            with pytest.raises(ValueError, match="does not fit one WQE"):
                _native.host.write_wqebbs(payload == "inline", size, dc, compact)
            continue
        assert _native.host.write_wqebbs(payload == "inline", size, dc, compact) == want, size


def msg_params(batch: int, size: int, payload: str = "inline", threads: int = 1) -> dict:
    return {
        "size": size,
        "payload": payload,
        "threads": threads,
        "batch": batch,
        "messages_per_thread": 1500,
        "warmup_per_thread": 10,
        "window": 75,
    }


# The cases of the issue (SQ of 256 WQEBBs): accepted, then a deadlock and a timeout before.
OVERFLOWING = [
    ("rc", 32, 512, 9),
    ("rc", 100, 256, 5),
    ("dc", 128, 64, 3),
]


@pytest.mark.parametrize(("transport", "batch", "size", "bbs"), OVERFLOWING)
def test_a_batch_larger_than_the_sq_is_refused_before_posting(transport, batch, size, bbs) -> None:
    with emu_world(nqps=1, depth=256, dcis=1) as w:
        lanes = w.dc_lanes(1) if transport == "dc" else w.lanes(1)
        before = w.fabrics[0].counters()["wqes"]
        with pytest.raises(ConfigError) as e:
            w.subs[0].msg_rate(lanes, msg_params(batch, size))
        msg = str(e.value)
        assert e.value.field == "batch" and e.value.value == batch
        assert f"at most {256 // bbs} WQEs per doorbell" in msg
        assert f"takes {bbs} WQEBBs" in msg and "the SQ holds 256" in msg
        assert f"QP 0x{lanes[0].qp.qpn:06x}" in e.value.__notes__[0]  # which lane, as a note
        assert w.fabrics[0].counters()["wqes"] == before  # refused before anything was posted
        assert write_wqebbs("inline", size, transport) == bbs
        assert max_batch(256, "inline", size, transport) == 256 // bbs


# Batches at and just under the limit, where reclamation must still make room every time.
BOUNDARY = [
    ("rc", "inline", 64, 2, 32),  # 2 WQEBBs x 32 = the whole 64-WQEBB SQ
    ("rc", "inline", 64, 2, 31),
    ("rc", "pointer", 64, 1, 64),  # every WQE signaled
    ("rc", "inline", 200, 4, 16),
    ("dc", "inline", 64, 3, 21),  # 63 of 64 WQEBBs
    ("dc", "pointer", 32, 2, 32),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("transport", "payload", "size", "bbs", "batch"), BOUNDARY)
def test_every_accepted_batch_completes(transport, payload, size, bbs, batch, threads) -> None:
    with emu_world(nqps=2, depth=64, dcis=2) as w:
        assert write_wqebbs(payload, size, transport) == bbs
        assert max_batch(64, payload, size, transport) >= batch
        lanes = w.dc_lanes(2) if transport == "dc" else w.lanes(2)
        src = w.src()
        src[:] = np.random.default_rng(batch).integers(0, 256, SIZE, dtype=np.uint8)
        w.landing()[:] = 0
        before = w.fabrics[0].counters()["wqes"]
        windows, stats = w.subs[0].msg_rate(lanes, msg_params(batch, size, payload, threads))
        w.fabrics[0].check()
        assert stats["messages"] == threads * 1500
        assert w.fabrics[0].counters()["wqes"] - before == threads * 1510
        assert stats["doorbells"] == threads * -(-1510 // batch)
        assert windows.size == threads * 20
        span = SIZE // size * size
        assert np.array_equal(w.landing()[:span], src[:span])
        # one more WQE per doorbell than the SQ holds is refused
        with pytest.raises(ConfigError):
            w.subs[0].msg_rate(lanes, msg_params(64 // bbs + 1, size, payload, threads))


@pytest.mark.parametrize(
    ("change", "field", "allowed", "note"),
    [
        ({"threads": 3}, "threads", "1..2 (one thread owns one or more lanes)", "3 with 2 lanes"),
        ({"threads": 0}, "threads", "1..2 (one thread owns", "threads=0 with 2 lanes"),
        ({"size": SIZE + 1}, "size", "1..4096 (the lane's regions)", "regions of 4096"),
        ({"payload": "inline", "size": 1000}, "size", "fits one WQE", "does not fit one WQE"),
        ({"messages_per_thread": 0}, "messages_per_thread", "at least 1", "=0, window=50"),
    ],
)
def test_bad_arguments_carry_a_message(change, field, allowed, note) -> None:
    with emu_world(nqps=2) as w:
        p = {**msg_params(4, 64, "pointer"), **change}
        p["window"] = 50
        with pytest.raises(ConfigError) as e:
            w.subs[0].msg_rate(w.lanes(2), p)
        assert e.value.field == field and e.value.value == p[field]
        assert allowed in str(e.value) and note in e.value.__notes__[0]


def test_no_accepted_batch_deadlocks_on_a_small_sq() -> None:
    # Every batch from 1 to the limit, for WQEs of 1 to 16 WQEBBs, two lanes on one thread and a
    # message count that leaves a partial last batch: a wait for room that could never end would
    # be a CompletionTimeout here.
    cases = [
        ("rc", "pointer", 64),  # 1 WQEBB
        ("rc", "inline", 64),  # 2
        ("dc", "inline", 64),  # 3
        ("rc", "inline", 200),  # 4
        ("dc", "inline", 200),  # 5
        ("rc", "inline", 960),  # 16
    ]
    with emu_world(nqps=2, depth=64, dcis=2) as w:
        for transport, payload, size in cases:
            lanes = w.dc_lanes(2) if transport == "dc" else w.lanes(2)
            top = max_batch(64, payload, size, transport)
            for batch in range(1, top + 1):
                n = 4 * batch + 7
                p = {**msg_params(batch, size, payload), "messages_per_thread": n, "window": n}
                _, stats = w.subs[0].msg_rate(lanes, p)
                assert stats["messages"] == n, (transport, payload, size, batch)
            with pytest.raises(ConfigError):
                w.subs[0].msg_rate(lanes, msg_params(top + 1, size, payload))
        w.fabrics[0].check()
