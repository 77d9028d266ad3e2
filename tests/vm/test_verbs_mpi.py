"""The verbs provider across ranks (mpiexec -n 2 and -n 4 in the guest, all on rxe0): bring-up,
writes and write-with-immediate with payload validation, the error path of a bad rkey, and the
host submitter's verbs path (single-op in all three modes, msg-rate) between pairs."""

from __future__ import annotations

import numpy as np
import pytest

from gicbench.bootstrap.collective import rendezvous
from gicbench.bootstrap.verbs_pairs import bring_up
from gicbench.errors import GicbenchError
from gicbench.fabric.base import QpState, RemoteBuffer
from gicbench.fabric.verbs import VerbsCompletionError
from gicbench.submit.verbs_path import VerbsSubmitter

TIMEOUT = 20.0
pytestmark = pytest.mark.mpi(min_size=2)


def pattern(sender: int, receiver: int, n: int) -> np.ndarray:
    return np.random.default_rng([sender, receiver]).integers(0, 256, n, dtype=np.uint8)


def all_ok(comm, err: str | None) -> None:
    """Every rank's failure reaches every rank (no rank left waiting in a collective)."""
    errs = [(r, e) for r, e in enumerate(comm.allgather(err)) if e]
    assert not errs, errs


@pytest.fixture
def job():
    from mpi4py import MPI

    j = bring_up(MPI.COMM_WORLD)
    yield j
    rendezvous(MPI.COMM_WORLD, "end of test")
    j.f.close()


def test_bring_up_every_pair_reaches_rts(job):
    states = {p: job.f.qp_state(q) for p, q in job.qps.items()}
    assert set(states.values()) == {QpState.RTS}
    assert len(states) == job.comm.size - 1


def test_all_to_all_writes_and_immediates_land_intact(job):
    comm, f, rank = job.comm, job.f, job.comm.rank
    slot = 512
    p = job.posting
    err = None
    try:
        for peer, qp in job.qps.items():
            f.view(job.src)[peer * slot : (peer + 1) * slot] = pattern(rank, peer, slot)
            # Half plain write, half write-with-immediate, into our slot of the peer's landing.
            half = slot // 2
            ops = [
                (job.src, peer * slot, job.peer_landing[peer], rank * slot, half, False, None, 1),
                (job.src, peer * slot + half, job.peer_landing[peer], rank * slot + half, half,
                 True, (rank << 16) | peer, 2),
            ]  # fmt: skip
            p.post_writes(qp, ops)
        imms = {}
        for peer, qp in job.qps.items():
            for c in p.poll_cq(qp.sq.cq, 2, TIMEOUT, qp):  # our send CQE and the peer's immediate
                if c.imm is not None:
                    imms[peer] = c.imm
        assert imms == {peer: (peer << 16) | rank for peer in job.qps}, imms
        rendezvous(comm, "test step")
        land = f.view(job.landing)
        for peer in job.qps:
            got = land[peer * slot : (peer + 1) * slot]
            assert np.array_equal(got, pattern(peer, rank, slot)), f"slot of rank {peer}"
    except (AssertionError, GicbenchError) as e:
        err = f"{type(e).__name__}: {e}"
    all_ok(comm, err)


def test_bad_rkey_is_reported_with_rank_and_qp(job):
    comm, rank = job.comm, job.comm.rank
    msg = None
    if rank == 0:
        qp = job.qps[1]
        good = job.peer_landing[1]
        bad = RemoteBuffer(1, good.addr, good.length, good.rkey ^ 0x3300)
        job.posting.post_write(qp, job.src, bad, 8, wr_id=11)
        with pytest.raises(VerbsCompletionError) as ei:
            job.posting.poll_cq(qp.sq.cq, 1, TIMEOUT, qp)
        msg = str(ei.value)
        assert ei.value.status == 10 and ei.value.peer == 1 and ei.value.qpn == qp.qpn
        assert f"rank 0, QP 0x{qp.qpn:06x} to rank 1" in msg
        assert "IBV_WC_REM_ACCESS_ERR" in msg and "work request 11" in msg
        assert job.f.qp_state(qp) == QpState.ERR
    assert comm.bcast(msg, root=0)


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_single_op_pairs_validate(job, mode):
    comm, f, rank = job.comm, job.f, job.comm.rank
    peer = rank ^ 1
    if peer >= comm.size:
        rendezvous(comm, "test step")
        return
    size, iters, warmup = 64, 50, 5
    name = ("issue", "put_completion", "round_trip")[mode]
    params = {"size": size, "payload": "pointer", "scope": "selected", "iters": iters,
              "warmup": warmup, "mode": name}  # fmt: skip
    f.view(job.src)[:] = pattern(rank, peer, job.src.length)
    sub = VerbsSubmitter(fabric=f, rank=rank, src=job.src, landing=job.landing,
                         peer_landing=job.peer_landing[peer], timeout_s=TIMEOUT)  # fmt: skip
    sender = rank % 2 == 0
    rendezvous(comm, "test step")
    err = None
    try:
        if sender:
            ns = sub.single_op([job.qps[peer]], params, mode)
            assert ns.shape == (iters,) and (ns > 0).all()
        elif mode == 2:
            sub.respond([job.qps[peer]], params)
        rendezvous(comm, "test step")
        if not sender or mode == 2:  # what landed: peer's pattern, last 8 bytes = final sequence
            exp = pattern(peer, rank, job.src.length)[:size].copy()
            exp[-8:] = np.frombuffer(np.uint64(iters + warmup).tobytes(), np.uint8)
            assert np.array_equal(f.view(job.landing)[:size], exp)
    except (AssertionError, GicbenchError) as e:
        err = f"{type(e).__name__}: {e}"
    all_ok(comm, err)


@pytest.mark.parametrize("batch", [1, 16])
def test_msg_rate_pairs_validate(job, batch):
    comm, f, rank = job.comm, job.f, job.comm.rank
    peer = rank ^ 1
    if peer >= comm.size:
        rendezvous(comm, "test step")
        return
    size, msgs = 8, 2000
    params = {"size": size, "payload": "inline", "threads": 1, "batch": batch,
              "messages_per_thread": msgs, "warmup_per_thread": 100, "window": 100}  # fmt: skip
    f.view(job.src)[:] = pattern(rank, peer, job.src.length)
    sub = VerbsSubmitter(fabric=f, rank=rank, src=job.src, landing=job.landing,
                         peer_landing=job.peer_landing[peer], timeout_s=TIMEOUT)  # fmt: skip
    rendezvous(comm, "test step")
    err = None
    try:
        if rank % 2 == 0:
            windows, stats = sub.msg_rate([job.qps[peer]], params)
            assert stats["messages"] == msgs and len(windows) == msgs // 100
            assert stats["doorbells"] == -(-(msgs + 100) // batch)
        rendezvous(comm, "test step")
        if rank % 2 == 1:  # every slot written holds the sender's bytes
            n = min(job.landing.length // size, msgs + 100) * size
            sent = pattern(peer, rank, job.src.length)[:n]
            assert np.array_equal(f.view(job.landing)[:n], sent)
    except (AssertionError, GicbenchError) as e:
        err = f"{type(e).__name__}: {e}"
    all_ok(comm, err)
