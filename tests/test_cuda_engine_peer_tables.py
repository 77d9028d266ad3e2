"""The CUDA engine's published tables as a peer maps them, on the CPU: an export entry that
carries a layout is opened and written into cfg.peer_tables (qps, mrs, head, max_qps, max_mrs as
mapped here), never added to the peer map's ranges, and a layout that does not fit its bytes (or
is not one) is refused before anything is opened (emu_engine.cu's PeerTables and kTab* words say
what the offsets mean; tests/mpi/test_emu_cuda_ipc_mpi.py runs the real thing on a GPU)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from gicbench.errors import FabricError
from gicbench.fabric.emu import cuda_engine as ce

QP_B = 256  # an EngineQp's size in this fake engine


class FakeRuntime:
    def __init__(self) -> None:
        self.opened: list[bytes] = []

    def ipcOpenMemHandle(self, handle: bytes, flags: int) -> int:
        assert flags == ce._IPC_LAZY_ENABLE_PEER_ACCESS
        self.opened.append(handle)
        return 0x7F00_0000_0000 + 0x100000 * len(self.opened)


def engine() -> Any:
    """A CudaEngine with only what ipc_import and set_peer_tables use (no GPU)."""
    e = object.__new__(ce.CudaEngine)
    e.rank, e._qp_b, e._opened, e._n_ranges = 0, QP_B, {}, 0
    e.cp = SimpleNamespace(cuda=SimpleNamespace(runtime=FakeRuntime()))
    e.peer_tables = SimpleNamespace(data=SimpleNamespace(ptr=0x1000))
    e.peer_map = SimpleNamespace(data=SimpleNamespace(ptr=0x9000))
    e.writes = []
    e.write = lambda dst, a: e.writes.append((dst, np.array(a, copy=True)))
    return e


def tables_entry(max_qps: int = 8, max_mrs: int = 4, extra: int = 0) -> dict[str, Any]:
    qps = ce.TABLES_HEAD_BYTES
    mrs = qps + max_qps * QP_B
    return {"addr": 0x5000_0000, "bytes": mrs + max_mrs * ce.MR_ENTRY_BYTES + extra,
            "what": ce.TABLES_WHAT, "handle": "ab" * 64,
            "tables": {"qps": qps, "mrs": mrs, "max_qps": max_qps, "max_mrs": max_mrs}}  # fmt: skip


def test_a_peers_tables_go_to_cfg_peer_tables_not_the_peer_map() -> None:
    e = engine()
    assert e.ipc_import(3, [tables_entry()]) == 0  # no peer range opened
    (local,) = e._opened.values()
    ((dst, words),) = e.writes
    assert dst == 0x1000 + 3 * ce.PEER_TABLES_BYTES
    qps, mrs, hdr = (int(x) for x in words[:3])
    assert (qps, mrs, hdr) == (local + 64, local + 64 + 8 * QP_B, local)
    assert words.view(np.uint32)[6:8].tolist() == [8, 4]
    assert e.ipc_import(3, [tables_entry()]) == 0 and len(e.writes) == 1  # opened once


@pytest.mark.parametrize(
    "bad",
    [
        {"qps": 0, "mrs": 64 + 8 * QP_B, "max_qps": 8, "max_mrs": 4},  # over the head
        {"qps": 64, "mrs": 64 + 7 * QP_B, "max_qps": 8, "max_mrs": 4},  # QPs run into the MRs
        {"qps": 64, "mrs": 64 + 8 * QP_B, "max_qps": 8, "max_mrs": 5},  # past the bytes
        {"qps": 64, "mrs": 64 + 8 * QP_B, "max_qps": 8},  # a field missing
        "not a layout",
    ],
)
def test_a_layout_that_does_not_fit_is_refused_before_anything_is_opened(bad: Any) -> None:
    e = engine()
    entry = {**tables_entry(), "tables": bad}
    with pytest.raises(FabricError, match="engine tables"):
        e.ipc_import(1, [entry])
    assert e.cp.cuda.runtime.opened == [] and e.writes == []
