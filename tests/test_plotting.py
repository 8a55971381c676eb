"""Figures: any field, 1D or 2D, steady or time-dependent; real extents; honest colour maps."""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import xarray as xr

from ssmpde import plotting
from ssmpde.data import (SAMPLE, TIME, X, Y, build_dataset, grid_coordinates, sample_coordinate,
                         time_coordinate)
from ssmpde.plotting import _common
from ssmpde.plotting import hybrid as hybrid_figures
from ssmpde.plotting import pareto as pareto_figures
from ssmpde.plotting import plot_hybrid, plot_snapshots
from ssmpde.plotting import snapshots as snapshot_figures
from ssmpde.solvers import KuramotoSivashinsky


def var(dims, values, long_name, units, role=None):
    attrs = {"long_name": long_name, "units": units}
    if role is not None:
        attrs["role"] = role
    return xr.DataArray(values, dims=dims, attrs=attrs)


def dataset(data_vars, **coords):
    return build_dataset(data_vars, coords=coords, equation="test", config={"seed": 0},
                         title="synthetic test data", references="none", solver="none")


def coord(dim, values, units):
    return xr.DataArray(np.asarray(values, dtype=np.float64), dims=(dim,),
                        attrs={"units": units, "long_name": f"{dim} coordinate"})


def image_axes(fig):
    """Axes holding an image, in creation (row-major) order; colour bars come later."""
    return [ax for ax in fig.axes if ax.images]


def colorbar_labels(fig):
    return [ax.get_ylabel().replace("\n", " ") for ax in fig.axes
            if not ax.images and not ax.lines and ax.get_ylabel()]


def edges(nodes):
    step = nodes[1] - nodes[0]
    return nodes[0] - step / 2, nodes[-1] + step / 2


@pytest.fixture
def flow2d():
    """Two samples, five times, a signed vorticity and a positive density, plus a parameter
    and a forcing field that the default selection must leave out."""
    rng = np.random.default_rng(0)
    grid = grid_coordinates(8, ndim=2)
    shape = (2, 5, 8, 8)
    return dataset({
        "vorticity": var((SAMPLE, TIME, Y, X), rng.normal(size=shape) + 0.3, "vorticity", "1",
                         "state"),
        "density": var((SAMPLE, TIME, Y, X), 1.0 + rng.random(shape), "density", "kg m-3",
                       "state"),
        "forcing": var((Y, X), rng.normal(size=(8, 8)), "forcing", "1", "forcing"),
        "viscosity": var((SAMPLE,), [1e-3, 1e-4], "viscosity", "1", "parameter"),
    }, sample=sample_coordinate(2), time=time_coordinate(np.arange(5) * 0.5), **grid)


def test_2d_time_dependent_two_fields(tmp_path, flow2d):
    # Saving draws the whole layout (slow): keep the written figure small, and check the
    # full one as built, unsaved.
    out = plot_snapshots(flow2d, tmp_path / "flow.png", samples=(1,), num_times=2, dpi=50)
    assert out.exists() and out.stat().st_size > 0
    assert [p.name for p in tmp_path.iterdir()] == ["flow.png"]

    fig = snapshot_figures._snapshot_figure(flow2d, num_times=3)
    axes = image_axes(fig)
    assert len(axes) == 2 * 2 * 3  # rows (sample, field) x 3 times; forcing/viscosity left out
    shown = flow2d.isel(time=[0, 2, 4])
    rows = [(s, name) for s in (0, 1) for name in ("vorticity", "density")]
    for r, (s, name) in enumerate(rows):
        values = shown[name].isel(sample=s).values
        for ax in axes[3 * r:3 * r + 3]:
            image = ax.images[0]
            vmin, vmax = image.get_clim()
            if name == "vorticity":
                assert image.get_cmap().name == "RdBu_r"
                assert -vmin == vmax == pytest.approx(np.abs(values).max())
            else:
                assert image.get_cmap().name == "viridis"
                assert (vmin, vmax) == pytest.approx((values.min(), values.max()))
            assert image.get_extent() == pytest.approx([-1 / 16, 15 / 16, -1 / 16, 15 / 16])
    assert [ax.get_title() for ax in axes[:3]] == [f"sample 0, t = {t:g}" for t in (0, 1, 2)]
    labels = colorbar_labels(fig)
    assert labels.count("vorticity (non-dimensional)") == 2
    assert labels.count("density [kg m-3]") == 2
    assert fig.get_suptitle() == "synthetic test data"


def test_single_variable_by_name_and_without_roles(flow2d):
    fig = snapshot_figures._snapshot_figure(flow2d, variables="density", samples=(1,), num_times=2)
    assert len(image_axes(fig)) == 2
    for name in flow2d.data_vars:
        flow2d[name].attrs.pop("role")
    fig = snapshot_figures._snapshot_figure(flow2d, samples=(0,), num_times=2)
    # without roles every variable with spatial dims is drawn: the steady forcing alone in
    # the first panel of its row
    assert len(image_axes(fig)) == 2 + 2 + 1
    assert "forcing (non-dimensional)" in colorbar_labels(fig)


def test_1d_time_dependent_space_time_extent(tmp_path):
    x = grid_coordinates(16, ndim=1, length=2.0, units="m")
    t = time_coordinate(np.linspace(0.0, 0.9, 10), units="s")
    u = np.sin(np.pi * x["x"].values)[None, None, :] * np.ones((3, 10, 1))
    ds = dataset({"u": var((SAMPLE, TIME, X), u, "velocity", "m s-1", "state")},
                 sample=sample_coordinate(3), time=t, **x)
    assert plot_snapshots(ds, tmp_path / "burgers.png", samples=(0, 2), dpi=50).exists()
    fig = snapshot_figures._snapshot_figure(ds, samples=(0, 2))
    axes = image_axes(fig)
    assert len(axes) == 2
    for ax in axes:
        assert ax.images[0].get_extent() == pytest.approx(
            [*edges(x["x"].values), *edges(t.values)])
        assert ax.images[0].get_array().shape == (10, 16)  # time vertical, x horizontal
        assert ax.get_ylabel() == "time [s]"
        assert ax.images[0].get_cmap().name == "RdBu_r"
    assert axes[-1].get_xlabel() == "x [m]"
    assert "velocity [m s-1]" in colorbar_labels(fig)


def test_1d_steady_line_plots():
    x = grid_coordinates(10, ndim=1, endpoint=True)
    ds = dataset({"h": var((SAMPLE, X), np.random.default_rng(1).random((2, 10)), "height",
                           "m")}, sample=sample_coordinate(2), **x)
    fig = snapshot_figures._snapshot_figure(ds)
    lines = [ax for ax in fig.axes if ax.lines]
    assert len(lines) == 2 and not image_axes(fig)
    assert lines[0].get_xlim() == pytest.approx((0.0, 1.0))
    assert lines[0].get_ylabel() == "height [m]"


def test_steady_2d_darcy_one_panel_per_field_per_sample():
    rng = np.random.default_rng(2)
    grid = grid_coordinates(9, ndim=2, endpoint=True)
    ds = dataset({
        "a": var((SAMPLE, Y, X), 3.0 + 9.0 * (rng.random((3, 9, 9)) > 0.5), "permeability",
                 "1"),
        "u": var((SAMPLE, Y, X), rng.random((3, 9, 9)), "pressure", "Pa"),
        "seed": var((SAMPLE,), np.arange(3), "seed", "1"),
    }, sample=sample_coordinate(3), **grid)
    fig = snapshot_figures._snapshot_figure(ds, samples=(0, 1, 2))
    axes = image_axes(fig)
    assert [ax.get_title() for ax in axes] == [f"{v}, sample {s}" for s in range(3)
                                               for v in ("a", "u")]
    assert all(ax.images[0].get_cmap().name == "viridis" for ax in axes)
    assert axes[0].images[0].get_extent() == pytest.approx([-1 / 16, 17 / 16] * 2)
    labels = colorbar_labels(fig)
    assert labels.count("permeability (non-dimensional)") == 3
    assert labels.count("pressure [Pa]") == 3


def test_rectangular_grid_extent_and_units():
    x = coord(X, np.arange(8) * 2.0 / 8, "km")
    y = coord(Y, np.arange(4) / 4, "km")
    ds = dataset({"T": var((SAMPLE, Y, X), np.ones((1, 4, 8)), "temperature", "K")},
                 sample=sample_coordinate(1), x=x, y=y)
    fig = snapshot_figures._snapshot_figure(ds, samples=(0, 1))
    (ax,) = image_axes(fig)
    assert ax.images[0].get_extent() == pytest.approx([-0.125, 1.875, -0.125, 0.875])
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("x [km]", "y [km]")


def test_non_uniform_grid_uses_a_mesh_at_the_nodes():
    x = coord(X, [0.0, 0.1, 0.3, 0.7, 1.0], "1")
    ds = dataset({"c": var((SAMPLE, Y, X), np.ones((1, 2, 5)), "concentration", "1")},
                 sample=sample_coordinate(1), x=x, y=coord(Y, [0.0, 1.0], "1"))
    fig = snapshot_figures._snapshot_figure(ds)
    ax = fig.axes[0]  # the panel; its colour bar comes after it
    assert not ax.images and len(ax.collections) == 1
    assert ax.get_xlim() == pytest.approx((-0.05, 1.15))


@pytest.mark.parametrize("grid", [(12,), (6, 10)])
def test_plot_hybrid_two_fields(tmp_path, grid):
    rng = np.random.default_rng(3)
    shape = (2, 4, 2, *grid)
    reference = rng.normal(size=shape)
    reference[:, :, 1] = np.abs(reference[:, :, 1]) + 1.0  # a positive second field
    hybrid = reference + 0.01 * rng.normal(size=shape)
    surrogate = reference + 0.1 * rng.normal(size=shape)
    times = np.arange(4) * 0.25
    coords = {X: coord(X, np.linspace(0.0, 3.0, grid[-1]), "m")}
    errors = {"solver": np.zeros(4), "every-2": np.array([0.0, 1e-3, 2e-3, 4e-3])}
    kwargs = dict(reference=reference, hybrid=hybrid, surrogate=surrogate, times=times,
                  errors=errors, schedule="every-2", fields=("w", "rho"),
                  units={"rho": "kg m-3"}, long_names=("vorticity", "density"), coords=coords,
                  sample=1, sample_label=7)
    out = plot_hybrid(tmp_path / "hybrid.png", **kwargs, dpi=50)
    assert out.exists() and [p.name for p in tmp_path.iterdir()] == ["hybrid.png"]

    fig = hybrid_figures._hybrid_figure(**kwargs)
    axes = image_axes(fig)
    assert len(axes) == 8
    assert [ax.images[0].get_cmap().name for ax in axes] == ["RdBu_r"] * 3 + ["magma"] + [
        "viridis"] * 3 + ["magma"]
    x_edges = edges(coords[X].values)
    vertical = edges(times) if len(grid) == 1 else edges(np.arange(grid[0]) / grid[0])
    assert axes[0].images[0].get_extent() == pytest.approx([*x_edges, *vertical])
    labels = colorbar_labels(fig)
    assert "vorticity (non-dimensional)" in labels and "density [kg m-3]" in labels
    legend = [ax for ax in fig.axes if ax.get_legend()][0].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["solver: exact (0)", "every-2"]


def test_plot_hybrid_legacy_single_field_call(monkeypatch):
    monkeypatch.setattr(hybrid_figures, "_save", lambda fig, path, dpi: fig)  # drawing is tested above
    frames = np.random.default_rng(4).normal(size=(1, 3, 2, 8, 8))
    fig = plot_hybrid("unused.png", reference=frames, hybrid=frames + 0.1,
                      surrogate=frames - 0.1, times=[0.0, 1.0, 2.0],
                      errors={"every-2": np.array([0.0, 0.1, 0.2])}, schedule="every-2",
                      field="vorticity", sample_label=3)
    assert len(image_axes(fig)) == 4  # field 0 only, as before
    assert "vorticity (non-dimensional)" in colorbar_labels(fig)
    assert fig.subfigs[0].get_suptitle() == "sample 3, t = 2"


def test_bad_input_errors(flow2d):
    with pytest.raises(ValueError, match=r"no variable 'pressure'.*vorticity"):
        snapshot_figures._snapshot_figure(flow2d, variables="pressure")
    with pytest.raises(ValueError, match="'viscosity' has no spatial dims"):
        snapshot_figures._snapshot_figure(flow2d, variables=["viscosity"])
    with pytest.raises(ValueError, match="variables is empty"):
        snapshot_figures._snapshot_figure(flow2d, variables=[])
    with pytest.raises(ValueError, match="no sample to plot"):
        snapshot_figures._snapshot_figure(flow2d, samples=(5,))
    no_state = flow2d.drop_vars(["vorticity", "density"])
    with pytest.raises(ValueError, match="role 'state'"):
        snapshot_figures._snapshot_figure(no_state)
    frames = np.zeros((1, 3, 1, 8))
    good = dict(reference=frames, hybrid=frames, surrogate=frames, times=[0, 1, 2],
                errors={}, schedule="s")
    with pytest.raises(ValueError, match="share a shape"):
        hybrid_figures._hybrid_figure(**{**good, "hybrid": np.zeros((1, 3, 1, 9))})
    with pytest.raises(ValueError, match="fields"):
        hybrid_figures._hybrid_figure(**good, fields=("a", "b"))
    with pytest.raises(ValueError, match="coords"):
        hybrid_figures._hybrid_figure(**good, coords={"y": np.zeros(8)})
    with pytest.raises(ValueError, match="not both"):
        plot_hybrid("unused.png", **good, field="a", fields=("b",))


def test_failed_save_leaves_no_temporary(tmp_path, flow2d):
    target = tmp_path / "flow.xyz"
    target.write_text("old")
    with pytest.raises(ValueError, match="xyz"):
        plot_snapshots(flow2d, target, num_times=2)
    assert [p.name for p in tmp_path.iterdir()] == ["flow.xyz"]
    assert target.read_text() == "old"


def test_schlieren_is_the_gradient_magnitude_and_is_drawn_in_grey(tmp_path):
    """|∇ρ| of a linear ramp ρ = 1 + 2x + 3y is √13 everywhere (central differences are
    exact for it, one-sided ones too); a schlieren panel joins the state fields."""
    grid = grid_coordinates(8, ndim=2)
    x, y = np.meshgrid(grid[X].values, grid[Y].values)
    rho = np.broadcast_to(1 + 2 * x + 3 * y, (1, 2, 8, 8)).copy()
    ds = dataset({"density": var((SAMPLE, TIME, Y, X), rho, "density", "1", "state")},
                 sample=sample_coordinate(1), time=time_coordinate(np.arange(2.0)),
                 **grid)
    gradient = plotting.schlieren(ds)
    np.testing.assert_allclose(gradient.values, np.sqrt(13.0), rtol=1e-12)
    assert gradient.attrs["long_name"] == "|∇ density|"
    fig = snapshot_figures._snapshot_figure(ds.assign(schlieren_density=gradient), samples=(0,),
                                    variables=["density", "schlieren_density"], num_times=2)
    assert [ax.images[0].get_cmap().name for ax in image_axes(fig)][-1] == "gray_r"
    assert plot_snapshots(ds, tmp_path / "s.png", samples=(0,), schlieren_of="density").exists()
    with pytest.raises(ValueError, match="no variable 'rho'"):
        plotting.schlieren(ds, "rho")


# ------------------------------------------------------------------------------------------
# Readable error figures: Pareto labels, zero-error floors, titles, equal error curves
# ------------------------------------------------------------------------------------------

def coarse(factor, error, seconds):
    return {"schedule": f"coarse {factor} (grid 256, dt 0.02)", "kind": "coarse",
            "final_rel_l2": error, "seconds": seconds}


#: Rows as the demo's Kuramoto–Sivashinsky rollout reports them (examples/demo.py): the
#: coarse solvers' long labels and the two adaptive tolerances land next to each other.
DEMO_ROWS = [
    {"schedule": "solver, one run", "kind": "solver", "final_rel_l2": 0.0, "seconds": 0.92},
    {"schedule": "surrogate", "kind": "surrogate", "final_rel_l2": 0.41, "seconds": 0.061},
    {"schedule": "surrogate:4,solver:1", "kind": "fixed", "final_rel_l2": 0.083,
     "seconds": 0.24},
    {"schedule": "adaptive:0.001", "kind": "adaptive", "final_rel_l2": 0.0021, "seconds": 0.71},
    {"schedule": "adaptive:0.01", "kind": "adaptive", "final_rel_l2": 0.0024, "seconds": 0.69},
    {"schedule": "parareal:5:1", "kind": "parareal", "final_rel_l2": 0.0, "seconds": 1.31},
    coarse("2x1", 0.031, 0.47), coarse("4x1", 0.22, 0.26), coarse("1x2", 0.0012, 0.48),
    coarse("1x5", 0.0098, 0.19), coarse("2x2", 0.033, 0.245), coarse("2x5", 0.037, 0.101),
    coarse("4x5", 0.25, 0.055),
    {"schedule": "surrogate:1,solver:1", "kind": "fixed", "failed": "diverged at step 12"},
]


def pareto(monkeypatch, rows, **kwargs):
    """The Pareto figure as drawn to file, with its renderer."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    monkeypatch.setattr(pareto_figures, "_save", lambda fig, path, dpi: fig)
    fig = plotting.plot_pareto("unused.png", rows, **kwargs)
    FigureCanvasAgg(fig).draw()
    return fig, fig.axes[0], fig.canvas.get_renderer()


def benchmark_rows(problem):
    """The rows of the README's Pareto figures (benchmarks/results/hybrid.json)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "hybrid.json"
    return json.loads(path.read_text())["problems"][problem]["rows"]


@pytest.mark.parametrize("rows", [DEMO_ROWS, "ks", "ns"], ids=["demo", "bench-ks", "bench-ns"])
def test_pareto_labels_do_not_overlap(monkeypatch, rows):
    # bench-ks: parareal:5:1 and parareal:5:2 side by side at the right edge, whose labels
    # adjustText alone left one over the other.
    rows = benchmark_rows(rows) if isinstance(rows, str) else rows
    fig, ax, renderer = pareto(monkeypatch, rows, title="ks")
    names = {row["schedule"] for row in rows if "failed" not in row}
    labels = [t for t in ax.texts if t.get_text() in names]
    assert sorted(t.get_text() for t in labels) == sorted(names)
    boxes = {t.get_text(): t.get_window_extent(renderer) for t in labels}
    inside = ax.get_window_extent(renderer)
    for i, (a, box) in enumerate(boxes.items()):
        assert inside.x0 - 1 <= box.x0 and box.x1 <= inside.x1 + 1, a
        for b, other in list(boxes.items())[i + 1:]:
            assert not box.overlaps(other), f"{a!r} overlaps {b!r}"


def tick_label(ax, value):
    """The label of the major tick at ``value`` (one must be there)."""
    ticks = list(ax.yaxis.get_major_locator()())
    (position,) = [i for i, tick in enumerate(ticks) if np.isclose(tick, value, rtol=1e-9)]
    return ax.yaxis.get_major_formatter()(ticks[position], position)


def test_pareto_zero_errors_sit_on_a_labelled_floor(monkeypatch):
    fig, ax, renderer = pareto(monkeypatch, DEMO_ROWS)
    floor = 1e-4  # a decade below the smallest non-zero error, 1.2e-3
    exact = [c for c in ax.collections if c.get_offsets().shape == (1, 2)
             and c.get_offsets()[0, 1] == pytest.approx(floor)]
    assert len(exact) == 2  # the fine solver and the converged parareal
    dashed = [line for line in ax.lines if line.get_linestyle() == "--"
              and np.allclose(line.get_ydata(), floor)]
    assert dashed, "no line drawn at the floor"
    assert any(t.get_text().strip() == "error 0 (exact)" for t in ax.texts)
    assert tick_label(ax, floor) == "0"
    assert ax.get_ylim()[0] < floor  # the floor is inside the axes, not on its edge


def test_pareto_title_is_at_most_two_lines_and_counts_in_the_singular(monkeypatch):
    title = "kuramoto-sivashinsky: error after 40 steps against wall time (1 samples)"
    fig, ax, _ = pareto(monkeypatch, DEMO_ROWS, title=title)
    shown = ax.get_title()
    assert shown.count("\n") <= 1 and "(1 sample)" in shown and "samples" not in shown
    assert "surrogate:1,solver:1" in fig.get_supxlabel()  # the failed row, under the plot
    long = _common._title("x " * 200 + "(11 samples, 0.1 steps)", width_inches=7.5)
    assert long.count("\n") == 1 and long.endswith("…")
    assert _common._title("(11 samples, 0.1 steps, 1 steps)", width_inches=7.5) == \
        "(11 samples, 0.1 steps, 1 step)"


def error_axes(fig):
    return next(ax for ax in fig.axes if ax.get_yscale() == "log")


def hybrid_with_errors(errors):
    frames = np.random.default_rng(5).normal(size=(1, 24, 1, 16))
    return hybrid_figures._hybrid_figure(reference=frames, hybrid=frames + 0.01,
                                   surrogate=frames + 0.1, times=np.arange(24) * 0.1,
                                   errors=errors, schedule="surrogate:4,solver:1", fields=("u",))


def test_hybrid_equal_error_curves_all_stay_visible():
    growth = np.linspace(0.01, 0.4, 24)
    errors = {"surrogate": growth, "surrogate:4,solver:1": growth / 5,
              "adaptive:0.001": growth / 20, "adaptive:0.01": growth / 20,
              "parareal:5:1": growth / 20, "solver": np.zeros(24), "adaptive": np.zeros(24)}
    ax = error_axes(hybrid_with_errors(errors))
    lines = [line for line in ax.lines if line.get_label() in errors
             or line.get_label().removesuffix(": exact (0)") in errors]
    assert len(lines) == len(errors)  # the exact ones are drawn too, on the floor
    styles = [(line.get_linestyle(), line.get_marker()) for line in lines]
    assert len(set(styles)) == len(styles), styles
    # an equal curve drawn later is narrower and on top, so the earlier one shows around it
    widths = [line.get_linewidth() for line in lines]
    assert widths == sorted(widths, reverse=True) and widths[0] > widths[-1]
    orders = [line.get_zorder() for line in lines]
    assert orders == sorted(orders)
    # markers of equal curves fall on different frames
    equal = lines[2:5]
    offsets = [line.get_markevery() for line in equal]
    assert len({o[0] for o in offsets}) == 3 and all(o[1] >= 3 for o in offsets)
    legend = ax.get_legend()
    assert len(legend.get_lines()) == len(errors)
    assert all(h.get_marker() not in ("", "None", " ") for h in legend.get_lines())


def test_hybrid_error_axis_ends_at_a_labelled_floor_above_round_off():
    growth = np.linspace(0.02, 0.5, 24)
    round_off = 3e-16 * np.arange(1, 25)
    errors = {"surrogate": growth, "surrogate:3,solver:1": 0.3 * growth, "solver": round_off}
    ax = error_axes(hybrid_with_errors(errors))
    low, high = ax.get_ylim()
    assert low >= 1e-6 * 0.5 / 10 and high < 10  # not 1e-16 to 1
    floor = 1e-4  # a decade below the smallest meaningful error, 6e-3
    assert low < floor
    solver = next(line for line in ax.lines if line.get_label() == "solver")
    np.testing.assert_allclose(solver.get_ydata(), floor)
    band = [t.get_text() for t in ax.texts if "round-off" in t.get_text()]
    assert band == [" error < 1e-4 (round-off)"]
    assert tick_label(ax, floor) == "<1e-4"


# ------------------------------------------------------------------------------------------
# Every title fits its figure
# ------------------------------------------------------------------------------------------

#: A long figure title: the Kuramoto–Sivashinsky solver's, with its equation.
KS_TITLE = KuramotoSivashinsky.title
LONG_FORCING = "0.1 (sin(2 pi (x + y)) + cos(2 pi (x + y))), Kolmogorov-like, amplitude 0.1"


def titled(data_vars, title=KS_TITLE, **coords):
    return build_dataset(data_vars, coords=coords, equation="kuramoto-sivashinsky",
                         config={"seed": 0, "solver": {"viscosity": 0.1,
                                                       "forcing": LONG_FORCING}},
                         title=title, references="none", solver="none")


def ks_1d():
    grid = grid_coordinates(32, ndim=1)
    u = np.random.default_rng(6).normal(size=(3, 11, 32))
    return titled({"u": var((SAMPLE, TIME, X), u, "u", "1", "state")},
                  sample=sample_coordinate(3), time=time_coordinate(np.arange(11) * 0.1),
                  **grid)


def steady_1d():
    grid = grid_coordinates(32, ndim=1)
    u = np.random.default_rng(7).normal(size=(1, 32))
    return titled({"u": var((SAMPLE, X), u, "u", "1", "state")},
                  sample=sample_coordinate(1), **grid)


def steady_2d():
    grid = grid_coordinates(9, ndim=2)
    rng = np.random.default_rng(8)
    return titled({"a": var((SAMPLE, Y, X), rng.random((1, 9, 9)), "permeability", "1",
                            "state"),
                   "u": var((SAMPLE, Y, X), rng.random((1, 9, 9)), "pressure", "1", "state")},
                  sample=sample_coordinate(1), **grid)


def movie_2d():
    grid = grid_coordinates(8, ndim=2)
    rho = 1.0 + np.random.default_rng(9).random((1, 3, 8, 8))
    ds = titled({"density": var((SAMPLE, TIME, Y, X), rho, "density", "kg m-3", "state")},
                sample=sample_coordinate(1), time=time_coordinate(np.arange(3.0)), **grid)
    return ds.assign(schlieren_density=plotting.schlieren(ds))


def long_hybrid(grid):
    frames = np.random.default_rng(10).normal(size=(1, 4, 1, *grid))
    return hybrid_figures._hybrid_figure(
        reference=frames, hybrid=frames + 0.01, surrogate=frames + 0.1,
        times=np.arange(4) * 0.25, errors={"adaptive:0.001": np.linspace(0, 0.1, 4)},
        schedule="adaptive:0.001", fields=("u",), long_names=(KS_TITLE,))


FIGURES = {
    "snapshots-1d-space-time-ks": lambda: snapshot_figures._snapshot_figure(ks_1d(), samples=(0, 1, 2)),
    "snapshots-1d-steady": lambda: snapshot_figures._snapshot_figure(steady_1d(), samples=(0,)),
    "snapshots-2d-steady": lambda: snapshot_figures._snapshot_figure(steady_2d(), samples=(0,)),
    "snapshots-2d-movie": lambda: snapshot_figures._snapshot_figure(
        movie_2d(), variables=["density", "schlieren_density"], samples=(0,), num_times=2),
    "hybrid-1d": lambda: long_hybrid((16,)),
    "hybrid-2d": lambda: long_hybrid((8, 8)),
    "pareto": lambda: pareto_figures._pareto_figure(
        [*DEMO_ROWS, {"schedule": KS_TITLE, "kind": "fixed", "failed": "diverged"}],
        title=f"{KS_TITLE}: error after 40 steps against wall time (8 samples)"),
}


def title_texts(fig):
    """The titles of a figure: its own and its subfigures' (suptitle, supxlabel, ...) and
    every axes' title."""
    figures = [fig]
    for figure in figures:
        figures += figure.subfigs
    texts = [text for figure in figures for text in figure.texts]
    return [t for t in texts + [ax.title for ax in fig.axes] if t.get_text()]


def test_title_lines_are_measured_and_a_word_too_wide_is_cut():
    for text in (KS_TITLE, "W" * 80, "i" * 80 + " " + KS_TITLE):
        lines = _common._title(text, width_inches=2.0).split("\n")
        assert len(lines) <= 2
        assert all(_common._text_width(line, 9.0) <= 1.8 * 72 for line in lines), lines
    assert _common._title("W" * 80, width_inches=2.0).endswith("…")


@pytest.mark.parametrize("kind", FIGURES)
def test_every_title_fits_its_figure(kind):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = FIGURES[kind]()
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    canvas = fig.bbox
    texts = title_texts(fig)
    assert texts
    for text in texts:
        box = text.get_window_extent(renderer)
        assert (canvas.x0 - 1 <= box.x0 and box.x1 <= canvas.x1 + 1
                and canvas.y0 - 1 <= box.y0 and box.y1 <= canvas.y1 + 1), \
            f"{text.get_text()!r} at {box.bounds} runs off the figure {canvas.bounds}"
