"""`gicbench doctor`: what this machine has and which providers/submitters can run here."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from ..errors import ConfigError
from ..fabric.emu import nic_model
from ..fabric.registry import catalog as provider_caps
from ..platform import as_dict, gpu_nic_affinity, probe_all
from ..submit.base import catalog as submitter_caps


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="show Python/MPI/CUDA/CuPy/pyverbs, GPUs, NICs, providers")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=main)


def _print_rdma(con, nics: list[dict]) -> None:
    """RDMA devices, ports, link layers and GIDs (what `ibv_devinfo -v` shows that matters)."""
    from rich.table import Table

    if not nics:
        return
    t = Table(title="RDMA devices")
    for col in ("device:port", "state", "link layer", "LID", "GIDs (index type address netdev)"):
        t.add_column(col)
    for d in nics:
        for p in d.get("port_info", []):
            gids = "\n".join(
                f"{g['index']} {g['type'] or '?'} {g['gid']} {g['ndev'] or ''}".rstrip()
                for g in p["gids"]
            )
            t.add_row(
                f"{d['name']}:{p['port']}",
                p.get("state") or "?",
                p.get("link_layer") or "?",
                p.get("lid") or "",
                gids or "none",
            )
    con.print(t)


def nic_models() -> list[dict[str, str]]:
    """emu's NIC models (--nic-model): none and each preset, with what it models and where its
    constants come from; a figure made with one is modelled, not measured."""
    out = [{"name": nic_model.NONE, "what": nic_model.describe(None), "source": "",
            "sha256": ""}]  # fmt: skip
    try:
        for name in nic_model.preset_names():
            m = nic_model.load(name)
            assert m is not None
            out.append({"name": name, "what": m.summary, "source": m.origin,
                        "sha256": m.digest})  # fmt: skip
    except ConfigError as e:  # a damaged preset file is reported, not a traceback
        out.append({"name": "?", "what": f"presets unreadable: {e}", "source": "",
                    "sha256": ""})  # fmt: skip
    return out


def main(args: argparse.Namespace) -> int:
    probes = probe_all()
    providers = provider_caps(probes)
    submitters = submitter_caps(probes)
    gpus = probes["gpus"].data.get("gpus", [])
    nics = probes["rdma"].data.get("devices", [])
    affinity = gpu_nic_affinity(gpus, nics)
    if args.json:
        print(
            json.dumps(
                {
                    "probes": as_dict(probes),
                    "providers": [asdict(p) for p in providers],
                    "submitters": [asdict(s) for s in submitters],
                    "gpu_nic_affinity": affinity,
                    "nic_models": nic_models(),
                },
                indent=2,
                default=str,
            )
        )
        return 0
    from rich.console import Console
    from rich.table import Table

    con = Console()
    t = Table(title="gicbench doctor: this machine")
    t.add_column("component")
    t.add_column("status")
    t.add_column("detail")
    for p in probes.values():
        t.add_row(p.name, "[green]ok[/green]" if p.ok else "[yellow]absent[/yellow]", p.detail)
    con.print(t)
    for g in gpus:
        con.print(
            f"GPU {g['index']}: {g['name']} pci={g['pci']} numa={g['numa_node']} "
            f"SM clock {g['sm_clock_mhz']}/{g['max_sm_clock_mhz']} MHz driver {g['driver']}"
        )
    _print_rdma(con, nics)
    for row in affinity:
        con.print(
            f"GPU {row['gpu']} (NUMA {row['numa_node']}) near NICs: "
            f"{', '.join(row['nics']) or 'none'}"
        )
    t = Table(title="what can run here")
    t.add_column("kind")
    t.add_column("name")
    t.add_column("runs here")
    t.add_column("notes")
    for kind, caps in (("provider", providers), ("submitter", submitters)):
        for c in caps:
            t.add_row(
                kind,
                c.name,
                "[green]yes[/green]" if c.available else "[red]no[/red]",
                c.reason or c.details.get("what", ""),
            )
    con.print(t)
    t = Table(title="emu NIC models (--nic-model): figures made with one are modelled, "
              "not measured")
    for col in ("name", "models", "constants from"):
        t.add_column(col)
    for m in nic_models():
        t.add_row(m["name"], m["what"], m["source"])
    con.print(t)
    return 0
