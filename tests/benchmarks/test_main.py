"""``python -m benchmarks``: the results table, collected from each benchmark's own rows, and
every benchmark module runs as ``python -m benchmarks.MODULE`` from the repository root."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: Every module under benchmarks/, as ``python -m`` names it.
MODULES = sorted(
    ".".join(path.relative_to(REPO).with_suffix("").parts)
    for path in (REPO / "benchmarks").rglob("*.py")
    if path.name != "__init__.py" and ".cache" not in path.parts)

# One interpreter runs every module with --help, as ``python -m`` would (runpy, the working
# directory first on sys.path, no PYTHONPATH): cheap, and a module that needs a sys.path edit
# to import fails here.
HELP = """
import contextlib, io, json, runpy, sys
report = {}
for name in sys.argv[1:]:
    sys.argv = [name, "--help"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_module(name, run_name="__main__", alter_sys=True)
        code = "returned"
    except SystemExit as stop:
        code = stop.code
    except Exception as error:
        code = f"{type(error).__name__}: {error}"
    report[name] = {"code": code, "output": out.getvalue()}
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def helps():
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", HELP, *MODULES], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.e2e
@pytest.mark.parametrize("module", MODULES)
def test_every_module_runs_with_python_dash_m(helps, module):
    report = helps[module]
    source = (REPO / Path(*module.split("."))).with_suffix(".py").read_text()
    if 'if __name__ == "__main__":' in source:
        assert report["code"] == 0, report
        assert "usage:" in report["output"] and "--help" in report["output"]
    else:  # a library module (common): it imports
        assert report["code"] == "returned", report


def test_no_module_edits_sys_path():
    for module in MODULES:
        source = (REPO / Path(*module.split("."))).with_suffix(".py").read_text()
        assert "sys.path" not in source, module
    session = (REPO / "benchmarks" / "gpu" / "session.sh").read_text()
    assert "python3 benchmarks/" not in session  # the GPU session runs them as modules too


def test_results_table_has_a_row_per_result_with_date_and_machine():
    from benchmarks.__main__ import table

    text = table()
    lines = text.splitlines()
    assert lines[0].startswith("| benchmark | ssmpde | reference | ratio | measured |")
    assert any("2D scan" in line for line in lines) and any("Darcy" in line for line in lines)
    assert all(line.count("|") == 6 for line in lines)


def test_committed_table_is_the_one_the_committed_results_give():
    from benchmarks.__main__ import FOOTER, TABLE, table

    assert TABLE.read_text() == f"{table()}\n\n{FOOTER}\n"


def test_each_section_module_formats_its_results():
    import importlib

    from benchmarks.__main__ import SECTIONS

    for section in SECTIONS:
        module = importlib.import_module(section.module)
        assert callable(getattr(module, "rows", None)) or callable(
            getattr(module, "details", None)), section


def test_every_result_file_has_a_section_and_a_place_on_the_benchmarks_page():
    from benchmarks.__main__ import SECTIONS
    from benchmarks.common import RESULTS

    names = [section.name for section in SECTIONS]
    assert len(set(names)) == len(names)
    assert sorted(names) == sorted(path.stem for path in RESULTS.glob("*.json"))
    page = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    markers = re.findall(r"^<!-- benchmark: ([\w-]+) -->$", page, re.M)
    assert sorted(markers) == sorted(names), "each results file once on docs/benchmarks.md"


def test_each_section_of_the_benchmarks_page_renders_from_the_committed_results():
    from benchmarks.__main__ import HEADER, SECTIONS, section

    for entry in SECTIONS:
        text = section(entry.name)
        assert text.startswith(f"### {entry.title} {{#{entry.name}}}\n"), entry.name
        assert f"`benchmarks/results/{entry.name}.json`" in text, entry.name
        assert HEADER[0] in text or "|---|" in text, f"{entry.name}: no table"


def test_readme_headline_is_the_one_the_committed_results_give():
    from benchmarks.__main__ import HEADER, HEADLINE, README, README_MARKERS, headline

    text = README.read_text(encoding="utf-8")
    start, end = README_MARKERS
    assert text.count(start) == 1 and text.count(end) == 1
    block = text.split(start + "\n", 1)[1].split("\n" + end, 1)[0]
    assert block == headline()
    lines = block.splitlines()
    assert lines[:2] == HEADER and len(lines) - 2 == len(HEADLINE)
    assert 6 <= len(HEADLINE) <= 10


def test_readme_claims_block_is_the_one_the_committed_results_give():
    """The papers' claims at equal training, then the equal-wall-time rows under a label that
    says they answer another question."""
    from benchmarks.__main__ import CLAIMS_MARKERS, README, WALL_TIME, claims, rows_of

    text = README.read_text(encoding="utf-8")
    start, end = CLAIMS_MARKERS
    assert text.count(start) == 1 and text.count(end) == 1
    block = text.split(start + "\n", 1)[1].split("\n" + end, 1)[0]
    assert block == claims()
    assert "Equal wall time, not equal training" in block
    for name in WALL_TIME:
        assert rows_of(name) and all(row in block for row in rows_of(name))


def test_the_readme_says_how_to_reproduce_once():
    from benchmarks.__main__ import README

    assert README.read_text(encoding="utf-8").count("Reproduce:") == 1


def test_a_peer_timed_far_past_the_target_is_labelled_with_its_error():
    """torch-cfd diverges on the bench's initial field at every step count up to 42 on 256²:
    its cheapest run "at rel. L2 <= 0.001" is 50 steps at 5.8e-7, not a run at equal error."""
    from benchmarks import bench_peers
    from benchmarks.common import RESULTS

    lines = bench_peers.rows(json.loads((RESULTS / "peers.json").read_text()))
    loose = next(line for line in lines if "256²" in line and "≤ 0.001 " in line)
    assert "torch-cfd stability-limited: 50 steps, rel. L2 5.8e-7" in loose
    assert "exponax, 14 steps" in loose  # at the target, unlabelled
    tight = next(line for line in lines if "256²" in line and "≤ 1e-06 " in line)
    assert "stability-limited" not in tight and "torch-cfd, 50 steps" in tight


def test_every_result_file_records_its_commit_and_whether_the_tree_was_dirty():
    from benchmarks.common import RESULTS

    for path in sorted(RESULTS.glob("*.json")):
        result = json.loads(path.read_text())
        assert len(result.get("commit") or "") == 40, path.name
        assert "dirty" in result, path.name
        if result.get("commit_recorded") != "backfilled":
            assert isinstance(result["dirty"], list), path.name


def test_revision_marks_a_dirty_tree_and_leaves_results_out(tmp_path, monkeypatch):
    from benchmarks import common

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    (results / "a.json").write_text("{}")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    monkeypatch.setattr(common, "RESULTS", results)
    clean = common.revision(tmp_path)
    assert len(clean["commit"]) == 40 and clean["dirty"] == []
    (results / "a.json").write_text('{"new": 1}')  # a benchmark writing its own result
    assert common.revision(tmp_path)["dirty"] == []
    (tmp_path / "code.py").write_text("x = 2\n")
    assert common.revision(tmp_path)["dirty"] == ["code.py"]
    row = common.when({"date": "2026-11-29T00:00:00", "machine": {"cpus": 2, "processor": "X"},
                       **common.revision(tmp_path)})
    assert row.endswith(f"at {clean['commit'][:7]}+dirty"), row
