"""mini-proxy's GPU producers: the kernels compile (nvcc, where the toolkit is, no GPU needed),
and on a GPU both handoffs enqueue, complete and load rings (marked gpu: skipped without one)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from host_world import emu_world

from gicbench import _native
from gicbench.submit.base import Buffer, LatencyWork
from gicbench.submit.proxy.gpu_kernels import source
from gicbench.submit.proxy.work import ProxyRateWork


def test_kernels_compile_for_hopper(tmp_path: Path) -> None:
    nvcc = shutil.which("nvcc") or (
        "/usr/local/bin/nvcc" if Path("/usr/local/bin/nvcc").exists() else None
    )
    if nvcc is None:
        pytest.skip("no nvcc")
    cu = tmp_path / "px.cu"
    cu.write_text(source(_native.proxy))
    r = subprocess.run(
        [nvcc, "-std=c++17", "-arch=sm_90", "-cubin", str(cu), "-o", str(tmp_path / "px.cubin")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr


def _gpu() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu(), reason="needs an NVIDIA GPU and CuPy")
@pytest.mark.parametrize("handoff", ["baseline", "tuned"])
def test_gpu_producers_enqueue_and_load(handoff) -> None:
    from gicbench.submit.proxy import ProxySubmitter
    from gicbench.submit.proxy.params import ProxyParams

    with emu_world(nqps=2, depth=64) as w:
        f = w.fabrics[0]
        sub = ProxySubmitter(
            rank=0,
            fabric=f,
            progress=f.progress_policy(),
            timeout_s=5.0,
            params=ProxyParams(producer="gpu", handoff=handoff, rings=2, precondition_s=0.0),
        )
        try:
            for mode in ("issue", "put_completion"):
                ns = sub.latency(
                    LatencyWork(
                        w.lanes(1), 0, mode, 8, True, False, 50, 5, Buffer.local(w.bufs[0][1])
                    )
                )
                assert ns.size == 50 and (ns > 0).all()
            before = f.counters()["wqes"]
            r = sub.proxy_rate(ProxyRateWork(w.lanes(2), 2, 2, 4, 2, 8, True, 500, 0, 50))
            assert f.counters()["wqes"] - before == 1000 and r.messages == 1000
        finally:
            sub.close()
        assert _native.proxy.live_rings() == 0
        assert np.asarray(w.landing(1)).size
