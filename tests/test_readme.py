"""The README and the model pages say what the code does: the Quick start runs as written, top
to bottom, and every parameter count they print is the count of the model they name."""

import functools
import re
import shlex
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MODEL_PAGES = sorted((ROOT / "docs" / "models").glob("*.md"))

# ---------------------------------------------------------------------------------------
# Parameter counts.
# ---------------------------------------------------------------------------------------
#: The models' names in the README's tables.
DISPLAY_NAMES = {"FNO": "fno", "GeoMaNO": "geomano", "LaMO": "lamo", "lean FNO": "lean-fno",
                 "MNO": "mno", "SS-NO": "ssno"}
#: A count with a thousands separator, e.g. 1,074,267.
COUNT = r"\d{1,3}(?:,\d{3})+"


@functools.cache
def _count(model: str, settings: tuple) -> int:
    from ssmpde.surrogates import build_model, parameter_count

    return parameter_count(build_model(model, **dict(settings)))


def _fitted(text: str) -> dict:
    """What a count says its model was fitted to: 'at 43²' (the grid), 'with 12 input
    channels'."""
    settings = {}
    grid = re.search(r"\bat (\d+)²", text)
    if grid:
        settings["grid"] = (int(grid[1]),) * 2
    channels = re.search(r"with (\d+) input channels", text)
    if channels:
        settings["in_channels"] = int(channels[1])
    return settings


def _pages() -> list[tuple[str, str, str | None]]:
    """(name, text, the model a page is about) of the README and the model pages. The
    benchmarks page is not among them: its tables are generated from the results files, and
    a count there is that of the model at the commit its row names."""
    return [(README.name, README.read_text(encoding="utf-8"), None),
            *((path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8"),
               path.stem.replace("_", "-")) for path in MODEL_PAGES)]


def _tables(text: str):
    """(header cells, [(line number, cells)]) of every Markdown table in ``text``."""
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        if lines[number].lstrip().startswith("|") and number + 1 < len(lines) \
                and re.fullmatch(r"\s*\|[-|: ]+\|\s*", lines[number + 1]):
            header = [c.strip() for c in lines[number].strip().strip("|").split("|")]
            rows = []
            number += 2
            while number < len(lines) and lines[number].lstrip().startswith("|"):
                rows.append((number + 1, [c.strip() for c in
                                          lines[number].strip().strip("|").split("|")]))
                number += 1
            yield header, rows
        number += 1


def _claims() -> list[tuple[str, int, str, str, dict]]:
    """Every parameter count printed in the README and docs/models: (file, line, count,
    model, build_model settings)."""
    claims = []
    for name, page, page_model in _pages():
        for header, rows in _tables(page):
            column = next((i for i, h in enumerate(header) if h.startswith("parameters")), None)
            if column is None:
                continue
            mixers = re.findall(r"\w+", header[column].partition("(")[2])
            for line, cells in rows:
                row = dict(zip(header, cells))
                if "backbone" in row:  # MNO's backbones against their mixers
                    model, settings = "mno", {"preset": row["backbone"],
                                              "mixer": row["mixer"]}
                elif "model" in row:
                    model, settings = DISPLAY_NAMES[row["model"]], {"preset": row["preset"]}
                else:
                    model, settings = page_model, {"preset": row["preset"].strip("`")}
                # "1,411,361 / 1,320,225 / 1,319,201" under "parameters (mamba / attention /
                # softmax)", or "297,153 (mamba)"
                for k, match in enumerate(re.finditer(rf"({COUNT})(?: \((\w+)\))?",
                                                      cells[column])):
                    extra = dict(settings, **_fitted(cells[column]))
                    if match[2] or mixers:
                        extra["mixer"] = match[2] or mixers[k]
                    claims.append((name, line, match[1], model, extra))
        for line, text in enumerate(page.splitlines(), 1):
            built = re.search(r'build_model\("([\w-]+)", preset="([\w-]+)"\).*?(' + COUNT
                              + r") parameters", text)
            if built:
                claims.append((name, line, built[3], built[1], {"preset": built[2]}))
            # The training comparisons: "| darcy: geomano vs FNO ... (…, N parameters at 43²)".
            row = re.match(r"\| ([\w-]+): (\w+) vs FNO.*?(" + COUNT + r") parameters([^)]*)\)",
                           text)
            if row:
                claims.append((name, line, row[3], row[2],
                               {"preset": row[1], **_fitted(row[4])}))
            states = re.search(r"With (\d+) and (\d+) states the `(\w+)` model has (" + COUNT
                               + r") and (" + COUNT + r") parameters", text)
            if states:
                for size, value in ((states[1], states[4]), (states[2], states[5])):
                    claims.append((name, line, value, page_model,
                                   {"preset": states[3], "state_size": int(size)}))
    return claims


def test_every_parameter_count_is_found():
    # A count written some new way must be added to _claims, not skipped silently: every
    # number with thousands separators followed by "parameters" is one of the claims.
    claimed = {(name, value) for name, _, value, _, _ in _claims()}
    for name, text, _ in _pages():
        text = " ".join(text.split())
        for match in re.finditer(rf"({COUNT})(?=[^|.]{{0,30}}?\bparameters\b)", text):
            assert (name, match[1]) in claimed, f"{name}: {match[1]} parameters is not checked"
    # the model pages hold 28 counts; the README's benchmark tables, which held as many more,
    # are generated from the results files now (docs/benchmarks.md)
    assert len(claimed) > 20


@pytest.mark.parametrize("name, line, value, model, settings", _claims(),
                         ids=lambda v: v if isinstance(v, str) else str(v))
def test_parameter_counts_are_the_models(name, line, value, model, settings):
    actual = _count(model, tuple(sorted(settings.items())))
    assert f"{actual:,}" == value, (
        f"{name}:{line} says {model} {settings} has {value} parameters; it has {actual:,} "
        "(a count of a model fitted to other data says so: 'at 43²', 'with 12 input "
        "channels')")


# ---------------------------------------------------------------------------------------
# The Quick start, in order.
# ---------------------------------------------------------------------------------------
#: How the test shrinks the Quick start's commands to seconds. The README keeps the real
#: sizes; only these change, and a README command none of them fits runs as written.
#: Flags appended to ``ssmpde generate EQUATION`` (later flags win): small grids, for
#: Navier–Stokes and KS stored at the README's fraction of the simulated one (1/4: a
#: corrector's coarsening must land on the stored grid), and Navier–Stokes steps of 0.002
#: (ν = 1e-5 on 32² with euler-cn blows up at 0.01; CFL runs keep their cap of 0.01); the
#: written times and presets otherwise.
GENERATE_SIZES = {
    "navier-stokes": ["--resolution", "8", "--simulation-resolution", "32",
                      "--time-step", "0.002"],
    "darcy": ["--resolution", "9", "--simulation-resolution", "17"],
    "kuramoto-sivashinsky": ["--resolution", "16", "--simulation-resolution", "64"],
    "burgers": ["--resolution", "32", "--simulation-resolution", "64"],
}
#: ``generate --samples N`` -> at most this.
SAMPLES = 4
#: Models trained at a tenth of a second per step: options appended to ``ssmpde train``.
MODEL_SIZES = {
    "fno": ["width=8", "modes=[4,4]"],
    "geomano": ["width=8", "depth=1", "state_size=4"],
    "ssno": ["width=8", "mlp_ratio=1", "depth=1", "state_size=4", "memory_state_size=4"],
    "lean-fno": ["width=8"],
}
#: Written values replaced (each must occur: a README that drops one fails the test).
REPLACED = {
    "modes=[32,33]": "modes=[4,5]",  # the corrector's modes on 64², on the 8² test grid
}
#: ``train --epochs N`` -> 1, ``--num-test N`` -> at most 2, ``rollout --steps N`` -> at
#: most 3, or for parareal:SLICES at most SLICES × 4 (each slice at least the window, 4
#: frames for KS).
EPOCHS, NUM_TEST, STEPS, STEPS_PER_SLICE = 1, 2, 3, 4
#: Flags dropped: a local dask cluster (``--workers 2``) takes 10-20 s to start; without it
#: generate writes the same zarr store in-process, and parareal runs its slices in-process.
DROPPED = {"--workers": 1}
#: Commands only parsed, not run: compressible Euler's numba kernels compile for about a
#: minute on a fresh clone (no cache). The torchrun line is parsed only too: it starts two
#: more interpreters (tests/surrogates/test_train.py runs torchrun, marked slow).
PARSED_ONLY = {("generate", "euler")}
#: The Python snippets' sizes: 8² stored, 32² simulated (the README's 64² of 256²).
PYTHON_REPLACED = {
    'time_stepping="cfl", out=': 'time_stepping="cfl", resolution=8, simulation_resolution=32,'
                                 ' out=',
    'time_stepping="cfl")': 'time_stepping="cfl", resolution=8, simulation_resolution=32)',
}


def _quick_start() -> list[tuple[str, str]]:
    """The Quick start's commands and snippets in order: ("bash", one command line) and
    ("python", one snippet)."""
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    steps = []
    for language, body in re.findall(r"```(bash|python)\n(.*?)```", section, re.S):
        if language == "python":
            steps.append(("python", body))
            continue
        for line in body.replace("\\\n", " ").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                steps.append(("bash", line))
    return steps


def _shrunk(words: list[str]) -> list[str]:
    """An ``ssmpde`` command line (without "ssmpde") at the test's sizes."""
    words = [REPLACED.get(word, word) for word in words]
    slices = [int(m[1]) for m in map(re.compile(r"parareal:(\d+)").match, words) if m]
    steps = max([STEPS] + [n * STEPS_PER_SLICE for n in slices])
    out, k = [], 0
    while k < len(words):
        word = words[k]
        if word in DROPPED:
            k += 1 + DROPPED[word]
            continue
        out.append(word)
        if k + 1 < len(words):
            value = words[k + 1]
            new = {("generate", "--samples"): lambda n: min(n, SAMPLES),
                   ("train", "--epochs"): lambda n: EPOCHS,
                   ("train", "--num-test"): lambda n: min(n, NUM_TEST),
                   ("rollout", "--steps"): lambda n: min(n, steps)}.get((words[0], word))
            if new is not None:
                out.append(str(new(int(value))))
                k += 2
                continue
        k += 1
    if out[0] == "generate":
        out += GENERATE_SIZES.get(out[1], [])
        if "cfl" in out:  # CFL steps are stable at the default cap of 0.01
            out += ["--time-step", "0.01"]
    if out[0] == "train":
        for option in MODEL_SIZES.get(out[1], []):
            out += ["--model-option", option]
    if out[0] in ("generate", "train"):
        out.append("--no-progress")
    return out


def test_the_quick_start_is_complete():
    # What the README promises: the commands that need earlier outputs have them (the test
    # below runs them), and the quick loop and every benchmark dataset are there.
    lines = [line for kind, line in _quick_start() if kind == "bash"]
    text = "\n".join(lines)
    for needed in ("--out quick.nc", "--out darcy_test.nc", "--out runs/ks", "--out runs/ns",
                   "--target correction", "--preset ce-rm", "--preset gce-rt", "^torchrun"):
        assert re.search(rf"{needed}(\s|$)", text, re.M), needed
    # Each command that takes more than moments says how long it takes on 2 cores.
    long = [("ssmpde", "generate"), ("ssmpde", "train"), ("ssmpde", "rollout"),
            ("ssmpde", "warm-start"), ("ssmpde", "evaluate"), ("torchrun",)]
    for line in lines:
        words = tuple(shlex.split(line, comments=True))
        if any(words[:len(command)] == command for command in long):
            assert re.search(r"# .*~[\d.]+ (s|min|h|days?)\b", line), f"no duration: {line}"


@pytest.mark.e2e
def test_the_quick_start_runs_in_order(tmp_path, monkeypatch, capsys):
    """Every command and snippet of the README's Quick start, in order, in an empty
    directory, shrunk as the tables above say (about 25 s of CPU)."""
    import matplotlib

    matplotlib.use("Agg")
    from ssmpde.cli import _build_parser, main

    monkeypatch.chdir(tmp_path)
    seconds = []  # per step, for the message of a failure (and a test grown slow)
    used = set()  # the replacements that found their text
    for kind, step in _quick_start():
        seconds.append((time.perf_counter(), step.strip().splitlines()[0][:60]))
        if kind == "python":
            code = step
            for old, new in PYTHON_REPLACED.items():
                used.update([old] if old in code else [])
                code = code.replace(old, new)
            names = {"__name__": "readme"}
            exec(compile(code, "README.md", "exec"), names)
            if "ds" in names and "solver" in names:
                _check_same_solver(names["ds"], names["solver"])
            continue
        words = shlex.split(step, comments=True)
        if words[0] == "torchrun":
            module = words.index("-m")
            assert words[module + 1] == "ssmpde.cli", step
            _build_parser().parse_args(words[module + 2:])  # a bad line exits 2
            continue
        assert words[0] == "ssmpde", f"the Quick start runs ssmpde commands only: {step}"
        argv = _shrunk(words[1:])
        used.update(set(REPLACED) & set(words))
        if tuple(argv[:2]) in PARSED_ONLY:
            _build_parser().parse_args(argv)
            continue
        status = main(argv)
        captured = capsys.readouterr()
        assert status == 0, (f"{step}\n(ran as: ssmpde {shlex.join(argv)})\n{captured.err}\n"
                             + _timings(seconds))
    assert used == set(REPLACED) | set(PYTHON_REPLACED), "a replacement found no text"
    with capsys.disabled():  # shown with pytest -s
        print("\n" + _timings(seconds))


def _check_same_solver(ds, solver) -> None:
    """A snippet's solver next to its dataset is the solver that made it (the same time
    stepping and grids: the faithful default at Δt 1e-4 takes ~30 s a step on 256²), up to
    the time span, which a step does not use."""
    from ssmpde.data import config_of

    made = {k: v for k, v in config_of(ds)["solver"].items() if k != "final_time"}
    built = {k: v for k, v in solver.config_dict().items() if k != "final_time"}
    assert built == made, f"the snippet's solver {built} is not the one of its data {made}"


def _timings(seconds: list) -> str:
    ends = [start for start, _ in seconds[1:]] + [time.perf_counter()]
    return "\n".join(f"{end - start:6.1f} s  {what}" for (start, what), end
                     in zip(seconds, ends))
