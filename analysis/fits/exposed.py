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
