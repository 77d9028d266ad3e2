"""--submitter doca without a GPU: it is registered, its knobs are declared once and refused
with the other submitters, every refusal happens in pre-flight with its reason (headers, nvcc,
GPU/CuPy, unsupported handler/scope/op combinations, DC, msg-rate shapes, host-thread handlers
on GPU-resident queues), the queue
options reach bring-up (emu creates DOCA's queues and sizes its segment for the proxy words),
and the kernels' slot walk covers each lane's slots as msg-rate's validation expects."""

from __future__ import annotations

import itertools
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

from gicbench.config import RunConfig
from gicbench.errors import ConfigError, UnsupportedError
from gicbench.fabric.base import Access
from gicbench.fabric.registry import FabricPlan, QueueOptions
from gicbench.plan import all_knobs, make_plan
from gicbench.platform import LazyProbes, Probe
from gicbench.submit import base as submitters
from gicbench.submit.doca import headers
from gicbench.submit.doca.layout import CqType, NicHandler, Scope, Sharing, place, slot
from gicbench.submit.doca.params import CQ_TYPES, HANDLERS, SCOPES, SHARINGS, DocaParams
from gicbench.submit.doca.submitter import DocaSubmitter

REPO = Path(__file__).resolve().parents[1]


def gpu_probes() -> LazyProbes:
    """Probes that say a GPU and CuPy are here (the rest of pre-flight is real)."""
    p = LazyProbes()
    p["cupy"] = Probe("cupy", True, "faked for the test")
    return p


def plan(probes: LazyProbes | None = None, **kw):
    return make_plan(RunConfig.build(**kw), probes if probes is not None else gpu_probes())


@pytest.fixture
def with_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pre-flight finds headers and nvcc (availability is about this machine, not the test)."""
    fake = headers.Gpunetio(REPO, "3.8.0", "4.0.0", "test")
    monkeypatch.setattr(headers, "find", lambda: fake)
    monkeypatch.setattr("gicbench.submit.doca.build.nvcc", lambda: "/usr/bin/true")


def test_registered_with_its_shapes() -> None:
    assert "doca" in submitters.names()
    cls = submitters.get("doca")
    assert cls is DocaSubmitter and cls.needs_gpu and not cls.cpu_progress


def test_knobs_are_declared_once_with_their_choices() -> None:
    known = all_knobs()
    assert known["doca_handler"].choices == HANDLERS == (
        "cpu-proxy", "gpu-sm-db", "gpu-sm-bf", "gpu-sm-no-dbr", "cpu-proxy-free-flow"
    )  # fmt: skip
    assert known["doca_sharing"].choices == SHARINGS == ("exclusive", "cta", "gpu")
    assert known["doca_scope"].choices == SCOPES == ("thread", "warp")
    assert known["doca_cq"].choices == tuple(CQ_TYPES) == ("64b", "collapsed")


def test_knob_values_reach_the_params(with_headers: None) -> None:
    p = plan(experiments=["single-op"], submitter="doca", modes=("issue", "put_completion"),
             doca_handler="cpu-proxy-free-flow", doca_sharing="cta", doca_scope="thread",
             doca_cq="collapsed")  # fmt: skip
    sp = p.submitter_params
    assert isinstance(sp, DocaParams)
    assert sp.nic_handler == NicHandler.CPU_PROXY_FREE_FLOW and sp.sharing_mode == Sharing.CTA
    assert sp.exec_scope == Scope.THREAD and sp.cq_type == CqType.CQ_64B_COLLAPSED
    fp = p.fabric_plan(_Topo(), 1, p.layout(2))
    assert fp.queue_options.qp == {"dbr": True}
    assert fp.queue_options.cq == {"collapsed": True, "overrun_ignore": True}
    assert fp.queue_options.scratch_per_qp == 8 * p.cfg.sq_depth and fp.scratch_bytes == 8 * 256 * 1
    assert fp.mr_domain == "host-mapped"


class _Topo:
    size, local_size, nodes = 2, 2, 1


@pytest.mark.parametrize(
    ("handler", "qp", "scratch"),
    [("gpu-sm-db", {"dbr": True}, 0), ("gpu-sm-no-dbr", {"dbr": False}, 0),
     ("gpu-sm-bf", {"dbr": True}, 0), ("cpu-proxy", {"dbr": True}, 8),
     ("cpu-proxy-free-flow", {"dbr": True}, 8 * 256)],
)  # fmt: skip
def test_queue_options_per_handler(handler: str, qp: dict, scratch: int) -> None:
    o = DocaSubmitter.queue_options(DocaParams(doca_handler=handler), 256)
    assert o.qp == qp and o.scratch_per_qp == scratch
    assert o.cq == {"collapsed": False, "overrun_ignore": True}


def test_value_outside_the_choices_is_refused_naming_them(with_headers: None) -> None:
    with pytest.raises(ConfigError, match="gpu-sm-db") as e:
        plan(experiments=["msg-rate"], submitter="doca", doca_handler="gpu-sm-dbx")
    assert "doca" in str(e.value) or "handler" in str(e.value)


def test_doca_knobs_are_refused_with_another_submitter() -> None:
    with pytest.raises(ConfigError, match="only with --submitter doca"):
        plan(experiments=["msg-rate"], doca_sharing="gpu")


def test_no_cupy_says_why(with_headers: None) -> None:
    p = LazyProbes()
    p["cupy"] = Probe("cupy", False, "not importable (ModuleNotFoundError)")
    with pytest.raises(UnsupportedError, match="needs an NVIDIA GPU and CuPy"):
        plan(p, experiments=["msg-rate"], submitter="doca")


def test_no_headers_gives_unavailable_reason(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no .cache/gpunetio here
    monkeypatch.setenv(headers.ENV_DIR, str(tmp_path / "nothing"))
    monkeypatch.setattr(headers, "_installed_include", lambda: None)
    with pytest.raises(UnsupportedError, match="DOCA GPUNetIO headers not found"):
        plan(experiments=["msg-rate"], submitter="doca")


def test_no_nvcc_says_why(monkeypatch, with_headers: None) -> None:
    monkeypatch.setattr("gicbench.submit.doca.build.nvcc", lambda: None)
    with pytest.raises(UnsupportedError, match="nvcc not found"):
        plan(experiments=["msg-rate"], submitter="doca")


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"experiments": ["single-op"], "min_size": 16}, "carries one 8-byte value"),
        ({"experiments": ["single-op"], "modes": ("issue",), "doca_scope": "warp"},
         "warp-scope p is a stub"),
        ({"experiments": ["single-op"], "doca_handler": "cpu-proxy", "engine": "cuda",
          "queues": "device"}, "a CPU store cannot reach it"),
        ({"experiments": ["msg-rate"], "doca_handler": "cpu-proxy-free-flow", "engine": "cuda",
          "queues": "device"}, "--queues device: its host thread"),
        ({"experiments": ["msg-rate"], "transport": "dc", "payload": "pointer"},
         "no DC address vector"),
        ({"experiments": ["msg-rate"], "batch": 4}, "rings once per op"),
        ({"experiments": ["msg-rate"], "threads": 3, "qps": 2, "doca_sharing": "gpu"},
         "a multiple of 2"),
        ({"experiments": ["msg-rate"], "threads": 4, "qps": 2}, "one thread per QP"),
        ({"experiments": ["msg-rate"], "threads": 64, "qps": 4, "doca_scope": "warp",
          "payload": "pointer", "doca_sharing": "gpu"}, "a multiple of 128"),
        ({"experiments": ["msg-rate"], "threads": 4096, "qps": 2, "doca_sharing": "cta"},
         "<= 1024 threads"),
    ],
)  # fmt: skip
def test_unsupported_combinations_are_refused_in_preflight(
    with_headers: None, kw: dict, match: str
) -> None:
    if kw["experiments"] == ["single-op"] and kw.get("pattern") != "pairs":
        kw.setdefault("modes", ("issue", "put_completion"))
    with pytest.raises((UnsupportedError, ConfigError), match=match):
        plan(submitter="doca", **kw)


@pytest.mark.parametrize(
    "kw",
    [
        {"experiments": ["single-op"], "modes": ("issue", "put_completion")},
        {"experiments": ["single-op"], "modes": ("put_completion",), "payload": "pointer",
         "min_size": 8, "max_size": 4096, "doca_scope": "warp"},
        {"experiments": ["completion-scope"], "pattern": "fan-out", "qps": 4},
        {"experiments": ["completion-scope"], "pattern": "pairs", "qps": 4},
        {"experiments": ["single-op"], "modes": ("round_trip",), "pattern": "pairs"},
        {"experiments": ["msg-rate"], "threads": 2, "qps": 2},
        {"experiments": ["msg-rate"], "threads": 256, "qps": 2, "doca_sharing": "cta"},
        {"experiments": ["msg-rate"], "threads": 128, "qps": 2, "doca_sharing": "gpu",
         "doca_scope": "warp", "payload": "pointer", "min_size": 64},
    ],
)  # fmt: skip
def test_supported_combinations_pass_preflight(with_headers: None, kw: dict) -> None:
    for h in HANDLERS:
        plan(submitter="doca", doca_handler=h, **kw)


def test_cli_refuses_without_gpu_with_exit_2() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "gicbench", "run", "msg-rate", "--submitter", "doca",
         "--doca-handler", "cpu-proxy"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert "submitter doca is not available here" in r.stderr


# ---- the slot walk (the kernels' payload layout) against msg-rate's validation --------------
@pytest.mark.parametrize(
    ("sharing", "scope", "nqps", "threads"),
    [(Sharing.EXCLUSIVE, Scope.THREAD, 3, 3), (Sharing.EXCLUSIVE, Scope.WARP, 2, 64),
     (Sharing.CTA, Scope.THREAD, 2, 8), (Sharing.CTA, Scope.WARP, 2, 128),
     (Sharing.GPU, Scope.THREAD, 4, 8), (Sharing.GPU, Scope.WARP, 2, 128)],
)  # fmt: skip
def test_slot_walk_covers_each_lane_contiguously(sharing, scope, nqps: int, threads: int) -> None:
    """Walk every unit's ops as the kernel does (a warm-up launch, then the measured one): each
    QP's slots are exactly 0..count-1, count being what rate_lane_messages tells the receiver."""
    warp = scope == Scope.WARP
    nunits = threads // (32 if warp else 1)
    blocks = nqps if sharing == Sharing.CTA else 1
    W, M = 3, 5
    seen: dict[int, list[int]] = {q: [] for q in range(nqps)}
    for first, iters in ((0, W), (W, M)):
        for u, i in itertools.product(range(nunits), range(iters)):
            q, rank, per = place(sharing, u, nunits, nqps, blocks)
            for lane in range(32) if warp else (None,):
                seen[q].append(slot(first, i, per, rank, lane))
    counts = DocaSubmitter.rate_lane_messages(None, nqps, threads, 1, W + M)  # type: ignore[arg-type]
    for q in range(nqps):
        assert sorted(seen[q]) == list(range(counts[q])), q


def test_emu_sizes_its_segment_for_the_proxy_words() -> None:
    """The scratch region QueueOptions asks for is registered after bring-up's two regions: the
    provider must have sized the segment and the MR table for it."""
    from gicbench.fabric.emu.provider import EmuProvider

    qo = DocaSubmitter.queue_options(DocaParams(doca_handler="cpu-proxy-free-flow"), 1024)
    fp = FabricPlan(world_size=1, local_size=1, nodes=1, rc_peers=1, rc_qps_per_peer=4, dcis=0,
                    dcts=0, sq_depth=1024, mr_sizes=(1 << 20, 1 << 20), progress="inline",
                    autonomous_progress=False, queue_options=qo)  # fmt: skip

    class T:
        rank, size = 0, 1

    f = EmuProvider.open(fp, T(), "d-" + uuid.uuid4().hex[:8], {"progress": "inline"})
    try:
        for _ in range(4):
            cq = f.create_cq(1024, **qo.cq)
            f.create_qp(cq, 1024, **qo.qp)
        f.register(1 << 20, Access.LOCAL_WRITE)
        f.register(1 << 20, Access.LOCAL_WRITE)
        mr = f.register(fp.scratch_bytes, Access.LOCAL_WRITE, domain="host-mapped")
        assert mr.length >= 4 * 8 * 1024
    finally:
        f.close()


def test_default_queue_options_change_nothing() -> None:
    assert submitters.get("host").queue_options(None, 256) == QueueOptions()


def _script_vars() -> dict[str, list[str]]:
    """The command-line pieces bench/doca_vs_gda.sh assigns (G, MAIN, R32)."""
    import re
    import shlex

    text = (REPO / "bench" / "doca_vs_gda.sh").read_text().replace("\\\n", " ")
    return {m[1]: shlex.split(m[2]) for m in re.finditer(r'^(G|MAIN|R32)="([^"]*)"', text, re.M)}


VARIANTS = [(["--submitter", "gpu", "--ordering", o], ["--publish", "thread"])
            for o in ("gpu-fence", "sys-fence")] + [
    (["--submitter", "doca", "--doca-handler", h], ["--doca-sharing", "gpu"]) for h in HANDLERS
]  # fmt: skip


@pytest.mark.parametrize(("variant", "r32_extra"), VARIANTS)
def test_side_by_side_runs_pass_preflight(
    with_headers: None, variant: list[str], r32_extra: list[str]
) -> None:
    """Every run bench/doca_vs_gda.sh makes is accepted by pre-flight (a GPU faked present)."""
    from gicbench.cli.main import build_parser
    from gicbench.cli.run import config_from_args

    v = _script_vars()
    assert set(v) == {"G", "MAIN", "R32"}
    common = v["G"][v["G"].index("run") + 1 :]
    for exp, extra in (("MAIN", []), ("R32", r32_extra)):
        a = build_parser().parse_args(["run", *common, *v[exp], *variant, *extra])  # its order
        p = make_plan(config_from_args(a), gpu_probes())
        assert p.cfg.submitter == variant[1]
        assert [e.name for e in p.experiments] == (
            ["single-op", "msg-rate", "completion-scope"] if exp == "MAIN" else ["msg-rate"]
        )


# ---- the loops' host side, with the GPU replaced (numpy for CuPy, a fake DocaDevice) ---------
class _Counters:
    def __init__(self) -> None:
        self.c = {"doorbells": 0, "cqes": 0, "stale_wqes": 0, "dbrec_lag": 0, "bad_doorbells": 0}

        self.quiesced = 0

    def counters(self) -> dict[str, int]:
        return dict(self.c)

    def quiesce(self) -> None:  # the CUDA engine adds its warps' counts here
        self.quiesced += 1


class _FakeDev:
    """Records each launch and answers as the kernels would: every unit ok, its last ticket,
    time marks every `window` ops, cycles per op."""

    def __init__(self, fab: _Counters, status: int = 0, bump: str | None = None) -> None:
        self.fab, self.status, self.bump, self.calls = fab, status, bump, []
        from gicbench.submit.doca.headers import Gpunetio

        self.headers = Gpunetio(REPO, "3.8.0", "4.0.0", "test")

    def _res(self, n: int, total: int):
        from gicbench.submit.doca.layout import RESULT_DTYPE

        r = np.zeros(n, RESULT_DTYPE)
        r["status"], r["ticket"], r["total_ns"] = self.status, 7, total
        return r

    def post(self, qps, lanes, job, handler, sharing, scope, blocks, threads, marks=False):
        self.calls.append(("post", qps.copy(), lanes.copy(), job.copy(), blocks, threads))
        qps += 1  # the kernel moved DOCA's indices: they must be written back
        self.fab.c["doorbells"] += int(job["iters"])
        if self.bump:
            self.fab.c[self.bump] += 1
        n = blocks * threads // (32 if scope == Scope.WARP else 1)
        res = self._res(n, 10_000)
        if not marks:
            return res
        w, mw = int(job["window"]), int(job["max_windows"])
        m = np.zeros((n, mw), np.uint64)
        k = int(job["iters"]) // w
        m[:, :k] = (np.arange(1, k + 1) * 1000).astype(np.uint64)
        return res, m

    def latency(self, qps, lanes, job, handler, sharing, scope, blocks, threads):
        self.calls.append(("latency", qps.copy(), lanes.copy(), job.copy(), blocks, threads))
        qps += 1
        it = int(job["iters"])
        cyc = np.zeros((1, it, 2), np.uint64)
        cyc[0, :, 0], cyc[0, :, 1] = 300, 3000  # at 1.5 GHz: 200 ns, 2000 ns
        return self._res(1, 5), cyc


class _Shim:
    """numpy standing in for CuPy's few calls here."""

    asarray = staticmethod(np.asarray)
    ascontiguousarray = staticmethod(np.ascontiguousarray)


def _fake_submitter(monkeypatch, params: DocaParams, nqps: int, **dev_kw):
    from gicbench.submit.doca import submitter as mod
    from gicbench.submit.doca.layout import QP_BYTES
    from gicbench.submit.gpu_runtime.device_map import DeviceMap

    monkeypatch.setattr(mod.smclock, "measure", lambda cp, *a, **k: 1.5e9)
    monkeypatch.setattr(mod, "stage", lambda cp, bufs: ("kept", [0xD0000 + i for i in
                                                                 range(len(bufs))]))  # fmt: skip
    s = object.__new__(DocaSubmitter)
    fab = _Counters()
    s.rank, s.fabric, s.timeout_ns, s.params = 0, fab, 5_000_000_000, params
    s.cp, s.handler, s.sharing = _Shim(), params.nic_handler, params.sharing_mode
    s.scope, s.cq_type, s.ringer, s.details = params.exec_scope, params.cq_type, None, {}
    s.dev = _FakeDev(fab, **dev_kw)
    s.dm = DeviceMap(mr_starts=[0x1000], mr_dev=[0x7F000000])
    s.index = {100 + i: i for i in range(nqps)}
    s.qps = np.zeros((nqps, QP_BYTES), np.uint8)
    s.sm_clock_hz = 1.5e9
    return s


def _work_lanes(n: int):
    from types import SimpleNamespace

    from gicbench.submit.base import Buffer, Lane

    return tuple(
        Lane(SimpleNamespace(qpn=100 + i), 1, Buffer(0x1000 + i * 512, 0x11, 512),
             Buffer(0x900000 + i * 512, 0x22, 512))
        for i in range(n)
    )  # fmt: skip


def test_latency_loop_host_side(monkeypatch) -> None:
    from gicbench.submit.base import LatencyWork
    from gicbench.submit.doca.layout import SEQ, Op

    s = _fake_submitter(monkeypatch, DocaParams(), 3)
    lanes = _work_lanes(3)
    ns = s.latency(LatencyWork(lanes, 1, "put_completion", 64, False, True, 40, 10))
    assert ns.shape == (40,) and (ns == 2000).all()  # warm-up dropped, cycles at 1.5 GHz
    kind, qps, lrec, job, blocks, threads = s.dev.calls[-1]
    assert kind == "latency" and (blocks, threads) == (1, 1)
    assert int(job["op"]) == Op.PUT and int(job["iters"]) == 50 and int(job["nqps"]) == 1
    assert int(job["slots"]) == 1 and int(job["flags"]) == SEQ and int(job["nquiet"]) == 3
    assert len(lrec) == 1 and int(lrec["src"][0]) == 0x1000 + 512  # the selected lane first
    assert int(lrec["src_dev"][0]) == 0x7F000000 + 512 and int(lrec["dst_rkey_be"][0]) == 0x22 << 24
    assert qps.shape == (3 * 296,) and (s.qps == 1).all()  # gathered, written back
    assert s.point_details()["doca_version"] == "4.0.0"
    assert s.latency(LatencyWork(lanes, 0, "issue", 8, True, False, 5, 0)).tolist() == [200] * 5
    assert int(s.dev.calls[-1][3]["op"]) == Op.P and int(s.dev.calls[-1][3]["nquiet"]) == 0


@pytest.mark.parametrize(
    ("sharing", "scope", "threads", "grid"),
    [("exclusive", "thread", 2, (1, 2)), ("cta", "thread", 64, (2, 32)),
     ("gpu", "warp", 128, (1, 128)), ("gpu", "thread", 2048, (2, 1024))],
)  # fmt: skip
def test_rate_loop_host_side(monkeypatch, sharing, scope, threads, grid) -> None:
    from gicbench.submit.base import RateWork
    from gicbench.submit.doca.layout import VALUE_FROM_SRC, Op

    p = DocaParams(doca_sharing=sharing, doca_scope=scope)
    s = _fake_submitter(monkeypatch, p, 2)
    inline = scope == "thread"
    r = s.rate(RateWork(_work_lanes(2), threads, 1, 8, inline, 100, 10, 25))
    warm, main = s.dev.calls
    assert (warm[4], warm[5]) == grid == (main[4], main[5])
    assert int(warm[3]["iters"]) == 10 and int(warm[3]["first"]) == 0
    assert int(main[3]["iters"]) == 100 and int(main[3]["first"]) == 10
    assert int(main[3]["slots"]) == 512 // 8 and int(main[3]["flags"]) == VALUE_FROM_SRC
    assert int(main[3]["op"]) == (Op.P if inline else Op.PUT)
    assert int(main[3]["window"]) == 25 and int(main[3]["max_windows"]) == 5
    if inline:  # p's values come from the staged GPU copy
        assert main[2]["src_dev"].tolist() == [0xD0000, 0xD0001]
    units = threads // (32 if scope == "warp" else 1)
    assert r.windows_ns.size == units * 5 and r.elapsed_ns == 10_000
    assert r.messages == 100 * threads and r.doorbells == 100 and (s.qps == 2).all()
    assert s.rate_lane_messages(2, threads, 1, 110) == [threads // 2 * 110] * 2


def test_engine_counters_must_stay_zero(monkeypatch) -> None:
    from gicbench.errors import FabricError
    from gicbench.submit.base import RateWork

    for bump in ("stale_wqes", "bad_doorbells"):
        s = _fake_submitter(monkeypatch, DocaParams(), 1, bump=bump)
        with pytest.raises(FabricError, match=f"{bump}=1"):
            s.rate(RateWork(_work_lanes(1), 1, 1, 8, True, 10, 0, 5))
    s = _fake_submitter(monkeypatch, DocaParams(doca_handler="cpu-proxy"), 1, bump="dbrec_lag")
    with pytest.raises(FabricError, match="dbrec_lag=1"):
        s.rate(RateWork(_work_lanes(1), 1, 1, 8, True, 10, 0, 5))


@pytest.mark.parametrize("handler", ["gpu-sm-db", "gpu-sm-bf"])
def test_early_ring_handlers_record_a_lagging_record(monkeypatch, handler: str) -> None:
    """DOCA's DB and BlueFlame handlers ring before they store the record (by design): the
    engine's dbrec_lag is recorded in the point, not a failure."""
    from gicbench.submit.base import RateWork

    s = _fake_submitter(monkeypatch, DocaParams(doca_handler=handler), 1, bump="dbrec_lag")
    s.rate(RateWork(_work_lanes(1), 1, 1, 8, True, 10, 0, 5))
    assert s.point_details()["emu_dbrec_lag"] == 1


@pytest.mark.parametrize(
    ("status", "exc"),
    [(2, "CompletionTimeout"), (3, "CompletionError"), (4, "FabricError"),
     (5, "CompletionTimeout")],
)  # fmt: skip
def test_unit_status_becomes_the_exception(monkeypatch, status: int, exc: str) -> None:
    from gicbench import errors
    from gicbench.submit.base import LatencyWork

    s = _fake_submitter(monkeypatch, DocaParams(), 1, status=status)
    with pytest.raises(getattr(errors, exc)):
        s.latency(LatencyWork(_work_lanes(1), 0, "issue", 8, True, False, 5, 0))


def test_blueflame_thread_blocks_fit_shared_memory(with_headers: None, monkeypatch) -> None:
    """gpu-sm-bf in thread scope stages 64 B per thread in shared memory: a block of 1024 threads
    (64 KB) would fail to launch, so blocks stay at 512 threads."""
    with pytest.raises(UnsupportedError, match="<= 512 threads"):
        plan(experiments=["msg-rate"], submitter="doca", doca_handler="gpu-sm-bf",
             doca_sharing="cta", threads=1024, qps=1)  # fmt: skip
    plan(experiments=["msg-rate"], submitter="doca", doca_handler="gpu-sm-db",
         doca_sharing="cta", threads=1024, qps=1)  # fmt: skip
    s = _fake_submitter(monkeypatch, DocaParams(doca_handler="gpu-sm-bf", doca_sharing="gpu"), 1)
    assert s._rate_shape(1, 1024) == (2, 512)
    s = _fake_submitter(monkeypatch, DocaParams(doca_sharing="gpu"), 1)
    assert s._rate_shape(1, 1024) == (1, 1024)


def test_round_trip_and_responder_host_side(monkeypatch) -> None:
    """round_trip: the latency kernel in MODE_RTT polls the reply buffer's GPU address (its last
    8 bytes carry the peer's sequence word) and returns call -> reply; the responder runs the
    same kernel in MODE_RESPOND on its lane, watching the request's landing buffer."""
    from gicbench.submit.base import Buffer, LatencyWork, RespondWork
    from gicbench.submit.doca.layout import MODE_RESPOND, MODE_RTT, SEQ, Op

    s = _fake_submitter(monkeypatch, DocaParams(), 2)
    lanes = _work_lanes(2)
    reply = Buffer(0x1000 + 4096, 0x11, 512)
    ns = s.latency(LatencyWork(lanes, 0, "round_trip", 64, False, True, 20, 5, reply=reply))
    assert ns.shape == (20,) and (ns == 2000).all()
    job = s.dev.calls[-1][3]
    assert int(job["mode"]) == MODE_RTT and int(job["reply"]) == 0x7F000000 + 4096
    assert int(job["flags"]) == SEQ and int(job["nquiet"]) == 0 and int(job["iters"]) == 25
    with pytest.raises(ConfigError, match="reply"):
        s.latency(LatencyWork(lanes, 0, "round_trip", 64, False, False, 20, 5))
    watch = Buffer(0x1000 + 8192, 0x11, 512)
    s.respond(RespondWork(lanes[1], watch, 8, True, 25))
    kind, qps, lrec, job, blocks, threads = s.dev.calls[-1]
    assert kind == "latency" and (blocks, threads) == (1, 1) and qps.shape == (296,)
    assert int(job["mode"]) == MODE_RESPOND and int(job["reply"]) == 0x7F000000 + 8192
    assert int(job["op"]) == Op.P and int(job["iters"]) == 25 and int(job["flags"]) == SEQ
    assert int(lrec["src"][0]) == 0x1000 + 512  # the responder's own lane
    assert s.fabric.quiesced >= 2  # counters read with every doorbell executed


def test_host_thread_handlers_refuse_gpu_resident_queues(monkeypatch) -> None:
    from types import SimpleNamespace

    from gicbench.fabric.base import MemoryDomain

    s = _fake_submitter(monkeypatch, DocaParams(doca_handler="cpu-proxy"), 1)
    qp = SimpleNamespace(dci=False, sq=SimpleNamespace(domain=MemoryDomain.DEVICE, wqebb_cnt=64))
    with pytest.raises(UnsupportedError, match="a CPU store cannot reach it"):
        s.attach_queues([qp])
    for h in ("gpu-sm-db", "gpu-sm-no-dbr", "gpu-sm-bf"):  # the GPU rings: either placement
        plan(experiments=["single-op"], submitter="doca", doca_handler=h, engine="cuda",
             queues="device", modes=("issue", "put_completion"))  # fmt: skip


def test_preload_names_every_kernel_of_the_module() -> None:
    """DocaDevice.preload() loads these before emu's CUDA engine starts: every kernel the loops
    can launch (kernel_name over handlers x sharing x scopes x shapes) and the builder."""
    from gicbench.submit.doca.device import DocaDevice
    from gicbench.submit.doca.layout import SHAPES, kernel_name

    names = object.__new__(DocaDevice).kernel_names()
    want = {kernel_name(h, s, e, sh) for h in NicHandler for s in Sharing for e in Scope
            for sh in SHAPES}  # fmt: skip
    assert set(names) == want | {"gicbench_doca_init"} and len(names) == 61


def test_harness_preloads_before_the_nic_opens() -> None:
    """The harness calls Submitter.preload before provider.open (an engine kernel may start
    there); the base class does nothing."""
    import inspect

    from gicbench import harness
    from gicbench.submit.base import Submitter

    src = inspect.getsource(harness)
    assert src.index("submitter.preload(") < src.index("provider.open(")
    assert Submitter.preload(None, 0) is None


@pytest.mark.parametrize("name", ["host", "gpu", "proxy", "doca"])
def test_every_submitter_passes_the_one_check_provider_call(with_headers: None, name: str) -> None:
    """make_plan calls Submitter.check_provider once with (params, points, provider, caps,
    provider_params). Three branches had each added their own signature; merged, every plan
    raised TypeError (the host submitter's too)."""
    plan(experiments=["single-op"], submitter=name, modes=("issue", "put_completion"))
    if name in ("gpu", "doca"):  # knobs refused against emu's --queues device, by the same call
        kw = {"doorbell": "host"} if name == "gpu" else {"doca_handler": "cpu-proxy"}
        with pytest.raises((ConfigError, UnsupportedError), match="--queues device"):
            plan(experiments=["single-op"], submitter=name, modes=("issue", "put_completion"),
                 engine="cuda", queues="device", **kw)  # fmt: skip
