"""SM-clock fit T(f) = C/f + B (arXiv 2610.01380, Fig. 5 and Table 6).

Units are explicit: frequencies in f_unit (Hz, kHz, MHz or GHz; the fit remembers it, and
predict_us/clock_fraction take frequencies in the same unit), latencies in µs, C in cycles (the
clock-sensitive work) and B in µs (the clock-insensitive part). With f in MHz, C/f is cycles /
(cycles per µs) = µs, which is why Table 6 can quote C in cycles and T in µs. Pass one median
per clock, as the paper does.

A frequency that cannot be a processor clock in the stated unit (outside 10 MHz .. 10 GHz) is
refused: 1410 "Hz" is a clock given in MHz, and fitting it as Hz puts C off by 10⁶.

Noise model (`noise`): "relative" (default) weights each point by 1/T², as for medians whose
spread grows with the latency (the paper's ~1 % per clock); "absolute" gives every point the
same weight. The noise level is estimated from the weighted residuals (n - 2 degrees of
freedom), unless `sigma` gives each point's standard deviation in µs (then the uncertainties
use it as is). R² is the weighted one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .common import AnalysisError, FitError, paired, vector

# µs per cycle at f = 1 unit: 1/f [s] = 1e6/f [µs] in Hz.
US_PER_CYCLE = {"Hz": 1e6, "kHz": 1e3, "MHz": 1.0, "GHz": 1e-3}
HZ_PER_UNIT = {"Hz": 1.0, "kHz": 1e3, "MHz": 1e6, "GHz": 1e9}
# Processor clocks that exist: 10 MHz .. 10 GHz.
CLOCK_RANGE_HZ = (1e7, 1e10)
NOISE_MODELS = ("relative", "absolute")


@dataclass(frozen=True)
class ClockFit:
    c_cycles: float
    b_us: float
    c_err: float  # one standard error, cycles (NaN with two clocks)
    b_err: float  # one standard error, µs
    r2: float  # weighted R²
    rss: float  # weighted residual sum of squares
    n: int
    flags: tuple[str, ...]
    f_unit: str = "Hz"
    noise: str = "relative"

    def predict_us(self, f: ArrayLike) -> np.ndarray:
        """T(f) in µs, f in this fit's unit (f_unit)."""
        return self.c_cycles * US_PER_CYCLE[self.f_unit] / np.asarray(f, dtype=float) + self.b_us

    def clock_fraction(self, f: float) -> float:
        """Share of T(f) that is clock-sensitive, C/f / T(f) (the paper's "80% at top clock");
        f in this fit's unit."""
        sensitive = self.c_cycles * US_PER_CYCLE[self.f_unit] / float(f)
        return float(sensitive / float(self.predict_us(f)))


def check_clock_unit(fa: np.ndarray, f_unit: str) -> None:
    """Refuse frequencies that cannot be clocks in f_unit, naming the unit they look like."""
    if f_unit not in US_PER_CYCLE:
        raise AnalysisError(f"invalid f_unit={f_unit!r}: allowed {list(US_PER_CYCLE)}")
    hz = fa * HZ_PER_UNIT[f_unit]
    lo, hi = CLOCK_RANGE_HZ
    bad = fa[(hz < lo) | (hz > hi)]
    if bad.size:
        guess = [u for u, k in HZ_PER_UNIT.items()
                 if np.all((fa * k >= lo) & (fa * k <= hi))]
        hint = f"; they look like {guess[0]}" if guess else ""
        raise AnalysisError(
            f"clock frequencies {bad[:5].tolist()} {f_unit} are not processor clocks "
            f"(10 MHz .. 10 GHz = {lo / HZ_PER_UNIT[f_unit]:g} .. {hi / HZ_PER_UNIT[f_unit]:g} "
            f"{f_unit}){hint}: state the unit they are in (f_unit, --x-unit, or a column "
            "suffix _hz/_khz/_mhz/_ghz)")


def fit_clock(f: ArrayLike, t_us: ArrayLike, *, f_unit: str = "Hz", noise: str = "relative",
              sigma: ArrayLike | None = None) -> ClockFit:
    if noise not in NOISE_MODELS:
        raise AnalysisError(f"invalid noise={noise!r}: allowed {list(NOISE_MODELS)}")
    if f_unit not in US_PER_CYCLE:
        raise AnalysisError(f"invalid f_unit={f_unit!r}: allowed {list(US_PER_CYCLE)}")
    fa, ta = paired("f", f, "t_us", t_us)
    if np.any(fa <= 0):
        raise AnalysisError(f"clock frequencies must be > 0 {f_unit}, got {fa[fa <= 0][:5]}")
    check_clock_unit(fa, f_unit)
    if fa.size < 2:
        raise FitError(f"clock fit needs at least 2 clock points, got {fa.size}")
    if np.unique(fa).size < 2:
        raise FitError(f"clock fit needs at least 2 distinct clocks, all points are at {fa[0]}")
    if sigma is not None:
        sa = vector("sigma", sigma, positive=True)
        if sa.shape != ta.shape:
            raise AnalysisError(f"sigma and t_us differ in length: {sa.size} vs {ta.size}")
    elif noise == "relative":
        if np.any(ta <= 0):
            raise AnalysisError("relative noise needs latencies > 0 (use noise='absolute')")
        sa = ta.copy()
    else:
        sa = np.ones_like(ta)
    w = 1.0 / sa**2
    x = US_PER_CYCLE[f_unit] / fa  # µs per cycle
    design = np.column_stack([x, np.ones_like(x)])
    sw = np.sqrt(w)
    (c, b), *_ = np.linalg.lstsq(design * sw[:, None], ta * sw, rcond=None)
    resid = ta - design @ np.array([c, b])
    rss = float(np.sum(w * resid**2))
    flags: list[str] = []
    n, p = design.shape
    jtwj = design.T @ (design * w[:, None])
    if n <= p or np.linalg.matrix_rank(jtwj) < p:
        c_err = b_err = float("nan")
        flags.append("two clocks: the line is exact, no uncertainty")
    else:
        scale = 1.0 if sigma is not None else rss / (n - p)
        cov = scale * np.linalg.inv(jtwj)
        c_err, b_err = (float(v) for v in np.sqrt(np.diag(cov)))
    mean = float(np.sum(w * ta) / np.sum(w))
    sst = float(np.sum(w * (ta - mean) ** 2))
    r2 = float("nan") if sst == 0.0 else 1.0 - rss / sst
    if np.isnan(r2):
        flags.append("constant latency: R² undefined, latency does not depend on the clock")
    elif r2 < 0.9:
        flags.append(f"poor fit: R² = {r2:.3f} < 0.9")
    if c < 0:
        flags.append("negative C: latency falls as the clock slows")
    elif np.isfinite(c_err) and c < 2 * c_err:
        flags.append("C within 2 standard errors of zero: not clock-sensitive")
    if b < 0:
        flags.append("negative B: intercept below zero, more points at high clocks needed")
    return ClockFit(float(c), float(b), c_err, b_err, r2, rss, int(n), tuple(flags),
                    f_unit=f_unit, noise=noise if sigma is None else "sigma")
