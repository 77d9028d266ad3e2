"""Benchmark (not a test): the CPU engine with `--nic-model none` and with a NIC model side by
side, beside the first paper's figures (arXiv 2610.01380, P-IB), with the ratios.

Runs `mpiexec -n 2 gicbench run ... --json` for single-op (8 B inline and pointer, inline 8-256 B),
msg-rate (Table 5's one-thread rows and a 16-QP row), payload (8 B-1 MiB, the first size at 90%
of the 24.8 GB/s reference) and, with --proxy, mini-proxy's proxy-rate (B = 1 and 16); then
the engine's own rate with no model, a zero-cost model and the model (bench_rate, the native
poster of bench/emu_engine.py). Every number a model produced is labelled modelled; a point
whose engine fell behind the model is marked "engine below model" (nic_model_saturated): its
number is the CPU engine's, not the model's. The paper's figures are GPU paths on ConnectX-7
hardware; the host submitter's software costs are in emu's numbers and not in the model.

    python bench/nic_model.py                    # prints a Markdown report
    python bench/nic_model.py -o results.md --json results.json --quick
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # its idle threads spin on the two cores

PRESET = "cx7-200g-ib-hopper"
REFERENCE_GBPS = 24.8  # the paper's Fig. 8 reference
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1",
           "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
           "OPENBLAS_NUM_THREADS": "1"}  # fmt: skip

# The paper's figures for the points below (P-IB, mini-gda unless said; µs, M msg/s, bytes).
PAPER = {
    ("single-op", "put_completion", "inline", 8): (4.03, "Table 3, mini-gda inline"),
    ("single-op", "put_completion", "pointer", 8): (4.64, "Table 3, mini-gda non-inline"),
    ("single-op", "round_trip", "inline", 8): (6.85, "Table 3, mini-gda RTT"),
    ("msg-rate", 1, 1, 1): (1.79, "Table 5, one thread, one QP"),
    ("msg-rate", 1, 4, 1): (1.85, "Table 5, one thread, 2-32 QPs"),
    ("msg-rate", 1, 1, 16): (4.70, "Table 5, one thread, batch 16"),
    ("msg-rate", 1, 16, 16): (260.0, "Table 5's ceiling (64 QPs, batch 16)"),
    ("payload", "crossover"): (512, "Fig. 8, mini-gda and IBGDA: first size at 90% of 24.8"),
    ("proxy-rate", "b16/b1"): (5.5, "§4.2, mini-proxy T=1 R=32: B 1 -> 16"),
}
CQE_AFTER_DOORBELL_US = 3.30  # §4.1: what the model is calibrated to (doorbell to valid CQE)

# --submitter gpu (mini-gda on the CPU engine, a GPU machine): the paper's Table 4 (P-IB, µs:
# issue, put+completion) per ordering, Fig. 3(a)'s inline sizes, Table 5's rows
# (threads, QPs, WQEs per doorbell, publication) and Fig. 4's completion scope.
TABLE4 = {
    "none": (0.19, 3.46),
    "gpu-fence": (0.70, 4.03),
    "gpu-fence-dbrec": (0.93, 4.26),
    "gpu-release-store": (0.70, 4.00),
    "threadfence": (1.22, 4.48),
    "sys-release-store": (2.37, 5.66),
    "sys-fence": (2.62, 5.92),
}
FIG3_INLINE = (8, 32, 92, 220)
TABLE5 = (  # threads, QPs, batch, publish, M msg/s on P-IB, the row
    (1, 1, 1, "thread", 1.79, "one thread, one QP"),
    (1, 4, 1, "thread", 1.85, "one thread, 2-32 QPs"),
    (1, 1, 16, "thread", 4.70, "one thread, batch 16"),
    (32, 1, 1, "lock", 1.27, "one QP, 32 threads, a doorbell lock per WQE"),
    (256, 1, 32, "thread", 2.60, "one QP, 256 threads, slots per thread"),
    (32, 1, 32, "warp", 21.6, "one QP, one warp cooperative"),
    (256, 1, 32, "warp", 30.7, "one QP, 256 threads cooperative"),
    (16, 16, 1, "thread", 27.9, "16 QPs, 16 threads"),
    (16, 16, 16, "thread", 74.4, "16 QPs, batch 16"),
    (32, 32, 16, "thread", 133.0, "32 QPs, batch 16"),
    (64, 64, 16, "thread", 260.0, "64 QPs, batch 16 (64 SMs in the paper)"),
)


def _mpiexec() -> str:
    beside = Path(sys.executable).parent / "mpiexec"
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    if not found:
        raise SystemExit("no mpiexec: run `make setup`")
    return found


def run(args: list[str], model: str, progress: str, timeout: float) -> list[dict[str, Any]]:
    """One `gicbench run` of 2 ranks: its rows (JSON)."""
    out = Path(tempfile.gettempdir()) / f"gicbench-nic-model-{uuid.uuid4().hex[:8]}"
    cmd = [_mpiexec(), "--bind-to", "none", "-n", "2", sys.executable, "-m", "gicbench", "run",
           *args, "--json", "--quiet", "--progress", progress, "--nic-model", model,
           "-o", str(out)]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                       env={**os.environ, **MPI_ENV})  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}\nfailed ({r.returncode}):\n{r.stderr[-3000:]}")
    return json.loads(r.stdout)["results"]


@dataclasses.dataclass
class Row:
    experiment: str
    point: str
    unit: str
    none: float
    model: float
    saturated: bool
    paper: float | None = None
    paper_what: str = ""
    alone: float | None = None  # the model's arithmetic alone: the NIC's part, no software

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Alone:
    """What the model predicts for the NIC's part of a point, from its arithmetic alone
    (NicModelSim: no engine, no submitter software), with the contexts cached."""

    def __init__(self, model: str) -> None:
        from gicbench._native import emu as native
        from gicbench.fabric.emu import nic_model as nm

        m = nm.load(model)
        assert m is not None
        self.params, self.native = m.native_params(), native

    def _sim(self):
        return self.native.NicModelSim(self.params, 2)

    @staticmethod
    def _nbb(size: int, inline: bool) -> int:
        ds = 2 + ((size + 4 + 15) // 16 if inline else 1)  # ctrl + raddr + data
        return (ds * 16 + 63) // 64

    def single_op(self, mode: str, inline: bool, size: int) -> float:
        """µs: doorbell to CQE (put+completion) or two doorbell-to-landing legs (round trip)."""
        s, t0 = self._sim(), 10**9
        nbb = self._nbb(size, inline)
        s.plan(0, 1, 1, 0x10001, 1, size, not inline, nbb, 0)  # warm the contexts
        w = s.plan(0, 1, 1, 0x10001, 1, size, not inline, nbb, t0)
        return ((w["t_cqe"] - t0) if mode == "put_completion" else 2 * (w["t_exec"] - t0)) / 1e6

    def rate(self, qps: int, size: int = 8, n: int = 20000, pointer: bool = False) -> float:
        """M msg/s the modelled NIC sustains with n writes announced at once over `qps` QPs."""
        s = self._sim()
        nbb = self._nbb(size, not pointer)
        t = [s.plan(0, 1 + k % qps, 1, 0x10001 + k % qps, 1, size, pointer, nbb, 0)["t_exec"]
             for k in range(n)]  # fmt: skip
        gap_ps = (t[-1] - t[n // 10]) / (n - 1 - n // 10)  # steady state, past the ramp
        return 1e6 / gap_ps

    def goodput(self, size: int) -> float:
        """GB/s of a stream of pointer writes of `size` (payload's one QP)."""
        n = max(200, min(20000, (64 << 20) // size))
        return self.rate(1, size, n, pointer=True) * size / 1e3


def _ratio(a: float | None, b: float | None) -> str:
    ok = a and b and not (math.isnan(a) or math.isnan(b))
    return f"{a / b:.2f}" if ok else "-"


def single_op(model: str, progress: str, quick: bool) -> list[Row]:
    iters = "300" if quick else "2000"
    rows = []
    for payload, sizes in (("inline", ("8", "256")), ("pointer", ("8", "8"))):
        got = {}
        for m in ("none", model):
            got[m] = run(["single-op", "-b", sizes[0], "-e", sizes[1], "-n", iters, "-w", "50",
                          "--payload", payload, "--modes", "put_completion,round_trip"],
                         m, progress, 600)  # fmt: skip
        for a, b in zip(got["none"], got[model], strict=True):
            key = ("single-op", a["mode"], payload, a["size"])
            paper = PAPER.get(key, (None, ""))
            alone = Alone(model).single_op(a["mode"], payload == "inline", a["size"])
            rows.append(Row("single-op", f"{a['mode']} {payload} {a['size']} B", "µs p50",
                            a["p50_us"], b["p50_us"], bool(b.get("nic_model_saturated")),
                            *paper, alone=alone))  # fmt: skip
    return rows


def msg_rate(model: str, progress: str, quick: bool) -> list[Row]:
    messages = "50000" if quick else "200000"
    rows = []
    for threads, qps, batch in ((1, 1, 1), (1, 4, 1), (1, 1, 16), (1, 16, 16)):
        args = ["msg-rate", "-t", str(threads), "-q", str(qps), "--batch", str(batch),
                "--messages", messages]  # fmt: skip
        a, b = run(args, "none", progress, 600)[0], run(args, model, progress, 600)[0]
        paper = PAPER.get(("msg-rate", threads, qps, batch), (None, ""))
        rows.append(Row("msg-rate", f"{threads} thr, {qps} QP, batch {batch}", "M msg/s",
                        a["msg_rate_mps"], b["msg_rate_mps"], bool(b.get("nic_model_saturated")),
                        *paper, alone=Alone(model).rate(qps)))  # fmt: skip
    return rows


def payload(model: str, progress: str, quick: bool, pre: list[str] | None = None) -> list[Row]:
    args = [
        *(pre or []),
        "payload",
        "-b",
        "8",
        "-e",
        "1M",
        "-f",
        "2",
        "--messages",
        "4000" if quick else "20000",
        "--point-bytes",
        "64M" if quick else "256M",
    ]
    got = {m: run(args, m, progress, 900) for m in ("none", model)}
    alone = Alone(model)
    rows, predicted = [], {}
    for a, b in zip(got["none"], got[model], strict=True):
        predicted[a["size"]] = alone.goodput(a["size"])
        rows.append(
            Row(
                "payload",
                f"{a['size']} B",
                "GB/s",
                a["gbps"],
                b["gbps"],
                bool(b.get("nic_model_saturated")),
                alone=predicted[a["size"]],
            )
        )
    # nan: no size up to 1 MiB reached it (shown as "not reached")
    cross = {m: next((r["size"] for r in got[m] if r["gbps"] >= 0.9 * REFERENCE_GBPS), math.nan)
             for m in got}  # fmt: skip
    sat = any(
        r.get("nic_model_saturated")
        for r in got[model]
        if math.isnan(cross[model]) or r["size"] <= cross[model]
    )
    # the model's own crossover on the paper's sizes (powers of two from 8 B)
    sizes = [8 << k for k in range(18)]
    first = next((z for z in sizes if alone.goodput(z) >= 0.9 * REFERENCE_GBPS), None)
    rows.append(Row("payload", f"first size at 90% of {REFERENCE_GBPS} GB/s", "B",
                    cross["none"], cross[model], sat, *PAPER[("payload", "crossover")],
                    alone=first))  # fmt: skip
    return rows


def proxy_rate(model: str, progress: str, quick: bool, producer: str = "host") -> list[Row]:
    args = ["proxy-rate", "--submitter", "proxy", "--producer", producer, "--sweep-workers", "1",
            "--sweep-rings", "32", "--sweep-batch", "1,16", "--messages",
            "20000" if quick else "100000"]  # fmt: skip
    got = {m: run(args, m, progress, 900) for m in ("none", model)}
    rows = []
    for a, b in zip(got["none"], got[model], strict=True):
        rows.append(Row("proxy-rate", f"T=1 R=32 B={a['batch']}", "M msg/s", a["msg_rate_mps"],
                        b["msg_rate_mps"], bool(b.get("nic_model_saturated"))))  # fmt: skip
    by = {m: {r["batch"]: r["msg_rate_mps"] for r in got[m]} for m in got}
    rows.append(Row("proxy-rate", "B=16 / B=1", "ratio", by["none"][16] / by["none"][1],
                    by[model][16] / by[model][1], any(r.get("nic_model_saturated")
                                                      for r in got[model]),
                    *PAPER[("proxy-rate", "b16/b1")]))  # fmt: skip
    return rows


GPU = ["--submitter", "gpu"]


def gpu_single_op(model: str, progress: str, quick: bool) -> list[Row]:
    """mini-gda's issue and put+completion per ordering (Table 4), then inline 8-220 B against
    a pointer payload (Fig. 3a), each with no model and with the model."""
    iters = "300" if quick else "2000"
    rows = []
    for ordering, (p_issue, p_putc) in TABLE4.items():
        args = [*GPU, "--ordering", ordering, "single-op", "-b", "8", "-n", iters, "-w", "100",
                "--modes", "issue,put_completion"]  # fmt: skip
        a, b = run(args, "none", progress, 600), run(args, model, progress, 600)
        for ra, rb in zip(a, b, strict=True):
            paper = p_issue if ra["mode"] == "issue" else p_putc
            alone = None if ra["mode"] == "issue" else Alone(model).single_op(
                "put_completion", True, 8)  # fmt: skip
            rows.append(Row("single-op", f"{ordering} {ra['mode']} inline 8 B", "µs p50",
                            ra["p50_us"], rb["p50_us"], bool(rb.get("nic_model_saturated")),
                            paper, f"Table 4, {ordering}", alone=alone))  # fmt: skip
    for payload, sizes in (("inline", FIG3_INLINE), ("pointer", (8,))):
        for size in sizes:
            args = [
                *GPU,
                "--ordering",
                "gpu-fence",
                "single-op",
                "-b",
                str(size),
                "-n",
                iters,
                "-w",
                "100",
                "--payload",
                payload,
                "--modes",
                "issue,put_completion",
            ]
            a, b = run(args, "none", progress, 600), run(args, model, progress, 600)
            for ra, rb in zip(a, b, strict=True):
                paper = PAPER.get(("single-op", ra["mode"], payload, size), (None, ""))
                alone = None if ra["mode"] == "issue" else Alone(model).single_op(
                    "put_completion", payload == "inline", size)  # fmt: skip
                rows.append(Row("single-op", f"gpu-fence {ra['mode']} {payload} {size} B",
                                "µs p50", ra["p50_us"], rb["p50_us"],
                                bool(rb.get("nic_model_saturated")), *paper,
                                alone=alone))  # fmt: skip
    return rows


def gpu_completion_scope(model: str, progress: str, quick: bool) -> list[Row]:
    """The selected QP's completion against an all-QP quiet from 1 to 16 QPs (Fig. 4)."""
    args = [*GPU, "completion-scope", "-q", "16", "-n", "300" if quick else "2000", "-w", "100"]
    a, b = run(args, "none", progress, 600), run(args, model, progress, 600)
    rows = []
    for ra, rb in zip(a, b, strict=True):
        rows.append(
            Row(
                "completion-scope",
                f"{ra['mode']} {ra['scope']} {ra['qps']} QPs",
                "µs p50",
                ra["p50_us"],
                rb["p50_us"],
                bool(rb.get("nic_model_saturated")),
            )
        )
    for got, name in ((a, "none"), (b, "model")):
        q = {(r["scope"], r["qps"]): r["p50_us"] for r in got if r["mode"] == "put_completion"}
        if name == "none":
            none_ratio = q[("all", 16)] / q[("all", 1)]
        else:
            rows.append(Row("completion-scope", "all-QP quiet 16 QPs / 1 QP", "ratio",
                            none_ratio, q[("all", 16)] / q[("all", 1)],
                            any(r.get("nic_model_saturated") for r in b), 2.0,
                            "§4.1: all-QP completion doubles from 1 to 16 QPs"))  # fmt: skip
    return rows


def gpu_msg_rate(model: str, progress: str, quick: bool) -> list[Row]:
    messages = "50000" if quick else "200000"
    rows = []
    for threads, qps, batch, publish, paper, what in TABLE5:
        try:
            rows.append(_gpu_rate_row(model, progress, messages, threads, qps, batch, publish,
                                      paper, what, "gpu-fence"))  # fmt: skip
        except SystemExit as e:
            # GPU-scope ordering does not order the GPU's stores to host memory as the CPU
            # engine reads them (a stale WQE fails the point: docs/gpu-loaded.md): the
            # system-scope ordering, named in the row.
            print(f"msg-rate {what}, gpu-fence: {str(e)[-400:]}", file=sys.stderr)
            try:
                rows.append(_gpu_rate_row(model, progress, messages, threads, qps, batch,
                                          publish, paper, what, "sys-fence"))  # fmt: skip
            except SystemExit as e2:
                print(f"msg-rate {what}, sys-fence: {str(e2)[-400:]}", file=sys.stderr)
    return rows


def _gpu_rate_row(model: str, progress: str, messages: str, threads: int, qps: int, batch: int,
                  publish: str, paper: float, what: str, ordering: str) -> Row:  # fmt: skip
    args = [
        *GPU,
        "--ordering",
        ordering,
        "--publish",
        publish,
        "msg-rate",
        "-t",
        str(threads),
        "-q",
        str(qps),
        "--batch",
        str(batch),
        "--messages",
        messages,
    ]
    a, b = run(args, "none", progress, 600)[0], run(args, model, progress, 600)[0]
    return Row("msg-rate", f"{threads} thr, {qps} QP, batch {batch}, {publish}, {ordering}",
               "M msg/s", a["msg_rate_mps"], b["msg_rate_mps"],
               bool(b.get("nic_model_saturated")), paper, f"Table 5, {what}",
               alone=Alone(model).rate(qps))  # fmt: skip


def gpu_payload(model: str, progress: str, quick: bool) -> list[Row]:
    return payload(model, progress, quick, [*GPU, "--ordering", "gpu-fence"])


def gpu_proxy_rate(model: str, progress: str, quick: bool) -> list[Row]:
    return proxy_rate(model, progress, quick, producer="gpu")


def engine_cost(model: str, reps: int) -> list[dict[str, Any]]:
    """The engine's rate (thread mode, native poster, 8 B inline writes) with no model, with a
    model that charges nothing (its own cost) and with the model (best of `reps`)."""
    from gicbench._native import emu as native
    from gicbench.fabric.base import Access
    from gicbench.fabric.emu import EmuFabric, segment_bytes_for
    from gicbench.fabric.emu import nic_model as nm

    m = nm.load(model)
    assert m is not None
    zero = {k: dataclasses.replace(c, value=0.0 if k.endswith("_ns") else c.value)
            for k, c in m.constants.items()}  # fmt: skip
    for k in ("port_msg_rate_mps", "recv_msg_rate_mps"):
        zero[k] = dataclasses.replace(zero[k], value=1e6)
    free = dataclasses.replace(m, name="zero-cost", constants=zero)

    def rate(nic: Any, nqps: int, batch: int, total: int = 400_000) -> tuple[float, bool]:
        job = "b-" + uuid.uuid4().hex[:8]
        segs = (segment_bytes_for(nqps, nqps + 1, 0, 256, 256, [4096]),
                segment_bytes_for(nqps, 1, 0, 64, 64, [4096]))  # fmt: skip
        f0 = EmuFabric(0, 2, job, progress="thread", segment_bytes=segs[0], max_qps=nqps,
                       max_cqs=nqps + 1, max_mrs=1, max_dcts=0, nic_model=nic)  # fmt: skip
        f1 = EmuFabric(1, 2, job, progress="inline", segment_bytes=segs[1], max_qps=nqps,
                       max_cqs=1, max_mrs=1, max_dcts=0, nic_model=nic)  # fmt: skip
        try:
            infos = [f0.local_info(), f1.local_info()]
            for f in (f0, f1):
                f.add_peers(infos)
            for f in (f0, f1):
                f.seal()
            dst = f1.register(4096, Access.REMOTE_WRITE | Access.LOCAL_WRITE)
            rcq = f1.create_cq(64)
            sqs, cqs = [], []
            for _ in range(nqps):
                cq, qp, peer = f0.create_cq(256), None, f1.create_qp(rcq, 64)
                qp = f0.create_qp(cq, 256)
                f0.connect(qp, f1.endpoint(peer))
                f1.connect(peer, f0.endpoint(qp))
                sqs.append((qp.sq.buf, qp.sq.wqebb_cnt, qp.sq.dbrec, qp.sq.doorbell, qp.qpn))
                cqs.append((cq.buf, cq.ncqe, cq.dbrec))
            before = f0.counters()
            ns, n = native.bench_rate(sqs, cqs, dst.addr, dst.rkey, total, batch,
                                      warmup=total // 10, fast=True)  # fmt: skip
            res = f0.point_results(before, f0.counters())
            return n / ns * 1e3, bool(res.get("nic_model_saturated"))
        finally:
            f0.close()
            f1.close()

    out = []
    for nqps, batch in ((1, 1), (16, 16)):
        for name, nic in (("none", None), ("zero-cost", free), (model, m)):
            runs = [rate(nic, nqps, batch) for _ in range(reps)]
            out.append({"qps": nqps, "batch": batch, "model": name,
                        "best_mwqe_s": max(r[0] for r in runs),
                        "saturated": any(r[1] for r in runs)})  # fmt: skip
    return out


def _num(v: float) -> str:
    return "not reached" if math.isnan(v) else f"{v:.3g}"


def report(
    rows: list[Row], cost: list[dict[str, Any]], model: str, progress: str, submitter: str = "host"
) -> str:
    who = "mini-gda (GPU submitter) on the CPU engine" if submitter == "gpu" else "host submitter"
    lines = [f"# emu's CPU engine with and without the NIC model `{model}`", "",
             f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, 2 ranks, "
             f"--progress {progress}, {who}. The *model* column is **modelled**: a "
             "prediction from the preset's stated constants, not a measurement of hardware. "
             "*engine below model* = yes: the CPU engine fell behind the model there, so that "
             "number is the engine's, not the model's. The paper's figures are GPU paths on "
             "ConnectX-7 (P-IB); emu's include the host submitter's software.", "",
             f"The model is calibrated to the paper's {CQE_AFTER_DOORBELL_US} µs from doorbell "
             "to valid CQE; the rest of a put+completion is the submitter's polling and queue "
             "work.", "",
             "Columns: *none* is emu without a model; *with model* is emu charging the model "
             "(modelled; where the engine fell behind, the number is the engine's and shown "
             "as such, without ratios); *model alone* is the model's arithmetic for the NIC's "
             "part of the point (no engine, no submitter software: doorbell to CQE, two "
             "doorbell-to-landing legs for a round trip, the NIC's sustained rate and "
             "goodput), modelled too.", "",
             "| experiment | point | unit | none | with model | with model / none | engine "
             "below model | model alone | paper | model alone / paper | paper's figure |",
             "|:---|:---|:---|---:|---:|---:|:---|---:|---:|---:|:---|"]  # fmt: skip
    for r in rows:
        with_model = _num(r.model) + (" (engine)" if r.saturated else "")
        ratio = "-" if r.saturated else _ratio(r.model, r.none)
        alone = "-" if r.alone is None else f"{r.alone:.3g}"
        lines.append(f"| {r.experiment} | {r.point} | {r.unit} | {_num(r.none)} | {with_model} "
                     f"| {ratio} | {'yes' if r.saturated else 'no'} | {alone} | "
                     f"{'-' if r.paper is None else f'{r.paper:g}'} | "
                     f"{_ratio(r.alone, r.paper)} | {r.paper_what} |")  # fmt: skip
    if cost:
        lines += ["", "The engine's own rate (engine thread, native poster, 8 B inline writes, "
                  "best of several): `zero-cost` charges nothing, so its difference from `none` "
                  "is the model's own cost per WQE.", "",
                  "| QPs | WQEs per doorbell | model | M WQE/s | engine below model |",
                  "|---:|---:|:---|---:|:---|"]  # fmt: skip
        for c in cost:
            lines.append(
                f"| {c['qps']} | {c['batch']} | {c['model']} | "
                f"{c['best_mwqe_s']:.1f} | {'yes' if c['saturated'] else 'no'} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=PRESET, help="the NIC model (a preset or a .toml file)")
    ap.add_argument("--progress", default="inline", choices=("inline", "thread"))
    ap.add_argument(
        "--submitter",
        default="host",
        choices=("host", "gpu"),
        help="host: the host submitter; gpu: mini-gda (needs a GPU; progress thread)",
    )
    ap.add_argument("--quick", action="store_true", help="fewer iterations and messages")
    ap.add_argument("--proxy", action="store_true", help="also mini-proxy's proxy-rate")
    ap.add_argument(
        "--only",
        default="single-op,completion-scope,msg-rate,payload,cost",
        help="comma-separated parts: single-op, completion-scope (gpu only), msg-rate, payload, "
        "cost (all by default)",
    )
    ap.add_argument("--reps", type=int, default=3, help="repetitions of each engine-cost rate")
    ap.add_argument("-o", "--output", type=Path, help="also write the report here (new file)")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here (new file)")
    a = ap.parse_args()
    parts = set(a.only.split(","))
    rows: list[Row] = []
    if a.submitter == "gpu":
        a.progress = "thread"  # a GPU kernel cannot call the CPU engine's inline hook
        fns = (("single-op", gpu_single_op), ("completion-scope", gpu_completion_scope),
               ("msg-rate", gpu_msg_rate), ("payload", gpu_payload))  # fmt: skip
    else:
        fns = (("single-op", single_op), ("msg-rate", msg_rate), ("payload", payload))
    for name, fn in fns:
        if name in parts:
            try:
                rows += fn(a.model, a.progress, a.quick)
            except SystemExit as e:  # one failed part must not lose the others' rows
                print(f"{name}: {e}", file=sys.stderr)
    if a.proxy:
        rows += (gpu_proxy_rate if a.submitter == "gpu" else proxy_rate)(
            a.model, a.progress, a.quick)  # fmt: skip
    cost = engine_cost(a.model, a.reps) if "cost" in parts else []
    text = report(rows, cost, a.model, a.progress, a.submitter)
    print(text)
    for path, data in (
        (a.output, text),
        (a.json, json.dumps({"rows": [r.as_dict() for r in rows], "engine_cost": cost}, indent=2)),
    ):
        if path is not None:
            with open(path, "x") as f:  # never over an earlier result
                f.write(data)


if __name__ == "__main__":
    main()
