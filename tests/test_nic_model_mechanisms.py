"""The NIC model's mechanisms one at a time (cuda/nic_model.cuh through NicModelSim, the same
plan_wqe the CPU engine calls), each against times computed by hand from the parameters."""

from __future__ import annotations

from itertools import pairwise

import pytest

from gicbench._native import emu

WRITE, SEND, READ, ATOMIC, NOP = 1, 2, 3, 4, 0

# Round numbers, so every expectation below is arithmetic on them (ps; fs per byte).
P = {
    "doorbell_ps": 100_000,
    "dma_read_ps": 500_000,
    "dma_fs_per_byte": 10_000,  # 10 ps per byte
    "dma_write_ps": 200_000,
    "tx_msg_ps": 4_000,
    "rx_msg_ps": 3_000,
    "link_fs_per_byte": 40_000,  # 40 ps per byte (200 Gb/s)
    "wire_ps": 1_000_000,
    "ctx_fetch_ps": 300_000,
    "recv_miss_busy_ps": 7_000,
    "dc_connect_ps": 450_000,
    "slack_ps": 1_000_000,
    "mtu": 4096,
    "packet_header_bytes": 26,
    "request_header_bytes": 16,
    "cache_lines": 0,
    "send_ctx_lines": 1,
    "recv_ctx_lines": 1,
}


def sim(**changes: int) -> emu.NicModelSim:
    return emu.NicModelSim({**P, **changes}, 2)


def write(s: emu.NicModelSim, t: int = 0, *, qpn: int = 1, dst_num: int = 0x10001,
          size: int = 8, pointer: bool = False, nbb: int = 1, kind: int = WRITE,
          src: int = 0, dst: int = 1, dci: bool = False) -> dict:
    return s.plan(src, qpn, dst, dst_num, kind, size, pointer, nbb, t, dci)


def test_an_inline_write_step_by_step() -> None:
    w = write(sim())
    assert w["t_nic"] == 100_000  # doorbell
    assert w["t_fetched"] == 100_000 + 64 * 10 + 500_000  # one basic block, then the latency
    assert w["t_ready"] == w["t_fetched"]  # no cache: the context is there
    # send pipeline 4 ns, then 8 + 26 + 16 = 50 bytes on the link at 40 ps a byte
    assert w["t_depart"] == w["t_ready"] + 4_000 + 50 * 40
    assert w["t_arrive"] == w["t_depart"] + 1_000_000
    done = w["t_arrive"] + 3_000  # receive pipeline
    assert w["t_touch"] == w["t_exec"] == done + 200_000  # the payload written into memory
    assert w["t_cqe"] == done + 1_000_000 + 200_000  # the ack back, then the CQE write


def test_a_pointer_write_completes_later_by_the_payload_read() -> None:
    inline, pointer = write(sim()), write(sim(), pointer=True)
    read = 500_000 + 8 * 10  # DMA read latency + 8 bytes at the DMA rate
    assert pointer["t_cqe"] - inline["t_cqe"] == read
    assert pointer["t_exec"] - inline["t_exec"] == read
    assert pointer["t_fetched"] == inline["t_fetched"]  # the same one-block WQE


def test_the_wqe_fetch_is_charged_per_basic_block() -> None:
    one, three = write(sim()), write(sim(), nbb=3, size=150)
    assert three["t_fetched"] - one["t_fetched"] == 2 * 64 * 10


def test_doorbell_delivery_starts_the_nic_and_time_shifts_with_the_doorbell() -> None:
    a, b = write(sim(), t=0), write(sim(), t=7_000_000)
    assert b["t_nic"] == 7_000_000 + 100_000
    assert all(b[k] - a[k] == 7_000_000 for k in ("t_fetched", "t_exec", "t_cqe"))


def test_message_rate_saturates_at_the_send_pipelines_ceiling() -> None:
    s = sim()
    # 2,000 writes from 8 QPs, all announced at once: the send pipeline (4 ns) is the slowest
    # stage (link 2 ns, receive 3 ns, fetch 0.64 ns a message).
    times = [write(s, qpn=1 + k % 8, dst_num=0x10001 + k % 8)["t_exec"] for k in range(2000)]
    gaps = {b - a for a, b in pairwise(times[100:])}
    assert gaps == {4_000}  # 1 / 4 ns = 250 M msg/s, the modelled ceiling


def test_the_receive_pipeline_limits_when_it_is_slower() -> None:
    s = sim(rx_msg_ps=9_000)
    times = [write(s, qpn=1 + k % 8, dst_num=0x10001 + k % 8)["t_exec"] for k in range(500)]
    assert {b - a for a, b in pairwise(times[100:])} == {9_000}


def test_large_writes_serialise_at_the_line_rate_with_per_packet_headers() -> None:
    s = sim()
    size = 1 << 20  # 256 packets of 4 KiB
    wire = size + 256 * 26 + 16
    times = [write(s, size=size, pointer=True)["t_exec"] for _ in range(6)]
    assert {b - a for a, b in pairwise(times[1:])} == {wire * 40}
    # goodput at 200 Gb/s: 25 GB/s x 4096 / 4122 (the paper's 24.8 GB/s reference)
    assert size / (wire * 40e-12) / 1e9 == pytest.approx(24.84, abs=0.01)


def test_the_link_waits_for_the_payload_read_when_the_dma_is_slower() -> None:
    s = sim(dma_fs_per_byte=80_000)  # 80 ps a byte: slower than the link's 40
    times = [write(s, size=1 << 20, pointer=True)["t_exec"] for _ in range(4)]
    gap = {b - a for a, b in pairwise(times[1:])}
    assert gap == {(1 << 20) * 80}  # the DMA read's rate, not the link's


def test_cqes_of_a_qp_stay_in_order() -> None:
    s = sim()
    first = write(s, pointer=True, size=4096)  # the slower one first
    second = write(s)
    assert second["t_exec"] >= first["t_exec"] and second["t_cqe"] >= first["t_cqe"]


# ---- the context cache -------------------------------------------------------------------------


def _visits(s: emu.NicModelSim, receivers: int, laps: int, t0: int = 0,
            spacing: int = 10_000_000) -> list[dict]:
    """One sending QP writes to `receivers` QPs of NIC 1 in a cycle, one write per visit, the
    writes far enough apart that nothing queues."""
    out, t = [], t0
    for _ in range(laps):
        for r in range(receivers):
            out.append(write(s, t, qpn=1, dst_num=0x10001 + r))
            t += spacing
    return out


def test_a_cyclic_pattern_within_the_cache_hits_after_its_first_lap() -> None:
    s = sim(cache_lines=8, send_ctx_lines=1, recv_ctx_lines=1)
    visits = _visits(s, 7, laps=4)  # 7 receive-side contexts at NIC 1: they fit
    assert [v["recv_hit"] for v in visits[:7]] == [False] * 7
    assert all(v["recv_hit"] for v in visits[7:])
    assert s.counters(1)["nic_model_recv_misses"] == 7


def test_a_cyclic_pattern_over_more_contexts_than_the_cache_pays_a_miss_every_visit() -> None:
    s = sim(cache_lines=8, send_ctx_lines=1, recv_ctx_lines=1)
    visits = _visits(s, 9, laps=4)  # 9 contexts, 8 lines: LRU evicts each before its revisit
    assert not any(v["recv_hit"] for v in visits)
    assert s.counters(1)["nic_model_recv_misses"] == 36
    # each miss costs its message the context fetch
    hit = write(sim(), 0)
    assert all(v["t_cqe"] - t == hit["t_cqe"] + 300_000
               for v, t in zip(visits, range(0, 36 * 10_000_000, 10_000_000), strict=True))


def test_a_receive_side_miss_occupies_the_receive_pipeline() -> None:
    # Back-to-back writes to 9 receivers through an 8-line cache: every message misses, so the
    # receive pipeline spends 3 + 7 ns on each, slower than the 4 ns send pipeline.
    s = sim(cache_lines=8, send_ctx_lines=1, recv_ctx_lines=1)
    times = [write(s, qpn=1 + k % 9, dst_num=0x10001 + k % 9)["t_exec"] for k in range(900)]
    assert s.counters(1)["nic_model_recv_misses"] == 900
    assert {b - a for a, b in pairwise(times[100:])} == {10_000}
    # ... and within the cache only the send pipeline's 4 ns remain
    s = sim(cache_lines=8, send_ctx_lines=1, recv_ctx_lines=1)
    times = [write(s, qpn=1 + k % 4, dst_num=0x10001 + k % 4)["t_exec"] for k in range(900)]
    assert {b - a for a, b in pairwise(times[100:])} == {4_000}


def test_a_send_side_miss_is_fetched_beside_the_wqe_and_adds_no_time() -> None:
    s = sim(cache_lines=4, send_ctx_lines=1, recv_ctx_lines=1)
    base = write(sim(), 0)
    visits = [write(s, k * 10_000_000, qpn=1 + k % 5, dst=-1) for k in range(20)]
    assert not any(v["send_hit"] for v in visits)  # 5 send contexts, 4 lines
    assert s.counters(0)["nic_model_send_misses"] == 20
    # the context fetch (300 ns) is shorter than the WQE fetch (500.64 ns): hidden
    assert all(v["t_ready"] - k * 10_000_000 == base["t_ready"] for k, v in enumerate(visits))
    # a fetch slower than the WQE's delays the WQE by the difference
    slow = write(sim(cache_lines=4, ctx_fetch_ps=900_000), 0, dst=-1)
    assert slow["t_ready"] == 100_000 + 900_000


def test_sending_and_receiving_together_contend_for_the_cache() -> None:
    """12 lines; a send-side context takes 3, a receive-side 1. Four QPs on each of two NICs:
    receiving alone needs 4 lines, sending alone 12, both 16, so only both together thrash."""
    lines = {"cache_lines": 12, "send_ctx_lines": 3, "recv_ctx_lines": 1}

    def traffic(s: emu.NicModelSim, a_sends: bool, b_sends: bool, laps: int = 5) -> None:
        t = 0
        for _ in range(laps):
            for q in range(4):
                if a_sends:  # NIC 0's QP 0x1+q writes to NIC 1's QP 0x10001+q
                    write(s, t, src=0, qpn=0x1 + q, dst=1, dst_num=0x10001 + q)
                if b_sends:
                    write(s, t, src=1, qpn=0x10001 + q, dst=0, dst_num=0x1 + q)
                t += 10_000_000

    receive_only = sim(**lines)
    traffic(receive_only, a_sends=True, b_sends=False)
    assert receive_only.counters(1)["nic_model_recv_misses"] == 4  # the first lap only
    send_only = sim(**lines)
    traffic(send_only, a_sends=True, b_sends=False)
    assert send_only.counters(0)["nic_model_send_misses"] == 4  # 12 lines hold 4 senders
    both = sim(**lines)
    traffic(both, a_sends=True, b_sends=True)
    # each NIC now holds 4 send-side and 4 receive-side contexts (16 lines in 12): misses every lap
    assert both.counters(1)["nic_model_recv_misses"] > 4 * 3
    assert both.counters(0)["nic_model_recv_misses"] > 4 * 3


# ---- DCI -----------------------------------------------------------------------------------------


def test_a_dci_changing_destination_waits_for_its_acks_then_connects() -> None:
    s = sim()
    first = write(s, 0, dci=True, dst_num=0x18001)
    assert first["connected"]  # the first use connects
    assert first["t_ready"] == first["t_fetched"] + 450_000
    same = write(s, 0, dci=True, dst_num=0x18001)  # outstanding to the same DCT: no connect
    assert not same["connected"]
    other = write(s, 0, dci=True, dst_num=0x18002)
    ack_back = same["t_reply"] + 1_000_000  # the last outstanding ack reaches the requester
    assert other["connected"]
    assert other["t_ready"] == ack_back + 450_000
    assert s.counters(0)["nic_model_dci_connects"] == 2


def test_a_drained_dci_connects_again() -> None:
    s = sim()
    first = write(s, 0, dci=True, dst_num=0x18001)
    later = write(s, first["t_cqe"] + 1_000_000, dci=True, dst_num=0x18001)
    assert later["connected"]  # its last ack returned before this WQE was seen


# ---- READ, atomics, NOP ------------------------------------------------------------------------


def test_a_read_is_served_from_the_responders_memory_and_returns_its_bytes() -> None:
    r = write(sim(), 0, kind=READ, size=4096, pointer=True)
    # the request carries no payload: 26 + 16 bytes on the link
    assert r["t_depart"] == r["t_ready"] + 4_000 + 42 * 40
    done = r["t_arrive"] + 3_000
    assert r["t_touch"] == done + 500_000 + 4096 * 10  # the responder's DMA read
    assert r["t_reply"] == r["t_touch"] + (4096 + 26) * 40  # the response on the link
    assert r["t_cqe"] == r["t_reply"] + 1_000_000 + 200_000


def test_a_nop_completes_locally() -> None:
    n = write(sim(), 0, kind=NOP)
    assert n["t_cqe"] == n["t_ready"] + 200_000 and n["t_exec"] == n["t_ready"]


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="missing mtu"):
        emu.NicModelSim({k: v for k, v in P.items() if k != "mtu"}, 1)
    with pytest.raises(ValueError, match="unknown"):
        emu.NicModelSim({**P, "extra": 1}, 1)
