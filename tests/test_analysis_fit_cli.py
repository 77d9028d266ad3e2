"""`gicbench fit` on a user's CSV, and the fits experiments declare reaching analyze and report."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from gicbench.analysis.cli import add_analyze_args, add_report_args, run_analyze, run_report
from gicbench.analysis.fits import apply as fit_apply
from gicbench.cli.main import main as gicbench_main
from gicbench.trace import TraceWriter, write_manifest

CLOCKS_MHZ = [502.0, 746.0, 995.0, 1245.0, 1500.0, 1845.0]


def _csv(path: Path, header: str, rows: list[tuple]) -> Path:
    path.write_text(header + "\n" + "".join(",".join(str(v) for v in r) + "\n" for r in rows))
    return path


def test_fit_clock_table_by_default_and_json(tmp_path: Path, capsys) -> None:
    f = _csv(tmp_path / "t6.csv", "sm_clock_mhz,p50_ns",
             [(c, (10313.0 / c + 1.44) * 1e3) for c in CLOCKS_MHZ])
    assert gicbench_main(["fit", "clock", str(f)]) == 0
    out = capsys.readouterr().out
    assert "arXiv 2610.01380" in out and "cycles" in out and "seed" not in out
    assert gicbench_main(["fit", "clock", str(f), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    # ns in the column name: converted to µs; MHz from the suffix.
    assert doc["parameters"]["C"]["value"] == pytest.approx(10313.0, rel=1e-9)
    assert doc["parameters"]["B"]["value"] == pytest.approx(1.44, rel=1e-9)
    assert doc["parameters"]["B"]["unit"] == "µs" and doc["r2"] == pytest.approx(1.0)


def test_fit_clock_refuses_a_unit_the_numbers_cannot_have(tmp_path: Path, capsys) -> None:
    f = _csv(tmp_path / "c.csv", "clock,latency", [(c, 10313.0 / c + 1.44) for c in CLOCKS_MHZ])
    assert gicbench_main(["fit", "clock", str(f)]) == 2  # no suffix: Hz, which 502 cannot be
    err = capsys.readouterr().err
    assert "look like MHz" in err and err.count("\n") == 1
    assert gicbench_main(["fit", "clock", str(f), "--x-unit", "MHz", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["parameters"]["C"]["value"] == pytest.approx(
        10313.0)


def test_fit_columns_by_name(tmp_path: Path, capsys) -> None:
    x = 2.0 ** np.arange(1, 16)
    y = 74.0 * np.minimum(1.0, (x / 700.0) ** -0.3)
    f = _csv(tmp_path / "p.csv", "note,connections,rate_mps",
             [("a", int(a), b) for a, b in zip(x, y, strict=True)])
    argv = ["fit", "plateau", str(f), "--x", "connections", "--y", "rate_mps", "--json"]
    assert gicbench_main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["parameters"]["onset"]["value"] == pytest.approx(700.0, rel=1e-3)
    assert doc["parameters"]["plateau"]["unit"] == "M msg/s"
    assert gicbench_main(["fit", "plateau", str(f)]) == 2  # first two columns: "note" is text
    assert "non-numbers" in capsys.readouterr().err


def test_fit_crossover_and_exposed(tmp_path: Path, capsys) -> None:
    sizes = [8, 64, 512, 4096, 32768]
    f = _csv(tmp_path / "bw.csv", "size_b,bw_gbs", list(zip(sizes, [0.1, 0.8, 5, 20, 22],
                                                            strict=True)))
    assert gicbench_main(["fit", "crossover", str(f), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["parameters"]["size"]["value"] == 4096 and doc["parameters"]["size"]["unit"] == "B"
    e = _csv(tmp_path / "e.csv", "ready_us,release_us,in_flight_us,cover_us",
             [(0, 5, 10, 12), (0, 5, 20, 12)])
    assert gicbench_main(["fit", "exposed", str(e), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["exposed_us"] for r in doc["rows"]] == [0.0, 8.0]
    assert gicbench_main(["fit", "exposed", str(e)]) == 0
    assert "arXiv 2611.12362" in capsys.readouterr().out


def test_fit_refuses_missing_file_and_empty_table(tmp_path: Path, capsys) -> None:
    assert gicbench_main(["fit", "clock", str(tmp_path / "none.csv")]) == 2
    (tmp_path / "e.csv").write_text("a,b\n")
    assert gicbench_main(["fit", "clock", str(tmp_path / "e.csv")]) == 2
    err = capsys.readouterr().err
    assert "no such file" in err and "no rows" in err and "Traceback" not in err


# ---- fits an experiment declares ---------------------------------------------------------------


def _rate_run(run_dir: Path) -> Path:
    """msg-rate against active connections (qps), plateau 80 M msg/s, onset 16, exponent 0.5."""
    write_manifest(run_dir, {"world_size": 1, "status": "complete"})
    with TraceWriter(run_dir, 0, 1, {}) as w:
        for qps in (1, 2, 4, 8, 16, 32, 64, 128, 256):
            with w.begin_point("msg-rate", {"size": 8, "qps": qps}) as p:
                rate = 80.0 * min(1.0, (qps / 16.0) ** -0.5)
                p.add_samples("window_ns", np.full(20, 1000, dtype=np.int64))
                p.set_results({"role": "sender", "msg_rate_mps": rate, "gbps": rate * 8e-3})
    return run_dir


@pytest.fixture
def declares_plateau(monkeypatch):
    class FakeExperiment:
        fits = ("plateau",)

    from gicbench.errors import ConfigError
    from gicbench.experiments import registry

    def get(name: str):
        if name != "msg-rate":  # as the registry refuses a name it does not know
            raise ConfigError("experiment", name, "one of msg-rate")
        return FakeExperiment

    monkeypatch.setattr(registry, "get", get)


def test_declared_fits_are_read_from_the_experiment_class(declares_plateau) -> None:
    assert fit_apply.declared_fits("msg-rate") == ("plateau",)
    assert fit_apply.declared_fits("unknown") == ()


def test_declared_fit_names_are_checked(monkeypatch) -> None:
    class Bad:
        fits = ("plateau", "magic")

    from gicbench.experiments import registry

    monkeypatch.setattr(registry, "get", lambda name: Bad)
    with pytest.raises(fit_apply.AnalysisError, match=r"unknown fits.*magic"):
        fit_apply.declared_fits("x")


def test_analyze_applies_the_declared_fits(tmp_path: Path, declares_plateau, capsys) -> None:
    run = _rate_run(tmp_path / "r")
    parser = argparse.ArgumentParser()
    add_analyze_args(parser)
    assert run_analyze(parser.parse_args([str(run), "--json"])) == 0
    fits = json.loads(capsys.readouterr().out)["fits"]["msg-rate"]
    assert len(fits) == 1 and fits[0]["fit"] == "plateau" and fits[0]["x"] == "qps"
    p = fits[0]["parameters"]
    assert p["plateau"]["value"] == pytest.approx(80.0, rel=1e-6)
    assert p["onset"]["value"] == pytest.approx(16.0, rel=1e-3)
    assert p["exponent"]["value"] == pytest.approx(0.5, rel=1e-6)
    assert fits[0]["r2"] == pytest.approx(1.0) and fits[0]["flags"] == []
    assert run_analyze(parser.parse_args([str(run)])) == 0
    out = capsys.readouterr().out
    assert "plateau fit" in out and "onset" in out and "R²" in out


def test_report_plots_the_fitted_curve(tmp_path: Path, declares_plateau) -> None:
    run = _rate_run(tmp_path / "r")
    parser = argparse.ArgumentParser()
    add_report_args(parser)
    assert run_report(parser.parse_args([str(run)])) == 0
    text = (run / "report.md").read_text()
    assert "### plateau fit" in text and "exponent = 0.5" in text and "R² = 1.0000" in text
    assert (run / "plots" / "msg-rate-fit-plateau.png").stat().st_size > 1000
    assert "msg-rate-fit-plateau.png" in text


def test_a_declared_fit_the_table_cannot_support_is_said_not_hidden(tmp_path: Path,
                                                                    monkeypatch) -> None:
    class Clocked:
        fits = ("clock",)

    from gicbench.experiments import registry

    monkeypatch.setattr(registry, "get", lambda name: Clocked)
    run = _rate_run(tmp_path / "r")
    from gicbench.analysis.report import write_report

    text = write_report(run).read_text()
    assert "clock fit" in text and "not fitted: the table has no x column" in text
