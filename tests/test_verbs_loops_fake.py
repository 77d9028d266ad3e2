"""The loops that post through VerbsPoster on a fake provider, where no RDMA device exists: the
host submitter's verbs loops (native/src/verbs_loops.cpp) and mini-proxy's workers on verbs lanes
(proxy/src/proxy_verbs.cpp). tests/c/verbs_fake.cpp answers ibv_post_send and ibv_poll_cq through
the context's ops table (the inline verbs calls go there), lands each write at once and hands out
completions a few at a time. The VM group (tests/vm) runs the same loops on Soft-RoCE; these
check, on every machine, the contract loop_shapes.hpp shares with the WQE loops: the sequence
word, pre-linked chains and cumulative wr_ids, the slot of every rate message, the signaled
cadence, the error record of each kind of failure; and that a proxy worker posts each chain with
one ibv_post_send, signaled on its last work request, and retires every chain.

rdma-core's headers are a CI requirement (as for test_wire_rdma_core): without them these fail.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
HEADER = Path("/usr/include/infiniband/verbs.h")
SOURCES = [
    REPO / "tests" / "c" / "verbs_fake.cpp",
    REPO / "native" / "src" / "verbs_loops.cpp",
    REPO / "native" / "src" / "interrupt.cpp",
    REPO / "proxy" / "src" / "proxy_engine.cpp",
    REPO / "proxy" / "src" / "proxy_verbs.cpp",
    REPO / "proxy" / "src" / "proxy_host.cpp",
]
IBV_WC_REM_ACCESS_ERR = 10


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    if not HEADER.exists():
        pytest.fail(f"{HEADER} is missing (rdma-core's libibverbs-dev): run `make setup`")
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.fail("no C++ compiler (g++) found: the fake verbs provider needs one")
    exe = tmp_path_factory.mktemp("verbs_fake") / "verbs_fake"
    flags = ["-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-DGICBENCH_HAVE_VERBS"]
    inc = [f"-I{REPO / d}" for d in ("native/src", "proxy/src", "cuda")]
    cc = [cxx, *flags, *inc, *map(str, SOURCES), "-o", str(exe), "-pthread"]
    built = subprocess.run(cc, capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr
    ran = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 0, ran.stderr
    return {d["name"]: d for d in map(json.loads, ran.stdout.splitlines())}


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize(("payload", "size", "total"), [("inline", 64, 55), ("pointer", 256, 20)])
def test_single_op_posts_one_signaled_write_per_operation(runs, mode, payload, size, total):
    r = runs[f"single_op_{payload}_{mode}"]
    assert r["ok"] and r["negative_samples"] == 0, r["err"]
    assert r["err"]["done"] == r["err"]["total"] == total
    qp = r["qp"]
    assert qp["chains"] == [1] * total and qp["wr_ids_cumulative"]
    assert qp["signaled"] == total and qp["unsignaled"] == 0
    assert qp["inlined"] == (total if payload == "inline" else 0)
    assert qp["offsets"] == [0] * total
    assert r["last_word"] == total  # the sequence rides in the payload's last 8 bytes


def test_single_op_failures_name_the_qp_and_the_counts(runs):
    t = runs["single_op_timeout"]["err"]  # put+completion, no completion ever comes
    assert (t["kind"], t["qpn"], t["posted"], t["completed"]) == ("timeout", 0x11, 1, 0)
    assert (t["done"], t["total"], t["status"]) == (0, 5, -1)
    w = runs["single_op_no_reply"]["err"]  # round trip, the reply word never moves
    assert (w["kind"], w["word_seen"], w["word_expected"], w["completed"]) == ("timeout", 0, 1, 1)
    c = runs["single_op_cqe_error"]["err"]  # the third write completes in error
    assert c["kind"] == "cqe_error" and c["status"] == IBV_WC_REM_ACCESS_ERR
    assert (c["vendor_err"], c["wr_id"], c["wc_qpn"]) == (0x88, 3, 0x11)
    assert (c["posted"], c["completed"], c["done"], c["total"]) == (3, 2, 2, 10)
    i = runs["single_op_interrupted"]
    assert i["err"]["kind"] == "interrupted" and i["err"]["done"] == 0 and i["qp"]["posts"] == 0


def test_responder_answers_each_request_once(runs):
    r = runs["respond"]
    assert r["ok"] and r["err"]["done"] == 20 and r["last_word"] == 20
    assert r["qp"]["chains"] == [1] * 20 and r["qp"]["wr_ids_cumulative"]
    n = runs["respond_never_asked"]["err"]
    assert (n["kind"], n["word_expected"], n["posted"], n["done"]) == ("timeout", 1, 0, 0)
    t = runs["respond_timeout"]["err"]  # the reply's completion never comes
    assert (t["kind"], t["posted"], t["completed"]) == ("timeout", 1, 0)


@pytest.mark.parametrize(
    ("name", "size", "slots", "warmup"),
    [("rate", 8, 32, 37), ("rate_pointer_no_warmup", 24, 10, 0)],
)
def test_rate_lands_every_message_in_its_slot(runs, name, size, slots, warmup):
    r = runs[name]
    assert r["ok"], r["err"]
    total = 1000 + warmup
    assert r["messages"] == 1000 and r["err"]["done"] == total
    assert r["doorbells"] == -(-total // 5)  # batch 5, round-robin over 3 lanes
    assert r["windows"] == 10 and r["negative_windows"] == 0 and r["elapsed_positive"]
    lanes = r["lanes"]
    assert sum(len(ln["offsets"]) for ln in lanes) == total
    for ln in lanes:
        assert ln["offsets"] == [(k % slots) * size for k in range(len(ln["offsets"]))]
        assert ln["wr_ids_cumulative"] and max(ln["chains"]) == 5
        # signaled every depth/4 = 4 work requests, and the lane's last
        assert ln["signaled"] == -(-len(ln["offsets"]) // 4)
    assert r["cqes"] == sum(ln["signaled"] for ln in lanes)


def test_rate_batches_near_the_sq_depth_end(runs):
    """A batch over depth - depth/4 + 1 (15 of 16): signaling every depth/4 would leave up to
    three unsignaled work requests that no later signal retires before the next batch needs
    their room, so the wait would end only at its timeout. The reclamation plan the WQE loops
    use (poster.hpp's signal_every) signals often enough that every wait ends."""
    r = runs["rate_batch_near_depth"]
    assert r["ok"], r["err"]
    assert r["messages"] == 1000 and r["doorbells"] == -(-1037 // 15)
    assert r["lanes"][0]["signaled"] == -(-1037 // 2)  # every 16 - 15 + 1 = 2 requests
    assert r["cqes"] == r["lanes"][0]["signaled"]
    full = runs["rate_batch_is_depth"]  # a chain the size of the SQ: every request signaled
    assert full["ok"] and full["lanes"][0]["unsignaled"] == 0, full["err"]


def test_rate_failures(runs):
    big = runs["rate_batch_too_big"]["err"]
    assert (big["kind"], big["field"]) == ("bad_arguments", "batch")
    assert "SQ depth 16" in big["message"] and runs["rate_batch_too_big"]["lanes"][0]["posts"] == 0
    pf = runs["rate_post_failed"]["err"]  # lane 1's second post_send fails (its third call)
    assert (pf["kind"], pf["qpn"]) == ("post_failed", 0x101)
    assert "Cannot allocate memory" in pf["message"] and pf["done"] == 35
    to = runs["rate_timeout"]["err"]  # completions never come: the first lane fills its SQ
    assert (to["kind"], to["qpn"], to["completed"]) == ("timeout", 0x100, 0)
    assert to["posted"] == 15 and to["done"] == 45
    it = runs["rate_interrupted"]
    assert it["err"]["kind"] == "interrupted" and it["err"]["done"] == 0
    assert all(ln["posts"] == 0 for ln in it["lanes"])


@pytest.mark.parametrize(
    ("name", "batch", "messages"), [("proxy_one_worker", 4, 6000), ("proxy_two_workers", 16, 8000)]
)
def test_proxy_workers_post_chains_and_retire_them(runs, name, batch, messages):
    r = runs[name]
    assert r["ok"] and r["stopped"], r["err"]
    assert r["messages"] == r["carried"] == messages
    assert sum(len(ln["offsets"]) for ln in r["lanes"]) == messages
    for ln in r["lanes"]:
        assert ln["posts"] == len(ln["chains"]) and max(ln["chains"]) <= batch
        assert ln["signaled"] == ln["posts"]  # one completion per chain: its last request
        assert ln["unsignaled"] == sum(ln["chains"]) - ln["posts"]
        assert ln["wr_ids_cumulative"]
        assert all(off + 16 <= 1024 for off in ln["offsets"])  # inside the lane's region
