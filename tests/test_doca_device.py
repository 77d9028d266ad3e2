"""DOCA GPUNetIO's device verbs, unchanged, posting on emu queues from a GPU (marked gpu).

Two emu ranks in one process (CPU engine threads), rank 0's RC QPs host-mapped into the GPU
(EmuFabric.register_cuda), DOCA QP structures built by cuda/doca from them. For every NIC handler:
every op DOCA offers, thread scope in each sharing mode, and warp scope; payloads land where they
must, signals add up, every unit's last ticket completes, and the engine's stale-WQE and
bad-doorbell counters read zero (dbrec_lag is reported: DOCA rings before it writes the record
by design); then the latency shape (post, wait, repeat) with per-op cycles. CPU_PROXY handlers
run the native host thread. Writes DOCA_DEVICE_REPORT (JSON lines) when that variable names a
file."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from doca_helpers import DocaQueues
from gpu_helpers import cupy_or_skip, doca_or_skip

from gicbench.fabric.base import Access, host_view
from gicbench.submit.doca.layout import (
    QP_BYTES,
    STATUS,
    CqType,
    NicHandler,
    Op,
    Scope,
    Sharing,
    job_record,
    lane_record,
    proxy_bytes,
    queue_kwargs,
    queue_record,
    supported,
)

DEPTH = 64
NQPS = 2
REGION = 1 << 16  # landing bytes per QP
REPORT: list[dict] = []
# The pair the DOCA kernels post on (resources.Traffic keywords): rank 0 to rank 1, lane i its
# own REGION of the source and of the landing; CPU engine threads, 64 MiB segments, sealed.
QUEUES = {"depth": DEPTH, "both_ways": False, "slice_bytes": REGION, "progress": "thread",
          "segment_bytes": 64 << 20, "prefix": "dd"}  # fmt: skip


def _gpu() -> None:
    cupy_or_skip()
    doca_or_skip()


class DeviceQueues(DocaQueues):
    """NQPS RC pairs, rank 0's queues as DOCA's layout asks (queue_kwargs, init_cq) for
    `handler` and `cq_type`; rank 0's source (REGION per QP) and fetch words, rank 1's landing
    (REGION per QP) and signal words, and, for a host-thread handler, the GPU's proxy words or
    ready slots (host-mapped, one MR for all QPs). CPU engine threads."""

    def __init__(self, handler: NicHandler, cq_type: CqType) -> None:
        super().__init__(queue_kwargs(handler, cq_type, DEPTH), NQPS, init_cqs=True, **QUEUES)
        self.handler = handler

    def create_mrs(self):
        bufs = super().create_mrs()
        f0, f1 = self.fabrics
        self.fetched = f0.register(NQPS * 8, Access.LOCAL_WRITE)
        self.signal = f1.register(NQPS * 8, ACCESS_SIG)
        nb = self.proxy_bytes = proxy_bytes(self.handler, DEPTH)
        self.words = None
        if nb:
            self.words = f0.register(NQPS * nb, Access.LOCAL_WRITE, domain="host-mapped")
        return bufs


@contextmanager
def world(handler: NicHandler, cq_type: CqType) -> Iterator[dict]:
    from gicbench.submit.doca.device import DocaDevice
    from gicbench.submit.doca.proxy import HostRinger

    with DeviceQueues(handler, cq_type) as dq:
        fs, qps = dq.fabrics, [pair[0] for pair in dq.rc]
        src, landing, signal, words, nb = (dq.src_mr(0), dq.landing_mr(1), dq.signal, dq.words,
                                           dq.proxy_bytes)  # fmt: skip
        dev_addrs = fs[0].register_cuda()
        if words is not None:
            host_view(words.addr, words.length)[:] = 0
        proxy = [(words.addr + i * nb, dev_addrs["mrs"][words.addr] + i * nb) if words else (0, 0)
                 for i in range(NQPS)]  # fmt: skip
        recs = np.stack([queue_record(q, handler, cq_type, dev_addrs, proxy_addr=p[1])
                         for q, p in zip(qps, proxy, strict=True)])  # fmt: skip
        lanes = np.stack([
            lane_record(
                _slice(src, i), landing.addr + i * REGION, landing.rkey,
                sig_remote=signal.addr + 8 * i, sig_rkey=signal.rkey,
                sig_local=_slice(dq.fetched, i, 8),
            ) for i in range(NQPS)
        ])  # fmt: skip
        dev = DocaDevice()
        if handler.host_thread:
            ringer = HostRinger()
            for q, p in zip(qps, proxy, strict=True):
                ringer.add(q, handler, p[0])
            ringer.start()
            dq.on_close(ringer.stop)
        yield {"fs": fs, "qps": qps, "dev": dev, "doca_qps": dev.build(recs), "lanes": lanes,
               "src": src, "landing": landing, "signal": signal}  # fmt: skip


def hang_state(w: dict) -> list[dict]:
    """Where each QP stands after a launch that did not end: DOCA's own indices (its QP
    structure in GPU memory: reserved, ready, producer; its SQ CQ's consumer index), the doorbell
    record, the engine's QP state and the first CQE (a collapsed CQ's only one)."""
    import cupy as cp

    raw = cp.asnumpy(w["doca_qps"])  # a copy on the legacy stream: the hung one is non-blocking
    out = []
    for j, qp in enumerate(w["qps"]):
        rec = raw[j * QP_BYTES:(j + 1) * QP_BYTES].view(np.uint64)  # 8-byte words
        cqe = host_view(qp.sq.cq.buf, 64)
        out.append({
            "qpn": qp.qpn, "rsvd": int(rec[0]), "ready": int(rec[1]), "pi": int(rec[2]),
            "cqe_ci": int(rec[184 // 8]),
            "dbrec_sq": int.from_bytes(host_view(qp.sq.dbrec + 4, 4).tobytes(), "big"),
            "engine": w["fs"][0].qp_state(qp).name,
            "cqe0_wqe_counter": int.from_bytes(cqe[60:62].tobytes(), "big"),
            "cqe0_op_own": int(cqe[63]),
        })  # fmt: skip
    return out


ACCESS_SIG = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_ATOMIC


def _slice(mr, i: int, n: int = REGION):
    import dataclasses

    return dataclasses.replace(mr, addr=mr.addr + i * n, length=n)


# (sharing, scope, blocks, threads): exclusive = one unit per QP; CTA: 2 blocks of 32 threads
# (block b -> QP b); GPU: 64 threads over 2 QPs; warp: one warp per QP (exclusive) or 2 warps
# sharing each QP (GPU). More WQEs than the SQ holds per QP in the shared modes: DOCA's own
# slot-availability wait (CQ polling) runs.
LAUNCHES = [
    (Sharing.EXCLUSIVE, Scope.THREAD, 1, NQPS),
    (Sharing.CTA, Scope.THREAD, NQPS, 32),
    (Sharing.GPU, Scope.THREAD, 1, 64),
    (Sharing.EXCLUSIVE, Scope.WARP, 1, 32 * NQPS),
    (Sharing.GPU, Scope.WARP, 2, 64),
]
OPS = [(Op.P, 8), (Op.PUT, 8), (Op.PUT_SIGNAL, 8), (Op.P_SIGNAL, 8), (Op.SIGNAL, 8)]
ITERS = 4


def launch_iters(cq_type: CqType, sharing: Sharing, scope: Scope, blocks: int,
                 threads: int) -> int:  # fmt: skip
    """ITERS, or on a collapsed CQ as many as keep one launch's WQEs on a QP within its SQ.
    DOCA's collapsed-CQ slot wait (doca_priv_gpu_dev_verbs_poll_cq_one_collapsed_at) takes
    the CQE of WQE i - 1 as the completion of WQE i, so a unit that reserves slot i + depth
    while WQE i is still unread overwrites it; the emulated NIC then finds a stale WQE in that
    slot and stops there, and the kernel waits for ever (seen on the H200 in the GPU- and
    CTA-shared modes). Within one SQ of WQEs per launch no slot is reused before the launch's
    final wait."""
    if cq_type != CqType.CQ_64B_COLLAPSED:
        return ITERS
    per_op = 2 * expected_units_per_qp(sharing, scope, blocks, threads) * (
        32 if scope == Scope.WARP else 1)  # a *_SIGNAL op is two WQEs
    return max(1, min(ITERS, DEPTH // per_op))


def expected_units_per_qp(sharing: Sharing, scope: Scope, blocks: int, threads: int) -> int:
    per = 32 if scope == Scope.WARP else 1
    return blocks * threads // per // NQPS


def run_case(w: dict, handler: NicHandler, sharing: Sharing, scope: Scope, blocks: int,
             threads: int, op: Op, size: int, iters: int = ITERS) -> dict:  # fmt: skip
    fs, landing, signal = w["fs"], w["landing"], w["signal"]
    lv = host_view(landing.addr, NQPS * REGION)
    lv[:] = 0
    sv = host_view(signal.addr, NQPS * 8).view(np.uint64)
    sv[:] = 0
    srcv = host_view(w["src"].addr, NQPS * REGION)
    srcv[:] = (np.arange(NQPS * REGION) * 7 + 3).astype(np.uint8)
    before = fs[0].counters()
    seed = 0x5EED_0000_0000 + int(op) * 0x1000_0000
    job = job_record(op, size, iters, NQPS, seed=seed, sig_val=3, timeout_ns=2_000_000_000)
    res = w["dev"].post(w["doca_qps"], w["lanes"], job, handler, sharing, scope, blocks, threads)
    fs[0].quiesce()
    fs[1].quiesce()
    after = fs[0].counters()
    delta = {k: after[k] - before[k] for k in after}
    statuses = sorted({STATUS[int(s)] for s in res["status"]})
    per_qp = expected_units_per_qp(sharing, scope, blocks, threads)
    lanes_per_unit = 32 if scope == Scope.WARP else 1
    slots = per_qp * iters * lanes_per_unit
    payload_ok, signal_ok = True, True
    if supported(handler, scope, op):
        for q in range(NQPS):
            region = lv[q * REGION : q * REGION + slots * 8]
            if op in (Op.P, Op.P_SIGNAL):
                want = (seed + np.arange(slots, dtype=np.uint64)).view(np.uint8)
                payload_ok &= bool(np.array_equal(region, want))
            elif op in (Op.PUT, Op.PUT_SIGNAL):
                payload_ok &= bool(
                    np.array_equal(region, srcv[q * REGION : q * REGION + slots * 8])
                )
            if op in (Op.PUT_SIGNAL, Op.P_SIGNAL, Op.SIGNAL):
                signal_ok &= int(sv[q]) == 3 * slots
    rec = {
        "handler": handler.cli, "sharing": sharing.name.lower(), "scope": scope.name.lower(),
        "op": op.name.lower(), "supported": supported(handler, scope, op), "status": statuses,
        "payload_ok": payload_ok, "signal_ok": signal_ok,
        "stale_wqes": delta["stale_wqes"], "dbrec_lag": delta["dbrec_lag"],
        "bad_doorbells": delta["bad_doorbells"], "errors": delta["errors"],
        "wqes": delta["wqes"], "doorbells": delta["doorbells"],
        "total_ns_max": int(res["total_ns"].max()),
    }  # fmt: skip
    REPORT.append(rec)
    return rec


def run_latency(w: dict, handler: NicHandler, scope: Scope, threads: int) -> dict:
    """Latency shape, exclusive: each unit posts one PUT, waits, ITERS times; every sample must
    have 0 < issue <= completion cycles and the payload must land."""
    op = Op.PUT
    fs, landing = w["fs"], w["landing"]
    lv = host_view(landing.addr, NQPS * REGION)
    lv[:] = 0
    srcv = host_view(w["src"].addr, NQPS * REGION)
    before = fs[0].counters()
    job = job_record(op, 8, ITERS, NQPS, timeout_ns=2_000_000_000)
    res, cycles = w["dev"].latency(w["doca_qps"], w["lanes"], job, handler, Sharing.EXCLUSIVE,
                                   scope, 1, threads)  # fmt: skip
    fs[0].quiesce()
    fs[1].quiesce()
    delta = {k: v - before[k] for k, v in fs[0].counters().items()}
    slots = ITERS * (32 if scope == Scope.WARP else 1)
    span = [slice(q * REGION, q * REGION + slots * 8) for q in range(NQPS)]
    payload_ok = all(np.array_equal(lv[sl], srcv[sl]) for sl in span)
    rec = {
        "handler": handler.cli, "sharing": "exclusive", "scope": scope.name.lower(),
        "op": "put", "shape": "latency", "status": sorted({STATUS[int(s)] for s in res["status"]}),
        "payload_ok": payload_ok,
        "cycles_ok": bool((cycles[..., 0] > 0).all() and (cycles[..., 0] <= cycles[..., 1]).all()),
        "issue_cycles_p50": int(np.median(cycles[..., 0])),
        "completion_cycles_p50": int(np.median(cycles[..., 1])),
        "stale_wqes": delta["stale_wqes"], "dbrec_lag": delta["dbrec_lag"],
        "bad_doorbells": delta["bad_doorbells"],
    }  # fmt: skip
    REPORT.append(rec)
    return rec


HANDLER_CQ = [
    (NicHandler.GPU_SM_DB, CqType.CQ_64B),
    (NicHandler.GPU_SM_DB, CqType.CQ_64B_COLLAPSED),
    (NicHandler.GPU_SM_NO_DBR, CqType.CQ_64B),
    (NicHandler.GPU_SM_BF, CqType.CQ_64B),
    (NicHandler.CPU_PROXY, CqType.CQ_64B),
    (NicHandler.CPU_PROXY_FREE_FLOW, CqType.CQ_64B),
]


@pytest.mark.gpu
@pytest.mark.parametrize(("handler", "cq_type"), HANDLER_CQ, ids=lambda v: v.name.lower())
def test_doca_posts_on_emu(handler: NicHandler, cq_type: CqType) -> None:
    _gpu()
    bad: list[dict] = []
    try:
        with world(handler, cq_type) as w:
            for sharing, scope, blocks, threads in LAUNCHES:
                for op, size in OPS:
                    try:
                        r = run_case(w, handler, sharing, scope, blocks, threads, op, size,
                                     launch_iters(cq_type, sharing, scope, blocks, threads))
                    except Exception as e:  # a hung or faulting kernel: record it, stop here
                        r = {"handler": handler.cli, "sharing": sharing.name.lower(),
                             "scope": scope.name.lower(), "op": op.name.lower(),
                             "error": f"{type(e).__name__}: {e}"}  # fmt: skip
                        r["state"] = hang_state(w)
                        REPORT.append(r)
                        bad.append(r)
                        print(json.dumps(r), file=sys.stderr, flush=True)  # before teardown
                        raise
                    r["cq_type"] = cq_type.name.lower()
                    ok = (r["status"] == (["ok"] if r["supported"] else ["unsupported"])
                          and r["payload_ok"] and r["signal_ok"] and r["stale_wqes"] == 0
                          and r["bad_doorbells"] == 0 and r["errors"] == 0)  # fmt: skip
                    if not r["supported"]:
                        ok = ok and r["wqes"] == 0
                    if not ok:
                        bad.append(r)
            for scope, threads in ((Scope.THREAD, NQPS), (Scope.WARP, 32 * NQPS)):
                r = run_latency(w, handler, scope, threads)
                r["cq_type"] = cq_type.name.lower()
                if not (r["status"] == ["ok"] and r["payload_ok"] and r["cycles_ok"]
                        and r["stale_wqes"] == 0 and r["bad_doorbells"] == 0):  # fmt: skip
                    bad.append(r)
            w["fs"][0].check()
    finally:
        path = os.environ.get("DOCA_DEVICE_REPORT")
        if path:
            with open(path, "a") as fh:
                for r in REPORT:
                    fh.write(json.dumps(r) + "\n")
        REPORT.clear()
    assert not bad, json.dumps(bad, indent=1)


LAT_ITERS = 1000  # ops per unit in the timed latency case


def run_op_latency(w: dict, handler: NicHandler, op: Op) -> dict:
    """Latency shape, exclusive, thread scope, one unit per QP: post one op of `op`, wait for its
    ticket, LAT_ITERS times. Payloads land slot by slot (p: seed + slot; put: the source's
    bytes), every signal op adds sig_val once to its QP's remote signal word, whose final value
    is read at the target; issue and put+completion cycles in ns at the measured SM clock."""
    from gicbench.submit.gpu_runtime import smclock

    fs, landing, signal = w["fs"], w["landing"], w["signal"]
    lv = host_view(landing.addr, NQPS * REGION)
    lv[:] = 0
    sv = host_view(signal.addr, NQPS * 8).view(np.uint64)
    sv[:] = 0
    srcv = host_view(w["src"].addr, NQPS * REGION)
    srcv[:] = (np.arange(NQPS * REGION) * 5 + 1).astype(np.uint8)
    before = fs[0].counters()
    seed = 0x51_0000_0000
    job = job_record(op, 8, LAT_ITERS, NQPS, seed=seed, sig_val=1, timeout_ns=2_000_000_000)
    res, cycles = w["dev"].latency(w["doca_qps"], w["lanes"], job, handler, Sharing.EXCLUSIVE,
                                   Scope.THREAD, 1, NQPS)  # fmt: skip
    fs[0].quiesce()
    fs[1].quiesce()
    delta = {k: v - before[k] for k, v in fs[0].counters().items()}
    import cupy as cp

    hz = smclock.measure(cp)
    payload_ok = signal_ok = True
    for q in range(NQPS):
        region = lv[q * REGION : q * REGION + LAT_ITERS * 8]
        if op in (Op.P, Op.P_SIGNAL):
            want = (seed + np.arange(LAT_ITERS, dtype=np.uint64)).view(np.uint8)
            payload_ok &= bool(np.array_equal(region, want))
        elif op in (Op.PUT, Op.PUT_SIGNAL):
            want = srcv[q * REGION : q * REGION + LAT_ITERS * 8]
            payload_ok &= bool(np.array_equal(region, want))
        else:  # a signal alone writes nothing else
            payload_ok &= not region.any()
        if op in (Op.PUT_SIGNAL, Op.P_SIGNAL, Op.SIGNAL):
            signal_ok &= int(sv[q]) == LAT_ITERS
        else:
            signal_ok &= int(sv[q]) == 0
    ns = smclock.cycles_to_ns(cycles.astype(np.float64), hz)
    rec = {
        "handler": handler.cli, "op": op.name.lower(), "shape": "latency-timed",
        "status": sorted({STATUS[int(s)] for s in res["status"]}), "payload_ok": payload_ok,
        "signal_ok": signal_ok, "issue_ns_p50": float(np.median(ns[..., 0])),
        "completion_ns_p50": float(np.median(ns[..., 1])), "sm_clock_hz": hz,
        "wqes": delta["wqes"], "stale_wqes": delta["stale_wqes"], "dbrec_lag": delta["dbrec_lag"],
        "bad_doorbells": delta["bad_doorbells"], "errors": delta["errors"],
    }  # fmt: skip
    REPORT.append(rec)
    return rec


@pytest.mark.gpu
@pytest.mark.parametrize("handler", list(NicHandler), ids=lambda v: v.name.lower())
def test_every_op_timed_and_validated(handler: NicHandler) -> None:
    """put, p, put_signal, p_signal and signal (ATOMIC_FA on the remote word) timed one at a
    time through DOCA's calls; the figures go to DOCA_DEVICE_REPORT (no timing is asserted)."""
    _gpu()
    bad: list[dict] = []
    try:
        with world(handler, CqType.CQ_64B) as w:
            for op, _ in OPS:
                if not supported(handler, Scope.THREAD, op):
                    continue
                r = run_op_latency(w, handler, op)
                wqes = LAT_ITERS * NQPS * (2 if op in (Op.PUT_SIGNAL, Op.P_SIGNAL) else 1)
                if not (r["status"] == ["ok"] and r["payload_ok"] and r["signal_ok"]
                        and r["wqes"] == wqes and r["stale_wqes"] == r["bad_doorbells"] == 0
                        and r["errors"] == 0):  # fmt: skip
                    bad.append(r)
    finally:
        path = os.environ.get("DOCA_DEVICE_REPORT")
        if path:
            with open(path, "a") as fh:
                for r in REPORT:
                    fh.write(json.dumps(r) + "\n")
        REPORT.clear()
    assert not bad, json.dumps(bad, indent=1)
