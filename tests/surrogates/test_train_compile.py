"""TrainConfig.compile and evaluate(compile=): the option reaches compile_model, changes no
numbers, is validated early, and is not part of a run (a resume may switch it; runs written
before the option existed resume)."""

import json
import math

import pytest

from ssmpde.cli import main
from ssmpde.generation import generate
from ssmpde.surrogates.train import TrainConfig, evaluate, train

KS = dict(resolution=32, simulation_resolution=64, domain_length=22.0, viscosity=1.0,
          final_time=1.0, record_interval=0.25, time_step=0.05)
MODEL = dict(width=8, depth=1, modes=(4,))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("train_compile") / "ks.nc"
    generate("kuramoto-sivashinsky", num_samples=4, seed=0, out=path, progress=False, **KS)
    return path


@pytest.mark.parametrize("value, message", [("no-such-backend", "unknown torch.compile"),
                                            (2, "compile must be"), (1.0, "compile must be")])
def test_bad_compile_values_fail_when_the_config_is_made(value, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(compile=value)


@pytest.mark.slow  # 15 s: torch.compile of a training step, twice
def test_compiled_training_matches_eager_and_resumes_across_the_switch(tmp_path, data,
                                                                       compile_calls):
    common = dict(model_overrides=MODEL, preset="burgers", progress=False)
    eager = train("fno", data, out=tmp_path / "eager",
                  config=TrainConfig(epochs=1, batch_size=2, window=1, num_test=1), **common)
    compiled = train("fno", data, out=tmp_path / "compiled",
                     config=TrainConfig(epochs=1, batch_size=2, window=1, num_test=1,
                                        compile="aot_eager"), **common)
    assert compile_calls == ["aot_eager", "aot_eager"]  # the training and the test model
    assert math.isclose(compiled["train_loss"], eager["train_loss"], rel_tol=1e-5)
    assert math.isclose(compiled["test_rel_l2"], eager["test_rel_l2"], rel_tol=1e-5)

    # an eager run stopped after one of two epochs resumes compiled, and a run recorded
    # before the option existed (no "compile" in its train_config) resumes too
    run = tmp_path / "resumed"
    train("fno", data, out=run, time_limit=0,
          config=TrainConfig(epochs=2, batch_size=2, window=1, num_test=1), **common)
    record = json.loads((run / "config.json").read_text())
    del record["train_config"]["compile"]
    (run / "config.json").write_text(json.dumps(record))
    metrics = train("fno", data, out=run, resume=True,
                    config=TrainConfig(epochs=2, batch_size=2, window=1, num_test=1,
                                       compile="aot_eager"), **common)
    assert metrics["epoch"] == 2


@pytest.mark.e2e
def test_evaluate_compiled_equals_eager(tmp_path, data, compile_calls, capsys):
    run = tmp_path / "run"
    train("fno", data, out=run, model_overrides=MODEL, preset="burgers", progress=False,
          config=TrainConfig(epochs=1, batch_size=4, window=1))
    eager = evaluate(run, data)
    compiled = evaluate(run, data, compile="aot_eager", threads=1)
    assert compile_calls == ["aot_eager"]
    assert compiled["rel_l2_per_step"] == pytest.approx(eager["rel_l2_per_step"], rel=1e-5)
    assert main(["evaluate", str(run), "--data", str(data), "--compile", "aot_eager",
                 "--threads", "1"]) == 0
    assert compile_calls == ["aot_eager", "aot_eager"]
    assert "relative L2" in capsys.readouterr().out
    with pytest.raises(ValueError, match="unknown torch.compile backend"):
        evaluate(run, data, compile="no-such-backend")


@pytest.mark.e2e
def test_train_command_line_passes_compile(tmp_path, data, compile_calls):
    assert main(["train", "fno", "--data", str(data), "--out", str(tmp_path / "run"),
                 "--preset", "burgers", "--epochs", "1", "--window", "1", "--batch-size", "4",
                 "--model-option", "width=8", "--model-option", "depth=1",
                 "--model-option", "modes=[4]", "--compile", "aot_eager", "--threads", "1",
                 "--no-progress"]) == 0
    assert compile_calls == ["aot_eager"]  # no test split: the training model only
    record = json.loads((tmp_path / "run" / "config.json").read_text())
    assert record["train_config"]["compile"] == "aot_eager"
