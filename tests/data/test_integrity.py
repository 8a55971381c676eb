"""Damaged and oddly laid out dataset files: every value read is in the file, or an error names
the file, the variable and the chunk. Missing zarr chunks, undecodable chunks (zarr and netCDF),
dimensions stored in another order, and ``check_file`` (``ssmpde info --check``)."""

from __future__ import annotations

import shutil
import warnings

import numpy as np
import pytest
import xarray as xr

from ssmpde.data import (
    SAMPLE,
    TIME,
    X,
    Y,
    DatasetFileError,
    SchemaError,
    StoreProgress,
    build_dataset,
    check_file,
    config_of,
    convert,
    create_store,
    describe,
    grid_coordinates,
    load_dataset,
    open_dataset,
    sample_coordinate,
    save,
    time_coordinate,
    validate,
    write_store_region,
)

from .helpers import FORMATS, make_dataset


def _dataset(nsample=4, ny=3, nx=5, ntime=2, seed=0):
    """A state on a non-square grid, so reading it in the wrong order changes its shape."""
    rng = np.random.default_rng(seed)
    field = xr.DataArray(rng.standard_normal((nsample, ntime, ny, nx)),
                         dims=(SAMPLE, TIME, Y, X),
                         attrs={"long_name": "vorticity", "units": "1", "role": "state"})
    viscosity = xr.DataArray(rng.uniform(1.0, 2.0, nsample), dims=(SAMPLE,),
                             attrs={"long_name": "viscosity", "units": "1",
                                    "role": "parameter"})
    grid = grid_coordinates((ny, nx))
    return build_dataset({"vorticity": field, "viscosity": viscosity},
                         coords={SAMPLE: sample_coordinate(nsample),
                                 TIME: time_coordinate(np.arange(ntime) * 0.5), **grid},
                         equation="navier_stokes", config={"seed": seed}, title="t",
                         references="none", solver="test")


def _layout(ds, path, progress):
    """A store being written, laid out like `generate --workers` does (placeholders)."""
    return create_store(ds.chunk({dim: -1 for dim in ds.dims}), path, progress)


def _chunk(store, name, key):
    return store / name / key


def _readers():
    def read_lazily(path):
        with open_dataset(path) as ds:
            return ds["vorticity"].isel({SAMPLE: 1}).values

    def read_dask(path):
        with open_dataset(path, chunks={}) as ds:
            return ds["vorticity"].sum().compute()

    def convert_to_nc(path):
        target = path.parent / "copy.nc"
        try:
            return convert(path, target)
        finally:
            assert not target.exists() and not list(path.parent.glob(".copy.nc*"))

    return {"open": read_lazily, "dask": read_dask, "load": load_dataset,
            "describe": describe, "convert": convert_to_nc}


READERS = _readers()


def _assert_chunk_error(reader, store, what):
    """Reading ``store`` fails with one message naming the store, the variable 'vorticity',
    its chunk '1.0.0.0' and sample 1, what is wrong with it (``what``), and the check to run."""
    with pytest.raises(DatasetFileError) as info:
        READERS[reader](store)
    message = str(info.value)
    assert f"'{store}'" in message and "'vorticity'" in message, message
    assert "sample 1" in message and "chunk '1.0.0.0'" in message and what in message
    assert "ssmpde info --check" in message


# --------------------------------------------------------------------------------------------
# Missing zarr chunks
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("reader", READERS, ids=str)
def test_a_missing_chunk_is_an_error_naming_store_variable_and_chunk(reader, tmp_path):
    store = save(_dataset(), tmp_path / "d.zarr")
    _chunk(store, "vorticity", "1.0.0.0").unlink()
    _assert_chunk_error(reader, store, "missing")


def test_a_deleted_variable_directory_is_an_error(tmp_path):
    store = save(_dataset(), tmp_path / "d.zarr")
    shutil.rmtree(store / "viscosity")  # the consolidated metadata still lists it
    for read in (open_dataset, load_dataset, describe):
        with pytest.raises(DatasetFileError, match=r"'viscosity'.*all 4 chunks are missing"):
            read(store)


def test_a_missing_coordinate_chunk_is_an_error(tmp_path):
    store = save(_dataset(), tmp_path / "d.zarr")
    _chunk(store, X, "0").unlink()
    with pytest.raises(DatasetFileError, match=r"'x'.*chunk '0'.*missing"):
        open_dataset(store)


def test_all_zero_values_are_written_as_chunks(tmp_path):
    # zarr skips chunks equal to the fill value unless told otherwise: one sample of zeros
    # (and the coordinate sample = [0] of a one-sample store) must still be on disk.
    ds = _dataset(nsample=1)
    ds["vorticity"][:] = 0.0
    store = save(ds, tmp_path / "d.zarr")
    assert _chunk(store, "vorticity", "0.0.0.0").is_file()
    assert _chunk(store, SAMPLE, "0").is_file()
    with open_dataset(store) as opened:
        assert (opened["vorticity"].values == 0).all()


def test_a_store_being_written_lacks_only_its_unfinished_chunks(tmp_path):
    ds = _dataset(nsample=4)
    ds["vorticity"][0] = 0.0  # an all-zero sample is written like any other
    progress = StoreProgress(config=config_of(ds), history=ds.attrs["history"], run_id="r",
                             num_samples=4, batch_size=2)
    store = _layout(ds, tmp_path / "d.zarr", progress)
    write_store_region(ds.isel({SAMPLE: slice(0, 2)}), store, run_id="r")
    from ssmpde.data import update_store_progress

    update_store_progress(store, progress.with_complete(0, 2))
    assert _chunk(store, "vorticity", "0.0.0.0").is_file()
    assert not _chunk(store, "vorticity", "2.0.0.0").exists()
    text = describe(store)  # samples 2 and 3 are not written yet: that is no damage
    assert "2 of 4 samples" in text and "schema: ok" in text
    _chunk(store, "vorticity", "1.0.0.0").unlink()
    with pytest.raises(DatasetFileError, match=r"'vorticity'.*missing chunk '1.0.0.0'"):
        describe(store)


def test_a_chunk_that_is_declared_fill_is_not_missing(tmp_path):
    # A store from another tool that declares a fill value: its missing chunks read as
    # that value, masked by xarray (NaN), which no reader takes for data.
    ds = _dataset()
    path = tmp_path / "foreign.zarr"
    ds.to_zarr(path, zarr_format=2, consolidated=True,
               encoding={"vorticity": {"_FillValue": np.nan, "chunks": (1, 2, 3, 5)}})
    _chunk(path, "vorticity", "1.0.0.0").unlink()
    with open_dataset(path) as opened:
        assert np.isnan(opened["vorticity"].isel({SAMPLE: 1}).values).all()
    damaged = check_file(path, progress=False).damaged  # the check lists it all the same
    assert [(d.chunk, d.problem) for d in damaged] == [("1.0.0.0", "missing")]


def test_a_missing_chunk_of_a_zarr_format_3_store(tmp_path):
    ds = _dataset()
    path = tmp_path / "v3.zarr"
    with warnings.catch_warnings():  # consolidated metadata are not (yet) part of format 3
        warnings.simplefilter("ignore")
        ds.to_zarr(path, zarr_format=3, consolidated=True, write_empty_chunks=True,
                   encoding={"vorticity": {"_FillValue": None, "chunks": (1, 2, 3, 5)}})
    (path / "vorticity" / "c" / "1" / "0" / "0" / "0").unlink()
    with pytest.raises(DatasetFileError, match=r"'vorticity'.*missing chunk 'c/1/0/0/0' "
                                               r"\(sample 1\)"):
        open_dataset(path)


# --------------------------------------------------------------------------------------------
# Undecodable chunks
# --------------------------------------------------------------------------------------------

def _garbage(path):
    path.write_bytes(np.random.default_rng(0).bytes(200))


def _truncated(path):
    raw = path.read_bytes()
    path.write_bytes(raw[:len(raw) // 2])


@pytest.mark.parametrize("damage", [_garbage, _truncated], ids=["garbage", "truncated"])
@pytest.mark.parametrize("reader", READERS, ids=str)
def test_an_undecodable_zarr_chunk_names_store_variable_and_chunk(reader, damage, tmp_path):
    store = save(_dataset(), tmp_path / "d.zarr")
    damage(_chunk(store, "vorticity", "1.0.0.0"))
    _assert_chunk_error(reader, store, "corrupt")


def _corrupt_netcdf(tmp_path):
    """A netCDF file whose header reads but whose (incompressible) data chunks do not."""
    path = save(_dataset(nsample=4, ny=16, nx=16, ntime=3), tmp_path / "d.nc")
    raw = bytearray(path.read_bytes())
    middle = len(raw) // 2
    raw[middle:middle + 64] = np.random.default_rng(1).bytes(64)
    path.write_bytes(bytes(raw))
    return path


@pytest.mark.parametrize("reader", READERS, ids=str)
def test_a_corrupt_netcdf_chunk_names_file_and_variable(reader, tmp_path):
    path = _corrupt_netcdf(tmp_path)
    read = READERS[reader]
    if reader == "open":  # the damaged sample is one of the four: read each
        def read(p):
            with open_dataset(p) as ds:
                for sample in range(ds.sizes[SAMPLE]):
                    ds["vorticity"].isel({SAMPLE: sample}).values
    with pytest.raises(DatasetFileError) as info:
        read(path)
    message = str(info.value)
    assert f"'{path}'" in message and "'vorticity'" in message and "corrupt" in message
    assert "sample" in message and "HDF error" in message


# --------------------------------------------------------------------------------------------
# Dimension order
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("suffix", FORMATS)
def test_dimensions_stored_in_another_order_are_read_by_name(suffix, tmp_path):
    ds = _dataset()
    stored = ds.assign(vorticity=ds["vorticity"].transpose(SAMPLE, TIME, X, Y))
    path = save(stored, tmp_path / f"d.{suffix}", validate=False)
    for chunks in (None, {}):
        with open_dataset(path, chunks=chunks) as opened:
            assert opened["vorticity"].dims == (SAMPLE, TIME, Y, X)
            np.testing.assert_array_equal(opened["vorticity"].isel({SAMPLE: 2}).values,
                                          ds["vorticity"].isel({SAMPLE: 2}).values)
            np.testing.assert_array_equal(opened["vorticity"].values, ds["vorticity"].values)
    text = describe(path)
    assert "vorticity (sample, time, y, x)" in text
    assert "stored as (sample, time, x, y), read by name" in text and "schema: ok" in text
    copy = convert(path, tmp_path / f"fixed.{'nc' if suffix == 'zarr' else 'zarr'}")
    assert "stored as" not in describe(copy)  # the copy is in the schema's order


def test_validate_names_dimensions_out_of_order_with_the_fix():
    ds = _dataset()
    ds["vorticity"] = ds["vorticity"].transpose(SAMPLE, TIME, X, Y)
    with pytest.raises(SchemaError, match=r"'vorticity' has dimensions \(sample, time, x, y\), "
                                          r"not in the schema's order \(sample, time, y, x\)"
                                          r".*transpose\('sample', 'time', 'y', 'x'\)"):
        validate(ds)
    ds = _dataset()
    ds["viscosity"] = ds["viscosity"].expand_dims(mode=2, axis=0)
    with pytest.raises(SchemaError, match=r"'viscosity' has dimensions \(mode, sample\)"):
        validate(ds)
    validate(make_dataset())  # extra dimensions after sample: the schema allows them


@pytest.mark.parametrize("suffix", FORMATS)
def test_unknown_dimension_names_on_a_state_are_refused(suffix, tmp_path):
    ds = _dataset()
    odd = ds.assign(vorticity=ds["vorticity"].rename({Y: "dim_2", X: "dim_3"}))
    path = save(odd, tmp_path / f"d.{suffix}", validate=False)
    with pytest.raises(SchemaError, match=r"state variable 'vorticity' has dimensions "
                                          r"\['dim_2', 'dim_3'\].*rename"):
        open_dataset(path)
    assert "schema: problems" in describe(path)


# --------------------------------------------------------------------------------------------
# check_file (ssmpde info --check)
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("suffix", FORMATS)
def test_check_of_an_intact_file_reads_every_chunk(suffix, tmp_path):
    path = save(_dataset(nsample=4), tmp_path / f"d.{suffix}")
    report = check_file(path, progress=False)
    # vorticity and viscosity: 4 chunks each; sample, time, y, x: one each
    assert report.damaged == []
    assert report.summary() == "check: all 12 chunks of 6 variables read"


def test_check_lists_every_damaged_chunk_of_a_store(tmp_path):
    ds = _dataset(nsample=5)
    ds["vorticity"][4, 0, 0, 0] = np.inf
    store = save(ds, tmp_path / "d.zarr")
    _chunk(store, "vorticity", "1.0.0.0").unlink()
    _garbage(_chunk(store, "vorticity", "2.0.0.0"))
    _truncated(_chunk(store, "viscosity", "3"))
    report = check_file(store, progress=False)
    found = {(d.variable, d.chunk, d.samples): d.problem for d in report.damaged}
    assert set(found) == {("vorticity", "1.0.0.0", (1, 2)), ("vorticity", "2.0.0.0", (2, 3)),
                          ("viscosity", "3", (3, 4)), ("vorticity", "4.0.0.0", (4, 5))}
    assert found[("vorticity", "1.0.0.0", (1, 2))] == "missing"
    assert "undecodable" in found[("vorticity", "2.0.0.0", (2, 3))]
    assert found[("vorticity", "4.0.0.0", (4, 5))] == "1 non-finite value"
    text = report.text()
    assert "4 of 14 chunks damaged" in text
    for line in ("vorticity chunk '1.0.0.0' (sample 1): missing",
                 "vorticity chunk '4.0.0.0' (sample 4): 1 non-finite value"):
        assert line in text, text


def test_check_lists_a_missing_coordinate_chunk(tmp_path):
    store = save(_dataset(nsample=3), tmp_path / "d.zarr")
    _chunk(store, SAMPLE, "0").unlink()
    report = check_file(store, progress=False)
    assert [(d.variable, d.chunk, d.problem) for d in report.damaged] == \
        [(SAMPLE, "0", "missing")]


def test_check_finds_the_damaged_sample_of_a_netcdf_file(tmp_path):
    path = _corrupt_netcdf(tmp_path)
    report = check_file(path, progress=False)
    assert report.damaged and all(d.variable == "vorticity" for d in report.damaged)
    assert len(report.damaged) < 4  # the other samples still read
    assert all("undecodable" in d.problem and "HDF error" in d.problem for d in report.damaged)


def test_check_of_a_store_being_written_checks_its_finished_samples(tmp_path):
    ds = _dataset(nsample=4)
    progress = StoreProgress(config=config_of(ds), history=ds.attrs["history"], run_id="r",
                             num_samples=4, batch_size=2)
    store = _layout(ds, tmp_path / "d.zarr", progress)
    write_store_region(ds.isel({SAMPLE: slice(0, 2)}), store, run_id="r")
    from ssmpde.data import update_store_progress

    update_store_progress(store, progress.with_complete(0, 2))
    report = check_file(store, progress=False)
    assert report.damaged == [] and report.summary() == "check: all 8 chunks of 6 variables read"
    _garbage(_chunk(store, "vorticity", "0.0.0.0"))
    assert [d.chunk for d in check_file(store, progress=False).damaged] == ["0.0.0.0"]


def test_check_finds_a_truncated_chunk_of_a_store_without_checksums(tmp_path):
    # Stores written before ssmpde kept a CRC-32 per chunk: blosc decodes a truncated chunk
    # of incompressible values into whatever memory follows, without an error. The check
    # compares each chunk's length with its blosc header.
    ds = _dataset(nsample=3)
    path = tmp_path / "old.zarr"
    ds.to_zarr(path, zarr_format=2, consolidated=True, write_empty_chunks=True,
               encoding={"vorticity": {"_FillValue": None, "chunks": (1, 2, 3, 5)}})
    chunk = _chunk(path, "vorticity", "2.0.0.0")
    _truncated(chunk)
    report = check_file(path, progress=False)
    assert [(d.variable, d.chunk) for d in report.damaged] == [("vorticity", "2.0.0.0")]
    assert "truncated" in report.damaged[0].problem


def test_zarr_chunks_carry_a_checksum(tmp_path):
    store = save(_dataset(), tmp_path / "d.zarr")
    import json

    for name in ("vorticity", "viscosity", SAMPLE, X):
        meta = json.loads((store / name / ".zarray").read_text())
        assert meta["filters"] == [{"id": "crc32"}], name


def test_a_chunk_this_user_may_not_read_is_not_called_corrupt():
    from xarray.backends import BackendArray
    from xarray.core import indexing

    from ssmpde.data.integrity import GuardedArray

    class Forbidden(BackendArray):
        shape, dtype = (3, 2), np.dtype("f8")

        def __getitem__(self, key):
            raise PermissionError(13, "Permission denied", "d.zarr/u/1.0")

    guarded = GuardedArray(Forbidden(), source="d.zarr", name="u", stored_dims=(SAMPLE, X),
                           dims=(SAMPLE, X), kind="netCDF4 file")
    with pytest.raises(DatasetFileError, match=r"cannot read variable 'u' of netCDF4 file "
                                               r"'d.zarr' at sample 1 \(PermissionError.*"
                                               r"may read it") as info:
        guarded[indexing.BasicIndexer((1, slice(None)))]
    assert "corrupt" not in str(info.value)


def test_a_corrupt_foreign_file_names_file_and_variable(tmp_path, monkeypatch):
    # A PDEBench export read back: its reads are guarded like those of our own files. (Its
    # data are stored uncompressed, without a checksum, so the damage is simulated.)
    from ssmpde.data.formats.pdebench import read as pdebench_read

    source = save(_dataset(nsample=4), tmp_path / "d.nc")
    target = tmp_path / "d.h5"
    convert(source, target, to="pdebench")

    def rotten(self, path, key):
        raise RuntimeError("NetCDF: HDF error")

    monkeypatch.setattr(pdebench_read._File, "read", rotten)
    with open_dataset(target) as ds:
        name = next(n for n, v in ds.data_vars.items() if SAMPLE in v.dims)
        with pytest.raises(DatasetFileError, match=rf"cannot decode variable '{name}' of "
                                                   r"pdebench file '.*d.h5' at sample 2.*"
                                                   r"corrupt.*HDF error"):
            ds[name].isel({SAMPLE: 2}).values
