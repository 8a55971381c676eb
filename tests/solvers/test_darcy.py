"""Darcy: convergence order, matrix properties, PCG, reproducibility, bad input."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from ssmpde.data import config_of
from ssmpde.generation import generate
from ssmpde.solvers import Darcy
from ssmpde.solvers.darcy import reference_matrix

pytestmark = pytest.mark.usefixtures("raise_on_fp_errors")


def manufactured(k):
    # u = sin πx sin πy x(1 − y) e^{x}, a = 2 + sin 2πx cos 3πy: smooth, u = 0 on the boundary.
    # f = −∇·(a∇u) = −(a_x u_x + a u_xx + a_y u_y + a u_yy), by hand.
    c = np.linspace(0, 1, k)
    y, x = np.meshgrid(c, c, indexing="ij")
    pi = np.pi
    g = x * (1 - y) * np.exp(x)
    gx, gxx = (1 - y) * np.exp(x) * (1 + x), (1 - y) * np.exp(x) * (2 + x)
    gy, gyy = -x * np.exp(x), 0.0
    s = np.sin(pi * x) * np.sin(pi * y)
    sx, sy = pi * np.cos(pi * x) * np.sin(pi * y), pi * np.sin(pi * x) * np.cos(pi * y)
    sxx = syy = -pi ** 2 * s
    u = s * g
    ux, uy = sx * g + s * gx, sy * g + s * gy
    uxx, uyy = sxx * g + 2 * sx * gx + s * gxx, syy * g + 2 * sy * gy + s * gyy
    a = 2 + np.sin(2 * pi * x) * np.cos(3 * pi * y)
    ax = 2 * pi * np.cos(2 * pi * x) * np.cos(3 * pi * y)
    ay = -3 * pi * np.sin(2 * pi * x) * np.sin(3 * pi * y)
    f = -(ax * ux + a * uxx + ay * uy + a * uyy)
    return a, f, u


def test_manufactured_solution_converges_at_second_order_in_the_max_norm():
    sizes, errors = [17, 33, 65, 129], []
    for k in sizes:
        a, f, exact = manufactured(k)
        u = Darcy(resolution=k, simulation_resolution=k).solve(a[None], f)[0]
        errors.append(np.max(np.abs(u - exact)))
    h = [1 / (k - 1) for k in sizes]
    order = np.polyfit(np.log(h), np.log(errors), 1)[0]
    assert abs(order - 2) < 0.1, (order, errors)


@given(k=st.integers(3, 9), seed=st.integers(0, 2 ** 16))
def test_vectorised_matrix_equals_loop_assembly(k, seed):
    a = np.random.default_rng(seed).uniform(0.5, 12.0, size=(k, k))
    fast = Darcy(resolution=k, simulation_resolution=k).matrix(a)
    np.testing.assert_allclose(fast.toarray(), reference_matrix(a).toarray(), rtol=1e-14, atol=0)


def test_matrix_is_symmetric_positive_definite():
    darcy = Darcy(resolution=13, simulation_resolution=13)
    a = darcy.coefficient(seed=4, indices=[0])[0]
    matrix = darcy.matrix(a)
    assert abs(matrix - matrix.T).max() == 0.0
    eigenvalues = np.linalg.eigvalsh(matrix.toarray())
    assert eigenvalues.min() > 0
    # Poincaré: λ_min ≥ min(a) · (smallest Dirichlet Laplacian eigenvalue on the grid)
    h = 1 / 12
    laplacian_min = 2 * 4 * np.sin(np.pi * h / 2) ** 2 / h ** 2
    assert eigenvalues.min() >= a.min() * laplacian_min * (1 - 1e-12)


@given(seed=st.integers(0, 2 ** 16))
def test_discrete_maximum_principle(seed):
    rng = np.random.default_rng(seed)
    darcy = Darcy(resolution=17, simulation_resolution=17)
    a = np.where(rng.standard_normal((2, 17, 17)) > 0, 12.0, 3.0)
    f = rng.uniform(0, 1, size=(2, 17, 17))
    u = darcy.solve(a, f)
    assert np.all(u >= 0)
    assert np.all(u[:, 0, :] == 0) and np.all(u[:, :, -1] == 0)


def test_pcg_agrees_with_direct_and_warm_starts_need_fewer_iterations():
    darcy = Darcy(resolution=65, simulation_resolution=65)
    a = darcy.coefficient(seed=1, indices=[0, 1, 2])
    direct = darcy.solve(a)
    cold, cold_info = darcy.solve_iterative(a, rtol=1e-10)
    assert np.all(cold_info["converged"]) and np.all(cold_info["residual"] <= 1e-10)
    # error ≤ κ(A)·rtol·|u|; κ(A) ≈ (max a / min a)·(8/π²)/h² ≈ 1.3e4 at K = 65
    assert np.max(np.abs(cold - direct)) <= 2e-6 * np.max(np.abs(direct))
    guess = direct * (1 + 0.01 * np.sin(7 * np.linspace(0, 1, 65)))[None, None, :]
    warm, warm_info = darcy.solve_iterative(a, x0=guess, rtol=1e-10)
    assert np.all(warm_info["iterations"] < cold_info["iterations"])
    assert np.max(np.abs(warm - direct)) <= 2e-6 * np.max(np.abs(direct))


def test_preconditioned_iterations_do_not_grow_with_resolution():
    counts = []
    for k in (33, 129):
        darcy = Darcy(resolution=k, simulation_resolution=k)
        _, info = darcy.solve_iterative(darcy.coefficient(0, [0]), rtol=1e-10)
        counts.append(int(info["iterations"][0]))
    assert max(counts) <= 40 and counts[1] <= counts[0] + 5, counts


@pytest.mark.parametrize("linear_solver", ["direct", "pcg"])
def test_same_seed_same_data_whatever_the_batch_size(linear_solver):
    config = dict(resolution=11, simulation_resolution=41, linear_solver=linear_solver)
    one = generate("darcy", num_samples=5, seed=9, batch_size=1, progress=False, **config)
    five = generate("darcy", num_samples=5, seed=9, batch_size=5, progress=False, **config)
    a_one, a_five = one.drop_attrs(deep=False), five.drop_attrs(deep=False)
    np.testing.assert_array_equal(a_one.a.values, a_five.a.values)
    np.testing.assert_array_equal(a_one.u.values, a_five.u.values)


def test_generated_dataset_strides_the_fine_solve(tmp_path):
    ds = generate("darcy", num_samples=2, seed=0, resolution=11, simulation_resolution=41,
                  out=tmp_path / "darcy.nc", progress=False)
    darcy = Darcy(resolution=11, simulation_resolution=41)
    a = darcy.coefficient(0, [0, 1])
    u = darcy.solve(a)
    np.testing.assert_array_equal(ds.a.values, a[:, ::4, ::4])
    np.testing.assert_array_equal(ds.u.values, u[:, ::4, ::4])
    assert set(np.unique(ds.a)) <= {3.0, 12.0}
    np.testing.assert_allclose(ds.x, np.linspace(0, 1, 11))
    assert config_of(ds)["solver"]["coefficient_low"] == 3.0
    ds.close()


def test_direct_and_pcg_datasets_agree():
    config = dict(resolution=11, simulation_resolution=81, progress=False)
    direct = generate("darcy", num_samples=2, seed=3, **config)
    pcg = generate("darcy", num_samples=2, seed=3, linear_solver="pcg", **config)
    assert np.max(np.abs(direct.u - pcg.u)) <= 1e-8 * float(np.max(np.abs(direct.u)))


@pytest.mark.parametrize("a, message", [
    (np.full((1, 9, 9), -1.0), "positive"),
    (np.zeros((1, 9, 9)), "positive"),
    (np.where(np.eye(9, dtype=bool), np.nan, 1.0)[None], "NaN"),
    (np.ones((1, 8, 8)), "shape"),
    (np.ones((9, 9)), "shape"),
])
def test_bad_coefficients_are_rejected(a, message):
    darcy = Darcy(resolution=9, simulation_resolution=9)
    with pytest.raises(ValueError, match=message):
        darcy.solve(a)
    with pytest.raises(ValueError, match=message):
        darcy.solve_iterative(a)


@pytest.mark.parametrize("config, message", [
    (dict(resolution=84), "multiple of resolution - 1"),
    (dict(resolution=86), "85"),
    (dict(coefficient_low=0.0), "coefficient_low"),
    (dict(forcing=float("nan")), "forcing"),
    (dict(linear_solver="amg"), "linear_solver"),
])
def test_bad_config_is_rejected(config, message):
    with pytest.raises(ValueError, match=message):
        Darcy(**config)


def test_bad_forcing_and_initial_guess_are_rejected():
    darcy = Darcy(resolution=9, simulation_resolution=9)
    a = np.ones((1, 9, 9))
    with pytest.raises(ValueError, match="forcing"):
        darcy.solve(a, np.ones((5, 5)))
    with pytest.raises(ValueError, match="x0"):
        darcy.solve_iterative(a, x0=np.ones((1, 5, 5)))


# -- the PDEBench variant (preset "pdebench-like": MNO's Darcy data) -------------------------

def pdebench_residual(a, u, beta):
    """max |−∇·(a∇u) − β| of PDEBench's cell-centred flux form, written out on its own.

    Cells (i + ½)/N, h = 1/N; interior faces carry the mean of their two cells, a boundary face
    the value of its cell; u = 0 half a cell outside the square (PDEBench's ghost cells).
    """
    n = a.shape[-1]
    zeros = np.zeros((n, 1))
    ax = np.hstack([a[:, :1], 0.5 * (a[:, :-1] + a[:, 1:]), a[:, -1:]])  # [y, x faces]
    ay = np.vstack([a[:1], 0.5 * (a[:-1] + a[1:]), a[-1:]])  # [y faces, x]
    flux_x = -ax * np.diff(np.hstack([zeros, u, zeros]), axis=1) * n
    flux_y = -ay * np.diff(np.vstack([zeros.T, u, zeros.T]), axis=0) * n
    divergence = np.diff(flux_x, axis=1) * n + np.diff(flux_y, axis=0) * n
    return np.max(np.abs(divergence - beta))


def test_pdebench_like_preset_and_its_64_from_128_grid():
    darcy = Darcy.from_preset("pdebench-like")
    cfg = darcy.config
    assert (cfg.grid, cfg.coefficient, cfg.simulation_resolution, cfg.resolution) == \
        ("cells", "bumps", 128, 128)
    assert (cfg.coefficient_high, cfg.coefficient_low, cfg.forcing) == (1.0, 0.1, 1.0)
    np.testing.assert_allclose(darcy.coordinates()["x"], (np.arange(128) + 0.5) / 128)
    coarse = Darcy.from_preset("pdebench-like", resolution=64)
    assert coarse.config.stride == 2
    np.testing.assert_allclose(coarse.coordinates()["y"], (2 * np.arange(64) + 0.5) / 128)
    assert "PDEBench" in coarse.references and "2410.02113" in coarse.references


def test_pdebench_like_sample_is_the_same_whatever_the_batch_size():
    config = dict(preset="pdebench-like", resolution=16, simulation_resolution=32,
                  progress=False)
    one = generate("darcy", num_samples=3, seed=5, batch_size=1, **config)
    three = generate("darcy", num_samples=3, seed=5, batch_size=3, **config)
    np.testing.assert_array_equal(one.a.values, three.a.values)
    np.testing.assert_array_equal(one.u.values, three.u.values)
    # Stored data are the fine solve's cells, every other one.
    darcy = Darcy.from_preset("pdebench-like", resolution=16, simulation_resolution=32)
    a = darcy.coefficient(5, [0, 1, 2])
    np.testing.assert_array_equal(three.a.values, a[:, ::2, ::2])
    np.testing.assert_array_equal(three.u.values, darcy.solve(a)[:, ::2, ::2])
    np.testing.assert_array_equal(darcy.coefficient(5, [2])[0], a[2])


@pytest.mark.parametrize("beta", [0.01, 1.0, 100.0])
def test_pdebench_like_solution_satisfies_the_discrete_equations(beta):
    darcy = Darcy.from_preset("pdebench-like", forcing=beta, threads=1)
    a = darcy.coefficient(seed=2, indices=[0, 1])
    direct = darcy.solve(a)
    iterative, info = darcy.solve_iterative(a, rtol=1e-12)
    assert np.all(info["converged"])
    for index in range(2):
        assert pdebench_residual(a[index], direct[index], beta) <= 1e-10 * beta
        assert pdebench_residual(a[index], iterative[index], beta) <= 1e-10 * beta
    assert np.all(direct > 0)  # maximum principle: positive source, u = 0 outside


def test_pdebench_like_coefficient_is_thresholded_gaussian_bumps():
    n = 32
    darcy = Darcy.from_preset("pdebench-like", resolution=n, simulation_resolution=n)
    indices = list(range(64))
    a = darcy.coefficient(seed=7, indices=indices)
    assert set(np.unique(a)) == {0.1, 1.0}
    centres, widths = darcy.bumps(seed=7, indices=indices)
    c = (np.arange(n) + 0.5) / n
    y, x = np.meshgrid(c, c, indexing="ij")
    for row in range(len(indices)):
        g = np.zeros((n, n))
        with np.errstate(under="ignore"):
            for (mx, my), s in zip(centres[row], widths[row]):
                g += np.exp(-((x - mx) ** 2 + (y - my) ** 2) / s)  # / s, not / s²
        mean = g.mean()
        clear = np.abs(g - mean) > 1e-12 * mean  # leave summation-order ties alone
        np.testing.assert_array_equal(a[row][clear], np.where(g > mean, 1.0, 0.1)[clear])
    # Each sample is cut at its own mean: about half of the square has a = 1, never exactly.
    fraction = (a == 1.0).mean(axis=(1, 2))
    assert 0.45 < fraction.mean() < 0.55 and fraction.std() > 0.01
    assert np.all((fraction > 0.2) & (fraction < 0.8))
    # The law of the draws: centres ~ U[0, 1]², widths ~ 0.5 U[0, 1].
    centres, widths = darcy.bumps(seed=0, indices=range(2000))
    assert stats.kstest(centres.ravel(), "uniform").pvalue > 1e-3
    assert stats.kstest(widths.ravel() / 0.5, "uniform").pvalue > 1e-3
    assert np.all((widths > 0) & (widths <= 0.5))


@pytest.mark.parametrize("config, message", [
    (dict(forcing=0.0), "forcing"),
    (dict(forcing=-1.0), "forcing"),
    (dict(forcing=float("nan")), "forcing"),
    (dict(forcing=float("inf")), "forcing"),
    (dict(resolution=48), "multiple of resolution"),
    (dict(grid="vertices"), "grid"),
    (dict(coefficient="lognormal"), "coefficient"),
])
def test_pdebench_like_bad_config_is_rejected(config, message):
    with pytest.raises(ValueError, match=message):
        Darcy.from_preset("pdebench-like", **config)
