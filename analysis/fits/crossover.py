"""First message size reaching a fraction of a reference bandwidth (arXiv 2610.01380, Fig. 8).

By default the answer is the first *sampled* size whose bandwidth is at least
fraction * reference, as the paper marks it. With interpolate=True the crossing is placed between
that size and the sampled size before it, linearly in bandwidth against log2(size) (sizes are
swept geometrically), so the answer can fall between two sampled sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .common import AnalysisError, paired


@dataclass(frozen=True)
class Crossover:
    size: float | None  # bytes; None when no size reaches the threshold
    index: int | None  # index (in ascending size order) of the first sampled size reaching it
    threshold: float  # fraction * reference, in the bandwidth's unit
    reference: float
    fraction: float
    interpolated: bool
    flags: tuple[str, ...]


def first_size_reaching(sizes: ArrayLike, bandwidth: ArrayLike, reference: float,
                        fraction: float = 0.9, *, interpolate: bool = False) -> Crossover:
    sz, bw = paired("sizes", sizes, "bandwidth", bandwidth)
    if sz.size == 0:
        raise AnalysisError("sizes is empty")
    if np.any(sz <= 0):
        raise AnalysisError(f"sizes must be > 0 bytes, got {sz[sz <= 0][:5]}")
    if not np.isfinite(reference) or reference <= 0:
        raise AnalysisError(f"invalid reference={reference!r}: a bandwidth > 0")
    if not 0 < fraction <= 1:
        raise AnalysisError(f"invalid fraction={fraction!r}: in (0, 1]")
    if np.unique(sz).size != sz.size:
        raise AnalysisError("sizes has duplicates: aggregate repeated sizes first")
    order = np.argsort(sz)
    sz, bw = sz[order], bw[order]
    threshold = fraction * reference
    reached = np.flatnonzero(bw >= threshold)
    flags: list[str] = []
    if reached.size == 0:
        flags.append(f"not reached: the best is {bw.max():.4g} < {threshold:.4g} "
                     f"at {sz[np.argmax(bw)]:.0f} B")
        return Crossover(None, None, threshold, reference, fraction, False, tuple(flags))
    i = int(reached[0])
    if np.any(bw[i:] < threshold):
        dips = sz[i:][bw[i:] < threshold]
        flags.append(f"falls below the threshold again at {', '.join(f'{s:.0f}' for s in dips)} B")
    size = float(sz[i])
    interpolated = False
    if i == 0:
        flags.append("reached at the smallest size: the crossing may lie below the sweep")
    elif interpolate:
        x0, x1 = np.log2(sz[i - 1]), np.log2(sz[i])
        frac = (threshold - bw[i - 1]) / (bw[i] - bw[i - 1])
        size = float(2 ** (x0 + frac * (x1 - x0)))
        interpolated = True
    return Crossover(size, i, threshold, reference, fraction, interpolated, tuple(flags))
