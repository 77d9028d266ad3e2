"""Fits recover known parameters from noisy synthetic data; degenerate input is refused or
flagged. Tolerances are stated per test; seeds are fixed."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from gicbench.analysis.fits import (
    AnalysisError,
    FitError,
    exposed_model,
    first_size_reaching,
    fit_clock,
    fit_plateau_power_law,
    release_advance,
    shortest_wait_near_floor,
)

# ---- clock fit T(f) = C/f + B --------------------------------------------------------------

# the clocks of the paper's Appendix B.1 (arXiv 2610.01380)
CLOCKS_MHZ = np.array([502.0, 746.0, 995.0, 1245.0, 1500.0, 1845.0])


@pytest.mark.parametrize(("c_cycles", "b_us"), [(2929.0, 0.27), (10313.0, 1.44), (6045, 8.91)])
def test_clock_fit_recovers_table6_like_parameters(c_cycles: float, b_us: float) -> None:
    rng = np.random.default_rng(6)
    truth = c_cycles / CLOCKS_MHZ + b_us
    t = truth * (1 + rng.normal(0, 0.01, truth.size))  # 1% noise on each clock median
    fit = fit_clock(CLOCKS_MHZ * 1e6, t)  # Hz
    # Tolerance: C within 5%, B within 5% of T at the top clock; truth within 4 standard errors.
    assert fit.c_cycles == pytest.approx(c_cycles, rel=0.05)
    assert fit.b_us == pytest.approx(b_us, abs=0.05 * truth[-1])
    assert abs(fit.c_cycles - c_cycles) < 4 * fit.c_err
    assert abs(fit.b_us - b_us) < 4 * fit.b_err
    assert fit.r2 > 0.99 and fit.n == 6 and fit.flags == ()
    same = fit_clock(CLOCKS_MHZ, t, f_unit="MHz")
    assert same.c_cycles == pytest.approx(fit.c_cycles) and same.b_us == pytest.approx(fit.b_us)
    top = 1845e6
    assert fit.clock_fraction(top) == pytest.approx(
        (c_cycles / 1845.0) / (c_cycles / 1845.0 + b_us), abs=0.05
    )
    assert fit.predict_us([top])[0] == pytest.approx(truth[-1], rel=0.03)


def test_clock_fit_exact_and_degenerate() -> None:
    exact = fit_clock([1e9, 2e9], [3.0, 2.0])  # C = 2000 cycles, B = 1 µs exactly
    assert exact.c_cycles == pytest.approx(2000.0) and exact.b_us == pytest.approx(1.0)
    assert np.isnan(exact.c_err) and any("two clocks" in f for f in exact.flags)
    with pytest.raises(FitError, match="at least 2 clock points"):
        fit_clock([1e9], [1.0])
    with pytest.raises(FitError, match="distinct clocks"):
        fit_clock([1e9, 1e9, 1e9], [1.0, 1.1, 0.9])
    with pytest.raises(AnalysisError, match="> 0"):
        fit_clock([1e9, 0.0, 2e9], [1.0, 2.0, 3.0])
    with pytest.raises(AnalysisError, match="non-finite"):
        fit_clock([1e9, 2e9, 3e9], [1.0, np.nan, 3.0])
    with pytest.raises(AnalysisError, match="f_unit"):
        fit_clock([1.0, 2.0], [1.0, 2.0], f_unit="THz")
    flat = fit_clock(CLOCKS_MHZ, np.full(6, 4.0), f_unit="MHz")
    assert np.isnan(flat.r2) and any("constant latency" in f for f in flat.flags)
    assert flat.c_cycles == pytest.approx(0.0, abs=1e-6)
    rising = fit_clock(CLOCKS_MHZ, 1.0 + CLOCKS_MHZ / 1000, f_unit="MHz")
    assert any("negative C" in f for f in rising.flags)


def test_clock_fit_refuses_frequencies_impossible_in_the_unit() -> None:
    t = 10313.0 / CLOCKS_MHZ + 1.44
    # MHz numbers with the default unit (Hz) used to give C off by 10^6 without a word.
    with pytest.raises(AnalysisError, match=r"not processor clocks.*look like MHz"):
        fit_clock(CLOCKS_MHZ, t)
    with pytest.raises(AnalysisError, match="look like Hz"):
        fit_clock(CLOCKS_MHZ * 1e6, t, f_unit="MHz")
    ghz = fit_clock(CLOCKS_MHZ / 1e3, t, f_unit="GHz")
    assert ghz.c_cycles == pytest.approx(10313.0, rel=1e-9)


def test_predict_and_clock_fraction_honour_the_unit() -> None:
    t = 10313.0 / CLOCKS_MHZ + 1.44
    mhz = fit_clock(CLOCKS_MHZ, t, f_unit="MHz")
    assert mhz.f_unit == "MHz"
    assert mhz.predict_us(1845.0) == pytest.approx(10313.0 / 1845.0 + 1.44)
    assert mhz.clock_fraction(1845.0) == pytest.approx(
        (10313.0 / 1845.0) / (10313.0 / 1845.0 + 1.44))
    hz = fit_clock(CLOCKS_MHZ * 1e6, t)
    assert hz.predict_us(1845e6) == pytest.approx(mhz.predict_us(1845.0))


def test_clock_fit_uncertainty_matches_a_monte_carlo_under_relative_noise() -> None:
    """1 % relative noise per clock median: the reported standard errors match the spread of
    the estimates over 2000 repetitions (within 10 %); the equal-noise model would under-state
    C's error by about 1.5x, which the test also shows."""
    rng = np.random.default_rng(11)
    truth = 10313.0 / CLOCKS_MHZ + 1.44
    est = {"relative": ([], [], []), "absolute": ([], [], [])}
    for _ in range(2000):
        t = truth * (1 + rng.normal(0, 0.01, truth.size))
        for noise, (cs, c_errs, b_errs) in est.items():
            fit = fit_clock(CLOCKS_MHZ, t, f_unit="MHz", noise=noise)
            cs.append((fit.c_cycles, fit.b_us))
            c_errs.append(fit.c_err)
            b_errs.append(fit.b_err)
    cs, c_errs, b_errs = (np.array(v) for v in est["relative"])
    assert np.sqrt(np.mean(c_errs**2)) == pytest.approx(cs[:, 0].std(), rel=0.1)
    assert np.sqrt(np.mean(b_errs**2)) == pytest.approx(cs[:, 1].std(), rel=0.1)
    acs, ac_errs, _ = (np.array(v) for v in est["absolute"])
    assert acs[:, 0].std() / np.sqrt(np.mean(ac_errs**2)) > 1.3


def test_clock_fit_with_given_sigma_uses_it() -> None:
    t = 10313.0 / CLOCKS_MHZ + 1.44
    sigma = np.full(6, 0.1)
    fit = fit_clock(CLOCKS_MHZ, t, f_unit="MHz", sigma=sigma)
    x = 1.0 / CLOCKS_MHZ
    design = np.column_stack([x, np.ones(6)])
    want = np.sqrt(np.diag(np.linalg.inv(design.T @ design / 0.01)))
    assert (fit.c_err, fit.b_err) == pytest.approx(tuple(want))
    with pytest.raises(AnalysisError, match="noise"):
        fit_clock(CLOCKS_MHZ, t, f_unit="MHz", noise="loud")


# ---- plateau + power-law decline -------------------------------------------------------------

CONNECTIONS = 2.0 ** np.arange(1, 16)  # 2 .. 32,768 active connections, as in Figure 10a


def _plateau_data(
    plateau: float, onset: float, exponent: float, noise: float, seed: int
) -> np.ndarray:
    rng = np.random.default_rng(seed)
    clean = plateau * np.minimum(1.0, (CONNECTIONS / onset) ** -exponent)
    return clean * np.exp(rng.normal(0, noise, CONNECTIONS.size))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_plateau_fit_recovers_onset_exponent_plateau(seed: int) -> None:
    y = _plateau_data(152.0, 1350.0, 0.45, noise=0.02, seed=seed)
    fit = fit_plateau_power_law(CONNECTIONS, y)
    # Tolerance with 2% log-normal noise: plateau 3%, onset 25%, exponent 0.05 absolute;
    # truth within 4 standard errors.
    assert fit.declines and fit.flags == ()
    assert fit.plateau == pytest.approx(152.0, rel=0.03)
    assert fit.onset == pytest.approx(1350.0, rel=0.25)
    assert fit.exponent == pytest.approx(0.45, abs=0.05)
    assert abs(np.log(fit.onset / 1350.0)) < 4 * fit.onset_err / fit.onset
    assert abs(fit.exponent - 0.45) < 4 * fit.exponent_err
    assert fit.r2_log > 0.98
    assert fit.predict([2.0, 32768.0]) == pytest.approx(
        [fit.plateau, fit.plateau * (32768 / fit.onset) ** -fit.exponent]
    )


def test_plateau_fit_noise_free_is_exact() -> None:
    y = _plateau_data(74.0, 700.0, 0.3, noise=0.0, seed=0)
    fit = fit_plateau_power_law(CONNECTIONS, y)
    assert fit.plateau == pytest.approx(74.0, rel=1e-6)
    assert fit.onset == pytest.approx(700.0, rel=1e-4)
    assert fit.exponent == pytest.approx(0.3, rel=1e-6)


def test_plateau_fit_flags_no_decline_and_rise() -> None:
    rng = np.random.default_rng(3)
    flat = 242.0 * np.exp(rng.normal(0, 0.01, CONNECTIONS.size))  # send-only: no decline
    fit = fit_plateau_power_law(CONNECTIONS, flat)
    assert not fit.declines and np.isnan(fit.onset) and fit.exponent == 0.0
    assert fit.plateau == pytest.approx(242.0, rel=0.01)
    assert fit.flags and fit.flags[0].startswith("no decline")
    rising = fit_plateau_power_law(CONNECTIONS, CONNECTIONS**0.2)
    assert not rising.declines and "rises" in rising.flags[0]
    late = _plateau_data(100.0, 20000.0, 1.0, noise=0.0, seed=0)  # one point past the onset
    assert not fit_plateau_power_law(CONNECTIONS, late).declines


@pytest.mark.parametrize("noise", [0.0, 0.03])
def test_plateau_fit_flags_a_u_shape(noise: float) -> None:
    """A rate that declines, then recovers: the model only declines, so the fit is flagged
    (it used to come back without a flag)."""
    rng = np.random.default_rng(5)
    y = 100.0 * np.minimum(1.0, (CONNECTIONS / 300.0) ** -0.4)
    y = y * np.where(CONNECTIONS > 4000, (CONNECTIONS / 4000) ** 0.5, 1.0)
    y = y * np.exp(rng.normal(0, noise, y.size))
    fit = fit_plateau_power_law(CONNECTIONS, y)
    assert any(f.startswith("rises again after x = 4096") for f in fit.flags), fit.flags


def test_plateau_fit_flags_are_rare_on_good_data() -> None:
    flagged = 0
    for seed in range(100):
        y = _plateau_data(152.0, 1350.0, 0.45, noise=0.02, seed=seed)
        flagged += bool(fit_plateau_power_law(CONNECTIONS, y).flags)
    assert flagged <= 5


def test_plateau_runs_test_flags_systematic_residuals() -> None:
    from gicbench.analysis.fits.plateau import runs_z

    assert runs_z(np.array([1.0, 1, 1, 1, -1, -1, -1, -1, 1, 1, 1, 1]), 1.0)[2] < -2
    assert runs_z(np.array([1.0, -1] * 6), 1.0)[2] > 2


def test_plateau_fit_pure_power_law_is_flagged() -> None:
    y = 500.0 * CONNECTIONS**-0.5
    fit = fit_plateau_power_law(CONNECTIONS, y)
    assert fit.declines and fit.exponent == pytest.approx(0.5, rel=1e-6)
    assert any("no plateau observed" in f for f in fit.flags)


# A least-recently-used cache cycled over more contexts than it holds: every lookup hits, then
# every lookup misses. The rate leaves its plateau in one step, then stays on a floor.
CLIFF_X = np.array([8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 128, 192, 256, 384, 512], float)


def _cliff(last_on_plateau: float, floor: float, exponent: float = 0.0, noise: float = 0.0,
           seed: int = 0, x: np.ndarray = CLIFF_X) -> np.ndarray:
    first_off = x[x > last_on_plateau].min()
    y = np.where(x <= last_on_plateau, 1.0, floor * (x / first_off) ** -exponent)
    return y * np.exp(np.random.default_rng(seed).normal(0, noise, x.size))


def test_plateau_fit_places_a_cliff_between_the_points_around_it() -> None:
    """A noise-free step after 64 to a flat floor: the onset is the interval [64, 80] (its
    middle, half its width as the uncertainty), the decline after it flat, the step its size.
    (The continuous power law alone put this onset at 22-28.)"""
    fit = fit_plateau_power_law(CLIFF_X, _cliff(64, 0.05))
    assert fit.declines and fit.shape == "step" and fit.flags == ()
    assert (fit.onset, fit.onset_err) == (72.0, 8.0)
    assert fit.tail_start == 80.0
    assert fit.plateau == pytest.approx(1.0) and fit.drop == pytest.approx(0.05)
    assert fit.exponent == pytest.approx(0.0, abs=1e-9)
    assert fit.predict([8.0, 64.0, 72.0, 80.0, 512.0]) == pytest.approx(
        [1.0, 1.0, 1.0, 0.05, 0.05])


@pytest.mark.parametrize("seed", range(6))
def test_plateau_fit_cliff_with_noise_and_a_decline_after_it(seed: int) -> None:
    """3% noise, a step after 512 to a fifth, then a power law of exponent 0.5: the onset's
    interval holds 512, and the exponent of the part after the onset is recovered."""
    x = 2.0 ** np.arange(1, 16)
    fit = fit_plateau_power_law(x, 150.0 * _cliff(512, 0.2, 0.5, noise=0.03, seed=seed, x=x))
    assert fit.shape == "step" and fit.declines
    assert fit.onset - fit.onset_err <= 512 <= fit.onset + fit.onset_err
    assert fit.onset_err <= 256  # the one interval [512, 1024]: the noise is far below the step
    assert fit.plateau == pytest.approx(150.0, rel=0.03)
    assert abs(fit.exponent - 0.5) < 4 * fit.exponent_err
    assert fit.drop == pytest.approx(0.2, rel=0.1)


def test_plateau_fit_onset_uncertainty_spans_the_splits_the_noise_allows() -> None:
    """A point on the way down (x = 80, from the plateau's level to the floor's) belongs to the
    plateau or to the decline; where the residuals cannot tell which, the onset's interval
    covers both splits, [64, 96], and it is never wider than that."""
    noise = np.exp(np.random.default_rng(1).normal(0, 0.05, CLIFF_X.size))
    intervals = set()
    for mid in np.geomspace(0.05, 1.0, 200):
        y = _cliff(64, 0.05)
        y[CLIFF_X == 80] = mid
        fit = fit_plateau_power_law(CLIFF_X, y * noise)
        assert fit.shape == "step"
        intervals.add((fit.onset - fit.onset_err, fit.onset + fit.onset_err))
    assert intervals == {(64.0, 80.0), (64.0, 96.0), (80.0, 96.0)}


@pytest.mark.parametrize("drop", [0.3, 0.5])
def test_plateau_fit_cliff_interval_holds_the_onset_under_noise(drop: float) -> None:
    """10% noise: wherever a step is found, its interval holds the last point of the plateau."""
    found = 0
    for seed in range(100):
        fit = fit_plateau_power_law(CLIFF_X, _cliff(64, drop, noise=0.1, seed=seed))
        if fit.shape == "step":
            found += 1
            assert fit.onset - fit.onset_err <= 64 <= fit.onset + fit.onset_err, seed
    assert found >= 90


def test_plateau_fit_a_gradual_decline_is_not_taken_for_a_step() -> None:
    steps = sum(fit_plateau_power_law(CONNECTIONS, _plateau_data(
        152.0, 1350.0, 0.45, noise=0.02, seed=seed)).shape == "step" for seed in range(100))
    assert steps <= 1


def test_plateau_fit_reports_the_step_and_draws_it() -> None:
    import pandas as pd

    from gicbench.analysis.fits.apply import fit_columns

    df = pd.DataFrame({"connections": CLIFF_X, "normalized_rate": _cliff(64, 0.05)})
    o = fit_columns("plateau", df, "connections", "normalized_rate")
    assert o.params["onset"].value == 72.0 and o.params["onset"].err == 8.0
    assert o.params["drop at the onset"].value == pytest.approx(0.05)
    xs, ys = o.curve  # type: ignore[misc]
    at = xs.index(72.0)
    assert ys[at] == pytest.approx(1.0) and ys[at + 1] < 0.06  # the curve steps at the onset
    smooth = fit_columns("plateau", pd.DataFrame({"connections": CONNECTIONS, "normalized_rate":
                                                  _plateau_data(1.0, 700.0, 0.3, 0.0, 0)}),
                         "connections", "normalized_rate")
    assert "drop at the onset" not in smooth.params


def test_plateau_fit_degenerate_input() -> None:
    with pytest.raises(FitError, match="at least 4 points"):
        fit_plateau_power_law([1, 2, 3], [3, 2, 1])
    with pytest.raises(FitError, match="3 distinct x"):
        fit_plateau_power_law([1, 1, 2, 2], [3, 3, 2, 2])
    with pytest.raises(FitError, match="constant"):
        fit_plateau_power_law(CONNECTIONS, np.full(CONNECTIONS.size, 5.0))
    with pytest.raises(AnalysisError, match="> 0"):
        fit_plateau_power_law([1, 2, 4, 8], [1.0, 0.0, 1.0, 1.0])
    with pytest.raises(AnalysisError, match="differ in length"):
        fit_plateau_power_law([1, 2, 4, 8], [1.0, 1.0])


# ---- first size reaching a fraction of a reference bandwidth ----------------------------------

SIZES = 2.0 ** np.arange(3, 21)  # 8 B .. 1 MiB


def test_first_sampled_size_reaching_ninety_percent() -> None:
    # Goodput of a posting-rate-limited path: rate * size, capped by the link (24.8 GB/s).
    rate_mps = 50.0
    bw = np.minimum(24.8, rate_mps * 1e6 * SIZES / 1e9)
    cross = first_size_reaching(SIZES, bw, reference=24.8)
    # 0.9 * 24.8 GB/s at 50 M msg/s needs 446.4 B: the first sampled size is 512 B.
    assert cross.size == 512.0 and cross.index == int(np.log2(512)) - 3
    assert cross.threshold == pytest.approx(22.32) and not cross.interpolated
    assert cross.flags == ()


def test_interpolated_crossing_is_linear_in_log2_size() -> None:
    bw = np.log2(SIZES)  # 3 .. 20, linear in log2(size)
    cross = first_size_reaching(SIZES, bw, reference=20.0, fraction=0.5, interpolate=True)
    assert cross.interpolated and cross.size == pytest.approx(2.0**10)  # exact: bw == 10
    cross = first_size_reaching(SIZES, bw, reference=20.0, fraction=0.525, interpolate=True)
    assert cross.size == pytest.approx(2.0**10.5) and cross.index == 8  # sampled: 2^11


def test_crossing_flags_and_errors() -> None:
    never = first_size_reaching(SIZES, np.full(SIZES.size, 10.0), reference=24.8)
    assert never.size is None and never.index is None and "not reached" in never.flags[0]
    first = first_size_reaching(SIZES, np.full(SIZES.size, 24.0), reference=24.8)
    assert first.size == 8.0 and "smallest size" in first.flags[0]
    dip = np.where(SIZES == 4096, 10.0, np.minimum(24.8, SIZES / 20))
    assert any(
        "falls below" in f and "4096" in f for f in first_size_reaching(SIZES, dip, 24.8).flags
    )
    shuffled = first_size_reaching(SIZES[::-1], np.minimum(24.8, SIZES / 20)[::-1], 24.8)
    assert shuffled.size == 512.0
    for kwargs, match in [
        ({"reference": 0.0}, "reference"),
        ({"reference": 24.8, "fraction": 1.5}, "fraction"),
    ]:
        with pytest.raises(AnalysisError, match=match):
            first_size_reaching(SIZES, np.ones(SIZES.size), **kwargs)
    with pytest.raises(AnalysisError, match="duplicates"):
        first_size_reaching([8, 8], [1, 2], 2.0)
    with pytest.raises(AnalysisError, match="empty"):
        first_size_reaching([], [], 2.0)


# ---- exposed-communication model (arXiv 2611.12362 eqs. 1-3) ---------------------------------


def test_exposed_model_cases_from_the_paper() -> None:
    # Covering work starts at release (A <= R): S = R, J = I.
    m = exposed_model(ready=0.0, release=10.0, in_flight=50.0, cover=[80.0, 30.0])
    assert m.start.tolist() == [10.0, 10.0] and m.remaining.tolist() == [50.0, 50.0]
    assert m.exposed.tolist() == [0.0, 20.0]  # T >= I hides all; T < I leaves I - T
    assert m.overlapped.tolist() == [50.0, 30.0]
    assert m.receive_start.tolist() == [90.0, 60.0]
    # Work ready later than release: some progress happens before S, T need only cover J.
    late = exposed_model(ready=40.0, release=10.0, in_flight=50.0, cover=25.0)
    assert float(late.start) == 40.0 and float(late.remaining) == 20.0
    assert float(late.exposed) == 0.0 and float(late.receive_start) == 65.0
    # In-flight done before work is ready: nothing remains.
    assert float(exposed_model(100.0, 10.0, 50.0, 5.0).remaining) == 0.0


finite = st.floats(0, 1e4, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(
    arrays(float, 8, elements=finite),
    arrays(float, 8, elements=finite),
    arrays(float, 8, elements=finite),
    arrays(float, 8, elements=finite),
)
def test_exposed_model_identities(
    a: np.ndarray, r: np.ndarray, i: np.ndarray, t: np.ndarray
) -> None:
    m = exposed_model(a, r, i, t)
    assert np.allclose(m.receive_start, np.maximum(m.start + t, r + i))  # eq. 3
    assert np.allclose(m.overlapped + m.exposed, m.remaining)  # J = O + X
    assert np.all(m.exposed >= 0) and np.all(m.remaining <= i + 1e-9)


def test_exposed_model_broadcasts_and_validates() -> None:
    m = exposed_model(np.zeros((3, 1)), 5.0, np.array([10.0, 20.0]), 12.0)
    assert m.exposed.shape == (3, 2) and m.exposed[0].tolist() == [0.0, 8.0]
    with pytest.raises(AnalysisError, match="in_flight"):
        exposed_model(0.0, 1.0, -1.0, 1.0)
    with pytest.raises(AnalysisError, match="NaN"):
        exposed_model(np.nan, 1.0, 1.0, 1.0)


@pytest.mark.parametrize(("args", "match"), [
    ((0.0, np.inf, 1.0, 1.0), r"release \(R\) has infinite"),
    ((0.0, 1.0, np.inf, 1.0), r"in_flight \(I\) has infinite"),
    ((-np.inf, 1.0, 1.0, 1.0), r"ready \(A\) has infinite"),
    ((0.0, -2.0, 1.0, 1.0), r"release \(R\) is a time after dispatch send starts"),
])
def test_exposed_model_refuses_infinite_and_negative_release(args: tuple, match: str) -> None:
    with pytest.raises(AnalysisError, match=match):
        exposed_model(*args)
    assert exposed_model(-3.0, 1.0, 1.0, 1.0).start == 1.0  # work ready before send: allowed


def test_release_advance() -> None:
    # Full when A <= R_off, partial in between, zero when A >= R_base.
    d_r, d_s = release_advance([0.0, 30.0, 80.0], 50.0, 20.0)
    assert d_r.tolist() == [30.0, 30.0, 30.0] and d_s.tolist() == [30.0, 20.0, 0.0]
    with pytest.raises(AnalysisError, match="release_off"):
        release_advance(0.0, 10.0, 20.0)


# ---- Fig. 6: shortest wait within 5% of the floor --------------------------------------------

WAITS = np.array([0, 4, 8, 16, 32, 64, 96, 128, 256, 512, 1024], dtype=float)


def test_near_floor_marks_the_covering_window() -> None:
    rng = np.random.default_rng(4)
    # Exposed time falls with the wait until it covers the in-flight time, then levels off.
    rows = []
    for floor, in_flight in ((34.0, 24.0), (24.0, 60.0), (108.8, 200.0)):
        rows.append(floor + np.maximum(0.0, in_flight - WAITS) + rng.normal(0, 0.3, WAITS.size))
    nf = shortest_wait_near_floor(WAITS, np.array(rows))
    assert nf.wait.tolist() == [32.0, 64.0, 256.0]
    assert nf.floor == pytest.approx([34.0, 24.0, 108.8], abs=1.5)
    one = shortest_wait_near_floor(WAITS, rows[0])
    assert one.wait == 32.0 and isinstance(one.index, int) and one.tolerance == 0.05


def test_near_floor_edge_cases() -> None:
    times = np.array([50.0, 40.0, np.nan, 31.0, 30.0])
    waits = np.array([0.0, 8.0, 16.0, 32.0, 64.0])
    assert shortest_wait_near_floor(waits, times).wait == 32.0  # NaN cell skipped
    assert shortest_wait_near_floor(waits[::-1], times[::-1]).wait == 32.0  # unsorted waits
    assert shortest_wait_near_floor(waits, times, tolerance=0.0).wait == 64.0
    with pytest.raises(AnalysisError, match="no finite value"):
        shortest_wait_near_floor(waits, np.full(5, np.nan))
    with pytest.raises(AnalysisError, match="waits axis"):
        shortest_wait_near_floor(waits, times[:3])
    with pytest.raises(AnalysisError, match="positive floor"):
        shortest_wait_near_floor(waits, times - 40.0)
    with pytest.raises(AnalysisError, match="tolerance"):
        shortest_wait_near_floor(waits, times, tolerance=1.5)


def test_a_fit_says_what_it_fitted_in_which_units() -> None:
    """The crossover's threshold and reference carry the bandwidth's unit, and the fitted
    columns are named with theirs (they were bare: "gbps against size", a threshold of "18")."""
    import pandas as pd

    from gicbench.analysis.fits.apply import data_line, fit_columns, outcome_lines

    df = pd.DataFrame({"size": [8, 64, 512, 4096], "gbps": [0.1, 1.0, 8.0, 20.0]})
    o = fit_columns("crossover", df, "size", "gbps")
    assert o.params["threshold"].unit == "GB/s" and o.params["reference"].unit == "GB/s"
    assert data_line(o) == "gbps (GB/s) against size (B), 4 points"
    assert "threshold = 18 GB/s" in "\n".join(outcome_lines(o))
