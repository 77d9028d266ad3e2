"""cuda/moe/dispatch.cu: the MoE dispatch kernels compile for sm_90 with nvcc for every ordering
and CQ polling (no GPU needed), their PTX holds what each relies on, and the argument table and
backend codes the launcher writes are the ones the header declares."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from gpu_helpers import nvcc_or_skip

from gicbench.submit.gpu import ORDERINGS
from gicbench.submit.gpu.dispatch import ARGS, BACKENDS, KERNELS
from gicbench.submit.gpu.params import CQ_POLLS

REPO = Path(__file__).resolve().parents[1]
CUDA = REPO / "cuda"
SRC = CUDA / "moe" / "dispatch.cu"
HEADER = CUDA / "moe" / "dispatch.cuh"


def _nvcc(tmp_path: Path, out: str, *extra: str, ordering: str = "gpu-fence",
          cq_poll: str = "expected") -> Path:  # fmt: skip
    dst = tmp_path / out
    cmd = [nvcc_or_skip("cuda/moe"), "-arch=sm_90", "-std=c++17", f"-I{CUDA}",
           f"-DGDA_ORDERING={ORDERINGS.index(ordering)}",
           f"-DGDA_CQ_POLL={CQ_POLLS.index(cq_poll)}", *extra, str(SRC),
           "-o", str(dst)]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return dst


def _function(ptx: str, name: str) -> str:
    start = ptx.index(f".entry {name}(")
    nxt = ptx.find(".entry ", start + 1)
    return ptx[start : nxt if nxt > 0 else len(ptx)]


@pytest.mark.nvcc
@pytest.mark.parametrize("ordering", ORDERINGS)
def test_every_ordering_compiles_for_sm90(ordering: str, tmp_path: Path) -> None:
    ptx = _nvcc(tmp_path, f"d-{ordering}.ptx", "-ptx", ordering=ordering).read_text()
    for k in KERNELS:
        assert f".entry {k}(" in ptx, f"{k} missing for {ordering}"


@pytest.mark.nvcc
@pytest.mark.parametrize("cq_poll", CQ_POLLS)
def test_each_cq_poll_builds_an_sm90_object(cq_poll: str, tmp_path: Path) -> None:
    out = _nvcc(tmp_path, f"d-{cq_poll}.o", "-c", cq_poll=cq_poll)
    assert out.stat().st_size > 0


@pytest.mark.nvcc
def test_ptx_holds_what_each_kernel_relies_on(tmp_path: Path) -> None:
    ptx = _nvcc(tmp_path, "d.ptx", "-ptx", ordering="gpu-release-store").read_text()
    send = _function(ptx, "moe_send")
    # descriptors as whole 16-byte stores of two segments; the doorbell by the ordering
    assert re.search(r"st\.volatile\.global\.v2\.u64", send)
    assert re.search(r"st\.release\.gpu\.global\.u64", send)
    # staged tokens fenced at system scope before any thread hands them to the NIC
    assert re.search(r"membar\.sys|fence\.sc\.sys", send)
    assert "%globaltimer" in send
    recv = _function(ptx, "moe_recv")
    assert re.search(r"ld\.acquire\.sys\.global\.u64", recv)  # the count word
    assert re.search(r"ld\.global\.cv\.v4", recv)  # slots read afresh every iteration
    assert "%globaltimer" in _function(ptx, "moe_delay")


def _enum(name: str) -> list[str]:
    text = HEADER.read_text()
    body = re.search(rf"enum {name} : \w+ \{{(.*?)\}};", text, re.S)
    assert body, name
    return re.findall(r"^\s*k(\w+)", body.group(1), re.M)


def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


def test_the_argument_table_is_the_headers() -> None:
    names = [_snake(n) for n in _enum("Arg")]
    assert names[-1] == "args"
    assert tuple(names[:-1]) == ARGS


def test_the_backend_codes_are_the_headers() -> None:
    got = [_snake(n).replace("_", "-") for n in _enum("Backend")]
    assert tuple(got) == BACKENDS
