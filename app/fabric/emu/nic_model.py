"""NIC models of the emulated NIC: loading a preset (nic_models.toml) or a user's file, checking
every value, and converting it to the integer units the engine charges (cuda/nic_model.cuh).

`--nic-model none` (the default) charges nothing: the engine executes WQEs as fast as it can.
A model makes every completion, landing and signal visible at its modelled time, never earlier;
a figure produced with one is a prediction from the model's stated constants, not a
measurement of hardware (the README's "NIC model" section).
"""

from __future__ import annotations

import hashlib
import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from ...errors import ConfigError

NONE = "none"
PRESETS_FILE = Path(__file__).with_name("nic_models.toml")
FLAG = "nic_model (--nic-model)"
# An event made visible later than this past its modelled time is late (engine tolerance).
DEFAULT_LATE_SLACK_NS = 1000.0
# A point whose share of late events exceeds this is flagged nic_model_saturated: the engine,
# not the model, set its numbers.
SATURATED_FRACTION = 0.01
MAX_NS = 1e9  # one second: no NIC charge is longer


@dataclass(frozen=True)
class Spec:
    """One parameter: unit, bounds, and how it becomes the engine's integer field."""

    unit: str
    meaning: str
    native: str  # the engine's field (gicbench._native.emu.MODEL_PARAMS)
    integer: bool = False
    lo: float = 0.0
    hi: float = MAX_NS
    positive: bool = False  # a rate: > 0


# fmt: off
SPECS: dict[str, Spec] = {
    "doorbell_ns": Spec("ns", "doorbell delivery (MMIO write to the NIC)", "doorbell_ps"),
    "dma_read_ns": Spec("ns", "DMA read latency (WQE fetch, pointer payload, READ)",
                        "dma_read_ps"),
    "dma_read_gbps": Spec("GB/s", "DMA read bandwidth", "dma_fs_per_byte", hi=1e6,
                          positive=True),
    "dma_write_ns": Spec("ns", "posted DMA write reaching memory (landing, CQE)",
                         "dma_write_ps"),
    "port_msg_rate_mps": Spec("M msg/s", "send pipeline's message rate (the port ceiling)",
                              "tx_msg_ps", hi=1e6, positive=True),
    "recv_msg_rate_mps": Spec("M msg/s", "receive pipeline's message rate", "rx_msg_ps",
                              hi=1e6, positive=True),
    "link_gbps": Spec("Gb/s", "line rate", "link_fs_per_byte", hi=1e6, positive=True),
    "wire_ns": Spec("ns", "one way over the wire: link, switch, far end's pipeline", "wire_ps"),
    "mtu_bytes": Spec("B", "payload bytes per packet", "mtu", integer=True, lo=64, hi=1 << 20),
    "packet_header_bytes": Spec("B", "header bytes per packet", "packet_header_bytes",
                                integer=True, hi=4096),
    "request_header_bytes": Spec("B", "extra header bytes of a request's first packet",
                                 "request_header_bytes", integer=True, hi=4096),
    "context_fetch_ns": Spec("ns", "fetch of a context missing from the cache",
                             "ctx_fetch_ps"),
    "cache_lines": Spec("lines", "context cache size (0: no cache)", "cache_lines",
                        integer=True, hi=1 << 22),
    "send_context_lines": Spec("lines", "lines of a send-side context", "send_ctx_lines",
                               integer=True, lo=1, hi=1 << 22),
    "recv_context_lines": Spec("lines", "lines of a receive-side context", "recv_ctx_lines",
                               integer=True, lo=1, hi=1 << 22),
    "recv_miss_busy_ns": Spec("ns", "receive pipeline busy time per receive-side miss",
                              "recv_miss_busy_ps"),
    "dc_connect_ns": Spec("ns", "a DCI connecting to a destination", "dc_connect_ps"),
}
# fmt: on
MODEL_KEYS = frozenset({"summary", "platform", "late_slack_ns", "params"})


@dataclass(frozen=True)
class Constant:
    value: float | int
    source: str
    derivation: str = ""


@dataclass(frozen=True)
class NicModel:
    """A NIC model: its name, where it came from, and every parameter with its source."""

    name: str
    origin: str  # the file it was read from
    digest: str  # sha256 of that file's bytes
    summary: str
    platform: str
    late_slack_ns: float
    constants: dict[str, Constant] = field(default_factory=dict)

    def value(self, key: str) -> float | int:
        return self.constants[key].value

    def native_params(self) -> dict[str, int]:
        """The engine's integer fields: picoseconds, femtoseconds per byte, bytes, lines."""
        v = self.value
        out = {
            SPECS[k].native: _ps(float(v(k)))
            for k in ("doorbell_ns", "dma_read_ns", "dma_write_ns", "wire_ns",
                      "context_fetch_ns", "recv_miss_busy_ns", "dc_connect_ns")
        }  # fmt: skip
        out["dma_fs_per_byte"] = round(1e6 / float(v("dma_read_gbps")))  # fs per byte
        out["link_fs_per_byte"] = round(8e6 / float(v("link_gbps")))  # 8 bits at Gb/s, in fs
        out["tx_msg_ps"] = round(1e6 / float(v("port_msg_rate_mps")))
        out["rx_msg_ps"] = round(1e6 / float(v("recv_msg_rate_mps")))
        for k in ("mtu_bytes", "packet_header_bytes", "request_header_bytes", "cache_lines",
                  "send_context_lines", "recv_context_lines"):  # fmt: skip
            out[SPECS[k].native] = int(v(k))
        out["slack_ps"] = _ps(self.late_slack_ns)
        return out

    def record(self) -> dict[str, Any]:
        """What a trace and run.json keep of the model: enough to say which produced a figure."""
        return {
            "name": self.name,
            "origin": self.origin,
            "sha256": self.digest,
            "summary": self.summary,
            "late_slack_ns": self.late_slack_ns,
            "params": {k: c.value for k, c in self.constants.items()},
        }

    def label(self) -> str:
        """How tables and figures name it: 'modelled: <name>'."""
        return f"modelled: {self.name}"


def _ps(ns: float) -> int:
    return round(ns * 1000)


def preset_names() -> list[str]:
    return sorted(_presets_table(_read(PRESETS_FILE, "preset file"))[0])


def load(spec: str) -> NicModel | None:
    """The model `spec` names: "none" (None), a preset's name, or a path to a .toml file of one
    model. Any problem is a ConfigError naming the field and what is allowed."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(FLAG, spec, f"{NONE}, a preset ({', '.join(preset_names())}) or a "
                          ".toml file")  # fmt: skip
    spec = spec.strip()
    if spec == NONE:
        return None
    if spec.endswith(".toml") or "/" in spec:
        path = Path(spec)
        raw, digest = _read(path, "file")
        where = f"{FLAG} {path}"
        return _model(path.stem, raw, str(path.resolve()), digest, where)
    (presets, digest) = _presets_table(_read(PRESETS_FILE, "preset file"))
    if spec not in presets:
        raise ConfigError(FLAG, spec, f"{NONE}, one of the presets ({', '.join(sorted(presets))}) "
                          "or a path to a .toml file")  # fmt: skip
    return _model(spec, presets[spec], str(PRESETS_FILE), digest, f"{FLAG} preset {spec}")


MAX_FILE_BYTES = 1 << 20  # a model is a few dozen lines: anything larger is not one


def _read(path: Path, what: str) -> tuple[dict[str, Any], str]:
    """The file's TOML and digest. A regular file of at most MAX_FILE_BYTES only: opened without
    blocking (a FIFO has no writer) and checked before it is read (/dev/zero never ends)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise ConfigError(FLAG, str(path), f"a readable .toml {what} ({e.strerror})") from e
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
        os.close(fd)
        kind = "a larger file" if stat.S_ISREG(st.st_mode) else "not a regular file"
        raise ConfigError(FLAG, str(path), f"a regular .toml {what} of at most "
                          f"{MAX_FILE_BYTES} bytes ({kind})")  # fmt: skip
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:  # grew since the check
        raise ConfigError(FLAG, str(path), f"a .toml {what} of at most {MAX_FILE_BYTES} bytes")
    try:
        return tomllib.loads(data.decode()), hashlib.sha256(data).hexdigest()
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(FLAG, str(path), f"a valid TOML {what} ({e})") from e


def _presets_table(read: tuple[dict[str, Any], str]) -> tuple[dict[str, Any], str]:
    raw, digest = read
    models = raw.get("models")
    if not isinstance(models, dict) or not models:
        raise ConfigError(f"{FLAG} {PRESETS_FILE}: models", models, "a table of models")
    return models, digest


def _model(name: str, raw: Any, origin: str, digest: str, where: str) -> NicModel:
    if not isinstance(raw, dict):
        raise ConfigError(where, raw, "a table of summary, platform, late_slack_ns, params")
    unknown = sorted(set(raw) - MODEL_KEYS)
    if unknown:
        raise ConfigError(f"{where}: {unknown[0]}", raw[unknown[0]],
                          f"only the keys {', '.join(sorted(MODEL_KEYS))}")  # fmt: skip
    for key in ("summary", "platform"):
        if not isinstance(raw.get(key, ""), str):
            raise ConfigError(f"{where}: {key}", raw[key], "a string")
    slack = raw.get("late_slack_ns", DEFAULT_LATE_SLACK_NS)
    if not _number(slack) or not 0 <= slack <= MAX_NS:
        raise ConfigError(f"{where}: late_slack_ns", slack, f"a number of ns in 0..{MAX_NS:g}")
    params = raw.get("params")
    if not isinstance(params, dict):
        raise ConfigError(f"{where}: params", params, "a table of [params.NAME] tables")
    unknown = sorted(set(params) - set(SPECS))
    if unknown:
        raise ConfigError(f"{where}: params.{unknown[0]}", params[unknown[0]],
                          f"one of {', '.join(SPECS)}")  # fmt: skip
    missing = [k for k in SPECS if k not in params]
    if missing:
        raise ConfigError(f"{where}: params.{missing[0]}", None,
                          f"every parameter stated ({', '.join(missing)} missing)")  # fmt: skip
    constants = {k: _constant(f"{where}: params.{k}", k, params[k]) for k in SPECS}
    lines = int(constants["cache_lines"].value)
    for k in ("send_context_lines", "recv_context_lines"):
        if lines and constants[k].value > lines:
            raise ConfigError(f"{where}: params.{k}", constants[k].value,
                              f"at most cache_lines ({lines})")  # fmt: skip
    return NicModel(name, origin, digest, str(raw.get("summary", "")),
                    str(raw.get("platform", "")), float(slack), constants)  # fmt: skip


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _constant(where: str, key: str, raw: Any) -> Constant:
    spec = SPECS[key]
    if not isinstance(raw, dict) or "value" not in raw:
        raise ConfigError(where, raw, "a table with value and source (and a derivation)")
    extra = sorted(set(raw) - {"value", "source", "derivation"})
    if extra:
        raise ConfigError(f"{where}.{extra[0]}", raw[extra[0]], "only value, source, derivation")
    v = raw["value"]
    kind = "an integer" if spec.integer else "a number"
    bounds = f"{'>' if spec.positive else ''}{spec.lo:g}..{spec.hi:g}"
    allowed = f"{kind} of {spec.unit} in {bounds} ({spec.meaning})"
    if not _number(v) or (spec.integer and not isinstance(v, int)):
        raise ConfigError(f"{where}.value", v, allowed)
    if v < spec.lo or v > spec.hi or (spec.positive and v <= 0):
        raise ConfigError(f"{where}.value", v, allowed)
    source = raw.get("source")
    if not isinstance(source, str) or not source.strip():
        raise ConfigError(f"{where}.source", source, "the published constant or stated mechanism "
                          "the value comes from")  # fmt: skip
    derivation = raw.get("derivation", "")
    if not isinstance(derivation, str):
        raise ConfigError(f"{where}.derivation", derivation, "a string")
    return Constant(v, source.strip(), derivation.strip())


def describe(model: NicModel | None) -> str:
    """One line for the preamble, doctor and reports."""
    if model is None:
        return f"{NONE} (no NIC costs charged: the engine's own speed)"
    return f"{model.name}: {model.summary} ({model.origin})"


__all__ = ["NONE", "SATURATED_FRACTION", "SPECS", "Constant", "NicModel", "describe", "load",
           "preset_names"]  # fmt: skip
