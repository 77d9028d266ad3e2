"""Device, port and GID selection for the verbs provider.

Order of precedence: `ib_dev` (the `--ib-dev` flag) > the GICBENCH_IB_HCA environment variable
(NCCL_IB_HCA syntax) > every device with an active port. On Ethernet (RoCE) ports the GID is the
RoCEv2 one, IPv4-mapped (::ffff:a.b.c.d) first, unless `gid_index` names one; on InfiniBand ports
the LID routes and GID index 0 is used unless `gid_index` names another.

GICBENCH_IB_HCA / --ib-dev syntax, as NCCL_IB_HCA: comma-separated `name[:port]`; names match as
prefixes (`mlx5` matches mlx5_0, mlx5_1), a leading `=` makes them exact, a leading `^` excludes
the listed devices instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import ConfigError, UnsupportedError
from .compat import enums

HCA_ENV = "GICBENCH_IB_HCA"
SYSFS = Path("/sys/class/infiniband")
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
IPV4_MAPPED_PREFIX = "0000:0000:0000:0000:0000:ffff:"
LINK_LAYERS = {0: "unspecified", 1: "InfiniBand", 2: "Ethernet"}
PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
GID_TYPES = {0: "IB", 1: "RoCEv1", 2: "RoCEv2"}
MTU_BYTES = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}


@dataclass(frozen=True)
class HcaSpec:
    """A parsed NCCL_IB_HCA-style filter."""

    entries: tuple[tuple[str, int | None], ...]
    exact: bool = False
    exclude: bool = False

    def matches(self, dev: str, port: int) -> bool:
        hit = any(
            (dev == name if self.exact else dev.startswith(name)) and (p is None or p == port)
            for name, p in self.entries
        )
        return not hit if self.exclude else hit


def parse_hca(spec: str, field_name: str = HCA_ENV) -> HcaSpec:
    s = spec.strip()
    exclude = s.startswith("^")
    s = s[1:] if exclude else s
    exact = s.startswith("=")
    s = s[1:] if exact else s
    entries = []
    for part in s.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, port = part.partition(":")
        if not name or (port and not port.isdigit()):
            raise ConfigError(field_name, spec, "[^][=]name[:port][,name[:port]...]")
        entries.append((name, int(port) if port else None))
    if not entries:
        raise ConfigError(field_name, spec, "[^][=]name[:port][,name[:port]...]")
    return HcaSpec(tuple(entries), exact, exclude)


@dataclass(frozen=True)
class GidEntry:
    index: int
    gid: str
    type: str  # IB | RoCEv1 | RoCEv2

    @property
    def ipv4(self) -> str | None:
        if not self.gid.startswith(IPV4_MAPPED_PREFIX):
            return None
        h = self.gid[len(IPV4_MAPPED_PREFIX) :].replace(":", "")
        return ".".join(str(int(h[i : i + 2], 16)) for i in range(0, 8, 2))


@dataclass
class PortInfo:
    device: str
    port: int
    state: str
    link_layer: str
    lid: int
    active_mtu: int  # bytes
    gids: list[GidEntry] = field(default_factory=list)

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"

    def as_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "port": self.port,
            "state": self.state,
            "link_layer": self.link_layer,
            "lid": self.lid,
            "active_mtu": self.active_mtu,
            "gids": [
                {"index": g.index, "gid": g.gid, "type": g.type, "ipv4": g.ipv4} for g in self.gids
            ],
        }


def device_names() -> list[str]:
    """Names of the RDMA devices libibverbs sees; [] when there are none (pyverbs raises)."""
    enums()  # raises UnsupportedError, naming the fix, when pyverbs is absent
    from pyverbs.device import get_device_list
    from pyverbs.pyverbs_error import PyverbsError

    try:
        devs = get_device_list()
    except PyverbsError:
        return []  # rdma-core 44 raises "Failed to get devices list" when there is none
    return [d.name.decode() if isinstance(d.name, bytes) else str(d.name) for d in devs]


def _gid_type(ctx: Any, name: str, port: int, index: int, link_layer: str) -> str:
    """IB, RoCEv1 or RoCEv2. sysfs first (its text is unambiguous), then ibv_query_gid_ex.
    Not ibv_query_gid_type: it answers in the sysfs numbering (0 = IB/RoCEv1, 1 = RoCEv2),
    which differs from ibv_gid_type's (0 IB, 1 RoCEv1, 2 RoCEv2)."""
    try:
        text = (SYSFS / name / "ports" / str(port) / "gid_attrs" / "types" / str(index)).read_text()
    except OSError:
        text = ""
    text = text.strip().lower()
    if "v2" in text:
        return "RoCEv2"
    if text:
        return "IB" if link_layer == "InfiniBand" else "RoCEv1"
    try:
        t = int(ctx.query_gid_ex(port, index).gid_type)
    except Exception:
        return "unknown"
    return GID_TYPES.get(t, f"type{t}")


def query_port(ctx: Any, name: str, port: int) -> PortInfo:
    a = ctx.query_port(port)
    info = PortInfo(
        device=name,
        port=port,
        state=PORT_STATES.get(int(a.state), str(a.state)),
        link_layer=LINK_LAYERS.get(int(a.link_layer), str(a.link_layer)),
        lid=int(a.lid),
        active_mtu=MTU_BYTES.get(int(a.active_mtu), 0),
    )
    for i in range(int(a.gid_tbl_len)):
        try:
            gid = str(ctx.query_gid(port, i))
        except Exception:
            continue  # an empty slot
        if gid == ZERO_GID or gid == "::":
            continue
        info.gids.append(GidEntry(i, gid, _gid_type(ctx, name, port, i, info.link_layer)))
    return info


def list_ports() -> list[PortInfo]:
    """Every port of every device, with its GID table (what doctor prints)."""
    from pyverbs.device import Context

    out = []
    for name in device_names():
        with Context(name=name) as ctx:
            for port in range(1, int(ctx.query_device().phys_port_cnt) + 1):
                out.append(query_port(ctx, name, port))
    return out


def default_gid(port: PortInfo) -> GidEntry | None:
    """RoCE: the IPv4-mapped RoCEv2 GID, else any RoCEv2 one. InfiniBand: index 0."""
    if port.link_layer == "InfiniBand":
        return next((g for g in port.gids if g.index == 0), None)
    v2 = [g for g in port.gids if g.type == "RoCEv2"]
    return next((g for g in v2 if g.ipv4), v2[0] if v2 else None)


@dataclass(frozen=True)
class Selection:
    port: PortInfo
    gid: GidEntry

    @property
    def device(self) -> str:
        return self.port.device


def select(
    ib_dev: str | None = None, gid_index: int | None = None, env: dict[str, str] | None = None
) -> Selection:
    """The device, port and GID this rank uses (see the module docstring for precedence)."""
    env = os.environ if env is None else env
    if gid_index is not None and (not isinstance(gid_index, int) or gid_index < 0):
        raise ConfigError("gid_index (--gid-index)", gid_index, "an int >= 0")
    if ib_dev:
        spec, source = parse_hca(ib_dev, "ib_dev (--ib-dev)"), "ib_dev (--ib-dev)"
    elif env.get(HCA_ENV):
        spec, source = parse_hca(env[HCA_ENV]), HCA_ENV
    else:
        spec, source = None, "default"
    ports = list_ports()
    if not ports:
        raise UnsupportedError(
            "provider verbs: no RDMA device (libibverbs lists none). Load a driver, or for "
            "Soft-RoCE: modprobe rdma_rxe; rdma link add rxe0 type rxe netdev <if>"
        )
    seen = ", ".join(f"{p.device}:{p.port} ({p.state})" for p in ports)
    cands = [p for p in ports if spec is None or spec.matches(p.device, p.port)]
    if not cands:
        raise ConfigError(source, ib_dev or env.get(HCA_ENV), f"a device:port among {seen}")
    active = [p for p in cands if p.active]
    if not active:
        raise UnsupportedError(f"provider verbs: no ACTIVE port among {source} matches ({seen})")
    port = active[0]
    if gid_index is not None:
        gid = next((g for g in port.gids if g.index == gid_index), None)
        if gid is None:
            valid = ", ".join(f"{g.index} ({g.type} {g.gid})" for g in port.gids) or "none"
            raise ConfigError(
                "gid_index (--gid-index)",
                gid_index,
                f"a populated GID of {port.device}:{port.port}: {valid}",
            )
    else:
        gid = default_gid(port)
        if gid is None:
            raise UnsupportedError(
                f"provider verbs: {port.device}:{port.port} ({port.link_layer}) has no RoCEv2 "
                "GID; give --gid-index (ibv_devinfo -v lists the GID table)"
            )
    return Selection(port, gid)
