"""The exposed-communication model of arXiv 2611.12362 (eqs. 1-3) and the near-floor rule of its
Fig. 6.

All times are measured from the start of dispatch send (µs, or any one unit):
  A  ready      timestamp at which the other microbatch's useful work is ready
  R  release    timestamp at which the backend releases the sending GPU
  I  in_flight  duration from R until the final arrival dispatch receive needs
  T  cover      duration of the covering work of the other microbatch
Then S = max(A, R) (covering work starts), J = [R + I - S]+ (in-flight time left at S),
O = min(T, J) (overlapped), X = [J - T]+ (exposed tail), D = S + T + X = max(S + T, R + I)
(dispatch receive can begin). Every function broadcasts like numpy.

Inputs must be finite (an infinite time has no exposed part to compute). R, I and T must be
>= 0: the backend cannot release the GPU before dispatch send starts. A may be negative (the
other microbatch's work can be ready before dispatch send starts).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .common import AnalysisError


@dataclass(frozen=True)
class ExposedTimes:
    start: np.ndarray  # S
    remaining: np.ndarray  # J
    overlapped: np.ndarray  # O
    exposed: np.ndarray  # X
    receive_start: np.ndarray  # D


def _array(name: str, value: ArrayLike, *, duration: bool,
           after_start: bool = False) -> np.ndarray:
    arr = np.asarray(value, dtype=float)
    if np.any(np.isnan(arr)):
        raise AnalysisError(f"{name} has NaN values")
    if np.any(np.isinf(arr)):
        raise AnalysisError(f"{name} has infinite values: every time must be finite")
    if duration and np.any(arr < 0):
        raise AnalysisError(f"{name} is a duration and must be >= 0, got {arr[arr < 0][:5]}")
    if after_start and np.any(arr < 0):
        raise AnalysisError(f"{name} is a time after dispatch send starts and must be >= 0, "
                            f"got {arr[arr < 0][:5]}")
    return arr


def exposed_model(ready: ArrayLike, release: ArrayLike, in_flight: ArrayLike,
                  cover: ArrayLike) -> ExposedTimes:
    a = _array("ready (A)", ready, duration=False)
    r = _array("release (R)", release, duration=False, after_start=True)
    i = _array("in_flight (I)", in_flight, duration=True)
    t = _array("cover (T)", cover, duration=True)
    a, r, i, t = np.broadcast_arrays(a, r, i, t)
    s = np.maximum(a, r)  # eq. 1
    j = np.maximum(r + i - s, 0.0)  # eq. 2
    o = np.minimum(t, j)
    x = np.maximum(j - t, 0.0)
    d = s + t + x  # eq. 3
    return ExposedTimes(s, j, o, x, d)


def release_advance(ready: ArrayLike, release_base: ArrayLike,
                    release_off: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """(ΔR, ΔS): how much earlier offload releases the GPU and starts the covering work.

    0 <= ΔS <= ΔR: the advance is full when A <= R_off, partial in between, zero when
    A >= R_base. Requires R_off <= R_base.
    """
    a = _array("ready (A)", ready, duration=False)
    rb = _array("release_base", release_base, duration=False, after_start=True)
    ro = _array("release_off", release_off, duration=False, after_start=True)
    a, rb, ro = np.broadcast_arrays(a, rb, ro)
    if np.any(ro > rb):
        raise AnalysisError("release_off must be <= release_base (offload releases earlier)")
    return rb - ro, np.maximum(a, rb) - np.maximum(a, ro)


@dataclass(frozen=True)
class NearFloor:
    wait: np.ndarray | float  # shortest wait whose time is within tolerance of the floor
    index: np.ndarray | int  # its index in ascending wait order
    floor: np.ndarray | float  # lowest observed time of the row
    threshold: np.ndarray | float  # floor * (1 + tolerance)
    tolerance: float


def shortest_wait_near_floor(waits: ArrayLike, times: ArrayLike,
                             tolerance: float = 0.05) -> NearFloor:
    """Fig. 6's marker: the first requested wait whose time is within `tolerance` of the row's
    lowest time. `times` has shape (..., len(waits)); each row gets its own floor and answer.
    NaN times (missing cells) are ignored; a row with no finite time is refused."""
    w = np.asarray(waits, dtype=float)
    t = np.asarray(times, dtype=float)
    if w.ndim != 1 or w.size == 0:
        raise AnalysisError(f"waits must be a non-empty 1-D array, got shape {w.shape}")
    if t.shape[-1:] != w.shape:
        raise AnalysisError(f"times must end with the waits axis ({w.size}), got {t.shape}")
    if not 0 <= tolerance < 1:
        raise AnalysisError(f"invalid tolerance={tolerance!r}: in [0, 1)")
    if np.unique(w).size != w.size or np.any(~np.isfinite(w)):
        raise AnalysisError("waits must be finite and distinct")
    order = np.argsort(w)
    w, t = w[order], t[..., order]
    finite = np.isfinite(t)
    if not np.all(finite.any(axis=-1)):
        raise AnalysisError("a row of times has no finite value: no floor to compare against")
    floor = np.min(np.where(finite, t, np.inf), axis=-1)
    if np.any(floor <= 0):
        raise AnalysisError("times must be > 0: a relative tolerance needs a positive floor")
    threshold = floor * (1 + tolerance)
    near = finite & (t <= threshold[..., None])
    index = np.argmax(near, axis=-1)  # first True; one always exists (the floor itself)
    wait = w[index]
    if t.ndim == 1:
        return NearFloor(float(wait), int(index), float(floor), float(threshold), tolerance)
    return NearFloor(wait, index, floor, threshold, tolerance)


@dataclass(frozen=True)
class WaitFit:
    """Eqs. 1-3 fitted to one wait-sweep row (one backend, one token count).

    In the wait sweep the delay kernel follows dispatch send on the same stream, so the covering
    work is ready at release (A = R) and lasts the wait (T = w). Then S = R, J = I and the
    receive kernel waits the exposed tail X = [I - w]+ on top of its own work C, so the timed
    T_send + T_receive is E(w) = R + C + [I - w]+: a floor F = R + C, reached once w >= I.
    """

    release: float  # R: the send kernel's duration (mean of the measured sends)
    release_err: float | None
    in_flight: float  # I: where the fitted hinge meets the floor
    in_flight_err: float | None
    floor: float  # F = R + C
    floor_err: float | None
    receive: float  # C = F - R: the receive kernel's own work once nothing is in flight
    r2: float
    flags: tuple[str, ...]
    curve: tuple[np.ndarray, np.ndarray]  # waits and the fitted E(w), for plotting


def _hinge(waits: np.ndarray, times: np.ndarray) -> tuple[float, float, float]:
    """Least squares of times = F + [I - w]+ (slope -1: each µs of wait hides one µs in
    flight): exact, one linear problem per interval of I between sorted waits. (F, I, RSS)."""
    best = (float(times.mean()), float(waits[0]), float(np.sum((times - times.mean()) ** 2)))
    edges = np.concatenate(([-np.inf], waits, [np.inf]))
    for k in range(waits.size + 1):
        lo, hi = max(edges[k], 0.0), edges[k + 1]
        if hi < lo:
            continue
        on = waits < hi  # the points on the slope when I lies in [lo, hi)
        if not on.any():  # I below every wait: a flat row, the floor is the mean
            continue
        off = ~on
        s = float(np.mean(times[on] + waits[on]))  # F + I from the sloped points
        f = float(np.mean(times[off])) if off.any() else None
        i = s - f if f is not None else None
        if f is None or not lo <= i <= hi:
            # The constrained optimum lies at an end of the interval (or, with every point
            # on the slope, F and I are one sum: take I at the interval's end).
            i = min(max(lo if i is None else i, lo), hi if np.isfinite(hi) else lo)
            f = float(np.mean(times - np.maximum(i - waits, 0.0)))
        rss = float(np.sum((times - f - np.maximum(i - waits, 0.0)) ** 2))
        if rss < best[2] - 1e-12 * max(1.0, best[2]):
            best = (f, float(i), rss)
    return best


def fit_wait_row(waits: ArrayLike, exposed: ArrayLike, send: ArrayLike) -> WaitFit:
    """Fit R and I of eqs. 1-3 to one wait-sweep row: `exposed` (T_send + T_receive) and `send`
    (T_send) at each wait (µs; NaN cells are left out). R is the send kernel's duration (it
    does not depend on the wait: the least-squares constant is the mean); I and the floor come
    from the hinge E(w) = F + [I - w]+, whose prediction is exposed_model's X with A = R and
    T = w. An I at or below the smallest wait, or at or beyond the largest, is only a bound
    and says so in `flags`."""
    w = np.asarray(waits, dtype=float)
    e = np.asarray(exposed, dtype=float)
    s = np.asarray(send, dtype=float)
    if w.ndim != 1 or e.shape != w.shape or s.shape != w.shape:
        raise AnalysisError(f"waits, exposed and send must be 1-D of one length, got "
                            f"{w.shape}, {e.shape}, {s.shape}")
    keep = np.isfinite(w) & np.isfinite(e)
    if np.any(w[keep] < 0):
        raise AnalysisError("waits must be >= 0 (a wait is a duration)")
    w, e, sends = w[keep], e[keep], s[np.isfinite(s)]
    if w.size < 3 or np.unique(w).size < 3:
        raise AnalysisError(f"an exposed fit needs three or more distinct waits, got {w.size}")
    if sends.size == 0:
        raise AnalysisError("no finite send time: R cannot be fitted")
    order = np.argsort(w, kind="stable")
    w, e = w[order], e[order]
    f, i, rss = _hinge(w, e)
    release = float(sends.mean())
    release_err = float(sends.std(ddof=1) / np.sqrt(sends.size)) if sends.size > 1 else None
    from .common import covariance, r_squared

    jac = np.column_stack([np.ones_like(w), (w < i).astype(float)])
    cov = covariance(jac, rss)
    floor_err = float(np.sqrt(cov[0, 0])) if cov is not None else None
    in_flight_err = float(np.sqrt(cov[1, 1])) if cov is not None else None
    flags = []
    if i <= w[0]:
        flags.append(f"in flight at most the smallest wait ({w[0]:g} µs): the row is flat")
        in_flight_err = None
    elif i >= w[-1]:
        flags.append(f"in flight at least the largest wait ({w[-1]:g} µs): no floor reached")
        in_flight_err = None
    if f < release:
        flags.append(f"floor {f:.4g} µs below the send time {release:.4g} µs: the receive "
                     "work C = F - R would be negative")
    grid = np.unique(np.concatenate([w, [i]]))
    model = exposed_model(ready=release, release=release, in_flight=max(i, 0.0), cover=grid)
    return WaitFit(release, release_err, i, in_flight_err, f, floor_err, f - release,
                   r_squared(e, rss), tuple(flags), (grid, f + model.exposed))
