"""What an experiment sees of its rank: the traffic pattern, the landing layout, the submitter,
and lanes (QPs with their source and destination regions) built from what bring-up made.

Landing layout: every rank's landing buffer holds one region per neighbour (sorted by rank), and
each region one slice per lane, `lane_bytes` long; a sender writes lane l of its traffic into
slice l of its own region at the receiver. The send buffer holds `lanes` slices of the same
size, filled with the rank's pattern before each point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..patterns import Traffic, traffic
from ..submit.base import Buffer, DcAddress, Lane, Submitter

if TYPE_CHECKING:
    from ..bootstrap.bringup import Resources
    from ..bootstrap.topology import Topology
    from ..config import RunConfig
    from ..fabric.base import Fabric


@dataclass(frozen=True)
class Layout:
    lane_bytes: int  # one lane's slice: whole messages of the largest size in the run
    lanes: int  # slices per region (the most lanes any experiment drives to one peer)

    @property
    def region_bytes(self) -> int:
        return self.lane_bytes * self.lanes

    def region_offset(self, receiver: Traffic, source: int) -> int:
        """Where `source`'s region starts in `receiver`'s landing buffer."""
        return receiver.neighbours.index(source) * self.region_bytes


SLOT_REGION = 4 << 20  # at most this many bytes per lane slice (msg-rate cycles over its slots)
MAX_SLOTS = 64


def plan_layout(max_message: int, lanes: int, neighbours: int, landing_bytes: int) -> Layout:
    """Lane slices of up to MAX_SLOTS messages, shrunk to fit --landing-bytes."""
    want = max(1, min(MAX_SLOTS, SLOT_REGION // max_message)) * max_message
    fit = landing_bytes // (max(1, neighbours) * lanes) // max_message * max_message
    if fit < max_message:
        need = max(1, neighbours) * lanes * max_message
        raise ConfigError(
            "landing_bytes (--landing-bytes)",
            landing_bytes,
            f">= {need} ({neighbours} neighbours x {lanes} lanes x {max_message}-byte messages)",
        )
    return Layout(lane_bytes=min(want, fit), lanes=lanes)


@dataclass
class RankContext:
    cfg: RunConfig
    comm: Any
    topo: Topology
    fabric: Fabric
    res: Resources
    submitter: Submitter
    traffic: Traffic
    layout: Layout

    def landing_from(self, source: int, lane: int = 0) -> Buffer:
        """This rank's landing slice where `source`'s lane `lane` writes."""
        assert self.res.landing is not None
        off = self.layout.region_offset(self.traffic, source) + lane * self.layout.lane_bytes
        return Buffer.local(self.res.landing, off, self.layout.lane_bytes)

    def lanes_to(self, peer: int, transport: str, count: int) -> tuple[Lane, ...]:
        """`count` lanes towards `peer`: its first RC QPs, or for DC a slice of the DCI pool
        (one slice per destination, so no two lanes share a DCI) addressed to the peer's DC
        targets round-robin."""
        assert self.res.src is not None
        remote = self.res.peer_landing[peer]
        base = self.layout.region_offset(
            traffic(self.traffic.pattern, peer, self.topo.size), self.topo.rank
        )
        lanes = []
        step = self.layout.lane_bytes
        for i in range(count):
            # QPs beyond the layout's lanes (configured, only quiesced) share its slices.
            off = (i % self.layout.lanes) * step
            src = Buffer.local(self.res.src, off, step)
            dst = Buffer(remote.addr + base + off, remote.rkey, step)
            if transport == "dc":
                slot = self.traffic.neighbours.index(peer) * count + i
                dcts = self.res.peer_dcts[peer]
                d = dcts[i % len(dcts)]
                qp = self.res.dcis[slot]
                lanes.append(Lane(qp, peer, src, dst, DcAddress(d["dctn"], d["dc_key"], d["lid"])))
            else:
                lanes.append(Lane(self.res.rc[peer][i], peer, src, dst))
        return tuple(lanes)

    def configured_lanes(self, transport: str, count: int, first: int) -> tuple[Lane, ...]:
        """Every QP this rank has configured for `transport` (the scope of an all-QP quiet),
        with the `count` lanes towards `first` at the front."""
        peers = [first] + [p for p in self.traffic.neighbours if p != first]
        per_peer = count if transport == "dc" else len(self.res.rc[first])
        return tuple(lane for p in peers for lane in self.lanes_to(p, transport, per_peer))
