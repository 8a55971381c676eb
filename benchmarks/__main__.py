"""Run the benchmarks and write the table the README shows.

    python -m benchmarks                 # solvers and scans (~5 minutes), then the table
    python -m benchmarks --all           # also the GeoMaNO step (~8 min) and, given data,
                                         # the training comparisons (see bench_training.py)
    python -m benchmarks --table-only    # rebuild benchmarks/results/table.md from the JSON

Every row is a side-by-side ratio measured in one run; the table says when and on what
machine each was measured (from the JSON files in ``benchmarks/results/``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS  # noqa: E402

TABLE = RESULTS / "table.md"


def _load(name: str) -> dict | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _when(result: dict) -> str:
    machine = result.get("machine", {})
    cpu = machine.get("processor") or "CPU"
    return f"{result['date'][:10]}, {machine.get('cpus', '?')} × {cpu}"


def table() -> str:
    """The Markdown table of every result file present."""
    rows = []
    ns = _load("navier_stokes")
    if ns:
        s = ns["seconds_per_step"]
        rows.append((f"Navier–Stokes faithful step, {ns['resolution']}², batch {ns['batch']}",
                     f"{s['ssmpde'] * 1e3:.1f} ms",
                     f"{s['numpy_reference'] * 1e3:.1f} ms (plain NumPy, same scheme)",
                     f"**{ns['speedup_vs_numpy']:.1f}x**", _when(ns)))
    darcy = _load("darcy")
    if darcy:
        s = darcy["seconds_per_sample"]
        for solver in ("direct", "pcg"):
            rows.append((f"Darcy sample at K = 421, {solver}", f"{s[solver]:.2f} s",
                         f"{s['baseline']:.2f} s (loop assembly + spsolve)",
                         f"**{darcy['speedup_vs_baseline'][solver]:.1f}x**", _when(darcy)))
    scan = _load("scan")
    if scan:
        shape = scan["shape"]
        for key, label in (("1d_state16", f"1D scan, L {shape['length']}"),
                           ("2d_state16", "2D scan, {0}×{1}".format(*shape["grid"]))):
            row = scan["cpu"].get(key)
            if row:
                memory = scan["peak_memory_mib"][key]
                rows.append((f"{label}, fwd+bwd, batch {shape['batch']} × {shape['channels']} "
                             "channels × state 16",
                             f"{row['cpu_seconds'] * 1e3:.0f} ms, {memory['cpu']:.0f} MiB",
                             f"{row['loop_seconds']:.2f} s, {memory['loop']:.0f} MiB "
                             "(PyTorch loop)", f"**{row['speedup']:.0f}x**", _when(scan)))
    gpu = _load("scan_gpu")
    if gpu and gpu.get("cuda"):
        cuda = gpu["cuda"]
        when = f"{gpu['date'][:10]}, {cuda['device']}"
        for key, row in cuda["1d"].items():
            if "mamba" not in row or not key.startswith(("mamba_", "geomano_44x44_")):
                continue
            shape = row["shape"]
            passes = "fwd+bwd" if key.endswith("fwd_bwd") else "fwd"
            dtype = "bfloat16" if "bfloat16" in key else "float32"
            rows.append((f"GPU 1D scan {passes}, {dtype}, {shape['batch']} × {shape['channels']}"
                         f" ch × state {shape['state']} × L {shape['length']}",
                         f"{row['triton']['seconds'] * 1e3:.2f} ms, "
                         f"{row['triton']['peak_mib']:.0f} MiB (Triton)",
                         f"{row['mamba']['seconds'] * 1e3:.2f} ms, {row['mamba']['peak_mib']:.0f} "
                         f"MiB (mamba-ssm {cuda['mamba_ssm']} CUDA)",
                         f"**{row['speed_ratio']:.2f}x**", when))
        for key, row in cuda["2d"].items():
            if not key.startswith("geomano_44x44_"):
                continue
            shape = row["shape"]
            passes = "fwd+bwd" if key.endswith("fwd_bwd") else "fwd"
            rows.append((f"GPU 2D scan {passes}, float32, {shape['batch']} × {shape['channels']} "
                         "ch × state {0} on {1}×{2}".format(shape["state"], *shape["grid"]),
                         f"{row['triton']['seconds'] * 1e3:.2f} ms, "
                         f"{row['triton']['peak_mib']:.0f} MiB (Triton)",
                         f"{row['loop']['seconds'] * 1e3:.0f} ms, {row['loop']['peak_mib']:.0f} "
                         "MiB (PyTorch loop on the GPU)", f"**{row['speedup']:.0f}x**", when))
    trained = _load("training_darcy_gpu")
    if trained:
        paper = trained["paper"]
        rows.append((f"GPU training: GeoMaNO darcy preset, FNO Darcy 1000/200 at 85², "
                     f"{trained['epochs']} epochs, batch 4",
                     f"test rel. L2 {trained['test_rel_l2']:.4f}; "
                     f"{trained['seconds_per_epoch_min']:.1f} s/epoch (median "
                     f"{trained['seconds_per_epoch_median']:.1f} on a shared GPU)",
                     f"paper: {paper['test_rel_l2']}; {paper['seconds_per_epoch']} s/epoch",
                     f"{paper['seconds_per_epoch'] / trained['seconds_per_epoch_min']:.1f}x "
                     "epoch speed", f"{trained['date'][:10]}, {trained['device']}"))
    euler = _load("euler")
    if euler:
        for r in euler["rows"]:
            ours, pyro = r["ssmpde"], r["pyro"]
            rate = (f"{ours['cell_updates_per_second'] / 1e6:.1f} M cell updates/s",
                    f"{pyro['cell_updates_per_second'] / 1e6:.2f} M/s (pyro-hydro "
                    f"{euler['versions'].get('pyro-hydro', '')} compressible, HLLC, MC)")
            if r["problem"] == "sod" and "ssmpde_at_equal_or_lower_error" in r:
                fine = r["ssmpde_at_equal_or_lower_error"]
                rows.append((f"Euler Sod {r['nx']}×{r['ny']}, T {r['final_time']:g}: wall time "
                             f"at equal or lower L1(ρ) error (pyro {pyro['density_l1_error']:.2e})",
                             f"{fine['seconds'] * 1e3:.0f} ms at {fine['nx']}×{fine['ny']} "
                             f"(L1 {fine['density_l1_error']:.2e}); {rate[0]}",
                             f"{pyro['seconds']:.2f} s; {rate[1]}",
                             f"**{r['wall_time_ratio_at_equal_or_lower_error']:.0f}x**",
                             _when(euler)))
            elif r["problem"] == "kh" and r["nx"] >= 128:
                rows.append((f"Euler Kelvin–Helmholtz {r['nx']}², T {r['final_time']:g}, "
                             f"{ours['steps']} steps", rate[0], rate[1],
                             f"**{r['rate_ratio']:.0f}x**", _when(euler)))
        sample = euler.get("ce_rm_sample")
        if sample:
            rows.append(("Euler CE-RM sample, 256² → 128², T 2 (21 frames)",
                         f"{sample['seconds_per_full_sample']:.0f} s", "–", "–",
                         _when(euler)))
    ks = _load("ks")
    if ks:
        r = ks["radau_comparison"]
        chosen = next((row for row in r["ssmpde_sweep"]
                       if row["time_step"] == r["chosen_time_step"]), None)
        if chosen:
            rows.append((f"KS lpsda trajectory (N {r['resolution']}, T {r['final_time']:g}) at "
                         f"equal-or-better error, rel. L2 {chosen['rel_l2_error_max']:.0e} vs "
                         f"{r['radau']['rel_l2_error_max']:.0e}",
                         f"{chosen['seconds_per_trajectory']:.2f} s (ETDRK4, h = "
                         f"{chosen['time_step']:g})",
                         f"{r['radau']['seconds_per_trajectory']:.1f} s (SciPy Radau, tol "
                         f"{r['radau_tol']:g}, as LPSDA)",
                         f"**{r['speedup_at_equal_or_better_error']:.0f}x**", _when(ks)))
        e = ks["exponax_comparison"]
        if "skipped" not in e:
            s = e["seconds_per_step"]
            rows.append((f"KS ETDRK4 step, N {e['resolution']}, batch {e['batch']}, float64",
                         f"{s['ssmpde'] * 1e3:.2f} ms",
                         f"{min(s['exponax_scan'], s['exponax_calls']) * 1e3:.2f} ms (Exponax "
                         f"{e['versions']['exponax']}, JAX CPU)",
                         f"**{e['speedup_vs_exponax']:.1f}x**", _when(ks)))
    burgers = _load("burgers")
    if burgers:
        t, e = burgers["seconds_per_trajectory"], burgers["relative_error_vs_fine"]
        rows.append((f"Burgers trajectory (N {burgers['resolution']}, ν {burgers['viscosity']:g}, "
                     f"T {burgers['final_time']:g}), batch {burgers['samples']}",
                     f"{t['ssmpde_batched'] * 1e3:.0f} ms (ETDRK4, rel. L2 {e['ssmpde']:.0e})",
                     f"{t['scipy_radau']:.1f} s (SciPy Radau, tol "
                     f"{burgers['scipy_tolerance']:g}, rel. L2 {e['scipy_radau']:.0e}; "
                     "tol 10x looser is slower and less accurate than ssmpde)",
                     f"**{burgers['speedup_vs_scipy']:.0f}x**", _when(burgers)))
    geomano = _load("geomano")
    if geomano:
        rows.append(("GeoMaNO darcy preset, train step, batch 4 at 85²",
                     f"{geomano['cpu_scan_seconds']:.2f} s (CPU scans)",
                     f"{geomano['reference_scan_seconds']:.0f} s (reference scans)",
                     f"**{geomano['speedup']:.0f}x**", _when(geomano)))
    ssno = _load("ssno")
    if ssno:
        s = ssno["seconds_per_step"]
        m = ssno["model"]
        rows.append((f"SS-NO ks preset, train step (fwd+bwd), batch {m['batch']} at "
                     f"{m['grid'][0]} points, window {m['window']}",
                     f"{s['fft'] * 1e3:.0f} ms (S4D by FFT)",
                     f"{s['reference']:.2f} s (loop recurrence)", f"**{ssno['speedup']:.0f}x**",
                     _when(ssno)))
    ssd = _load("ssd")
    if ssd:
        shape, t = ssd["shape"], ssd["seconds_forward_backward"]
        label = (f"SSD scan (LaMO) fwd+bwd, batch {shape['batch']}, L {shape['length']}, "
                 f"{shape['heads']} heads × {shape['head_dim']}, state {shape['state']}, "
                 f"{ssd['threads']['torch']} thread")
        rows.append((label, f"{t['ssd_scan'] * 1e3:.0f} ms (chunked, PyTorch)",
                     f"{t['selective_scan'] * 1e3:.0f} ms (our numba S6 scan, same "
                     f"recurrence); {t['ssd_ref']:.2f} s (loop reference)",
                     f"**{ssd['speedup_vs_selective_scan']:.1f}x** / "
                     f"{ssd['speedup_vs_reference']:.0f}x", _when(ssd)))
    learning = _load("ks_learning")
    if learning:
        by = {(r["viscosity"], r["model"]): r for r in learning["rows"]}
        for nu, paper in learning["paper_ssno_64_states"].items():
            ssno_row, fno_row = by.get((nu, "ssno_memory")), by.get((nu, "fno_1d"))
            if not (ssno_row and fno_row):
                continue
            error = {label: row["test_rel_l2_trajectory"] for (v, label), row in by.items()
                     if v == nu}
            others = ", ".join(f"{label.replace('_', ' ')} {error[label]:.3f}"
                               for label in ("ssno_no_memory", "geomano_1d") if label in error)
            rows.append((f"KS lpsda ν {nu}, 128 points: trajectory rel. L2 after "
                         f"{learning['budget_seconds_per_model']:.0f} s CPU per model "
                         f"(paper, 500 epochs: {paper})",
                         f"{ssno_row['test_rel_l2_trajectory']:.3f} (SS-NO with memory, "
                         f"{ssno_row['epochs_done']} epochs; {others})",
                         f"{fno_row['test_rel_l2_trajectory']:.3f} (FNO 1D, "
                         f"{fno_row['epochs_done']} epochs)",
                         f"{error['ssno_memory'] / error['fno_1d']:.2f}",
                         _when(learning)))
    mno = _load("mno")
    if mno:
        models = mno["models"]
        for backbone in ("galerkin", "gnot", "oformer"):
            mamba, attention = models.get(f"{backbone}-mamba"), models.get(f"{backbone}-attention")
            if not (mamba and attention):
                continue
            paper = mno["paper_table1"]
            cited = (f"paper: {paper[f'{backbone}/mamba']['rel_l2']} vs "
                     f"{paper[f'{backbone}/attention']['rel_l2']}")
            rows.append((f"MNO {backbone} on pdebench-like Darcy 64², mamba vs attention mixer,"
                         f" {mno['budget_seconds']:.0f} s CPU each (test rel. L2; {cited})",
                         f"{mamba['rel_l2']:.4f} (mamba; {mamba['epochs_done']} epochs over "
                         f"{mamba['train_samples']} samples)",
                         f"{attention['rel_l2']:.4f} (attention; {attention['epochs_done']} "
                         f"epochs over {attention['train_samples']} samples)",
                         f"{mamba['rel_l2'] / attention['rel_l2']:.2f}", _when(mno)))
    paper = {"darcy": {"lamo": 0.0039, "geomano": 0.0036, "fno": 0.0108},
             "navier-stokes": {"lamo": 0.0460, "fno": 0.1556}}
    for task in ("darcy", "navier-stokes"):
        result = _load(f"training_{task}")
        if not result or "fno" not in result["models"]:
            continue
        f = result["models"]["fno"]
        for name in ("lamo", "geomano"):
            if name not in result["models"]:
                continue
            g = result["models"][name]
            cited = ", ".join(f"{m} {v}" for m, v in paper[task].items()
                              if m in (name, "fno"))
            rows.append((f"{task}: {name} vs FNO, {result['budget_seconds']:.0f} s CPU "
                         f"training each (test rel. L2; papers, 500 epochs: {cited})",
                         f"{g['test_rel_l2']:.4f} ({g['epochs_done']} epochs"
                         + (f" over {g['train_samples']} samples"
                            if g.get("train_samples", 0) < f.get("train_samples", 0) else "")
                         + f", {g['parameters']:,} parameters)",
                         f"{f['test_rel_l2']:.4f} ({f['epochs_done']} epochs)",
                         f"{g['test_rel_l2'] / f['test_rel_l2']:.2f}", _when(result)))
    lines = ["| benchmark | ssmpde | reference | ratio | measured |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="include the long benchmarks")
    parser.add_argument("--table-only", action="store_true")
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
    TABLE.write_text(text + "\n\nReproduce: `python -m benchmarks` (`--all` for the long ones; "
                     "`benchmarks/bench_training.py` for the training comparisons).\n")
    print(text)
    return text


if __name__ == "__main__":
    main()
