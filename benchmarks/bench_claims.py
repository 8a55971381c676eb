"""The papers' central claims at CPU scale: each claim's arms trained alike, over several seeds.

Each SSM paper makes a claim that is a *comparison* with a large stated effect (SS-NO: learnable
damping matters most at a small state and low viscosity; MNO: S6 beats the Galerkin
Transformer's attention; LaMO and GeoMaNO: beat the FNO on Darcy; LaMO: the multidirectional
scan matters). A comparison survives scaling down when both sides get the same data, the same
number of epochs and the same recipe, so each claim here trains its arms

* on one dataset made by ssmpde's own generators (equation, preset, sizes and seeds are
  recorded), with a test set of another seed;
* for the same epochs, with the paper's recipe (``recipe="paper"``,
  :mod:`ssmpde.surrogates.recipes`), the same for every arm of the claim: a model-against-FNO
  claim trains its FNO with the SSM paper's recipe, field by field;
* once per training seed (at least three), the seed setting the initialisation and the data
  order; a model-against-FNO claim gets an FNO whose width is chosen to match the SSM arm's
  parameter count.

The error of an arm is the paper's metric on the test set: the relative L2 per sample, then
the mean over samples (for rollouts: pooled over all output frames and space). The verdict of a
claimed ordering "A is better than B" (:func:`verdict`): *reproduced* when A's mean error is
lower and the gap exceeds twice the combined standard deviation
``2 sqrt(std_A^2 + std_B^2)`` (sample standard deviations over the seeds); *not reproduced*
when B is better by more than that; otherwise *unresolved at this scale*, with that threshold
as the smallest effect this setting could resolve. A claim with several orderings is
reproduced when all are, not reproduced when any is reversed, and unresolved otherwise.

Wall time of every run is recorded beside the error (never instead of it), and every epoch's
test error is kept, so ``docs/images/claims_<claim>.png`` shows whether the curves had
flattened. Results are written after every run and a rerun skips the runs already in the file
(same settings), so an interrupted run loses at most one training.

    python -m benchmarks.bench_claims                          # every claim: hours of one core
    python -m benchmarks.bench_claims --claims ssno-damping    # one claim
    python -m benchmarks.bench_claims --quick --out /tmp/c.json  # tiny sizes, a minute
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, header, table_row, when, write

REPRODUCED, NOT_REPRODUCED, UNRESOLVED = "reproduced", "not reproduced", "unresolved at this scale"
FIGURES = Path(__file__).resolve().parents[1] / "docs" / "images"


@dataclass(frozen=True)
class Arm:
    """One side of a claim: a model, its preset and options (``match_parameters_of``: an FNO
    whose width is set so that its parameter count is closest to that arm's)."""

    name: str
    model: str
    preset: str | None = None
    options: dict = field(default_factory=dict)
    match_parameters_of: str | None = None


@dataclass(frozen=True)
class Claim:
    """A paper's comparison: its data, training and arms, and the orderings it claims
    (``orderings``: pairs (better, worse) of arm names)."""

    key: str
    paper: str
    statement: str
    equation: str
    data: dict
    train_samples: int
    test_samples: int
    train: dict
    epochs: int
    arms: tuple[Arm, ...]
    orderings: tuple[tuple[str, str], ...]
    paper_errors: dict = field(default_factory=dict)
    recipe: str | None = None
    #: Whose recipe every arm trains with (a model-against-FNO claim: the SSM paper's, for the
    #: FNO too); None: each arm its own model's.
    recipe_model: str | None = None


# The sizes that fit one session (measured 2026-11-29 on 2 shared cores: SS-NO 12 runs of 7-8
# minutes, MNO 6 runs of 5-14, each Darcy model-against-FNO claim 6 runs of 1-10); --quick
# shrinks them all.
DARCY = dict(preset="fno", resolution=43, simulation_resolution=85)
KS32 = dict(preset="lpsda-nu0.075", resolution=32, simulation_resolution=256)
CLAIMS = (
    Claim("ssno-damping", "SS-NO (Table 2, KS ν 0.075, state 16)",
          "learnable damping matters most at a small state and low viscosity: All 0.0115, "
          "Damping only 0.0131, Frequency only 0.0198, Fixed 0.0227",
          "kuramoto-sivashinsky", KS32, 64, 32, dict(window=4, batch_size=16), 16,
          (Arm("all", "ssno", "ks", dict(state_size=16)),
           Arm("damping-only", "ssno", "ks", dict(state_size=16, learn_frequency=False)),
           Arm("frequency-only", "ssno", "ks", dict(state_size=16, learn_damping=False)),
           Arm("fixed", "ssno", "ks", dict(state_size=16, learn_damping=False,
                                            learn_frequency=False))),
          (("all", "fixed"), ("damping-only", "frequency-only")),
          {"all": 0.0115, "damping-only": 0.0131, "frequency-only": 0.0198, "fixed": 0.0227},
          recipe="paper"),
    Claim("mno-galerkin", "MNO (Table 1, Darcy)",
          "S6 in place of attention improves the Galerkin Transformer most: 0.1261 -> 0.0286",
          "darcy", DARCY, 128, 50, {}, 20,
          (Arm("mamba", "mno", "galerkin", dict(mixer="mamba", width=64)),
           Arm("attention", "mno", "galerkin", dict(mixer="attention", width=64))),
          (("mamba", "attention"),), {"mamba": 0.0286, "attention": 0.1261}, recipe="paper"),
    Claim("lamo-vs-fno", "LaMO (Table 2, Darcy)", "LaMO beats the FNO on Darcy: 0.0039 "
          "against 0.0108", "darcy", DARCY, 128, 50, {}, 20,
          (Arm("lamo", "lamo", "darcy", dict(width=32, depth=4)),
           Arm("fno-matched", "fno", "darcy", {}, match_parameters_of="lamo")),
          (("lamo", "fno-matched"),), {"lamo": 0.0039, "fno-matched": 0.0108},
          recipe="paper", recipe_model="lamo"),
    Claim("lamo-directions", "LaMO (Table 7, Darcy)", "the multidirectional scan matters: "
          "unidirectional 0.0064, multidirectional 0.0039", "darcy", DARCY, 128, 50, {}, 20,
          (Arm("multidirectional", "lamo", "darcy", dict(width=32, depth=4, directions=4)),
           Arm("unidirectional", "lamo", "darcy", dict(width=32, depth=4, directions=1))),
          (("multidirectional", "unidirectional"),),
          {"multidirectional": 0.0039, "unidirectional": 0.0064}, recipe="paper"),
    Claim("geomano-vs-fno", "GeoMaNO (Table 2, Darcy)", "GeoMaNO beats the FNO on Darcy: "
          "0.0036 against 0.0108", "darcy", DARCY, 128, 50, {}, 20,
          (Arm("geomano", "geomano", "darcy", dict(width=32, depth=4)),
           Arm("fno-matched", "fno", "darcy", {}, match_parameters_of="geomano")),
          (("geomano", "fno-matched"),), {"geomano": 0.0036, "fno-matched": 0.0108},
          recipe="paper", recipe_model="geomano"),
)
#: --quick: a few samples, two epochs, tiny grids (the machinery, not the science).
QUICK = dict(train_samples=6, test_samples=2, epochs=2,
             darcy=dict(resolution=9, simulation_resolution=17),
             ks=dict(resolution=16, simulation_resolution=32, final_time=1.0))


# -- statistics and verdicts -------------------------------------------------------------------
def summary(errors: list[float]) -> dict:
    """Mean and sample standard deviation (0 for a single seed) of one arm's errors."""
    mean = statistics.fmean(errors)
    return {"mean": mean, "std": statistics.stdev(errors) if len(errors) > 1 else 0.0}


def verdict(better: dict, worse: dict) -> dict:
    """The verdict on "``better`` has the lower error than ``worse``" (each ``{"mean",
    "std"}``): see the module docstring. Returns the verdict, the gap (worse − better mean),
    the ratio (worse / better mean) and ``resolvable``, the smallest gap this noise resolves."""
    gap = worse["mean"] - better["mean"]
    resolvable = 2.0 * math.hypot(better["std"], worse["std"])
    outcome = (REPRODUCED if gap > resolvable else NOT_REPRODUCED if -gap > resolvable
               else UNRESOLVED)
    ratio = worse["mean"] / better["mean"] if better["mean"] > 0 else math.inf
    return {"verdict": outcome, "gap": gap, "ratio": ratio, "resolvable": resolvable}


def claim_verdict(orderings: list[dict]) -> str:
    """A claim's verdict from those of its orderings."""
    verdicts = [o["verdict"] for o in orderings]
    if verdicts and all(v == REPRODUCED for v in verdicts):
        return REPRODUCED
    return NOT_REPRODUCED if NOT_REPRODUCED in verdicts else UNRESOLVED


def judge(entry: dict) -> dict:
    """Fill ``entry`` (one claim of the result file) with each arm's mean and std, each
    ordering's verdict and the claim's; arms without errors yet are left out."""
    arms = {arm["name"]: arm for arm in entry["arms"]}
    for arm in arms.values():
        errors = [run["error"] for run in arm["runs"]]
        arm["errors"] = errors
        arm["seconds"] = [run["seconds"] for run in arm["runs"]]
        arm.update(summary(errors) if errors else {"mean": None, "std": None})
    entry["orderings"] = []
    for better, worse in entry["claimed_orderings"]:
        if arms[better]["errors"] and arms[worse]["errors"]:
            entry["orderings"].append({"better": better, "worse": worse,
                                       **verdict(arms[better], arms[worse])})
    # A rollout claim's curves hold the one-step (teacher-forced) test error of every epoch;
    # its last value beside the paper's rollout metric tells a saturated rollout from an
    # untrained model. (For an operator task the two are the same number.)
    rollout = any(run.get("curve") and abs(run["curve"][-1] - run["error"]) > 1e-12
                  for arm in arms.values() for run in arm["runs"])
    entry["one_step_orderings"] = []
    for arm in arms.values():
        steps = [run["curve"][-1] for run in arm["runs"] if run.get("curve")]
        arm["one_step"] = summary(steps) if rollout and steps else None
    for better, worse in entry["claimed_orderings"]:
        if arms[better].get("one_step") and arms[worse].get("one_step"):
            entry["one_step_orderings"].append(
                {"better": better, "worse": worse,
                 **verdict(arms[better]["one_step"], arms[worse]["one_step"])})
    complete = all(len(a["errors"]) == len(entry["seeds"]) for a in arms.values())
    entry["verdict"] = (claim_verdict(entry["orderings"]) if complete
                        else "incomplete: runs missing")
    return entry


# -- data, parameter matching, runs -------------------------------------------------------------
def _datasets(claim: Claim, sizes: dict, workdir: Path, data_seed: int) -> tuple[Path, Path, dict]:
    """The claim's training and test files (generated once; test from another seed)."""
    from ssmpde.generation import generate

    options = dict(claim.data, **sizes)
    recorded = {"equation": claim.equation, "options": options, "train_seed": data_seed,
                "test_seed": data_seed + 1, "train_samples": claim.train_samples,
                "test_samples": claim.test_samples}
    paths = []
    for seed, samples, name in ((data_seed, claim.train_samples, "train"),
                                (data_seed + 1, claim.test_samples, "test")):
        path = workdir / f"{claim.equation}-{name}-{samples}-seed{seed}.nc"
        if not path.exists():
            generate(claim.equation, num_samples=samples, seed=seed, out=path, progress=False,
                     **options).close()
        paths.append(path)
    return paths[0], paths[1], recorded


def _parameters(model: str, preset: str | None, options: dict, data: Path, window: int) -> int:
    """The parameter count of ``model`` fitted to ``data``'s task, as training builds it."""
    from ssmpde.data import open_dataset
    from ssmpde.surrogates import build_model
    from ssmpde.surrogates.base import config_from_dict, parameter_count
    from ssmpde.surrogates.datasets import infer_task

    with open_dataset(data) as ds:
        task = infer_task(ds, window=window)
    config = config_from_dict(model, options, preset=preset, task=task)
    return parameter_count(build_model(model, **vars(config)))


def matched_width(target: int, arm: Arm, data: Path, window: int) -> tuple[int, int]:
    """The FNO width (4..128) whose parameter count is closest to ``target``, and that count."""
    best = None
    for width in range(4, 129, 2):
        count = _parameters(arm.model, arm.preset, {**arm.options, "width": width}, data,
                            window)
        if best is None or abs(count - target) < abs(best[1] - target):
            best = (width, count)
        if count > target:
            break
    return best


def _curve(run: Path) -> list[float]:
    """The test error of every epoch of a run (its metrics log)."""
    from ssmpde.surrogates.checkpoint import METRICS

    lines = (run / METRICS).read_text().splitlines()
    metrics = [json.loads(line) for line in lines if line.strip()]
    key = "test_pooled_rel_l2" if "test_pooled_rel_l2" in metrics[-1] else "test_rel_l2"
    return [m[key] for m in metrics if key in m]


def train_arm(claim: Claim, arm: Arm, options: dict, seed: int, epochs: int, data: Path,
              test: Path, runs: Path) -> dict:
    """One training of one arm, evaluated on the test set: the run's row of the result."""
    from ssmpde.surrogates.train import TrainConfig, evaluate, train

    run = runs / f"{claim.key}-{arm.name}-seed{seed}"
    shutil.rmtree(run, ignore_errors=True)
    config = dict(claim.train, epochs=epochs, seed=seed)
    recipe = {"recipe": claim.recipe} if claim.recipe else {}
    if claim.recipe and claim.recipe_model not in (None, arm.model):
        # Equal training: the other model gets the SSM paper's recipe, field by field.
        from ssmpde.surrogates.recipes import parse_recipe, resolve_recipe

        name, variant = parse_recipe(claim.recipe)
        fields = resolve_recipe(claim.recipe_model, name, variant=variant or claim.equation)
        config, recipe = {**fields.fields, **config}, {}
    began = time.perf_counter()
    train(arm.model, data, test_data=test, out=run, preset=arm.preset, model_overrides=options,
          config=TrainConfig(**config), progress=False, **recipe)
    seconds = time.perf_counter() - began
    scores = evaluate(run, test)
    error = scores.get("pooled_rel_l2", scores["rel_l2"])
    return {"seed": seed, "error": error, "per_frame_rel_l2": scores["rel_l2"],
            "seconds": seconds, "curve": _curve(run)}


# -- the figure and the table ------------------------------------------------------------------
def figure(entry: dict, path: Path) -> Path:
    """Each arm's test error against the epoch: the mean over seeds, shaded ± one std."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6.0, 3.6), layout="constrained")
    for arm in entry["arms"]:
        curves = [run["curve"] for run in arm["runs"] if run["curve"]]
        if not curves:
            continue
        length = min(map(len, curves))
        values = np.array([c[:length] for c in curves])
        epochs = np.arange(1, length + 1)
        mean, std = values.mean(0), values.std(0, ddof=1) if len(values) > 1 else 0 * values[0]
        ax.plot(epochs, mean, label=f"{arm['name']} ({len(curves)} seeds)")
        ax.fill_between(epochs, mean - std, mean + std, alpha=0.2)
    ax.set_yscale("log")
    ax.set_xlabel("epoch")
    rollout = any(arm.get("one_step") for arm in entry["arms"])
    ax.set_ylabel("test rel. L2, one step (teacher-forced)" if rollout else "test relative L2",
                  fontsize=8 if rollout else None)
    ax.set_title(f"{entry['paper']}: {entry['claim']}", fontsize=9, wrap=True)
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _recipe(setting: dict, every_arm: str) -> str:
    """The recipe of a claim's setting in words; ``every_arm`` marks one that trained every
    arm with one model's recipe."""
    recipe = setting["recipe"] or "ssmpde defaults"
    return f"{setting['recipe_of']}'s {recipe}{every_arm}" if setting.get("recipe_of") else recipe


def late_fall(curves: list[list[float]]) -> float | None:
    """How much the test error still fell over the last quarter of the epochs: the mean over
    seeds of (error a quarter of the epochs before the end − the last error) / the last
    error (None without curves of at least 4 epochs). Near 0: the curve has flattened."""
    falls = [(c[-1 - len(c) // 4] - c[-1]) / c[-1] for c in curves if len(c) >= 4 and c[-1] > 0]
    return statistics.fmean(falls) if falls else None


def details(result: dict) -> str:
    """The claims as Markdown: per claim its setting, each arm's error (mean ± std over the
    seeds) beside the paper's, the orderings' ratios and verdicts."""
    out = []
    for entry in result["claims"]:
        setting = entry["setting"]
        recipe = _recipe(setting, " (every arm)")
        out.append(f"**{entry['paper']}** — {entry['statement']}. Setting: "
                   f"{setting['data']['equation']} {setting['data']['options']}, "
                   f"{setting['data']['train_samples']} training / "
                   f"{setting['data']['test_samples']} test samples, {setting['epochs']} "
                   f"epochs, recipe {recipe}, seeds "
                   f"{entry['seeds']}. Verdict: **{entry['verdict']}**.\n")
        out.append(f"![{entry['claim']}: test error against the epoch, mean ± std over the "
                   f"seeds](images/claims_{entry['claim']}.png)\n")
        out.append("| arm | parameters | error (mean ± std) | paper | last quarter of the "
                   "epochs: fall of the test error | seconds per run |")
        out.append("|---|---|---|---|---|---|")
        for arm in entry["arms"]:
            if arm["mean"] is None:
                continue
            paper = entry["paper_errors"].get(arm["name"])
            fall = late_fall([run["curve"] for run in arm["runs"]])
            out.append(f"| {arm['name']} | {arm['parameters']:,} | {arm['mean']:.4f} ± "
                       f"{arm['std']:.4f} | {paper if paper is not None else '–'} | "
                       f"{'–' if fall is None else f'{100 * fall:.1f} %'} | "
                       f"{statistics.fmean(arm['seconds']):.0f} |")
        for o in entry["orderings"]:
            out.append(f"\n{o['better']} < {o['worse']}: ratio {o['ratio']:.2f}, gap "
                       f"{o['gap']:.4f}, resolvable {o['resolvable']:.4f}: {o['verdict']}")
        for o in entry.get("one_step_orderings", []):
            out.append(f"\nOne step (teacher-forced test error, not the paper's metric), "
                       f"{o['better']} < {o['worse']}: ratio {o['ratio']:.2f}, gap "
                       f"{o['gap']:.4f}, resolvable {o['resolvable']:.4f}: {o['verdict']}")
        out.append("")
    return "\n".join(out)


def readme_table(result: dict) -> list[str]:
    """The README's table of the claims: a row per claim with its setting, each arm's error
    (mean ± std over the seeds, the paper's beside it), each claimed ordering's ratio and
    smallest resolvable gap, and the verdict."""
    out = ["| paper, claim | setting | error, mean ± std over seeds (paper) | ratio "
           "worse / better (gap; resolvable) | verdict |", "|---|---|---|---|---|"]
    for entry in result["claims"]:
        setting, data = entry["setting"], entry["setting"]["data"]
        options = data["options"]
        recipe = _recipe(setting, ", every arm")
        where = (f"{data['equation']} {options.get('resolution')} points"
                 if data["equation"] != "darcy" else f"Darcy {options.get('resolution')}²")
        arms = []
        for arm in entry["arms"]:
            if arm["mean"] is None:
                continue
            paper = entry["paper_errors"].get(arm["name"])
            one = arm.get("one_step")
            arms.append(f"{arm['name']} {arm['mean']:.4f} ± {arm['std']:.4f}"
                        + (f" ({paper})" if paper is not None else "")
                        + (f", one step {one['mean']:.4f} ± {one['std']:.4f}" if one else ""))
        ratios = [f"{o['better']} < {o['worse']}: {o['ratio']:.2f} ({o['gap']:+.4f}; "
                  f"{o['resolvable']:.4f})" for o in entry["orderings"]]
        ratios += [f"one step, {o['better']} < {o['worse']}: {o['ratio']:.2f} ({o['gap']:+.4f}; "
                   f"{o['resolvable']:.4f}; {o['verdict']})"
                   for o in entry.get("one_step_orderings", [])]
        out.append(f"| {entry['paper']}: {entry['statement'].split(':')[0]} | {where}, "
                   f"{data['train_samples']} / {data['test_samples']} samples, "
                   f"{setting['epochs']} epochs, {recipe}, {len(entry['seeds'])} seeds | "
                   f"{'; '.join(arms)} | {'; '.join(ratios)} | **{entry['verdict']}** |")
    return out


def rows(result: dict) -> list[str]:
    """One results-table row per claim."""
    out = []
    for entry in result["claims"]:
        arms = [a for a in entry["arms"] if a["mean"] is not None]
        if len(arms) < 2:
            continue
        cells = [f"{a['mean']:.4f} ± {a['std']:.4f} ({a['name']})" for a in arms]
        out.append(table_row(f"Claim at CPU scale, {entry['paper']}: {entry['statement']}",
                             cells[0], "; ".join(cells[1:]), entry["verdict"], when(result)))
    return out


# -- the command --------------------------------------------------------------------------------
def _entry(claim: Claim, seeds: list[int], epochs: int, recorded: dict) -> dict:
    return {"claim": claim.key, "paper": claim.paper, "statement": claim.statement,
            "setting": {"data": recorded, "train": claim.train, "epochs": epochs,
                        "recipe": claim.recipe, "recipe_of": claim.recipe_model},
            "seeds": seeds, "claimed_orderings": [list(o) for o in claim.orderings],
            "paper_errors": claim.paper_errors, "arms": []}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", nargs="+", choices=[c.key for c in CLAIMS],
                        default=[c.key for c in CLAIMS])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--data-seed", type=int, default=100,
                        help="seed of the training data (the test data: this + 1)")
    parser.add_argument("--epochs", type=int, help="override every claim's epochs")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (the test's)")
    parser.add_argument("--workdir", type=Path, help="data and runs (default: a temporary "
                                                     "folder, removed after)")
    parser.add_argument("--out", type=Path, default=RESULTS / "claims.json")
    parser.add_argument("--figures", type=Path, default=FIGURES)
    args = parser.parse_args(argv)
    if len(args.seeds) < (1 if args.quick else 3):
        parser.error("give at least 3 --seeds (a verdict needs a standard deviation)")
    previous = json.loads(args.out.read_text()) if args.out.exists() else {"claims": []}
    done = {e["claim"]: e for e in previous.get("claims", [])}
    result = {**header("claims"), "claims": []}
    temporary = None
    if args.workdir is None:
        temporary = tempfile.TemporaryDirectory(prefix="claims-")
        args.workdir = Path(temporary.name)
    args.workdir.mkdir(parents=True, exist_ok=True)
    try:
        for claim in (c for c in CLAIMS if c.key in args.claims):
            if args.quick:
                sizes = QUICK["ks" if claim.equation == "kuramoto-sivashinsky" else "darcy"]
                claim = _quick(claim)
            else:
                sizes = {}
            epochs = args.epochs or claim.epochs
            data, test, recorded = _datasets(claim, sizes, args.workdir, args.data_seed)
            entry = _entry(claim, args.seeds, epochs, recorded)
            old = done.get(claim.key)
            same = old is not None and old.get("setting") == entry["setting"]
            window = claim.train.get("window", 1)
            counts: dict[str, int] = {}
            for arm in claim.arms:
                options = dict(arm.options)
                if arm.match_parameters_of:
                    width, _ = matched_width(counts[arm.match_parameters_of], arm, data, window)
                    options["width"] = width
                counts[arm.name] = _parameters(arm.model, arm.preset, options, data, window)
                kept = next((a for a in old["arms"] if a["name"] == arm.name), None) \
                    if same else None
                record = {"name": arm.name, "model": arm.model, "preset": arm.preset,
                          "options": options, "parameters": counts[arm.name],
                          "runs": [r for r in (kept or {}).get("runs", [])
                                   if r["seed"] in args.seeds and kept["options"] == options]}
                entry["arms"].append(record)
            for seed in args.seeds:
                for arm, record in zip(claim.arms, entry["arms"]):
                    if any(r["seed"] == seed for r in record["runs"]):
                        continue
                    print(f"{claim.key}: {arm.name}, seed {seed}, {epochs} epochs", flush=True)
                    record["runs"].append(train_arm(claim, arm, record["options"], seed,
                                                    epochs, data, test, args.workdir))
                    _save(result, done, judge(entry), args.out)
            judge(entry)
            _save(result, done, entry, args.out)
            figure(entry, args.figures / f"claims_{claim.key}.png")
            print(details({"claims": [entry]}), flush=True)
    finally:
        if temporary is not None:
            temporary.cleanup()
    return result


def _save(result: dict, done: dict, entry: dict, out: Path) -> None:
    """Write the result with ``entry`` and every claim already in the file (others kept)."""
    done[entry["claim"]] = entry
    result["claims"] = list(done.values())
    write(result, out)


def _quick(claim: Claim) -> Claim:
    """``claim`` at the sizes of ``--quick``."""
    from dataclasses import replace

    return replace(claim, train_samples=QUICK["train_samples"],
                   test_samples=QUICK["test_samples"], epochs=QUICK["epochs"],
                   arms=tuple(replace(a, options={k: v for k, v in a.options.items()
                                                  if k not in ("width", "depth")})
                              for a in claim.arms))


if __name__ == "__main__":
    main()
