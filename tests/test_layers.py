"""The import graph follows the layers of docs/architecture.md (pyproject's [tool.importlinter]):
each layer imports only the layers below it, so there is no cycle (such as the one there was:
config -> experiments.registry -> harness -> bootstrap.bringup -> config); inside submit, every
submitter stands on the one contract and none imports another."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_layers_contract_is_kept(tmp_path: Path) -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("lint-imports missing: `make setup` installs import-linter (test extra)")
    r = subprocess.run(
        [exe, str(ROOT / "pyproject.toml")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 kept, 0 broken" in r.stdout
