"""The import graph follows the layers of DESIGN.md (pyproject's [tool.importlinter]): each
layer imports only the layers below it, so there is no cycle (issue 8 item 7: config ->
experiments.registry -> harness -> bootstrap.bringup -> config)."""

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
    assert "1 kept, 0 broken" in r.stdout
