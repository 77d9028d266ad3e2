"""SM-clock fit T(f) = C/f + B (seed 000, Fig. 5 and Table 6).

Units are explicit: frequencies in Hz (f_unit="MHz" accepts MHz), latencies in µs, C in cycles
(the clock-sensitive work) and B in µs (the clock-insensitive part). With f in MHz, C/f is
cycles / (cycles per µs) = µs, which is why Table 6 can quote C in cycles and T in µs. Pass one
median per clock, as the seed does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .common import AnalysisError, FitError, covariance, paired, r_squared

_PER_UNIT = {"Hz": 1e6, "MHz": 1.0}  # factor turning 1/f into µs per cycle


@dataclass(frozen=True)
class ClockFit:
    c_cycles: float
    b_us: float
    c_err: float  # one standard error, cycles (NaN with two clocks)
    b_err: float  # one standard error, µs
    r2: float
    rss: float  # µs²
    n: int
    flags: tuple[str, ...]

    def predict_us(self, f_hz: ArrayLike) -> np.ndarray:
        return self.c_cycles * 1e6 / np.asarray(f_hz, dtype=float) + self.b_us

    def clock_fraction(self, f_hz: float) -> float:
        """Share of T(f) that is clock-sensitive, C/f / T(f) (the seed's "80% at top clock")."""
        return float(self.c_cycles * 1e6 / f_hz / self.predict_us(f_hz))


def fit_clock(f: ArrayLike, t_us: ArrayLike, *, f_unit: str = "Hz") -> ClockFit:
    if f_unit not in _PER_UNIT:
        raise AnalysisError(f"invalid f_unit={f_unit!r}: allowed {sorted(_PER_UNIT)}")
    fa, ta = paired("f", f, "t_us", t_us)
    if np.any(fa <= 0):
        raise AnalysisError(f"clock frequencies must be > 0 {f_unit}, got {fa[fa <= 0][:5]}")
    if fa.size < 2:
        raise FitError(f"clock fit needs at least 2 clock points, got {fa.size}")
    if np.unique(fa).size < 2:
        raise FitError(f"clock fit needs at least 2 distinct clocks, all points are at {fa[0]}")
    x = _PER_UNIT[f_unit] / fa  # µs per cycle
    design = np.column_stack([x, np.ones_like(x)])
    (c, b), *_ = np.linalg.lstsq(design, ta, rcond=None)
    rss = float(np.sum((ta - design @ np.array([c, b])) ** 2))
    flags: list[str] = []
    cov = covariance(design, rss)
    if cov is None:
        c_err = b_err = float("nan")
        flags.append("two clocks: the line is exact, no uncertainty")
    else:
        c_err, b_err = (float(v) for v in np.sqrt(np.diag(cov)))
    r2 = r_squared(ta, rss)
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
    return ClockFit(float(c), float(b), c_err, b_err, r2, rss, int(fa.size), tuple(flags))
