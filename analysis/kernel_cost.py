"""kernel-cost's tables (the paper, arXiv 2610.01380, §4.3.2, Fig. 9, Appendix D.2 Table 14):
the throughput loss of every variant against its paired reference (the experiment's own
median-of-passes, `loss_pct`), the extra loss of waiting relative to sending without waiting
(Table 14's "waiting loss"), the compiled resources per build, and the rows Fig. 9's bars show.

A row's loss is the experiment's; what is computed here are only the comparisons between rows:
waiting against sending, from the two points' kernel times."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

EXPERIMENT = "kernel-cost"
KEYS = ("caller", "live", "build", "variant", "per_block", "size")
ARM = ("caller", "live", "build")
PATHS = {"gpu": "mini-gda", "proxy": "mini-proxy", "doca": "DOCA GPUNetIO"}  # by submitter
BAR_VARIANTS = ("code-only", "send", "send-wait")  # Fig. 9's three bars of an arm
RESOURCE_COLUMNS = ("registers", "spill_store_bytes", "spill_load_bytes", "stack_bytes",
                    "blocks_per_sm")  # fmt: skip
HEADERS = {
    "caller": "caller", "live": "live values", "build": "build", "variant": "variant",
    "per_block": "messages per block", "size": "message (B)", "kernel_us": "kernel (µs)",
    "reference_us": "reference (µs)", "loss_pct": "loss (%)", "loss_min_pct": "loss min (%)",
    "loss_max_pct": "loss max (%)", "wait_extra_pct": "waiting loss vs send (%)",
    "registers": "registers/thread", "spill_store_bytes": "spill stores (B)",
    "spill_load_bytes": "spill loads (B)", "stack_bytes": "stack frame (B)",
    "blocks_per_sm": "blocks/SM", "sm_clock_mhz": "SM clock (MHz)",
}  # fmt: skip


def path_of(agg: pd.DataFrame) -> tuple[str, str]:
    """(the run's path, what it was run with): the submitter's path name (PATHS) and, where the
    points recorded them, mini-proxy's workers and rings or DOCA's handler and sharing."""
    submitter = str((agg.attrs.get("manifest") or {}).get("submitter") or "gpu")
    name = PATHS.get(submitter, submitter)
    t = agg[agg["experiment"] == EXPERIMENT] if "experiment" in agg.columns else agg

    def first(col: str) -> Any:
        vals = t[col].dropna().unique() if col in t.columns else []
        return vals[0] if len(vals) == 1 else None

    parts = []
    if first("workers") is not None and first("rings") is not None:
        parts.append(f"GPU producers, {int(first('workers'))} workers, {int(first('rings'))} rings")
    for col, what in (("doca_handler", "handler"), ("doca_sharing", "sharing")):
        if first(col) is not None:
            parts.append(f"{what} {first(col)}")
    return name, ", ".join(parts)


def rows(agg: pd.DataFrame) -> pd.DataFrame:
    """kernel-cost's aggregated rows, one per point (its keys, loss, times, resources)."""
    t = agg[agg["experiment"] == EXPERIMENT] if "experiment" in agg.columns else agg
    keep = [c for c in (*KEYS, "kernel_us", "reference_us", "loss_pct", "loss_min_pct",
                        "loss_max_pct", *RESOURCE_COLUMNS, "sm_clock_mhz") if c in t.columns]
    return t[keep].drop_duplicates(subset=[k for k in KEYS if k in t.columns]).reset_index(
        drop=True)  # fmt: skip


def wait_extra(table: pd.DataFrame) -> pd.DataFrame:
    """Each send-wait row beside its send row (same caller, live, build, messages, size):
    `wait_extra_pct` = 100 x (1 - t_send / t_wait), the throughput waiting loses on top of
    sending (Table 14's waiting loss)."""
    keys = ["caller", "live", "build", "per_block", "size"]
    send = table[table["variant"] == "send"].set_index(keys)["kernel_us"]
    wait = table[table["variant"] == "send-wait"].set_index(keys)
    out = []
    for key, row in wait.iterrows():
        t_send = float(send.get(key, math.nan)) if key in send.index else math.nan
        out.append({**dict(zip(keys, key, strict=True)), "kernel_us": float(row["kernel_us"]),
                    "send_us": t_send,
                    "wait_extra_pct": 100.0 * (1.0 - t_send / float(row["kernel_us"]))})
    return pd.DataFrame(out, columns=[*keys, "kernel_us", "send_us", "wait_extra_pct"])


def resources(table: pd.DataFrame) -> pd.DataFrame:
    """One row per caller, live values and build (none: no communication code): the compiled
    kernel's registers, spills, stack frame and blocks per SM (the same for every variant of a
    build: one cubin, the variant decided at run time)."""
    t = table.copy()
    t["build"] = np.where(t["variant"] == "none", "none", t["build"])
    cols = [c for c in RESOURCE_COLUMNS if c in t.columns]
    return (t.groupby(["caller", "live", "build"], sort=False)[cols].first().reset_index()
            .sort_values(["caller", "live", "build"], key=_build_order).reset_index(drop=True))


def _build_order(s: pd.Series) -> pd.Series:
    order = {"none": 0, "inline": 1, "separate": 2}
    return s.map(order) if s.name == "build" else s


def bars(table: pd.DataFrame, per_block: int | None = None,
         size: int | None = None) -> pd.DataFrame:  # fmt: skip
    """Fig. 9's bars: per caller, live and build, the loss of code-only, send and send-wait at
    one message count and size (default: the most messages, the smallest size sent), as the
    paper's 16 x 8 B. Columns: caller, live, build, variant, loss_pct."""
    sent = table[table["variant"].isin(("send", "send-wait"))]
    if per_block is None:
        per_block = int(sent["per_block"].max()) if len(sent) else int(table["per_block"].max())
    if size is None:
        size = int(sent["size"].min()) if len(sent) else 0
    pick = table[(table["variant"] == "code-only") & (table["per_block"] == per_block)]
    pick = pd.concat([pick, sent[(sent["per_block"] == per_block) & (sent["size"] == size)]])
    out = pick[["caller", "live", "build", "variant", "loss_pct"]].reset_index(drop=True)
    out.attrs.update(per_block=per_block, size=size)
    return out


def header(col: str) -> str:
    return HEADERS.get(col, col)


def fmt_cell(value: Any, col: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if col == "size" and not value:  # nothing sent: no message size
        return "-"
    if col.endswith("_pct"):
        return f"{float(value):.1f}"
    if col.endswith("_us") or col == "sm_clock_mhz":
        return f"{float(value):.1f}"
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)
