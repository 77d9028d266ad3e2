"""The import graph follows the layers of docs/architecture.md (pyproject's [tool.importlinter]):
each layer imports only the layers below it, so there is no cycle (such as the one there was:
config -> experiments.registry -> harness -> bootstrap.bringup -> config). Inside submit, every
submitter registered in app/submit/base.py stands on the one contract (base, work) and the
pieces all of them share, and no submitter imports another: that contract is made here from the
registry, so adding a submitter is its package and its registry line."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gicbench.submit.base import SUBMITTER_MODULES

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: import-linter brings tomli
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]
# below every submitter
SHARED = ("native_lanes", "gpu_runtime", "failures", "kernel_cost_common", "vendor_wheel")


def submitter_packages() -> list[str]:
    """gicbench.submit.<name> of every registered submitter module."""
    return sorted({".".join(m.split(".")[:3]) for m in SUBMITTER_MODULES})


def contracts() -> str:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    names = [p.rsplit(".", 1)[1] for p in submitter_packages()]
    config["contracts"].append(
        {
            "name": "submitters over one contract",
            "type": "layers",
            "containers": ["gicbench.submit"],
            "layers": [" | ".join(names), "base", " | ".join(SHARED), "work"],
        }
    )
    lines = ["[tool.importlinter]"]
    for key, value in config.items():
        if key != "contracts":
            lines.append(f"{key} = {_toml(value)}")
    for c in config["contracts"]:
        lines.append("[[tool.importlinter.contracts]]")
        lines += [f"{k} = {_toml(v)}" for k, v in c.items()]
    return "\n".join(lines) + "\n"


def _toml(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def test_every_registered_submitter_is_a_package_of_submit() -> None:
    for m in SUBMITTER_MODULES:
        assert m.startswith("gicbench.submit.") and m.count(".") >= 2, m
    assert len(submitter_packages()) == len(SUBMITTER_MODULES)


def test_layers_contract_is_kept(tmp_path: Path) -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("lint-imports missing: `make setup` installs import-linter (test extra)")
    cfg = tmp_path / "contracts.toml"
    cfg.write_text(contracts())
    r = subprocess.run(
        [exe, str(cfg)], capture_output=True, text=True, cwd=tmp_path, check=False, timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 kept, 0 broken" in r.stdout


def test_a_sibling_import_breaks_the_contract(tmp_path: Path) -> None:
    """The submitters' contract fails when one submitter imports another (checked against a
    copy of the installed package with such an import planted)."""
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("lint-imports missing: `make setup` installs import-linter (test extra)")
    import gicbench

    pkg = tmp_path / "gicbench"
    shutil.copytree(Path(gicbench.__file__).parent, pkg, ignore=shutil.ignore_patterns("*.so"))
    victim = pkg / "submit" / "doca" / "params.py"
    victim.write_text(victim.read_text() + "\nfrom ..gpu import params as _borrowed  # noqa\n")
    cfg = tmp_path / "contracts.toml"
    cfg.write_text(contracts())
    r = subprocess.run(
        [exe, str(cfg)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)},
    )
    assert r.returncode != 0
    assert "submitters over one contract BROKEN" in r.stdout
