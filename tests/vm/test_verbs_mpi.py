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
from gicbench.submit.base import Buffer, Lane, LatencyWork, RateWork, RespondWork
from gicbench.submit.host.post_send import PostSendPath

TIMEOUT = 20.0
pytestmark = pytest.mark.mpi(min_size=2)


def pattern(sender: int, receiver: int, n: int) -> np.ndarray:
    return np.random.default_rng([sender, receiver]).integers(0, 256, n, dtype=np.uint8)


def lane_to(job, peer: int, rkey_xor: int = 0) -> Lane:
    """Our whole source buffer to the peer's whole landing buffer, on our QP towards it."""
    far = job.peer_landing[peer]
    return Lane(job.qps[peer], peer, Buffer.local(job.src),
                Buffer(far.addr, far.rkey ^ rkey_xor, far.length))  # fmt: skip


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


@pytest.mark.parametrize("mode", ["issue", "put_completion", "round_trip"])
def test_single_op_pairs_validate(job, mode):
    """The host submitter's post-send path, typed work as the harness hands it."""
    comm, f, rank = job.comm, job.f, job.comm.rank
    peer = rank ^ 1
    if peer >= comm.size:
        rendezvous(comm, "test step")
        return
    size, iters, warmup = 64, 50, 5
    f.view(job.src)[:] = pattern(rank, peer, job.src.length)
    path = PostSendPath(f, rank, TIMEOUT)
    lane = lane_to(job, peer)
    sender = rank % 2 == 0
    rendezvous(comm, "test step")
    err = None
    try:
        if sender:
            work = LatencyWork((lane,), 0, mode, size, False, False, iters, warmup,
                               Buffer.local(job.landing))  # fmt: skip
            ns = path.latency(work)
            assert ns.shape == (iters,) and (ns > 0).all()
        elif mode == "round_trip":
            path.respond(RespondWork(lane, Buffer.local(job.landing), size, False, iters + warmup))
        rendezvous(comm, "test step")
        if not sender or mode == "round_trip":  # the peer's pattern, last 8 B = final sequence
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
    f.view(job.src)[:] = pattern(rank, peer, job.src.length)
    path = PostSendPath(f, rank, TIMEOUT)
    rendezvous(comm, "test step")
    err = None
    try:
        if rank % 2 == 0:
            work = RateWork((lane_to(job, peer),), 1, batch, size, True, msgs, 100, 100)
            res = path.rate(work)
            assert res.messages == msgs and len(res.windows_ns) == msgs // 100
            assert res.doorbells == -(-(msgs + 100) // batch)
        rendezvous(comm, "test step")
        if rank % 2 == 1:  # every slot written holds the sender's bytes
            n = min(job.landing.length // size, msgs + 100) * size
            sent = pattern(peer, rank, job.src.length)[:n]
            assert np.array_equal(f.view(job.landing)[:n], sent)
    except (AssertionError, GicbenchError) as e:
        err = f"{type(e).__name__}: {e}"
    all_ok(comm, err)


def test_post_send_path_bad_rkey_names_rank_and_qp(job):
    """A bad rkey in the submitter's own loop: a remote access error naming rank, QP, peer."""
    comm, rank = job.comm, job.comm.rank
    msg = None
    if rank == 0:
        lane = lane_to(job, 1, rkey_xor=0x3300)
        work = LatencyWork((lane,), 0, "put_completion", 8, False, False, 5, 0)
        with pytest.raises(VerbsCompletionError) as ei:
            PostSendPath(job.f, rank, TIMEOUT).latency(work)
        msg = str(ei.value)
        assert ei.value.status == 10 and ei.value.peer == 1
        assert f"rank 0, QP 0x{lane.qp.qpn:06x} to rank 1" in msg and "REM_ACCESS_ERR" in msg
    assert comm.bcast(msg, root=0)
