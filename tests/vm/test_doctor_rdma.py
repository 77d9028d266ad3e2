"""`gicbench doctor`'s RDMA section on a real verbs device (rxe0 over veth0 in the guest)."""

from __future__ import annotations

from gicbench.fabric.registry import catalog as provider_caps
from gicbench.platform import probe_all, probe_rdma_devices


def test_rdma_probe_lists_ports_link_layers_and_gids(rxe_device):
    p = probe_rdma_devices()
    assert p.ok
    dev = next(d for d in p.data["devices"] if d["name"] == rxe_device)
    (port,) = dev["port_info"]
    assert port["port"] == 1 and "ACTIVE" in port["state"] and port["link_layer"] == "Ethernet"
    v4 = [g for g in port["gids"] if g["gid"].endswith("ffff:0ac8:0001")]
    assert v4 and v4[0]["type"] == "RoCE v2" and v4[0]["ndev"] == "veth0"


def test_doctor_says_verbs_is_ready_and_what_it_offers(rxe_device):
    verbs = next(c for c in provider_caps(probe_all()) if c.name == "verbs")
    assert f"{rxe_device}:1 GID 1 (RoCEv2)" in verbs.details["selected"]
    assert verbs.details["mlx5_queues"] is False and verbs.details["post_send"] is True
    assert verbs.details["pyverbs_enums"] in ("enums", "libibverbs_enums")
    assert verbs.posting == ("post-send",)
    assert verbs.available and verbs.reason == ""  # rxe is no mlx5 device: nothing to add
