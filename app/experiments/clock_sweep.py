"""clock-sweep: single-op at locked SM clocks (the paper, arXiv 2610.01380, §4.1, Figure 5,
Table 6): how much of the issue and completion time scales with device execution speed.

For each --clocks frequency the sending rank locks its GPU's graphics clock (`nvidia-smi -lgc`),
measures the effective SM clock in a kernel (clock64 over globaltimer) and refuses a lock that
did not hold, runs single-op, and restores the clock (`nvidia-smi -rgc`) however the point ends.
`analyze`/`report` fit T(f) = C/f + B: C is the clock-sensitive work (cycles), B the rest.
Needs the GPU submitter and the right to lock clocks (root).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..knobs import KIND_STR, Knob
from ..submit.base import get as submitter_class
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
    fits = ("clock",)

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
        if not submitter_class(self.cfg.submitter).needs_gpu:
            raise ConfigError(
                "submitter (--submitter)",
                self.cfg.submitter,
                "gpu (clock-sweep locks the GPU's SM clock under GPU-submitted work)",
            )

    def points(self) -> list[dict[str, Any]]:
        base = super().points()  # (zero-argument super() does not work in a comprehension)
        return [{**pt, "clock_mhz": f} for f in self.params.mhz for pt in base]

    def run_point(self, ctx: RankContext, point: dict[str, Any]) -> PointResult:
        if not ctx.traffic.sends:
            return super().run_point(ctx, point)
        from ..submit.gpu import clock

        sub = ctx.submitter
        gpu = sub.device.pci_bus_id
        with clock.locked(gpu, point["clock_mhz"]):
            measured = sub.measure_clock()
            clock.check_measured(point["clock_mhz"], measured)
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
