"""Hostile JSON where ssmpde reads JSON back: a dataset's ``ssmpde_config`` attribute, The
Well's ``ssmpde_metadata`` dataset, a run's ``config.json`` (tests/test_bad_input.py runs the
CLI on those). Every one is decoded by :func:`ssmpde.core.decode_json`, so deep nesting
(Python's RecursionError), a 5000-digit integer (Python's advice to raise
``sys.set_int_max_str_digits``) and the wrong JSON types all give one error of ours that names
the file, never an internal error or Python's advice.
"""

from __future__ import annotations

import json

import pytest

from ssmpde.core import JSONFileError, decode_json
from ssmpde.data import DatasetFileError, SchemaError, config_of, open_dataset, save

from data.helpers import make_dataset

DEEP = "[" * 100_000 + "]" * 100_000
LONG = '{"seed": ' + "1" * 5000 + "}"
HOSTILE = {"invalid": ("{seed: 1", "not valid JSON"), "deep": (DEEP, "nested too deeply"),
           "long-number": (LONG, "number too long"), "array": ("[1, 2]", "JSON object, got array"),
           "not-utf8": (b"\xff\xfe{", "not UTF-8")}


def _ours(message: str) -> None:
    assert "set_int_max_str_digits" not in message and "recursion" not in message, message
    assert "\n" not in message, message


@pytest.mark.parametrize("text, words", HOSTILE.values(), ids=HOSTILE.keys())
def test_decode_json_names_the_source_in_its_own_words(text, words, tmp_path):
    path = tmp_path / "record.json"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    with pytest.raises(JSONFileError, match=words) as error:
        decode_json(path, fix="write it again")
    assert str(error.value).startswith(str(path)) and str(error.value).endswith("write it again")
    _ours(str(error.value))


def test_decode_json_checks_the_types_of_keys():
    assert decode_json("x", text='{"epoch": 2}', keys={"epoch": int}) == {"epoch": 2}
    for text, words in (('{"epoch": true}', "'epoch' must be a JSON integer, got boolean"),
                        ('{"epoch": "2"}', "got string"), ("{}", "lacks the key 'epoch'")):
        with pytest.raises(JSONFileError, match=words):
            decode_json("x", text=text, keys={"epoch": int})
    with pytest.raises(DatasetFileError, match="^the attribute"):
        decode_json("the attribute", text="3", error=DatasetFileError)
    assert decode_json("x", text="true", expect=object) is True


@pytest.mark.parametrize("text, words", [HOSTILE[k] for k in ("deep", "long-number")],
                         ids=["deep", "long-number"])
def test_ssmpde_config_attribute_is_a_schema_error_naming_the_file(text, words, tmp_path):
    path = save(make_dataset().assign_attrs(ssmpde_config=text), tmp_path / "data.nc",
                validate=False)
    with open_dataset(path, validate=False) as ds:
        with pytest.raises(SchemaError, match=words) as error:
            config_of(ds)
    assert "'ssmpde_config' of" in str(error.value) and str(path) in str(error.value)
    _ours(str(error.value).replace("\n", " "))


WELL_METADATA = {
    "deep": (DEEP, "nested too deeply"),
    "long-number": ('{"version": ' + "1" * 5000 + "}", "number too long"),
    "array": ("[1]", "must hold a JSON object, got array"),
    "version-text": ('{"version": "1", "attrs": {}, "coords": {}, "variables": {}}',
                     "'version' must be a JSON integer, got string"),
    "coords-array": ('{"version": 1, "attrs": {}, "coords": [], "variables": {}}',
                     "'coords' must be a JSON object, got array"),
    "entry-number": ('{"version": 1, "attrs": {}, "coords": {"x": 5}, "variables": {}}',
                     "is damaged"),
}


@pytest.mark.parametrize("text, words", WELL_METADATA.values(), ids=WELL_METADATA.keys())
def test_the_well_metadata_is_a_dataset_file_error_naming_the_file(text, words, tmp_path):
    h5py = pytest.importorskip("h5py")
    from ssmpde.data.formats import the_well

    path = tmp_path / "export.hdf5"
    the_well.export(make_dataset(nsample=2, ntime=3, resolution=4), path)
    with h5py.File(path, "r+") as f:
        del f[the_well.METADATA]
        f.create_dataset(the_well.METADATA, data=text)
    with pytest.raises(DatasetFileError, match=words) as error:
        the_well.open(path)
    assert str(path) in str(error.value) and the_well.METADATA in str(error.value)
    _ours(str(error.value))


def test_a_run_config_with_hostile_json_names_the_file(tmp_path):
    from ssmpde.surrogates.checkpoint import load_checkpoint

    run = tmp_path / "run"
    run.mkdir()
    (run / "weights.safetensors").write_bytes(b"")
    for text, words in [HOSTILE[k] for k in ("deep", "long-number", "array", "not-utf8")]:
        (run / "config.json").write_bytes(text.encode() if isinstance(text, str) else text)
        with pytest.raises(ValueError, match=words) as error:
            load_checkpoint(run)
        assert str(run / "config.json") in str(error.value)
        _ours(str(error.value))

