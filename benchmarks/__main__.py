"""Run the benchmarks and write the results table, the README's headline table and the
benchmarks page's sections.

    python -m benchmarks                 # solvers and scans (~5 minutes), then the tables
    python -m benchmarks --all           # also the GeoMaNO step (~8 min); the training
                                         # comparisons need data (see bench_training.py)
    python -m benchmarks --table-only    # rebuild benchmarks/results/table.md and the README's
                                         # headline table from the JSON

Every row is a side-by-side ratio measured in one run; the table says when, on what machine
and at which commit each was measured (from the JSON files in ``benchmarks/results/``). Each
benchmark module formats its own rows (its ``rows(result)``) and, where one table row per
case is not enough, a fuller Markdown table (its ``details(result)``); this collects them:
into ``table.md``, into the README between its headline markers (the rows :data:`HEADLINE`
picks) and, at docs build time, into ``docs/benchmarks.md`` (:func:`section`, called by
``docs/hooks/pages.py``).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import re
from collections.abc import Callable
from typing import NamedTuple

from benchmarks.common import REPO, RESULTS

TABLE = RESULTS / "table.md"
README = REPO / "README.md"


class Section(NamedTuple):
    """One results file (``benchmarks/results/NAME.json``), the module that wrote it and
    formats it, and its heading on the benchmarks page."""

    name: str
    module: str
    title: str


#: Every results file, in the order of the table: its name | its module under benchmarks/ | its
#: title on the benchmarks page.
SECTIONS = tuple(Section(name, f"benchmarks.{module}", title) for name, module, title in (
    (cell.strip() for cell in line.split("|")) for line in """
navier_stokes | bench_navier_stokes | Navier–Stokes step against plain NumPy
darcy | bench_darcy | Darcy solve against loop assembly + spsolve
scan | bench_scan | Selective scans on the CPU
scan_gpu | bench_scan | Selective scans on a GPU
training_darcy_gpu | gpu.training_result | GeoMaNO trained on a GPU
euler | bench_euler | Compressible Euler against pyro-hydro
ks | bench_ks | Kuramoto–Sivashinsky against SciPy Radau
burgers | bench_burgers | Burgers against SciPy Radau
peers | bench_peers | Against Exponax and torch-cfd
geomano | bench_geomano | GeoMaNO training step: CPU scans
geomano_speed | bench_geomano_speed | GeoMaNO inference step against an older version
ssno | bench_ssno | SS-NO: S4D by FFT
ssd | bench_ssd | SSD scan (LaMO)
ks_learning | bench_ks_learning | Learning Kuramoto–Sivashinsky
mno | bench_mno | MNO: Mamba against attention
training_darcy | bench_training | Darcy: SSM models against the FNO
training_navier-stokes | bench_training | Navier–Stokes: SSM models against the FNO
models | bench_models | Every model against this CPU's compute bound
threads | bench_threads | Threads in a hybrid rollout
long_rollout | bench_long_rollout | Training recipes for long rollouts
hybrid | bench_hybrid | Hybrid rollouts against the coarse solver
kolmogorov_resolution | bench_kolmogorov_resolution | Kolmogorov flow: the reference's resolution
correction | bench_correction | Learned corrections on the solver's Pareto front
correction_ks_correctors | bench_correction | Learned corrections of Kuramoto–Sivashinsky
generate | bench_generate | Dataset generation on a dask cluster
claims | bench_claims | The papers' claims at CPU scale
""".strip().splitlines()))
#: The README's headline table: per row, a results file and the words that pick one of its
#: rows (each must be in exactly one row).
HEADLINE = (
    ("peers", ("NS vorticity 256²", "≤ 1e-06")),
    ("peers", ("KS ETDRK4 step", "float64")),
    ("peers", ("Burgers ETDRK4 step",)),
    ("euler", ("Euler Sod 512×64",)),
    ("scan", ("1D scan",)),
    ("scan", ("2D scan",)),
    ("scan_gpu", ("GPU 1D scan fwd+bwd, float32", "L 2048")),
    ("correction", ("Learned correction", "kelvin-helmholtz")),
)
HEADER = ["| benchmark | ssmpde | reference | ratio | measured |", "|---|---|---|---|---|"]
FOOTER = ("Reproduce: `python -m benchmarks` (`--all` for the long ones; "
          "`benchmarks/bench_training.py` for the training comparisons).")
#: The README's generated block lies between these lines.
README_MARKERS = ("<!-- headline:start -->", "<!-- headline:end -->")
#: ... and its block of the papers' claims (and the equal-wall-time rows) between these.
CLAIMS_MARKERS = ("<!-- claims:start -->", "<!-- claims:end -->")
#: The results files of the equal-wall-time training comparisons, shown beside the claims.
WALL_TIME = ("training_darcy", "training_navier-stokes")


def _module(name: str):
    return importlib.import_module(next(s.module for s in SECTIONS if s.name == name))


def _result(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


def rows_of(name: str) -> list[str]:
    """The rows of the results table one results file gives (none if its module has no
    ``rows`` or the file is absent)."""
    rows = getattr(_module(name), "rows", None)
    return rows(_result(name)) if rows and (RESULTS / f"{name}.json").exists() else []


def table() -> str:
    """The Markdown table of every result file present."""
    return "\n".join(HEADER + [row for s in SECTIONS for row in rows_of(s.name)])


def headline() -> str:
    """The README's table: the rows :data:`HEADLINE` picks, in its order."""
    lines = list(HEADER)
    for name, words in HEADLINE:
        found = [row for row in rows_of(name) if all(word in row for word in words)]
        if len(found) != 1:
            raise ValueError(f"{name}: {len(found)} rows hold all of {words}, not one")
        lines += found
    return "\n".join(lines)


def claims() -> str:
    """The README's block of the papers' claims at equal training (``claims.json``), then
    the equal-wall-time rows, labelled: they answer another question."""
    from benchmarks.bench_claims import readme_table

    lines = readme_table(_result("claims")) if (RESULTS / "claims.json").exists() else \
        ["No results yet: `benchmarks/results/claims.json` is absent."]
    lines += ["", "Equal wall time, not equal training (what five CPU minutes buy each model, "
              "a different question from the claims above):", "", *HEADER]
    lines += [row for name in WALL_TIME for row in rows_of(name)]
    return "\n".join(lines)


def _replace_block(readme: str, markers: tuple[str, str], text: str) -> str:
    start, end = markers
    pattern = re.compile(rf"^{re.escape(start)}\n.*?^{re.escape(end)}$", re.S | re.M)
    if not pattern.search(readme):
        raise ValueError(f"the README has no block between {start} and {end}")
    return pattern.sub(lambda _: f"{start}\n{text}\n{end}", readme, count=1)


def with_headline(readme: str) -> str:
    """``readme`` with the block between :data:`README_MARKERS` replaced by
    :func:`headline` and the one between :data:`CLAIMS_MARKERS` by :func:`claims`."""
    readme = _replace_block(readme, README_MARKERS, headline())
    return _replace_block(readme, CLAIMS_MARKERS, claims())


def section(name: str, markup: Callable[[str], str] = str) -> str:
    """The benchmarks page's section of one results file: a heading, what the benchmark
    compares (its module docstring's summary, the rest of the docstring folded; ``markup``
    turns the docstring's reStructuredText into Markdown), its rows of the results table and
    its fuller table (``details``) where its module has one."""
    entry = next(s for s in SECTIONS if s.name == name)
    module = _module(name)
    summary, _, method = markup(inspect.getdoc(module) or "").partition("\n\n")
    # a list right under a line of text is a list in reStructuredText, not in Markdown
    method = re.sub(r"(?m)^(?!\s*(?:[*-]|\d+\.) )(.*\S.*)\n(?=\s*(?:[*-]|\d+\.) )", "\\1\n\n",
                    method)
    parts = [f"### {entry.title} {{#{name}}}", " ".join(summary.split())]
    if method.strip():
        folded = "\n".join(f"    {line}" if line.strip() else "" for line in method.splitlines())
        parts.append(f'??? note "How it is measured (`{entry.module}`)"\n\n{folded}')
    path = RESULTS / f"{name}.json"
    if not path.exists():
        return "\n\n".join(parts + [f"No results yet: `{path.relative_to(REPO).as_posix()}` is "
                                     "absent."]) + "\n"
    rows = rows_of(name)
    if rows:
        parts.append("\n".join(HEADER + rows))
    details = getattr(module, "details", None)
    if details:
        parts.append(details(_result(name)))
    parts.append(f"Results file: `{path.relative_to(REPO).as_posix()}`.")
    return "\n\n".join(parts) + "\n"


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="include the long benchmarks")
    parser.add_argument("--table-only", action="store_true",
                        help="rebuild the tables from the JSON files without running anything")
    args = parser.parse_args(argv)
    if not args.table_only:
        from benchmarks import bench_darcy, bench_navier_stokes, bench_scan

        bench_navier_stokes.main([])
        bench_darcy.main([])
        bench_scan.main([])
        if args.all:
            from benchmarks import bench_geomano

            bench_geomano.main([])
    text = table()
    TABLE.write_text(f"{text}\n\n{FOOTER}\n")
    README.write_text(with_headline(README.read_text(encoding="utf-8")), encoding="utf-8")
    print(text)
    return text


if __name__ == "__main__":
    main()
