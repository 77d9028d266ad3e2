"""clock-sweep: single-op at locked SM clocks (the paper, arXiv 2610.01380, §4.1, Figure 5,
Table 6): how much of the issue and completion time scales with device execution speed.

For each --clocks frequency the sending rank has its submitter lock the SM clock of the GPU its
loops run on (the clock-control shape: `nvidia-smi -lgc`), measure the effective SM clock in a
kernel (clock64 over globaltimer) and refuse a lock that did not hold, runs single-op, and the
clock is restored (`nvidia-smi -rgc`) however the point ends. `analyze`/`report` fit
T(f) = C/f + B: C is the clock-sensitive work (cycles), B the rest. Needs a submitter with clock
control (mini-gda, --submitter gpu) and the right to lock clocks (root).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..knobs import KIND_STR, Knob
from ..submit.base import Shape
from .common import ITERS, PAYLOAD, TRANSPORT, WARMUP, SizeSweep, field
from .registry import Column, PointResult, register
from .single_op import MODES_K, SingleOp

if TYPE_CHECKING:
    from .context import RankContext

CLOCKS = Knob(
    "--clocks",
    "SM clocks to lock, MHz, comma-separated (e.g. 990,1200,1410,1620,1830,1980)",
    KIND_STR,
    many=True,
)


@dataclass(frozen=True)
class ClockSweepParams(SizeSweep):
    iters: int = field(ITERS, 1000)
    warmup: int = field(WARMUP, 100)
    payload: str = field(PAYLOAD, "inline")
    transport: str = field(TRANSPORT, "rc")
    clocks: tuple[str, ...] = field(CLOCKS, ("990", "1200", "1410", "1620", "1830", "1980"))
    modes: tuple[str, ...] = field(MODES_K, ("issue", "put_completion"))

    @property
    def scope(self) -> str:
        return "selected"

    @property
    def qps(self) -> int:
        return 1

    @property
    def mhz(self) -> list[int]:
        return [int(c) for c in self.clocks]


@register
class ClockSweep(SingleOp):
    name = "clock-sweep"
    summary = "single-op at locked SM clocks; T(f) = C/f + B"
    method = "the paper (arXiv 2610.01380) §4.1, Figure 5, Table 6"
    Params = ClockSweepParams
    shapes = frozenset({Shape.LATENCY, Shape.RESPOND, Shape.CLOCK})
    fits = ("clock",)

    def needed_shapes(self) -> frozenset[Shape]:
        # from the modes, not the points: those need --clocks parsed, which check() refuses
        rtt = {Shape.RESPOND} if "round_trip" in self.params.modes else set()
        return frozenset({Shape.LATENCY, Shape.CLOCK, *rtt})

    def check(self) -> None:
        super().check()
        p = self.params
        try:
            mhz = p.mhz
        except ValueError:
            raise ConfigError("clocks (--clocks)", ",".join(p.clocks), "integers (MHz)") from None
        if len(mhz) < 2 or any(not 100 <= f <= 5000 for f in mhz):
            raise ConfigError(
                "clocks (--clocks)", ",".join(p.clocks), "two or more clocks in 100..5000 MHz"
            )

    def points(self) -> list[dict[str, Any]]:
        base = super().points()  # (zero-argument super() does not work in a comprehension)
        return [{**pt, "clock_mhz": f} for f in self.params.mhz for pt in base]

    def run_point(self, ctx: RankContext, point: dict[str, Any]) -> PointResult:
        if not ctx.traffic.sends:
            return super().run_point(ctx, point)
        with ctx.submitter.locked_clock(point["clock_mhz"]) as measured:
            result = super().run_point(ctx, point)
        result.results["sm_clock_mhz"] = measured / 1e6
        return result

    def columns(self) -> list[Column]:
        return [
            Column("clock(MHz)", "clock_mhz", "{:d}"),
            Column("SM(MHz)", "sm_clock_mhz", "{:.0f}"),
            Column("mode", "mode", "{}", width=14),
            Column("p50(µs)", "p50_us"),
            Column("p99(µs)", "p99_us"),
            Column("mean(µs)", "mean_us"),
        ]
