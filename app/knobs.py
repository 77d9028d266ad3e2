"""Knobs: the one place where a parameter's flag, help, type and bounds are declared.

A knob is a dataclass field whose metadata holds a `Knob`. RunConfig (what every run shares),
each experiment's Params and each submitter's Params declare their fields with `knob(...)`;
the CLI, `gicbench list` and validation are generated from those declarations. The same field
name in two classes must be the same Knob object (one place for each fact).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

KIND_INT, KIND_FLOAT, KIND_STR, KIND_SIZE, KIND_CHOICES = "int", "float", "str", "size", "choices"


# Numbers as a shell user types them: ASCII digits only (Python's int() also takes '８', '٣'
# and '1_000', which no other tool would read the same way).
_INT = re.compile(r"[+-]?[0-9]+")
_HEX = re.compile(r"0[xX][0-9a-fA-F]+")
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def parse_int(text: str, name: str, allowed: str = "an integer") -> int:
    """'12', '-3', '0x1f' -> int; anything else (non-ASCII digits, '1_000', '1.0') is refused."""
    s = str(text).strip()
    if _INT.fullmatch(s):
        return int(s)
    if _HEX.fullmatch(s):
        return int(s, 16)
    raise ConfigError(name, text, allowed)


def parse_float(text: str, name: str) -> float:
    s = str(text).strip()
    if not _FLOAT.fullmatch(s):
        raise ConfigError(name, text, "a number")
    return float(s)


def parse_size(text: str | int, name: str = "size") -> int:
    """'8', '4K', '1M', '2G' (powers of 1024, as perftest and OSU accept) -> bytes."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    s = str(text).strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    digits = s[:-1] if s[-1:] in "KMG" else s
    if not _INT.fullmatch(digits):
        raise ConfigError(name, text, "a byte count such as 8, 4K, 1M")
    return int(digits) * mult


def parse_list(text: str, name: str, allowed: str) -> tuple[str, ...]:
    """'a,b,c' -> ('a', 'b', 'c'), the one parser of every comma-separated knob: an empty item
    ('1,,2', a trailing comma) or an item given twice (duplicate rows) is refused."""
    items = tuple(p.strip() for p in str(text).split(","))
    check_list(name, items, allowed)
    return items


def check_list(name: str, items: tuple | list, allowed: str) -> None:
    if not items or any(not str(p).strip() for p in items):
        raise ConfigError(name, ",".join(map(str, items)), f"a comma-separated list of {allowed}, "
                          "no empty items")  # fmt: skip
    repeated = sorted({str(p) for p in items if list(items).count(p) > 1})
    if repeated:
        raise ConfigError(name, ",".join(map(str, items)), f"a comma-separated list of {allowed}, "
                          f"each once ({', '.join(repeated)} repeated)")  # fmt: skip


def parse_int_list(text: str, name: str, lo: int, hi: int) -> tuple[int, ...]:
    """'1,2,4' -> (1, 2, 4), each an integer in lo..hi (parse_list's rules)."""
    allowed = f"integers in {lo}..{hi}"
    values = tuple(parse_int(p, name, f"a comma-separated list of {allowed}")
                   for p in parse_list(text, name, allowed))  # fmt: skip
    bad = [v for v in values if not lo <= v <= hi]
    if bad:
        raise ConfigError(name, text, f"a comma-separated list of {allowed} ({bad[0]} is not)")
    return values


@dataclass(frozen=True, eq=False)
class Knob:
    """How one parameter is named, typed, bounded and explained."""

    flag: str  # the long flag, e.g. --min-size
    help: str
    kind: str = KIND_INT
    short: str | None = None  # e.g. -b
    choices: tuple[str, ...] | None = None
    lo: float | None = None
    hi: float | None = None
    many: bool = False  # a comma-separated list of choices (e.g. --modes issue,round_trip)
    unit: str = ""

    def label(self, field: str) -> str:
        """How errors name it: the field and the flag users type."""
        return f"{field} ({self.short or self.flag})"

    def parse(self, field: str, text: str) -> Any:
        """A command-line string -> the typed value (ConfigError names the flag)."""
        label = self.label(field)
        if self.kind == KIND_SIZE:
            return parse_size(text, label)
        if self.kind == KIND_INT:
            return parse_int(text, label)
        if self.kind == KIND_FLOAT:
            return parse_float(text, label)
        if self.many:
            return parse_list(text, label, self._allowed() if self.choices else "values")
        return text

    def check(self, field: str, value: Any) -> None:
        """Raise ConfigError naming the field and flag unless `value` is allowed."""
        label = self.label(field)
        if self.many:
            allowed = self._allowed() if self.choices else "values"
            if not isinstance(value, tuple | list) or not value:
                raise ConfigError(label, value, "a comma-separated list of " + allowed)
            check_list(label, value, allowed)
        if self.choices is not None:
            values = value if self.many else (value,)
            for v in values:
                if v not in self.choices:
                    raise ConfigError(label, v, self._allowed())
            return
        if self.kind in (KIND_INT, KIND_SIZE):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(label, value, "an integer")
        elif self.kind == KIND_FLOAT:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(label, value, "a number")
            if not math.isfinite(value):
                raise ConfigError(label, value, "a finite number")
        else:
            return
        if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            raise ConfigError(label, value, self._bounds(field))

    def _allowed(self) -> str:
        return "one of " + ", ".join(self.choices or ())

    def _bounds(self, field: str) -> str:
        lo = "" if self.lo is None else f"{_num(self.lo)} <= "
        hi = "" if self.hi is None else f" <= {_num(self.hi)}"
        return f"{lo}{field}{hi}{' ' + self.unit if self.unit else ''}"

    def show(self, value: Any) -> str:
        """A value as a user would type it (help, `gicbench list`): 256M, 1,16, 0.5."""
        if isinstance(value, tuple | list):
            return ",".join(map(str, value))
        if self.kind == KIND_SIZE and isinstance(value, int) and not isinstance(value, bool):
            for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
                if value >= div and value % div == 0:
                    return f"{value // div}{unit}"
        if isinstance(value, float):
            return f"{value:g}"
        return str(value)

    def describe_allowed(self) -> str:
        if self.choices is not None:
            return ("list of " if self.many else "") + "|".join(self.choices)
        if self.lo is None and self.hi is None:
            return self.kind
        return self._bounds("x")


def _num(v: float) -> str:
    return f"{int(v):,}" if float(v).is_integer() else f"{v:g}"


def knob(default: Any, **kwargs: Any) -> Any:
    """A dataclass field declared as a knob (see Knob for the keywords)."""
    return dataclasses.field(default=default, metadata={"knob": Knob(**kwargs)})


def knob_of(f: dataclasses.Field) -> Knob | None:
    return f.metadata.get("knob")


def knob_fields(cls_or_obj: Any) -> Iterator[tuple[dataclasses.Field, Knob]]:
    for f in dataclasses.fields(cls_or_obj):
        k = knob_of(f)
        if k is not None:
            yield f, k


def check_knobs(obj: Any) -> None:
    """Check every knob field of a dataclass instance; None means "as needed" and passes."""
    for f, k in knob_fields(obj):
        value = getattr(obj, f.name)
        if value is not None:
            k.check(f.name, value)


def build(cls: type, values: dict[str, Any], owner: str, check: Callable | None = None) -> Any:
    """An instance of the Params dataclass `cls` from the knob values that apply to it."""
    names = {f.name for f in dataclasses.fields(cls)}
    obj = cls(**{k: v for k, v in values.items() if k in names})
    check_knobs(obj)
    if check is not None:
        check(obj)
    return obj
