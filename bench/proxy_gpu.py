"""mini-proxy's figures on one machine, in one process (two emu ranks, no MPI): enqueue time of
the two handoff protocols, proxy message rate for T = 1..8 at B = 1 and 16, and the loaded
round trip on a shared vs a reserved ring, with GPU producers where a GPU exists and with host
producers always. Every section reports its own failure and the rest still run.

    python bench/proxy_gpu.py [--out DIR] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
import traceback
from pathlib import Path

import numpy as np

from gicbench.submit.base import Buffer, LatencyWork, LoadedWork, ProxyRateWork
from gicbench.submit.proxy import ProxySubmitter
from gicbench.submit.proxy.params import ProxyParams

# The tests' resource classes make the ranks, queues and buffers (one place for that wiring).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from resources import Traffic

SIZE = 1 << 16
NQPS = 8


class World(Traffic):
    """Two emu ranks of one job in this process, NQPS RC QP pairs between them, a source and a
    landing buffer of SIZE on each (tests/resources.py's Traffic: every lane the whole buffers)."""

    def __init__(self, depth: int = 512, progress: str = "thread") -> None:
        super().__init__(NQPS, depth, progress=progress, segment_bytes=64 << 20, mr_bytes=SIZE,
                         prefix="pxg")  # fmt: skip
        self.start()

    def proxy(self, rank: int, **kw) -> ProxySubmitter:
        f = self.fabrics[rank]
        params = ProxyParams(precondition_s=0.05, **kw)
        return ProxySubmitter(
            rank=rank, fabric=f, progress=f.progress_policy(), timeout_s=5.0, params=params
        )


def stats_us(ns: np.ndarray) -> dict:
    us = np.asarray(ns, dtype=np.float64) / 1e3
    return {
        "p50_us": float(np.percentile(us, 50)),
        "p99_us": float(np.percentile(us, 99)),
        "mean_us": float(us.mean()),
        "n": int(us.size),
    }


def section(name: str, results: dict, fn) -> None:
    t0 = time.time()
    try:
        results[name] = fn()
    except BaseException as e:  # one section's failure must not hide the others' figures
        results[name] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}
    results[name + "_s"] = round(time.time() - t0, 2)
    print(name, json.dumps(results[name], default=str)[:2000], flush=True)


def enqueue_times(w: World, producer: str, iters: int) -> dict:
    out = {}
    for handoff in ("baseline", "tuned"):
        sub = w.proxy(0, producer=producer, handoff=handoff)
        try:
            for mode in ("issue", "put_completion"):
                ns = sub.latency(
                    LatencyWork(
                        w.lanes(1), 0, mode, 8, True, False, iters, 200, Buffer.local(w.bufs[0][1])
                    )
                )
                out[f"{handoff}/{mode}"] = stats_us(ns)
        finally:
            sub.close()
    if producer == "host":
        # the round trip through two proxies (host producers answer)
        for handoff in ("baseline", "tuned"):
            req, resp = w.proxy(0, handoff=handoff), w.proxy(1, handoff=handoff)
            from gicbench.submit.base import RespondWork

            t = threading.Thread(
                target=lambda r=resp: r.respond(
                    RespondWork(w.lanes(1, 1)[0], Buffer.local(w.bufs[1][1]), 8, True, iters + 200)
                )
            )
            t.start()
            ns = req.latency(
                LatencyWork(
                    w.lanes(1),
                    0,
                    "round_trip",
                    8,
                    True,
                    False,
                    iters,
                    200,
                    Buffer.local(w.bufs[0][1]),
                )
            )
            t.join()
            out[f"{handoff}/round_trip"] = stats_us(ns)
    return out


def rates(w: World, producer: str, producers: int, per: int, workers=range(1, 9)) -> dict:
    out = {}
    sub = w.proxy(0, producer=producer, handoff="tuned", workers=8, rings=32)
    try:
        for b in (1, 16):
            for t in workers:
                r = sub.proxy_rate(
                    ProxyRateWork(
                        w.lanes(t), t, 32, b, producers, 8, True, per, 100, max(1, per // 20)
                    )
                )
                s = r.elapsed_ns / 1e9
                out[f"T{t}/B{b}"] = {
                    "mmsgs": r.messages / s / 1e6,
                    "wqes_per_doorbell": (per + 100) * producers / r.doorbells,
                    "workers": [(x["core"], x["khz"]) for x in sub.last_workers],
                }
    finally:
        sub.close()
    return out


def loaded(
    w: World,
    producer: str,
    background: int,
    iters: int,
    handoff: str = "baseline",
    queues: tuple[str, ...] = ("shared", "reserved"),
) -> dict:
    out = {}
    for queue in queues:
        kw = {"producer": producer, "handoff": handoff, "workers": 4, "rings": 32}
        req, resp = w.proxy(0, **kw), w.proxy(1, **kw)
        box: dict = {}

        def run(sub, side: int, key: str, queue=queue, box=box) -> None:
            try:
                box[key] = sub.loaded(
                    LoadedWork(
                        w.lanes(4, side),
                        side == 0,
                        queue == "shared",
                        background,
                        16,
                        0.0,
                        8,
                        Buffer.local(w.bufs[side][1]),
                        iters,
                        50,
                    )
                )
            except BaseException as e:
                box[key] = e

        th = threading.Thread(target=run, args=(resp, 1, "resp"))
        th.start()
        run(req, 0, "req")
        th.join()
        req.close()
        resp.close()
        for k in ("req", "resp"):
            if isinstance(box[k], BaseException):
                raise box[k]
        r, s = box["req"], box["resp"]
        out[queue] = {
            **stats_us(r.rtt_ns),
            "background_mps_requester": r.background / r.probe_ns * 1e3,
            "background_mps_responder": s.background / s.probe_ns * 1e3,
        }
    if len(queues) == 2:
        out["p50 shared/reserved"] = out["shared"]["p50_us"] / out["reserved"]["p50_us"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/proxy-gpu"))
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res: dict = {
        "machine": {
            "node": platform.node(),
            "cpus": os.cpu_count(),
            "cpu": platform.processor(),
            "python": sys.version.split()[0],
        }
    }
    try:
        import cupy

        res["machine"]["gpu"] = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
        gpu = True
    except Exception as e:
        res["machine"]["gpu"] = f"none ({type(e).__name__})"
        gpu = False
    q = a.quick
    w = World()
    try:
        section("host_enqueue", res, lambda: enqueue_times(w, "host", 500 if q else 5000))
        if gpu:
            section("gpu_enqueue", res, lambda: enqueue_times(w, "gpu", 500 if q else 5000))
        section(
            "host_rate",
            res,
            lambda: rates(w, "host", 4, 5000 if q else 50000, (1, 2) if q else range(1, 9)),
        )
        if gpu:
            section(
                "gpu_rate",
                res,
                lambda: rates(w, "gpu", 32, 2000 if q else 10000, (1, 2) if q else range(1, 9)),
            )
        section("host_loaded", res, lambda: loaded(w, "host", 4, 100 if q else 500))
        if gpu:
            section("gpu_loaded", res, lambda: loaded(w, "gpu", 64, 100 if q else 500))
            section(
                "gpu_loaded_tuned_reserved",
                res,
                lambda: loaded(w, "gpu", 31, 100 if q else 500, "tuned", ("reserved",)),
            )
    finally:
        w.close()
    (out / "proxy_figures.json").write_text(json.dumps(res, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
