"""Child of test_host_loops_signals: runs one long native host loop until a signal ends it.

Usage: host_loop_child.py LOOP. Installs Python handlers for SIGTERM/SIGINT first and the native
handler after them (as the harness does), prints "started" once the loop is visibly running, and
finally one JSON line with what the loop returned and which Python handlers ran.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from host_world import emu_world

from gicbench import _native
from gicbench.submit.native_lanes import lane_table

LONG = 10**12  # messages: would take days
ITERS = 8_000_000  # single-op iterations: many seconds, and the samples array stays small


def _announce_when(cond) -> None:
    def watch() -> None:
        while not cond():
            time.sleep(0.002)
        print("started", flush=True)

    threading.Thread(target=watch, daemon=True).start()


def main(loop: str) -> None:
    seen: list[int] = []
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda signum, _frame: seen.append(signum))
    _native.host.install_interrupt_handler()
    _native.host.install_interrupt_handler()  # idempotent: must not chain to itself
    with emu_world(nqps=2, depth=64, timeout_s=60.0) as w:
        src, landing = w.bufs[0][0], w.bufs[1][1]
        w.src()[:] = 0xA5
        w.landing()[:] = 0
        prog = (w.fabrics[0].progress_hook(), w.fabrics[0].progress_ctx())
        s = (src.addr, src.lkey, src.length)
        d = (landing.addr, landing.rkey, landing.length)
        if loop == "msg_rate":
            _announce_when(lambda: w.landing()[0] != 0)
            ok, _, _, err = _native.host.msg_rate(
                lane_table(w.lanes(2)), 2, 4, 64, True, LONG, 0, LONG, 60 * 10**9, *prog
            )
        elif loop == "single_op":
            _announce_when(lambda: w.landing()[0] != 0)
            ok, _, err = _native.host.single_op(
                lane_table(w.lanes(2)), 0, 64, True, False, 0, s, d, s, ITERS, 0, 60 * 10**9, *prog
            )
        elif loop == "rtt_respond":  # waits for requests that never come
            _announce_when(lambda: True)
            mine = w.bufs[1]
            ok, err = _native.host.rtt_respond(
                lane_table(w.lanes(2, side=1)),
                0,
                64,
                True,
                (mine[1].addr, mine[1].lkey, mine[1].length),
                (mine[0].addr, mine[0].lkey, mine[0].length),
                (w.bufs[0][1].addr, w.bufs[0][1].rkey, w.bufs[0][1].length),
                2**32 - 1,
                60 * 10**9,
                w.fabrics[1].progress_hook(),
                w.fabrics[1].progress_ctx(),
            )
        else:
            raise SystemExit(f"unknown loop {loop!r}")
    print(
        json.dumps(
            {
                "ok": ok,
                "kind": err["kind"],
                "done": err["done"],
                "total": err["total"],
                "handled": seen,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main(sys.argv[1])
