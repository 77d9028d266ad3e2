"""Run configuration: what every run shares, validated before any resource exists.

Experiment and submitter knobs are not fields here: each experiment and submitter declares its
own Params (app/knobs.py), and `knobs` carries the values the user gave for them; app/plan.py
builds and checks those. A bad value raises ConfigError naming the field, the flag, the value
and what is allowed (the CLI turns it into exit status 2).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import safe_files
from .errors import ConfigError
from .knobs import KIND_FLOAT, KIND_STR, check_knobs, knob, parse_size

PATTERNS = ("pairs", "all-to-all", "fan-in", "fan-out")
PROGRESS_MODES = ("auto", "thread", "inline")
MAX_QPS_PER_PEER = 528
MAX_DCTS = 8
MAX_TIMEOUT_S = 3600.0
DEFAULT_TIMEOUT_S = 10.0
MAX_SEED = 2**63 - 1
DEFAULT_LANDING_BYTES = 64 << 20
# -J/--output-file: the format of the results file, by its suffix (as nccl-tests' -J).
OUTPUT_FORMATS = {".json": "json", ".csv": "csv"}


def size_sweep(begin: int, end: int, factor: int) -> list[int]:
    """Sizes begin, begin*factor, ... up to end inclusive (the -b/-e/-f flags)."""
    sizes, s = [], begin
    while s <= end:
        sizes.append(s)
        s *= factor
    return sizes


@dataclass
class RunConfig:
    """What one `gicbench run` needs besides the experiments' and submitter's own knobs."""

    experiments: list[str] = field(default_factory=lambda: ["single-op"])
    provider: str = knob(
        "emu", flag="--provider", kind=KIND_STR, help="NIC provider (see `gicbench doctor`)"
    )
    submitter: str = knob(
        "host", flag="--submitter", kind=KIND_STR, help="who posts work (see `gicbench doctor`)"
    )
    pattern: str = knob(
        "pairs",
        flag="--pattern",
        kind=KIND_STR,
        choices=PATTERNS,
        help="who sends to whom: pairs (rank 2i -> 2i+1), all-to-all, fan-in "
        "(every rank -> rank 0), fan-out (rank 0 -> every rank)",
    )
    progress: str = knob(
        "auto",
        flag="--progress",
        kind=KIND_STR,
        choices=PROGRESS_MODES,
        help="emu engine: thread (a spinning thread per rank), inline (driven "
        "by the rank's own polling) or auto (from the CPU binding)",
    )
    qps_per_peer: int | None = knob(
        None,
        flag="--qps-per-peer",
        lo=1,
        hi=MAX_QPS_PER_PEER,
        help="RC QPs brought up towards every peer (default: as many as the experiments drive)",
    )
    dcis: int | None = knob(
        None,
        flag="--dcis",
        lo=1,
        hi=MAX_QPS_PER_PEER * 16,
        help="DCI pool per rank (with --transport dc; default: as the experiments need)",
    )
    dcts: int | None = knob(
        None,
        flag="--dcts",
        lo=1,
        hi=MAX_DCTS,
        help="DC targets per rank (with --transport dc; default 1)",
    )
    sq_depth: int = knob(
        256, flag="--sq-depth", lo=64, hi=32768, help="WQEBBs per send queue (a power of two)"
    )
    landing_bytes: int = knob(
        DEFAULT_LANDING_BYTES,
        flag="--landing-bytes",
        kind="size",
        lo=4096,
        hi=1 << 34,
        help="memory per rank that peers write into, split over sources and lanes",
    )
    timeout_s: float = knob(
        DEFAULT_TIMEOUT_S,
        flag="--timeout",
        kind=KIND_FLOAT,
        lo=0.001,
        hi=MAX_TIMEOUT_S,
        unit="s",
        help="seconds before a missing completion is reported as a hang",
    )
    seed: int = knob(1, flag="--seed", lo=0, hi=MAX_SEED, help="payload pattern seed")
    out: Path | None = None
    json: bool = False
    csv: bool = False
    output_file: Path | None = None  # -J: results also written here (JSON or CSV by suffix)
    quiet: bool = False
    knobs: dict[str, Any] = field(default_factory=dict)  # experiment and submitter knob values

    def __post_init__(self) -> None:
        if isinstance(self.experiments, str) or not self.experiments:
            raise ConfigError("experiment", self.experiments, "at least one experiment name")
        self.experiments = list(self.experiments)
        repeated = sorted({e for e in self.experiments if self.experiments.count(e) > 1})
        if repeated:  # each would be run, and its rows printed, twice
            raise ConfigError(
                "experiment",
                " ".join(self.experiments),
                f"each once ({', '.join(repeated)} repeated)",
            )
        check_knobs(self)
        if self.sq_depth & (self.sq_depth - 1):
            raise ConfigError("sq_depth (--sq-depth)", self.sq_depth, "a power of two in 64..32768")
        if self.json and self.csv:
            raise ConfigError("output", "--json --csv", "one of --json or --csv")
        if self.out is not None:
            if not isinstance(self.out, str | Path) or not str(self.out).strip():
                # Path("") is ".": the working directory would take the run.
                raise ConfigError("out (-o)", self.out, "a directory path (new or empty)")
            self.out = Path(self.out)
        if self.output_file is not None:
            self.output_file = check_output_file(Path(self.output_file))
        if not isinstance(self.knobs, dict):
            raise ConfigError("knobs", self.knobs, "a dict of knob values")

    @classmethod
    def build(cls, **values: Any) -> RunConfig:
        """A RunConfig from flat keyword values: shared fields go to the fields, the rest to
        `knobs` (experiment and submitter parameters), as the command line does."""
        own = {f.name for f in dataclasses.fields(cls)} - {"knobs"}
        shared = {k: v for k, v in values.items() if k in own}
        knobs = {k: v for k, v in values.items() if k not in own}
        return cls(**shared, knobs=knobs)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["out"] = str(self.out) if self.out is not None else None
        d["output_file"] = str(self.output_file) if self.output_file is not None else None
        return d


def check_output_file(path: Path) -> Path:
    """-J's file: a known suffix, in a directory that exists, not there yet (results are never
    overwritten)."""
    label = "output_file (-J)"
    if path.suffix.lower() not in OUTPUT_FORMATS:
        raise ConfigError(label, str(path), "a file name ending " + " or ".join(OUTPUT_FORMATS))
    if not path.parent.is_dir():
        raise ConfigError(label, str(path), "a file in an existing directory")
    with safe_files.opened_dir(path.parent, label):  # one no other user can plant links in
        pass
    if path.exists() or path.is_symlink():
        raise ConfigError(label, str(path), "a file that does not exist yet (results are never "
                          "overwritten)")
    return path


__all__ = ["PATTERNS", "ConfigError", "RunConfig", "parse_size", "size_sweep"]
