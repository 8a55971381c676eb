"""Training recipes (``--recipe paper``), the options they add (optimiser, loss, normalisation,
OneCycle factors), the papers' pooled rollout error and the best epoch of a run."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from ssmpde.cli import main
from ssmpde.data import load_dataset
from ssmpde.generation import generate
from ssmpde.surrogates.checkpoint import normalizers_of, read_record
from ssmpde.surrogates.datasets import Normalizer
from ssmpde.surrogates.recipes import get_recipe, list_recipes, resolve_recipe
from ssmpde.surrogates.train import TrainConfig, evaluate, operator_loss, train

DOCS = Path(__file__).resolve().parents[2] / "docs" / "models" / "training.md"
TINY_LAMO = dict(width=8, depth=1, state_size=4, mlp_ratio=1)
#: The fields the brief of a recipe covers: every one a paper gives is set.
RECIPE_FIELDS = {"optimizer", "lr", "schedule", "epochs", "batch_size", "weight_decay",
                 "max_grad_norm", "loss", "normalization", "noise_std"}


@pytest.fixture(scope="module")
def darcy(tmp_path_factory):
    path = tmp_path_factory.mktemp("recipes") / "darcy.nc"
    generate("darcy", num_samples=6, seed=0, out=path, resolution=17, simulation_resolution=33,
             progress=False)
    return path


@pytest.fixture(scope="module")
def ks(tmp_path_factory):
    path = tmp_path_factory.mktemp("recipes") / "ks.nc"
    generate("kuramoto-sivashinsky", num_samples=4, seed=0, out=path, progress=False,
             resolution=32, simulation_resolution=64, domain_length=22.0, viscosity=1.0,
             final_time=1.0, record_interval=0.25, time_step=0.05)
    return path


@pytest.fixture(scope="module")
def ks_viscous(tmp_path_factory):
    """KS whose one viscosity, 0.075, is not a binary fraction: over three training samples
    of 32 points its raw-value variance was a rounding residue, not zero."""
    path = tmp_path_factory.mktemp("recipes") / "ks_viscous.nc"
    generate("kuramoto-sivashinsky", num_samples=4, seed=0, out=path, progress=False,
             resolution=32, simulation_resolution=64, domain_length=22.0, viscosity=0.075,
             final_time=1.0, record_interval=0.25, time_step=0.05)
    return path


def _resolved(model, variant):
    config = TrainConfig.recipe(model, "paper", variant)
    fields = dict(resolve_recipe(model, "paper", variant=variant).fields)
    assert {key: getattr(config, key) for key in fields} == fields
    return fields


# ---------------------------------------------------------------------------------------
# Each model's recipe sets every field its paper (or release) gives.
# ---------------------------------------------------------------------------------------
def test_geomano_paper_recipe_sets_table_4_and_transolvers_fields():
    darcy, ns = _resolved("geomano", "darcy"), _resolved("geomano", "navier-stokes")
    common = dict(optimizer="adamw", lr=3e-4, schedule="onecycle", div_factor=25.0,
                  final_div_factor=1e4, pct_start=0.3, epochs=500, weight_decay=1e-5,
                  loss="relative-l2", noise_std=0.0)
    assert darcy == {**common, "batch_size": 4, "max_grad_norm": 0.025,
                     "normalization": "gaussian", "gradient_loss_weight": 0.1}
    assert ns == {**common, "batch_size": 2, "max_grad_norm": 0.0, "normalization": "none",
                  "gradient_loss_weight": 0.0, "window": 10, "horizon": 10,
                  "mode": "teacher-forcing"}
    assert RECIPE_FIELDS <= set(darcy) and RECIPE_FIELDS <= set(ns)


def test_lamo_paper_recipe_sets_table_6_and_the_released_scripts_fields():
    darcy, ns = _resolved("lamo", "darcy"), _resolved("lamo", "navier-stokes")
    common = dict(optimizer="adamw", lr=5e-4, schedule="onecycle", div_factor=25.0,
                  final_div_factor=1e4, pct_start=0.3, epochs=500, loss="relative-l2",
                  noise_std=0.0)
    assert darcy == {**common, "batch_size": 4, "weight_decay": 1e-5, "max_grad_norm": 0.025,
                     "normalization": "gaussian", "gradient_loss_weight": 0.1}
    assert ns == {**common, "batch_size": 2, "weight_decay": 0.05, "max_grad_norm": 0.0,
                  "normalization": "none", "gradient_loss_weight": 0.0, "window": 10,
                  "horizon": 10, "mode": "teacher-forcing"}
    assert RECIPE_FIELDS <= set(darcy) and RECIPE_FIELDS <= set(ns)


def test_mno_paper_recipe_is_each_backbones_release():
    common = dict(loss="mse", schedule="onecycle", batch_size=8, gradient_loss_weight=0.0,
                  noise_std=0.0)
    assert _resolved("mno", "galerkin") == {
        **common, "optimizer": "adam", "lr": 1e-3, "weight_decay": 0.0, "div_factor": 1e4,
        "final_div_factor": 1e4, "pct_start": 0.3, "epochs": 100, "max_grad_norm": 0.999,
        "normalization": "none"}
    assert _resolved("mno", "gnot") == {
        **common, "optimizer": "adamw", "lr": 1e-3, "weight_decay": 5e-6, "div_factor": 1e4,
        "final_div_factor": 1e4, "pct_start": 0.2, "epochs": 100, "max_grad_norm": 1000.0,
        "normalization": "none"}
    assert _resolved("mno", "oformer") == {
        **common, "optimizer": "adam", "lr": 1e-4, "weight_decay": 0.0, "div_factor": 1e2,
        "final_div_factor": 1e5, "pct_start": 0.2, "epochs": 178, "max_grad_norm": 0.0,
        "normalization": "gaussian"}
    for backbone in ("galerkin", "gnot", "oformer"):
        assert RECIPE_FIELDS <= set(_resolved("mno", backbone))


def test_ssno_paper_recipe_sets_appendix_e_and_leaves_what_the_paper_omits():
    common = dict(optimizer="adamw", lr=1e-3, weight_decay=1e-4, schedule="cosine", epochs=500,
                  loss="relative-l2", normalization="range", noise_std=0.001,
                  mode="teacher-forcing")
    for problem in ("kuramoto-sivashinsky", "navier-stokes", "euler"):
        assert _resolved("ssno", problem) == common
    assert _resolved("ssno", "burgers") == {**common, "noise_std": 0.005}
    # Not given by the paper: not part of the recipe (the defaults, or the caller's, apply).
    assert RECIPE_FIELDS - set(common) == {"batch_size", "max_grad_norm"}
    config = TrainConfig.recipe("ssno", "paper:kuramoto-sivashinsky")
    assert (config.batch_size, config.max_grad_norm) == (TrainConfig().batch_size,
                                                         TrainConfig().max_grad_norm)


def test_the_docs_tables_are_the_registry():
    # docs/models/training.md: one table per model, a column per variant, "—" for a field
    # the recipe leaves alone.
    text = DOCS.read_text()
    models = {"GeoMaNO": "geomano", "LaMO": "lamo", "MNO": "mno", "SS-NO": "ssno"}
    assert sorted(models.values()) == [m for m, _ in list_recipes()]
    for title, model in models.items():
        section = text.split(f"\n### {title}\n", 1)[1].split("\n## ", 1)[0].split("\n### ")[0]
        rows = [[c.strip() for c in line.strip().strip("|").split("|")]
                for line in section.splitlines() if line.startswith("|")]
        header, body = rows[0], rows[2:]
        variants = header[1:-1]
        assert variants == list(get_recipe(model, "paper").variants), model
        recipe = {v: dict(resolve_recipe(model, "paper", variant=v).fields) for v in variants}
        shown = {v: {} for v in variants}
        for row in body:
            for variant, cell in zip(variants, row[1:-1]):
                if cell != "—":
                    shown[variant][row[0]] = cell
        for variant in variants:
            expected = recipe[variant]
            assert set(shown[variant]) == set(expected), (model, variant)
            for key, cell in shown[variant].items():
                value = expected[key]
                if isinstance(value, str):
                    assert cell == value, (model, variant, key)
                else:
                    assert float(cell) == pytest.approx(value), (model, variant, key)


def test_recipe_names_and_variants_resolve_or_fail_in_one_line():
    assert resolve_recipe("lamo", "paper:darcy").variant == "darcy"
    assert resolve_recipe("lamo", "paper", variant="darcy").fields["batch_size"] == 4
    for model, recipe, message in (
            ("fno", "paper", "model 'fno' has no training recipe"),
            ("lamo", "papr", "unknown recipe of lamo 'papr'. Did you mean 'paper'?"),
            ("lamo", "paper:burgers", "covers the problems darcy, navier-stokes; not "
                                      "'burgers'"),
            ("lamo", "paper", "depends on the problem"),
            ("mno", "paper:fourier", "covers the backbones galerkin, gnot, oformer"),
            ("lamo", "paper:", "names no variant")):
        with pytest.raises(ValueError, match=re.escape(message)) as error:
            resolve_recipe(model, recipe)
        assert "\n" not in str(error.value)


def test_explicit_options_win_over_the_recipe():
    config = TrainConfig.recipe("lamo", "paper", "darcy", lr=1e-3, epochs=3)
    assert (config.lr, config.epochs, config.weight_decay, config.batch_size) == \
        (1e-3, 3, 1e-5, 4)


def test_new_options_default_to_the_behaviour_before_recipes_and_are_checked():
    config = TrainConfig()
    assert (config.optimizer, config.loss, config.normalization) == \
        ("adamw", "relative-l2", "gaussian")
    assert (config.div_factor, config.final_div_factor, config.pct_start) == (25.0, 1e4, 0.3)
    for options, message in ((dict(optimizer="sgd"), "optimizer must be one of"),
                             (dict(loss="l1"), "loss must be one of"),
                             (dict(normalization="minmax"), "normalization must be one of"),
                             (dict(div_factor=0.0), "div_factor must be a finite positive"),
                             (dict(pct_start=1.0), "pct_start must be below 1"),
                             (dict(loss="mse", target="correction", coarse="2x1"),
                              "loss='mse' is for surrogates")):
        with pytest.raises(ValueError, match=re.escape(message)):
            TrainConfig(**options)


# ---------------------------------------------------------------------------------------
# The command line: the recipe resolved from the data, explicit options winning.
# ---------------------------------------------------------------------------------------
def test_cli_recipe_reads_the_problem_off_the_data_and_flags_win(darcy, tmp_path, capsys):
    table = tmp_path / "train.toml"
    table.write_text("[train]\nweight_decay = 0.2\n")
    run = tmp_path / "run"
    assert main(["train", "lamo", "--data", str(darcy), "--preset", "small", "--recipe",
                 "paper", "--config", str(table), "--epochs", "2", "--lr", "1e-3",
                 "--num-test", "2", "--out", str(run),
                 *[f"--model-option={k}={v}" for k, v in TINY_LAMO.items()]]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("recipe lamo paper"))
    assert line.startswith("recipe lamo paper (darcy): optimizer='adamw', lr=0.001 (recipe "
                           "0.0005), epochs=2 (recipe 500)")
    assert "weight_decay=0.2 (recipe 1e-05)" in line and "batch_size=4," in line
    record = read_record(run / "config.json")
    used = record["train_config"]
    assert (used["lr"], used["epochs"], used["weight_decay"]) == (1e-3, 2, 0.2)  # explicit
    assert (used["batch_size"], used["max_grad_norm"], used["gradient_loss_weight"]) == \
        (4, 0.025, 0.1)  # the recipe's
    assert record["recipe"]["name"] == "paper" and record["recipe"]["variant"] == "darcy"
    assert record["recipe"]["fields"]["lr"] == 5e-4  # the recipe as published
    # Every epoch's line carries the best epoch so far by the pooled error.
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    best = min(lines, key=lambda m: m["test_pooled_rel_l2"])
    assert lines[-1]["best_epoch"] == best["epoch"]
    assert lines[-1]["best_test_pooled_rel_l2"] == best["test_pooled_rel_l2"]
    assert all(m["test_pooled_rel_l2"] == m["test_rel_l2"] for m in lines)  # one frame


@pytest.mark.parametrize("model, recipe, message", [
    ("fno", "paper", "model 'fno' has no training recipe"),
    ("lamo", "paperr", "Did you mean 'paper'?"),
    ("lamo", "paper:burgers", "not 'burgers'"),
    ("ssno", "paper", "covers the problems kuramoto-sivashinsky, navier-stokes, euler, "
                      "burgers; not 'darcy'")])
def test_cli_unknown_recipe_is_one_line_and_exit_2(darcy, tmp_path, capsys, model, recipe,
                                                   message):
    status = main(["train", model, "--data", str(darcy), "--recipe", recipe, "--no-progress",
                   "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.count("\n") == 1 and err.startswith("ssmpde: error: ") and message in err
    assert not (tmp_path / "run").exists()


def test_the_variant_comes_from_the_data_or_the_model_config(darcy, ks, tmp_path):
    from ssmpde.surrogates.train import _recipe_config

    config, resolved, explicit = _recipe_config("lamo", "paper", {"epochs": 1}, darcy, None,
                                                None)
    assert resolved.variant == "darcy" and explicit == {"epochs": 1} and config.epochs == 1
    # A TrainConfig's non-default fields are the caller's options.
    config, _, explicit = _recipe_config("lamo", "paper", TrainConfig(epochs=7), darcy, None,
                                         None)
    assert explicit == {"epochs": 7} and config.lr == 5e-4
    # MNO: by backbone, from the preset and the options (the data are not read).
    for preset, overrides, backbone in (("gnot", {}, "gnot"), (None, {}, "galerkin"),
                                        ("galerkin", {"backbone": "oformer"}, "oformer")):
        _, resolved, _ = _recipe_config("mno", "paper", None, tmp_path / "absent.nc", preset,
                                        overrides)
        assert resolved.variant == backbone
    # Data of a problem the recipe does not cover: named in the error, and a variant named
    # by the caller is followed.
    with pytest.raises(ValueError, match=r"not 'kuramoto-sivashinsky'. Name the one to follow: "
                                         r"--recipe paper:darcy"):
        _recipe_config("lamo", "paper", None, ks, None, None)
    assert _recipe_config("lamo", "paper:darcy", None, ks, None, None)[1].variant == "darcy"


# ---------------------------------------------------------------------------------------
# The options a recipe sets, each trained for real.
# ---------------------------------------------------------------------------------------
def test_range_normalisation_trains_and_maps_the_training_data_onto_minus_one_to_one(
        ks, tmp_path):
    run = tmp_path / "run"
    metrics = train("lamo", ks, out=run, preset="1d",
                    model_overrides=dict(TINY_LAMO, grid=(32,)),
                    config=TrainConfig(epochs=1, batch_size=2, window=2, horizon=2, num_test=1,
                                       normalization="range", schedule="cosine",
                                       noise_std=0.001),
                    progress=False)
    assert np.isfinite(metrics["train_loss"]) and np.isfinite(metrics["test_pooled_rel_l2"])
    record = read_record(run / "config.json")
    fields = normalizers_of(record)["fields"]
    u = load_dataset(ks)["u"].values[:3]  # the training split
    assert fields.mean == pytest.approx([(u.max() + u.min()) / 2], rel=1e-6)
    assert fields.std == pytest.approx([(u.max() - u.min()) / 2], rel=1e-6)
    x = torch.from_numpy(u.reshape(-1, 1, 32)).double()
    encoded = fields.encode(x)
    assert float(encoded.min()) == pytest.approx(-1.0, abs=1e-6)
    assert float(encoded.max()) == pytest.approx(1.0, abs=1e-6)
    torch.testing.assert_close(fields.decode(encoded), x)
    # The pooled rollout error of evaluate is one norm over the whole predicted horizon.
    result = evaluate(run, ks, out=tmp_path / "predicted.nc")
    predicted = load_dataset(tmp_path / "predicted.nc")["u"].values
    truth = load_dataset(ks)["u"].values[:, 2:]
    by_hand = [np.sqrt(((p - t) ** 2).sum() / (t ** 2).sum()) for p, t in zip(predicted, truth)]
    np.testing.assert_allclose(result["pooled_rel_l2_per_sample"], by_hand, rtol=1e-5)
    per_frame = [np.mean([np.linalg.norm(p[k] - t[k]) / np.linalg.norm(t[k])
                          for k in range(len(t))]) for p, t in zip(predicted, truth)]
    np.testing.assert_allclose(result["rel_l2_per_sample"], per_frame, rtol=1e-5)
    assert result["pooled_rel_l2"] == pytest.approx(np.mean(by_hand), rel=1e-5)
    assert result["pooled_rel_l2"] != pytest.approx(result["rel_l2"], rel=1e-3)
    assert (result["epoch"], result["best_epoch"]) == (1, 1)


@pytest.mark.parametrize("kind", ["gaussian", "range"])
@pytest.mark.parametrize("value, samples", [(0.075, 3), (0.1, 6), (0.3, 3)])
def test_a_constant_channel_is_constant_whatever_the_rounding(kind, value, samples):
    # Regression: sq/n - mean**2 of these raw values is ~1e-17, not 0, so the channel (std
    # ~1e-9) was not found constant; `range` kept its exact zero half-range and encoded NaN.
    arrays = [np.full((1, 32), value)] * samples
    fitted = Normalizer.fit(arrays, kind=kind)
    assert (fitted.mean, fitted.std) == ([value], [1.0])
    assert torch.equal(fitted.encode(torch.full((2, 1, 32), value, dtype=torch.float64)),
                       torch.zeros(2, 1, 32, dtype=torch.float64))
    with pytest.raises(ValueError, match="never change"):
        Normalizer.fit(arrays, names=["u"], kind=kind)


def test_range_normalisation_trains_with_a_constant_conditioning_channel(ks_viscous, tmp_path):
    # Regression: one viscosity (0.075) for every sample gave a NaN loss at epoch 1, batch 1
    # under `range` (SS-NO's paper recipe), whatever the model.
    run = tmp_path / "run"
    metrics = train("lamo", ks_viscous, out=run, preset="1d",
                    model_overrides=dict(TINY_LAMO, grid=(32,)),
                    config=TrainConfig(epochs=1, batch_size=2, window=2, horizon=2, num_test=1,
                                       normalization="range", noise_std=0.001),
                    progress=False)
    assert np.isfinite(metrics["train_loss"]) and np.isfinite(metrics["test_pooled_rel_l2"])
    conditioning = normalizers_of(read_record(run / "config.json"))["conditioning"]
    assert (conditioning.mean, conditioning.std) == ([0.075], [1.0])


def test_mse_loss_without_normalisation_trains_with_adam(darcy, tmp_path, monkeypatch):
    from ssmpde.surrogates import train_config

    calls = []
    mse = train_config.LOSSES["mse"]
    monkeypatch.setitem(train_config.LOSSES, "mse",
                        lambda *args: calls.append(1) or mse(*args))
    run = tmp_path / "run"
    metrics = train("lamo", darcy, out=run, preset="small",
                    model_overrides=TINY_LAMO,
                    config=TrainConfig(epochs=2, batch_size=2, num_test=2, loss="mse",
                                       normalization="none", optimizer="adam",
                                       weight_decay=0.0, div_factor=1e4, final_div_factor=1e4,
                                       gradient_loss_weight=0.0),
                    progress=False)
    assert np.isfinite(metrics["train_loss"]) and metrics["train_loss"] >= 0
    assert len(calls) == 4  # two epochs of two batches: the loss is the MSE
    record = read_record(run / "config.json")
    assert (record["train_config"]["loss"], record["train_config"]["optimizer"]) == \
        ("mse", "adam")
    normalizers = normalizers_of(record)
    for name in ("inputs", "outputs"):  # the identity, and a round trip
        assert (normalizers[name].mean, normalizers[name].std) == ([0.0], [1.0])
        x = torch.randn(2, 1, 17, 17)
        torch.testing.assert_close(normalizers[name].decode(normalizers[name].encode(x)), x)
    state = json.loads((run / "training_state.json").read_text())
    assert "betas" in state["optimizer"]["param_groups"][0]
    assert state["optimizer"]["param_groups"][0].get("decoupled_weight_decay", False) is False


def test_the_losses_by_hand():
    target = torch.tensor([[[3.0, 4.0]], [[1.0, 0.0]]])        # [batch, field, x]
    prediction = torch.tensor([[[3.0, 5.0]], [[0.0, 0.0]]])
    # MSE per sample: (0 + 1) / 2 and (1 + 0) / 2; mean over the batch 0.5.
    assert float(operator_loss(prediction, target, 0.0, "mse")) == pytest.approx(0.5)
    # Relative L2 per sample: 1/5 and 1/1; mean 0.6.
    assert float(operator_loss(prediction, target, 0.0)) == pytest.approx(0.6)


def test_normaliser_kinds_by_hand():
    arrays = [np.array([[0.0, 2.0], [5.0, 5.0]]), np.array([[4.0, 6.0], [5.0, 5.0]])]
    gaussian = Normalizer.fit(arrays)
    assert gaussian.mean == [3.0, 5.0] and gaussian.std == pytest.approx([np.sqrt(5.0), 1.0])
    ranged = Normalizer.fit(arrays, kind="range")
    assert ranged.mean == [3.0, 5.0] and ranged.std == [3.0, 1.0]  # constant: scale 1
    assert Normalizer.fit(arrays, kind="none") == Normalizer([0.0, 0.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="normalization must be one of"):
        Normalizer.fit(arrays, kind="minmax")


# ---------------------------------------------------------------------------------------
# The best epoch, next to the last one.
# ---------------------------------------------------------------------------------------
def test_best_epoch_is_reported_when_the_error_rises_and_survives_a_resume(
        darcy, tmp_path, monkeypatch):
    import ssmpde.surrogates.train as train_module

    # A scripted test error (deterministic): 0.3, then 0.5 and 0.4 after the resume. The
    # error rises in the last epochs; the best is the first, known after the resume only
    # from the run's metrics log.
    script = iter([0.3, 0.5, 0.4])

    def scripted(*args, **kwargs):
        value = next(script)
        return {"test_rel_l2": value, "test_pooled_rel_l2": value}

    monkeypatch.setattr(train_module, "_evaluate_split", scripted)
    common = dict(preset="small", model_overrides=TINY_LAMO, progress=False,
                  config=TrainConfig(epochs=3, batch_size=2, num_test=2))
    first = train("lamo", darcy, out=tmp_path / "run", time_limit=0, **common)
    assert (first["epoch"], first["best_epoch"], first["best_test_pooled_rel_l2"]) == \
        (1, 1, 0.3)
    last = train("lamo", darcy, out=tmp_path / "run", resume=True, **common)
    assert (last["epoch"], last["test_pooled_rel_l2"]) == (3, 0.4)
    assert (last["best_epoch"], last["best_test_pooled_rel_l2"]) == (1, 0.3)
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text()
             .splitlines()]
    assert [m["best_epoch"] for m in lines] == [1, 1, 1]
    monkeypatch.undo()
    result = evaluate(tmp_path / "run", darcy)
    assert (result["epoch"], result["best_epoch"], result["best_test_pooled_rel_l2"]) == \
        (3, 1, 0.3)
