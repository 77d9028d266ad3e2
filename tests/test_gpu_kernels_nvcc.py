"""cuda/gda: every kernel variant (the seven orderings of the paper's Table 4, both CQ pollings)
compiles for sm_90 with nvcc, and each variant's PTX carries exactly the ordering it names (no
GPU needed)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from gpu_helpers import nvcc_or_skip

from gicbench.submit.gpu import ORDERINGS
from gicbench.submit.gpu.build import KERNELS
from gicbench.submit.gpu.params import CQ_POLLS

REPO = Path(__file__).resolve().parents[1]
CUDA = REPO / "cuda"
SRC = CUDA / "gda" / "kernels.cu"

# What each ordering must emit on the doorbell path (PTX), and what it must not.
MUST = {
    "none": [],
    "gpu-fence": [r"fence\.acq_rel\.gpu"],
    "gpu-fence-dbrec": [r"fence\.acq_rel\.gpu"],
    "gpu-release-store": [r"st\.release\.gpu\.global\.u32", r"st\.release\.gpu\.global\.u64"],
    "threadfence": [r"fence\.sc\.gpu|membar\.gl"],
    "sys-release-store": [r"st\.release\.sys\.global\.u32", r"st\.release\.sys\.global\.u64",
                          r"ld\.acquire\.sys"],
    "sys-fence": [r"fence\.acq_rel\.sys", r"ld\.acquire\.sys"],
}  # fmt: skip
MUST_NOT = {
    "none": [r"st\.release\.(gpu|sys)\.global\.u64", r"\.sys"],
    "gpu-fence": [r"\.sys"],
    "gpu-release-store": [r"\.sys"],
    "threadfence": [r"st\.release\.(gpu|sys)\.global\.u64", r"\.sys"],
    "sys-fence": [r"st\.release\.(gpu|sys)\.global\.u64"],
}


def _ptx(ordering: str, tmp_path: Path, cq_poll: str = "expected", *defs: str) -> str:
    out = tmp_path / f"k{ordering}-{cq_poll}{''.join(defs)}.ptx"
    cmd = [nvcc_or_skip("cuda/gda"), "-arch=sm_90", "-std=c++17", f"-I{CUDA}", "-ptx",
           f"-DGDA_ORDERING={ORDERINGS.index(ordering)}",
           f"-DGDA_CQ_POLL={CQ_POLLS.index(cq_poll)}", *defs, str(SRC), "-o",
           str(out)]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return out.read_text()


def _function(ptx: str, name: str) -> str:
    start = ptx.index(f".entry {name}(")
    nxt = ptx.find(".entry ", start + 1)
    return ptx[start : nxt if nxt > 0 else len(ptx)]


@pytest.mark.nvcc
@pytest.mark.parametrize("ordering", ORDERINGS)
def test_every_ordering_compiles_for_sm90_with_its_ordering(ordering: str, tmp_path: Path) -> None:
    ptx = _ptx(ordering, tmp_path)
    for k in KERNELS:
        assert f".entry {k}(" in ptx, f"{k} missing for {ordering}"
    body = _function(ptx, "gda_single_op")
    for pat in MUST[ordering]:
        assert re.search(pat, body), f"{ordering}: {pat} not in gda_single_op"
    for pat in MUST_NOT.get(ordering, []):
        # the abort word and status (fail()) use system-scope fences by design: check the
        # doorbell-path function without them
        scrubbed = re.sub(r"membar\.sys|fence\.sc\.sys", "", body)
        assert not re.search(pat, scrubbed), f"{ordering}: unexpected {pat} in gda_single_op"


@pytest.mark.nvcc
@pytest.mark.parametrize("ordering", ["none", "gpu-fence", "sys-fence"])
def test_the_solo_loop_compiles_and_keeps_the_orderings_fences(ordering: str, tmp_path) -> None:
    """GDA_SOLO=1 adds msg-rate's solo loop; it publishes with the same ordering: the solo
    build's gda_msg_rate has every fence the general one has, and no other."""
    fences = r"(fence\.[a-z_.]+|membar\.[a-z]+)"
    general = _function(_ptx(ordering, tmp_path, "expected", "-DGDA_SOLO=0"), "gda_msg_rate")
    solo = _function(_ptx(ordering, tmp_path, "expected", "-DGDA_SOLO=1"), "gda_msg_rate")
    assert set(re.findall(fences, solo)) == set(re.findall(fences, general))
    assert len(solo) > len(general)  # the second loop is there


# The CQ poll of each polling mode: expected polls with a relaxed load at the ordering's scope
# (volatile for none/threadfence) and fences once on a hit; scan acquires at every poll.
POLL = {
    ("gpu-fence", "expected"): r"ld\.relaxed\.gpu\.global\.u32",
    ("sys-fence", "expected"): r"ld\.relaxed\.sys\.global\.u32",
    ("gpu-fence", "scan"): r"ld\.acquire\.gpu\.global\.u32",
    ("sys-fence", "scan"): r"ld\.acquire\.sys\.global\.u32",
}


@pytest.mark.nvcc
@pytest.mark.parametrize(("ordering", "cq_poll"), sorted(POLL))
def test_each_cq_poll_polls_at_the_ordering_scope(ordering: str, cq_poll: str, tmp_path) -> None:
    ptx = _ptx(ordering, tmp_path, cq_poll)
    for k in KERNELS:
        assert f".entry {k}(" in ptx, f"{k} missing for {ordering}/{cq_poll}"
    body = _function(ptx, "gda_single_op")
    assert re.search(POLL[(ordering, cq_poll)], body), (ordering, cq_poll)


@pytest.mark.nvcc
def test_host_doorbell_marks_with_the_ordering(tmp_path: Path) -> None:
    """--doorbell host: the ready mark is an 8-byte release store for the release orderings."""
    ptx = _ptx("sys-release-store", tmp_path)
    body = _function(ptx, "gda_msg_rate")
    assert len(re.findall(r"st\.release\.sys\.global\.u64", body)) >= 2  # doorbell and mark


@pytest.mark.nvcc
def test_sm90_object_builds(tmp_path: Path) -> None:
    out = tmp_path / "k.o"
    exe = nvcc_or_skip("cuda/gda")
    cmd = [exe, "-arch=sm_90", "-std=c++17", f"-I{CUDA}", "-c", str(SRC), "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 0
