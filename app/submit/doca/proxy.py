"""The host thread of DOCA's CPU_PROXY and CPU_PROXY_FREE_FLOW handlers (native: native/src/
doca_proxy.cpp). It watches, per QP, the host-mapped word(s) the GPU writes (see
layout.proxy_bytes) and publishes the producer index to the NIC: doorbell record, then doorbell."""

from __future__ import annotations

from typing import Any

from ...errors import ConfigError
from ...fabric.base import QueuePair
from .layout import NicHandler


def _native() -> Any:
    from ..._native import doca

    return doca


class HostRinger:
    """One native thread for a set of QPs. `add(qp, handler, word_host_addr, start)` before
    `start()`; `poll_once()` runs one pass on the caller's thread (tests, inline use)."""

    def __init__(self) -> None:
        self._p = _native().DocaProxy()

    def add(self, qp: QueuePair, handler: NicHandler, word: int, start: int = 0) -> None:
        h = NicHandler(handler)
        if not h.host_thread:
            raise ConfigError("handler", h.cli, "cpu-proxy or cpu-proxy-free-flow (others need "
                              "no host thread)")  # fmt: skip
        self._p.add(word, qp.sq.dbrec, qp.sq.doorbell, qp.qpn, qp.sq.wqebb_cnt, start,
                    h == NicHandler.CPU_PROXY_FREE_FLOW)  # fmt: skip

    def poll_once(self) -> int:
        return int(self._p.poll_once())

    def start(self) -> None:
        self._p.start()

    def stop(self) -> None:
        self._p.stop()

    @property
    def running(self) -> bool:
        return bool(self._p.running)

    def stats(self) -> list[tuple[int, int, int]]:
        """(qpn, producer index published, doorbells rung) per QP."""
        return [tuple(s) for s in self._p.stats()]

    def __enter__(self) -> HostRinger:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
