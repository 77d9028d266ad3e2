"""Runs one conformance case against one engine and checks every expectation.

The runner is the submitter: it writes WQEs into SQ memory with gicbench.mlx5 (numpy views of
the SQ), stores the doorbell record and then the doorbell word, posts receives, consumes CQEs and
publishes the consumer index, exactly as the mlx5 contract says.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from conformance_engines import make_world
from conformance_model import (
    Case,
    CheckNow,
    ConsumeCq,
    FetchAdd,
    GpiComplete,
    GpiExpect,
    GpiPost,
    MaskedAtomic,
    Modify,
    Nop,
    Post,
    PostRecv,
    PublishBody,
    PublishCtrl,
    PublishDbrec,
    Repeat,
    Rering,
    Ring,
    Skip,
    Write,
)

from gicbench import mlx5
from gicbench.fabric.base import QpState, host_view
from gicbench.fabric.emu.gpi import GpiWindow


@dataclass
class SqState:
    ring: mlx5.SqRing
    pi: int = 0
    last: int | None = None  # index of the last WQE posted since the last ring
    withheld: dict[int, np.ndarray] = field(default_factory=dict)  # index -> ctrl bytes
    torn: dict[int, np.ndarray] = field(default_factory=dict)  # index -> whole WQE bytes
    db: int = 0  # the last doorbell value stored


@dataclass
class CqState:
    buf: np.ndarray
    ncqe: int
    dbrec: np.ndarray
    rank: int
    collapsed: bool = False
    ci: int = 0  # consumed (published)
    seen: list[mlx5.Cqe] = field(default_factory=list)  # consumed CQEs, in order


class CaseRun:
    def __init__(self, case: Case, engine: str) -> None:
        self.case = case
        self.w = make_world(engine, case.world)
        self.mrs: dict[str, Any] = {}
        self.cqs: dict[str, Any] = {}
        self.qps: dict[str, Any] = {}
        self.dcts: dict[str, Any] = {}
        self.rank_of: dict[str, int] = {}
        self.sq: dict[str, SqState] = {}
        self.cq: dict[str, CqState] = {}
        self.rq_pi: dict[str, int] = {}
        self.gpis: dict[str, Any] = {}
        self.gpi_pi: dict[str, int] = {}  # the producer's next index
        self.gpi_torn: dict[str, list[tuple[int, Any, tuple[int, ...]]]] = {}

    # ---- setup --------------------------------------------------------------------------------
    def setup(self) -> None:
        f = self.w.fabrics
        for m in self.case.mrs:
            mr = f[m.rank].register(m.length, m.access, pd=m.pd)
            if m.init:
                self.w.view(mr.addr, mr.length)[: len(m.init)] = np.frombuffer(m.init, np.uint8)
            self.mrs[m.name] = mr
        for g in self.case.gpis:
            nwin = g.nwindows or 1 + max((w.handle for w in g.windows), default=0)
            q = f[g.rank].create_gpi(g.depth, ncounters=g.ncounters, nwindows=nwin, pd=g.pd)
            for w in g.windows:
                mr = self.mrs[w.mr]
                win = GpiWindow.of(mr, w.offset, w.length)
                win = GpiWindow(win.addr, win.length, win.key ^ w.key_xor)
                f[g.rank].set_gpi_window(q, w.handle, self._mr_rank(w.mr), win)
            self.gpis[g.name] = q
            self.rank_of[g.name] = g.rank
            self.gpi_pi[g.name] = 0
            self.gpi_torn[g.name] = []
        for c in self.case.cqs:
            cq = f[c.rank].create_cq(c.ncqe, collapsed=c.collapsed, overrun_ignore=c.overrun_ignore)
            self.cqs[c.name] = cq
            self.cq[c.name] = CqState(
                self.w.view(cq.buf, cq.ncqe * mlx5.CQE_BYTES),
                cq.ncqe,
                self.w.view(cq.dbrec, 4),
                c.rank,
                c.collapsed,
            )
        for d in self.case.dcts:
            self.dcts[d.name] = f[d.rank].create_dct(
                self.cqs[d.cq], d.key, rq_wqes=d.rq_wqes, pd=d.pd
            )
            self.rank_of[d.name] = d.rank
        for q in self.case.qps:
            rcq = self.cqs[q.recv_cq] if q.recv_cq else None
            qp = f[q.rank].create_qp(
                self.cqs[q.cq], q.sq_wqebbs, rcq, q.rq_wqes, q.dci,
                dbr=q.dbr, wqe_sig=q.wqe_sig, max_inline=q.max_inline, pd=q.pd,
            )  # fmt: skip
            self.qps[q.name] = qp
            self.rank_of[q.name] = q.rank
            ring = mlx5.SqRing(self.w.view(qp.sq.buf, qp.sq.wqebb_cnt * 64), qp.sq.wqebb_cnt)
            self.sq[q.name] = SqState(ring)
        for q in self.case.qps:
            qp, fab = self.qps[q.name], f[q.rank]
            if q.state == QpState.RTS:
                remote = None
                if not q.dci:
                    peer = self.qps[q.peer]
                    remote = f[self.rank_of[q.peer]].endpoint(peer)
                fab.connect(qp, remote)
            elif q.state != QpState.RESET:
                fab.modify_qp(qp, QpState.INIT)
        self.before = [fab.counters() for fab in f]

    def _mr_rank(self, name: str) -> int:
        return next(m.rank for m in self.case.mrs if m.name == name)

    # ---- steps --------------------------------------------------------------------------------
    def run(self, steps: tuple[object, ...]) -> None:
        for s in steps:
            getattr(self, "do_" + type(s).__name__)(s)

    def do_Repeat(self, s: Repeat) -> None:
        for _ in range(s.times):
            self.run(s.steps)

    def _av(self, dct_name: str, compact: bool, key: int | None) -> np.ndarray:
        dct = self.dcts[dct_name]
        k = dct.dc_key if key is None else key
        make = mlx5.av_compact if compact else mlx5.av_full
        return make(k, dct.dctn, rlid=dct.lid)

    def _posted(self, qp: str, idx: int, nbb: int) -> None:
        st = self.sq[qp]
        st.last = idx
        st.pi = idx + nbb

    def do_Write(self, s: Write) -> None:
        st, qp = self.sq[s.qp], self.qps[s.qp]
        dst = self.mrs[s.dst[0]]
        av = self._av(s.dct, s.compact_av, s.dc_key) if s.dct else None
        kw: dict[str, Any] = {"signaled": s.signaled, "imm": s.imm, "av": av}
        if s.payload is not None:
            kw["payload"] = s.payload
        else:
            src_mr, off, n = s.src
            src = self.mrs[src_mr]
            kw.update(lkey=src.lkey ^ s.lkey_xor, addr=src.addr + off, length=n)
        idx = st.pi
        old_ctrl = st.ring.read(idx, 0, 16) if s.withhold_ctrl else None
        raddr = dst.addr + s.dst[1] + s.raddr_delta
        nbb = st.ring.post_write(idx, qp.qpn, raddr, dst.rkey ^ s.rkey_xor, **kw)
        if old_ctrl is not None:
            st.withheld[idx] = st.ring.read(idx, 0, 16)
            st.ring.write(idx, 0, old_ctrl)
        self._posted(s.qp, idx, nbb)

    def do_FetchAdd(self, s: FetchAdd) -> None:
        st, qp = self.sq[s.qp], self.qps[s.qp]
        dst, res = self.mrs[s.dst[0]], self.mrs[s.result[0]]
        av = self._av(s.dct, s.compact_av, None) if s.dct else None
        idx = st.pi
        nbb = st.ring.post_fetch_add(
            idx,
            qp.qpn,
            dst.addr + s.dst[1] + s.raddr_delta,
            dst.rkey,
            s.add,
            res.lkey,
            res.addr + s.result[1],
            signaled=s.signaled,
            av=av,
        )
        self._posted(s.qp, idx, nbb)

    def do_MaskedAtomic(self, s: MaskedAtomic) -> None:
        st, qp = self.sq[s.qp], self.qps[s.qp]
        dst, res = self.mrs[s.dst[0]], self.mrs[s.result[0]]
        av = self._av(s.dct, s.compact_av, None) if s.dct else None
        idx = st.pi
        raddr, laddr = dst.addr + s.dst[1] + s.raddr_delta, res.addr + s.result[1]
        kw: dict[str, Any] = {"size": s.size, "signaled": s.signaled, "av": av}
        if s.op == "fa":
            nbb = st.ring.post_masked_fetch_add(
                idx, qp.qpn, raddr, dst.rkey, s.value, res.lkey, laddr, field_boundary=s.mask,
                **kw,
            )  # fmt: skip
        else:
            nbb = st.ring.post_masked_cmp_swap(
                idx, qp.qpn, raddr, dst.rkey, s.value, s.compare, res.lkey, laddr,
                swap_mask=s.mask, compare_mask=s.compare_mask, **kw,
            )  # fmt: skip
        w = st.ring.parse(idx, dc=s.dct is not None)
        if s.opmod is not None:  # the same ctrl with another operand-size modifier
            c = w.ctrl
            st.ring.write(idx, 0, mlx5.ctrl_seg(idx, c.opcode, c.qpn, c.ds, opmod=s.opmod,
                                                fm_ce_se=c.fm_ce_se))  # fmt: skip
        if s.result_len is not None:  # the last segment is the data segment
            st.ring.write(idx, w.ctrl.ds - 1, mlx5.data_seg(s.result_len, res.lkey, laddr))
        self._posted(s.qp, idx, nbb)

    def do_Nop(self, s: Nop) -> None:
        st, qp = self.sq[s.qp], self.qps[s.qp]
        idx = st.pi
        self._posted(s.qp, idx, st.ring.post_nop(idx, qp.qpn, signaled=s.signaled))

    def _spec(self, qp: str) -> Any:
        return next(q for q in self.case.qps if q.name == qp)

    def do_Post(self, s: Post) -> None:
        st, qp = self.sq[s.qp], self.qps[s.qp]
        body: list[np.ndarray] = []
        if s.dst is not None:
            dst = self.mrs[s.dst[0]]
            body.append(mlx5.raddr_seg(dst.addr + s.dst[1], dst.rkey))
        if s.atomic is not None:
            body.append(mlx5.atomic_seg(*s.atomic))
        if s.payload is not None:
            body.append(mlx5.inline_seg(s.payload))
        for mr_name, off, n in s.sges:
            mr = self.mrs[mr_name]
            body.append(mlx5.data_seg(n, mr.lkey, mr.addr + off))
        idx = st.pi
        ds = 1 + sum(len(b) for b in body) // 16
        flags = mlx5.CtrlFlags.CQ_UPDATE if s.signaled else 0
        qpn = qp.qpn ^ s.qpn_xor
        ctrl = mlx5.ctrl_seg(idx, s.opcode, qpn, ds, fm_ce_se=int(flags), imm=s.imm)
        wqe = np.concatenate([ctrl, *body]).astype(np.uint8)
        if s.sign:  # rdma-core's calc_sig: the signature byte makes the WQE's bytes XOR to 0xff
            wqe[8] = ~np.bitwise_xor.reduce(wqe) & 0xFF
        if s.torn:
            st.ring.write(idx, 0, wqe[:16])
            st.torn[idx] = wqe
        else:
            st.ring.write(idx, 0, wqe)
        self._posted(s.qp, idx, mlx5.ds_to_wqebbs(ds))

    def do_Skip(self, s: Skip) -> None:
        st = self.sq[s.qp]
        st.last = st.pi
        st.pi += s.wqebbs

    def _store_dbrec(self, name: str) -> None:
        st, qp = self.sq[name], self.qps[name]
        dbrec = self.w.view(qp.sq.dbrec, 8)
        dbrec[4 * mlx5.SND_DBR : 4 * mlx5.SND_DBR + 4] = np.frombuffer(
            mlx5.dbrec_value(st.pi), np.uint8
        )

    def _store_db(self, name: str, value: int, bf: bytes | None = None) -> None:
        reg = self.w.view(self.qps[name].sq.doorbell, 64)
        if bf is not None:
            reg[:] = np.frombuffer(bf, np.uint8)
        else:
            reg[:8].view(np.uint64)[0] = value
        self.sq[name].db = value

    def do_Ring(self, s: Ring) -> None:
        for name in s.qps:
            st, qp = self.sq[name], self.qps[name]
            if s.wqe is not None:
                st.last = s.wqe
            assert st.last is not None, f"Ring({name}): nothing posted since the last ring"
            if s.convention == "next":
                ctrl = mlx5.ctrl_seg(st.pi, 0, qp.qpn ^ s.qpn_xor, 0)
            else:
                ctrl = st.withheld.get(st.last, st.ring.read(st.last, 0, 16)).copy()
                if s.qpn_xor:
                    ctrl[4:8] = mlx5.ctrl_seg(0, 0, qp.qpn ^ s.qpn_xor, 0)[4:8]
            value = mlx5.doorbell_value(ctrl)
            bf = None
            if s.bf:
                blk = st.ring.read(st.last, 0, 64).copy()
                blk[:16] = ctrl
                bf = bytes(blk)
            if s.dbrec == "before":
                self._store_dbrec(name)
            self._store_db(name, value, bf)
            if s.dbrec == "double":
                self._store_dbrec(name)
                self._store_db(name, value, bf)
            st.last = None
        self.w.drain()

    def do_Rering(self, s: Rering) -> None:
        self._store_db(s.qp, self.sq[s.qp].db)
        self.w.drain()

    def do_PublishDbrec(self, s: PublishDbrec) -> None:
        self._store_dbrec(s.qp)
        self.w.drain()

    def do_PublishBody(self, s: PublishBody) -> None:
        st = self.sq[s.qp]
        for idx, wqe in st.torn.items():
            st.ring.write(idx, 0, wqe)
        st.torn.clear()
        self.w.drain()

    def do_PublishCtrl(self, s: PublishCtrl) -> None:
        st = self.sq[s.qp]
        for idx, ctrl in st.withheld.items():
            st.ring.write(idx, 0, ctrl)
        st.withheld.clear()

    def _gpi_fabric(self, name: str) -> Any:
        return self.w.fabrics[self.rank_of[name]]

    def do_GpiPost(self, s: GpiPost) -> None:
        q, fab = self.gpis[s.gpi], self._gpi_fabric(s.gpi)
        idx = self.gpi_pi[s.gpi]
        self.gpi_pi[s.gpi] = idx + 1
        host_view(q.pi, 8, np.uint64)[0] = idx + 1  # the reservation a producer's fetch-add makes
        ring = fab.gpi_ring(q)
        if s.segments is None:
            ring.post(idx, s.desc)
        else:
            ring.post(idx, s.desc, s.segments)
            rest = tuple(i for i in range(8) if i not in s.segments)
            self.gpi_torn[s.gpi].append((idx, s.desc, rest))
        self.w.drain()

    def do_GpiComplete(self, s: GpiComplete) -> None:
        ring = self._gpi_fabric(s.gpi).gpi_ring(self.gpis[s.gpi])
        for idx, desc, rest in self.gpi_torn[s.gpi]:
            ring.post(idx, desc, rest)
        self.gpi_torn[s.gpi].clear()
        self.w.drain()

    def do_CheckNow(self, s: CheckNow) -> None:
        problems = self._memory_problems(s.memory) + self._gpi_problems(s.gpi)
        assert not problems, f"case {self.case.name}, at CheckNow:\n  " + "\n  ".join(problems)

    def do_PostRecv(self, s: PostRecv) -> None:
        obj = self.qps.get(s.target) or self.dcts[s.target]
        rq = obj.rq
        pi = self.rq_pi.get(s.target, 0)
        ring = self.w.view(rq.buf, rq.wqe_cnt * 16)
        seg = mlx5.data_seg(0, 0, 0)  # WRITE_IMM needs no scatter list
        if s.sge is not None:
            mr = self.mrs[s.sge[0]]
            seg = mlx5.data_seg(s.sge[2], mr.lkey, mr.addr + s.sge[1])
        for _ in range(s.count):
            slot = (pi % rq.wqe_cnt) * 16
            ring[slot : slot + 16] = seg
            pi += 1
        self.rq_pi[s.target] = pi
        self.w.view(rq.dbrec, 4)[:] = np.frombuffer(struct.pack(">I", pi & 0xFFFF), np.uint8)

    def _cqe_at(self, c: CqState, i: int) -> mlx5.Cqe | None:
        raw = c.buf[(i % c.ncqe) * 64 : (i % c.ncqe + 1) * 64]
        return mlx5.decode_cqe(raw) if mlx5.cqe_ready(raw, i, c.ncqe) else None

    def do_ConsumeCq(self, s: ConsumeCq) -> None:
        c = self.cq[s.cq]
        for _ in range(s.count):
            cqe = self._cqe_at(c, c.ci)
            assert cqe is not None, f"ConsumeCq({s.cq}): no CQE at consumer index {c.ci}"
            c.seen.append(cqe)
            c.ci += 1
        c.dbrec[:] = np.frombuffer(mlx5.cq_ci_value(c.ci), np.uint8)

    def do_Modify(self, s: Modify) -> None:
        fab = self.w.fabrics[self.rank_of[s.qp]]
        spec = next(q for q in self.case.qps if q.name == s.qp)
        remote = None
        if s.state == QpState.RTR and not spec.dci:
            remote = self.w.fabrics[self.rank_of[spec.peer]].endpoint(self.qps[spec.peer])
        fab.modify_qp(self.qps[s.qp], s.state, remote)
        if s.state == QpState.RESET:
            self.sq[s.qp] = SqState(self.sq[s.qp].ring)

    # ---- outcome ------------------------------------------------------------------------------
    def all_cqes(self, name: str) -> list[mlx5.Cqe]:
        c = self.cq[name]
        out = list(c.seen)
        i = c.ci
        while i < c.ci + c.ncqe and (cqe := self._cqe_at(c, i)) is not None:
            out.append(cqe)
            i += 1
        return out

    def number(self, name: str) -> int:
        if name in self.gpis:
            return self.gpis[name].num
        return self.qps[name].qpn if name in self.qps else self.dcts[name].dctn

    def _memory_problems(self, memory: tuple[tuple[str, int, bytes], ...]) -> list[str]:
        problems = []
        for mr_name, off, data in memory:
            mr = self.mrs[mr_name]
            got = bytes(self.w.view(mr.addr, mr.length)[off : off + len(data)])
            if got != data:
                problems.append(
                    f"memory {mr_name}[{off}:{off + len(data)}] = {got!r}, want {data!r}"
                )
        return problems

    def _gpi_problems(self, want: dict[str, GpiExpect]) -> list[str]:
        problems = []
        for name, g in want.items():
            st = self._gpi_fabric(name).gpi_status(self.gpis[name])
            last = st["last_error"]
            got = GpiExpect(
                st["ci"], st["errors"],
                None if last is None else (last["index"], last["syndrome"], last["dest"]),
                tuple(st["counters"]) if g.counters is not None else None,
            )  # fmt: skip
            if got != g:
                problems.append(f"GPI queue {name}: {got}, want {g}")
        return problems

    def check(self) -> None:
        e, f = self.case.expect, self.w.fabrics
        problems = self._memory_problems(e.memory) + self._gpi_problems(e.gpi)
        for name, spec in e.cqe0.items():
            g = mlx5.decode_cqe(self.cq[name].buf[:64])
            for fld in ("opcode", "wqe_counter", "syndrome", "wqe_opcode", "byte_cnt"):
                wv = getattr(spec, fld)
                if wv is not None and getattr(g, fld) != wv:
                    problems.append(f"CQ {name} entry 0 .{fld} = {getattr(g, fld)}, want {wv}")
        for qp_name, want_c in e.qp_counters.items():
            got_c = f[self.rank_of[qp_name]].qp_counters(self.qps[qp_name])
            for k, v in want_c.items():
                if got_c[k] != v:
                    problems.append(f"QP {qp_name} {k} = {got_c[k]}, want {v}")
        for name in self.cq:
            if self.cq[name].collapsed:
                continue
            got = self.all_cqes(name)
            want = e.cqes.get(name, ())
            if len(got) != len(want):
                problems.append(f"CQ {name}: {len(got)} CQEs {got}, want {len(want)}")
                continue
            for k, (g, w) in enumerate(zip(got, want, strict=True)):
                for fld in (
                    "opcode",
                    "wqe_counter",
                    "syndrome",
                    "wqe_opcode",
                    "imm",
                    "byte_cnt",
                    "vendor_syndrome",
                ):
                    wv = getattr(w, fld)
                    if wv is not None and getattr(g, fld) != wv:
                        problems.append(f"CQ {name}[{k}].{fld} = {getattr(g, fld)}, want {wv}")
                if w.qp is not None and g.qpn != self.number(w.qp):
                    problems.append(f"CQ {name}[{k}].qpn = {g.qpn:#x}, want {w.qp}")
        for qp_name, state in e.states.items():
            got_state = f[self.rank_of[qp_name]].qp_state(self.qps[qp_name])
            if got_state != state:
                problems.append(f"QP {qp_name} state {got_state.name}, want {state.name}")
        for rank, deltas in e.counters.items():
            now = f[rank].counters()
            for k, v in deltas.items():
                if now[k] - self.before[rank][k] != v:
                    problems.append(
                        f"rank {rank} counter {k} +{now[k] - self.before[rank][k]}, want +{v}"
                    )
        for rank in range(self.case.world):
            got_errs = self.w.errors(rank)
            want_errs = e.errors.get(rank, ())
            if Counter(g.kind for g in got_errs) != Counter(w.kind for w in want_errs):
                problems.append(
                    f"rank {rank} error records {[str(g) for g in got_errs]}, want {want_errs}"
                )
                continue
            for w in want_errs:
                match = [
                    g
                    for g in got_errs
                    if g.kind == w.kind
                    and (w.qp is None or g.qpn == self.number(w.qp))
                    and (w.expected is None or g.expected == w.expected)
                    and (w.found is None or g.found == w.found)
                ]
                if not match:
                    problems.append(f"rank {rank}: no error record like {w} in {got_errs}")
        for cq_name, status in e.cq_status.items():
            got_status = self.w.cq_status(self.cq[cq_name].rank, self.cqs[cq_name])
            if got_status != status:
                problems.append(f"CQ {cq_name} status {got_status}, want {status}")
        for dct_name, n in e.dct_key_violations.items():
            got_n = self.w.dct_key_violations(self.rank_of[dct_name], self.dcts[dct_name])
            if got_n != n:
                problems.append(f"DCT {dct_name} key violations {got_n}, want {n}")
        if e.fa_olds:
            olds: list[int] = []
            for mr_name, off, count in e.fa_olds:
                mr = self.mrs[mr_name]
                olds += self.w.view(mr.addr + off, 8 * count).view(np.uint64).tolist()
            want_olds = [k * e.fa_step for k in range(len(olds))]
            if sorted(olds) != want_olds:
                problems.append(f"fetch-add old values {sorted(olds)}, want {want_olds}")
        assert not problems, f"case {self.case.name}:\n  " + "\n  ".join(problems)


def run_case(case: Case, engine: str) -> None:
    r = CaseRun(case, engine)
    try:
        r.setup()
        r.run(case.steps)
        r.check()
    finally:
        r.w.close()
