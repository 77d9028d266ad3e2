"""The vocabulary of conformance cases: setup objects, steps and expected outcomes.

A case is plain data: what to create (MRs with access flags, CQs, RC QPs, DCIs, DCTs), what to do
(post WQEs into SQ memory, ring doorbells, post receives, consume CQEs, change QP states) and what
must be true afterwards (target memory, every CQE written, QP states, counter deltas, error
records). Nothing here knows which engine runs it (conformance_engines.py says that).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gicbench.fabric.base import ACCESS_ALL, Access, QpState

# ---- setup ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mr:
    name: str
    rank: int
    length: int = 4096
    access: Access = ACCESS_ALL
    init: bytes = b""  # initial contents from offset 0


@dataclass(frozen=True)
class Cq:
    name: str
    rank: int
    ncqe: int = 16


@dataclass(frozen=True)
class Qp:
    """RC QP (connected to `peer`) or DCI (`dci=True`). `state`: where setup leaves it."""

    name: str
    rank: int
    cq: str
    sq_wqebbs: int = 16
    peer: str | None = None
    recv_cq: str | None = None
    rq_wqes: int = 0
    dci: bool = False
    state: QpState = QpState.RTS


@dataclass(frozen=True)
class Dct:
    name: str
    rank: int
    cq: str
    key: int = 0x1234_5678_9ABC_DEF0
    rq_wqes: int = 0


# ---- steps ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Write:
    """RDMA WRITE (WRITE_IMM with `imm`), inline `payload` or pointer `src` = (mr, off, len).

    `dst` = (mr, offset). Faults: `rkey_xor` spoils the rkey, `raddr_delta` moves the address,
    `lkey_xor` spoils the lkey. DC: `dct` names the target, `compact_av`, `dc_key` overrides.
    `withhold_ctrl`: the ctrl segment is not yet in SQ memory when the doorbell rings.
    """

    qp: str
    dst: tuple[str, int]
    payload: bytes | None = None
    src: tuple[str, int, int] | None = None
    signaled: bool = True
    imm: int | None = None
    rkey_xor: int = 0
    raddr_delta: int = 0
    lkey_xor: int = 0
    dct: str | None = None
    compact_av: bool = False
    dc_key: int | None = None
    withhold_ctrl: bool = False


@dataclass(frozen=True)
class FetchAdd:
    """ATOMIC fetch-add of `add` on the 8 bytes at `dst`; the old value lands at `result`."""

    qp: str
    dst: tuple[str, int]
    add: int
    result: tuple[str, int]
    signaled: bool = True
    raddr_delta: int = 0
    dct: str | None = None
    compact_av: bool = False


@dataclass(frozen=True)
class Nop:
    qp: str
    signaled: bool = False


@dataclass(frozen=True)
class Ring:
    """dbrec then doorbell for every WQE posted on these QPs since their last ring; then wait
    for the engines (all rung first, then all engines drain concurrently)."""

    qps: tuple[str, ...]


@dataclass(frozen=True)
class PublishCtrl:
    """Write the withheld ctrl segments of `qp` (the late store a missing fence allows)."""

    qp: str


@dataclass(frozen=True)
class PostRecv:
    """Post `count` receives on the RQ of a QP or DCT named `target`."""

    target: str
    count: int = 1


@dataclass(frozen=True)
class ConsumeCq:
    """Consume `count` CQEs (they must be there) and publish the consumer index."""

    cq: str
    count: int


@dataclass(frozen=True)
class Modify:
    qp: str
    state: QpState


@dataclass(frozen=True)
class Repeat:
    """`steps` `times` times (e.g. many fetch-adds)."""

    times: int
    steps: tuple[object, ...]


# ---- expectations --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CqeSpec:
    """One CQE as it must appear. None = not checked. `qp` names the QP/DCT whose number the
    CQE carries; `syndrome` only for error CQEs."""

    opcode: int
    qp: str | None = None
    wqe_counter: int | None = None
    syndrome: int | None = None
    wqe_opcode: int | None = None
    imm: int | None = None
    byte_cnt: int | None = None


@dataclass(frozen=True)
class ErrSpec:
    kind: str  # stale_wqe | not_rts | cq_overrun | bad_doorbell | completion
    qp: str | None = None
    expected: int | None = None
    found: int | None = None


@dataclass(frozen=True)
class Expect:
    memory: tuple[tuple[str, int, bytes], ...] = ()
    cqes: dict[str, tuple[CqeSpec, ...]] = field(default_factory=dict)  # every CQ not listed: none
    states: dict[str, QpState] = field(default_factory=dict)
    counters: dict[int, dict[str, int]] = field(default_factory=dict)  # rank -> deltas
    errors: dict[int, tuple[ErrSpec, ...]] = field(default_factory=dict)  # rank -> records
    cq_status: dict[str, int] = field(default_factory=dict)  # 0 OK, 9 CQ_OVERFLOW
    dct_key_violations: dict[str, int] = field(default_factory=dict)
    # fetch-add results that, together, must be exactly {0, add, 2*add, ...} (concurrent adders)
    fa_olds: tuple[tuple[str, int, int], ...] = ()  # (mr, offset, count) of 8-byte results
    fa_step: int = 0


@dataclass(frozen=True)
class Case:
    name: str
    mrs: tuple[Mr, ...]
    cqs: tuple[Cq, ...]
    qps: tuple[Qp, ...]
    steps: tuple[object, ...]
    expect: Expect
    dcts: tuple[Dct, ...] = ()
    world: int = 2
