"""Round trips and whole-WQE layouts of the mlx5 wire format, numpy twin against cuda/mlx5.cuh.

Encode -> decode for every segment, inline payloads wrapping at the SQ end, the ds/WQEBB arithmetic
of the layouts gicbench posts (reference/mlx5.md), CQE ownership, and clear errors on bad fields.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gicbench import mlx5
from gicbench._native import wire

PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
u8, u16, u24, u32, u64 = (st.integers(0, (1 << b) - 1) for b in (8, 16, 24, 32, 64))


def ring(wqebb_cnt: int) -> mlx5.SqRing:
    return mlx5.SqRing(np.zeros(wqebb_cnt * mlx5.WQEBB_BYTES, np.uint8), wqebb_cnt)


def av_dict(av: mlx5.Av) -> dict:
    """The C++ binding's AV argument for the same fields."""
    return dict(
        dc_key=av.dc_key, dct_num=av.dct_num, rlid=av.rlid, stat_rate_sl=av.stat_rate_sl,
        fl_mlid=av.fl_mlid, rmac=av.rmac, tclass=av.tclass, hop_limit=av.hop_limit,
        grh_gid_fl=av.grh_gid_fl, rgid=av.rgid,
    )  # fmt: skip


FULL_AV = mlx5.Av(0xDC0FFEE0DEADBEEF, 0x00ABCD, True, 0x11, 0x22, 0x3344,
                  b"\x02\0\0\0\0\x01", 0x55, 0x40, 0x00012345, bytes(range(16, 32)))  # fmt: skip


def encode_av(av: mlx5.Av) -> np.ndarray:
    kw = dict(rlid=av.rlid, stat_rate_sl=av.stat_rate_sl, fl_mlid=av.fl_mlid)
    if not av.ext:
        return mlx5.av_compact(av.dc_key, av.dct_num, **kw)
    ext = dict(rmac=av.rmac, tclass=av.tclass, hop_limit=av.hop_limit, grh_gid_fl=av.grh_gid_fl)
    return mlx5.av_full(av.dc_key, av.dct_num, **kw, **ext, rgid=av.rgid)


# ---- segment round trips -----------------------------------------------------------------------
@PROPS
@given(u16, u8, u8, u24, u8, st.integers(0, mlx5.DS_MAX), u8, u32)
def test_ctrl_roundtrip(pi, opcode, opmod, qpn, fm_ce_se, ds, sig, imm) -> None:
    b = mlx5.ctrl_seg(pi, opcode, qpn, ds, opmod=opmod, fm_ce_se=fm_ce_se, signature=sig, imm=imm)
    assert b.dtype == np.uint8 and b.shape == (16,)
    want = mlx5.Ctrl(opcode, opmod, pi, qpn, ds, sig, fm_ce_se, imm)
    assert mlx5.decode_ctrl(b) == want
    assert wire.decode_ctrl(b.tobytes()) == want.__dict__
    assert wire.ctrl_seg(pi, opcode, opmod, qpn, fm_ce_se, ds, sig, imm) == b.tobytes()


def test_ctrl_keeps_low_16_bits_of_pi() -> None:
    for pi in (0x10000, 0x12345, 0xFFFFFFFF):
        b = mlx5.ctrl_seg(pi, mlx5.Opcode.NOP, 1, 1)
        assert mlx5.decode_ctrl(b).wqe_index == pi & 0xFFFF
        assert b.tobytes() == wire.ctrl_seg(pi & 0xFFFF, 0, 0, 1, 0, 1)


@PROPS
@given(u64, u32, u32, u32, u64, u64, u64)
def test_pointer_segments_roundtrip(raddr, rkey, length, lkey, addr, swap, cmp) -> None:
    r, d, a = (
        mlx5.raddr_seg(raddr, rkey),
        mlx5.data_seg(length, lkey, addr),
        mlx5.atomic_seg(swap, cmp),
    )
    assert mlx5.decode_raddr(r) == mlx5.Raddr(raddr, rkey)
    assert mlx5.decode_data(d) == mlx5.Data(length, lkey, addr)
    assert mlx5.decode_atomic(a) == mlx5.Atomic(swap, cmp)
    assert wire.decode_raddr(r.tobytes()) == (raddr, rkey)
    assert wire.decode_data(d.tobytes()) == (length, lkey, addr, bool(length & mlx5.INLINE_FLAG))
    assert wire.decode_atomic(a.tobytes()) == (swap, cmp)
    assert r[12:].tobytes() == bytes(4)  # reserved


@PROPS
@given(u64, u24, u16, u8, u8, st.binary(min_size=6, max_size=6), u8, u8, u32,
       st.binary(min_size=16, max_size=16))  # fmt: skip
def test_av_roundtrip(key, dct, rlid, srsl, flm, rmac, tcl, hop, gfl, rgid) -> None:
    full = mlx5.Av(key, dct, True, srsl, flm, rlid, rmac, tcl, hop, gfl, rgid)
    compact = mlx5.Av(key, dct, False, srsl, flm, rlid)
    for av, nbytes in ((full, mlx5.AV_FULL_BYTES), (compact, mlx5.AV_COMPACT_BYTES)):
        b = encode_av(av)
        assert b.size == nbytes == av.nbytes
        assert mlx5.decode_av(b) == av
        assert wire.decode_av(b.tobytes()) == (key, dct, av.ext)
    assert wire.av_full(av_dict(full)) == encode_av(full).tobytes()
    assert wire.av_compact(key, dct, srsl, flm, rlid) == encode_av(compact).tobytes()


@PROPS
@given(u8.filter(lambda o: o <= 3), st.integers(0, 1), u16, u32, u24, u8, u32, u64)
def test_cqe_roundtrip(opcode, owner, wc, bc, qpn, wop, imm, ts) -> None:
    if opcode == mlx5.CqeOpcode.REQ:
        b = mlx5.req_cqe(qpn, wop, wc, bc, timestamp=ts, owner=owner)
        cuh = wire.req_cqe(qpn, wop, wc, bc, ts, owner)
        imm = 0
    else:
        b = mlx5.resp_cqe(opcode, qpn, wc, bc, imm=imm, timestamp=ts, owner=owner)
        cuh = wire.resp_cqe(opcode, qpn, wc, bc, imm, ts, owner)
        wop = 0
    assert b.tobytes() == cuh
    c = mlx5.decode_cqe(b)
    assert c == mlx5.Cqe(opcode, owner, wc, bc, qpn, wop, imm, 0, 0, ts)
    assert not c.is_error
    assert wire.decode_cqe(cuh) == c.__dict__


@PROPS
@given(st.sampled_from(list(mlx5.Syndrome)), u8, u24, u8, u16, st.integers(0, 1))
def test_err_cqe_roundtrip(synd, vsynd, qpn, wop, wc, owner) -> None:
    for op in (mlx5.CqeOpcode.REQ_ERR, mlx5.CqeOpcode.RESP_ERR):
        b = mlx5.err_cqe(op, synd, qpn, wop, wc, vendor_syndrome=vsynd, owner=owner)
        assert b.tobytes() == wire.err_cqe(op, synd, qpn, wop, wc, vsynd, owner)
        c = mlx5.decode_cqe(b)
        assert c.is_error and c.syndrome == synd and c.vendor_syndrome == vsynd
        assert (c.qpn, c.wqe_opcode, c.wqe_counter, c.owner) == (qpn, wop, wc, owner)


def test_immediate_host_order() -> None:
    x = 0x11223344
    raw = mlx5.imm_from_host(x)
    # the WQE carries the host value big-endian, as the wire does
    assert mlx5.ctrl_seg(0, mlx5.Opcode.RDMA_WRITE_IMM, 1, 3, imm=raw)[
        12:
    ].tobytes() == bytes.fromhex("11223344")
    assert mlx5.imm_to_host(mlx5.decode_cqe(mlx5.resp_cqe(1, 1, 0, 0, imm=raw)).imm) == x


# ---- whole WQEs: layouts, ds/WQEBB arithmetic, wrapping -----------------------------------------
def test_ds_and_wqebb_arithmetic() -> None:
    assert [mlx5.inline_seg_ds(n) for n in (0, 12, 13, 28, 29)] == [1, 1, 2, 2, 3]
    assert [mlx5.ds_to_wqebbs(d) for d in (1, 4, 5, 8, 9, 63)] == [1, 1, 2, 2, 3, 16]
    for n in range(0, 300):
        assert mlx5.inline_seg_ds(n) == wire.inline_seg_ds(n)
    for d in range(0, 64):
        assert mlx5.ds_to_wqebbs(d) == wire.ds_to_wqebbs(d)
    assert wire.ds_rc_write(False, 4096) == 3
    assert wire.ds_rc_write(True, 8) == 3
    assert wire.ds_fetch_add(False, False) == 4
    assert wire.ds_dc_write(False, 0, False) == 6
    assert wire.ds_dc_write(False, 0, True) == 4
    assert wire.ds_fetch_add(True, False) == 7


# (builder kwargs, expected ds, expected WQEBBs) for the layouts of reference/mlx5.md
LAYOUTS = [
    ("rc write", dict(lkey=5, addr=0x1000, length=4096), None, 3, 1),
    ("rc inline 8 B", dict(payload=b"12345678"), None, 3, 1),
    ("rc write imm", dict(lkey=5, addr=0x1000, length=64, imm=0x01020304), None, 3, 1),
    ("dc write", dict(lkey=5, addr=0x1000, length=64), FULL_AV, 6, 2),
    ("dc write compact AV", dict(lkey=5, addr=0x1000, length=64),
     mlx5.Av(7, 9, False, 0, 0, 0x10), 4, 1),
    ("dc inline 100 B", dict(payload=bytes(100)), FULL_AV, 12, 3),
]  # fmt: skip


@pytest.mark.parametrize(("name", "kw", "av", "ds", "bbs"), LAYOUTS, ids=[x[0] for x in LAYOUTS])
def test_write_layouts(name: str, kw: dict, av: mlx5.Av | None, ds: int, bbs: int) -> None:
    for pi in (0, 3, 0x1FFFF):  # at the ring start, at its last WQEBB (wraps), past 16 bits
        sq = ring(4)
        av_b = encode_av(av) if av else None
        assert sq.post_write(pi, 0x1234, 0xAA00, 0x77, signaled=True, av=av_b, **kw) == bbs
        img, n = wire.post_write(bytes(4 * 64), 4, pi, 0x1234, 0xAA00, 0x77, signaled=True,
                                 av=av_dict(av) if av else None,
                                 compact_av=bool(av and not av.ext), **kw)  # fmt: skip
        assert n == bbs
        assert img == sq.buf.tobytes(), f"{name} at pi={pi}: numpy and mlx5.cuh images differ"
        w = sq.parse(pi, dc=av is not None)
        assert w.ctrl.ds == ds and w.wqebbs == bbs
        assert w.ctrl.wqe_index == pi & 0xFFFF and w.ctrl.qpn == 0x1234
        assert w.ctrl.opcode == (
            mlx5.Opcode.RDMA_WRITE_IMM if "imm" in kw else mlx5.Opcode.RDMA_WRITE
        )
        assert w.ctrl.fm_ce_se == mlx5.CtrlFlags.CQ_UPDATE
        assert w.ctrl.imm == kw.get("imm", 0)
        assert w.av == av and w.raddr == mlx5.Raddr(0xAA00, 0x77)
        if "payload" in kw:
            assert w.inline == kw["payload"]
        else:
            assert w.data == mlx5.Data(kw["length"], kw["lkey"], kw["addr"])


def test_fetch_add_and_nop_layouts() -> None:
    for av, ds, bbs in ((None, 4, 1), (FULL_AV, 7, 2), (mlx5.Av(1, 2, False, 0, 0, 3), 5, 2)):
        sq = ring(2)
        av_b = encode_av(av) if av else None
        assert sq.post_fetch_add(1, 9, 0x2000, 0x33, 5, 0x44, 0x3000, av=av_b) == bbs
        img, n = wire.post_fetch_add(bytes(128), 2, 1, 9, 0x2000, 0x33, 5, 0x44, 0x3000,
                                     av=av_dict(av) if av else None,
                                     compact_av=bool(av and not av.ext))  # fmt: skip
        assert (img, n) == (sq.buf.tobytes(), bbs)
        w = sq.parse(1, dc=av is not None)
        assert (w.ctrl.opcode, w.ctrl.ds, w.ctrl.fm_ce_se) == (mlx5.Opcode.ATOMIC_FA, ds, 0x08)
        assert w.raddr == mlx5.Raddr(0x2000, 0x33) and w.atomic == mlx5.Atomic(5, 0)
        assert w.data == mlx5.Data(mlx5.FETCH_ADD_BYTES, 0x44, 0x3000)
    sq = ring(1)
    assert sq.post_nop(7, 3, signaled=True) == 1
    assert wire.post_nop(bytes(64), 1, 7, 3, True) == (sq.buf.tobytes(), 1)
    w = sq.parse(7)
    assert (w.ctrl.opcode, w.ctrl.ds, w.ctrl.wqe_index, w.raddr, w.data) == (0, 1, 7, None, None)


@pytest.mark.parametrize("nbytes", range(0, 201))
def test_inline_wraps_at_sq_end(nbytes: int) -> None:
    payload = bytes((31 * i + 7) & 0xFF for i in range(nbytes))
    sq = ring(8)
    last = sq.wqebb_cnt - 1  # the WQE starts in the ring's last WQEBB
    bbs = sq.post_write(last, 5, 0xBEEF, 0x99, payload=payload)
    ds = 2 + mlx5.inline_seg_ds(nbytes)
    assert bbs == mlx5.ds_to_wqebbs(ds)
    img, n = wire.post_write(bytes(sq.nbytes), 8, last, 5, 0xBEEF, 0x99, payload=payload)
    assert (img, n) == (sq.buf.tobytes(), bbs)
    # the WQE's bytes: 64 at the end of the ring, the rest from the ring's start
    wqe = np.concatenate([mlx5.ctrl_seg(last, mlx5.Opcode.RDMA_WRITE, 5, ds),
                          mlx5.raddr_seg(0xBEEF, 0x99), mlx5.inline_seg(payload)])  # fmt: skip
    start, head, tail = last * mlx5.WQEBB_BYTES, wqe[:64].tobytes(), wqe[64:].tobytes()
    expect = bytearray(sq.nbytes)
    expect[start : start + len(head)] = head
    expect[: len(tail)] = tail
    assert sq.buf.tobytes() == bytes(expect)
    assert len(tail) == max(0, 16 * ds - 64)  # nbytes > 12 wraps to the ring start
    assert mlx5.read_inline(sq, last, 2) == payload == sq.parse(last).inline
    assert wire.read_inline(img, 8, last, 2, nbytes) == payload


@PROPS
@given(st.integers(0, 1 << 20), u24, u64, u32, st.binary(max_size=120), st.booleans(),
       st.booleans(), st.none() | u32)  # fmt: skip
def test_builders_match_cuh(pi, qpn, raddr, rkey, payload, signaled, fence, imm) -> None:
    sq = ring(4)
    n = sq.post_write(
        pi, qpn, raddr, rkey, payload=payload, signaled=signaled, fence=fence, imm=imm
    )
    img, n2 = wire.post_write(bytes(256), 4, pi, qpn, raddr, rkey, payload=payload,
                              signaled=signaled, fence=fence, imm=imm)  # fmt: skip
    assert (img, n2) == (sq.buf.tobytes(), n)
    ctrl = sq.read(pi, 0, 16)
    assert mlx5.doorbell_value(ctrl) == wire.doorbell_value(ctrl.tobytes())
    assert mlx5.doorbell_value(ctrl).to_bytes(8, "little") == ctrl[:8].tobytes()
    flags = mlx5.decode_ctrl(ctrl).fm_ce_se
    assert bool(flags & mlx5.CtrlFlags.CQ_UPDATE) == signaled
    assert bool(flags & mlx5.CtrlFlags.FENCE) == fence


def test_sq_ring_write_read_wrap() -> None:
    sq = ring(2)
    data = bytes(range(100))
    sq.write(1, 2, data)  # from byte 96: 32 bytes to the end, 68 from the start
    assert sq.buf[96:].tobytes() == data[:32] and sq.buf[:68].tobytes() == data[32:]
    assert sq.read(1, 2, 100).tobytes() == data
    assert sq.offset(5, 3) == 64 + 48


# ---- CQ ownership --------------------------------------------------------------------------------
def test_cq_ownership_over_passes() -> None:
    ncqe = 4
    cq = np.zeros(ncqe * mlx5.CQE_BYTES, np.uint8)
    mlx5.init_cq(cq)
    entries = cq.reshape(ncqe, mlx5.CQE_BYTES)
    assert entries[0].tobytes() == wire.cqe_init()
    assert not mlx5.ready_mask(cq, 0, ncqe, ncqe).any()
    for ci in range(3 * ncqe):  # the NIC writes entry ci with the owner of its pass
        slot = entries[ci % ncqe]
        assert not mlx5.cqe_ready(slot, ci, ncqe) and not wire.cqe_ready(slot.tobytes(), ci, ncqe)
        owner = mlx5.owner_for(ci, ncqe)
        assert owner == wire.owner_for(ci, ncqe) == (ci // ncqe) % 2
        slot[:] = mlx5.req_cqe(1, mlx5.Opcode.RDMA_WRITE, ci & 0xFFFF, owner=owner)
        assert mlx5.cqe_ready(slot, ci, ncqe) and wire.cqe_ready(slot.tobytes(), ci, ncqe)
        assert not mlx5.cqe_ready(slot, ci + ncqe, ncqe)  # stale for the next pass
        assert mlx5.ready_mask(cq, ci, ncqe, 1).all()


@PROPS
@given(st.lists(st.tuples(st.integers(0, 2), u24, u8, u16, u32, u32, u64, st.integers(0, 1)),
                min_size=1, max_size=16))  # fmt: skip
def test_decode_cqes_vectorised(rows) -> None:
    buf = np.zeros(len(rows) * mlx5.CQE_BYTES, np.uint8)
    entries = buf.reshape(-1, mlx5.CQE_BYTES)
    for e, (k, qpn, wop, wc, bc, imm, ts, owner) in zip(entries, rows, strict=True):
        if k == 0:
            e[:] = mlx5.req_cqe(qpn, wop, wc, bc, timestamp=ts, owner=owner)
        elif k == 1:
            e[:] = mlx5.resp_cqe(mlx5.CqeOpcode.RESP_WR_IMM, qpn, wc, bc, imm=imm, timestamp=ts,
                                 owner=owner)  # fmt: skip
        else:
            e[:] = mlx5.err_cqe(mlx5.CqeOpcode.REQ_ERR, mlx5.Syndrome.REMOTE_ACCESS, qpn, wop, wc,
                                vendor_syndrome=wop ^ 0x5A, owner=owner)  # fmt: skip
    cols = mlx5.decode_cqes(buf)
    for i, e in enumerate(entries):
        assert {k: int(v[i]) for k, v in cols.items()} == mlx5.decode_cqe(e).__dict__


# ---- doorbells and errors ----------------------------------------------------------------------
def test_doorbell_record_words() -> None:
    assert mlx5.dbrec_value(0x12345) == bytes.fromhex("00002345") == wire.dbrec_value(0x12345)
    assert mlx5.cq_ci_value(0x1234567) == bytes.fromhex("00234567") == wire.cq_ci_value(0x1234567)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: mlx5.ctrl_seg(0, 8, 1 << 24, 3), "qpn"),
        (lambda: mlx5.ctrl_seg(0, 8, 1, 64), "ds"),
        (lambda: mlx5.ctrl_seg(0, 256, 1, 3), "opcode"),
        (lambda: mlx5.ctrl_seg(0, 8, 1, 3, imm=-1), "imm"),
        (lambda: mlx5.raddr_seg(1 << 64, 0), "raddr"),
        (lambda: mlx5.data_seg(0, 1 << 32, 0), "lkey"),
        (lambda: mlx5.av_compact(0, 1 << 24), "dct_num"),
        (lambda: mlx5.av_full(0, 1, rmac=b"\0"), "rmac"),
        (lambda: mlx5.err_cqe(0, 5, 1, 8, 0), "opcode"),
        (lambda: mlx5.req_cqe(1, 8, 0, owner=2), "owner"),
        (lambda: mlx5.SqRing(np.zeros(192, np.uint8), 3), "wqebb_cnt"),
        (lambda: ring(1).post_write(0, 1, 0, 0, payload=bytes(1000)), "ds limit"),
        (lambda: ring(1).post_write(0, 1, 0, 0, payload=bytes(100)), "exceeds the SQ"),
        (lambda: mlx5.decode_cqe(bytes(10)), "CQE"),
    ],
)
def test_bad_fields_name_the_field(call, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        call()
