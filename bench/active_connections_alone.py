"""What a NIC model predicts for the active-connections sweep from its arithmetic alone: the
first paper's Fig. 10 patterns (arXiv 2610.01380, §4.3.3) planned through the model's own
plan_wqe (NicModelSim: no engine, no submitter), at the model's pace, so the port ceiling and
the connection cache set the rate wherever emu's engine cannot execute that fast. Every figure
it prints is modelled: a prediction from the model's stated constants, not a measurement.

The traffic is the experiment's: per NIC, U submitting units each cycle their share of the
active connections (unit u: connections u, u + U, ...), W writes of `size` bytes inline per
visit; a NIC takes one WQE of each unit in turn (as emu's model arbitrates between QPs with
work), the NICs in turn, every WQE announced at once. Roles as `--role`/`--pattern`:
send-only (pairs: NIC 2k sends to 2k+1), receive-only (fan-in: NICs 1..N-1 into NIC 0, the
connections split among them) and send-receive (all-to-all: every NIC to every other). The rate
is each sending NIC's steady state (its second lap), normalised to the two-connection control,
and fitted with gicbench's plateau + power-law fit.

    python bench/active_connections_alone.py --ranks 8 [--model cx7-200g-ib-hopper] \\
        [--active 64,256,...] [--writes-per-visit 32] [--units 64]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys

from gicbench._native import emu as native
from gicbench.analysis.fits.plateau import fit_plateau_power_law
from gicbench.experiments.active_connections import CONTROL, shares
from gicbench.experiments.active_connections import ROLE_PATTERN as ROLES
from gicbench.fabric.emu import nic_model
from gicbench.mlx5.wqe import write_wqebbs

KIND_WRITE = 1  # cuda/nic_model.cuh's kWrite


def flows(role: str, ranks: int, active: int) -> dict[int, list[tuple[int, int, int]]]:
    """Per sending NIC, its connections as (responder NIC, own QPN, responder's QPN): the
    experiment's senders (`shares`), each dealing its connections over its peers in order."""
    senders = shares(role, ranks, None).senders
    out: dict[int, list[tuple[int, int, int]]] = {s: [] for s in senders}
    if role == "send-only":  # pairs: NIC s to s + 1
        for s in senders:
            out[s] = [(s + 1, 1 + k, 1 + k) for k in range(active)]
    elif role == "receive-only":  # the receiver's n connections, dealt to the senders
        for k in range(active):
            s = senders[k % len(senders)]
            out[s].append((0, 1 + len(out[s]), (s << 16) | (1 + len(out[s]))))
    else:  # connection k to peers[k mod N-1] as the experiment deals them: so the 2-connection
        # control sends every NIC's two to the lowest ranks (NICs 0 and 1 receive 7 each)
        for s in senders:
            peers = [d for d in range(ranks) if d != s]
            out[s] = [(peers[k % len(peers)], 1 + k, (s << 16) | (1 + k)) for k in range(active)]
    return out


def predict(params: dict, role: str, ranks: int, active: int, w: int, units: int,
            size: int, least: int) -> float:  # fmt: skip
    """M msg/s in the steady state: the median sending NIC's (receive-only: the receiving NIC's,
    all senders' landings merged), over the second half of what the NICs post, on one schedule:
    every sender the same number of turns (two laps of the largest active set a unit cycles,
    at least `least` WQEs a sender)."""
    sim = native.NicModelSim(params, ranks)
    conns = {s: c for s, c in flows(role, ranks, active).items() if c}
    nbb = write_wqebbs(True, size)
    # unit u of NIC s: its connections, the next visit's, writes left in the visit
    state = {s: [[c[u::min(units, len(c))], 0, w] for u in range(min(units, len(c)))]
             for s, c in conns.items()}  # fmt: skip
    turns = max(max(2 * math.ceil(len(c) / len(state[s])) * w, -(-least // len(state[s])))
                for s, c in conns.items())  # fmt: skip
    t_exec: dict[int, list[int]] = {s: [] for s in conns}
    for _ in range(turns):
        for s, us in state.items():  # the NICs in turn, one WQE of each unit in turn
            for unit in us:
                mine, visit, left = unit
                d, qpn, dnum = mine[visit % len(mine)]
                r = sim.plan(s, qpn, d, dnum, KIND_WRITE, size, False, nbb, 0)
                t_exec[s].append(r["t_exec"])
                unit[2] = left - 1
                if unit[2] == 0:
                    unit[1], unit[2] = visit + 1, w

    def rate(ts: list[int]) -> float:  # the landings' second half, in time order
        ts = sorted(ts)
        h = len(ts) // 2
        return (len(ts) - 1 - h) * 1e6 / (ts[-1] - ts[h])

    if role == "receive-only":
        return rate([t for ts in t_exec.values() for t in ts])
    rates = sorted(rate(ts) for ts in t_exec.values())
    return rates[len(rates) // 2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="cx7-200g-ib-hopper")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--active", default="64,256,1024,1536,2048,4096,8192,16384")
    ap.add_argument("--writes-per-visit", type=int, default=32)
    ap.add_argument("--units", type=int, default=64)
    ap.add_argument("--size", type=int, default=8)
    ap.add_argument("--least", type=int, default=20000,
                    help="WQEs each sending NIC posts at least (past the cold-cache ramp)")
    ap.add_argument("--roles", default=",".join(ROLES))
    ap.add_argument("--json", dest="json_out")
    a = ap.parse_args()
    model = nic_model.load(a.model)
    if model is None:
        print("--model: a NIC model (not none)", file=sys.stderr)
        return 2
    grid = sorted({int(x) for x in a.active.split(",") if x.strip()})
    roles = a.roles.split(",")
    bad = [(f, v, why) for f, v, why in (
        ("--ranks", a.ranks, "an even number >= 2 (send-only pairs the NICs)"
         if a.ranks < 2 or (a.ranks % 2 and "send-only" in roles) else ""),
        ("--active", a.active, "at least 4 counts >= 1 (the plateau fit's minimum)"
         if len(grid) < 4 or grid[0] < 1 else ""),
        ("--writes-per-visit", a.writes_per_visit, ">= 1" if a.writes_per_visit < 1 else ""),
        ("--units", a.units, ">= 1" if a.units < 1 else ""),
        ("--size", a.size, "1..220 (inline)" if not 1 <= a.size <= 220 else ""),
        ("--roles", a.roles, ", ".join(ROLES) if set(roles) - set(ROLES) else ""),
    ) if why]  # fmt: skip
    for f, v, why in bad:
        print(f"{f}={v}: allowed {why}", file=sys.stderr)
    if bad:
        return 2
    print(f"# modelled ({model.name}): the model's arithmetic alone, {a.ranks} NICs, W = "
          f"{a.writes_per_visit}, {a.units} units a NIC, {a.size} B inline writes")
    out = {}
    for role in roles:
        args = (a.writes_per_visit, a.units, a.size, a.least)
        control = predict(model.native_params(), role, a.ranks, CONTROL, *args)
        rates = [predict(model.native_params(), role, a.ranks, n, *args) for n in grid]
        norm = [r / control for r in rates]
        fit = fit_plateau_power_law(grid, norm)
        out[role] = {"control_mps": control, "active": grid, "rate_mps": rates,
                     "normalised": norm, "fit": dataclasses.asdict(fit)}  # fmt: skip
        print(f"\n{role} ({ROLES[role]}): control {control:.1f} M msg/s a NIC (modelled)")
        print(f"{'connections':>12} {'M msg/s':>9} {'normalised':>11}")
        for n, r, v in zip(grid, rates, norm, strict=True):
            print(f"{n:>12,} {r:>9.1f} {v:>11.3f}")
        onset = (f"onset {fit.onset:,.0f} ± {fit.onset_err:,.0f}, exponent {fit.exponent:.3f}"
                 if fit.declines else "no decline")
        print(f"fit: plateau {fit.plateau:.3f} ± {fit.plateau_err:.3f}, {onset}"
              + (f" ({fit.shape})" if fit.declines else "")
              + (f"; flags: {', '.join(fit.flags)}" if fit.flags else ""))
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
