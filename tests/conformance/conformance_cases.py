"""The conformance table: WQE sequences and what an mlx5-faithful NIC must leave behind.

Two ranks by default: rank 0 posts (QP "a" or DCI "d"), rank 1 is the target (QP "b", DCT "t").
"""

from __future__ import annotations

import struct

from conformance_model import (
    Case,
    ConsumeCq,
    Cq,
    CqeSpec,
    Dct,
    ErrSpec,
    Expect,
    FetchAdd,
    Modify,
    Mr,
    Nop,
    Post,
    PostRecv,
    PublishBody,
    PublishCtrl,
    PublishDbrec,
    Qp,
    Repeat,
    Rering,
    Ring,
    Skip,
    Write,
)

from gicbench.fabric.base import ACCESS_ALL, Access, QpState
from gicbench.mlx5 import CqeOpcode, Opcode, Syndrome, imm_from_host

REQ, RESP_IMM, REQ_ERR = CqeOpcode.REQ, CqeOpcode.RESP_WR_IMM, CqeOpcode.REQ_ERR
SRC = bytes(range(64))
RO = Access.LOCAL_WRITE | Access.REMOTE_READ  # no remote write, no atomics
CQ_OVERFLOW = 9  # mlx5_ifc.h MLX5_CQC_STATUS_CQ_OVERFLOW


def u64(v: int) -> bytes:
    return struct.pack("<Q", v)


def rc(
    *,
    sq: int = 16,
    rq: int = 0,
    dst_access: Access = ACCESS_ALL,
    dst_init: bytes = b"",
    scq: int = 16,
    a_state: QpState = QpState.RTS,
) -> dict:
    """QP a (rank 0) -> QP b (rank 1); src/res buffers on rank 0, dst on rank 1."""
    return {
        "mrs": (
            Mr("src", 0, init=SRC),
            Mr("res", 0),
            Mr("dst", 1, access=dst_access, init=dst_init),
        ),
        "cqs": (Cq("scq", 0, scq), Cq("rcq", 1)),
        "qps": (
            Qp("a", 0, "scq", sq_wqebbs=sq, peer="b", state=a_state),
            Qp("b", 1, "rcq", peer="a", recv_cq="rcq" if rq else None, rq_wqes=rq),
        ),
    }


def dc(*, sq: int = 16, rq: int = 0, key: int = 0x1234_5678_9ABC_DEF0) -> dict:
    """DCI d (rank 0) -> DCT t (rank 1)."""
    return {
        "mrs": (Mr("src", 0, init=SRC), Mr("res", 0), Mr("dst", 1)),
        "cqs": (Cq("scq", 0), Cq("rcq", 1)),
        "qps": (Qp("d", 0, "scq", sq_wqebbs=sq, dci=True),),
        "dcts": (Dct("t", 1, "rcq", key=key, rq_wqes=rq),),
    }


def ok(qp: str, idx: int, op: Opcode = Opcode.RDMA_WRITE, n: int | None = None) -> CqeSpec:
    return CqeSpec(REQ, qp=qp, wqe_counter=idx, wqe_opcode=op, byte_cnt=n)


def err(qp: str, idx: int, synd: Syndrome) -> CqeSpec:
    return CqeSpec(REQ_ERR, qp=qp, wqe_counter=idx, syndrome=synd)


def completion_err(qp: str, idx: int, synd: Syndrome) -> ErrSpec:
    return ErrSpec("completion", qp, expected=synd, found=idx)


W8 = b"ABCDEFGH"

CASES: list[Case] = [
    # ---- data movement -------------------------------------------------------------------------
    Case(
        "inline_write_8B",
        **rc(),
        steps=(Write("a", ("dst", 8), payload=W8), Ring(("a",))),
        expect=Expect(
            memory=(("dst", 0, bytes(8) + W8 + bytes(8)),),
            cqes={"scq": (ok("a", 0, n=8),)},
            states={"a": QpState.RTS, "b": QpState.RTS},
            counters={
                0: {"wqes": 1, "doorbells": 1, "bytes": 8, "messages": 1, "cqes": 1, "errors": 0},
                1: {"wqes": 0},
            },
        ),
    ),
    Case(
        "pointer_write_64B",
        **rc(),
        steps=(Write("a", ("dst", 64), src=("src", 0, 64)), Ring(("a",))),
        expect=Expect(
            memory=(("dst", 64, SRC),),
            cqes={"scq": (ok("a", 0, n=64),)},
            counters={0: {"wqes": 1, "bytes": 64}},
        ),
    ),
    Case(
        "inline_write_large_wraps_sq_end",  # 200 B inline = 4 WQEBBs starting at index 2 of 4
        **rc(sq=4),
        steps=(
            Nop("a"),
            Nop("a", signaled=True),
            Ring(("a",)),
            Write("a", ("dst", 0), payload=SRC * 3 + SRC[:8]),
            Ring(("a",)),
        ),
        expect=Expect(
            memory=(("dst", 0, SRC * 3 + SRC[:8]),),
            cqes={"scq": (ok("a", 1, Opcode.NOP, 0), ok("a", 2, n=200))},
            counters={0: {"wqes": 3, "doorbells": 2, "bytes": 200}},
        ),
    ),
    Case(
        "sq_wraps_many_laps",  # 4-WQEBB SQ, 5 doorbells of 3 writes each
        **rc(sq=4),
        steps=(
            Repeat(
                5,
                (
                    Write("a", ("dst", 0), payload=W8, signaled=False),
                    Write("a", ("dst", 8), payload=W8, signaled=False),
                    Write("a", ("dst", 16), payload=W8[::-1]),
                    Ring(("a",)),
                ),
            ),
        ),
        expect=Expect(
            memory=(("dst", 0, W8 + W8 + W8[::-1]),),
            cqes={"scq": tuple(ok("a", 3 * k + 2) for k in range(5))},
            counters={0: {"wqes": 15, "doorbells": 5, "cqes": 5}},
        ),
    ),
    Case(
        "unsignaled_retired_by_signaled_multi_per_doorbell",
        **rc(),
        steps=(
            Write("a", ("dst", 0), payload=b"1" * 8, signaled=False),
            Write("a", ("dst", 8), src=("src", 0, 16), signaled=False),
            Nop("a"),
            Write("a", ("dst", 24), payload=b"3" * 8, signaled=True),
            Ring(("a",)),
        ),
        expect=Expect(
            memory=(("dst", 0, b"1" * 8 + SRC[:16] + b"3" * 8),),
            cqes={"scq": (ok("a", 3),)},
            counters={0: {"wqes": 4, "doorbells": 1, "messages": 3, "cqes": 1}},
        ),
    ),
    Case(
        "nop_signaled",
        **rc(),
        steps=(Nop("a", signaled=True), Ring(("a",))),
        expect=Expect(
            cqes={"scq": (ok("a", 0, Opcode.NOP, 0),)},
            counters={0: {"wqes": 1, "messages": 0, "bytes": 0}},
        ),
    ),
    Case(
        "write_imm_consumes_receive",
        **rc(rq=4),
        steps=(
            PostRecv("b", 2),
            Write("a", ("dst", 0), payload=W8, imm=imm_from_host(0xCAFE0001)),
            Write("a", ("dst", 8), src=("src", 0, 32), imm=imm_from_host(0xCAFE0002)),
            Ring(("a",)),
        ),
        expect=Expect(
            memory=(("dst", 0, W8 + SRC[:32]),),
            cqes={
                "scq": (ok("a", 0, Opcode.RDMA_WRITE_IMM, 8), ok("a", 1, Opcode.RDMA_WRITE_IMM)),
                "rcq": (
                    CqeSpec(
                        RESP_IMM, qp="b", wqe_counter=0, imm=imm_from_host(0xCAFE0001), byte_cnt=8
                    ),
                    CqeSpec(
                        RESP_IMM, qp="b", wqe_counter=1, imm=imm_from_host(0xCAFE0002), byte_cnt=32
                    ),
                ),
            },
            counters={1: {"recv_consumed": 2, "cqes": 2}, 0: {"cqes": 2}},
        ),
    ),
    Case(
        "write_imm_without_receive_is_rnr",
        **rc(rq=4),
        steps=(Write("a", ("dst", 0), payload=W8, imm=7), Ring(("a",))),
        expect=Expect(
            memory=(("dst", 0, bytes(8)),),  # the responder NAKs before placing data
            cqes={"scq": (err("a", 0, Syndrome.RNR_RETRY_EXC),)},
            states={"a": QpState.ERR, "b": QpState.RTS},
            counters={0: {"rnr": 1, "errors": 1, "wqes": 0}, 1: {"recv_consumed": 0}},
            errors={0: (completion_err("a", 0, Syndrome.RNR_RETRY_EXC),)},
        ),
    ),
    Case(
        "fetch_add_returns_old_value",
        **rc(dst_init=u64(1000)),
        steps=(
            FetchAdd("a", ("dst", 0), 5, ("res", 0)),
            FetchAdd("a", ("dst", 0), 7, ("res", 8)),
            Ring(("a",)),
        ),
        expect=Expect(
            memory=(("dst", 0, u64(1012)), ("res", 0, u64(1000) + u64(1005))),
            cqes={"scq": (ok("a", 0, Opcode.ATOMIC_FA, 8), ok("a", 1, Opcode.ATOMIC_FA, 8))},
            counters={0: {"wqes": 2, "bytes": 16}},
        ),
    ),
    Case(
        "fetch_add_two_engines_concurrently",  # ranks 0 and 1 add to a word of rank 2
        world=3,
        mrs=(Mr("ctr", 2), Mr("r0", 0), Mr("r1", 1)),
        cqs=(Cq("c0", 0, 256), Cq("c1", 1, 256), Cq("c2", 2)),
        qps=(
            Qp("a", 0, "c0", sq_wqebbs=128, peer="x"),
            Qp("x", 2, "c2", peer="a"),
            Qp("b", 1, "c1", sq_wqebbs=128, peer="y"),
            Qp("y", 2, "c2", peer="b"),
        ),
        steps=(
            *[
                FetchAdd(q, ("ctr", 0), 3, (r, 8 * k), signaled=(k == 99))
                for k in range(100)
                for q, r in (("a", "r0"), ("b", "r1"))
            ],
            Ring(("a", "b")),
        ),
        expect=Expect(
            memory=(("ctr", 0, u64(600)),),
            cqes={"c0": (ok("a", 99, Opcode.ATOMIC_FA),), "c1": (ok("b", 99, Opcode.ATOMIC_FA),)},
            counters={0: {"wqes": 100}, 1: {"wqes": 100}, 2: {"wqes": 0}},
            fa_olds=(("r0", 0, 100), ("r1", 0, 100)),
            fa_step=3,
        ),
    ),
    Case(
        "dc_write_full_av",
        **dc(),
        steps=(
            Write("d", ("dst", 0), payload=W8, dct="t"),
            Write("d", ("dst", 8), src=("src", 0, 16), dct="t"),
            Ring(("d",)),
        ),
        expect=Expect(
            memory=(("dst", 0, W8 + SRC[:16]),),
            cqes={"scq": (ok("d", 0), ok("d", 2))},  # a full-AV write takes 2 WQEBBs
            counters={0: {"wqes": 2, "bytes": 24}},
        ),
    ),
    Case(
        "dc_write_compact_av_and_fetch_add",
        **dc(),
        steps=(
            Write("d", ("dst", 0), payload=W8, dct="t", compact_av=True),
            FetchAdd("d", ("dst", 16), 9, ("res", 0), dct="t", compact_av=True),
            Ring(("d",)),
        ),
        expect=Expect(
            memory=(("dst", 0, W8 + bytes(8) + u64(9)), ("res", 0, u64(0))),
            cqes={"scq": (ok("d", 0), ok("d", 1, Opcode.ATOMIC_FA))},
        ),
    ),
    Case(
        "dc_write_wraps_sq_end_with_imm",
        **dc(sq=4, rq=2),
        steps=(
            PostRecv("t"),
            Nop("d"),
            Nop("d"),
            Nop("d"),
            Ring(("d",)),
            Write("d", ("dst", 0), payload=SRC[:40], dct="t", imm=99),  # index 3, 2 WQEBBs
            Ring(("d",)),
        ),
        expect=Expect(
            memory=(("dst", 0, SRC[:40]),),
            cqes={
                "scq": (ok("d", 3, Opcode.RDMA_WRITE_IMM, 40),),
                "rcq": (CqeSpec(RESP_IMM, qp="t", wqe_counter=0, imm=99, byte_cnt=40),),
            },
        ),
    ),
    # ---- errors --------------------------------------------------------------------------------
    Case(
        "bad_rkey_is_remote_access",
        **rc(),
        steps=(Write("a", ("dst", 0), payload=W8, rkey_xor=0x100), Ring(("a",))),
        expect=Expect(
            memory=(("dst", 0, bytes(8)),),
            cqes={"scq": (err("a", 0, Syndrome.REMOTE_ACCESS),)},
            states={"a": QpState.ERR, "b": QpState.RTS},
            counters={0: {"errors": 1, "wqes": 0}},
            errors={0: (completion_err("a", 0, Syndrome.REMOTE_ACCESS),)},
        ),
    ),
    Case(
        "out_of_bounds_is_remote_access",
        **rc(),
        steps=(Write("a", ("dst", 4096 - 4), payload=W8), Ring(("a",))),
        expect=Expect(
            cqes={"scq": (err("a", 0, Syndrome.REMOTE_ACCESS),)},
            states={"a": QpState.ERR},
            errors={0: (completion_err("a", 0, Syndrome.REMOTE_ACCESS),)},
        ),
    ),
    Case(
        "write_to_read_only_region",
        **rc(dst_access=RO),
        steps=(Write("a", ("dst", 0), payload=W8), Ring(("a",))),
        expect=Expect(
            memory=(("dst", 0, bytes(8)),),
            cqes={"scq": (err("a", 0, Syndrome.REMOTE_ACCESS),)},
            states={"a": QpState.ERR},
            errors={0: (completion_err("a", 0, Syndrome.REMOTE_ACCESS),)},
        ),
    ),
    Case(
        "atomic_without_remote_atomic_access",
        **rc(dst_access=Access.REMOTE_WRITE),
        steps=(FetchAdd("a", ("dst", 0), 1, ("res", 0)), Ring(("a",))),
        expect=Expect(
            cqes={"scq": (err("a", 0, Syndrome.REMOTE_ACCESS),)},
            errors={0: (completion_err("a", 0, Syndrome.REMOTE_ACCESS),)},
        ),
    ),
    Case(
        "misaligned_atomic_is_invalid_request",
        **rc(),
        steps=(FetchAdd("a", ("dst", 4), 1, ("res", 0)), Ring(("a",))),
        expect=Expect(
            cqes={"scq": (err("a", 0, Syndrome.REMOTE_INVAL_REQ),)},
            errors={0: (completion_err("a", 0, Syndrome.REMOTE_INVAL_REQ),)},
        ),
    ),
    Case(
        "bad_lkey_is_local_protection",
        **rc(),
        steps=(Write("a", ("dst", 0), src=("src", 0, 16), lkey_xor=0x5), Ring(("a",))),
        expect=Expect(
            memory=(("dst", 0, bytes(16)),),
            cqes={"scq": (err("a", 0, Syndrome.LOCAL_PROT),)},
            states={"a": QpState.ERR},
            errors={0: (completion_err("a", 0, Syndrome.LOCAL_PROT),)},
        ),
    ),
    Case(
        "qp_not_in_rts_ignores_doorbell",
        **rc(a_state=QpState.INIT),
        steps=(Write("a", ("dst", 0), payload=W8), Ring(("a",))),
        expect=Expect(
            memory=(("dst", 0, bytes(8)),),
            states={"a": QpState.INIT},
            counters={0: {"not_rts": 1, "wqes": 0, "doorbells": 1}},
            errors={0: (ErrSpec("not_rts", "a", expected=int(QpState.INIT), found=0),)},
        ),
    ),
    Case(
        "cq_overrun",
        **rc(scq=2),
        steps=(
            Nop("a", signaled=True),
            Nop("a", signaled=True),
            Nop("a", signaled=True),
            Ring(("a",)),
            Nop("a", signaled=True),
            Ring(("a",)),
        ),
        expect=Expect(
            # hardware: the CQ error event, and the QPs on the CQ go to ERR (the 4th WQE flushes)
            cqes={"scq": (ok("a", 0, Opcode.NOP), ok("a", 1, Opcode.NOP))},
            cq_status={"scq": CQ_OVERFLOW},
            states={"a": QpState.ERR},
            counters={
                0: {
                    "cq_overruns": 1,
                    "cqe_dropped": 2,
                    "cqes": 2,
                    "wqes": 3,
                    "flushed": 1,
                    "qp_fatal": 1,
                }
            },
            errors={
                0: (
                    ErrSpec("cq_overrun", "a", expected=0, found=2),
                    ErrSpec("qp_fatal", "a", expected=int(QpState.RTS), found=int(QpState.ERR)),
                )
            },
        ),
    ),
    Case(
        "cq_consumed_in_time_does_not_overrun",
        **rc(scq=2),
        steps=(
            Nop("a", signaled=True),
            Nop("a", signaled=True),
            Ring(("a",)),
            ConsumeCq("scq", 2),
            Nop("a", signaled=True),
            Nop("a", signaled=True),
            Ring(("a",)),
        ),
        expect=Expect(
            cqes={"scq": tuple(ok("a", k, Opcode.NOP) for k in range(4))},
            cq_status={"scq": 0},
            counters={0: {"cq_overruns": 0, "cqes": 4}},
        ),
    ),
    Case(
        "dc_key_mismatch",
        **dc(),
        steps=(Write("d", ("dst", 0), payload=W8, dct="t", dc_key=0xBAD), Ring(("d",))),
        expect=Expect(
            memory=(("dst", 0, bytes(8)),),
            cqes={"scq": (err("d", 0, Syndrome.TRANSPORT_RETRY_EXC),)},
            states={"d": QpState.ERR},
            counters={1: {"dc_key_violations": 1}, 0: {"errors": 1}},
            dct_key_violations={"t": 1},
            errors={0: (completion_err("d", 0, Syndrome.TRANSPORT_RETRY_EXC),)},
        ),
    ),
    Case(
        "stale_wqe_doorbell_before_ctrl",  # the doorbell overtakes the ctrl store of WQE 1
        **rc(),
        steps=(
            Write("a", ("dst", 0), payload=b"first..."),
            Ring(("a",)),
            Write("a", ("dst", 8), payload=b"second..", withhold_ctrl=True),
            Ring(("a",)),
            PublishCtrl("a"),
            Nop("a", signaled=True),
            Ring(("a",)),  # the next doorbell retries
        ),
        expect=Expect(
            memory=(("dst", 0, b"first...second.."),),
            cqes={"scq": (ok("a", 0), ok("a", 1), ok("a", 2, Opcode.NOP))},
            states={"a": QpState.RTS},
            counters={0: {"stale_wqes": 1, "wqes": 3, "doorbells": 3}},
            errors={0: (ErrSpec("stale_wqe", "a", expected=1, found=0),)},
        ),
    ),
    Case(
        "flush_after_error",
        **rc(),
        steps=(
            Write("a", ("dst", 0), payload=W8, signaled=False, rkey_xor=0x100),
            Write("a", ("dst", 8), payload=W8),
            Nop("a"),
            Ring(("a",)),
            Nop("a"),
            Ring(("a",)),  # posted on a QP already in ERR: flushed too
        ),
        expect=Expect(
            memory=(("dst", 0, bytes(16)),),
            cqes={
                "scq": (
                    err("a", 0, Syndrome.REMOTE_ACCESS),
                    err("a", 1, Syndrome.WR_FLUSH),
                    err("a", 2, Syndrome.WR_FLUSH),
                    err("a", 3, Syndrome.WR_FLUSH),
                )
            },
            states={"a": QpState.ERR},
            counters={0: {"errors": 1, "flushed": 3, "wqes": 0}},
            errors={0: (completion_err("a", 0, Syndrome.REMOTE_ACCESS),)},
        ),
    ),
    Case(
        "reset_from_err_and_reuse",
        **rc(),
        steps=(
            Write("a", ("dst", 0), payload=W8, rkey_xor=0x100),
            Ring(("a",)),
            Modify("a", QpState.RESET),
            Modify("a", QpState.INIT),
        ),
        expect=Expect(
            cqes={"scq": (err("a", 0, Syndrome.REMOTE_ACCESS),)},
            states={"a": QpState.INIT},
            errors={0: (completion_err("a", 0, Syndrome.REMOTE_ACCESS),)},
        ),
    ),
]

# Reconnecting a reset QP needs its peer's endpoint: a case of its own, built on the one above.
CASES.append(
    Case(
        "reset_reconnect_posts_from_index_0",
        **rc(),
        steps=(
            Write("a", ("dst", 0), payload=W8, rkey_xor=0x100),
            Ring(("a",)),
            Modify("a", QpState.RESET),
            Modify("a", QpState.INIT),
            Modify("a", QpState.RTR),
            Modify("a", QpState.RTS),
            Write("a", ("dst", 0), payload=W8),
            Ring(("a",)),
        ),
        expect=Expect(
            memory=(("dst", 0, W8),),
            cqes={"scq": (err("a", 0, Syndrome.REMOTE_ACCESS), ok("a", 0))},
            states={"a": QpState.RTS},
            errors={0: (completion_err("a", 0, Syndrome.REMOTE_ACCESS),)},
        ),
    )
)

# ---- doorbells: record, conventions, BlueFlame, DBR-less ----------------------------------------
OP = Opcode


def _rc_with(**qa: object) -> dict:
    """rc() with QP a's options replaced."""
    d = rc()
    a, b = d["qps"]
    d["qps"] = (Qp(**{**a.__dict__, **qa}), b)
    return d


def _wr(qp: str, off: int, data: bytes, **kw: object) -> Write:
    return Write(qp, ("dst", off), payload=data, **kw)


CASES += [
    Case(
        "ibgda_next_index_doorbell",  # IBGDA: WQEs, record, doorbell = next index (opcode 0, ds 0)
        **rc(),
        steps=(_wr("a", 0, W8, signaled=False), _wr("a", 8, W8), Ring(("a",), convention="next")),
        expect=Expect(
            memory=(("dst", 0, W8 + W8 + bytes(8)),),  # nothing past the named index runs
            cqes={"scq": (ok("a", 1),)},
            counters={0: {"wqes": 2, "stale_wqes": 0, "dbrec_lag": 0, "bad_doorbells": 0}},
        ),
    ),
    Case(
        "ibgda_full_sq_next_index",  # 4 WQEBBs posted on a 4-WQEBB SQ: next index == ci (mod 4)
        **rc(sq=4),
        steps=(
            Repeat(
                3,
                (
                    Nop("a"),
                    Nop("a"),
                    Nop("a"),
                    Nop("a", signaled=True),
                    Ring(("a",), convention="next"),
                    ConsumeCq("scq", 1),
                ),
            ),
        ),
        expect=Expect(
            cqes={"scq": (ok("a", 3, OP.NOP), ok("a", 7, OP.NOP), ok("a", 11, OP.NOP))},
            counters={0: {"wqes": 12, "doorbells": 3, "bad_doorbells": 0}},
        ),
    ),
    Case(
        "doca_double_ring",  # DOCA GPUNetIO default: doorbell, record, doorbell
        **rc(),
        steps=(_wr("a", 0, W8), Ring(("a",), convention="next", dbrec="double")),
        expect=Expect(memory=(("dst", 0, W8),), cqes={"scq": (ok("a", 0),)}),
    ),
    Case(
        "dbrec_lag_detected_then_record_resumes",  # doorbell rung, record written later
        **rc(),
        steps=(
            _wr("a", 0, W8),
            Ring(("a",), dbrec="none"),
            PublishDbrec("a"),
        ),
        expect=Expect(
            memory=(("dst", 0, W8),),
            cqes={"scq": (ok("a", 0),)},
            counters={0: {"dbrec_lag": 1, "wqes": 1, "stale_wqes": 0}},
            qp_counters={"a": {"dbrec_lag": 1}},
        ),
    ),
    Case(
        "record_not_doorbell_is_the_producer_index",  # rdma-core doorbell names WQE 0; record 2
        **rc(),
        steps=(_wr("a", 0, W8), _wr("a", 8, W8[::-1]), Ring(("a",), wqe=0)),
        expect=Expect(
            memory=(("dst", 0, W8 + W8[::-1]),),
            cqes={"scq": (ok("a", 0), ok("a", 1))},
            counters={0: {"wqes": 2, "dbrec_lag": 0}},
        ),
    ),
    Case(
        "doorbell_behind_the_record_is_not_an_error",  # the record ran ahead: WQE 1 already ran
        **rc(),
        steps=(
            _wr("a", 0, W8, signaled=False),
            _wr("a", 8, W8[::-1]),
            Ring(("a",), wqe=0),  # names WQE 0; the record says 2: both run
            Ring(("a",), wqe=1),  # the doorbell for WQE 1 arrives after it ran
        ),
        expect=Expect(
            memory=(("dst", 0, W8 + W8[::-1]),),
            cqes={"scq": (ok("a", 1),)},
            counters={0: {"wqes": 2, "doorbells": 2, "bad_doorbells": 0, "dbrec_lag": 0}},
        ),
    ),
    Case(
        "dbr_less_next_index",  # DOCA GPU_SM_NO_DBR: no record, the doorbell carries the index
        **_rc_with(dbr=False),
        steps=(
            _wr("a", 0, W8, signaled=False),
            _wr("a", 8, W8),
            Ring(("a",), convention="next", dbrec="none"),
        ),
        expect=Expect(
            memory=(("dst", 0, W8 + W8),),
            cqes={"scq": (ok("a", 1),)},
            counters={0: {"wqes": 2, "dbrec_lag": 0}},
        ),
    ),
    Case(
        "dbr_less_last_wqe_doorbell",  # DBR-less with rdma-core's doorbell (end = that WQE's end)
        **_rc_with(dbr=False),
        steps=(
            _wr("a", 0, SRC[:60], signaled=False),  # 2 WQEBBs
            _wr("a", 64, W8),
            Ring(("a",), dbrec="none"),
        ),
        expect=Expect(
            memory=(("dst", 0, SRC[:60]), ("dst", 64, W8)),
            cqes={"scq": (ok("a", 2),)},
            counters={0: {"wqes": 2}},
        ),
    ),
    Case(
        "blueflame_64_byte_copy",  # the first WQEBB copied to the register; neighbours untouched
        world=2,
        mrs=(Mr("dst", 1),),
        cqs=(Cq("scq", 0), Cq("rcq", 1)),
        qps=(
            Qp("a", 0, "scq", peer="b"),
            Qp("c", 0, "scq", peer="d"),
            Qp("b", 1, "rcq", peer="a"),
            Qp("d", 1, "rcq", peer="c"),
        ),
        steps=(
            _wr("a", 0, W8),
            Ring(("a",), bf=True),
            _wr("c", 8, W8[::-1]),
            Ring(("c",), bf=True, convention="next"),
        ),
        expect=Expect(
            memory=(("dst", 0, W8 + W8[::-1]),),
            cqes={"scq": (ok("a", 0), ok("c", 0)), "rcq": ()},
            counters={0: {"wqes": 2, "doorbells": 2, "bad_doorbells": 0, "stale_wqes": 0}},
        ),
    ),
    Case(
        "doorbell_with_another_qpn",
        **rc(),
        steps=(_wr("a", 0, W8), Ring(("a",), qpn_xor=0x10)),
        expect=Expect(
            memory=(("dst", 0, bytes(8)),),
            counters={0: {"bad_doorbells": 1, "wqes": 0}},
            errors={0: (ErrSpec("doorbell_qpn", "a"),)},
        ),
    ),
    # ---- torn and stale WQEs -------------------------------------------------------------------
    Case(
        "zero_slot_at_index_0_is_stale_not_a_nop",  # record and doorbell name a slot never written
        **rc(),
        steps=(Skip("a"), Ring(("a",), convention="next")),
        expect=Expect(
            cqes={"scq": ()},
            states={"a": QpState.RTS},
            counters={0: {"stale_wqes": 1, "wqes": 0, "messages": 0}},
            errors={0: (ErrSpec("stale_wqe", "a", expected=0, found=0),)},
        ),
    ),
    Case(
        "rering_same_doorbell_after_stale_resumes",
        **rc(),
        steps=(
            _wr("a", 0, W8, withhold_ctrl=True),
            Ring(("a",)),
            PublishCtrl("a"),
            Rering("a"),
        ),
        expect=Expect(
            memory=(("dst", 0, W8),),
            cqes={"scq": (ok("a", 0),)},
            counters={0: {"stale_wqes": 1, "wqes": 1}},
            errors={0: (ErrSpec("stale_wqe", "a", expected=0, found=0),)},
        ),
    ),
    Case(
        "ctrl_with_another_qpn_is_not_executed",  # a ctrl left by another QP's submitter
        **rc(),
        steps=(
            Post("a", OP.NOP, signaled=True, qpn_xor=0x10),
            Ring(("a",), convention="next"),
        ),
        expect=Expect(
            cqes={"scq": ()},
            states={"a": QpState.RTS},
            counters={0: {"stale_wqes": 1, "wqes": 0, "errors": 0}},
            errors={0: (ErrSpec("stale_wqe", "a", expected=0, found=0),)},
        ),
    ),
    Case(
        "signature_catches_body_written_after_ctrl",  # new ctrl over an old body
        **_rc_with(wqe_sig=True),
        steps=(
            Post("a", OP.RDMA_WRITE, dst=("dst", 0), payload=W8, sign=True, torn=True),
            Ring(("a",)),
            PublishBody("a"),
        ),
        expect=Expect(
            memory=(("dst", 0, W8),),
            cqes={"scq": (ok("a", 0, n=8),)},
            counters={0: {"stale_wqes": 1, "wqes": 1}},
            errors={0: (ErrSpec("stale_wqe", "a", expected=0, found=0),)},
        ),
    ),
    Case(
        "signed_wqes_execute",
        **_rc_with(wqe_sig=True),
        steps=(
            Post("a", OP.RDMA_WRITE, dst=("dst", 0), payload=W8, sign=True),
            Post("a", OP.NOP, sign=True),
            Ring(("a",)),
        ),
        expect=Expect(memory=(("dst", 0, W8),), cqes={"scq": (ok("a", 0), ok("a", 1, OP.NOP))}),
    ),
    # ---- CQ modes ------------------------------------------------------------------------------
    Case(
        "collapsed_cq_polled_by_wqe_counter",  # IBGDA: cc + oi, progress from CQE 0
        **{**rc(), "cqs": (Cq("scq", 0, 1, collapsed=True, overrun_ignore=True), Cq("rcq", 1))},
        steps=(Repeat(5, (Nop("a", signaled=True), Ring(("a",)))),),
        expect=Expect(
            cqe0={"scq": CqeSpec(REQ, wqe_counter=4, wqe_opcode=OP.NOP)},
            cq_status={"scq": 0},
            states={"a": QpState.RTS},
            counters={0: {"cqes": 5, "cq_overruns": 0, "wqes": 5}},
        ),
    ),
    Case(
        "overrun_ignored_with_oi",
        **{**rc(), "cqs": (Cq("scq", 0, 2, overrun_ignore=True), Cq("rcq", 1))},
        steps=(
            Nop("a", signaled=True),
            Nop("a", signaled=True),
            Nop("a", signaled=True),
            Ring(("a",)),
        ),
        expect=Expect(
            # the 3rd CQE overwrote entry 0 with the next lap's owner bit: a consumer at index 0
            # sees nothing ready; entry 0 holds WQE 2
            cqes={"scq": ()},
            cqe0={"scq": CqeSpec(REQ, wqe_counter=2, wqe_opcode=OP.NOP)},
            cq_status={"scq": 0},
            states={"a": QpState.RTS},
            counters={0: {"cqes": 3, "cq_overruns": 0}},
        ),
    ),
    # ---- operations ----------------------------------------------------------------------------
    Case(
        "gather_list_write",  # three pointer data segments: every one is sent, in order
        **rc(),
        steps=(
            Post(
                "a",
                OP.RDMA_WRITE,
                dst=("dst", 0),
                sges=(("src", 0, 8), ("src", 16, 8), ("src", 40, 4)),
            ),
            Ring(("a",)),
        ),
        expect=Expect(
            memory=(("dst", 0, SRC[0:8] + SRC[16:24] + SRC[40:44] + bytes(4)),),
            cqes={"scq": (ok("a", 0, n=20),)},
            counters={0: {"bytes": 20}},
        ),
    ),
    Case(
        "rdma_read_scatter",
        **rc(dst_init=SRC, dst_access=Access.REMOTE_READ | Access.LOCAL_WRITE),
        steps=(
            Post("a", OP.RDMA_READ, dst=("dst", 8), sges=(("res", 0, 8), ("res", 64, 16))),
            Ring(("a",)),
        ),
        expect=Expect(
            memory=(("res", 0, SRC[8:16]), ("res", 64, SRC[16:32])),
            cqes={"scq": (ok("a", 0, OP.RDMA_READ, 24),)},
        ),
    ),
    Case(
        "rdma_read_without_remote_read_access",
        **rc(dst_access=Access.REMOTE_WRITE | Access.LOCAL_WRITE),
        steps=(Post("a", OP.RDMA_READ, dst=("dst", 0), sges=(("res", 0, 8),)), Ring(("a",))),
        expect=Expect(
            cqes={
                "scq": (
                    CqeSpec(
                        REQ_ERR,
                        qp="a",
                        wqe_counter=0,
                        syndrome=Syndrome.REMOTE_ACCESS,
                        vendor_syndrome=0x88,
                    ),
                )
            },
            states={"a": QpState.ERR},
            errors={0: (completion_err("a", 0, Syndrome.REMOTE_ACCESS),)},
        ),
    ),
    Case(
        "send_and_send_imm_consume_receives",
        **{**rc(rq=4), "mrs": (Mr("src", 0, init=SRC), Mr("res", 0), Mr("dst", 1))},
        steps=(
            PostRecv("b", 1, sge=("dst", 0, 64)),
            PostRecv("b", 1, sge=("dst", 100, 16)),
            Post("a", OP.SEND, sges=(("src", 0, 4), ("src", 8, 4))),
            Post("a", OP.SEND_IMM, payload=W8, imm=imm_from_host(77)),
            Ring(("a",)),
        ),
        expect=Expect(
            memory=(("dst", 0, SRC[0:4] + SRC[8:12] + bytes(4)), ("dst", 100, W8)),
            cqes={
                "scq": (ok("a", 0, OP.SEND, 8), ok("a", 1, OP.SEND_IMM, 8)),
                "rcq": (
                    CqeSpec(CqeOpcode.RESP_SEND, qp="b", wqe_counter=0, byte_cnt=8),
                    CqeSpec(
                        CqeOpcode.RESP_SEND_IMM,
                        qp="b",
                        wqe_counter=1,
                        byte_cnt=8,
                        imm=imm_from_host(77),
                    ),
                ),
            },
            counters={1: {"recv_consumed": 2}},
        ),
    ),
    Case(
        "send_longer_than_receive",
        **{**rc(rq=4), "mrs": (Mr("src", 0, init=SRC), Mr("res", 0), Mr("dst", 1))},
        steps=(
            PostRecv("b", 1, sge=("dst", 0, 4)),
            Post("a", OP.SEND, payload=W8),
            Ring(("a",)),
        ),
        expect=Expect(
            memory=(("dst", 0, bytes(8)),),
            cqes={
                "scq": (err("a", 0, Syndrome.REMOTE_INVAL_REQ),),
                "rcq": (CqeSpec(CqeOpcode.RESP_ERR, qp="b", syndrome=Syndrome.LOCAL_LENGTH),),
            },
            states={"a": QpState.ERR},
            errors={0: (completion_err("a", 0, Syndrome.REMOTE_INVAL_REQ),)},
        ),
    ),
    Case(
        "compare_and_swap",
        **rc(dst_init=u64(5) + u64(9)),
        steps=(
            Post("a", OP.ATOMIC_CS, dst=("dst", 0), atomic=(77, 5), sges=(("res", 0, 8),)),
            Post("a", OP.ATOMIC_CS, dst=("dst", 8), atomic=(88, 5), sges=(("res", 8, 8),)),
            Ring(("a",)),
        ),
        expect=Expect(
            memory=(("dst", 0, u64(77) + u64(9)), ("res", 0, u64(5) + u64(9))),
            cqes={"scq": (ok("a", 0, OP.ATOMIC_CS, 8), ok("a", 1, OP.ATOMIC_CS, 8))},
        ),
    ),
    Case(
        "remote_key_of_another_pd",  # target MR in pd 1, responder QP in pd 0
        **{**rc(), "mrs": (Mr("src", 0, init=SRC), Mr("res", 0), Mr("dst", 1, pd=1))},
        steps=(_wr("a", 0, W8), Ring(("a",))),
        expect=Expect(
            memory=(("dst", 0, bytes(8)),),
            cqes={
                "scq": (
                    CqeSpec(REQ_ERR, qp="a", syndrome=Syndrome.REMOTE_ACCESS, vendor_syndrome=0x88),
                )
            },
            errors={0: (completion_err("a", 0, Syndrome.REMOTE_ACCESS),)},
        ),
    ),
    Case(
        "local_key_of_another_pd",
        **{**rc(), "mrs": (Mr("src", 0, init=SRC, pd=3), Mr("res", 0), Mr("dst", 1))},
        steps=(Write("a", ("dst", 0), src=("src", 0, 8)), Ring(("a",))),
        expect=Expect(
            cqes={
                "scq": (
                    CqeSpec(REQ_ERR, qp="a", syndrome=Syndrome.LOCAL_PROT, vendor_syndrome=0x52),
                )
            },
            errors={0: (completion_err("a", 0, Syndrome.LOCAL_PROT),)},
        ),
    ),
    Case(
        "max_inline_enforced",
        **_rc_with(max_inline=16),
        steps=(_wr("a", 0, W8 * 2), _wr("a", 16, W8 * 3), Ring(("a",))),
        expect=Expect(
            memory=(("dst", 0, W8 * 2 + bytes(24)),),
            cqes={"scq": (ok("a", 0, n=16), err("a", 1, Syndrome.LOCAL_LENGTH))},
            errors={0: (completion_err("a", 1, Syndrome.LOCAL_LENGTH),)},
        ),
    ),
    Case(
        "dc_key_mismatch_vendor_syndrome",
        **dc(),
        steps=(Write("d", ("dst", 0), payload=W8, dct="t", dc_key=0xBAD), Ring(("d",))),
        expect=Expect(
            cqes={
                "scq": (
                    CqeSpec(
                        REQ_ERR, qp="d", syndrome=Syndrome.TRANSPORT_RETRY_EXC, vendor_syndrome=0x81
                    ),
                )
            },
            dct_key_violations={"t": 1},
            errors={0: (completion_err("d", 0, Syndrome.TRANSPORT_RETRY_EXC),)},
        ),
    ),
]

CASE_IDS = [c.name for c in CASES]
