"""mini-proxy on the verbs provider (no mlx5 queues in memory): the engine's workers post their
chains with one ibv_post_send each and poll with ibv_poll_cq (proxy/src/proxy_verbs.cpp), on the
QPs and CQs the verbs fabric owns natively. Producers, rings and completion counters are the
same as on emu. What cannot run here is refused in pre-flight (`refusal`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import ConfigError
from ..base import Lane


def on_verbs(fabric: Any) -> bool:
    """True for a provider whose queues live behind a post-send call (the verbs fabric)."""
    return not getattr(fabric, "mlx5_queues", True)


def refusal(
    points: Sequence[tuple[str, Mapping[str, Any]]], provider: str, posting: Sequence[str]
) -> ConfigError | None:
    """What --submitter proxy cannot run on a post-send-only provider (None: all of it can), as
    pre-flight decides it before anything exists: inline payloads beyond the inline bytes the
    verbs provider asks its QPs for (a device may grant fewer; verbs_lanes checks the QPs)."""
    from ...fabric.base import Posting
    from ...fabric.verbs.fabric import MAX_INLINE

    if Posting.MLX5_QUEUES.value in posting:
        return None
    for exp, pt in points:
        size = int(pt.get("size", 8))
        if "payload" not in pt and size > MAX_INLINE:
            # no payload knob (loaded-rtt): probe and background are inline (ProxySubmitter.loaded)
            return ConfigError(
                "max_size (-e)",
                size,
                f"<= {MAX_INLINE} B for {exp} with --submitter proxy --provider {provider} "
                "(its probe and background are written inline)",
            )
        if pt.get("payload") == "inline" and size > MAX_INLINE:
            return ConfigError(
                "payload (--payload)",
                "inline",
                f"pointer for sizes above {MAX_INLINE} B with --submitter proxy --provider "
                f"{provider} ({exp}, {pt['size']} B)",
            )
    return None


def _side(addr: int, key: int, length: int) -> tuple[int, int, int]:
    return (addr, key, length)


def verbs_lanes(fabric: Any, lanes: tuple[Lane, ...], inline: bool, max_size: int) -> list:
    """The native engine's verbs lane rows: (qpn, cq, SQ depth in WRs, CQ entries, max inline,
    src, dst). Inline payloads beyond what a QP accepts are refused before any ring exists."""
    rows = []
    for ln in lanes:
        qp = ln.qp
        max_inline = int(fabric.max_inline(qp))
        if inline and max_size > max_inline:
            raise ConfigError(
                "payload (--payload)",
                "inline",
                f"pointer for sizes above {max_inline} B on {fabric.device} "
                f"(QP 0x{qp.qpn:06x} accepts {max_inline} inline bytes)",
            )
        region = min(ln.src.length, ln.dst.length)
        rows.append(
            (
                fabric.qpn_of(qp),
                fabric.cqn_of(qp.sq.cq),
                int(qp.sq.wqebb_cnt),
                int(qp.sq.cq.ncqe),
                max_inline,
                _side(ln.src.addr, ln.src.key, region),
                _side(ln.dst.addr, ln.dst.key, region),
            )
        )
    return rows
