"""The Well's format: exact round trips, the layout The Well's schema describes, stats.yaml
checked against NumPy, lazy reads, genuine Well files, and The Well's own loaders (the
``interop`` extra) on our exports.

Every dataset here is tiny (the solvers' ``TINY`` configurations, 5 samples: 3 train, 1 valid,
1 test by the documented split rule).
"""

from __future__ import annotations

import json
import math
import pathlib
import sys

import numpy as np
import pytest
import xarray as xr

from ssmpde.cli import main
from ssmpde.data import convert, formats, load_dataset, open_dataset, save, validate
from ssmpde.data.formats import the_well
from ssmpde.generation import generate
from ssmpde.solvers import get_solver_class

from .helpers import make_dataset, snapshot

h5py = pytest.importorskip("h5py")

NUM_SAMPLES = 5
TRAIN = 3  # split_sizes(5) == (3, 1, 1)
CASES = {
    "kuramoto-sivashinsky": {},
    "burgers": {},
    "kdv": {},
    "navier-stokes": {},  # TINY is torus-vis-force: a [sample, time, y, x] forcing
    "euler": {"problem": "ce-rm", "final_time": 0.2},  # 5 frames: windows of 3 start at 0..2
}


@pytest.fixture(scope="module")
def datasets():
    made = {}
    for name, overrides in CASES.items():
        cls = get_solver_class(name)
        made[name] = generate(name, num_samples=NUM_SAMPLES, seed=7, progress=False,
                              **{**cls.TINY, **overrides})
    return made


@pytest.fixture(scope="module")
def exports(datasets, tmp_path_factory):
    root = tmp_path_factory.mktemp("well")
    out = {}
    for name, ds in datasets.items():
        target = root / name
        out[name] = (target, the_well.export(ds, target))
    return out


# --------------------------------------------------------------------------------------------
# Round trips
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("pde", list(CASES))
def test_round_trip_is_exact(pde, datasets, exports):
    ds = datasets[pde]
    target, _ = exports[pde]
    with the_well.open(target) as back:
        xr.testing.assert_identical(back.load(), ds)
        for name in ds.variables:
            assert back[name].dtype == ds[name].dtype, name
    with the_well.open(target, chunks={}) as back:
        assert back[next(iter(ds.data_vars))].chunks is not None
        xr.testing.assert_identical(back.compute(), ds)


def test_round_trip_keeps_the_time_dependent_forcing(datasets, exports):
    ds = datasets["navier-stokes"]
    assert ds["forcing"].dims == ("sample", "time", "y", "x")
    # the forcing changes in time (torus-vis-force), so a static copy would not pass
    assert not np.array_equal(ds["forcing"][:, 0].values, ds["forcing"][:, -1].values)
    target, notes = exports["navier-stokes"]
    with h5py.File(target / "data" / "train" / "navier_stokes.hdf5") as f:
        forcing = f["t0_fields/forcing"]
        assert bool(forcing.attrs["time_varying"]) and bool(forcing.attrs["sample_varying"])
        np.testing.assert_array_equal(forcing[1, 2],
                                      ds["forcing"].isel(sample=1, time=2).values.T)
        scalars = [str(s) for s in f["scalars"].attrs["field_names"]]
        assert "viscosity" in scalars and len(scalars) == 1 + 12
        assert f["scalars/forcing_amplitude_1_5"][2] == \
            ds["forcing_amplitude"].isel(sample=2).values[1, 5]
    assert any("forcing_amplitude" in note and "12 scalars" in note for note in notes)
    assert any("'forcing' (role forcing)" in note for note in notes)


def test_single_file_export_round_trips(datasets, tmp_path):
    ds = datasets["burgers"]
    notes = the_well.export(ds, tmp_path / "burgers.hdf5")
    assert any("one file" in note for note in notes)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["burgers.hdf5"]
    with the_well.open(tmp_path / "burgers.hdf5") as back:
        xr.testing.assert_identical(back.load(), ds)


def test_convert_and_every_reader_go_through_the_registry(datasets, tmp_path, capsys):
    source = save(datasets["euler"], tmp_path / "ce_rm.nc")
    target = tmp_path / "ce_rm_well"
    result = convert(source, target, to="the-well")
    assert result.format == "the-well" and result.target == target
    assert formats.sniff(target) is the_well
    xr.testing.assert_identical(load_dataset(target), load_dataset(source))
    # a split directory and a single file of it open too, with their own samples
    train = load_dataset(target / "data" / "train")
    xr.testing.assert_identical(train, load_dataset(source).isel(sample=slice(0, TRAIN)))
    # the output policy: an export of ours may be overwritten, nothing else
    before = snapshot(target)
    assert main(["convert", str(source), str(target), "--to", "the-well"]) == 2
    assert "already exists" in capsys.readouterr().err and snapshot(target) == before
    assert main(["convert", str(source), str(target), "--to", "the-well", "--overwrite"]) == 0
    out = capsys.readouterr().out
    assert "as the-well" in out and "note: samples in sample order: 3 train, 1 valid, 1 test" \
        in out
    assert main(["info", str(target)]) == 0
    out = capsys.readouterr().out
    assert "format: the-well" in out and "schema: ok" in out
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_darcy_has_no_time_axis_and_is_refused(tmp_path, capsys):
    cls = get_solver_class("darcy")
    ds = generate("darcy", num_samples=2, seed=0, progress=False, **cls.TINY)
    with pytest.raises(ValueError, match=r"The Well holds time series.*no 'time' dimension"):
        the_well.export(ds, tmp_path / "darcy")
    source = save(ds, tmp_path / "darcy.nc")
    assert main(["convert", str(source), str(tmp_path / "darcy_well"), "--to", "the-well"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "steady problem such as Darcy" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["darcy.nc"]


# --------------------------------------------------------------------------------------------
# The layout of The Well's schema
# --------------------------------------------------------------------------------------------

def _names(value) -> list[str]:
    return [str(v) for v in np.asarray(value).ravel()]


def test_files_follow_the_well_schema(datasets, exports):
    ds = datasets["euler"]
    target, _ = exports["euler"]
    sizes = {split: len(list((target / "data" / split).glob("*.hdf5")))
             for split in the_well.SPLITS}
    assert sizes == {"train": 1, "valid": 1, "test": 1}
    counts = []
    for split, expected in zip(the_well.SPLITS, (3, 1, 1)):
        with h5py.File(target / "data" / split / "euler.hdf5") as f:
            counts.append(int(f.attrs["n_trajectories"]))
            assert f.attrs["n_trajectories"] == expected
            assert isinstance(f.attrs["dataset_name"], str) and f.attrs["dataset_name"] == "euler"
            assert f.attrs["grid_type"] == "cartesian" and f.attrs["n_spatial_dims"] == 2
            assert _names(f.attrs["simulation_parameters"]) == []
            dims = f["dimensions"]
            assert _names(dims.attrs["spatial_dims"]) == ["x", "y"]
            np.testing.assert_array_equal(dims["x"][()], ds["x"].values)
            np.testing.assert_array_equal(dims["time"][()], ds["time"].values)
            for name in ("time", "x", "y"):
                assert dims[name].attrs["sample_varying"] is np.False_
            assert _names(f["t0_fields"].attrs["field_names"]) == ["density", "pressure",
                                                                    "tracer"]
            assert _names(f["t1_fields"].attrs["field_names"]) == ["velocity"]
            assert _names(f["t2_fields"].attrs["field_names"]) == []
            velocity = f["t1_fields/velocity"]
            assert velocity.shape == (expected, ds.sizes["time"], ds.sizes["x"], ds.sizes["y"], 2)
            for flag in ("sample_varying", "time_varying"):
                assert velocity.attrs[flag] is np.True_
            assert velocity.attrs["dim_varying"].tolist() == [True, True]
            first = {"train": 0, "valid": 3, "test": 4}[split]
            # [sample, time, x, y, component] against ssmpde's [sample, time, y, x]
            np.testing.assert_array_equal(velocity[0, 1, 5, 2, 0],
                                          ds["velocity_x"].values[first, 1, 2, 5])
            np.testing.assert_array_equal(velocity[0, 1, 5, 2, 1],
                                          ds["velocity_y"].values[first, 1, 2, 5])
            assert _names(f.attrs[the_well.SAMPLE_INDICES]) == [str(i) for i in range(
                first, first + expected)]
            groups = f["boundary_conditions"]
            assert sorted(groups) == ["x_periodic", "y_periodic"]
            for name, dim in (("x_periodic", "x"), ("y_periodic", "y")):
                group = groups[name]
                assert group.attrs["bc_type"] == "PERIODIC"
                assert _names(group.attrs["associated_dims"]) == [dim]
                assert _names(group.attrs["associated_fields"]) == []
                mask = group["mask"][()]
                assert mask.dtype == bool and mask.shape == (ds.sizes[dim],)
                assert mask[0] and mask[-1] and not mask[1:-1].any()
    assert sum(counts) == NUM_SAMPLES


def test_one_dimensional_files_have_one_spatial_dimension(datasets, exports):
    ds = datasets["kuramoto-sivashinsky"]
    target, _ = exports["kuramoto-sivashinsky"]
    with h5py.File(target / "data" / "train" / "kuramoto_sivashinsky.hdf5") as f:
        assert f.attrs["n_spatial_dims"] == 1
        assert _names(f["dimensions"].attrs["spatial_dims"]) == ["x"]
        u = f["t0_fields/u"]
        assert u.shape == (TRAIN, ds.sizes["time"], ds.sizes["x"])
        np.testing.assert_array_equal(u[()], ds["u"].values[:TRAIN])
        viscosity = f["scalars/viscosity"]
        assert viscosity.attrs["sample_varying"] and not viscosity.attrs["time_varying"]
        np.testing.assert_array_equal(viscosity[()], ds["viscosity"].values[:TRAIN])


def test_boundary_kinds_the_well_lacks_become_notes(tmp_path):
    ds = make_dataset(nsample=3, ndim=2)
    ds["vorticity"].attrs["boundary_conditions"] = "y: dirichlet x: periodic"
    notes = the_well.export(ds, tmp_path / "walls")
    assert "y: dirichlet is written as The Well's WALL (it knows WALL, OPEN and PERIODIC only)" \
        in notes
    with h5py.File(tmp_path / "walls" / "data" / "train" / "navier_stokes.hdf5") as f:
        assert sorted(f["boundary_conditions"]) == ["x_periodic", "y_wall"]
        assert f["boundary_conditions/y_wall"].attrs["bc_type"] == "WALL"
    with the_well.open(tmp_path / "walls") as back:  # ours: the exact kinds come back
        assert back["vorticity"].attrs["boundary_conditions"] == "y: dirichlet x: periodic"


# --------------------------------------------------------------------------------------------
# stats.yaml
# --------------------------------------------------------------------------------------------

def _moments(values: np.ndarray) -> dict[str, float]:
    return {"mean": values.mean(), "std": values.std(), "rms": np.sqrt((values ** 2).mean())}


@pytest.mark.parametrize("pde", ["euler", "navier-stokes"])
def test_stats_yaml_matches_numpy(pde, datasets, exports):
    yaml = pytest.importorskip("yaml")
    ds = datasets[pde].isel(sample=slice(0, TRAIN))
    target, _ = exports[pde]
    stats = yaml.safe_load((target / the_well.STATS_FILE).read_text())
    assert set(stats) == {"mean", "std", "rms", "mean_delta", "std_delta", "rms_delta"}
    expected: dict[str, dict] = {key: {} for key in stats}
    fields = {"euler": {"density": ["density"], "pressure": ["pressure"], "tracer": ["tracer"],
                        "velocity": ["velocity_x", "velocity_y"]},
              "navier-stokes": {"vorticity": ["vorticity"], "forcing": ["forcing"]}}[pde]
    for field, components in fields.items():
        per = [(_moments(ds[c].values), _moments(np.diff(ds[c].values, axis=1)))
               for c in components]
        for key in ("mean", "std", "rms"):
            values = [p[0][key] for p in per]
            deltas = [p[1][key] for p in per]
            expected[key][field] = values if len(per) > 1 else values[0]
            expected[f"{key}_delta"][field] = deltas if len(per) > 1 else deltas[0]
    for key, entries in expected.items():
        assert set(stats[key]) == set(entries), key
        for field, value in entries.items():
            assert isinstance(stats[key][field], (float, list)), (key, field)
            np.testing.assert_allclose(stats[key][field], value, rtol=1e-12, atol=1e-15,
                                       err_msg=f"{key} of {field}")


def test_stats_yaml_floats_parse_as_floats():
    yaml = pytest.importorskip("yaml")
    values = [1e-05, 1e20, -2.5e-300, 0.1, 3.0, 5e-324]
    text = "\n".join(f"v{i}: {the_well.statistics._yaml_float(v)}" for i, v in enumerate(values))
    parsed = yaml.safe_load(text)
    assert [parsed[f"v{i}"] for i in range(len(values))] == values


# --------------------------------------------------------------------------------------------
# Splits
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n, fractions, expected", [
    (10, the_well.SPLIT_FRACTIONS, (8, 1, 1)),
    (5, the_well.SPLIT_FRACTIONS, (3, 1, 1)),
    (3, the_well.SPLIT_FRACTIONS, (1, 1, 1)),
    (2, the_well.SPLIT_FRACTIONS, (2, 0, 0)),
    (100, (0.7, 0.2, 0.1), (70, 20, 10)),
    (7, (1, 1, 0), (3, 4, 0)),
    (4, (0, 1, 1), (0, 2, 2)),
    (4, (1, 0, 0), (4, 0, 0)),
])
def test_split_sizes(n, fractions, expected):
    assert the_well.split_sizes(n, fractions) == expected


@pytest.mark.parametrize("n", range(0, 40))
def test_split_sizes_cover_every_sample_and_fill_every_split(n):
    sizes = the_well.split_sizes(n)
    assert sum(sizes) == n and min(sizes) >= 0
    if n >= 3:
        assert min(sizes) >= 1
        assert abs(sizes[1] - 0.1 * n) <= 0.5 or sizes[1] == 1


@pytest.mark.parametrize("fractions", [(0.8, 0.2), (-1, 1, 1), (0, 0, 0), (math.nan, 1, 1)])
def test_bad_split_fractions_are_refused(fractions):
    with pytest.raises(ValueError, match="three non-negative numbers"):
        the_well.split_sizes(10, fractions)


def test_custom_splits_reach_the_files(tmp_path):
    ds = make_dataset(nsample=4, ndim=1)
    notes = the_well.export(ds, tmp_path / "d", splits=(1, 0, 0))
    assert (tmp_path / "d" / "data" / "train").is_dir()
    assert not (tmp_path / "d" / "data" / "valid").exists()
    assert any("no samples in valid, test" in note for note in notes)
    with the_well.open(tmp_path / "d") as back:
        xr.testing.assert_identical(back.load(), ds)


# --------------------------------------------------------------------------------------------
# Reading: lazily, and files ssmpde did not write
# --------------------------------------------------------------------------------------------

def test_open_reads_only_what_is_used(datasets, exports, monkeypatch):
    reads = []
    original = the_well.read._read_piece

    def spy(managers, dataset, index, key):
        reads.append((dataset, index, key))
        return original(managers, dataset, index, key)

    monkeypatch.setattr(the_well.read, "_read_piece", spy)
    ds = datasets["euler"]
    target, _ = exports["euler"]
    with the_well.open(target) as back:
        assert reads == []
        value = back["velocity_y"].isel(sample=4, time=1).values
        np.testing.assert_array_equal(value, ds["velocity_y"].isel(sample=4, time=1).values)
    # one read, of the test file (the fifth sample), one time, the y component
    assert len(reads) == 1
    dataset, index, key = reads[0]
    assert dataset == "t1_fields/velocity" and index == 2
    assert key[:2] == (slice(0, 1, 1), 1)


def _write_genuine(path: pathlib.Path, *, nx: int = 6, seed: int = 0) -> dict:
    """A 1D file in The Well's schema written with h5py directly, as The Well's own files are
    (float32, bool flags, a periodic boundary, a constant parameter among the root attributes)."""
    rng = np.random.default_rng(seed)
    values = {"u": rng.standard_normal((2, 4, nx)).astype(np.float32),
              "c": rng.standard_normal(nx).astype(np.float32),
              "nu": np.array([0.1, 0.2]), "alpha": np.float64(0.5)}
    strings = h5py.string_dtype()
    with h5py.File(path, "w") as f:
        f.attrs.update({"dataset_name": "genuine", "grid_type": "cartesian",
                        "n_spatial_dims": 1, "n_trajectories": 2, "alpha": values["alpha"]})
        f.attrs["simulation_parameters"] = np.array(["alpha"], dtype=strings)
        dims = f.create_group("dimensions")
        dims.attrs["spatial_dims"] = np.array(["x"], dtype=strings)
        dims.create_dataset("time", data=np.arange(4, dtype=np.float32) * 0.5)
        dims.create_dataset("x", data=np.linspace(0, 1, nx, dtype=np.float32))
        for name in ("time", "x"):
            dims[name].attrs["sample_varying"] = False
            dims[name].attrs["time_varying"] = False
        bc = f.create_group("boundary_conditions").create_group("x_periodic")
        bc.attrs.update({"bc_type": "PERIODIC", "sample_varying": False, "time_varying": False})
        bc.attrs["associated_dims"] = np.array(["x"], dtype=strings)
        bc.attrs["associated_fields"] = np.array([], dtype=strings)
        bc.create_dataset("mask", data=np.array([True] + [False] * (nx - 2) + [True]))
        t0 = f.create_group("t0_fields")
        t0.attrs["field_names"] = np.array(["u", "c"], dtype=strings)
        for name, sample, time in (("u", True, True), ("c", False, False)):
            data = t0.create_dataset(name, data=values[name])
            data.attrs.update({"sample_varying": sample, "time_varying": time,
                               "dim_varying": np.array([True])})
        for group in ("t1_fields", "t2_fields"):
            f.create_group(group).attrs["field_names"] = np.array([], dtype=strings)
        scalars = f.create_group("scalars")
        scalars.attrs["field_names"] = np.array(["nu"], dtype=strings)
        nu = scalars.create_dataset("nu", data=values["nu"])
        nu.attrs.update({"sample_varying": True, "time_varying": False})
    return values


def test_a_genuine_well_file_opens_as_an_ssmpde_dataset(tmp_path):
    values = _write_genuine(tmp_path / "genuine.hdf5")
    assert the_well.sniff(tmp_path / "genuine.hdf5")
    assert not the_well.is_export(tmp_path / "genuine.hdf5")
    ds = load_dataset(tmp_path / "genuine.hdf5")  # through the registry, validated
    validate(ds)
    assert dict(ds.sizes) == {"sample": 2, "time": 4, "x": 6}
    np.testing.assert_array_equal(ds["u"].values, values["u"])
    assert ds["u"].dtype == np.float32 and ds["u"].dims == ("sample", "time", "x")
    np.testing.assert_array_equal(ds["c"].values, values["c"])
    np.testing.assert_array_equal(ds["nu"].values, values["nu"])
    np.testing.assert_array_equal(ds["alpha"].values, [0.5, 0.5])
    roles = {name: var.attrs["role"] for name, var in ds.data_vars.items()}
    assert roles == {"u": "state", "c": "forcing", "nu": "parameter", "alpha": "parameter"}
    assert ds["u"].attrs["boundary_conditions"] == "x: periodic"
    assert json.loads(ds.attrs["ssmpde_config"])["dataset_name"] == "genuine"
    np.testing.assert_array_equal(ds["time"].values, np.arange(4, dtype=np.float32) * 0.5)


def test_a_model_trains_and_evaluates_on_a_genuine_well_file(tmp_path, capsys):
    # Its constant field 'c' (a forcing with no sample dimension, as The Well stores fields
    # that are neither sample- nor time-varying) was read per sample: "Dimensions {'sample'}
    # do not exist".
    _write_genuine(tmp_path / "genuine.hdf5", nx=16)
    run = tmp_path / "run"
    assert main(["train", "fno", "--data", str(tmp_path / "genuine.hdf5"), "--out", str(run),
                 "--preset", "burgers", "--no-progress", "--epochs", "1", "--batch-size", "1",
                 "--num-test", "1", "--window", "1", "--model-option", "width=4",
                 "--model-option", "depth=1", "--model-option", "modes=[4]"]) == 0
    record = json.loads((run / "config.json").read_text())
    assert "c" in record["task"]["conditioning"]  # the shared field conditions the model
    capsys.readouterr()
    assert main(["evaluate", str(run), "--data", str(tmp_path / "genuine.hdf5")]) == 0
    value = float(capsys.readouterr().out.split(":")[1].split()[0])
    assert math.isfinite(value) and value > 0


def test_a_genuine_dataset_directory_concatenates_its_files(tmp_path):
    first = tmp_path / "genuine" / "data" / "train"
    first.mkdir(parents=True)
    a = _write_genuine(first / "a.hdf5", seed=1)
    b = _write_genuine(first / "b.hdf5", seed=2)
    (tmp_path / "genuine" / "data" / "test").mkdir()
    c = _write_genuine(tmp_path / "genuine" / "data" / "test" / "c.hdf5", seed=3)
    with open_dataset(tmp_path / "genuine") as ds:
        assert ds.sizes["sample"] == 6
        np.testing.assert_array_equal(ds["u"].values, np.concatenate([a["u"], b["u"], c["u"]]))
        # the constant field of each file, repeated for each of its samples
        np.testing.assert_array_equal(ds["c"].isel(sample=4).values, c["c"])
        np.testing.assert_array_equal(ds["c"].isel(sample=slice(1, 3)).values,
                                      np.stack([a["c"], b["c"]]))


def test_files_that_do_not_fit_together_are_refused(tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    _write_genuine(folder / "a.hdf5", nx=6)
    _write_genuine(folder / "b.hdf5", nx=8)
    with pytest.raises(ValueError, match="different grids.*one at a time"):
        the_well.open(folder)


def test_what_is_not_the_well_is_not_sniffed(tmp_path):
    ds = make_dataset()
    assert not the_well.sniff(save(ds, tmp_path / "a.nc"))
    assert not the_well.sniff(save(ds, tmp_path / "a.zarr"))
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f.create_dataset("tensor", data=np.zeros(3))
    assert not the_well.sniff(tmp_path / "other.h5")
    assert not the_well.sniff(tmp_path / "missing")
    with pytest.raises(ValueError, match="is not a file of The Well.*lacks dimensions"):
        the_well.open(tmp_path / "other.h5")
    with pytest.raises(FileNotFoundError, match="no Well dataset"):
        the_well.open(tmp_path / "missing")


def test_export_refuses_an_existing_path_and_clashing_names(tmp_path):
    ds = make_dataset(nsample=3, ndim=1)
    (tmp_path / "there").mkdir()
    with pytest.raises(FileExistsError, match="already exists"):
        the_well.export(ds, tmp_path / "there")
    clash = ds.assign(u=ds["viscosity"].copy())
    clash["vorticity"].attrs.update(vector="u", vector_component="x")
    with pytest.raises(ValueError, match="'u' is both a field and a scalar"):
        the_well.export(clash, tmp_path / "clash")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["there"]


def test_without_h5py_the_message_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "h5py", None)
    with pytest.raises(ImportError, match=r"needs h5py: pip install 'ssmpde\[interop\]'"):
        the_well.export(make_dataset(nsample=3, ndim=1), tmp_path / "x")
    assert not (tmp_path / "x").exists()


# --------------------------------------------------------------------------------------------
# The Well's own loaders (the interop extra)
# --------------------------------------------------------------------------------------------

def _well_loaders():
    pytest.importorskip("the_well")
    from the_well.data import WellDataModule, WellDataset
    from the_well.data.normalization import ZScoreNormalization

    return WellDataset, WellDataModule, ZScoreNormalization


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
def test_well_dataset_and_data_module_load_a_2d_export(datasets, exports):
    WellDataset, WellDataModule, ZScoreNormalization = _well_loaders()
    ds = datasets["euler"]
    target, _ = exports["euler"]
    ny, nx, nt = ds.sizes["y"], ds.sizes["x"], ds.sizes["time"]
    steps_in, steps_out = 2, 1
    well = WellDataset(path=str(target), well_split_name="train", n_steps_input=steps_in,
                       n_steps_output=steps_out, use_normalization=True,
                       normalization_type=ZScoreNormalization)
    windows = nt - (steps_in + steps_out) + 1
    assert windows >= 2 and len(well) == TRAIN * windows
    meta = well.metadata
    assert meta.dataset_name == "euler" and meta.spatial_resolution == (nx, ny)
    assert meta.field_names[0] == ["density", "pressure", "tracer"]
    assert meta.field_names[1] == ["velocity_x", "velocity_y"]
    assert meta.boundary_condition_types == ["PERIODIC"]
    item = well[windows + 1]  # sample 1, window 1
    channels = 5
    assert {k: tuple(v.shape) for k, v in item.items()} == {
        "input_fields": (steps_in, nx, ny, channels),
        "output_fields": (steps_out, nx, ny, channels),
        "boundary_conditions": (2, 2), "space_grid": (nx, ny, 2),
        "input_time_grid": (steps_in,), "output_time_grid": (steps_out,)}
    # the values: z-scores with our stats.yaml, channels density, pressure, tracer, vx, vy
    train = ds.isel(sample=slice(0, TRAIN))
    for channel, name in enumerate(["density", "pressure", "tracer", "velocity_x",
                                    "velocity_y"]):
        raw = ds[name].values[1, 1:1 + steps_in].transpose(0, 2, 1)  # [time, x, y]
        # ZScoreNormalization holds the stats as torch's default float32
        mean = float(np.float32(train[name].values.mean()))
        std = float(np.float32(train[name].values.std()))
        expected = (raw - mean) / std
        np.testing.assert_allclose(item["input_fields"][..., channel].numpy(), expected,
                                   rtol=1e-10, atol=1e-12, err_msg=name)
    np.testing.assert_array_equal(item["boundary_conditions"].numpy(), 2)  # PERIODIC
    np.testing.assert_array_equal(item["space_grid"][3, 5].numpy(),
                                  [ds["x"].values[3], ds["y"].values[5]])

    batch_size = 2
    paths = {key: {"path": str(target)} for key in ("train", "val", "rollout_val", "test",
                                                     "rollout_test")}
    module = WellDataModule(well_base_path=str(target.parent), well_dataset_name=target.name,
                            batch_size=batch_size, n_steps_input=steps_in,
                            n_steps_output=steps_out, data_workers=0, use_normalization=True,
                            normalization_type=ZScoreNormalization, dataset_kws=paths)
    batch = next(iter(module.train_dataloader()))
    assert {k: tuple(v.shape) for k, v in batch.items()} == {
        "input_fields": (batch_size, steps_in, nx, ny, channels),
        "output_fields": (batch_size, steps_out, nx, ny, channels),
        "boundary_conditions": (batch_size, 2, 2), "space_grid": (batch_size, nx, ny, 2),
        "input_time_grid": (batch_size, steps_in), "output_time_grid": (batch_size, steps_out)}
    assert len(module.val_dataset) == windows and len(module.test_dataset) == windows
    rollout = next(iter(module.rollout_test_dataloader()))
    assert tuple(rollout["output_fields"].shape) == (1, nt - steps_in, nx, ny, channels)


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
def test_well_dataset_loads_a_1d_export_with_its_scalars(datasets, exports):
    WellDataset, _, _ = _well_loaders()
    ds = datasets["kuramoto-sivashinsky"]
    target, _ = exports["kuramoto-sivashinsky"]
    nx, nt = ds.sizes["x"], ds.sizes["time"]
    well = WellDataset(path=str(target), well_split_name="train", n_steps_input=1,
                       n_steps_output=1)
    assert len(well) == TRAIN * (nt - 1)
    item = well[nt - 1]  # sample 1, window 0
    assert tuple(item["input_fields"].shape) == (1, nx, 1)
    assert tuple(item["constant_scalars"].shape) == (1,)
    np.testing.assert_array_equal(item["input_fields"][0, :, 0].numpy(), ds["u"].values[1, 0])
    np.testing.assert_array_equal(item["output_fields"][0, :, 0].numpy(), ds["u"].values[1, 1])
    assert item["constant_scalars"].item() == ds["viscosity"].values[1]


def test_the_well_dummy_file_opens(tmp_path):
    pytest.importorskip("the_well")
    from the_well.utils.dummy_data import write_dummy_data

    path = tmp_path / "dummy.hdf5"
    write_dummy_data(str(path))
    with h5py.File(path) as f:
        field = f["t1_fields/field"][()]      # [sample, time, x, y, component]
        constant = f["t0_fields/constant_field"][()]
    with open_dataset(path) as ds:
        assert ds["field_x"].attrs["vector"] == "field"
        assert ds["field_y"].attrs["vector_component"] == "y"
        np.testing.assert_array_equal(ds["field_y"].values, field[..., 1].transpose(0, 1, 3, 2))
        np.testing.assert_array_equal(ds["constant_field"].values, constant.transpose(0, 2, 1))
        assert ds["constant_field"].attrs["role"] == "forcing"
        assert ds["time_varying_scalar"].dims == ("time",)
        assert ds["time_varying_scalar"].attrs["role"] == "diagnostic"
        assert ds["a"].values == 0.25 and ds["a"].attrs["role"] == "parameter"


def test_nothing_to_export_is_refused(tmp_path):
    empty = make_dataset(nsample=3, ndim=1).isel(sample=slice(0, 0))
    with pytest.raises(ValueError, match="has no samples"):
        the_well.export(empty, tmp_path / "empty")
    assert not (tmp_path / "empty").exists()


# --------------------------------------------------------------------------------------------
# Damaged Well files are named; the float32 export The Well's models need
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, shown", [(np.nan, "nan"), (-1, "-1"), ("many", "many"),
                                          (2.5, "2.5"), (np.inf, "inf")])
def test_an_n_trajectories_that_is_no_count_is_named_with_its_file(tmp_path, value, shown):
    from ssmpde.data import DatasetFileError

    path = tmp_path / "genuine.hdf5"
    _write_genuine(path)
    with h5py.File(path, "a") as f:
        f.attrs["n_trajectories"] = value
    with pytest.raises(DatasetFileError, match=rf"'{path}': its n_trajectories attribute is "
                                               rf"{shown}, not a number of trajectories"):
        open_dataset(path)


def test_an_n_trajectories_the_fields_do_not_hold_is_named(tmp_path):
    from ssmpde.data import DatasetFileError

    path = tmp_path / "genuine.hdf5"
    _write_genuine(path)  # two trajectories
    for n in (1, 5, 10 ** 12):
        with h5py.File(path, "a") as f:
            f.attrs["n_trajectories"] = n
        with pytest.raises(DatasetFileError, match=rf"'{path}': n_trajectories is {n}, but "
                                                   r"t0_fields/u holds 2 trajectories"):
            open_dataset(path)


def test_a_truncated_split_is_a_damaged_well_file_not_a_zarr_store(tmp_path):
    from ssmpde.data import DatasetFileError

    split = tmp_path / "cut_well" / "data" / "train"
    split.mkdir(parents=True)
    _write_genuine(split / "genuine.hdf5")
    raw = (split / "genuine.hdf5").read_bytes()
    (split / "genuine.hdf5").write_bytes(raw[:len(raw) // 2])
    for path in (tmp_path / "cut_well", split):
        assert the_well.sniff(path)
        with pytest.raises(DatasetFileError, match=r"cannot read the Well file '.*genuine\.hdf5'"
                                                   r": it is truncated or corrupt HDF5"):
            open_dataset(path)


def test_info_on_a_well_directory_asks_for_h5py_only_without_it(tmp_path, capsys):
    split = tmp_path / "ns_well" / "data" / "train"
    split.mkdir(parents=True)
    _write_genuine(split / "genuine.hdf5")
    assert main(["info", str(tmp_path / "ns_well")]) == 0
    out = capsys.readouterr().out
    assert "format: the-well (The Well: a directory" in out and "needs h5py" not in out


def _well_model(name: str, monkeypatch, request):
    """The Well's model class ``name`` from ``the_well.benchmark.models``.

    That package imports timm and huggingface_hub (The Well's ``benchmark`` extra, not our
    ``interop`` one) at its top, for models and Hub features this test does not use; where
    they are missing, stand-ins that cannot be used take their place for this test only.
    """
    import importlib
    import types

    try:
        return getattr(importlib.import_module("the_well.benchmark.models"), name)
    except ImportError:
        pass

    def unavailable(*args, **kwargs):
        raise AssertionError("timm is not installed: a model that needs it cannot run here")

    hub = types.ModuleType("huggingface_hub")
    hub.PyTorchModelHubMixin = type("PyTorchModelHubMixin", (), {})  # Hub upload/download only
    stand_ins = {"huggingface_hub": hub}
    for module_name in ("timm", "timm.models", "timm.models.layers", "timm.layers"):
        module = types.ModuleType(module_name)
        module.DropPath = module.trunc_normal_ = unavailable
        stand_ins[module_name] = module
    for module_name, module in stand_ins.items():
        if module_name not in sys.modules:
            monkeypatch.setitem(sys.modules, module_name, module)
    before = set(sys.modules)
    request.addfinalizer(lambda: [sys.modules.pop(key) for key in set(sys.modules) - before
                                  if key.startswith("the_well.benchmark")])
    return getattr(importlib.import_module("the_well.benchmark.models"), name)


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
def test_a_float32_export_runs_through_the_wells_own_model(tmp_path, monkeypatch, request,
                                                           capsys):
    pytest.importorskip("the_well")
    torch = pytest.importorskip("torch")
    from the_well.data import WellDataset
    from the_well.data.data_formatter import DefaultChannelsFirstFormatter

    UNetClassic = _well_model("UNetClassic", monkeypatch, request)
    ds = make_dataset(nsample=3, ntime=4, resolution=16, ndim=2)  # float64, as solvers write
    notes = the_well.export(ds, tmp_path / "w32", dtype="float32")
    assert "values written as float32 (cast from float64)" in notes
    with h5py.File(tmp_path / "w32" / "data" / "train" / "navier_stokes.hdf5") as f:
        assert f["t0_fields/vorticity"].dtype == np.float32
        assert f["scalars/viscosity"].dtype == np.float32
        assert f["dimensions/x"].dtype == np.float64  # coordinates keep theirs
    back = load_dataset(tmp_path / "w32")
    xr.testing.assert_identical(back, ds.astype({name: np.float32 for name in ds.data_vars}))

    def first_batch(path):
        well = WellDataset(path=str(path), well_split_name="train", n_steps_input=2,
                           n_steps_output=1)
        batch = next(iter(torch.utils.data.DataLoader(well, batch_size=2)))
        return DefaultChannelsFirstFormatter(well.metadata).process_input(batch)

    (inputs,), target = first_batch(tmp_path / "w32")
    model = UNetClassic(dim_in=inputs.shape[1], dim_out=target.shape[-1], n_spatial_dims=2,
                        spatial_resolution=(16, 16), init_features=4)
    output = model(inputs)
    assert output.dtype == torch.float32 and tuple(output.shape) == (2, 1, 16, 16)
    assert torch.isfinite(output).all()
    # The default keeps float64, which The Well's models refuse: the note says what to do.
    notes = the_well.export(ds, tmp_path / "w64")
    assert any("values written as float64 (the dataset's dtype): The Well's own files and "
               "models are float32" in note and "--dtype float32" in note for note in notes)
    (inputs,), _ = first_batch(tmp_path / "w64")
    with pytest.raises(RuntimeError, match=r"(?i)double.*float"):  # torch words it per layer
        model(inputs)
    # convert --dtype float32 says what it wrote
    source = tmp_path / "ns.nc"
    save(ds, source)
    assert main(["convert", str(source), str(tmp_path / "cli_well"), "--to", "the-well",
                 "--dtype", "float32"]) == 0
    assert "note: values written as float32 (cast from float64)" in capsys.readouterr().out
    assert load_dataset(tmp_path / "cli_well")["vorticity"].dtype == np.float32
    with pytest.raises(ValueError, match="dtype must be 'float32' or 'float64'"):
        the_well.export(ds, tmp_path / "bad", dtype="int8")
