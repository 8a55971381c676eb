"""The foreign formats as xarray engines (:mod:`ssmpde.data.formats.backend`):
``xr.open_dataset(path, engine=NAME)`` gives what :func:`ssmpde.data.open_dataset` gives, and
each engine recognises its own files and no others.

The engines exist once the package metadata is installed (``pip install -e .``): the entry points
of ``pyproject.toml`` are what xarray finds.
"""

from __future__ import annotations

import io

import netCDF4
import numpy as np
import pytest
import xarray as xr

from ssmpde.data import ROLE, DatasetFileError, convert, formats, open_dataset, save
from ssmpde.data.formats.backend import FormatBackendEntrypoint

from .helpers import make_dataset

REINSTALL = ("not registered with xarray: reinstall the package metadata "
             "(pip install --no-deps -e .) so that pyproject.toml's entry points exist")


def _engine(name: str) -> FormatBackendEntrypoint:
    engines = xr.backends.list_engines()
    assert name in engines, f"engine {name!r} {REINSTALL}"
    return engines[name]


def _with_roles(ds: xr.Dataset) -> xr.Dataset:
    roles = {"vorticity": "state", "viscosity": "parameter", "forcing": "parameter"}
    for name, role in roles.items():
        ds[name].attrs[ROLE] = role
    return ds


def _genuine_burgers(path) -> np.ndarray:
    """A PDEBench 1D file as PDEBench lays it out (``tensor [N, nt, nx]``), no ssmpde metadata."""
    rng = np.random.default_rng(0)
    tensor = rng.standard_normal((3, 5, 8)).astype(np.float32)
    with netCDF4.Dataset(path, "w") as nc:
        for name, values in {"tensor": tensor,
                             "x-coordinate": ((np.arange(8) + 0.5) / 8).astype(np.float32),
                             "t-coordinate": (np.arange(6) * 0.25).astype(np.float32)}.items():
            dims = [f"{name}_{axis}" for axis in range(values.ndim)]
            for dim, size in zip(dims, values.shape, strict=True):
                nc.createDimension(dim, size)
            nc.createVariable(name, values.dtype, dims)[...] = values
        nc.setncattr("Nu", 0.01)
    return tensor


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """{case: path}: PDEBench files (a genuine one, ssmpde exports of both layouts), a Well
    export (directory, split directory, one file), and files of neither format."""
    root = tmp_path_factory.mktemp("engines")
    paths = {"pdebench-genuine": root / "1D_Burgers_Sols_Nu0.01.hdf5"}
    _genuine_burgers(paths["pdebench-genuine"])
    for ndim, name in ((1, "pdebench-stacked"), (2, "pdebench-groups")):
        source = save(_with_roles(make_dataset(ndim=ndim)), root / f"ours-{ndim}d.nc")
        paths[name] = convert(source, root / f"{name}.{'hdf5' if ndim == 1 else 'h5'}",
                              to="pdebench").target
        paths[f"ours-{ndim}d.nc"] = source
    paths["ours.zarr"] = save(make_dataset(), root / "ours.zarr")
    if _has_h5py():
        well = convert(paths["ours-2d.nc"], root / "well", to="the-well").target
        paths["the-well"] = well
        paths["the-well-split"] = well / "data" / "train"
        paths["the-well-file"] = next((well / "data" / "train").iterdir())
    return paths


def _has_h5py() -> bool:
    try:
        import h5py  # noqa: F401
    except ImportError:
        return False
    return True


def _well(files, case: str):
    if case not in files:
        pytest.skip("The Well's files need h5py: pip install 'ssmpde[interop]'")
    return files[case]


def test_every_format_is_an_engine_named_as_convert_names_it():
    for name in formats.known_formats():
        engine = _engine(name)
        assert isinstance(engine, FormatBackendEntrypoint) and engine.format_name == name
        assert engine.description == formats.format_named(name).DESCRIPTION
        assert engine.url.startswith("https://")
        assert engine.open_dataset_parameters == (
            "filename_or_obj", "drop_variables", "concat_characters", "decode_coords",
            "mask_and_scale", "decode_times", "decode_timedelta", "use_cftime")


CASES = ["pdebench-genuine", "pdebench-stacked", "pdebench-groups", "the-well", "the-well-split",
         "the-well-file"]


@pytest.mark.parametrize("case", CASES)
def test_the_engine_reads_what_open_dataset_reads(files, case):
    path = files[case] if case.startswith("pdebench") else _well(files, case)
    name = "pdebench" if case.startswith("pdebench") else "the-well"
    with open_dataset(path) as ours, xr.open_dataset(path, engine=name) as theirs:
        assert not any(var._in_memory for var in theirs.data_vars.values())  # lazy
        xr.testing.assert_identical(theirs.load(), ours.load())
        for var in ours.variables:
            assert theirs[var].dtype == ours[var].dtype, var
    with xr.open_dataset(str(path), engine=name, chunks={}) as chunked:
        state = next(n for n, v in chunked.data_vars.items() if v.attrs.get(ROLE) == "state")
        assert set(chunked[state].chunks[0]) == {1}  # one sample a chunk, as open_dataset's
        with open_dataset(path) as ours:
            xr.testing.assert_identical(chunked.compute(), ours.load())


def test_a_genuine_pdebench_file_reads_its_values(tmp_path):
    path = tmp_path / "1D_Burgers_Sols_Nu0.01.hdf5"
    tensor = _genuine_burgers(path)
    with xr.open_dataset(path, engine="pdebench") as ds:
        assert ds.attrs["ssmpde_equation"] == "pdebench-1d-burgers"
        np.testing.assert_array_equal(ds["u"].values, tensor)
        np.testing.assert_array_equal(ds["u"].isel(sample=2, time=slice(1, 4)).values,
                                      tensor[2, 1:4])


def test_drop_variables(files):
    with xr.open_dataset(files["pdebench-stacked"], engine="pdebench",
                         drop_variables=["viscosity", "not-there"]) as ds:
        assert "viscosity" not in ds and "vorticity" in ds
    with xr.open_dataset(files["pdebench-stacked"], engine="pdebench",
                         drop_variables="forcing") as ds:
        assert set(ds.data_vars) == {"vorticity", "viscosity"}


GUESSES = {
    "pdebench": {"pdebench-genuine", "pdebench-stacked", "pdebench-groups"},
    "the-well": {"the-well", "the-well-split", "the-well-file"},
}


@pytest.mark.parametrize("name", list(GUESSES))
def test_guess_can_open_recognises_its_files_and_no_others(files, name, tmp_path):
    engine = _engine(name)
    for case, path in files.items():
        expected = case in GUESSES[name]
        assert engine.guess_can_open(path) is expected, case
        assert engine.guess_can_open(str(path)) is expected, case
    assert engine.guess_can_open(tmp_path / "missing.hdf5") is False
    assert engine.guess_can_open(tmp_path) is False  # an empty directory
    assert engine.guess_can_open(io.BytesIO(b"\x89HDF\r\n\x1a\n")) is False
    assert engine.guess_can_open("https://example.org/data.hdf5") is False


def test_a_well_directory_opens_without_naming_the_engine(files):
    """xarray asks every engine's guess_can_open; none of its own claims a directory that is
    not a zarr store, so The Well's is the one that answers."""
    path = _well(files, "the-well")
    with xr.open_dataset(path) as ds, open_dataset(path) as ours:
        xr.testing.assert_identical(ds.load(), ours.load())


def test_a_file_of_another_format_is_refused_naming_it(files):
    with pytest.raises(DatasetFileError, match="ours-1d.nc"):
        xr.open_dataset(files["ours-1d.nc"], engine="pdebench")
    with pytest.raises(TypeError, match="'pdebench' engine reads a local file.*by its path"):
        xr.open_dataset(io.BytesIO(b"\x89HDF\r\n\x1a\n"), engine="pdebench")


def test_xarray_options_are_taken_or_refused_by_name(files):
    """xarray's decoding options: those that change nothing are taken, those the engine cannot
    honour are refused naming them (a raw TypeError before), unknown ones too."""
    path = files["pdebench-stacked"]
    for options in ({"mask_and_scale": False}, {"decode_times": False}, {"decode_cf": False},
                    {"decode_coords": "all"}, {"concat_characters": True},
                    {"chunks": {"sample": 2}}):
        with xr.open_dataset(path, engine="pdebench", **options) as ds, \
                open_dataset(path) as ours:
            xr.testing.assert_identical(ds.load(), ours.load())
    for name in ("mask_and_scale", "decode_times", "decode_timedelta", "use_cftime"):
        with pytest.raises(ValueError, match=f"'pdebench' engine cannot honour {name}=True: "
                                             ".* leave it out or pass False"):
            xr.open_dataset(path, engine="pdebench", **{name: True})
    with pytest.raises(TypeError, match="'pdebench' engine takes no option 'group': it takes "
                                        "drop_variables, chunks and"):
        xr.open_dataset(path, engine="pdebench", group="x")
