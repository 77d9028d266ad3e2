"""Sweep files (TOML): what every point runs and the axes whose product makes the points.

    experiment = "msg-rate"        # or a list, or an axis
    ranks = 2                      # MPI ranks per point (or an axis)
    [run]                          # `gicbench run` flags (long names), the same for every point
    iters = 500
    messages = 20000
    [axes]                         # each list is an axis; points are the product, last fastest
    threads = [1, 2, 4]
    qps = [1, 4]

Keys are checked against the flags `gicbench run` accepts (so a sweep can vary any parameter of
any experiment) before anything runs; values are checked for type. `out` is the sweep's to set.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, UnsupportedError
from ..knobs import Knob

SCHEMA = "gicbench-sweep/1"
_RESERVED = {"out", "help"}  # the sweep owns -o; --help would not run anything
_MAX_RANKS = 4096
_MAX_POINTS = 100_000
Scalar = int | float | str | bool


@dataclass(frozen=True)
class Point:
    index: int
    name: str  # directory name under points/: "003-msg-rate-ranks4-threads2"
    ranks: int
    experiments: tuple[str, ...]
    params: dict[str, Scalar] = field(default_factory=dict)  # the axes' values at this point
    run_args: tuple[str, ...] = ()  # `gicbench run` arguments without -o

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "ranks": self.ranks,
            "experiments": list(self.experiments),
            "params": self.params,
            "run_args": list(self.run_args),
        }


@dataclass(frozen=True)
class SweepSpec:
    source: str  # the file it came from (for messages)
    raw: dict[str, Any]  # the parsed TOML, normalised; its hash ties a sweep dir to its file
    points: tuple[Point, ...]

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.raw, sort_keys=True).encode()).hexdigest()

    @property
    def max_ranks(self) -> int:
        return max(p.ranks for p in self.points)


# `gicbench run`'s output switches: the only run flags that are not knobs.
_SWITCHES = ("json", "csv", "quiet")


def _run_options() -> dict[str, tuple[str, Knob | None]]:
    """`gicbench run`'s long options (without --) -> (field, knob), from the knob declarations
    the command line is generated from; switches have no knob."""
    from ..plan import all_knobs

    out: dict[str, tuple[str, Knob | None]] = {
        k.flag.removeprefix("--"): (name, k) for name, k in all_knobs().items()
    }
    out.update({s: (s, None) for s in _SWITCHES})
    out["out"] = ("out", None)
    return out


def _flag_args(
    key: str,
    value: Any,
    options: dict[str, tuple[str, Knob | None]],
    where: str,
    values: dict[str, Any] | None = None,
) -> list[str]:
    """The `gicbench run` arguments of one key; its parsed value goes into `values` (by field)."""
    name = key.replace("_", "-")
    if name in _RESERVED:
        raise ConfigError(
            f"{where}.{key}",
            value,
            "any `gicbench run` flag but out (the sweep gives each point its own run directory)",
        )
    if name not in options:
        raise ConfigError(
            f"{where}.{key}",
            value,
            "a `gicbench run` flag: " + ", ".join(sorted(k for k in options if k not in _RESERVED)),
        )
    field, knob = options[name]
    if knob is None:  # a switch
        if not isinstance(value, bool):
            raise ConfigError(f"{where}.{key}", value, "true or false")
        if values is not None:
            values[field] = value
        return [f"--{name}"] if value else []
    if isinstance(value, list) and knob.many:
        value = ",".join(map(str, value))
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(f"{where}.{key}", value, "a number or a string")
    # The value as the command line would parse and check it, refused here before any run.
    try:
        parsed = knob.parse(field, value) if isinstance(value, str) else value
        knob.check(field, parsed)
    except ConfigError as e:
        raise ConfigError(f"{where}.{key}", value, e.allowed) from None
    if values is not None:
        values[field] = parsed
    return [f"--{name}", str(value)]


def _experiments(value: Any, where: str, known: tuple[str, ...]) -> tuple[str, ...]:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ConfigError(where, value, "an experiment name or a list of them")
    for n in names:
        if n not in known:
            raise ConfigError(where, n, "one of " + ", ".join(known) + " (see `gicbench list`)")
    return tuple(names)


def _ranks(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_RANKS:
        raise ConfigError(where, value, f"an integer from 1 to {_MAX_RANKS}")
    return value


def _slug(value: Scalar) -> str:
    return re.sub(r"[^A-Za-z0-9_.]+", "_", str(value).lower())[:24]


def _check_point(
    index: int, params: dict[str, Any], exps: tuple[str, ...], values: dict[str, Any], probes: Any
) -> None:
    """The point's run planned as `gicbench run` would (knobs that do nothing for its
    experiments and submitter, cross-field rules, the submitter's own refusals), before any
    point runs: a bad point 57 is refused now, not after 56 points. Whether this machine can
    run the submitter is not checked here: the points run on the allocation's nodes."""
    from ..config import RunConfig
    from ..plan import make_plan

    try:
        make_plan(RunConfig.build(experiments=list(exps), **values), probes, here=False)
    except ConfigError as e:
        where = ", ".join(f"{k}={v}" for k, v in params.items()) or "every point"
        raise ConfigError(f"{e.field} at point {index} ({where})", e.value, e.allowed) from None
    except UnsupportedError as e:
        where = ", ".join(f"{k}={v}" for k, v in params.items()) or "every point"
        raise ConfigError(f"point {index} ({where})", " ".join(exps), str(e)) from None


def parse_spec(data: dict[str, Any], source: str = "<sweep>") -> SweepSpec:
    """Validate a parsed sweep file and expand it into points (raises ConfigError)."""
    from ..experiments import registry

    known = registry.names()
    options = _run_options()
    unknown = set(data) - {"experiment", "ranks", "run", "axes", "description"}
    if unknown:
        raise ConfigError(
            "sweep key", sorted(unknown)[0], "experiment, ranks, description, [run], [axes]"
        )
    run = data.get("run", {})
    axes = data.get("axes", {})
    if not isinstance(run, dict):
        raise ConfigError("run", run, "a table of `gicbench run` flags")
    if not isinstance(axes, dict):
        raise ConfigError("axes", axes, "a table of lists")
    for key in ("experiment", "ranks"):
        if key in data and key in axes:
            raise ConfigError(key, data[key], "either a fixed value or an axis, not both")
    if "experiment" not in data and "experiment" not in axes:
        raise ConfigError("experiment", None, "an experiment name (see `gicbench list`)")
    fixed: list[str] = []
    fixed_values: dict[str, Any] = {}
    for k, v in run.items():
        if k in ("experiment", "ranks"):
            raise ConfigError(f"run.{k}", v, f"{k} at the top level or in [axes]")
        fixed += _flag_args(k, v, options, "run", fixed_values)
    names: list[str] = []
    values: list[list[Scalar]] = []
    for k, vs in axes.items():
        if not isinstance(vs, list) or not vs:
            raise ConfigError(f"axes.{k}", vs, "a non-empty list of values")
        if k in run:
            raise ConfigError(f"axes.{k}", vs, "a key not also fixed in [run]")
        for v in vs:  # check every value now, not at point 57
            if k == "experiment":
                _experiments(v, "axes.experiment", known)
            elif k == "ranks":
                _ranks(v, "axes.ranks")
            else:
                _flag_args(k, v, options, "axes")
        names.append(k)
        values.append(vs)
    n_points = 1
    for vs in values:
        n_points *= len(vs)
    if n_points > _MAX_POINTS:
        raise ConfigError("axes", f"{n_points} points", f"at most {_MAX_POINTS} points")
    base_exps = (
        _experiments(data["experiment"], "experiment", known) if "experiment" in data else ()
    )
    base_ranks = _ranks(data.get("ranks", 2), "ranks")
    from ..platform import LazyProbes

    probes = LazyProbes()  # shared by every point's check: each probe runs once
    points = []
    for index, combo in enumerate(itertools.product(*values)):
        params = dict(zip(names, combo, strict=True))
        exps = (
            _experiments(params["experiment"], "axes.experiment", known)
            if "experiment" in params
            else base_exps
        )
        ranks = params.get("ranks", base_ranks)
        args = list(exps) + fixed
        values = dict(fixed_values)
        for k, v in params.items():
            if k not in ("experiment", "ranks"):
                args += _flag_args(k, v, options, "axes", values)
        _check_point(index, params, exps, values, probes)
        label = "-".join(
            [*exps]
            + [f"{k.replace('_', '-')}{_slug(v)}" for k, v in params.items() if k != "experiment"]
        )
        name = f"{index:03d}-{label}"[:96]
        points.append(Point(index, name, ranks, exps, params, tuple(args)))
    return SweepSpec(source, data, tuple(points))


def parse_spec_text(text: str, source: str = "<sweep>") -> SweepSpec:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("sweep file", source, f"valid TOML ({e})") from None
    return parse_spec(data, source)


def load_spec(path: str | Path) -> SweepSpec:
    p = Path(path)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("sweep file", str(p), f"a readable TOML file ({e})") from None
    return parse_spec_text(text, str(p))
