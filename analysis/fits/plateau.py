"""Plateau, then a decline (arXiv 2610.01380, §4.3.3 and Appendix D.3).

The onset is where the plateau ends: the largest x at which the rate is still on its plateau.
Two shapes of decline after it are fitted in log space, and the data choose between them:

- power law (the paper's model), continuous at the onset:

      y(x) = plateau                               for x <= onset
      y(x) = plateau * (x / onset) ** -exponent    for x >  onset

  log y = a - exponent * max(0, log x - log onset). For a fixed onset the model is linear in
  (a, exponent), so the onset is profiled: the residual sum of squares is minimised within
  every interval between neighbouring x values and the best interval wins. Uncertainties come
  from the Gauss-Newton covariance at the optimum.

- step: the rate leaves the plateau between two neighbouring x values x_k < x_k+1 by more than
  the continuous model can follow (a cliff, as a least-recently-used cache gives when a cyclic
  access outgrows it: every lookup hits, then every lookup misses), then declines as a power
  law of its own:

      y(x) = plateau                                       for x <= x_k
      y(x) = plateau * drop * (x / x_k+1) ** -exponent     for x >= x_k+1

  linear in (log plateau, log plateau + log drop, exponent) for each split, which is searched.
  The data cannot place the onset inside [x_k, x_k+1]: it is reported as the middle of that
  interval with half its width as the uncertainty, widened to every split whose residual sum
  of squares is within one residual variance of the best (the splits the noise cannot tell
  apart). `exponent` is the decline after the onset (0 for a flat floor).

The step is chosen when it fits significantly better than the continuous model (an F-test on
the one parameter it adds, at p < 0.001) and its drop is more than two standard errors below 1.
x is typically the number of active connections, y a message rate (or the rate normalised to a
control).

Goodness of fit: R² in log space below 0.9 is flagged; so are residuals that are systematic
rather than noise (a Wald-Wolfowitz runs test on their signs in x order, z < -2), and data that
rise again after their lowest point past the onset by more than 3 residual standard deviations
(a U-shape, which the model, declining only, cannot describe).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import minimize_scalar
from scipy.stats import f as f_dist

from .common import FitError, covariance, paired

MIN_POINTS = 4
STEP_P = 1e-3  # the step must beat the continuous model at this significance
POWER_LAW, STEP = "power-law", "step"


@dataclass(frozen=True)
class PlateauFit:
    plateau: float
    plateau_err: float
    onset: float  # NaN when no decline was found
    onset_err: float
    exponent: float  # of the decline after the onset; 0 when no decline was found
    exponent_err: float
    r2_log: float  # R² in log space against a constant
    rss_log: float
    n: int
    declines: bool
    flags: tuple[str, ...]
    shape: str = POWER_LAW  # "power-law" (continuous at the onset) or "step"
    drop: float = 1.0  # step: the decline's level at tail_start over the plateau
    drop_err: float = float("nan")
    tail_start: float = float("nan")  # step: the first x past the onset (x_k+1)

    def predict(self, x: ArrayLike) -> np.ndarray:
        xa = np.asarray(x, dtype=float)
        if not self.declines:
            return np.full_like(xa, self.plateau)
        if self.shape == STEP:
            tail = self.plateau * self.drop * (xa / self.tail_start) ** -self.exponent
            # the best split's first point past the plateau is on the decline, whatever the
            # onset's interval (widened to the splits alike) says
            return np.where((xa <= self.onset) & (xa < self.tail_start), self.plateau, tail)
        return self.plateau * np.minimum(1.0, (xa / self.onset) ** -self.exponent)


def _profile(u: np.ndarray, v: np.ndarray, u0: float) -> tuple[float, float, float]:
    """Best (a, exponent, rss) for a fixed log-onset u0."""
    hinge = np.maximum(0.0, u - u0)
    design = np.column_stack([np.ones_like(u), -hinge])
    coef, *_ = np.linalg.lstsq(design, v, rcond=None)
    rss = float(np.sum((v - design @ coef) ** 2))
    return float(coef[0]), float(coef[1]), rss


@dataclass(frozen=True)
class _Step:
    k: int  # the plateau holds up to grid[k], the decline starts at grid[k + 1]
    coef: np.ndarray  # log plateau, log level at grid[k + 1], exponent
    design: np.ndarray
    rss: float


def _step(u: np.ndarray, v: np.ndarray, grid: np.ndarray, k: int) -> _Step:
    head, tail = u <= grid[k], u >= grid[k + 1]
    design = np.column_stack([head, tail, -(u - grid[k + 1]) * tail]).astype(float)
    coef, *_ = np.linalg.lstsq(design, v, rcond=None)
    return _Step(k, coef, design, float(np.sum((v - design @ coef) ** 2)))


def _steps(u: np.ndarray, v: np.ndarray, grid: np.ndarray, min_tail: int) -> list[_Step]:
    """Every split with a plateau of at least one x and a decline of at least max(2, min_tail)
    x values that lies below the plateau."""
    out = []
    for k in range(grid.size - max(2, min_tail)):
        s = _step(u, v, grid, k)
        if s.coef[1] < s.coef[0]:
            out.append(s)
    return out


def fit_plateau_power_law(x: ArrayLike, y: ArrayLike, *, min_tail: int = 2) -> PlateauFit:
    """Fit a plateau and its decline (a continuous power law, or a step then a power law); a
    flat or rising series comes back flagged, with declines=False, the geometric-mean plateau,
    onset NaN and exponent 0."""
    xa, ya = paired("x", x, "y", y, positive=True)
    if xa.size < MIN_POINTS:
        raise FitError(f"plateau fit needs at least {MIN_POINTS} points, got {xa.size}")
    order = np.argsort(xa, kind="stable")
    xs = xa[order]
    u, v = np.log(xs), np.log(ya[order])
    grid = np.unique(u)
    if grid.size < 3:
        raise FitError(f"plateau fit needs at least 3 distinct x values, got {grid.size}")
    rss0 = float(np.sum((v - v.mean()) ** 2))
    if np.ptp(v) <= 1e-12 * max(1.0, float(np.abs(v).max())):
        raise FitError("plateau fit: y is constant, there is no decline to fit")
    # the x values as given (exp(log x) may differ from x in the last bits)
    xgrid = np.array([xs[np.flatnonzero(u == g)[0]] for g in grid])

    best = (np.inf, grid[0])
    # RSS(onset) is smooth between neighbouring x values but kinks at them: search each interval.
    for lo, hi in itertools.pairwise(grid):
        res = minimize_scalar(lambda t: _profile(u, v, t)[2], bounds=(lo, hi), method="bounded",
                              options={"xatol": 1e-9})
        for cand in (lo, float(res.x)):
            rss = _profile(u, v, cand)[2]
            if rss < best[0] - 1e-15:
                best = (rss, cand)
    n = int(u.size)
    steps = _steps(u, v, grid, min_tail) if n > 4 else []
    if steps:
        step = _step_fit(u, v, grid, xgrid, steps, best[0], rss0)
        if step is not None:
            return step
    return _power_law_fit(u, v, best, rss0, min_tail)


def _step_fit(u: np.ndarray, v: np.ndarray, grid: np.ndarray, xgrid: np.ndarray,
              steps: list[_Step], rss_power: float, rss0: float) -> PlateauFit | None:
    """The step fit, or None when the data do not call for it over the continuous model."""
    n = u.size
    dof = n - 4  # three coefficients and the split
    exact = 1e-14 * rss0
    s = min(steps, key=lambda c: c.rss)
    if rss_power <= exact:
        return None  # the continuous model is exact
    if s.rss > exact:
        fstat = (rss_power - s.rss) / (s.rss / dof)
        if fstat <= f_dist.ppf(1.0 - STEP_P, 1, dof):
            return None
    var = s.rss / dof
    jtj = s.design.T @ s.design
    if np.linalg.matrix_rank(jtj) < 3:
        return None
    cov = var * np.linalg.inv(jtj)
    a, b, alpha = (float(c) for c in s.coef)
    drop_se = float(np.sqrt(max(cov[0, 0] + cov[1, 1] - 2 * cov[0, 1], 0.0)))
    if not (a - b > 2 * drop_se):
        return None
    # The splits the noise cannot tell from the best: their intervals bound the onset.
    alike = [c.k for c in steps if c.rss - s.rss <= max(var, exact)]
    lo, hi = float(xgrid[min(alike)]), float(xgrid[max(alike) + 1])
    k = s.k
    flags: list[str] = []
    if min(alike) == 0:
        flags.append("plateau rests on a single point")
    u_end = float(grid[k])
    resid = v - s.design @ s.coef
    flags += _goodness_flags(u, v, resid, u_end, rss0, s.rss)
    plateau = float(np.exp(a))
    return PlateauFit(
        plateau=plateau, plateau_err=float(plateau * np.sqrt(cov[0, 0])),
        onset=(lo + hi) / 2, onset_err=(hi - lo) / 2,
        exponent=alpha, exponent_err=float(np.sqrt(cov[2, 2])),
        r2_log=1.0 - s.rss / rss0, rss_log=s.rss, n=int(n), declines=True, flags=tuple(flags),
        shape=STEP, drop=float(np.exp(b - a)), drop_err=float(np.exp(b - a) * drop_se),
        tail_start=float(xgrid[k + 1]),
    )


def _power_law_fit(u: np.ndarray, v: np.ndarray, best: tuple[float, float], rss0: float,
                   min_tail: int) -> PlateauFit:
    rss1, u0 = best
    a, alpha, _ = _profile(u, v, u0)
    n = int(u.size)
    flags: list[str] = []

    tail = int(np.sum(u > u0))
    jac = np.column_stack([np.ones_like(u), -np.maximum(0.0, u - u0), alpha * (u > u0)])
    cov = covariance(jac, rss1)
    errs = np.full(3, np.nan) if cov is None else np.sqrt(np.diag(cov))
    significant = alpha > 0 and (rss1 == 0.0 or (np.isfinite(errs[1]) and alpha > 2 * errs[1]))
    if alpha <= 0 or tail < min_tail or not significant:
        why = ("y rises with x" if alpha < 0 else
               f"only {tail} point(s) after the onset" if tail < min_tail else
               "the decline is within 2 standard errors of zero")
        geo = float(np.exp(v.mean()))
        return PlateauFit(
            plateau=geo, plateau_err=float(geo * v.std(ddof=1) / np.sqrt(n)),
            onset=float("nan"), onset_err=float("nan"), exponent=0.0,
            exponent_err=float("nan"), r2_log=0.0, rss_log=rss0, n=n, declines=False,
            flags=(f"no decline: {why}; reporting the geometric mean as the plateau",),
        )
    if cov is None:
        flags.append("uncertainties undetermined (too few points around the onset)")
    head = int(np.sum(u <= u0))
    if np.isclose(u0, u[0]):
        flags.append("onset at the first x: no plateau observed, the onset is an upper bound")
    elif head < 2:
        flags.append("plateau rests on a single point")
    flags += _goodness_flags(u, v, v - (a - alpha * np.maximum(0.0, u - u0)), u0, rss0, rss1)
    plateau, onset = float(np.exp(a)), float(np.exp(u0))
    return PlateauFit(
        plateau=plateau, plateau_err=float(plateau * errs[0]),
        onset=onset, onset_err=float(onset * errs[2]),
        exponent=float(alpha), exponent_err=float(errs[1]),
        r2_log=1.0 - rss1 / rss0, rss_log=rss1, n=n, declines=True, flags=tuple(flags),
    )


RUNS_Z = -2.0  # one-sided, about 2 % of pure-noise series are flagged
R2_POOR = 0.9


def runs_z(resid: np.ndarray, scale: float) -> tuple[int, float, float] | None:
    """(runs, expected runs, z) of the residual signs, or None when too few of each sign."""
    signs = np.sign(resid[np.abs(resid) > 1e-9 * max(scale, 1e-300)])
    n1, n2 = int(np.sum(signs > 0)), int(np.sum(signs < 0))
    n = n1 + n2
    if n1 < 2 or n2 < 2:
        return None
    runs = 1 + int(np.sum(signs[1:] != signs[:-1]))
    mu = 1 + 2 * n1 * n2 / n
    var = 2 * n1 * n2 * (2 * n1 * n2 - n) / (n**2 * (n - 1))
    return runs, mu, (runs - mu) / np.sqrt(var)


def _goodness_flags(u: np.ndarray, v: np.ndarray, resid: np.ndarray, u0: float, rss0: float,
                    rss1: float) -> list[str]:
    flags: list[str] = []
    n = u.size
    r2 = 1.0 - rss1 / rss0
    if r2 < R2_POOR:
        flags.append(f"poor fit: R² (log) = {r2:.3f} < {R2_POOR}")
    noise = float(np.sqrt(rss1 / max(n - 3, 1)))
    if noise > 1e-9 * max(1.0, float(np.abs(v).max())):
        runs = runs_z(resid, float(np.abs(v).max()))
        if runs is not None and runs[2] < RUNS_Z:
            flags.append(f"systematic residuals: {runs[0]} sign runs where {runs[1]:.1f} are "
                         f"expected (runs test z = {runs[2]:.1f}): the data do not follow a "
                         "plateau and a power-law decline")
    tail = np.flatnonzero(u > u0)
    if tail.size >= 3:
        low = tail[int(np.argmin(v[tail]))]
        after = np.arange(low, n)
        if after.size >= 3 and np.unique(u[after]).size >= 2:
            # Slope of log y against log x from the lowest point on, with its standard error.
            design = np.column_stack([np.ones(after.size), u[after]])
            coef, *_ = np.linalg.lstsq(design, v[after], rcond=None)
            res = v[after] - design @ coef
            dof = after.size - 2
            spread = np.sum((u[after] - u[after].mean()) ** 2)
            se = np.sqrt(np.sum(res**2) / dof / spread) if dof > 0 else 0.0
            rise = float(v[-1] - v[low])
            if coef[1] > 0 and coef[1] > 3 * se and rise > 0:
                flags.append(f"rises again after x = {np.exp(u[low]):.4g} (by "
                             f"{np.expm1(rise):.0%}, slope {coef[1]:.2f} ± {se:.2f} in log-log): "
                             "U-shaped, the model only declines")
    return flags
