"""The vocabulary of conformance cases: setup objects, steps and expected outcomes.

A case is plain data: what to create (MRs with access flags, CQs, RC QPs, DCIs, DCTs), what to do
(post WQEs into SQ memory, ring doorbells, post receives, consume CQEs, change QP states) and what
must be true afterwards (target memory, every CQE written, QP states, counter deltas, error
records). Nothing here knows which engine runs it (conformance_engines.py says that).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gicbench.fabric.base import ACCESS_ALL, Access, QpState
from gicbench.fabric.emu.gpi_format import GpiDesc

# ---- setup ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mr:
    name: str
    rank: int
    length: int = 4096
    access: Access = ACCESS_ALL
    init: bytes = b""  # initial contents from offset 0
    pd: int = 0


@dataclass(frozen=True)
class Cq:
    name: str
    rank: int
    ncqe: int = 16
    collapsed: bool = False  # mlx5 cqc.cc: every CQE lands in entry 0
    overrun_ignore: bool = False  # cqc.oi


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
    dbr: bool = True  # False: DBR-less SQ (producer index from the doorbell)
    wqe_sig: bool = False
    max_inline: int = 0
    pd: int = 0


@dataclass(frozen=True)
class Dct:
    name: str
    rank: int
    cq: str
    key: int = 0x1234_5678_9ABC_DEF0
    rq_wqes: int = 0
    pd: int = 0


@dataclass(frozen=True)
class GpiWin:
    """Window `handle` of a GPI queue: `length` bytes (None: the rest) of MR `mr` from `offset`,
    at the MR's rank. `key_xor` spoils its key (a bad rkey)."""

    handle: int
    mr: str
    offset: int = 0
    length: int | None = None
    key_xor: int = 0


@dataclass(frozen=True)
class Gpi:
    """A GPI queue of rank `rank` (docs/gpi.md) with these windows; `nwindows` defaults to the
    largest handle + 1."""

    name: str
    rank: int
    depth: int = 8
    ncounters: int = 2
    windows: tuple[GpiWin, ...] = ()
    nwindows: int | None = None
    pd: int = 0


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
class MaskedAtomic:
    """An extended (masked) atomic on `size`-byte operands at `dst`; the old value lands at
    `result`. op "fa": masked fetch-add of `value` with field boundary `mask` (0: a plain add);
    op "cs": masked compare-and-swap, `value` swapped in under `mask` when the bits of
    `compare_mask` equal `compare`. Faults: `raddr_delta` moves the address, `result_len`
    overrides the data segment's byte count, `opmod` the ctrl's operand-size modifier."""

    qp: str
    op: str
    size: int
    dst: tuple[str, int]
    result: tuple[str, int]
    value: int
    mask: int = 0
    compare: int = 0
    compare_mask: int = 0
    signaled: bool = True
    raddr_delta: int = 0
    result_len: int | None = None
    opmod: int | None = None
    dct: str | None = None
    compact_av: bool = False


@dataclass(frozen=True)
class Nop:
    qp: str
    signaled: bool = False


@dataclass(frozen=True)
class Post:
    """Any WQE, segment by segment: ctrl, a raddr segment when `dst` is given, an atomic segment
    when `atomic` = (swap_add, compare), then one inline segment (`payload`) or pointer data
    segments `sges` = ((mr, offset, length), ...). `sign`: fill the mlx5 signature byte.
    `torn`: only the ctrl reaches SQ memory before the ring (the body follows at PublishBody).
    `qpn_xor`: the ctrl names another QPN (a slot left by another QP's submitter)."""

    qp: str
    opcode: int
    dst: tuple[str, int] | None = None
    sges: tuple[tuple[str, int, int], ...] = ()
    payload: bytes | None = None
    atomic: tuple[int, int] | None = None
    imm: int = 0
    signaled: bool = True
    sign: bool = False
    torn: bool = False
    qpn_xor: int = 0  # the ctrl carries another QP's number


@dataclass(frozen=True)
class GpiPost:
    """Reserve the next index of GPI queue `gpi` (a fetch-add on its pi, as a producer does) and
    write descriptor `desc` there with that index's owner bits, then let the engines run.
    `segments`: only these segments now (a torn descriptor; GpiComplete writes the rest)."""

    gpi: str
    desc: GpiDesc
    segments: tuple[int, ...] | None = None


@dataclass(frozen=True)
class GpiComplete:
    """Write the withheld segments of every torn descriptor of `gpi`, then let the engines run."""

    gpi: str


@dataclass(frozen=True)
class GpiExpect:
    """A GPI queue's status. last_error: (descriptor index, syndrome, destination) or None;
    counters: (completed, error flag) of each counter, in order."""

    ci: int
    errors: int = 0
    last_error: tuple[int, int, int] | None = None
    counters: tuple[tuple[int, bool], ...] | None = None


@dataclass(frozen=True)
class CheckNow:
    """Check, at this point of the steps, memory and GPI queues (as Expect's fields)."""

    memory: tuple[tuple[str, int, bytes], ...] = ()
    gpi: dict[str, GpiExpect] = field(default_factory=dict)


@dataclass(frozen=True)
class Ring:
    """Announce every WQE posted on these QPs since their last ring; then wait for the engines
    (all rung first, then all engines drain concurrently).

    convention: "last" (rdma-core: the doorbell carries the last WQE's ctrl head) or "next"
    (IBGDA / DOCA GPUNetIO: the next producer index, opcode 0, ds 0).
    dbrec: "before" (record, then doorbell), "none" (doorbell only: the record lags, or a
    DBR-less QP), "double" (DOCA's default: doorbell, record, doorbell).
    bf: the doorbell is a 64-byte BlueFlame copy of the WQE's first basic block.
    qpn_xor: ring with a wrong QPN in the doorbell value.
    wqe: rdma-core convention naming this (absolute) WQE index instead of the last one posted.
    """

    qps: tuple[str, ...]
    convention: str = "last"
    dbrec: str = "before"
    bf: bool = False
    qpn_xor: int = 0
    wqe: int | None = None


@dataclass(frozen=True)
class Rering:
    """Store the same doorbell value again (no memory change), then drain."""

    qp: str


@dataclass(frozen=True)
class PublishDbrec:
    """Write the send doorbell record up to the producer index (a late record), then drain."""

    qp: str


@dataclass(frozen=True)
class PublishBody:
    """Write the withheld bodies of torn WQEs, then drain."""

    qp: str


@dataclass(frozen=True)
class Skip:
    """Advance the producer index by `wqebbs` without writing the slots (they stay as they are,
    zero-filled on a fresh SQ): what a NIC reading too early would find."""

    qp: str
    wqebbs: int = 1


@dataclass(frozen=True)
class PublishCtrl:
    """Write the withheld ctrl segments of `qp` (the late store a missing fence allows)."""

    qp: str


@dataclass(frozen=True)
class PostRecv:
    """Post `count` receives on the RQ of a QP or DCT named `target`; `sge` = (mr, off, len):
    the buffer a SEND lands in (WRITE_IMM needs none)."""

    target: str
    count: int = 1
    sge: tuple[str, int, int] | None = None


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
    vendor_syndrome: int | None = None


@dataclass(frozen=True)
class ErrSpec:
    kind: str  # stale_wqe | not_rts | cq_overrun | bad_doorbell | completion | gpi_error | ...
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
    # collapsed CQs: what entry 0 holds at the end (the ring walk does not apply)
    cqe0: dict[str, CqeSpec] = field(default_factory=dict)
    qp_counters: dict[str, dict[str, int]] = field(default_factory=dict)  # per-QP values
    gpi: dict[str, GpiExpect] = field(default_factory=dict)  # GPI queues' status


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
    gpis: tuple[Gpi, ...] = ()
