"""What cuda/doca/ needs from gicbench's queues, as the plain records its kernels read.

QUEUE_DTYPE is the twin of `struct gicbench_doca_queue` (cuda/doca/gicbench_doca.cuh): one
record per QP, filled by `queue_record()` from a QueuePair, its send CQ and the device addresses
EmuFabric.register_cuda() returned (or the SendQueue/CompletionQueue device_* fields other
providers fill); the init kernel turns each into DOCA's `struct doca_gpu_dev_verbs_qp`.
LANE_DTYPE, JOB_DTYPE and RESULT_DTYPE are the twins of the posting kernels' structures
(cuda/doca/doca_kernels.cuh). `queue_kwargs()` says how a QP and its CQ must be created for a
handler. docs/doca.md explains every field.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import ConfigError
from ...fabric.base import CompletionQueue, MemoryDomain, MemoryRegion, QueuePair, host_view

QP_BYTES = 296  # sizeof(struct doca_gpu_dev_verbs_qp), checked by the adaptor's static_assert
MAX_WQEBBS = 32768  # DOCA keeps the SQ size in a uint16 (sq_wqe_num)
MAX_INLINE = 28  # DOCA_GPUNETIO_VERBS_MAX_INLINE_SIZE (p() writes 1..8 bytes)


class NicHandler(enum.IntEnum):
    """enum doca_gpu_dev_verbs_nic_handler (who rings the NIC)."""

    CPU_PROXY = 1
    GPU_SM_DB = 2
    GPU_SM_BF = 6
    GPU_SM_NO_DBR = 10
    CPU_PROXY_FREE_FLOW = 17

    @property
    def cli(self) -> str:
        return self.name.lower().replace("_", "-")

    @property
    def kernel(self) -> str:
        return self.name.lower()

    @property
    def host_thread(self) -> bool:
        return self in (NicHandler.CPU_PROXY, NicHandler.CPU_PROXY_FREE_FLOW)


class Sharing(enum.IntEnum):
    """enum doca_gpu_dev_verbs_resource_sharing_mode."""

    EXCLUSIVE = 0
    CTA = 1
    GPU = 2


class Scope(enum.IntEnum):
    """enum doca_gpu_dev_verbs_exec_scope."""

    THREAD = 0
    WARP = 1


class CqType(enum.IntEnum):
    """enum doca_gpu_dev_verbs_cq_type (the two gicbench fills; _COLLAPSED_HOST needs a host
    thread advancing cqe_ci inside DOCA's structure, which gicbench does not offer)."""

    CQ_64B = 0
    CQ_64B_COLLAPSED = 1


class MemType(enum.IntEnum):
    HOST = 1
    GPU = 2


class Op(enum.IntEnum):
    """enum gicbench_doca_op (cuda/doca/doca_kernels.cuh)."""

    PUT = 0
    P = 1
    PUT_SIGNAL = 2
    P_SIGNAL = 3
    SIGNAL = 4


STATUS = {
    0: "ok",
    1: "unsupported",
    2: "timed out",
    3: "error CQE",
    4: "bad arguments",
    5: "no sequence word from the peer",
}
ENOSEQ = 5

QUEUE_DTYPE = np.dtype([
    ("sq_buf", "<u8"), ("sq_dbrec", "<u8"), ("sq_db", "<u8"), ("cq_buf", "<u8"),
    ("cq_dbrec", "<u8"), ("start", "<u8"), ("qpn", "<u4"), ("sq_wqebbs", "<u4"), ("cqn", "<u4"),
    ("cq_ncqe", "<u4"), ("nic_handler", "<u4"), ("cq_type", "<u4"), ("mem_type", "<u4"),
    ("reserved", "<u4"),
])  # fmt: skip
LANE_DTYPE = np.dtype([
    ("src", "<u8"), ("dst", "<u8"), ("sig_remote", "<u8"), ("sig_local", "<u8"),
    ("src_lkey_be", "<u4"), ("dst_rkey_be", "<u4"), ("sig_rkey_be", "<u4"), ("sig_lkey_be", "<u4"),
    ("src_dev", "<u8"),
])  # fmt: skip
JOB_DTYPE = np.dtype([
    ("op", "<u4"), ("size", "<u4"), ("iters", "<u4"), ("nqps", "<u4"), ("seed", "<u8"),
    ("sig_val", "<u8"), ("timeout_ns", "<u8"), ("first", "<u4"), ("slots", "<u4"), ("flags", "<u4"),
    ("nquiet", "<u4"), ("window", "<u4"), ("max_windows", "<u4"), ("reply", "<u8"),
    ("mode", "<u4"), ("reserved", "<u4"),
])  # fmt: skip
# gicbench_doca_job.mode of the latency kernel: post and wait the ticket; post and wait for the
# peer's reply (round trip); wait for the peer's request, then post the answer (responder)
MODE_LATENCY, MODE_RTT, MODE_RESPOND = 0, 1, 2
VALUE_FROM_SRC = 1  # p writes the source's 8 bytes at the op's offset (msg-rate)
SEQ = 2  # the op number + 1 is stamped in the message's last 8 bytes and is p's value (single-op)
RESULT_DTYPE = np.dtype([
    ("status", "<i4"), ("cq_status", "<i4"), ("ticket", "<u8"), ("post_ns", "<u8"),
    ("total_ns", "<u8"),
])  # fmt: skip
assert (QUEUE_DTYPE.itemsize, LANE_DTYPE.itemsize, JOB_DTYPE.itemsize, RESULT_DTYPE.itemsize) == (
    80, 56, 80, 32)  # fmt: skip


def be32(v: int) -> int:
    """The value whose little-endian bytes are `v` big-endian: DOCA takes mkeys pre-swapped
    (DOCA_GPUNETIO_VERBS_MKEY_SWAPPED = 1)."""
    return int.from_bytes((int(v) & 0xFFFFFFFF).to_bytes(4, "little"), "big")


@dataclass(frozen=True)
class QueueArgs:
    """How to create a QP and its send CQ for a handler (EmuFabric.create_qp/create_cq kwargs)."""

    qp: dict[str, Any]
    cq: dict[str, Any]
    ncqe: int


def queue_kwargs(handler: NicHandler, cq_type: CqType, sq_wqebbs: int) -> QueueArgs:
    """DOCA's CQ contract: one CQE per WQE (every WQE signaled), CQE i for WQE i, so the send CQ
    serves this QP alone and holds at least the SQ's depth; DOCA never publishes a consumer index
    (it would only in doca_gpu_dev_verbs_cq_update_dbrec), so the CQ ignores overrun (cqc.oi).
    GPU_SM_NO_DBR needs a DBR-less SQ."""
    _check_wqebbs(sq_wqebbs)
    return QueueArgs(
        qp={"dbr": NicHandler(handler) != NicHandler.GPU_SM_NO_DBR},
        cq={"collapsed": CqType(cq_type) == CqType.CQ_64B_COLLAPSED, "overrun_ignore": True},
        ncqe=sq_wqebbs,
    )


def _check_wqebbs(n: int) -> None:
    if not isinstance(n, int) or n < 1 or n & (n - 1) or n > MAX_WQEBBS:
        raise ConfigError("sq_wqebbs", n, f"a power of two in 1..{MAX_WQEBBS} (DOCA's uint16)")


def proxy_bytes(handler: NicHandler, sq_wqebbs: int) -> int:
    """Host-mapped bytes the GPU writes for a host-thread handler: one 8-byte proxy word
    (CPU_PROXY) or one 8-byte ready slot per WQEBB (CPU_PROXY_FREE_FLOW); 0 otherwise."""
    h = NicHandler(handler)
    if h == NicHandler.CPU_PROXY:
        return 8
    return 8 * sq_wqebbs if h == NicHandler.CPU_PROXY_FREE_FLOW else 0


def _dev(field: str, own: int, table: Mapping[int, Mapping[str, int]] | None, key: int,
         name: str) -> int:  # fmt: skip
    if own:
        return own
    if table is not None and key in table and table[key].get(name):
        return int(table[key][name])
    raise ConfigError(field, 0, "a device address: register the queues with CUDA first "
                      "(EmuFabric.register_cuda()) or create them in GPU memory")  # fmt: skip


def queue_record(
    qp: QueuePair,
    handler: NicHandler,
    cq_type: CqType,
    device: Mapping[str, Any] | None = None,
    *,
    proxy_addr: int = 0,
    start: int = 0,
) -> np.ndarray:
    """One QUEUE_DTYPE record for `qp`. device: EmuFabric.register_cuda()'s result (its "qps" and
    "cqs" tables) where the QueuePair's own device_* fields are 0. proxy_addr: the GPU address of
    the proxy word / ready slots (host-thread handlers; see proxy_bytes()). start: the index of
    the next WQE, equal to the CQEs the CQ has produced (0 for a fresh QP)."""
    h, t = NicHandler(handler), CqType(cq_type)
    sq, cq = qp.sq, qp.sq.cq
    _check_wqebbs(sq.wqebb_cnt)
    if qp.dci:
        raise ConfigError("qp", f"DCI {qp.qpn:#x}", "an RC QP (DOCA's one-sided verbs build no "
                          "address vector)")  # fmt: skip
    if cq.ncqe < sq.wqebb_cnt:
        raise ConfigError("cq.ncqe", cq.ncqe, f">= the SQ's {sq.wqebb_cnt} WQEBBs (one CQE per "
                          "WQE; see queue_kwargs)")  # fmt: skip
    if h.host_thread and not proxy_addr:
        need = proxy_bytes(h, sq.wqebb_cnt)
        raise ConfigError("proxy_addr", proxy_addr,
                          f"the GPU address of {need} host-mapped bytes for {h.cli}")  # fmt: skip
    if not h.host_thread and proxy_addr:
        raise ConfigError("proxy_addr", proxy_addr, f"0 for {h.cli} (the GPU rings the NIC)")
    if not isinstance(start, int) or start < 0:
        raise ConfigError("start", start, "an int >= 0")
    qps = device.get("qps") if device else None
    cqs = device.get("cqs") if device else None
    rec = np.zeros((), QUEUE_DTYPE)
    rec["sq_buf"] = _dev("sq.device_buf", sq.device_buf, qps, sq.qpn, "buf")
    rec["sq_dbrec"] = _dev("sq.device_dbrec", sq.device_dbrec, qps, sq.qpn, "dbrec")
    rec["sq_db"] = (
        proxy_addr
        if h.host_thread
        else _dev("sq.device_doorbell", sq.device_doorbell, qps, sq.qpn, "doorbell")
    )
    rec["cq_buf"] = _dev("cq.device_buf", cq.device_buf, cqs, cq.cqn, "buf")
    rec["cq_dbrec"] = _dev("cq.device_dbrec", cq.device_dbrec, cqs, cq.cqn, "dbrec")
    rec["start"] = start
    rec["qpn"], rec["sq_wqebbs"], rec["cqn"], rec["cq_ncqe"] = qp.qpn, sq.wqebb_cnt, cq.cqn, cq.ncqe
    rec["nic_handler"], rec["cq_type"] = int(h), int(t)
    rec["mem_type"] = int(MemType.GPU if sq.domain == MemoryDomain.DEVICE else MemType.HOST)
    return rec


def lane_record(
    src: MemoryRegion,
    dst_addr: int,
    dst_rkey: int,
    *,
    sig_remote: int = 0,
    sig_rkey: int = 0,
    sig_local: MemoryRegion | None = None,
    src_addr: int | None = None,
    src_dev: int = 0,
) -> np.ndarray:
    """One LANE_DTYPE record. Addresses are the NIC's (MemoryRegion.addr, the peer's buffer
    address as its endpoint says), not GPU pointers: the WQE names them for the NIC. src_addr:
    where in `src` the lane's slice starts (default its start); src_dev: the GPU's address of
    that slice (payload flags VALUE_FROM_SRC / SEQ read or stamp it)."""
    rec = np.zeros((), LANE_DTYPE)
    rec["src"] = src.addr if src_addr is None else src_addr
    rec["src_lkey_be"], rec["src_dev"] = be32(src.lkey), src_dev
    rec["dst"], rec["dst_rkey_be"] = dst_addr, be32(dst_rkey)
    rec["sig_remote"], rec["sig_rkey_be"] = sig_remote, be32(sig_rkey)
    if sig_local is not None:
        rec["sig_local"], rec["sig_lkey_be"] = sig_local.addr, be32(sig_local.lkey)
    return rec


def job_record(op: Op, size: int, iters: int, nqps: int, *, seed: int = 0, sig_val: int = 1,
               timeout_ns: int = 5_000_000_000, first: int = 0, slots: int = 0, flags: int = 0,
               nquiet: int = 0, window: int = 0, max_windows: int = 0, reply: int = 0,
               mode: int = MODE_LATENCY) -> np.ndarray:  # fmt: skip
    o = Op(op)
    if o in (Op.P, Op.P_SIGNAL) and size != 8:
        raise ConfigError("size", size, "8 for p/p-signal (one inline uint64)")
    if o in (Op.PUT, Op.PUT_SIGNAL) and not 1 <= size <= 1 << 30:
        raise ConfigError("size", size, "1..2**30 bytes (DOCA splits larger puts)")
    rec = np.zeros((), JOB_DTYPE)
    rec["op"], rec["size"], rec["iters"], rec["nqps"] = int(o), size, iters, nqps
    rec["seed"], rec["sig_val"], rec["timeout_ns"] = seed, sig_val, timeout_ns
    if flags & ~(VALUE_FROM_SRC | SEQ):
        raise ConfigError("flags", flags, "a combination of VALUE_FROM_SRC and SEQ")
    rec["first"], rec["slots"], rec["flags"], rec["nquiet"] = first, slots, flags, nquiet
    rec["window"], rec["max_windows"] = window, max_windows
    if mode not in (MODE_LATENCY, MODE_RTT, MODE_RESPOND):
        raise ConfigError("mode", mode, "MODE_LATENCY, MODE_RTT or MODE_RESPOND")
    if mode != MODE_LATENCY and (not reply or not flags & SEQ):
        raise ConfigError("reply", reply, "the GPU address of the landing buffer, with flag SEQ, "
                          "for a round trip or a responder")  # fmt: skip
    rec["reply"], rec["mode"] = reply, mode
    return rec


def supported(handler: NicHandler, scope: Scope, op: Op) -> bool:
    """Twin of gicbench_doca_supported(): DOCA's warp-scope p/put_signal/p_signal/signal post
    nothing (stubs in onesided.cuh); GPU_SM_BF is rung for put and p only."""
    if Scope(scope) == Scope.WARP:
        return Op(op) == Op.PUT
    return NicHandler(handler) != NicHandler.GPU_SM_BF or Op(op) in (Op.PUT, Op.P)


SHAPES = ("post", "latency")  # rate shape (post all, wait last) / latency shape (post, wait)


def kernel_name(handler: NicHandler, sharing: Sharing, scope: Scope, shape: str = "post") -> str:
    if shape not in SHAPES:
        raise ConfigError("shape", shape, " or ".join(SHAPES))
    return (f"gicbench_doca_{shape}_{NicHandler(handler).kernel}_{Sharing(sharing).name.lower()}"
            f"_{Scope(scope).name.lower()}")  # fmt: skip


def units(sharing: Sharing, scope: Scope, nqps: int, blocks: int, threads: int) -> int:
    """Issuing units of a launch (threads, or warps in warp scope); EXCLUSIVE needs one per QP."""
    per = 32 if Scope(scope) == Scope.WARP else 1
    if Scope(scope) == Scope.WARP and threads % 32:
        raise ConfigError("threads", threads, "a multiple of 32 in warp scope")
    n = blocks * threads // per
    if Sharing(sharing) == Sharing.EXCLUSIVE and n != nqps:
        raise ConfigError("threads", threads, f"{nqps} issuing units in all (one per QP) for "
                          "exclusive sharing")  # fmt: skip
    if Sharing(sharing) == Sharing.CTA and blocks != nqps:
        raise ConfigError("blocks", blocks, f"{nqps} (one block per QP) for cta sharing")
    return n


CQE_OP_OWN = 63  # offset of op_own in a 64-byte CQE
DOCA_CQE_INIT = 0xF1  # opcode INVALID, owner 1


def init_cq(cq: CompletionQueue) -> None:
    """Give every CQE op_own = 0xF1 (INVALID, owner 1), as DOCA's host library prepares its CQs.
    DOCA's sm_90 poll of a 64B CQ tests the owner bit alone (doca_priv_gpu_dev_verbs_poll_cq_
    device_at), so a ring starting at rdma-core's 0xF0 (owner 0, what emu writes at creation)
    reads as complete on the first lap. Host-visible rings only (host, host-mapped); a ring in
    GPU memory needs the same bytes written on the GPU."""
    if cq.domain == MemoryDomain.DEVICE or not cq.buf:
        raise ConfigError("cq.domain", cq.domain, "host or host-mapped (a GPU-resident ring is "
                          "initialised on the GPU)")  # fmt: skip
    ring = host_view(cq.buf, cq.ncqe * 64).reshape(cq.ncqe, 64)
    ring[:, CQE_OP_OWN] = DOCA_CQE_INIT


def place(sharing: Sharing, unit: int, nunits: int, nqps: int, blocks: int) -> tuple[int, int, int]:
    """Twin of gicbench_doca_unit(): (QP index, rank of the unit on it, units per QP)."""
    s = Sharing(sharing)
    if s == Sharing.EXCLUSIVE:
        return unit, 0, 1
    if s == Sharing.CTA:
        per = nunits // blocks
        return unit // per, unit % per, per
    return unit % nqps, unit // nqps, -(-nunits // nqps)


def slot(first: int, i: int, per_qp: int, rank: int, lane: int | None = None) -> int:
    """Twin of gicbench_doca_payload()'s slot: op n = first + i of the unit of `rank` on its QP
    (lane of a warp in warp scope), before the wrap at `slots`."""
    s = (first + i) * per_qp + rank
    return s if lane is None else s * 32 + lane
