"""active-connections in the analysis (the paper, arXiv 2610.01380, §4.3.3, Fig. 10, Appendix
D.3): the rate through one NIC at each point, each point normalised to the control of its own
pass, and the median over passes with their range, one curve per combination of the other
parameters the user varied.

The rate through one NIC (`nic_rate_mps`), as Fig. 10 reads it: send-only and send-receive the
median sender's rate (`msg_rate_mps_per_rank`); receive-only the target's aggregate over the
senders' common duration, their messages over the slowest sender's time (they start together
at the point's barrier).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

EXPERIMENT = "active-connections"
X = "connections"
RATE = "nic_rate_mps"
NORMALIZED = "normalized_rate"
# Parameters that place a point within its curve rather than start a curve of their own.
WITHIN = ("pass", "control", X, "pool")
SUMMARY_STATS = ("median", "min", "max")


def nic_rate(table: pd.DataFrame) -> pd.Series:
    """The rate through one NIC of each aggregated row (M msg/s)."""
    per_rank = pd.to_numeric(table.get("msg_rate_mps_per_rank"), errors="coerce")
    if "nic_role" not in table.columns or not {"messages", "elapsed_ns"} <= set(table.columns):
        return per_rank
    common = (pd.to_numeric(table["messages"], errors="coerce") * 1e3
              / pd.to_numeric(table["elapsed_ns"], errors="coerce"))
    return common.where(table["nic_role"] == "receive-only", per_rank)


def curve_params(table: pd.DataFrame, params: Sequence[str]) -> list[str]:
    """The parameters that tell one curve from another: those that vary, but for the pass, the
    control flag and the x value."""
    return [p for p in params if p not in WITHIN and p in table.columns
            and table[p].nunique(dropna=False) > 1]


def normalized(table: pd.DataFrame, params: Sequence[str]) -> pd.DataFrame:
    """Per point: its NIC rate and that rate over its pass's control (the same curve, the same
    pass; NaN where the pass has no control)."""
    t = table.assign(**{RATE: nic_rate(table)})
    keys = [*curve_params(t, params), "pass"]
    control = t["control"].astype(bool)
    ref = t[control].groupby(keys, dropna=False)[RATE].first().rename("_ref")
    t = t.join(ref, on=keys)
    t[NORMALIZED] = t[RATE] / t["_ref"]
    return t.drop(columns="_ref")


def pass_summary(table: pd.DataFrame, params: Sequence[str]) -> pd.DataFrame:
    """One row per curve and x (the control apart, control=True): the NIC rate and the
    normalised rate as median, min and max over passes, and how many passes."""
    t = normalized(table, params)
    keys = [*curve_params(t, params), "control", X]
    rows = []
    for key, g in t.groupby(keys, dropna=False, sort=True):
        row = dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True))
        for col in (RATE, NORMALIZED):
            v = pd.to_numeric(g[col], errors="coerce").dropna()
            row[col] = float(v.median()) if len(v) else np.nan
            row[f"{col}_min"] = float(v.min()) if len(v) else np.nan
            row[f"{col}_max"] = float(v.max()) if len(v) else np.nan
        row["passes"] = int(g["pass"].nunique()) if "pass" in g.columns else len(g)
        rows.append(row)
    out = pd.DataFrame(rows)
    if not out.empty:  # the control of each curve first, then x ascending
        out = out.sort_values([*keys[:-2], "control", X], ascending=[True] * (len(keys) - 2)
                              + [False, True], kind="stable").reset_index(drop=True)
    return out


def fit_table(table: pd.DataFrame, params: Sequence[str]) -> tuple[pd.DataFrame, list[str]]:
    """What the plateau fit reads: the grid's medians over passes (the control is the
    reference, not a point of the curve), with the curve parameters."""
    summary = pass_summary(table, params)
    keys = curve_params(table, params)
    if summary.empty:
        return summary, keys
    grid = summary[~summary["control"].astype(bool)].drop(columns="control")
    return grid.reset_index(drop=True), keys


def modelled(attrs: dict) -> str:
    """The NIC model that produced a run's figures ('' when measured): emu's --nic-model, as
    run.json records the run's knobs."""
    config = (attrs.get("manifest") or {}).get("config") or {}
    model = (config.get("knobs") or {}).get("nic_model") if isinstance(config, dict) else None
    return "" if model in (None, "", "none") else str(model)


def common_label(table: pd.DataFrame, keys: Sequence[str]) -> str:
    """What every curve of the run shares, for legends: "send-receive, rc, W=32, 8 B"."""
    parts = []
    for col, text in (("nic_role", "{}"), ("transport", "{}"), ("writes_per_visit", "W={}"),
                      ("size", "{} B")):
        if col in table.columns and col not in keys and table[col].nunique() == 1:
            v = table[col].iloc[0]
            parts.append(text.format(int(v) if isinstance(v, float) and v.is_integer() else v))
    return ", ".join(parts)
