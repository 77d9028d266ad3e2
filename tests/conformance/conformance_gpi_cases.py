"""Conformance cases of the GPI queues (docs/gpi.md): descriptors, torn descriptors, ring laps,
credits, per-descriptor errors, GPI-MC fan-out and the gpi_* counters.

Rank 0 owns GPI queue "g" and the source "src"; the other ranks own the destinations ("dst",
"dst2") and signal words ("sig", "sig2"). Windows: 0 the source, 1 the destinations, 2 the
signals (the same handle at every rank).

gpi_torn_waits is checked only where it is the same on a threaded engine: a producer writes a
descriptor segment by segment, so an engine polling meanwhile may well count a torn wait for a
descriptor posted whole (and must then wait for it, which the cases check).
"""

from __future__ import annotations

import dataclasses
import struct

from conformance_cases import SRC, u64
from conformance_model import (
    Case,
    CheckNow,
    ErrSpec,
    Expect,
    Gpi,
    GpiComplete,
    GpiExpect,
    GpiPost,
    GpiWin,
    Mr,
)

from gicbench.fabric.base import ACCESS_ALL, Access
from gicbench.fabric.emu import gpi_format as gf
from gicbench.mlx5 import Syndrome

NO_ATOMIC = ACCESS_ALL & ~Access.REMOTE_ATOMIC
WINDOWS = (GpiWin(0, "src"), GpiWin(1, "dst"), GpiWin(2, "sig"))
QUIET = {"wqes": 0, "doorbells": 0, "errors": 0}  # the WQE path is not involved


def i32(v: int) -> bytes:
    return struct.pack("<i", v)


def i64(v: int) -> bytes:
    return struct.pack("<q", v)


def world(n: int = 2, *, depth: int = 8, ncounters: int = 2, windows=WINDOWS, sig_access=ACCESS_ALL,
          extra_mrs: tuple[Mr, ...] = ()) -> dict:  # fmt: skip
    """Queue g on rank 0 (src there), dst and sig on rank 1."""
    mrs = (Mr("src", 0, init=SRC), Mr("dst", 1), Mr("sig", 1, access=sig_access), *extra_mrs)
    return {
        "world": n,
        "mrs": mrs,
        "cqs": (),
        "qps": (),
        "gpis": (Gpi("g", 0, depth=depth, ncounters=ncounters, windows=windows),),
    }


def wr(off: int, n: int = 8, *, src_off: int = 0, counter: int = 0, rank: int = 1,
       signal: tuple[int, int] | None = None, signal32: bool = False) -> gf.GpiDesc:  # fmt: skip
    """WRITE (WRITE_SIGNAL with signal = (offset, value)) of n source bytes to dst+off."""
    sig = None if signal is None else (2, signal[0], signal[1])
    return gf.write(
        counter=counter,
        size=n,
        dst_rank=rank,
        src=(0, src_off),
        dst=(1, off),
        signal=sig,
        signal32=signal32,
    )


def gpi_err(synd: Syndrome, index: int) -> ErrSpec:
    return ErrSpec("gpi_error", "g", expected=synd, found=index)


def failing(name: str, desc: gf.GpiDesc, synd: Syndrome, dest: int = 0, *, counter_ok: bool = True,
            **setup: object) -> Case:  # fmt: skip
    """One bad descriptor, then a good write: the error is reported on the first (its counter's
    flag, errors, last_error, a record), nothing of it lands, and the second still runs."""
    kw = {**world(), **setup}
    flag = counter_ok  # a counter id out of range flags no counter
    return Case(
        name,
        **kw,
        steps=(GpiPost("g", desc), GpiPost("g", wr(512, 8, counter=1))),
        expect=Expect(
            memory=(("dst", 0, bytes(512) + SRC[:8]), ("sig", 0, bytes(64))),
            gpi={"g": GpiExpect(2, 1, (0, synd, dest), ((0, flag), (1, False)))},
            counters={0: {"gpi_descriptors": 1, "gpi_errors": 1, "gpi_writes": 1, **QUIET}},
            errors={0: (gpi_err(synd, 0),)},
        ),
    )


FAN4 = gf.fanout(
    counter=1,
    size=16,
    src=(0, 32),
    dst_win=1,
    stride=256,
    sig_win=2,
    sig_base=4,
    value=1,
    dests=[gf.Dest(1, 0, 0), gf.Dest(2, 1, 1), gf.Dest(1, 3, 2), gf.Dest(2, 2, 3)],
)
FAN_WINDOWS = (
    GpiWin(0, "src"),
    GpiWin(1, "dst"),
    GpiWin(1, "dst2"),
    GpiWin(2, "sig"),
    GpiWin(2, "sig2"),
)
FAN_MRS = (Mr("dst2", 2), Mr("sig2", 2))

GPI_CASES: list[Case] = [
    # ---- one destination -----------------------------------------------------------------------
    Case(
        "gpi_write_then_signal",
        **world(),
        steps=(GpiPost("g", wr(16, 8, src_off=4, counter=1, signal=(8, 5))),),
        expect=Expect(
            memory=(("dst", 0, bytes(16) + SRC[4:12] + bytes(8)), ("sig", 0, u64(0) + u64(5))),
            gpi={"g": GpiExpect(1, 0, None, ((0, False), (1, False)))},
            counters={
                0: {
                    "gpi_descriptors": 1,
                    "gpi_writes": 1,
                    "gpi_signals": 1,
                    "gpi_bytes": 8,
                    "gpi_errors": 0,
                    **QUIET,
                },
                1: {"gpi_descriptors": 0},  # the destination's engine does nothing
            },
        ),
    ),
    Case(
        "gpi_every_op",  # WRITE, WRITE_INLINE, a 4-byte SIGNAL of -5 (DeepEP's count), NOP
        **world(),
        steps=(
            GpiPost("g", wr(0, 64)),
            GpiPost(
                "g",
                gf.write_inline(
                    counter=0, data=b"hello", dst_rank=1, dst=(1, 64), signal=(2, 16, 2)
                ),
            ),
            GpiPost(
                "g", gf.signal(counter=0, dst_rank=1, window=2, offset=4, value=-5, signal32=True)
            ),
            GpiPost("g", gf.nop(counter=1)),
        ),
        expect=Expect(
            memory=(
                ("dst", 0, SRC + b"hello" + bytes(3)),
                ("sig", 0, i32(0) + i32(-5) + u64(0) + u64(2)),
            ),
            gpi={"g": GpiExpect(4, 0, None, ((3, False), (1, False)))},
            counters={
                0: {"gpi_descriptors": 4, "gpi_writes": 2, "gpi_signals": 2, "gpi_bytes": 69}
            },
        ),
    ),
    # ---- owner bits: torn descriptors, laps ----------------------------------------------------
    Case(
        "gpi_torn_descriptor_waits_until_complete",
        **world(),
        steps=(
            GpiPost("g", wr(0, 8, signal=(0, 1)), segments=(0, 1, 2, 3, 5, 6)),
            CheckNow(
                memory=(("dst", 0, bytes(8)), ("sig", 0, u64(0))),
                gpi={"g": GpiExpect(0, 0, None, ((0, False), (0, False)))},
            ),
            GpiPost("g", wr(8, 8)),  # behind the torn one: waits too
            CheckNow(gpi={"g": GpiExpect(0)}),
            GpiComplete("g"),
        ),
        expect=Expect(
            memory=(("dst", 0, SRC[:8] * 2), ("sig", 0, u64(1))),
            gpi={"g": GpiExpect(2, 0, None, ((2, False), (0, False)))},
            counters={0: {"gpi_torn_waits": 1, "gpi_descriptors": 2, "gpi_errors": 0}},
        ),
    ),
    Case(
        "gpi_torn_over_the_previous_lap",  # old lap's owner bits on the segments not yet written
        **world(depth=2),
        steps=(
            GpiPost("g", wr(0, 8)),
            GpiPost("g", wr(8, 8)),
            CheckNow(gpi={"g": GpiExpect(2)}),
            GpiPost("g", wr(16, 8, src_off=8), segments=(0, 1, 2, 3, 4)),  # index 2: slot 0
            CheckNow(memory=(("dst", 0, SRC[:8] * 2 + bytes(8)),), gpi={"g": GpiExpect(2)}),
            GpiComplete("g"),
        ),
        expect=Expect(
            memory=(("dst", 0, SRC[:8] * 2 + SRC[8:16]),),
            gpi={"g": GpiExpect(3, 0, None, ((3, False), (0, False)))},
            counters={0: {"gpi_descriptors": 3}},
        ),
    ),
    Case(
        "gpi_ring_wraps_many_laps",  # depth 4, 5 laps: the owner bit flips every lap
        **world(depth=4),
        steps=tuple(GpiPost("g", wr(8 * i, 8, src_off=i)) for i in range(20)),
        expect=Expect(
            memory=(("dst", 0, b"".join(SRC[i : i + 8] for i in range(20))),),
            gpi={"g": GpiExpect(20, 0, None, ((20, False), (0, False)))},
            counters={0: {"gpi_descriptors": 20}},
        ),
    ),
    Case(
        "gpi_credits_ci_returns_every_slot",  # a producer fills the ring, waits for ci, refills
        **world(depth=2),
        steps=(
            GpiPost("g", wr(0, 8)),
            GpiPost("g", wr(8, 8)),
            CheckNow(gpi={"g": GpiExpect(2)}),  # two credits back: slots 0 and 1 free again
            GpiPost("g", wr(16, 8)),
            GpiPost("g", wr(24, 8)),
            CheckNow(gpi={"g": GpiExpect(4)}),
        ),
        expect=Expect(memory=(("dst", 0, SRC[:8] * 4),), gpi={"g": GpiExpect(4)}),
    ),
    # ---- errors: reported on the descriptor, later descriptors still run ------------------------
    failing(
        "gpi_bad_rkey_is_remote_access",
        dataclasses.replace(wr(0, 8), dst_win=3),
        Syndrome.REMOTE_ACCESS,
        gpis=(Gpi("g", 0, windows=(*WINDOWS, GpiWin(3, "dst", key_xor=0x100))),),
    ),
    failing("gpi_out_of_bounds_destination", wr(4096 - 4, 8), Syndrome.REMOTE_ACCESS),
    failing(
        "gpi_destination_outside_a_narrow_window",  # inside the MR, outside the window
        dataclasses.replace(wr(0, 8), dst_win=3),
        Syndrome.REMOTE_ACCESS,
        gpis=(Gpi("g", 0, windows=(*WINDOWS, GpiWin(3, "dst", 1024, 4))),),
    ),
    failing("gpi_source_outside_its_window", wr(0, 8, src_off=4092), Syndrome.LOCAL_PROT),
    failing("gpi_unreachable_rank", wr(0, 8, rank=5), Syndrome.TRANSPORT_RETRY_EXC),
    failing("gpi_window_not_set_at_that_rank", wr(0, 8, rank=0), Syndrome.REMOTE_ACCESS),
    failing("gpi_misaligned_signal", wr(0, 8, signal=(4, 1)), Syndrome.REMOTE_INVAL_REQ),
    failing(
        "gpi_signal_without_remote_atomic",
        wr(0, 8, signal=(0, 1)),
        Syndrome.REMOTE_ACCESS,
        mrs=world(sig_access=NO_ATOMIC)["mrs"],
    ),
    failing("gpi_unknown_op", gf.GpiDesc(9), Syndrome.LOCAL_QP_OP),
    failing("gpi_unknown_flag", dataclasses.replace(wr(0, 8), flags=0x80), Syndrome.LOCAL_QP_OP),
    failing(
        "gpi_counter_out_of_range", wr(0, 8, counter=2), Syndrome.LOCAL_QP_OP, counter_ok=False
    ),
    failing(
        "gpi_window_handle_out_of_range",
        dataclasses.replace(wr(0, 8), dst_win=7),
        Syndrome.LOCAL_QP_OP,
    ),
    failing(
        "gpi_inline_longer_than_8_bytes",
        dataclasses.replace(
            gf.write_inline(counter=0, data=b"12345678", dst_rank=1, dst=(1, 0)), size=9
        ),
        Syndrome.LOCAL_LENGTH,
    ),
    failing(
        "gpi_source_of_another_pd",  # the queue is in pd 0
        dataclasses.replace(wr(0, 8), src_win=3),
        Syndrome.LOCAL_PROT,
        **world(extra_mrs=(Mr("src3", 0, init=SRC, pd=3),), windows=(*WINDOWS, GpiWin(3, "src3"))),
    ),
    # ---- GPI-MC: one descriptor, a token's whole fan-out ---------------------------------------
    Case(
        "gpi_fanout_expands_to_k_destinations",  # 4 destinations on ranks 1 and 2, a signal each
        **{**world(3, windows=FAN_WINDOWS, extra_mrs=FAN_MRS)},
        steps=(GpiPost("g", FAN4),),
        expect=Expect(
            memory=(
                ("dst", 0, SRC[32:48] + bytes(240) + bytes(512) + SRC[32:48]),  # slots 0, 3
                ("dst2", 0, bytes(256) + SRC[32:48] + bytes(240) + SRC[32:48]),  # slots 1, 2
                ("sig", 0, u64(0) * 4 + u64(1) + u64(0) + u64(1) + u64(0)),  # words 4, 6
                ("sig2", 0, u64(0) * 5 + u64(1) + u64(0) + u64(1)),  # words 5, 7
            ),
            gpi={"g": GpiExpect(1, 0, None, ((0, False), (1, False)))},
            counters={
                0: {
                    "gpi_descriptors": 1,
                    "gpi_writes": 4,
                    "gpi_signals": 4,
                    "gpi_bytes": 64,
                    **QUIET,
                }
            },
        ),
    ),
    Case(
        "gpi_fanout_4byte_signals_and_no_signal",
        **{**world(3, windows=FAN_WINDOWS, extra_mrs=FAN_MRS)},
        steps=(
            GpiPost("g", dataclasses.replace(FAN4, flags=gf.GpiFlag.SIGNAL32, value=-3)),
            GpiPost("g", dataclasses.replace(FAN4, flags=gf.GpiFlag.NO_SIGNAL, src_off=0)),
        ),
        expect=Expect(
            memory=(
                ("dst", 0, SRC[:16] + bytes(240) + bytes(512) + SRC[:16]),  # overwritten
                ("sig", 0, i32(0) * 4 + i32(-3) + i32(0) + i32(-3) + i32(0)),
                ("sig2", 0, i32(0) * 5 + i32(-3) + i32(0) + i32(-3)),
            ),
            gpi={"g": GpiExpect(2, 0, None, ((0, False), (2, False)))},
            counters={0: {"gpi_descriptors": 2, "gpi_writes": 8, "gpi_signals": 4}},
        ),
    ),
    Case(
        "gpi_fanout_eight_destinations",  # the most one descriptor carries
        **world(),
        steps=(
            GpiPost(
                "g",
                gf.fanout(
                    counter=0,
                    size=8,
                    src=(0, 0),
                    dst_win=1,
                    stride=8,
                    sig_win=2,
                    dests=[gf.Dest(1, 7 - j, j) for j in range(8)],
                ),
            ),
        ),
        expect=Expect(
            memory=(("dst", 0, SRC[:8] * 8), ("sig", 0, u64(1) * 8)),
            gpi={"g": GpiExpect(1, 0, None, ((1, False), (0, False)))},
            counters={0: {"gpi_writes": 8, "gpi_signals": 8}},
        ),
    ),
    Case(
        "gpi_fanout_one_bad_destination_moves_nothing",  # whole or nothing
        **{**world(3, windows=(*WINDOWS, GpiWin(1, "dst2"))), "mrs": (*world()["mrs"], *FAN_MRS)},
        steps=(
            GpiPost("g", FAN4),  # destinations on rank 2 have no signal window there
            GpiPost("g", wr(512, 8, counter=1)),
        ),
        expect=Expect(
            memory=(
                ("dst", 0, bytes(512) + SRC[:8]),
                ("dst2", 0, bytes(1024)),
                ("sig", 0, bytes(64)),
            ),
            gpi={"g": GpiExpect(2, 1, (0, Syndrome.REMOTE_ACCESS, 1), ((0, False), (1, True)))},
            counters={0: {"gpi_descriptors": 1, "gpi_errors": 1, "gpi_writes": 1}},
            errors={0: (gpi_err(Syndrome.REMOTE_ACCESS, 0),)},
        ),
    ),
    failing(
        "gpi_fanout_of_no_destination",
        dataclasses.replace(FAN4, k=0, counter=0),
        Syndrome.LOCAL_QP_OP,
    ),
    failing("gpi_fanout_of_nine", dataclasses.replace(FAN4, k=9, counter=0), Syndrome.LOCAL_QP_OP),
    failing(
        "gpi_no_signal_outside_fanout",
        dataclasses.replace(wr(0, 8), flags=gf.GpiFlag.NO_SIGNAL),
        Syndrome.LOCAL_QP_OP,
    ),
]
