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
    PostRecv,
    PublishCtrl,
    Qp,
    Repeat,
    Ring,
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

CASE_IDS = [c.name for c in CASES]
