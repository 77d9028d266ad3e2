"""Fits and models of the papers; each result is a frozen dataclass with a `flags` tuple.

fit_clock                T(f) = C/f + B                          arXiv 2610.01380 Fig. 5 / Table 6
fit_plateau_power_law    plateau + power-law decline, log space  arXiv 2610.01380 §4.3.3 / App. D.3
first_size_reaching      first size at fraction of a reference   arXiv 2610.01380 Fig. 8
exposed_model            S, J, O, X, D of eqs. 1-3                arXiv 2611.12362 §II-B
shortest_wait_near_floor wait within 5% of the floor             arXiv 2611.12362 Fig. 6
fit_wait_row             R, I and the floor of a wait-sweep row   arXiv 2611.12362 eqs. 1-3, Fig. 6
"""

from .clock import ClockFit, fit_clock
from .common import AnalysisError, FitError
from .crossover import Crossover, first_size_reaching
from .exposed import (
    ExposedTimes,
    NearFloor,
    WaitFit,
    exposed_model,
    fit_wait_row,
    release_advance,
    shortest_wait_near_floor,
)
from .plateau import PlateauFit, fit_plateau_power_law

__all__ = [
    "AnalysisError",
    "ClockFit",
    "Crossover",
    "ExposedTimes",
    "FitError",
    "NearFloor",
    "PlateauFit",
    "WaitFit",
    "exposed_model",
    "first_size_reaching",
    "fit_clock",
    "fit_plateau_power_law",
    "fit_wait_row",
    "release_advance",
    "shortest_wait_near_floor",
]
