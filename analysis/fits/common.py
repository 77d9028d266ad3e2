"""Errors and input checks shared by the fits."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from gicbench.errors import GicbenchError


class AnalysisError(GicbenchError, ValueError):
    """Input an analysis function cannot use: names the argument and what is wrong with it."""


class FitError(AnalysisError):
    """A fit was asked of data that cannot support it (too few points, constant, no spread)."""


def vector(name: str, values: ArrayLike, *, positive: bool = False) -> np.ndarray:
    """A finite 1-D float array, or AnalysisError naming the argument."""
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1:
        raise AnalysisError(f"{name} must be 1-D, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise AnalysisError(f"{name} has non-finite values: {arr[~np.isfinite(arr)][:5]}")
    if positive and np.any(arr <= 0):
        raise AnalysisError(f"{name} must be > 0, got {arr[arr <= 0][:5]}")
    return arr


def paired(x_name: str, x: ArrayLike, y_name: str, y: ArrayLike, *,
           positive: bool = False) -> tuple[np.ndarray, np.ndarray]:
    xa = vector(x_name, x, positive=positive)
    ya = vector(y_name, y, positive=positive)
    if xa.shape != ya.shape:
        raise AnalysisError(f"{x_name} and {y_name} differ in length: {xa.size} vs {ya.size}")
    return xa, ya


def r_squared(y: np.ndarray, rss: float) -> float:
    """1 - RSS/SST; NaN when y is constant (R² is undefined, the caller flags it)."""
    sst = float(np.sum((y - y.mean()) ** 2))
    return float("nan") if sst == 0.0 else 1.0 - rss / sst


def covariance(jac: np.ndarray, rss: float) -> np.ndarray | None:
    """Gauss-Newton covariance s²(JᵀJ)⁻¹, or None when the data cannot determine it."""
    n, p = jac.shape
    if n <= p:
        return None
    jtj = jac.T @ jac
    if np.linalg.matrix_rank(jtj) < p:
        return None
    return rss / (n - p) * np.linalg.inv(jtj)
