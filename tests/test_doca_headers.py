"""gicbench.submit.doca.headers: extraction of DOCA GPUNetIO's device headers from the
nvidia-nvshmem-cu13 wheel (here from a wheel built in the test), the search order, the refusal
reason, and the offline rule of set-up."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from gicbench.submit.doca import headers

SPDX = "/* SPDX-License-Identifier: BSD-3-Clause */\n"
DEF = (
    "#define DOCA_GPUNETIO_VERSION_MAJOR 4\n#define DOCA_GPUNETIO_VERSION_MINOR 1\n"
    "#define DOCA_GPUNETIO_VERSION_PATCH 2\n"
)


def make_wheel(tmp: Path, *, drop: str | None = None, no_spdx: str | None = None) -> Path:
    whl = tmp / "nvidia_nvshmem_cu13-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("nvidia_nvshmem_cu13-9.9.9.dist-info/METADATA", "Name: x\nVersion: 9.9.9\n")
        z.writestr("nvidia_nvshmem_cu13-9.9.9.dist-info/licenses/License.txt", "EULA text\n")
        z.writestr("nvidia/nvshmem/lib/other.so", b"\0" * 100)
        for h in headers.HEADERS:
            if h == drop:
                continue
            body = ("" if h == no_spdx else SPDX) + (DEF if h.endswith("verbs_def.h") else "")
            z.writestr(headers.PREFIX + h, body)
    return whl


def test_extract_keeps_only_the_headers_and_the_license(tmp_path: Path) -> None:
    d = headers.extract(make_wheel(tmp_path), tmp_path / "root")
    assert d == tmp_path / "root" / "9.9.9"
    files = sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())
    assert files == sorted(["License.txt", "VERSION", *(f"include/{h}" for h in headers.HEADERS)])
    v = dict(ln.split("=", 1) for ln in (d / "VERSION").read_text().splitlines())
    assert (v["wheel"], v["doca"], v["source"]) == ("9.9.9", "4.1.2", headers.WHEEL)
    assert len(v["sha256"]) == 64 and int(v["headers_bytes"]) > 0


@pytest.mark.parametrize("kind", ["drop", "no_spdx"])
def test_extract_refuses_an_incomplete_or_unlicensed_wheel(tmp_path: Path, kind: str) -> None:
    h = "device/doca_gpunetio_dev_verbs_qp.cuh"
    whl = make_wheel(tmp_path, **{kind: h})
    with pytest.raises(RuntimeError, match=r"doca_gpunetio_dev_verbs_qp\.cuh"):
        headers.extract(whl, tmp_path / "root")
    assert not (tmp_path / "root" / "9.9.9").exists()


def test_find_order_and_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no .cache here
    monkeypatch.setattr(headers, "_installed_include", lambda: None)
    monkeypatch.delenv(headers.ENV_DIR, raising=False)
    assert headers.find() is None
    assert "gicbench[gpu]" in headers.unavailable_reason()
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv(headers.ENV_DIR, str(empty))
    assert headers.find() is None and "doca_gpunetio_device.h" in headers.unavailable_reason()
    d = headers.extract(make_wheel(tmp_path), tmp_path / ".cache" / "gpunetio")
    found = headers.find()  # the empty env dir is skipped, the cache under cwd is used
    assert found is not None and (found.source, found.wheel_version) == ("cache", "9.9.9")
    monkeypatch.setenv(headers.ENV_DIR, str(d))
    found = headers.find()
    assert found is not None and found.source == "env" and found.doca_version == "4.1.2"


def test_fetch_offline_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(_tmp: Path) -> Path:
        raise RuntimeError("pip download failed")

    monkeypatch.setattr(headers, "_download", fail)
    root = tmp_path / "root"
    monkeypatch.setattr(headers, "network_absent", lambda: None)  # an index answers: fail loudly
    assert headers.main(["fetch", "--root", str(root)]) == 1
    assert headers.offline_reason(root) is None
    monkeypatch.setattr(headers, "network_absent", lambda: "no package index reachable (x:443)")
    assert headers.main(["fetch", "--root", str(root)]) == 0
    assert headers.offline_reason(root) == "no package index reachable (x:443)"
    headers.main(["fetch", "--root", str(root), "--wheel", str(make_wheel(tmp_path))])
    assert headers.offline_reason(root) is None  # a later successful fetch clears the mark


def test_the_fetched_headers_are_bsd3() -> None:
    """The headers set-up extracted (where it ran): each keeps NVIDIA's BSD-3 notice."""
    found = headers.find()
    if found is None:
        pytest.skip(headers.unavailable_reason())
    for h in headers.HEADERS:
        text = (found.include / h).read_text()
        assert "SPDX-License-Identifier: BSD-3-Clause" in text, h
        assert "Redistributions of source code must retain" in text, h
