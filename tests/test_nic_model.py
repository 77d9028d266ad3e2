"""NIC model presets and files: every constant stated with its source, the derivations in the
preset file reproduced from the published constants they cite, bad input refused naming the
field, and `--nic-model` end to end (run.json, traces, the live table, the report)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import h5py
import pytest
from launching import launch

from gicbench._native import emu
from gicbench.errors import ConfigError
from gicbench.fabric.emu import nic_model as nm

PRESET = "cx7-200g-ib-hopper"
QUICK = ["single-op", "-n", "40", "-w", "5", "--quiet", "--progress", "inline"]

# The first paper's published constants the preset cites (arXiv 2610.01380).
CQE_AFTER_DOORBELL_NS = 3300.0  # §4.1, instrumented, 8 B inline, one QP (P-IB)
INLINE_SAVES_NS = 610.0  # §4.1 / Table 3
PORT_CEILING_MPS = 260.0  # Table 5
GOODPUT_REFERENCE_GBS = 24.8  # Fig. 8
ALL_TO_ALL_ONSET = 1350  # §4.3.3, dense 128-PE sweep (P-H100)
RECEIVE_ONLY_LATER = 10  # §4.3.3: receive-only declines at about ten times larger sets
SEND_RECEIVE_FROM, SEND_RECEIVE_TO = 152.0, 74.0  # §4.3.3 / Fig. 10a, M msg/s
WRITES_PER_VISIT = 32  # §4.3.3's setup: each warp posts 32 writes per connection visit
DC_ABOVE_RC_NS = 450.0  # §4.3.3


@pytest.fixture(scope="module")
def preset() -> nm.NicModel:
    m = nm.load(PRESET)
    assert m is not None
    return m


def test_every_preset_states_every_parameter_with_its_source() -> None:
    assert PRESET in nm.preset_names()
    assert nm.PRESETS_FILE.is_file()  # installed beside the module
    for name in nm.preset_names():
        m = nm.load(name)
        assert m is not None and set(m.constants) == set(nm.SPECS)
        for key, c in m.constants.items():
            assert len(c.source) > 20, f"{name}.{key}: no source"
        assert set(m.native_params()) == set(emu.MODEL_PARAMS)


def test_the_derivations_follow_from_the_cited_constants(preset: nm.NicModel) -> None:
    v = preset.value
    assert v("dma_read_ns") == INLINE_SAVES_NS
    assert v("doorbell_ns") == v("dma_write_ns") == INLINE_SAVES_NS / 2
    assert v("context_fetch_ns") == INLINE_SAVES_NS
    assert v("port_msg_rate_mps") == v("recv_msg_rate_mps") == PORT_CEILING_MPS
    assert v("link_gbps") == 200
    assert v("dc_connect_ns") == DC_ABOVE_RC_NS
    lines = v("cache_lines")
    assert lines / (v("send_context_lines") + v("recv_context_lines")) == ALL_TO_ALL_ONSET
    assert lines / v("recv_context_lines") == ALL_TO_ALL_ONSET * RECEIVE_ONLY_LATER
    msg_ns = 1e3 / PORT_CEILING_MPS
    # one miss per visit of WRITES_PER_VISIT writes (the rest find the context just fetched)
    assert v("recv_miss_busy_ns") == pytest.approx(
        WRITES_PER_VISIT * msg_ns * (SEND_RECEIVE_FROM / SEND_RECEIVE_TO - 1), abs=1e-2)
    # the 24.8 GB/s reference from 200 Gb/s and the per-packet headers (a check, not a fit)
    mtu, hdr = v("mtu_bytes"), v("packet_header_bytes")
    assert v("link_gbps") / 8 * mtu / (mtu + hdr) == pytest.approx(GOODPUT_REFERENCE_GBS,
                                                                   abs=0.05)


def test_the_calibration_gives_the_published_doorbell_to_cqe_time(preset: nm.NicModel) -> None:
    """wire_ns is what 3.30 µs leaves after every other mechanism: the model's own arithmetic
    gives 3.30 µs for an 8 B inline write with the contexts cached."""
    s = emu.NicModelSim(preset.native_params(), 2)
    s.plan(0, 1, 1, 0x10001, 1, 8, False, 1, 0)  # warm both contexts
    t0 = 10**9
    w = s.plan(0, 1, 1, 0x10001, 1, 8, False, 1, t0)
    assert (w["t_cqe"] - t0) / 1e3 == pytest.approx(CQE_AFTER_DOORBELL_NS, abs=1.0)
    p = s.plan(0, 1, 1, 0x10001, 1, 8, True, 1, 2 * t0)
    assert (p["t_cqe"] - w["t_cqe"] - t0) / 1e3 == pytest.approx(INLINE_SAVES_NS, abs=0.5)


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "mine.toml"
    p.write_text(text)
    return p


def _preset_as_file(tmp_path: Path, preset: nm.NicModel, drop: str = "", **values: object) -> Path:
    def toml(v: object) -> str:  # a JSON string is a TOML basic string
        return json.dumps(v) if isinstance(v, str) else repr(v)

    lines = ['summary = "a user model"', f"late_slack_ns = {preset.late_slack_ns}"]
    for k, c in preset.constants.items():
        if k == drop:
            continue
        lines += [f"[params.{k}]", f"value = {toml(values.get(k, c.value))}",
                  f"source = {toml(c.source)}"]
    return _write(tmp_path, "\n".join(lines) + "\n")


def test_a_users_file_is_a_model(tmp_path: Path, preset: nm.NicModel) -> None:
    m = nm.load(str(_preset_as_file(tmp_path, preset, wire_ns=2000.0)))
    assert m is not None and m.name == "mine" and m.value("wire_ns") == 2000.0
    assert m.origin == str((tmp_path / "mine.toml").resolve()) and len(m.digest) == 64
    assert m.record()["params"]["wire_ns"] == 2000.0


@pytest.mark.parametrize(
    ("spec", "field", "allowed"),
    [
        ("nosuch", "nic_model (--nic-model)", PRESET),
        ("", "nic_model (--nic-model)", "a .toml file"),
        ("/nonexistent/x.toml", "nic_model (--nic-model)", "readable"),
    ],
)
def test_unknown_models_are_refused_naming_the_choices(spec, field, allowed) -> None:
    with pytest.raises(ConfigError) as e:
        nm.load(spec)
    assert e.value.field == field and allowed in e.value.allowed


@pytest.mark.parametrize(
    ("values", "drop", "field", "allowed"),
    [
        ({"wire_ns": -1.0}, "", "params.wire_ns.value", "a number of ns"),
        ({"wire_ns": "fast"}, "", "params.wire_ns.value", "a number of ns"),
        ({"link_gbps": 0}, "", "params.link_gbps.value", ">0"),
        ({"mtu_bytes": 4096.5}, "", "params.mtu_bytes.value", "an integer"),
        ({"send_context_lines": 20000}, "", "params.send_context_lines", "at most cache_lines"),
        ({}, "dc_connect_ns", "params.dc_connect_ns", "every parameter stated"),
    ],
)
def test_bad_values_in_a_file_are_refused_naming_the_field(tmp_path, preset, values, drop, field,
                                                           allowed) -> None:
    path = _preset_as_file(tmp_path, preset, drop=drop, **values)
    with pytest.raises(ConfigError) as e:
        nm.load(str(path))
    assert e.value.field.endswith(field), e.value.field
    assert allowed in e.value.allowed


def test_a_constant_without_its_source_or_with_unknown_keys_is_refused(tmp_path, preset) -> None:
    text = _preset_as_file(tmp_path, preset).read_text()
    no_source = text.replace('[params.wire_ns]\nvalue = 1034.6\nsource = ', '[params.wire_ns]\n'
                             'value = 1034.6\nnote = ', 1)  # fmt: skip
    with pytest.raises(ConfigError, match=r"params\.wire_ns\.note"):
        nm.load(str(_write(tmp_path, no_source)))
    with pytest.raises(ConfigError, match=r"params\.speed"):
        nm.load(str(_write(tmp_path, text + '\n[params.speed]\nvalue = 1\nsource = "x"\n')))
    with pytest.raises(ConfigError, match="colour"):
        nm.load(str(_write(tmp_path, 'colour = "red"\n' + text)))
    with pytest.raises(ConfigError, match="valid TOML"):
        nm.load(str(_write(tmp_path, "value = = 1")))


def test_a_file_that_is_not_a_small_regular_file_is_refused_without_reading_it(tmp_path) -> None:
    """/dev/zero never ends and a FIFO without a writer blocks its reader: both were a hang."""
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (nm.MAX_FILE_BYTES + 1))
    odd = "not a regular file"
    for path, why in (("/dev/zero", odd), (str(fifo), odd), (str(tmp_path), odd),
                      (str(big), "a larger file")):  # fmt: skip
        with pytest.raises(ConfigError) as e:
            nm.load(path)
        assert e.value.field == "nic_model (--nic-model)" and why in e.value.allowed, path


# ---- end to end --------------------------------------------------------------------------------


def test_a_bad_model_is_refused_before_anything_is_created(tmp_path: Path) -> None:
    r = launch(2, "run", *QUICK, "--nic-model", "nosuch", "-o", str(tmp_path / "r"), timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("invalid nic_model (--nic-model)='nosuch'") == 1, r.stderr
    assert not (tmp_path / "r").exists()


def test_a_modelled_run_says_so_in_run_json_traces_table_and_report(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = launch(2, "run", "single-op", "-n", "40", "-w", "5", "--progress", "inline",
               "--modes", "put_completion", "--nic-model", PRESET, "-o", str(out),
               timeout=240)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"[modelled: {PRESET}" in r.stdout  # every row of the live table
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["nic"]["nic_model"] == PRESET
    assert manifest["nic"]["nic_model_spec"]["params"]["wire_ns"] == 1034.6
    with h5py.File(out / "rank-00000.h5") as h:
        assert json.loads(h.attrs["nic"])["nic_model"] == PRESET
        point = h["points"][sorted(h["points"])[0]]
        results = json.loads(point.attrs["results"])
        assert results["nic_model"] == PRESET and "nic_model_saturated" in results
    r = launch(1, "report", str(out), timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    report = (out / "report.md").read_text()
    assert f"NIC model: {PRESET}" in report and "not a measurement of hardware" in report


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.nvcc
def test_the_model_compiles_for_the_gpu(tmp_path: Path) -> None:
    """The CUDA engine can charge the same arithmetic: the header compiles for sm_90 with a
    kernel that plans a WQE (compiled, not run: no GPU is needed)."""
    import subprocess

    src = tmp_path / "m.cu"
    src.write_text(
        '#include "nic_model.cuh"\n'
        "using namespace gicbench::nic_model;\n"
        "struct S { __device__ void lock(uint32_t* l) { while (atomicCAS(l, 0u, 1u)) {} }\n"
        "  __device__ void unlock(uint32_t* l) { atomicExch(l, 0u); }\n"
        "  __device__ void add(uint64_t* c, uint64_t v) {\n"
        "    atomicAdd(reinterpret_cast<unsigned long long*>(c), v); } };\n"
        "__global__ void k(Params p, Shared* own, Shared* resp, uint64_t* out) {\n"
        "  Tx tx; Qp qp; uint64_t spare = 0; S s;\n"
        "  WqeDesc w{kWrite, 1, 0, 1, 8, 1, 0x10001};\n"
        "  out[0] = plan_wqe(p, tx, qp, own, resp, spare, w, 1, out[1], s).t.t_cqe; }\n")
    cuda = Path(nm.__file__).parents[2] / "cuda"
    r = subprocess.run(["nvcc", "-std=c++17", "-arch=sm_90", "-c", str(src), "-I", str(cuda),
                        "-o", str(tmp_path / "m.o")], capture_output=True, text=True,
                       timeout=300, check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr


def _rates(preset: nm.NicModel, n: int, a_sends: bool, b_sends: bool, laps: int = 3,
           targets: int = 1, w: int = WRITES_PER_VISIT) -> tuple:
    """M msg/s out of NIC 0 in the last lap, and the receive-side misses at NIC 1, for n QPs
    on NIC 0 visited in a cycle, w 8 B writes per visit, all announced at once; QP q writes to
    NIC 1 + q % targets (and with b_sends NIC 1's QPs write back to NIC 0's)."""
    s = emu.NicModelSim(preset.native_params(), 1 + targets)
    out = []
    for lap in range(laps):
        for q in range(n):
            dst = 1 + q % targets
            for _ in range(w):
                if a_sends:
                    t = s.plan(0, 1 + q, dst, (dst << 16) + 1 + q // targets, 1, 8, False, 1,
                               0)["t_exec"]
                    if lap == laps - 1:
                        out.append(t)
                if b_sends:
                    s.plan(1, 0x10001 + q, 0, 1 + q, 1, 8, False, 1, 0)
    misses = s.counters(1)["nic_model_recv_misses"]
    gaps = sorted(out)
    rate = (len(gaps) - 1) / ((gaps[-1] - gaps[0]) / 1e12) / 1e6 if gaps else 0.0
    return rate, misses


def test_the_presets_connection_scaling_comes_from_its_cache(preset: nm.NicModel) -> None:
    """All-to-all declines past 1,350 connections per NIC, by the paper's 74/152 at its 32
    writes per visit (a miss per visit); receive-only only past ten times that; a send-only NIC
    holds the port's ceiling to 32,768 QPs (spread over seven targets, as the paper's eight-PE
    runs do)."""
    onset = ALL_TO_ALL_ONSET
    plateau, hits = _rates(preset, onset - 50, True, True)
    declined, misses = _rates(preset, onset + 50, True, True)
    assert hits == onset - 50  # the first lap only
    assert misses == 3 * (onset + 50)  # every visit, every lap
    assert declined / plateau == pytest.approx(SEND_RECEIVE_TO / SEND_RECEIVE_FROM, rel=0.01)
    later = onset * RECEIVE_ONLY_LATER
    _, hits = _rates(preset, later - 500, True, False, laps=2)
    assert hits == later - 500
    _, misses = _rates(preset, later + 500, True, False, laps=2)
    assert misses == 2 * (later + 500)
    send_only, _ = _rates(preset, 32768, True, False, laps=2, targets=7)
    assert send_only == pytest.approx(PORT_CEILING_MPS, rel=0.01)  # misses fetched beside WQEs
