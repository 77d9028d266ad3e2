"""What the DOCA tests share: the headers (or why the test cannot run), the nvcc flags, and
queues made as DOCA asks for them (DocaQueues).

Where nvcc exists, set-up (make setup) fetches the headers; a test that finds none then fails,
naming the fix, unless set-up recorded that no package index was reachable (the OFFLINE mark),
in which case it skips with that reason. Without nvcc the compile tests skip, as every nvcc
test does."""

from __future__ import annotations

from typing import Any

import pytest
from resources import Traffic

from gicbench.fabric.base import CompletionQueue, QueuePair
from gicbench.submit.doca import build, headers
from gicbench.submit.doca.layout import init_cq


def nvcc_or_skip() -> str:
    exe = build.nvcc()
    if exe is None:
        pytest.skip("nvcc not found (the CUDA compiler is needed to compile cuda/doca)")
    return exe


def vendor_headers_or_fail(module: Any, what: str) -> Any:
    """A vendor header set from `module` (a headers module: find, offline_reason,
    unavailable_reason); skips after an offline set-up, fails otherwise."""
    found = module.find()
    if found is not None:
        return found
    offline = module.offline_reason()
    if offline:
        pytest.skip(f"{what} absent and set-up was offline: {offline}")
    pytest.fail(module.unavailable_reason())


def headers_or_fail() -> headers.Gpunetio:
    return vendor_headers_or_fail(headers, "DOCA GPUNetIO headers")


class DocaQueues(Traffic):
    """resources.Traffic with its RC QPs and their send CQs made as DOCA asks, on the ranks in
    `option_ranks` (plain elsewhere): `options` is the DOCA submitter's QueueOptions or
    layout.queue_kwargs (a DBR-less SQ for GPU_SM_NO_DBR; CQs that ignore overrun, collapsed for
    CQ_64B_COLLAPSED). `init_cqs`: rank 0's CQs prepared as DOCA's host library prepares them
    (init_cq; the DOCA submitter does it itself when it attaches the queues)."""

    def __init__(
        self,
        options: Any,
        qps: int,
        *,
        option_ranks: tuple[int, ...] = (0,),
        init_cqs: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(qps, **kw)
        self.options, self.option_ranks, self.init_cqs = options, option_ranks, init_cqs

    def create_cq(self, rank: int) -> CompletionQueue:
        if rank not in self.option_ranks:
            return super().create_cq(rank)
        cq = self.fabrics[rank].create_cq(self.depth, **self.options.cq)
        if self.init_cqs and rank == 0:
            init_cq(cq)
        return cq

    def create_qp(self, rank: int, cq: CompletionQueue, dci: bool = False) -> QueuePair:
        if rank not in self.option_ranks or dci:
            return super().create_qp(rank, cq, dci)
        return self.fabrics[rank].create_qp(cq, self.depth, **self.options.qp)
