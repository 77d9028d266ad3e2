"""Synthetic runs of every experiment, written through the real TraceWriter, shaped as the
experiments write their points (parameters, sample datasets, results), for the report and
analysis tests: one rank each, and moe-dispatch's on several ranks with known truth
(moe_points, write_moe_run)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gicbench.trace import TraceWriter, write_manifest

Point = tuple[str, dict[str, Any], dict[str, np.ndarray], dict[str, Any]]


def write_run(run_dir: Path, points: Iterable[Point]) -> Path:
    """A finished one-rank run of `points`: (experiment, params, samples in ns, results)."""
    return write_ranks(run_dir, [list(points)])


def write_ranks(run_dir: Path, ranks: Sequence[Sequence[Point]],
                manifest: dict[str, Any] | None = None,
                meta: dict[str, Any] | None = None) -> Path:
    """A finished run of one list of points per rank (the same points in the same order on
    every rank); `manifest` and `meta` add to the run's manifest and each rank's metadata."""
    world = len(ranks)
    experiments = list(dict.fromkeys(p[0] for points in ranks for p in points))
    head = {**(manifest or {}), "world_size": world, "experiments": experiments}
    write_manifest(run_dir, {**head, "status": "running"})
    for rank, points in enumerate(ranks):
        rank_meta = {**meta, "local_rank": rank} if meta else {}
        with TraceWriter(run_dir, rank, world, rank_meta) as w:
            for experiment, params, samples, results in points:
                with w.begin_point(experiment, params) as p:
                    for metric, ns in samples.items():
                        p.add_samples(metric, np.asarray(ns, dtype=np.int64))
                    p.set_results({"role": "sender", "validated": True, **results})
    write_manifest(run_dir, {**head, "status": "complete",
                             "end_utc": "2026-01-01T00:00:01+00:00"})
    return run_dir


def _lat(rng: np.random.Generator, center_ns: float, n: int = 200) -> np.ndarray:
    return (center_ns * rng.lognormal(0, 0.05, n)).astype(np.int64)


def _rate(rate_mps: float, size: int, messages: int = 20_000) -> dict[str, Any]:
    return {"msg_rate_mps": rate_mps, "gbps": rate_mps * size / 1e3, "messages": messages,
            "elapsed_ns": int(messages / rate_mps * 1e3)}


MODE_METRIC = {"issue": "issue_ns", "put_completion": "completion_ns", "round_trip": "rtt_ns"}


def single_op(rng: np.random.Generator) -> list[Point]:
    return [("single-op", {"size": s, "payload": "inline", "transport": "rc", "mode": m},
             {MODE_METRIC[m]: _lat(rng, base + s * 0.5)}, {})
            for m, base in (("issue", 300), ("put_completion", 2500), ("round_trip", 5000))
            for s in (8, 64, 512)]


def completion_scope(rng: np.random.Generator) -> list[Point]:
    ways = (("put_completion", "selected"), ("put_completion", "all"), ("round_trip", "selected"))
    return [("completion-scope", {"size": 8, "payload": "inline", "transport": "rc", "qps": q,
                                  "scope": scope, "mode": mode},
             {MODE_METRIC[mode]: _lat(rng, 2500 * (q if scope == "all" else 1))}, {})
            for q in (1, 2, 4, 8) for mode, scope in ways]


def clock_sweep(rng: np.random.Generator) -> list[Point]:
    out = []
    for mhz in (990, 1410, 1980):
        for mode, c_cycles, b_ns in (("issue", 1500, 100), ("put_completion", 6000, 2000)):
            measured = mhz + float(rng.normal(0, 2))
            ns = c_cycles / measured * 1e3 + b_ns
            out.append(("clock-sweep", {"size": 8, "mode": mode, "clock_mhz": mhz},
                        {MODE_METRIC[mode]: _lat(rng, ns)}, {"sm_clock_mhz": measured}))
    return out


def msg_rate(rng: np.random.Generator, sizes: tuple[int, ...] = (8,),
             batches: tuple[int, ...] = (1, 4, 16)) -> list[Point]:
    return [("msg-rate", {"size": s, "payload": "inline", "transport": "rc", "qps": 1,
                          "threads": 1, "batch": b, "messages_per_thread": 20_000},
             {"window_ns": _lat(rng, 1e6, 20)}, _rate(2.0 * np.sqrt(b) / (1 + s / 512), s))
            for s in sizes for b in batches]


def proxy_rate(rng: np.random.Generator) -> list[Point]:
    return [("proxy-rate", {"size": 8, "payload": "inline", "workers": t, "rings": 4,
                            "batch": b, "producers": 4, "messages_per_producer": 5000},
             {"window_ns": _lat(rng, 5e5, 20)},
             {**_rate(1.5 * t * (4 if b > 1 else 1), 8), "wqes_per_doorbell": float(b)})
            for t in (1, 2, 4) for b in (1, 16)]


def loaded_rtt(rng: np.random.Generator, backgrounds: tuple[int, ...] = (1, 2, 4)) -> list[Point]:
    return [("loaded-rtt", {"size": 8, "queue": q, "workers": 1, "rings": 4, "batch": 16,
                            "background": bg, "pace_mps": 0.0, "iters": 200, "warmup": 10},
             {"rtt_ns": _lat(rng, 5e3 * (bg * 40 if q == "shared" else bg))},
             {"background_mps": 3.0 / bg if q == "shared" else 2.0 * bg})
            for bg in backgrounds for q in ("shared", "reserved")]


def payload(rng: np.random.Generator, derived_messages: bool = True) -> list[Point]:
    """Goodput rising to 10 GB/s; with derived_messages the points carry the per-size message
    count (min(messages, point_bytes / size)) as a parameter, as a trace may."""
    out = []
    for i, size in enumerate(8 << k for k in range(14)):
        moved = min(20_000, (1 << 20) // size)  # what the point moved (a result)
        gbps = 10.0 * min(1.0, 2 ** (i - 9))
        rate = gbps * 1e3 / size
        out.append(("payload", {"size": size, "payload": "pointer", "transport": "rc",
                                "qps": 1, "threads": 1, "batch": 16,
                                "messages": moved if derived_messages else 20_000,
                                "point_bytes": 1 << 20, "warmup": 100, "reference_gbps": 0.0,
                                "fraction": 0.9},
                    {"window_ns": _lat(rng, 1e5, 20)}, _rate(rate, size, moved)))
    return out


def active_connections(rng: np.random.Generator) -> list[Point]:
    """Two passes, each its control then the grid: flat to 256 connections, then declining."""
    out = []
    for n in (1, 2):
        for control, x in ((True, 2), *((False, g) for g in (16, 64, 256, 1024, 4096))):
            rate = 20.0 * min(1.0, (x / 256) ** -0.5) * float(rng.normal(1, 0.01))
            out.append(("active-connections",
                        {"nic_role": "send-receive", "transport": "rc", "payload": "inline",
                         "writes_per_visit": 32, "batch": 32, "threads": 1, "pool": 4096,
                         "pass": n, "size": 8, "control": control, "connections": x},
                        {"window_ns": _lat(rng, 1e5, 20)}, _rate(rate, 8)))
    return out


# ---- moe-dispatch: several ranks, known truth (tests/test_analysis_moe.py) --------------------

MOE_WAITS = (0, 4, 8, 16, 32, 64, 96, 128, 256, 512, 1024)
MOE_TOKENS = (1, 16, 256)
# The paired change of each backend against gdaki, the same in every round (percent).
MOE_CHANGE = {"gdaki": 0.0, "free-flow": -20.0, "gpi": -40.0, "gpi-mc": 10.0}
# Round r runs this much slower overall: a paired change divides it out, the mean keeps it.
MOE_DRIFT = (1.0, 1.2, 0.9, 1.1, 0.8)
# The wait sweep's truth per backend: send R, receive work C, in flight I = a + b * tokens (µs).
MOE_TRUTH = {
    "gdaki": (30.0, 6.0, 16.0, 0.2),
    "free-flow": (18.0, 6.0, 32.0, 0.25),
    "gpi": (14.0, 8.0, 60.0, 1.5),
    "gpi-mc": (16.0, 8.0, 50.0, 0.5),
}
# Round offsets of the wait sweep (µs): their median is 0, their mean is not.
MOE_OFFSETS = (-1.0, 0.0, 3.0, -0.5, 0.5)
MOE_SLOW = 0.05  # rank r is 1 + MOE_SLOW * r slower: the slowest rank is the last
MOE_ITERS = 10


def gdaki_send(tokens: int, cap: int, topk: int) -> float:
    """The factor sweep's gdaki send on rank 0 in a round without drift (µs)."""
    return 20.0 + 0.3 * tokens * topk / 8 + 1000.0 / cap


def in_flight(backend: str, tokens: int) -> float:
    _, _, a, b = MOE_TRUTH[backend]
    return a + b * tokens


def exposed_truth(backend: str, tokens: int, wait: float) -> float:
    """The wait sweep's exposed time on rank 0 without round offsets (µs): R + C + the time
    still in flight after the wait."""
    r, c, _, _ = MOE_TRUTH[backend]
    return r + c + max(in_flight(backend, tokens) - wait, 0.0)


def moe_points(
    rank: int = 0,
    *,
    wait_sweep: bool = False,
    rounds: int = 5,
    backends: tuple[str, ...] = tuple(MOE_CHANGE),
    caps: tuple[int, ...] = (32, 128),
    topks: tuple[int, ...] = (4, 8),
    wait_none: bool = True,
) -> list[Point]:
    """One rank's moe-dispatch points as the experiment writes them (docs/traces.md): for each
    round the backends shuffled, then tokens x top-k x SM cap (the factor sweep) or tokens x
    wait at top-k 8, SM cap 128 (the wait sweep; with wait_none its first wait is the
    no-delay point, null). Times follow MOE_* and the functions above, exactly."""
    cells = []
    for r in range(rounds):
        order = np.random.default_rng(7 + r).permutation(len(backends))
        for b in (backends[i] for i in order):
            if wait_sweep:
                waits: tuple = ((None,) if wait_none else ()) + MOE_WAITS[1 if wait_none else 0:]
                cells += [(r, b, t, 8, 128, w) for t in MOE_TOKENS for w in waits]
            else:
                cells += [(r, b, t, k, c, None) for t in MOE_TOKENS for k in topks for c in caps]
    out: list[Point] = []
    slow = 1 + MOE_SLOW * rank
    for r, b, t, k, c, w in cells:
        params = {"round": r, "backend": b, "tokens": t, "topk": k, "hidden": 2048,
                  "experts": 128, "sm_cap": c, "wait_us": w, "iters": MOE_ITERS, "warmup": 2,
                  "seed": 1}
        if wait_sweep:  # a slower rank's kernels are slower; the network is not
            off = MOE_OFFSETS[r]
            send = MOE_TRUTH[b][0] * slow + off
            tail = exposed_truth(b, t, 0.0 if w is None else w) - sum(MOE_TRUTH[b][:2])
            exposed = sum(MOE_TRUTH[b][:2]) * slow + tail + off
        else:
            send = gdaki_send(t, c, k) * (1 + MOE_CHANGE[b] / 100) * MOE_DRIFT[r] * slow
            exposed = send + 10.0
        send_ns = np.full(MOE_ITERS, round(send * 1e3), np.int64)
        exp_ns = np.full(MOE_ITERS, round(exposed * 1e3), np.int64)
        wait_ns = np.full(MOE_ITERS, 0 if w is None else int(w * 1e3), np.int64)
        out.append(("moe-dispatch", params,
                    {"send_ns": send_ns, "recv_ns": exp_ns - send_ns, "exposed_ns": exp_ns,
                     "wait_ns": wait_ns},
                    {"role": "both", "received_tokens": t * k, "routing_digest": "ab" * 32,
                     "wait_actual_us": 0.0 if w is None else float(w)}))
    return out


MOE_MANIFEST = {"config": {"knobs": {}}, "provider": "emu", "submitter": "gpu",
                "argv": ["gicbench"], "hosts": ["h"], "start_utc": "2026-01-01T00:00:00+00:00"}
MOE_META = {"experiments": ["moe-dispatch"], "config": {"knobs": {}}, "provider": "emu",
            "submitter": "gpu", "host": "h", "gpu": {}, "nic": {}, "sm_clock_hz": float("nan"),
            "argv": [], "env": {}}


def write_moe_run(run_dir: Path, *, world: int = 4, **kwargs: Any) -> Path:
    """A finished moe-dispatch run on `world` emulated ranks as the harness writes it, rank r
    1 + MOE_SLOW * r slower; kwargs go to moe_points."""
    return write_ranks(run_dir, [moe_points(rank, **kwargs) for rank in range(world)],
                       MOE_MANIFEST, MOE_META)


def moe_dispatch(rng: np.random.Generator) -> list[Point]:
    """The factor sweep on one rank (its times are exact: rng is not needed)."""
    del rng
    return moe_points(0)


# ---- kernel-cost: known truth (tests/test_analysis_kernel_cost.py) -----------------------------
KC_REFERENCE_US = {"compute": 2100.0, "stream": 2600.0}  # the paper's Fig. 9 kernels
KC_CODE_LOSS = {("compute", "inline"): 3.0, ("compute", "separate"): 1.0,
                ("stream", "inline"): 27.0, ("stream", "separate"): 35.0}  # fmt: skip
KC_SEND_PER_MSG = 0.25  # % of throughput per message sent
KC_WAIT_PER_MSG = {8: 0.5, 7168: 1.5}  # % more per message waited on, by size
KC_REGS = {"none": 28, "inline": 48, "separate": 92}


def kc_truth(caller: str, build: str, variant: str, per_block: int, size: int) -> float:
    """The loss (%) a synthetic kernel-cost point is built with."""
    if variant == "none":
        return 0.0
    loss = KC_CODE_LOSS[caller, build]
    if variant in ("send", "send-wait"):
        loss += KC_SEND_PER_MSG * per_block
    if variant == "send-wait":
        loss += KC_WAIT_PER_MSG[size] * per_block
    return loss


def kernel_cost_points(callers: Sequence[str] = ("compute", "stream"), live: int = 8,
                       pairs: int = 3, launches: int = 5) -> list[Point]:  # fmt: skip
    """One rank's kernel-cost points as the experiment writes them (its points() order and
    keys), every pass's launches at exactly the truth's times (reference R, variant
    R / (1 - loss)), results as run_point computes them from those samples."""
    from gicbench.experiments.kernel_cost import paired_loss

    out: list[Point] = []
    for caller in callers:
        base = {"caller": caller, "live": live, "steps": 65536, "blocks": 528,
                "grid_per_sm": 0, "threads": 256, "qps": 528, "launches": launches,
                "pairs": pairs}  # fmt: skip
        cells = [("none", "none", 0, 0)]
        for build in ("inline", "separate"):
            cells += [("code-only", build, m, 0) for m in (0, 1, 4, 16)]
            cells += [(v, build, m, s) for v in ("send", "send-wait") for m in (1, 4, 16)
                      for s in (8, 7168)]  # fmt: skip
        for variant, build, m, s in cells:
            ref_ns = KC_REFERENCE_US[caller] * 1e3
            var_ns = ref_ns / (1 - kc_truth(caller, build if build != "none" else "inline",
                                            variant, m, s) / 100)  # fmt: skip
            v = np.full((pairs, launches), round(var_ns), dtype=np.int64)
            r = np.full((pairs, launches), round(ref_ns), dtype=np.int64)
            regs = KC_REGS["none" if variant == "none" else build]
            results = {**paired_loss(v, r), "registers": regs, "reference_registers": 28,
                       "spill_store_bytes": 0, "spill_load_bytes": 0,
                       "stack_bytes": 416 if build == "separate" else 0, "local_bytes": 0,
                       "blocks_per_sm": 8 if regs <= 32 else 4, "reference_blocks_per_sm": 8,
                       "grid": 528, "posted": 0, "sm_clock_mhz": 1980.0}  # fmt: skip
            out.append(("kernel-cost", {**base, "variant": variant, "build": build,
                                        "per_block": m, "size": s},
                        {"kernel_ns": v.ravel()}, results))
    return out


def kernel_cost(rng: np.random.Generator) -> list[Point]:
    del rng
    return kernel_cost_points()


EXPERIMENT_RUNS: dict[str, Callable[[np.random.Generator], list[Point]]] = {
    "single-op": single_op,
    "completion-scope": completion_scope,
    "clock-sweep": clock_sweep,
    "msg-rate": msg_rate,
    "proxy-rate": proxy_rate,
    "loaded-rtt": loaded_rtt,
    "payload": payload,
    "active-connections": active_connections,
    "moe-dispatch": moe_dispatch,
    "kernel-cost": kernel_cost,
}
