"""`gicbench run --help` and `gicbench list` say what a newcomer needs: each experiment's own
default, every default once, nothing cut off at 80 columns."""

from __future__ import annotations

import argparse
import dataclasses
import os

import pytest
from launching import gicbench

from gicbench.cli.main import build_parser, main
from gicbench.cli.run import knob_catalog
from gicbench.experiments import registry


def _run_actions() -> dict[str, argparse.Action]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: a for a in sub.choices["run"]._actions}


def test_help_gives_each_experiments_own_default() -> None:
    actions = _run_actions()
    batch = actions["batch"].help
    assert "msg-rate 1" in batch and "payload 16" in batch and "loaded-rtt" in batch
    messages = actions["messages"].help
    assert "msg-rate 200000" in messages and "payload 20000" in messages
    assert "proxy-rate 100000" in messages
    # Every owner's default appears in the help of every flag (as `gicbench list` shows it).
    for name, k, defaults, _owners in knob_catalog():
        text = actions[name].help
        for owner, value in defaults.items():
            if value not in (None, ""):
                assert k.show(value) in text, f"{k.flag}: {owner}'s default {value!r}: {text}"


def test_help_states_each_default_once() -> None:
    for dest, action in _run_actions().items():
        text = (action.help or "").lower().replace("--suite default", "--suite")
        assert text.count("default") <= 1, f"{dest}: {action.help}"


def test_help_shows_sizes_as_users_type_them() -> None:
    actions = _run_actions()
    assert "default: 256M" in actions["point_bytes"].help
    assert "payload: 1M" in actions["max_size"].help  # payload's own -e beside "default: -b"


def test_list_fits_80_columns() -> None:
    env = {**os.environ, "COLUMNS": "80"}
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "gicbench", "list"], capture_output=True,
                       text=True, env=env, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert "…" not in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    for name in registry.names():
        assert f"{name}: " in r.stdout
    assert "--batch=1" in r.stdout and "--batch=16" in r.stdout  # msg-rate's, payload's


def test_list_one_experiment_in_full() -> None:
    r = gicbench("list", "msg-rate")
    assert r.returncode == 0, r.stderr
    params = registry.get("msg-rate").Params
    for f in dataclasses.fields(params):
        k = f.metadata["knob"]
        assert k.flag in r.stdout and k.help in r.stdout
    assert "--batch  (default 1;" in r.stdout


def test_list_refuses_an_unknown_experiment(capsys) -> None:
    assert main(["list", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "nosuch" in err and "single-op" in err


@pytest.mark.parametrize("flag", ["-J", "--output-file"])
def test_run_help_lists_the_output_file(flag: str) -> None:
    action = _run_actions()["output_file"]
    assert flag in action.option_strings and ".json" in action.help and ".csv" in action.help
