"""single-op --scope all is a quiet over every configured QP read from queue memory.

NVSHMEM's quiet waits on each QP until the work its posted counter announces is retired by CQEs
polled from that QP's CQ. Work posted on another lane outside the loop (another producer, an
earlier phase) is therefore consumed and waited for by scope=all and left alone by scope=selected,
and an error completion there surfaces under scope=all only.
"""

from __future__ import annotations

import numpy as np
import pytest
from host_world import cq_ci, emu_world, post_outside, sq_pi

from gicbench.errors import CompletionError, ConfigError, FabricError

PUT = 1  # single_op mode: put + completion
OFFSET = 2048  # where the outside write lands, away from the loop's own slot


def params(scope: str, iters: int = 20) -> dict:
    return {
        "size": 64,
        "payload": "inline",
        "scope": scope,
        "iters": iters,
        "warmup": 2,
        "mode": "put_completion",
    }


@pytest.mark.parametrize("scope", ["selected", "all"])
def test_work_posted_outside_on_another_lane(scope) -> None:
    with emu_world(nqps=4) as w:
        landing = w.bufs[1][1]
        other = w.rc[2][0]
        payload = bytes(range(1, 17))
        post_outside(other, landing.addr + OFFSET, landing.rkey, payload)
        ci = cq_ci(other)
        ns = w.subs[0].single_op(w.lanes(4), params(scope), PUT)
        assert ns.size == 20
        if scope == "all":
            # its CQE was consumed from its CQ in memory, so the write had been executed
            assert cq_ci(other) == ci + 1
            assert w.landing()[OFFSET : OFFSET + 16].tobytes() == payload
        else:
            assert cq_ci(other) == ci
        # a second quiet attaches to what memory now says: nothing outstanding, no extra CQE
        w.subs[0].single_op(w.lanes(4), params("all", iters=5), PUT)
        assert cq_ci(other) == ci + 1
        w.fabrics[0].check()


@pytest.mark.parametrize("scope", ["selected", "all"])
def test_error_completion_on_another_lane(scope) -> None:
    with emu_world(nqps=4) as w:
        landing = w.bufs[1][1]
        other = w.rc[3][0]
        post_outside(other, landing.addr + OFFSET, landing.rkey ^ 0x100, b"x" * 8)
        if scope == "selected":
            assert w.subs[0].single_op(w.lanes(4), params(scope), PUT).size == 20
            return
        with pytest.raises(CompletionError) as e:
            w.subs[0].single_op(w.lanes(4), params(scope), PUT)
        assert e.value.qpn == other.qpn and e.value.syndrome == 0x13  # REMOTE_ACCESS
        assert f"QP 0x{other.qpn:06x}" in str(e.value)


def test_work_posted_outside_on_the_selected_lane_is_retired_first() -> None:
    with emu_world(nqps=2) as w:
        landing = w.bufs[1][1]
        sel = w.rc[0][0]
        post_outside(sel, landing.addr + OFFSET, landing.rkey, b"y" * 24)
        ci = cq_ci(sel)
        w.subs[0].single_op(w.lanes(2), params("selected"), PUT)
        assert cq_ci(sel) == ci + 1 + 22  # the outside WQE's CQE, then one per operation
        assert w.landing()[OFFSET : OFFSET + 24].tobytes() == b"y" * 24


def test_msg_rate_resumes_after_outside_work() -> None:
    with emu_world(nqps=2) as w:
        landing = w.bufs[1][1]
        for lane in (0, 1):
            post_outside(w.rc[lane][0], landing.addr + OFFSET, landing.rkey, b"z" * 8)
        p = {
            "size": 64,
            "payload": "inline",
            "threads": 2,
            "batch": 8,
            "messages_per_thread": 500,
            "warmup_per_thread": 0,
            "window": 50,
        }
        _, stats = w.subs[0].msg_rate(w.lanes(2), p)
        assert stats["messages"] == 1000
        for lane in (0, 1):  # drained: the next attach sees nothing outstanding
            qp = w.rc[lane][0]
            assert sq_pi(qp) > 0
        w.subs[0].single_op(w.lanes(2), params("all", iters=3), PUT)


def test_lanes_sharing_a_cq_are_refused_with_a_message() -> None:
    with emu_world(nqps=2) as w:
        t = w.lanes(2)
        shared = (t[0], t[0])
        with pytest.raises(ConfigError) as e:
            w.subs[0].single_op(shared, params("all"), PUT)
        assert e.value.field == "lanes"
        assert "lanes 0 and 1 share a queue" in str(e.value)
        assert np.array_equal(w.landing()[:64], np.zeros(64, np.uint8))  # nothing was posted


def test_a_queue_whose_memory_cannot_tell_is_refused_not_guessed() -> None:
    # Two QPs on one CQ: after the first is used, the CQ's last completion is not the second's,
    # so what the second has outstanding cannot be read from its CQ.
    with emu_world(nqps=1) as w:
        f0, f1 = w.fabrics
        cq = f0.create_cq(64)
        a, b = (f0.create_qp(cq, 64) for _ in range(2))
        for q in (a, b):
            peer = f1.create_qp(f1.create_cq(64), 64)
            f0.connect(q, f1.endpoint(peer))
            f1.connect(peer, f0.endpoint(q))
        w.subs[0].single_op((w.lane(a),), params("selected", iters=3), PUT)
        with pytest.raises(FabricError) as e:
            w.subs[0].single_op((w.lane(b),), params("selected", iters=3), PUT)
        assert "queue_state" in str(e.value) and "shared CQ" in str(e.value)
        assert f"QP 0x{b.qpn:06x}" in str(e.value)
