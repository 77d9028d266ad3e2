"""Apply the fits to tables: a user's CSV (`gicbench fit`) or an experiment's aggregated rows
(`gicbench analyze`/`report`, for the fits the experiment declares in its `fits` class attribute).

Each application gives a FitOutcome: parameters with uncertainties and units, R², flags, and the
fitted curve for plotting. Units come from a column-name suffix (_hz, _khz, _mhz, _ghz for
clocks; _ns, _us, _ms for times; _gbs for bandwidth; _b for bytes) or are given explicitly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from gicbench.aggregate import unit_of

from .clock import fit_clock
from .common import AnalysisError, FitError
from .crossover import first_size_reaching
from .exposed import exposed_model
from .plateau import fit_plateau_power_law

FIT_NAMES = ("clock", "plateau", "crossover", "exposed")
# Summaries an experiment may declare that compare rows of its own table (not `gicbench fit`).
TABLE_FITS = ("ratio",)
FREQ_UNITS = {"hz": "Hz", "khz": "kHz", "mhz": "MHz", "ghz": "GHz"}
TIME_UNITS = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}  # factor to µs
OTHER_UNITS = {"gbs": "GB/s", "b": "B", "mps": "M msg/s"}
# Columns an experiment's table offers to each fit, first present wins.
X_CANDIDATES = {
    "clock": ("sm_clock_mhz", "sm_clock_hz", "sm_clock_ghz", "clock_mhz", "clock_hz"),
    "plateau": ("connections", "active_connections", "peers", "qps"),
    "crossover": ("size",),
}
Y_CANDIDATES = {
    "clock": ("p50_us",),
    "plateau": ("normalized_rate", "msg_rate_mps"),
    "crossover": ("gbps",),
}
EXPOSED_COLUMNS = ("ready", "release", "in_flight", "cover")
SOURCES = {
    "clock": "T(f) = C/f + B, arXiv 2610.01380 Fig. 5 / Table 6",
    "plateau": "plateau + power-law decline (continuous, or after a step), arXiv 2610.01380 "
               "§4.3.3 / App. D.3",
    "crossover": "first size reaching a fraction of a reference bandwidth, arXiv 2610.01380 "
                 "Fig. 8",
    "exposed": "exposed communication S, J, O, X, D, arXiv 2611.12362 eqs. 1-3",
    "ratio": "loaded round trip on a shared over a reserved queue, arXiv 2610.01380 Fig. 6 / "
             "Table 11",
}


@dataclass(frozen=True)
class Param:
    value: float | None
    err: float | None
    unit: str


@dataclass
class FitOutcome:
    fit: str
    x: str
    y: str
    n: int
    params: dict[str, Param] = field(default_factory=dict)
    r2: float | None = None
    flags: list[str] = field(default_factory=list)
    group: dict[str, Any] = field(default_factory=dict)
    curve: tuple[list[float], list[float]] | None = None  # fitted curve, in the data's units
    data: tuple[list[float], list[float]] | None = None
    rows: list[dict[str, float]] | None = None  # exposed: one computed row per input row
    error: str | None = None  # the fit could not be made (why)
    units: tuple[str, str] = ("", "")  # x's and y's units, as shown

    def to_json(self) -> dict[str, Any]:
        def clean(v: Any) -> Any:
            if isinstance(v, float) and not math.isfinite(v):
                return None
            if isinstance(v, np.generic):
                return clean(v.item())
            return v
        doc: dict[str, Any] = {
            "fit": self.fit, "model": SOURCES[self.fit], "x": self.x, "y": self.y, "n": self.n,
            "group": {k: clean(v) for k, v in self.group.items()},
            "parameters": {k: {"value": clean(p.value), "err": clean(p.err), "unit": p.unit}
                           for k, p in self.params.items()},
            "r2": clean(self.r2), "flags": list(self.flags),
        }
        if self.rows is not None:
            doc["rows"] = [{k: clean(v) for k, v in r.items()} for r in self.rows]
        if self.error is not None:
            doc["error"] = self.error
        return doc


def suffix_unit(column: str) -> str | None:
    """The unit suffix of a column name (lower case, without the underscore), if any."""
    if "_" not in column:
        return None
    tail = column.rsplit("_", 1)[1].lower()
    known = {*FREQ_UNITS, *TIME_UNITS, *OTHER_UNITS}
    return tail if tail in known else None


def _to_us(values: np.ndarray, unit: str | None, column: str) -> np.ndarray:
    unit = (unit or "us").lower()
    if unit not in TIME_UNITS:
        raise AnalysisError(f"column {column!r}: unit {unit!r} is not a time: allowed "
                            f"{sorted(TIME_UNITS)}")
    return values * TIME_UNITS[unit]


def _numbers(df: pd.DataFrame, column: str) -> np.ndarray:
    if column not in df.columns:
        raise AnalysisError(f"no column {column!r}: columns are {list(df.columns)}")
    values = pd.to_numeric(df[column], errors="coerce")
    bad = values.isna() & df[column].notna()
    if bad.any():
        raise AnalysisError(f"column {column!r} has non-numbers: "
                            f"{df.loc[bad, column].head(3).tolist()}")
    return values.to_numpy(dtype=float)


def fit_columns(name: str, df: pd.DataFrame, x: str | None = None, y: str | None = None, *,
                x_unit: str | None = None, y_unit: str | None = None,
                reference: float | None = None, fraction: float = 0.9,
                interpolate: bool = False, noise: str = "relative") -> FitOutcome:
    """Fit `name` to columns x, y of df (default: the first two columns; exposed: columns
    ready, release, in_flight, cover). Units from x_unit/y_unit or the column-name suffix.
    Raises AnalysisError/FitError when the table cannot support the fit."""
    if name not in FIT_NAMES:
        raise AnalysisError(f"invalid fit {name!r}: allowed {list(FIT_NAMES)}")
    if name == "exposed":
        return _exposed(df, y_unit or x_unit)
    cols = list(df.columns)
    if x is None or y is None:
        if len(cols) < 2:
            raise AnalysisError(f"a {name} fit needs two columns, the table has {cols}")
        x = x or cols[0]
        y = y or (cols[1] if cols[1] != x else cols[0])
    xa, ya = _numbers(df, x), _numbers(df, y)
    keep = ~(np.isnan(xa) | np.isnan(ya))
    xa, ya = xa[keep], ya[keep]
    xu = (x_unit or suffix_unit(x) or "").lower() or None
    yu = (y_unit or suffix_unit(y) or "").lower() or None
    # what the columns are measured in, as shown: the suffix's, else the result's declared one
    shown = (_unit_text(xu) or unit_of(x) or ("B" if x == "size" else ""),
             _unit_text(yu) or unit_of(y))
    out = FitOutcome(fit=name, x=x, y=y, n=int(xa.size), data=(xa.tolist(), ya.tolist()),
                     units=shown)
    if name == "clock":
        f_unit = FREQ_UNITS.get(xu or "hz")
        if f_unit is None:
            raise AnalysisError(f"column {x!r}: unit {xu!r} is not a frequency: allowed "
                                f"{sorted(FREQ_UNITS)}")
        t_us = _to_us(ya, yu, y)
        fit = fit_clock(xa, t_us, f_unit=f_unit, noise=noise)
        out.params = {"C": Param(fit.c_cycles, fit.c_err, "cycles"),
                      "B": Param(fit.b_us, fit.b_err, "µs")}
        top = float(xa.max())
        out.params["clock-sensitive share at the top clock"] = Param(
            fit.clock_fraction(top), None, f"at {top:g} {f_unit}")
        out.r2, out.flags = fit.r2, list(fit.flags)
        grid = np.linspace(xa.min(), xa.max(), 64)
        factor = TIME_UNITS[(yu or "us")]
        out.curve = (grid.tolist(), (fit.predict_us(grid) / factor).tolist())
    elif name == "plateau":
        fit = fit_plateau_power_law(xa, ya)
        unit = _unit_text(yu)
        out.params = {"plateau": Param(fit.plateau, fit.plateau_err, unit),
                      "onset": Param(fit.onset, fit.onset_err, _unit_text(xu)),
                      "exponent": Param(fit.exponent, fit.exponent_err, "")}
        grid = np.geomspace(xa.min(), xa.max(), 64)
        if fit.declines and fit.shape == "step":
            # the rate leaves its plateau at once: the drop's size, and the curve steps there
            out.params["drop at the onset"] = Param(fit.drop, fit.drop_err, "× plateau")
            edges = (fit.onset, np.nextafter(fit.onset, np.inf),
                     np.nextafter(fit.tail_start, -np.inf), fit.tail_start)
            grid = np.union1d(grid, [e for e in edges if xa.min() <= e <= xa.max()])
        out.r2, out.flags = fit.r2_log, list(fit.flags)
        out.curve = (grid.tolist(), fit.predict(grid).tolist())
    else:  # crossover
        ref = float(np.max(ya)) if reference is None else float(reference)
        cross = first_size_reaching(xa, ya, ref, fraction, interpolate=interpolate)
        out.params = {"size": Param(cross.size, None, shown[0] or "B"),
                      "threshold": Param(cross.threshold, None, shown[1]),
                      "reference": Param(cross.reference, None, shown[1]),
                      "fraction": Param(cross.fraction, None, "")}
        out.flags = list(cross.flags)
        if reference is None:
            out.flags.append("reference: the largest bandwidth in the data")
    return out


def _unit_text(unit: str | None) -> str:
    if unit is None:
        return ""
    if unit in FREQ_UNITS:
        return FREQ_UNITS[unit]
    if unit in OTHER_UNITS:
        return OTHER_UNITS[unit]
    return "µs" if unit == "us" else unit


def _exposed(df: pd.DataFrame, unit: str | None) -> FitOutcome:
    found: dict[str, str] = {}
    for want in EXPOSED_COLUMNS:
        match = [c for c in df.columns
                 if c == want or (c.rsplit("_", 1)[0] == want and suffix_unit(c) in TIME_UNITS)]
        if not match:
            raise AnalysisError(f"the exposed model needs columns {list(EXPOSED_COLUMNS)} "
                                f"(optionally with a time suffix such as ready_us); the table "
                                f"has {list(df.columns)}")
        found[want] = match[0]
    values = {}
    for want, col in found.items():
        u = unit or suffix_unit(col)
        values[want] = _to_us(_numbers(df, col), u, col)
    m = exposed_model(values["ready"], values["release"], values["in_flight"], values["cover"])
    rows = [{"start_us": float(s), "remaining_us": float(j), "overlapped_us": float(o),
             "exposed_us": float(x), "receive_start_us": float(d)}
            for s, j, o, x, d in zip(m.start, m.remaining, m.overlapped, m.exposed,
                                     m.receive_start, strict=True)]
    out = FitOutcome(fit="exposed", x=found["ready"], y=found["release"], n=len(rows),
                     rows=rows)
    out.params = {"exposed (mean)": Param(float(np.mean(m.exposed)), None, "µs"),
                  "overlapped (mean)": Param(float(np.mean(m.overlapped)), None, "µs")}
    if np.any(m.exposed > 0):
        out.flags.append(f"{int(np.sum(m.exposed > 0))} of {len(rows)} rows leave "
                         "communication exposed")
    return out


# ---- the fits an experiment declares ---------------------------------------------------------


def declared_fits(experiment: str) -> tuple[str, ...]:
    """The fits the experiment class declares (`fits` class attribute); () when it declares
    none or is not known to this gicbench."""
    from gicbench.errors import ConfigError
    from gicbench.experiments import registry

    try:
        cls = registry.get(experiment)
    except ConfigError:
        return ()  # a trace from an experiment this gicbench does not have
    fits = tuple(getattr(cls, "fits", ()) or ())
    unknown = [f for f in fits if f not in FIT_NAMES + TABLE_FITS]
    if unknown:
        raise AnalysisError(f"experiment {experiment} declares unknown fits {unknown}: allowed "
                            f"{list(FIT_NAMES)}")
    return fits


def fit_table(name: str, table: pd.DataFrame, params: Sequence[str]) -> list[FitOutcome]:
    """Apply fit `name` to an experiment's display table (tables.experiment_table): one fit per
    combination of the other varying parameters (and metric). A table without the columns the
    fit needs gives one outcome carrying the error."""
    if name == "exposed":
        try:
            return [_exposed(table, None)]
        except (AnalysisError, FitError) as exc:
            return [FitOutcome(fit=name, x="", y="", n=0, error=str(exc))]
    if name == "ratio":
        return _queue_ratio(table, params)
    xs = [c for c in X_CANDIDATES[name] if c in table.columns]
    ys = [c for c in Y_CANDIDATES[name] if c in table.columns]
    if not xs or not ys:
        return [FitOutcome(fit=name, x="", y="", n=0, error=(
            f"the table has no {'x' if not xs else 'y'} column for a {name} fit (looked for "
            f"{list(X_CANDIDATES[name]) if not xs else list(Y_CANDIDATES[name])})"))]
    x, y = xs[0], ys[0]
    keys = [p for p in params if p != x and p in table.columns
            and table[p].nunique(dropna=False) > 1]
    if "metric" in table.columns and table["metric"].nunique() > 1:
        keys.append("metric")
    groups = table.groupby(keys, dropna=False, sort=False) if keys else [((), table)]
    outcomes: list[FitOutcome] = []
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        group = dict(zip(keys, key, strict=True))
        kw: dict[str, Any] = {}
        if name == "crossover" and "reference_gbps" in g.columns:
            # the experiment's reference bandwidth (payload --reference-gbps); 0: the largest
            ref = pd.to_numeric(g["reference_gbps"], errors="coerce").dropna()
            if len(ref) and float(ref.iloc[0]) > 0:
                kw["reference"] = float(ref.iloc[0])
        try:
            out = fit_columns(name, g[[x, y]].reset_index(drop=True), x, y, **kw)
        except (AnalysisError, FitError) as exc:
            out = FitOutcome(fit=name, x=x, y=y, n=len(g), error=str(exc))
        out.group = group
        outcomes.append(out)
    return outcomes


def outcome_lines(o: FitOutcome) -> list[str]:
    """Plain-text lines of one outcome (report.md, the terminal)."""
    where = ", ".join(f"{k}={v}" for k, v in o.group.items())
    head = f"{o.fit} fit ({SOURCES[o.fit]})" + (f" for {where}" if where else "")
    if o.error:
        return [f"{head}: not fitted: {o.error}"]
    lines = [f"{head}: {data_line(o)}"]
    for k, p in o.params.items():
        lines.append(f"  {k} = {format_param(p)}")
    if o.r2 is not None:
        lines.append(f"  R² = {o.r2:.4f}" if math.isfinite(o.r2) else "  R² = undefined")
    lines += [f"  flag: {f}" for f in o.flags]
    return lines


def data_line(o: FitOutcome) -> str:
    """What was fitted: "p50_us (µs) against sm_clock_mhz (MHz), 6 points"."""

    def named(col: str, unit: str) -> str:
        return f"{col} ({unit})" if unit else col

    return f"{named(o.y, o.units[1])} against {named(o.x, o.units[0])}, {o.n} points"


def format_param(p: Param) -> str:
    if p.value is None or (isinstance(p.value, float) and math.isnan(p.value)):
        return "-"
    text = f"{p.value:.4g}"
    if p.err is not None and math.isfinite(p.err):
        text += f" ± {p.err:.2g}"
    return f"{text} {p.unit}".rstrip()


QUEUE_STATS = (("p50_us", "p50"), ("p99_us", "p99"))


def _queue_ratio(table: pd.DataFrame, params: Sequence[str]) -> list[FitOutcome]:
    """loaded-rtt: the probe's round trip with its queue shared with the background over the
    same with a reserved queue (p50, p99), per combination of the other varying parameters,
    with the background rate each carried (it differs: read latency with the load)."""
    need = {"queue", "p50_us"}
    if not need <= set(table.columns) or not {"shared", "reserved"} <= set(table["queue"]):
        return [FitOutcome(fit="ratio", x="queue", y="p50_us", n=0, error=(
            "needs rows with queue=shared and queue=reserved (loaded-rtt --queue "
            "shared,reserved)"))]
    keys = [p for p in params if p not in ("queue", "metric") and p in table.columns
            and table[p].nunique(dropna=False) > 1]
    groups = table.groupby(keys, dropna=False, sort=False) if keys else [((), table)]
    out: list[FitOutcome] = []
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        o = FitOutcome(fit="ratio", x="queue", y="p50_us", n=len(g))
        o.group = dict(zip(keys, key, strict=True))
        shared, reserved = g[g["queue"] == "shared"], g[g["queue"] == "reserved"]
        if shared.empty or reserved.empty:
            o.error = "this group lacks a shared or a reserved row"
            out.append(o)
            continue
        s, r = shared.iloc[0], reserved.iloc[0]
        for col, label in QUEUE_STATS:
            if col in g.columns:
                a, b = float(s[col]), float(r[col])
                o.params[f"{label} shared/reserved"] = Param(a / b if b > 0 else math.nan,
                                                             None, "")
                o.params[f"{label} shared"] = Param(a, None, "µs")
                o.params[f"{label} reserved"] = Param(b, None, "µs")
        if "background_mps" in g.columns:
            o.params["background shared"] = Param(float(s["background_mps"]), None, "M msg/s")
            o.params["background reserved"] = Param(float(r["background_mps"]), None,
                                                    "M msg/s")
        out.append(o)
    return out
