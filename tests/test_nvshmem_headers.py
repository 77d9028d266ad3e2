"""gicbench.submit.nvshmem.headers: NVSHMEM's device headers extracted from the
nvidia-nvshmem-cu13 wheel (here a wheel built in the test) through the download and extraction
DOCA's headers share (gicbench.submit.vendor_wheel): the license notices accepted, the search
order, the refusal reason, the offline rule, and one download serving both header sets."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from gicbench.submit import vendor_wheel
from gicbench.submit.doca import headers as doca_headers
from gicbench.submit.nvshmem import headers

APACHE = "/* SPDX-License-Identifier: Apache-2.0 */\n"
BSD = "/* SPDX-License-Identifier: BSD-3-Clause */\n"
SEE = "/*\n * See License.txt for license information\n */\n"
NV_VER = (
    "#define NVSHMEM_VENDOR_MAJOR_VERSION 9\n#define NVSHMEM_VENDOR_MINOR_VERSION 8\n"
    "#define NVSHMEM_VENDOR_PATCH_VERSION 7\n"
)
DOCA_VER = (
    "#define DOCA_GPUNETIO_VERSION_MAJOR 4\n#define DOCA_GPUNETIO_VERSION_MINOR 1\n"
    "#define DOCA_GPUNETIO_VERSION_PATCH 2\n"
)


def body(h: str) -> str:
    notice = BSD if h.startswith("gpunetio/") else SEE if h.endswith("tma_device.cuh") else APACHE
    extra = NV_VER if h.endswith("nvshmem_version.h") else ""
    return notice + extra + (DOCA_VER if h.endswith("verbs_def.h") else "")


def make_wheel(tmp: Path, *, drop: str | None = None, bare: str | None = None) -> Path:
    """A wheel holding both header sets (NVSHMEM's closure includes DOCA's gpunetio/ headers)."""
    whl = tmp / "nvidia_nvshmem_cu13-9.9.9-py3-none-any.whl"
    names = {headers.PREFIX + h: body(h) for h in headers.HEADERS}
    names.update({doca_headers.PREFIX + h: BSD + (DOCA_VER if h.endswith("verbs_def.h") else "")
                  for h in doca_headers.HEADERS})  # fmt: skip
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("nvidia_nvshmem_cu13-9.9.9.dist-info/METADATA", "Name: x\nVersion: 9.9.9\n")
        z.writestr("nvidia_nvshmem_cu13-9.9.9.dist-info/licenses/License.txt", "EULA text\n")
        z.writestr("nvidia/nvshmem/lib/libnvshmem_device.a", b"\0" * 100)
        z.writestr("nvidia/nvshmem/include/unused.h", APACHE)
        for name, text in names.items():
            if drop and name.endswith(drop):
                continue
            z.writestr(name, "/* no notice */\n" if bare and name.endswith(bare) else text)
    return whl


def test_the_closure_holds_the_ibgda_path_and_the_public_api() -> None:
    hs = set(headers.HEADERS)
    assert len(hs) == len(headers.HEADERS)
    assert {headers.MARKER, headers.IBGDA_DEVICE, headers.IBGDA_STATE} <= hs
    assert {"device/nvshmem_defines.h", "non_abi/device/pt-to-pt/transfer_device.cuh",
            "device_host/nvshmem_types.h", "non_abi/nvshmem_build_options.h"} <= hs  # fmt: skip
    # DOCA's own set is inside the closure (transfer_device.cuh includes the GDAKI transport)
    assert {"gpunetio/" + h for h in doca_headers.HEADERS} <= hs


def test_extract_keeps_the_closure_the_license_and_the_versions(tmp_path: Path) -> None:
    d = headers.extract(make_wheel(tmp_path), tmp_path / "root")
    assert d == tmp_path / "root" / "9.9.9"
    files = sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())
    assert files == sorted(["License.txt", "VERSION", *(f"include/{h}" for h in headers.HEADERS)])
    v = vendor_wheel.read_version_file(d)
    assert (v["wheel"], v["nvshmem"], v["doca"], v["source"]) == ("9.9.9", "9.8.7", "4.1.2",
                                                                  headers.WHEEL)  # fmt: skip
    nbsd = sum(h.startswith("gpunetio/") for h in headers.HEADERS)
    want = {f"Apache-2.0:{len(headers.HEADERS) - nbsd - 1}", f"BSD-3-Clause:{nbsd}",
            "License.txt:1"}  # fmt: skip
    assert set(v["licenses"].split(",")) == want
    assert (d / "License.txt").read_text() == "EULA text\n"


@pytest.mark.parametrize("kind", ["drop", "bare"])
def test_extract_refuses_a_missing_or_unlicensed_header(tmp_path: Path, kind: str) -> None:
    h = "non_abi/device/pt-to-pt/ibgda_device.cuh"
    with pytest.raises(RuntimeError, match=r"ibgda_device\.cuh"):
        headers.extract(make_wheel(tmp_path, **{kind: h}), tmp_path / "root")
    assert not (tmp_path / "root" / "9.9.9").exists()
    assert not list((tmp_path / "root").glob(".*partial"))


def test_find_order_and_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(headers, "_installed_include", lambda: None)
    monkeypatch.delenv(headers.ENV_DIR, raising=False)
    assert headers.find() is None
    why = headers.unavailable_reason()
    assert "NVSHMEM headers not found" in why and "gicbench.submit.nvshmem.headers fetch" in why
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv(headers.ENV_DIR, str(empty))
    why = headers.unavailable_reason()
    assert headers.MARKER in why or "bootstrap_device_host" in why
    assert f"and {len(headers.HEADERS) - vendor_wheel.SHOWN} more" in why  # a bounded message
    d = headers.extract(make_wheel(tmp_path), tmp_path / ".cache" / "nvshmem")
    found = headers.find()  # the empty env dir is skipped, the cache under cwd is used
    assert found is not None and (found.source, found.wheel_version) == ("cache", "9.9.9")
    monkeypatch.setenv(headers.ENV_DIR, str(d))
    found = headers.find()
    assert found is not None and found.source == "env" and found.nvshmem_version == "9.8.7"


def test_fetch_offline_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(_tmp: Path) -> Path:
        raise RuntimeError("pip download failed")

    monkeypatch.setattr(headers, "_download", fail)
    root = tmp_path / "root"
    monkeypatch.setattr(headers, "network_absent", lambda: None)
    assert headers.main(["fetch", "--root", str(root)]) == 1
    assert headers.offline_reason(root) is None
    monkeypatch.setattr(headers, "network_absent", lambda: "no package index reachable (x:443)")
    assert headers.main(["fetch", "--root", str(root)]) == 0
    assert headers.offline_reason(root) == "no package index reachable (x:443)"
    assert headers.main(["fetch", "--root", str(root), "--wheel", str(make_wheel(tmp_path))]) == 0
    assert headers.offline_reason(root) is None


def test_one_download_serves_both_header_sets(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The first fetch's wheel is kept in .cache/wheels; the other set extracts from it with no
    pip call."""
    monkeypatch.chdir(tmp_path)
    calls = []
    wheel = make_wheel(tmp_path)
    kept = tmp_path / vendor_wheel.WHEEL_CACHE
    kept.mkdir(parents=True)
    target = kept / f"nvidia_nvshmem_cu13-{vendor_wheel.WHEEL_VERSION}-py3-none-any.whl"

    def fake_run(cmd, **_kw):
        calls.append(cmd)
        target.write_bytes(wheel.read_bytes())
        return type("P", (), {"returncode": 0, "stderr": ""})()

    monkeypatch.setattr(vendor_wheel.subprocess, "run", fake_run)
    d1 = doca_headers.fetch(tmp_path / "g")
    d2 = headers.fetch(tmp_path / "n")
    assert len(calls) == 1 and "download" in calls[0]
    assert (d1 / "include" / "doca_gpunetio_device.h").is_file()
    assert (d2 / "include" / headers.IBGDA_DEVICE).is_file()


def test_the_fetched_headers_carry_their_notices() -> None:
    """The headers set-up extracted (where it ran): each keeps its license notice."""
    found = headers.find()
    if found is None:
        pytest.skip(headers.unavailable_reason())
    for h in headers.HEADERS:
        text = (found.include / h).read_text()
        assert any(n in text for n in headers.NOTICES), h
