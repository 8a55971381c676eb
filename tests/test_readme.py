"""The README and the model pages say what the code does: every parameter count they print is
the count of the model they name."""

import functools
import re
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


def _tables(path: Path):
    """(header cells, [(line number, cells)]) of every Markdown table in ``path``."""
    lines = path.read_text(encoding="utf-8").splitlines()
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
    for path in [README, *MODEL_PAGES]:
        name = path.relative_to(ROOT).as_posix()
        page_model = path.stem.replace("_", "-") if path != README else None
        for header, rows in _tables(path):
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
        lines = path.read_text(encoding="utf-8").splitlines()
        for line, text in enumerate(lines, 1):
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
    for path in [README, *MODEL_PAGES]:
        name = path.relative_to(ROOT).as_posix()
        text = " ".join(path.read_text(encoding="utf-8").split())
        for match in re.finditer(rf"({COUNT})(?=[^|.]{{0,30}}?\bparameters\b)", text):
            assert (name, match[1]) in claimed, f"{name}: {match[1]} parameters is not checked"
    assert len(claimed) > 40


@pytest.mark.parametrize("name, line, value, model, settings", _claims(),
                         ids=lambda v: v if isinstance(v, str) else str(v))
def test_parameter_counts_are_the_models(name, line, value, model, settings):
    actual = _count(model, tuple(sorted(settings.items())))
    assert f"{actual:,}" == value, (
        f"{name}:{line} says {model} {settings} has {value} parameters; it has {actual:,} "
        "(a count of a model fitted to other data says so: 'at 43²', 'with 12 input "
        "channels')")
