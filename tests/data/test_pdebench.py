"""PDEBench files: exact round trips of our datasets, the layout PDEBench's loaders read, genuine
PDEBench files read as ssmpde datasets, and training on an export.

The expected layouts are written out literally from PDEBench's documentation and loaders:
stacked ``.hdf5`` files (``tensor [N, nt, nx]``, Darcy ``tensor [N, 1, nx, ny]`` and
``nu [N, nx, ny]``, compressible ``density``/``pressure``/``Vx``/``Vy [N, nt, nx, ny]``,
``x-``/``y-coordinate``, ``t-coordinate [nt + 1]``) and per-sample ``.h5`` files (groups
``0000``, ... with ``data [nt, nx, ny, channels]`` and ``grid/x``, ``grid/y``, ``grid/t``), x
before y, float32.
"""

from __future__ import annotations

import json

import netCDF4
import numpy as np
import pytest
import xarray as xr

from ssmpde.cli import main
from ssmpde.data import (ROLE, boundary_conditions_of, config_of, convert, load_dataset,
                         open_dataset, roles_of, save)
from ssmpde.data.formats import pdebench
from ssmpde.solvers import get_solver_class
from ssmpde.generation import generate

try:
    import h5py
except ImportError:  # the default install: read the HDF5 files with netCDF4
    h5py = None

EULER = dict(resolution=16, simulation_resolution=16, final_time=0.1, record_interval=0.05)
CASES = {
    "kuramoto-sivashinsky": ("kuramoto-sivashinsky", None, None),
    "burgers": ("burgers", None, None),
    "kdv": ("kdv", None, None),
    "darcy": ("darcy", None, None),
    "navier-stokes-torus-vis-force": ("navier-stokes", None, None),  # TINY is torus-vis-force
    "euler-ce-rm": ("euler", "ce-rm", EULER),
}


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("pdebench")
    paths = {}
    for case, (equation, preset, config) in CASES.items():
        config = dict(get_solver_class(equation).TINY) if config is None else config
        paths[case] = root / f"{case}.nc"
        generate(equation, num_samples=2, seed=0, preset=preset, out=paths[case],
                 progress=False, **config)
    return paths


def _float32_cast(ds: xr.Dataset) -> xr.Dataset:
    """The documented cast: floating data variables become float32, nothing else changes."""
    out = ds.copy()
    for name, var in ds.data_vars.items():
        if var.dtype.kind == "f":
            out[name] = var.astype(np.float32)
    return out


def _tree(path):
    """{name: (shape, dtype)} of every dataset and the group names, read without ssmpde."""
    found = {}
    if h5py is not None:
        with h5py.File(path, "r") as f:
            f.visititems(lambda name, obj: found.__setitem__(
                name, (obj.shape, obj.dtype) if isinstance(obj, h5py.Dataset) else "group"))
        return found

    def walk(group, prefix):
        for name, var in group.variables.items():
            found[prefix + name] = (var.shape, var.dtype)
        for name, sub in group.groups.items():
            found[prefix + name] = "group"
            walk(sub, prefix + name + "/")

    with netCDF4.Dataset(path) as nc:
        walk(nc, "")
    return found


def _read(path, name):
    if h5py is not None:
        with h5py.File(path, "r") as f:
            return f[name][()]
    with netCDF4.Dataset(path) as nc:
        *groups, leaf = name.split("/")
        group = nc
        for part in groups:
            group = group.groups[part]
        return np.asarray(group.variables[leaf][...])


@pytest.mark.parametrize("case", list(CASES))
def test_round_trip_is_exact_after_the_float32_cast(sources, tmp_path, case):
    original = load_dataset(sources[case])
    suffix = ".h5" if case.startswith("navier") else ".hdf5"
    target = tmp_path / f"export{suffix}"
    result = convert(sources[case], target, to="pdebench")
    assert result.format == "pdebench" and any("float32" in note for note in result.notes)
    back = load_dataset(target)
    xr.testing.assert_identical(back, _float32_cast(original))
    assert roles_of(back) == roles_of(original)
    assert boundary_conditions_of(back) == boundary_conditions_of(original)
    assert config_of(back) == config_of(original)
    # and back to netCDF, still the same
    again = convert(target, tmp_path / "again.nc")
    xr.testing.assert_identical(load_dataset(again.target), _float32_cast(original))


def test_navier_stokes_keeps_its_time_dependent_forcing(sources, tmp_path):
    original = load_dataset(sources["navier-stokes-torus-vis-force"])
    assert original["forcing"].dims == ("sample", "time", "y", "x")
    assert not np.allclose(original["forcing"].isel(time=0), original["forcing"].isel(time=-1))
    target = tmp_path / "ns.h5"
    convert(sources["navier-stokes-torus-vis-force"], target, to="pdebench")
    stored = _read(target, "0001/forcing")  # beside PDEBench's data, in the sample's group
    assert stored.dtype == np.float32 and stored.shape == (3, 16, 16)
    np.testing.assert_array_equal(stored, original["forcing"].isel(sample=1).values
                                  .astype(np.float32))
    with open_dataset(target) as ds:
        assert ds["forcing"].attrs[ROLE] == "forcing"


def test_stacked_1d_layout_is_what_pdebench_reads(sources, tmp_path):
    original = load_dataset(sources["burgers"])
    target = tmp_path / "1D_Burgers_Sols_NuNA.hdf5"
    convert(sources["burgers"], target, to="pdebench")
    tree = _tree(target)
    assert tree["tensor"] == ((2, 3, 32), np.float32)
    assert tree["x-coordinate"] == ((32,), np.float32)
    assert tree["t-coordinate"] == ((4,), np.float32)
    # the netCDF dimensions (exact sample indices and times) and the extras group
    assert tree["sample"] == ((2,), np.int64) and tree["time"] == ((3,), np.float64)
    assert tree["ssmpde"] == "group" and tree["ssmpde/viscosity"] == ((2,), np.float32)
    assert set(tree) == {"tensor", "x-coordinate", "t-coordinate", "sample", "time", "ssmpde",
                         "ssmpde/viscosity"}
    np.testing.assert_array_equal(_read(target, "tensor"),
                                  original["u"].values.astype(np.float32))
    times = original["time"].values
    np.testing.assert_array_equal(_read(target, "t-coordinate"),
                                  np.append(times, 2 * times[-1] - times[-2]).astype(np.float32))
    np.testing.assert_array_equal(_read(target, "x-coordinate"),
                                  original["x"].values.astype(np.float32))


def test_darcy_layout_is_x_first_with_a_time_axis_of_one(sources, tmp_path):
    original = load_dataset(sources["darcy"])
    target = tmp_path / "2D_DarcyFlow_beta1.0_Train.hdf5"
    result = convert(sources["darcy"], target, to="pdebench")
    assert not any("conventional" in note for note in result.notes)  # the conventional name
    tree = _tree(target)
    assert tree["tensor"] == ((2, 1, 9, 9), np.float32)
    assert tree["nu"] == ((2, 9, 9), np.float32)
    assert tree["x-coordinate"] == ((9,), np.float32)
    assert tree["y-coordinate"] == ((9,), np.float32)
    assert "t-coordinate" not in tree and "ssmpde" not in tree
    # tensor[s, 0, i, j] is u at x_i, y_j (PDEBench meshes x, y with indexing="ij")
    u = original["u"].values.astype(np.float32)
    np.testing.assert_array_equal(_read(target, "tensor")[:, 0], u.transpose(0, 2, 1))
    np.testing.assert_array_equal(_read(target, "nu"),
                                  original["a"].values.astype(np.float32).transpose(0, 2, 1))
    with netCDF4.Dataset(target) as nc:
        assert nc.getncattr("beta") == 1.0  # -div(a grad u) = beta


def test_euler_layout_is_pdebench_compressible_flow(sources, tmp_path):
    original = load_dataset(sources["euler-ce-rm"])
    target = tmp_path / "euler.hdf5"
    result = convert(sources["euler-ce-rm"], target, to="pdebench")
    assert result.notes[-1].endswith(
        "'2D_CFD_CE-RM_Eta0.0_Zeta0.0_periodic_16_Train.hdf5' (its loaders find files by name)")
    assert any("tracer (state)" in note for note in result.notes)
    tree = _tree(target)
    for name in ("density", "pressure", "Vx", "Vy"):
        assert tree[name] == ((2, 3, 16, 16), np.float32), name
    assert tree["t-coordinate"] == ((4,), np.float32)
    assert tree["ssmpde/tracer"] == ((2, 3, 16, 16), np.float32)
    for pdebench_name, name in (("Vx", "velocity_x"), ("Vy", "velocity_y"),
                                ("density", "density"), ("pressure", "pressure")):
        np.testing.assert_array_equal(
            _read(target, pdebench_name),
            original[name].values.astype(np.float32).transpose(0, 1, 3, 2))


def test_per_sample_layout_holds_only_sample_groups(sources, tmp_path):
    original = load_dataset(sources["navier-stokes-torus-vis-force"])
    target = tmp_path / "2D_navier-stokes_NA_NA.h5"
    result = convert(sources["navier-stokes-torus-vis-force"], target, to="pdebench")
    assert not any("conventional" in note for note in result.notes)
    tree = _tree(target)
    top = sorted(name for name in tree if "/" not in name)
    assert top == ["0000", "0001"]  # a PDEBench loader takes every top-level key as a sample
    for index, group in enumerate(top):
        assert tree[f"{group}/data"] == ((3, 16, 16, 1), np.float32)
        assert tree[f"{group}/grid/x"] == ((16,), np.float32)
        assert tree[f"{group}/grid/y"] == ((16,), np.float32)
        assert tree[f"{group}/grid/t"] == ((3,), np.float32)
        data = _read(target, f"{group}/data")
        vorticity = original["vorticity"].isel(sample=index).values.astype(np.float32)
        np.testing.assert_array_equal(data[..., 0], vorticity.transpose(0, 2, 1))


def test_unfit_dataset_is_refused_naming_why(tmp_path, capsys):
    ds = load_dataset(_steady_1d(tmp_path))
    with pytest.raises(ValueError, match="steady problem only as Darcy flow"):
        convert(tmp_path / "steady.nc", tmp_path / "x.hdf5", to="pdebench")
    assert main(["convert", str(tmp_path / "steady.nc"), str(tmp_path / "x.hdf5"),
                 "--to", "pdebench"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Darcy flow" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["steady.nc"]
    assert ds.sizes["x"] == 8


def _steady_1d(tmp_path):
    from ssmpde.data import build_dataset, grid_coordinates, sample_coordinate
    u = xr.DataArray(np.zeros((2, 8)), dims=("sample", "x"),
                     attrs={"long_name": "u", "units": "1", ROLE: "state"})
    ds = build_dataset({"u": u}, coords={"sample": sample_coordinate(2),
                                         **grid_coordinates(8, ndim=1)},
                       equation="steady", config={}, title="t", references="r", solver="s")
    return save(ds, tmp_path / "steady.nc")


def test_cli_convert_to_pdebench_prints_what_is_lost(sources, tmp_path, capsys):
    target = tmp_path / "ks.hdf5"
    assert main(["convert", str(sources["kuramoto-sivashinsky"]), str(target),
                 "--to", "pdebench"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"wrote {target} as pdebench (sample=2, time=3, x=32)"
    assert all(line.startswith("note: ") for line in lines[1:]) and len(lines) >= 3
    assert any("viscosity (parameter)" in line for line in lines)
    # without --to an HDF5 name is ambiguous; an unknown format lists the known ones
    for argv, words in ((["convert", str(sources["burgers"]), str(tmp_path / "b.hdf5")],
                         "--to"),
                        (["convert", str(sources["burgers"]), str(tmp_path / "b.hdf5"),
                          "--to", "hdf9"], "netcdf, zarr, pdebench")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("ssmpde: error:") and words in err
    assert not (tmp_path / "b.hdf5").exists()


# ---------------------------------------------------------------------------------------------
# Genuine PDEBench files, written here by hand in PDEBench's layout (no ssmpde attributes)
# ---------------------------------------------------------------------------------------------

def _write_genuine(path, datasets, attrs=None):
    """HDF5 datasets by path, as PDEBench writes them: h5py where installed (phony dims)."""
    if h5py is not None:
        with h5py.File(path, "w") as f:
            for name, values in datasets.items():
                f.create_dataset(name, data=values)
            f.attrs.update(attrs or {})
        return
    with netCDF4.Dataset(path, "w") as nc:
        for name, values in datasets.items():
            *groups, leaf = name.split("/")
            group = nc
            for part in groups:
                group = group.groups.get(part) or group.createGroup(part)
            dims = []
            for axis, size in enumerate(values.shape):
                dim = f"{leaf}_{axis}"
                group.createDimension(dim, size)
                dims.append(dim)
            group.createVariable(leaf, values.dtype, dims)[...] = values
        for key, value in (attrs or {}).items():
            nc.setncattr(key, value)


def test_genuine_burgers_file_opens_as_a_dataset(tmp_path, capsys):
    rng = np.random.default_rng(0)
    tensor = rng.standard_normal((3, 5, 8)).astype(np.float32)
    x = ((np.arange(8) + 0.5) / 8).astype(np.float32)
    t = (np.arange(6) * 0.25).astype(np.float32)
    path = tmp_path / "1D_Burgers_Sols_Nu0.01.hdf5"
    _write_genuine(path, {"tensor": tensor, "x-coordinate": x, "t-coordinate": t},
                   {"Nu": 0.01})
    with open_dataset(path) as ds:
        assert not ds["u"].variable._in_memory  # lazy: nothing read yet
        assert ds.attrs["ssmpde_equation"] == "pdebench-1d-burgers"
        assert roles_of(ds) == {"u": "state"}
        assert ds["u"].dims == ("sample", "time", "x")
        np.testing.assert_array_equal(ds["u"].values, tensor)
        np.testing.assert_array_equal(ds["u"].isel(sample=2, time=slice(1, 4)).values,
                                      tensor[2, 1:4])
        np.testing.assert_array_equal(ds["time"].values, t[:5].astype(np.float64))
        np.testing.assert_array_equal(ds["x"].values, x.astype(np.float64))
        assert ds["x"].attrs["grid_placement"] == "cell_centres"
        assert boundary_conditions_of(ds) == {"u": {"x": ("periodic", "periodic")}}
        assert config_of(ds)["pdebench"]["parameters"]["Nu"] == pytest.approx(0.01)
    with open_dataset(path, chunks={}) as ds:
        assert ds["u"].chunks[0] == (1, 1, 1)
        np.testing.assert_array_equal(ds["u"].values, tensor)
    assert main(["info", str(path)]) == 0
    text = capsys.readouterr().out
    assert "equation: pdebench-1d-burgers" in text and "schema: ok" in text
    assert "format: pdebench" in text and "phony_dim" not in text


def test_genuine_darcy_file_maps_x_first_axes_and_roles(tmp_path):
    rng = np.random.default_rng(1)
    tensor = rng.standard_normal((2, 1, 4, 5)).astype(np.float32)  # [N, 1, nx, ny]
    nu = rng.uniform(1, 2, (2, 4, 5)).astype(np.float32)
    path = tmp_path / "2D_DarcyFlow_beta0.1_Train.hdf5"
    _write_genuine(path, {"tensor": tensor, "nu": nu,
                          "x-coordinate": np.linspace(0.1, 0.9, 4, dtype=np.float32),
                          "y-coordinate": np.linspace(0.1, 0.9, 5, dtype=np.float32)},
                   {"beta": 0.1})
    ds = load_dataset(path)
    assert ds.attrs["ssmpde_equation"] == "pdebench-2d-darcyflow"
    assert dict(ds.sizes) == {"sample": 2, "y": 5, "x": 4}
    assert roles_of(ds) == {"nu": "forcing", "u": "state"}
    np.testing.assert_array_equal(ds["u"].values, tensor[:, 0].transpose(0, 2, 1))
    np.testing.assert_array_equal(ds["nu"].isel(x=3).values, nu[:, 3, :])
    parameters = config_of(ds)["pdebench"]["parameters"]
    assert parameters["beta"] == pytest.approx(0.1) and parameters["split"] == "train"


def test_genuine_compressible_and_per_sample_files(tmp_path):
    rng = np.random.default_rng(2)
    fields = {name: rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
              for name in ("density", "pressure", "Vx", "Vy")}
    cfd = tmp_path / "2D_CFD_Rand_M0.1_Eta0.01_Zeta0.01_trans_4_Train.hdf5"
    _write_genuine(cfd, {**fields, "x-coordinate": np.arange(4, dtype=np.float32),
                         "y-coordinate": np.arange(5, dtype=np.float32),
                         "t-coordinate": np.arange(4, dtype=np.float32)})
    ds = load_dataset(cfd)
    assert ds.attrs["ssmpde_equation"] == "pdebench-2d-cfd-rand"
    np.testing.assert_array_equal(ds["velocity_y"].values, fields["Vy"].transpose(0, 1, 3, 2))
    assert ds["velocity_x"].attrs["vector"] == "velocity"
    assert boundary_conditions_of(ds)["density"] == {"y": ("outflow", "outflow"),
                                                     "x": ("outflow", "outflow")}
    parameters = config_of(ds)["pdebench"]["parameters"]
    assert parameters == {"M": 0.1, "Eta": 0.01, "Zeta": 0.01, "boundary": "trans",
                          "resolution": 4, "split": "train"}

    data = rng.standard_normal((2, 3, 4, 5, 2)).astype(np.float32)  # [N][t, x, y, c]
    groups = tmp_path / "2D_diff-react_NA_NA.h5"
    entries = {}
    for index in range(2):
        entries[f"000{index}/data"] = data[index]
        entries[f"000{index}/grid/x"] = np.linspace(-1, 1, 4, dtype=np.float32)
        entries[f"000{index}/grid/y"] = np.linspace(-1, 1, 5, dtype=np.float32)
        entries[f"000{index}/grid/t"] = np.linspace(0, 1, 3, dtype=np.float32)
    _write_genuine(groups, entries)
    with open_dataset(groups) as ds:
        assert ds.attrs["ssmpde_equation"] == "pdebench-2d-diff-react"
        assert list(ds.data_vars) == ["u_0", "u_1"]
        np.testing.assert_array_equal(ds["u_1"].values, data[..., 1].transpose(0, 1, 3, 2))
        np.testing.assert_array_equal(ds["u_0"].isel(sample=1, x=2).values, data[1, :, 2, :, 0])


def test_parse_name_examples():
    assert pdebench.parse_name("1D_Advection_Sols_beta0.4.hdf5") == (
        "pdebench-1d-advection", {"beta": 0.4})
    assert pdebench.parse_name("ReacDiff_Nu0.5_Rho1.0.hdf5") == (
        "pdebench-reacdiff", {"Nu": 0.5, "Rho": 1.0})


def test_hostile_export_metadata_is_a_dataset_file_error_naming_the_file(sources, tmp_path):
    # The export's global attribute was decoded by json.loads: deep nesting was an internal
    # error (RecursionError), a 5000-digit number got Python's advice.
    from test_json_input import HOSTILE, _ours

    from ssmpde.data import DatasetFileError

    path = tmp_path / "export.hdf5"
    assert main(["convert", str(sources["burgers"]), str(path), "--to", "pdebench"]) == 0
    for name, (text, _) in HOSTILE.items():
        with netCDF4.Dataset(path, "r+") as nc:
            value = text.decode("latin-1") if isinstance(text, bytes) else text
            nc.setncattr_string(pdebench.METADATA_ATTR, value)
        with pytest.raises(DatasetFileError) as error:
            open_dataset(path)
        message = str(error.value)
        assert str(path) in message and pdebench.METADATA_ATTR in message, (name, message)
        _ours(message)


def test_our_netcdf_is_never_taken_for_pdebench(sources):
    assert not pdebench.sniff(sources["burgers"])
    with netCDF4.Dataset(sources["burgers"]) as nc:
        assert "ssmpde_equation" in nc.ncattrs()


# ---------------------------------------------------------------------------------------------
# Training on an export
# ---------------------------------------------------------------------------------------------

@pytest.mark.e2e
def test_geomano_trains_and_evaluates_on_a_pdebench_export(sources, tmp_path, capsys):
    data = tmp_path / "1D_Burgers_Sols_NuNA.hdf5"
    assert main(["convert", str(sources["burgers"]), str(data), "--to", "pdebench"]) == 0
    with netCDF4.Dataset(data) as nc:
        meta = json.loads(nc.getncattr(pdebench.METADATA_ATTR))
    assert meta["layout"] == "tensor-1d"
    run = tmp_path / "run"
    assert main(["train", "geomano", "--data", str(data), "--out", str(run), "--no-progress",
                 "--epochs", "1", "--batch-size", "1", "--num-test", "1", "--window", "1",
                 "--model-option", "width=8", "--model-option", "depth=1",
                 "--model-option", "state_size=4"]) == 0
    assert (run / "weights.safetensors").is_file()
    capsys.readouterr()
    assert main(["evaluate", str(run), "--data", str(data)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"relative L2 on {data}:")
    value = float(out.split(":")[1].split()[0])
    assert np.isfinite(value) and value > 0


def test_a_dropped_dataset_never_closes_its_file_beside_another_threads_read(sources, tmp_path):
    # HDF5 is not thread-safe: a lazily opened PDEBench file whose dataset is collected
    # without ds.close() must not be closed by netCDF4 while another thread holds the HDF5
    # lock (a segmentation fault in a convert). Collected with the lock held elsewhere, the
    # file stays open until the next holder of the lock closes it.
    import gc

    from xarray.backends.locks import HDF5_LOCK

    target = tmp_path / "export.hdf5"
    convert(sources["burgers"], target, to="pdebench")
    ds = pdebench.open(target, None)
    nc = ds._close.__self__.nc  # the file behind the lazy variables (ds.set_close)
    assert nc.isopen()
    with HDF5_LOCK:
        del ds
        gc.collect()
        assert nc.isopen()  # not closed without the lock
    load_dataset(target)  # the next reader holds the lock and closes it
    assert not nc.isopen()


# --------------------------------------------------------------------------------------------
# Files that must not read as data: an outside probe's findings, one test each
# --------------------------------------------------------------------------------------------

def _needs_h5py():
    if h5py is None:
        pytest.skip("writing these HDF5 files (and seeing unwritten chunks) needs h5py")


def _coordinates(f, nx: int = 64, nt: int = 11) -> None:
    f["x-coordinate"] = ((np.arange(nx) + 0.5) / nx).astype(np.float32)
    f["t-coordinate"] = (np.arange(nt + 1) * 0.1).astype(np.float32)


def _cut_short(path):
    """The probe's file: samples 0 and 1 of 4 written, chunks of one sample."""
    with h5py.File(path, "w") as f:
        tensor = f.create_dataset("tensor", shape=(4, 11, 64), dtype=np.float32,
                                  chunks=(1, 11, 64))
        tensor[0:2] = np.random.default_rng(0).standard_normal((2, 11, 64))
        _coordinates(f)
    return path


def _run_cli(argv, cwd, *, env=None, timeout=240, limit_bytes=None, marker=None):
    """``ssmpde ARGV`` in a fresh interpreter (it may crash, hang or exhaust memory there).

    With ``marker``, ``argv`` is a list of command lines run one after the other in that
    interpreter, ``marker`` printed to stderr between them; the exit code is the largest."""
    import os
    import subprocess
    import sys

    import ssmpde

    root = os.path.dirname(os.path.dirname(ssmpde.__file__))
    preamble = ""
    if limit_bytes is not None:
        preamble = ("import resource; resource.setrlimit(resource.RLIMIT_AS, "
                    f"({limit_bytes}, {limit_bytes}))\n")
    if marker is None:
        code = preamble + f"import sys\nfrom ssmpde.cli import main\nsys.exit(main({list(argv)!r}))"
    else:
        code = preamble + (
            "import sys\nfrom ssmpde.cli import main\ncodes = []\n"
            f"for i, argv in enumerate({[list(a) for a in argv]!r}):\n"
            f"    if i:\n        print({marker!r}, file=sys.stderr, flush=True)\n"
            "    try:\n        codes.append(main(argv))\n"
            "    except SystemExit as stop:\n        codes.append(stop.code)\n"
            "sys.exit(max(codes))")
    environment = {**os.environ, "PYTHONPATH": root, **(env or {})}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=timeout)


def _one_error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("ssmpde: error:"), result.stderr[-2000:]
    return lines[0]


def test_unwritten_chunks_are_refused_and_listed(tmp_path):
    # HDF5 reads a chunk that was never written as zeros: a file cut short read as data.
    _needs_h5py()
    from ssmpde.data import DatasetFileError, check_file

    path = _cut_short(tmp_path / "cut.hdf5")
    with pytest.raises(DatasetFileError, match=r"'tensor' \(samples 2\.\.3\) was never written "
                                               r"\(2 chunks.*cut\.hdf5"):
        open_dataset(path)
    report = check_file(path, progress=False)
    assert [chunk.where() for chunk in report.damaged] == ["tensor (sample 2)",
                                                           "tensor (sample 3)"]
    assert all("never written" in chunk.problem for chunk in report.damaged)
    assert "2 of" in report.summary()
    # a contiguous dataset never written has no storage at all
    contiguous = tmp_path / "contiguous.hdf5"
    with h5py.File(contiguous, "w") as f:
        f["tensor"] = np.ones((2, 11, 64), dtype=np.float32)
        f.create_dataset("x-coordinate", shape=(64,), dtype=np.float32)
        f["t-coordinate"] = (np.arange(12) * 0.1).astype(np.float32)
    with pytest.raises(DatasetFileError, match="'x-coordinate' was never written"):
        open_dataset(contiguous)
    assert [c.where() for c in check_file(contiguous, progress=False).damaged] == [
        "x-coordinate"]


def test_sample_groups_of_different_shapes_or_grids_are_refused(tmp_path):
    # Read against the first group, ragged groups lost frames and took another group's grid.
    _needs_h5py()
    from ssmpde.data import DatasetFileError

    def groups(path, frames, scales):
        with h5py.File(path, "w") as f:
            for index, (nt, scale) in enumerate(zip(frames, scales)):
                group = f.create_group(f"{index:04d}")
                group["data"] = np.ones((nt, 8, 8, 1), dtype=np.float32)
                group["grid/x"] = np.linspace(0, scale, 8, dtype=np.float32)
                group["grid/y"] = np.linspace(0, 1, 8, dtype=np.float32)
                group["grid/t"] = np.linspace(0, 1, nt, dtype=np.float32)
        return path

    for frames in ((5, 3), (3, 5)):
        path = groups(tmp_path / f"ragged{frames[0]}.h5", frames, (1, 1))
        with pytest.raises(DatasetFileError, match=r"sample group '0001' holds data of shape "
                                                   r".*one number of frames"):
            open_dataset(path)
    for scales in ((1, 2), (2, 1)):
        path = groups(tmp_path / f"grids{scales[0]}.h5", (4, 4), scales)
        with pytest.raises(DatasetFileError, match=r"'0001' has another grid/x than the group "
                                                   r"'0000'.*one grid"):
            open_dataset(path)


def test_a_header_declaring_more_than_memory_is_refused_before_allocating(tmp_path):
    # 2,352 bytes declaring 10⁹ samples used > 6 GiB in `ssmpde info`. Under an address-space
    # limit and a memory budget of 1 GiB, the refusal names the file before any allocation.
    _needs_h5py()
    with h5py.File(tmp_path / "huge.hdf5", "w") as f:
        f.create_dataset("tensor", shape=(10 ** 9, 11, 64), dtype=np.float32,
                         chunks=(1, 11, 64))
        _coordinates(f)
    assert (tmp_path / "huge.hdf5").stat().st_size < 10_000
    result = _run_cli(["info", "huge.hdf5"], tmp_path, env={"SSMPDE_MAX_MEMORY": "1G"},
                      limit_bytes=6 * 2 ** 30)
    line = _one_error_line(result)
    assert "'huge.hdf5' declares 1000000000 samples" in line and "14.9 GiB" in line


def test_half_floats_are_refused_not_a_crash(tmp_path):
    # netCDF reads HDF5 half floats as strings and crashed (rc 139) reading them; convert
    # left its lock and temporary file behind.
    _needs_h5py()
    with h5py.File(tmp_path / "half.hdf5", "w") as f:
        f["tensor"] = np.ones((2, 5, 16), dtype=np.float16)
        _coordinates(f, nx=16, nt=5)
    before = sorted(p.name for p in tmp_path.iterdir())
    commands = [["info", "half.hdf5"], ["info", "--check", "half.hdf5"],
                ["convert", "half.hdf5", "half.nc"],
                ["train", "geomano", "--data", "half.hdf5", "--out", "run", "--no-progress"]]
    # All four in one fresh interpreter (one import of torch, not four): a crash of any ends
    # it with the signal's return code, and what each printed is told apart by the markers.
    marker = "=== next command ==="
    result = _run_cli(commands, tmp_path, marker=marker)
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    outputs = result.stderr.split(marker)
    assert len(outputs) == len(commands), result.stderr[-2000:]
    for argv, stderr in zip(commands, outputs):
        lines = [line for line in stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("ssmpde: error:"), (argv, stderr)
        assert "'half.hdf5': the dataset 'tensor' holds float16" in lines[0], (argv, lines)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no lock, no temp


@pytest.mark.parametrize("shape", [(2, 0, 16), (0, 5, 16)], ids=["no-frames", "no-samples"])
def test_a_file_without_frames_or_samples_is_refused(shape, tmp_path, capsys):
    # convert --to pdebench of a 0-frame file was an internal error (IndexError); info and
    # convert to netCDF took it silently.
    from test_bad_input import run_bad

    _needs_h5py()
    with h5py.File(tmp_path / "empty.hdf5", "w") as f:
        f["tensor"] = np.ones(shape, dtype=np.float32)
        _coordinates(f, nx=16, nt=max(shape[1] - 1, 0))
    for argv in (["info", "empty.hdf5"], ["convert", "empty.hdf5", "e.nc"],
                 ["convert", "empty.hdf5", "e2.hdf5", "--to", "pdebench"]):
        argv = [str(tmp_path / a) if a.startswith("e") else a for a in argv]
        line = run_bad(argv, capsys, tmp_path)
        assert "empty.hdf5' holds no data" in line, line


def test_a_fifo_is_refused_not_waited_on(tmp_path):
    import os
    import subprocess

    os.mkfifo(tmp_path / "pipe.hdf5")
    try:
        result = _run_cli(["info", "pipe.hdf5"], tmp_path, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("`ssmpde info` on a FIFO waited for a writer (killed after 120 s)")
    assert "'pipe.hdf5' is not a regular file" in _one_error_line(result)


def test_a_tensor_of_another_rank_is_answered_with_the_shapes(tmp_path):
    from ssmpde.data import DatasetFileError

    path = tmp_path / "rank2.hdf5"
    _write_genuine(path, {"tensor": np.ones((5, 16), np.float32),
                          "x-coordinate": np.arange(16, dtype=np.float32)})
    assert pdebench.sniff(path)
    with pytest.raises(DatasetFileError, match=r"'tensor' has shape \[5, 16\] \(rank 2\): "
                                               r"PDEBench 1D files hold tensor \[N, nt, nx\]"):
        open_dataset(path)
    path = tmp_path / "rank4.hdf5"
    _write_genuine(path, {"tensor": np.ones((2, 1, 4, 4), np.float32),
                          "x-coordinate": np.arange(4, dtype=np.float32)})
    with pytest.raises(DatasetFileError, match=r"rank 4\) and has no 'nu' beside it"):
        open_dataset(path)


def test_missing_times_are_said_and_booleans_are_refused(tmp_path, capsys):
    from ssmpde.data import DatasetFileError

    path = tmp_path / "untimed.hdf5"
    _write_genuine(path, {"tensor": np.ones((2, 5, 16), np.float32),
                          "x-coordinate": np.arange(16, dtype=np.float32)})
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert ("comment: untimed.hdf5 has no time coordinate (t-coordinate or grid/t): time is "
            "the frame index 0, 1, 2, ... (a time step of 1 is assumed") in out
    with open_dataset(path) as ds:
        assert "no times" in ds["time"].attrs["comment"]
    _needs_h5py()
    path = tmp_path / "bool.hdf5"
    with h5py.File(path, "w") as f:
        f["tensor"] = np.arange(2 * 5 * 16).reshape(2, 5, 16) % 3 == 0
        _coordinates(f, nx=16, nt=5)
    with pytest.raises(DatasetFileError, match="'tensor' holds booleans, not numbers"):
        open_dataset(path)
