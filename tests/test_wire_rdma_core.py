"""The mlx5 wire format of gicbench (numpy twin and cuda/mlx5.cuh through the native module),
compared byte for byte with rdma-core itself.

tests/c/mlx5_layout.c is compiled against the system's <infiniband/mlx5dv.h>; it prints the struct
layouts and enum values and encodes argument tuples with mlx5dv_set_ctrl_seg, mlx5dv_set_data_seg,
mlx5dv_set_dgram_seg and field-by-field htobe* fills. Many tuples go through one process per
hypothesis example. The header is a CI requirement: without it these tests fail, never skip.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gicbench import mlx5
from gicbench._native import wire

HEADER = Path("/usr/include/infiniband/mlx5dv.h")
SOURCE = Path(__file__).parent / "c" / "mlx5_layout.c"
PROPS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])

Ref = Callable[[Sequence[str]], list[bytes]]


@pytest.fixture(scope="module")
def layout_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not HEADER.exists():
        pytest.fail(f"{HEADER} is missing (rdma-core's libibverbs-dev): run `make setup`")
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.fail("no C compiler (gcc) found: the rdma-core comparison needs one")
    out = tmp_path_factory.mktemp("mlx5_layout") / "mlx5_layout"
    flags = ["-std=gnu11", "-O1", "-Wall", "-Wextra", "-Werror"]
    if (
        subprocess.run(
            [cc, "-mssse3", "-E", "-x", "c", "/dev/null"], capture_output=True
        ).returncode
        == 0
    ):
        flags.append("-mssse3")  # also exercise mlx5dv_x86_set_ctrl_seg
    proc = subprocess.run([cc, *flags, "-o", str(out), str(SOURCE)], capture_output=True, text=True)
    assert proc.returncode == 0, f"compiling {SOURCE.name} against {HEADER} failed:\n{proc.stderr}"
    return out


def _run(binary: Path, commands: Sequence[str]) -> dict:
    proc = subprocess.run(
        [str(binary)], input="\n".join(commands) + "\n", capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def layout(layout_bin: Path) -> dict:
    return _run(layout_bin, [])


@pytest.fixture(scope="module")
def ref(layout_bin: Path) -> Ref:
    def encode(commands: Sequence[str]) -> list[bytes]:
        res = _run(layout_bin, commands)["results"]
        assert len(res) == len(commands)
        return [bytes.fromhex(h) for h in res]

    return encode


def _np(b: np.ndarray) -> bytes:
    return b.tobytes()


def _diff(what: str, args: object, ours: bytes, theirs: bytes) -> str:
    return f"{what}{args}: gicbench {ours.hex()} != rdma-core {theirs.hex()}"


# ---- layouts and enum values ---------------------------------------------------------------------
# reference/mlx5.md's tables: (offset, size) of every field gicbench reads or writes.
DOCUMENTED = {
    "mlx5_wqe_ctrl_seg.opmod_idx_opcode": (0, 4),
    "mlx5_wqe_ctrl_seg.qpn_ds": (4, 4),
    "mlx5_wqe_ctrl_seg.signature": (8, 1),
    "mlx5_wqe_ctrl_seg.dci_stream_channel_id": (9, 2),
    "mlx5_wqe_ctrl_seg.fm_ce_se": (11, 1),
    "mlx5_wqe_ctrl_seg.imm": (12, 4),
    "mlx5_wqe_raddr_seg.raddr": (0, 8),
    "mlx5_wqe_raddr_seg.rkey": (8, 4),
    "mlx5_wqe_raddr_seg.reserved": (12, 4),
    "mlx5_wqe_data_seg.byte_count": (0, 4),
    "mlx5_wqe_data_seg.lkey": (4, 4),
    "mlx5_wqe_data_seg.addr": (8, 8),
    "mlx5_wqe_inl_data_seg.byte_count": (0, 4),
    "mlx5_wqe_atomic_seg.swap_add": (0, 8),
    "mlx5_wqe_atomic_seg.compare": (8, 8),
    "mlx5_wqe_av.key.dc_key": (0, 8),
    "mlx5_wqe_av.dqp_dct": (8, 4),
    "mlx5_wqe_av.stat_rate_sl": (12, 1),
    "mlx5_wqe_av.fl_mlid": (13, 1),
    "mlx5_wqe_av.rlid": (14, 2),
    "mlx5_wqe_av.reserved0": (16, 4),
    "mlx5_wqe_av.rmac": (20, 6),
    "mlx5_wqe_av.tclass": (26, 1),
    "mlx5_wqe_av.hop_limit": (27, 1),
    "mlx5_wqe_av.grh_gid_fl": (28, 4),
    "mlx5_wqe_av.rgid": (32, 16),
    "mlx5_cqe64.imm_inval_pkey": (mlx5.cqe.OFF_IMM, 4),
    "mlx5_cqe64.byte_cnt": (mlx5.cqe.OFF_BYTE_CNT, 4),
    "mlx5_cqe64.timestamp": (mlx5.cqe.OFF_TIMESTAMP, 8),
    "mlx5_cqe64.sop_drop_qpn": (mlx5.cqe.OFF_SOP_QPN, 4),
    "mlx5_cqe64.wqe_counter": (mlx5.cqe.OFF_WQE_COUNTER, 2),
    "mlx5_cqe64.signature": (mlx5.cqe.OFF_SIGNATURE, 1),
    "mlx5_cqe64.op_own": (mlx5.cqe.OFF_OP_OWN, 1),
    "mlx5_err_cqe.vendor_err_synd": (mlx5.cqe.OFF_VENDOR_SYND, 1),
    "mlx5_err_cqe.syndrome": (mlx5.cqe.OFF_SYNDROME, 1),
    "mlx5_err_cqe.s_wqe_opcode_qpn": (mlx5.cqe.OFF_SOP_QPN, 4),
    "mlx5_err_cqe.wqe_counter": (mlx5.cqe.OFF_WQE_COUNTER, 2),
    "mlx5_err_cqe.signature": (mlx5.cqe.OFF_SIGNATURE, 1),
    "mlx5_err_cqe.op_own": (mlx5.cqe.OFF_OP_OWN, 1),
}

# cuda/mlx5.cuh's CQE offsets (wire.CONSTANTS) and the rdma-core fields they stand for.
CUH_OFFSETS = {
    "CQE_OFF_IMM": "mlx5_cqe64.imm_inval_pkey",
    "CQE_OFF_BYTE_CNT": "mlx5_cqe64.byte_cnt",
    "CQE_OFF_TIMESTAMP": "mlx5_cqe64.timestamp",
    "CQE_OFF_SOP_QPN": "mlx5_cqe64.sop_drop_qpn",
    "CQE_OFF_WQE_COUNTER": "mlx5_cqe64.wqe_counter",
    "CQE_OFF_SIGNATURE": "mlx5_cqe64.signature",
    "CQE_OFF_OP_OWN": "mlx5_cqe64.op_own",
    "ERR_CQE_OFF_VENDOR_SYND": "mlx5_err_cqe.vendor_err_synd",
    "ERR_CQE_OFF_SYNDROME": "mlx5_err_cqe.syndrome",
}


def test_field_offsets_and_sizes(layout: dict) -> None:
    fields = {k: tuple(v) for k, v in layout["fields"].items()}
    assert set(fields) == set(DOCUMENTED)
    wrong = {k: (fields[k], v) for k, v in DOCUMENTED.items() if fields[k] != v}
    assert not wrong, f"(rdma-core, gicbench) offset/size disagree: {wrong}"
    cuh = wire.CONSTANTS
    wrong_cuh = {
        k: (cuh[k], fields[f][0]) for k, f in CUH_OFFSETS.items() if cuh[k] != fields[f][0]
    }
    assert not wrong_cuh, f"mlx5.cuh offsets (cuh, rdma-core) disagree: {wrong_cuh}"


def test_struct_sizes(layout: dict) -> None:
    sizes = layout["sizes"]
    for seg in (
        "mlx5_wqe_ctrl_seg",
        "mlx5_wqe_raddr_seg",
        "mlx5_wqe_data_seg",
        "mlx5_wqe_atomic_seg",
    ):
        assert sizes[seg] == mlx5.SEG_BYTES == wire.CONSTANTS["SEG_BYTES"], seg
    assert sizes["mlx5_wqe_inl_data_seg"] == 4
    assert sizes["mlx5_wqe_av"] == mlx5.AV_FULL_BYTES == wire.CONSTANTS["AV_FULL_BYTES"]
    assert sizes["mlx5_cqe64"] == mlx5.CQE_BYTES == wire.CONSTANTS["CQE_BYTES"]
    assert sizes["mlx5_err_cqe"] == mlx5.CQE_BYTES


def _expected_enums() -> dict[str, tuple[int, int]]:
    """rdma-core enum name -> (numpy value, mlx5.cuh value)."""
    c = wire.CONSTANTS
    out: dict[str, tuple[int, int]] = {}
    for op in mlx5.Opcode:
        out[f"MLX5_OPCODE_{op.name}"] = (op.value, c[f"OP_{op.name}"])
    for fl in mlx5.CtrlFlags:
        out[f"MLX5_WQE_CTRL_{fl.name}"] = (fl.value, c[f"CTRL_{fl.name}"])
    for co in mlx5.CqeOpcode:
        out[f"MLX5_CQE_{co.name}"] = (co.value, c[f"CQE_{co.name}"])
    for sy in mlx5.Syndrome:
        out[f"MLX5_CQE_SYNDROME_{sy.name}_ERR"] = (sy.value, c[f"SYND_{sy.name}"])
    out["MLX5_SEND_WQE_BB"] = (mlx5.WQEBB_BYTES, c["WQEBB_BYTES"])
    out["MLX5_INLINE_SEG"] = (mlx5.INLINE_FLAG, c["INLINE_FLAG"])
    out["MLX5_EXTENDED_UD_AV"] = (mlx5.AV_EXT, c["AV_EXT"])
    out["MLX5_SND_DBR"] = (mlx5.SND_DBR, c["SND_DBR"])
    out["MLX5_RCV_DBR"] = (mlx5.RCV_DBR, c["RCV_DBR"])
    out["MLX5_CQE_OWNER_MASK"] = (1, 1)
    return out


def test_enum_values(layout: dict) -> None:
    enums = layout["enums"]
    expected = _expected_enums()
    missing = sorted(set(expected) - set(enums))
    assert not missing, f"not printed by mlx5_layout.c: {missing}"
    wrong = {k: (enums[k], *v) for k, v in expected.items() if not enums[k] == v[0] == v[1]}
    assert not wrong, f"(rdma-core, numpy, mlx5.cuh) disagree: {wrong}"
    # every syndrome reference/mlx5.md lists is one rdma-core defines
    assert {k for k in enums if k.startswith("MLX5_CQE_SYNDROME_")} >= {
        f"MLX5_CQE_SYNDROME_{s.name}_ERR" for s in mlx5.Syndrome
    }


# ---- segment encodings ---------------------------------------------------------------------------
u8, u16, u24, u32, u64 = (st.integers(0, (1 << b) - 1) for b in (8, 16, 24, 32, 64))
CTRL = st.tuples(u16, u8, u8, u24, u8, st.integers(0, mlx5.DS_MAX), u8, u32)
EDGE_CTRL = [
    (0, 0, 0, 0, 0, 0, 0, 0),
    (0xFFFF, 0xFF, 0xFF, 0xFFFFFF, 0xFF, 63, 0xFF, 0xFFFFFFFF),
    (0x1234, int(mlx5.Opcode.RDMA_WRITE_IMM), 0, 0xABCDEF, int(mlx5.CtrlFlags.CQ_UPDATE), 3, 0, 7),
    (1, int(mlx5.Opcode.ATOMIC_FA), 0, 0x000102, int(mlx5.CtrlFlags.FENCE), 4, 0, 0x11223344),
]


def _check_ctrl(ref: Ref, cases: Sequence[tuple[int, ...]]) -> None:
    theirs = ref([f"ctrl {' '.join(map(str, c))}" for c in cases])
    x86 = ref([f"ctrlx {' '.join(map(str, c))}" for c in cases])
    for c, t, tx in zip(cases, theirs, x86, strict=True):
        pi, opcode, opmod, qpn, fm_ce_se, ds, signature, imm = c
        ours = _np(
            mlx5.ctrl_seg(
                pi, opcode, qpn, ds, opmod=opmod, fm_ce_se=fm_ce_se, signature=signature, imm=imm
            )
        )
        cuh = wire.ctrl_seg(pi, opcode, opmod, qpn, fm_ce_se, ds, signature, imm)
        assert ours == t, _diff("numpy ctrl_seg", c, ours, t)
        assert cuh == t, _diff("mlx5.cuh set_ctrl_seg", c, cuh, t)
        assert not tx or tx == t, _diff("rdma-core x86 vs portable ctrl", c, tx, t)
        # the decoders read back what rdma-core wrote
        want = dict(
            opcode=opcode,
            opmod=opmod,
            wqe_index=pi,
            qpn=qpn,
            ds=ds,
            signature=signature,
            fm_ce_se=fm_ce_se,
            imm=imm,
        )
        assert mlx5.decode_ctrl(t).__dict__ == want
        assert wire.decode_ctrl(t) == want
        # the doorbell is rdma-core's first 8 bytes as a CPU stores them
        assert mlx5.doorbell_value(t) == wire.doorbell_value(t) == int.from_bytes(t[:8], "little")


def test_ctrl_edges(ref: Ref) -> None:
    _check_ctrl(ref, EDGE_CTRL)


@PROPS
@given(st.lists(CTRL, min_size=1, max_size=64))
def test_ctrl_matches_mlx5dv_set_ctrl_seg(ref: Ref, cases: list[tuple[int, ...]]) -> None:
    _check_ctrl(ref, cases)


def _check_data(ref: Ref, cases: Sequence[tuple[int, int, int]]) -> None:
    theirs = ref([f"data {n} {k} {a}" for n, k, a in cases])
    for (n, k, a), t in zip(cases, theirs, strict=True):
        ours, cuh = _np(mlx5.data_seg(n, k, a)), wire.data_seg(n, k, a)
        assert ours == t, _diff("numpy data_seg", (n, k, a), ours, t)
        assert cuh == t, _diff("mlx5.cuh set_data_seg", (n, k, a), cuh, t)
        d = mlx5.decode_data(t)
        assert (d.byte_count, d.lkey, d.addr) == (n, k, a)
        assert wire.decode_data(t) == (n, k, a, bool(n & mlx5.INLINE_FLAG))


@PROPS
@given(st.lists(st.tuples(u32, u32, u64), min_size=1, max_size=64))
def test_data_matches_mlx5dv_set_data_seg(ref: Ref, cases: list[tuple[int, int, int]]) -> None:
    _check_data(ref, [(0, 0, 0), (2**32 - 1, 2**32 - 1, 2**64 - 1), *cases])


@PROPS
@given(st.lists(st.tuples(u64, u32), min_size=1, max_size=64))
def test_raddr_matches_rdma_core(ref: Ref, cases: list[tuple[int, int]]) -> None:
    cases = [(0x0102030405060708, 0x0A0B0C0D), *cases]
    theirs = ref([f"raddr {a} {k}" for a, k in cases])
    for (a, k), t in zip(cases, theirs, strict=True):
        ours, cuh = _np(mlx5.raddr_seg(a, k)), wire.raddr_seg(a, k)
        assert ours == t, _diff("numpy raddr_seg", (a, k), ours, t)
        assert cuh == t, _diff("mlx5.cuh set_raddr_seg", (a, k), cuh, t)
        assert mlx5.decode_raddr(t) == mlx5.Raddr(a, k)
        assert wire.decode_raddr(t) == (a, k)


@PROPS
@given(st.lists(st.tuples(u64, u64), min_size=1, max_size=64))
def test_atomic_matches_rdma_core(ref: Ref, cases: list[tuple[int, int]]) -> None:
    cases = [(1, 0), (0x0102030405060708, 0x1112131415161718), *cases]
    theirs = ref([f"atomic {s} {c}" for s, c in cases])
    for (s, c), t in zip(cases, theirs, strict=True):
        ours, cuh = _np(mlx5.atomic_seg(s, c)), wire.atomic_seg(s, c)
        assert ours == t, _diff("numpy atomic_seg", (s, c), ours, t)
        assert cuh == t, _diff("mlx5.cuh set_atomic_seg", (s, c), cuh, t)
        assert mlx5.decode_atomic(t) == mlx5.Atomic(s, c)
        assert wire.decode_atomic(t) == (s, c)


@PROPS
@given(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=64))
def test_inline_header_matches_rdma_core(ref: Ref, lengths: list[int]) -> None:
    lengths = [0, 1, 12, 13, 200, *lengths]
    theirs = ref([f"inline {n}" for n in lengths])
    for n, t in zip(lengths, theirs, strict=True):
        assert mlx5.inline_header(n) == t, _diff(
            "numpy inline header", (n,), mlx5.inline_header(n), t
        )
        d = mlx5.decode_data(t + bytes(12))
        assert d.is_inline and d.length == n
    for n in (0, 1, 12, 13, 60, 200):  # the whole segment run, header included
        payload = bytes((7 * i + 3) & 0xFF for i in range(n))
        ours, cuh = _np(mlx5.inline_seg(payload)), wire.inline_seg(payload)
        assert ours == cuh, _diff("inline_seg numpy vs mlx5.cuh", (n,), ours, cuh)
        assert ours[:4] == ref([f"inline {n}"])[0]


AV = st.tuples(
    u64, u24, u16, u8, u8, st.binary(min_size=6, max_size=6), u8, u8, u32,
    st.binary(min_size=16, max_size=16),
)  # fmt: skip


def _check_av(ref: Ref, cases: Sequence[tuple]) -> None:
    full_cmds, compact_cmds = [], []
    for key, dct, rlid, srsl, flm, rmac, tcl, hop, gfl, rgid in cases:
        tail = f"{srsl} {flm} {rlid} {rmac.hex()} {tcl} {hop} {gfl} {rgid.hex()}"
        full_cmds.append(f"av {key} {dct} 1 {tail}")
        compact_cmds.append(f"av {key} {dct} 0 {tail}")
    theirs_full, theirs_compact = ref(full_cmds), ref(compact_cmds)
    for c, tf, tc in zip(cases, theirs_full, theirs_compact, strict=True):
        key, dct, rlid, srsl, flm, rmac, tcl, hop, gfl, rgid = c
        kw = dict(rlid=rlid, stat_rate_sl=srsl, fl_mlid=flm)
        ext = dict(rmac=rmac, tclass=tcl, hop_limit=hop, grh_gid_fl=gfl, rgid=rgid)
        full = _np(mlx5.av_full(key, dct, **kw, **ext))
        cuh_full = wire.av_full(dict(dc_key=key, dct_num=dct, **kw, **ext))
        assert full == tf, _diff("numpy av_full", c, full, tf)
        assert cuh_full == tf, _diff("mlx5.cuh set_av_full", c, cuh_full, tf)
        # compact AV = the first 16 bytes of mlx5_wqe_av with ext clear (struct mlx5_base_av)
        compact = _np(mlx5.av_compact(key, dct, **kw))
        cuh_compact = wire.av_compact(key, dct, srsl, flm, rlid)
        assert compact == tc[:16], _diff("numpy av_compact", c, compact, tc[:16])
        assert cuh_compact == tc[:16], _diff("mlx5.cuh set_av_compact", c, cuh_compact, tc[:16])
        assert mlx5.decode_av(tf) == mlx5.Av(
            key, dct, True, srsl, flm, rlid, rmac, tcl, hop, gfl, rgid
        )
        assert mlx5.decode_av(tc[:16]) == mlx5.Av(key, dct, False, srsl, flm, rlid)
        assert wire.decode_av(tf) == (key, dct, True)
        assert wire.decode_av(tc) == (key, dct, False)


@PROPS
@given(st.lists(AV, min_size=1, max_size=32))
def test_av_matches_mlx5dv_set_dgram_seg(ref: Ref, cases: list[tuple]) -> None:
    edge = (0x0102030405060708, 0xABCDEF, 0x1234, 0x56, 0x78, b"\x01\x02\x03\x04\x05\x06",
            0x9A, 0xBC, 0xDEF01234, bytes(range(16)))  # fmt: skip
    _check_av(ref, [edge, *cases])


# ---- CQEs ----------------------------------------------------------------------------------------
GOOD_CQE = st.tuples(
    st.sampled_from([o.value for o in mlx5.CqeOpcode if o.value <= mlx5.CqeOpcode.RESP_SEND_IMM]),
    st.integers(0, 1), u16, u32, u24, u8, u32, u64,
)  # fmt: skip


def _cqe_fields(c: tuple) -> dict:
    opcode, owner, wc, bc, qpn, wop, imm, ts = c
    return dict(
        opcode=opcode,
        owner=owner,
        wqe_counter=wc,
        byte_cnt=bc,
        qpn=qpn,
        wqe_opcode=wop,
        imm=imm,
        syndrome=0,
        vendor_syndrome=0,
        timestamp=ts,
    )


@PROPS
@given(st.lists(GOOD_CQE, min_size=1, max_size=64))
def test_cqe_matches_mlx5_cqe64(ref: Ref, cases: list[tuple]) -> None:
    # requester CQEs carry no immediate; responder CQEs no WQE opcode
    cases = [
        (op, ow, wc, bc, q, 0 if op else wop, imm if op else 0, ts)
        for op, ow, wc, bc, q, wop, imm, ts in cases
    ]
    theirs = ref([f"cqe {' '.join(map(str, c))}" for c in cases])
    for c, t in zip(cases, theirs, strict=True):
        opcode, owner, wc, bc, qpn, wop, imm, ts = c
        if opcode == mlx5.CqeOpcode.REQ:
            ours = _np(mlx5.req_cqe(qpn, wop, wc, bc, timestamp=ts, owner=owner))
            cuh = wire.req_cqe(qpn, wop, wc, bc, ts, owner)
        else:
            ours = _np(mlx5.resp_cqe(opcode, qpn, wc, bc, imm=imm, timestamp=ts, owner=owner))
            cuh = wire.resp_cqe(opcode, qpn, wc, bc, imm, ts, owner)
        assert ours == t, _diff("numpy CQE", c, ours, t)
        assert cuh == t, _diff("mlx5.cuh fill_*_cqe", c, cuh, t)
        assert mlx5.decode_cqe(t).__dict__ == _cqe_fields(c)
        assert wire.decode_cqe(t) == _cqe_fields(c)


ERR_CQE = st.tuples(
    st.sampled_from([mlx5.CqeOpcode.REQ_ERR.value, mlx5.CqeOpcode.RESP_ERR.value]),
    st.integers(0, 1), st.sampled_from([s.value for s in mlx5.Syndrome]), u8, u24, u8, u16,
)  # fmt: skip


@PROPS
@given(st.lists(ERR_CQE, min_size=1, max_size=64))
def test_err_cqe_matches_mlx5_err_cqe(ref: Ref, cases: list[tuple]) -> None:
    theirs = ref([f"errcqe {' '.join(map(str, c))}" for c in cases])
    for c, t in zip(cases, theirs, strict=True):
        opcode, owner, synd, vsynd, qpn, wop, wc = c
        ours = _np(mlx5.err_cqe(opcode, synd, qpn, wop, wc, vendor_syndrome=vsynd, owner=owner))
        cuh = wire.err_cqe(opcode, synd, qpn, wop, wc, vsynd, owner)
        assert ours == t, _diff("numpy err_cqe", c, ours, t)
        assert cuh == t, _diff("mlx5.cuh fill_err_cqe", c, cuh, t)
        want = dict(
            opcode=opcode,
            owner=owner,
            wqe_counter=wc,
            byte_cnt=0,
            qpn=qpn,
            wqe_opcode=wop,
            imm=0,
            syndrome=synd,
            vendor_syndrome=vsynd,
            timestamp=0,
        )
        assert mlx5.decode_cqe(t).__dict__ == want
        assert wire.decode_cqe(t) == want


# ---- doorbell records ---------------------------------------------------------------------------
@PROPS
@given(st.lists(u32, min_size=1, max_size=64))
def test_doorbell_records_match_rdma_core(ref: Ref, idx: list[int]) -> None:
    idx = [0, 0xFFFF, 0x10000, 0xFFFFFF, 0x1000000, *idx]
    sq, cq = ref([f"dbrec {i}" for i in idx]), ref([f"cqci {i}" for i in idx])
    for i, t_sq, t_cq in zip(idx, sq, cq, strict=True):
        assert mlx5.dbrec_value(i) == wire.dbrec_value(i) == t_sq, f"dbrec_value({i})"
        assert mlx5.cq_ci_value(i) == wire.cq_ci_value(i) == t_cq, f"cq_ci_value({i})"
