"""perftest against `gicbench run --provider verbs`, side by side on one device, one run (run it
inside the Soft-RoCE guest: `make bench-vm`, or any machine with an RDMA device and perftest).

  ib_write_lat -s 8       vs  gicbench single-op round trip / 2 (and put+completion), p50
  ib_write_bw -s 8        vs  gicbench msg-rate at 8 B (batch 1 as perftest posts, and batch 16)

Both ends of each test run on the same device (loopback, as rdma-core's tests do). perftest
reports ib_write_lat as half the ping-pong round trip (t_typical is the median), so the round
trip is halved here to match. The ratios are the figures: absolute numbers under software
emulation are the emulator's, not a NIC's. Writes JSON to --out and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def run_pair(cmd: list[str], host: str, timeout: float) -> str:
    """perftest's server in the background, then its client; returns the client's output."""
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)  # let the server listen
        for _ in range(20):
            r = subprocess.run([*cmd, host], capture_output=True, text=True,
                               timeout=timeout, check=False)  # fmt: skip
            if r.returncode == 0:
                return r.stdout
            if "Couldn't connect" not in r.stdout + r.stderr:
                raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stdout}{r.stderr}")
            time.sleep(0.5)
        raise RuntimeError(f"{' '.join(cmd)}: server never accepted")
    finally:
        try:
            server.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            server.kill()


def table_row(out: str, header_key: str) -> dict[str, float]:
    """perftest prints a header line (containing header_key) and one row of numbers."""
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if header_key in line:
            # One name per column: "BW peak[MB/sec]" -> "BW_peak[MB/sec]", "99% percentile[usec]"
            # -> "99%_percentile[usec]"; "#bytes #iterations" stay two names.
            names = re.sub(r"(?<=[\w%]) (?=[A-Za-z]+\[)", "_", line.strip()).split()
            for row in lines[i + 1 :]:
                vals = row.split()
                if vals and re.fullmatch(r"[\d.]+", vals[0]):
                    return {n: float(v) for n, v in zip(names, vals, strict=False)}
    raise RuntimeError(f"no '{header_key}' table in perftest output:\n{out}")


def perftest(dev: str, gid: int, host: str, iters: int) -> dict[str, float]:
    base = ["-d", dev, "-x", str(gid), "-s", "8", "-F"]
    lat = table_row(
        run_pair(["ib_write_lat", *base, "-n", str(iters), "-p", "18515"], host, 300),
        "t_typical",
    )
    bw = table_row(
        run_pair(["ib_write_bw", *base, "-n", str(iters * 20), "-p", "18516"], host, 300),
        "MsgRate",
    )
    return {
        "ib_write_lat_t_typical_us": lat["t_typical[usec]"],
        "ib_write_lat_t_avg_us": lat["t_avg[usec]"],
        "ib_write_bw_mpps": bw["MsgRate[Mpps]"],
    }


def gicbench_run(args: argparse.Namespace, *run_args: str) -> dict:
    """`mpiexec -n 2 python -m gicbench run ... --provider verbs --json`: what users run."""
    mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or "mpiexec"
    out = Path(args.out) / f"run-{run_args[0]}-{len(list(Path(args.out).glob('run-*')))}"
    # Bound to a core each by default: two unbound spinning ranks can start on one vCPU and
    # share it by time slices (milliseconds per hand-off).
    cmd = [mpiexec, "-n", "2", "--bind-to", args.bind, sys.executable, "-m", "gicbench", "run",
           *run_args, "--provider", "verbs", "--ib-dev", f"={args.device}", "--gid-index",
           str(args.gid_index), "-b", "8", "-e", "8", "--payload", "inline", "--quiet",
           "--json", "-o", str(out)]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, env=os.environ, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return json.loads(r.stdout)


def gicbench(args: argparse.Namespace) -> dict[str, float]:
    n, w = str(args.iters), str(max(1, args.iters // 10))
    doc = gicbench_run(args, "single-op", "--modes", "put_completion,round_trip", "-n", n, "-w", w)
    res: dict[str, float] = {}
    for row in doc["results"]:
        res[f"{row['mode']}_p50_us"] = float(row["p50_us"])
    msgs = args.iters * 20
    for batch in (1, 16):
        doc = gicbench_run(args, "msg-rate", "--batch", str(batch), "--messages", str(msgs),
                           "-w", str(msgs // 10))  # fmt: skip
        (row,) = doc["results"]
        res[f"msg_rate_batch{batch}_mpps"] = float(row["msg_rate_mps"])
    res["device"] = doc["nic"]["device"]
    res["gid_index"] = doc["nic"]["gid_index"]
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="rxe0")
    ap.add_argument("--gid-index", type=int, default=1)
    ap.add_argument("--host", default="10.200.0.1", help="address of the device's netdev")
    ap.add_argument("-n", "--iters", type=int, default=2000)
    ap.add_argument("--out", default=".", help="folder for perftest_compare.json")
    ap.add_argument("--bind", default="core", help="mpiexec --bind-to for the two ranks")
    ap.add_argument("--rounds", type=int, default=1, help="perftest/gicbench rounds, alternated")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error(f"--rounds {args.rounds}: at least 1")
    for tool in ("ib_write_lat", "ib_write_bw"):
        if shutil.which(tool) is None:
            sys.exit(f"perftest_compare: {tool} not found (apt-get install perftest)")
    t0 = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # Rounds alternate perftest and gicbench, so a change of load on a shared machine hits both;
    # the figures are each round's ratios and their median.
    rounds = []
    for _ in range(args.rounds):
        pt = perftest(args.device, args.gid_index, args.host, args.iters)
        gb = gicbench(args)
        rounds.append({"perftest": pt, "gicbench": gb, "ratios": ratios(pt, gb)})
    median = {k: statistics.median(r["ratios"][k] for r in rounds) for k in rounds[0]["ratios"]}
    result = {
        "rounds": rounds,
        "median_ratios": median,
        "iters": args.iters,
        "bind": args.bind,
        "wall_s": time.monotonic() - t0,
    }
    (out / "perftest_compare.json").write_text(json.dumps(result, indent=2))
    for i, r in enumerate(rounds):
        table(r["perftest"], r["gicbench"], f"round {i + 1} of {len(rounds)}")
    print("median ratios: " + ", ".join(f"{k} {v:.2f}" for k, v in median.items()))
    return 0


def ratios(pt: dict[str, float], gb: dict) -> dict[str, float]:
    lat = pt["ib_write_lat_t_typical_us"]
    return {
        "single_op_half_rtt_vs_ib_write_lat": gb["round_trip_p50_us"] / 2 / lat,
        "put_completion_vs_ib_write_lat": gb["put_completion_p50_us"] / lat,
        "msg_rate_batch1_vs_ib_write_bw": gb["msg_rate_batch1_mpps"] / pt["ib_write_bw_mpps"],
        "msg_rate_batch16_vs_ib_write_bw": gb["msg_rate_batch16_mpps"] / pt["ib_write_bw_mpps"],
    }


def table(pt: dict[str, float], gb: dict, title: str) -> None:
    half_rtt = gb["round_trip_p50_us"] / 2
    lat = pt["ib_write_lat_t_typical_us"]
    rows = [
        ("latency 8 B (µs)", "ib_write_lat t_typical", lat, "single-op RTT/2 p50", half_rtt),
        ("", "", lat, "single-op put+completion p50", gb["put_completion_p50_us"]),
        ("rate 8 B (Mpps)", "ib_write_bw MsgRate", pt["ib_write_bw_mpps"], "msg-rate batch 1",
         gb["msg_rate_batch1_mpps"]),
        ("", "", pt["ib_write_bw_mpps"], "msg-rate batch 16", gb["msg_rate_batch16_mpps"]),
    ]  # fmt: skip
    print(f"# perftest vs gicbench verbs on {gb['device']} (GID {gb['gid_index']}), {title}")
    print(
        f"{'metric':>18} {'perftest':>24} {'value':>9} {'gicbench':>30} {'value':>9} {'ratio':>7}"
    )
    for metric, pname, pv, gname, gv in rows:
        print(f"{metric:>18} {pname:>24} {pv:9.3f} {gname:>30} {gv:9.3f} {gv / pv:7.2f}")


if __name__ == "__main__":
    sys.exit(main())
