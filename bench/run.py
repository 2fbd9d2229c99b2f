"""Run every reference model through every inference path; print tables, write JSON and a chart.

    python -m bench [--quick] [--models mlp,gpt] [--threads 1 2] [--timing alone|shared|interleaved]
                    [--isolated all|real|none] [--profile-losers]

Each cell is the median / p90 latency after warm-up, each path of a model at each thread count timed in a
fresh process of its own (:mod:`bench.worker`); every output is compared with PyTorch
eager's (max abs diff); compiled paths report their compile/export time. Then each path of a model's first
row runs once more in a fresh process for its peak memory and, for tensorplay, cold and warm compile
times (:mod:`bench.isolated`). Results go to
``bench/results/<timestamp>.json`` and ``.png`` (gitignored). numpy's OpenBLAS is measured
without ``OPENBLAS_CORETYPE``/``OPENBLAS_L2_SIZE``: the entry points re-execute the process
without them (see :func:`reexec_without_openblas_overrides`).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def reexec_without_openblas_overrides() -> None:
    """Restart this process without the OpenBLAS core-type overrides (read once, when numpy loads)."""
    if any(k in os.environ for k in OVERRIDES) and "numpy" not in sys.modules:
        env = {k: v for k, v in os.environ.items() if k not in OVERRIDES}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        os.execve(sys.executable, [sys.executable, "-m", "bench", *sys.argv[1:]], env)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="short timing budget, one row per model (two for some small ones), 1 thread unless "
                        "--threads is given")
    parser.add_argument("--models", default="", help="comma-separated subset, e.g. mlp,chain")
    parser.add_argument("--backends", default="", help="comma-separated subset of the columns")
    parser.add_argument("--threads", type=int, nargs="+", default=None, help="thread counts (default: 1 2)")
    parser.add_argument("--budget", type=float, default=None, help="seconds of timed calls per cell")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--no-limits", action="store_true", help="skip measuring the machine limits")
    parser.add_argument("--update-readme", action="store_true", help="put the report into bench/README.md")
    parser.add_argument("--profile-losers", action="store_true",
                        help="profile every one-thread row where another path beats tensorplay compiled")
    parser.add_argument("--timing", choices=("alone", "shared", "interleaved"), default="alone",
                        help="alone: each path of a model at each thread count timed in a fresh process of its own "
                        "(default); shared: all in this process, one after another (faster; the paths disturb each "
                        "other); interleaved: all paths of a model at a thread count in one fresh process, timed in "
                        "alternating rounds (fair ratios on a machine whose speed drifts; see bench.interleave)")
    parser.add_argument("--isolated", choices=("all", "real", "none"), default=None,
                        help="models whose peak memory and cold/warm compile times are measured in processes of "
                        "their own: all, the real-size ones (quick mode's default) or none")
    opts = parser.parse_args(argv)
    if opts.threads is None:
        opts.threads = [1] if opts.quick else [1, 2]
    if opts.isolated is None:
        opts.isolated = "real" if opts.quick else "all"
    return opts


def _quiet() -> None:
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    for name in ("torch.onnx", "torch._dynamo", "torch._inductor", "onnxscript"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _with_diff(rec: dict, reference: dict) -> dict:
    """``rec`` without its output, with ``max_abs_diff`` against the reference output of its row (or the shape
    error)."""
    import numpy as np

    out = rec.pop("output", None)
    want = reference.get(rec["case"])
    if out is not None and want is not None:
        if out.shape == want.shape:
            rec["max_abs_diff"] = float(np.max(np.abs(out.astype(np.float64) - want)))
        else:
            rec["error"] = f"output shape {out.shape}, expected {want.shape}"
    return rec


def _compared(rec: dict, reference: dict, first_threads: int) -> dict:
    """``rec`` compared with the reference output of its row (:func:`_with_diff`; kept as the reference when it is
    the reference path's at ``first_threads``), printed as a progress line."""
    from bench.backends import REFERENCE

    if rec["backend"] == REFERENCE and rec["threads"] == first_threads and "output" in rec:
        reference[rec["case"]] = rec["output"]
    rec = _with_diff(rec, reference)
    shown = rec["error"] if "error" in rec else f"{rec['median_ms']:.3f} ms"
    print(f"  {rec['model']:12} {rec['case']:10} {rec['threads']}t {rec['backend']:20} {shown}", flush=True)
    return rec


def measure_interleaved(rows: list, backends: list[str], thread_counts: list[int], budget: float, quick: bool,
                        workdir: Path) -> list[dict]:
    """:func:`measure_model` with ``timing="interleaved"``: per thread count, one fresh process prepares every
    path of the model and times each row's paths in alternating rounds (:func:`bench.interleave.time_interleaved`);
    ONNX Runtime reads the file one export process wrote, as with ``"alone"``."""
    from bench.backends import REFERENCE, known_unavailable
    from bench.interleave import RowsJob, time_interleaved
    from bench.worker import in_fresh_process, onnx_file

    order = sorted(backends, key=lambda b: b != REFERENCE)
    reference: dict = {}
    records = []
    for t in thread_counts:
        done, paths, onnx = [], [], []
        for c in rows:
            why = {b: known_unavailable(b, c) for b in order}
            if "onnxruntime" in order and why["onnxruntime"] is None:
                file, meta = onnx_file(c, workdir)
                why["onnxruntime"] = meta.get("error")
                onnx.append((str(file), meta["export_s"]) if "export_s" in meta else ())
            else:
                onnx.append(())
            done += [{"model": c.model, "case": c.label, "threads": t, "backend": b, "error": e}
                     for b, e in why.items() if e]
            paths.append(tuple(b for b in order if not why[b]))
        result = in_fresh_process(time_interleaved, RowsJob(tuple(rows), tuple(paths), t, budget, quick, tuple(onnx)))
        if isinstance(result, dict):  # the process failed: every timed cell shows why
            result = [{"model": c.model, "case": c.label, "threads": t, "backend": b, **result}
                      for c, bs in zip(rows, paths) for b in bs]
        labels = [c.label for c in rows]
        for rec in sorted(done + result, key=lambda r: (labels.index(r["case"]), order.index(r["backend"]))):
            records.append(_compared(rec, reference, thread_counts[0]))
    return records


def measure_model(rows: list, backends: list[str], thread_counts: list[int], budget: float, quick: bool,
                  workdir: Path, timing: str = "alone") -> list[dict]:
    """All records of one model's rows: every backend at every thread count, each (path, thread count) in a fresh
    process of its own (:mod:`bench.worker`), all in this process one after another (``timing="shared"``), or
    every path of a thread count in one fresh process, in alternating rounds (``"interleaved"``,
    :func:`measure_interleaved`). Every output is compared with the reference path's (torch eager, timed first) at
    the first thread count."""
    from bench.backends import REFERENCE, exported_onnx, known_unavailable
    from bench.models import make_pair
    from bench.worker import PathJob, onnx_file, time_alone, time_rows

    if timing == "interleaved":
        return measure_interleaved(rows, backends, thread_counts, budget, quick, workdir)
    alone = timing == "alone"
    pair = None if alone else make_pair(rows[0].model)
    reference: dict = {}
    records = []
    for t in thread_counts:
        for name in sorted(backends, key=lambda b: b != REFERENCE):
            done = [{"model": c.model, "case": c.label, "threads": t, "backend": name, "error": why}
                    for c in rows if (why := known_unavailable(name, c))]
            todo = tuple(c for c in rows if not known_unavailable(name, c))
            onnx = ()
            if name == "onnxruntime" and alone:
                files = {c.label: onnx_file(c, workdir) for c in todo}
                done += [{"model": c.model, "case": c.label, "threads": t, "backend": name,
                          "error": files[c.label][1]["error"]} for c in todo if "error" in files[c.label][1]]
                todo = tuple(c for c in todo if "export_s" in files[c.label][1])
                onnx = tuple((str(files[c.label][0]), files[c.label][1]["export_s"]) for c in todo)
            if todo:
                job = PathJob(todo, name, t, budget, quick, onnx)
                done += time_alone(job) if alone else time_rows(job, pair)
            for rec in sorted(done, key=lambda r: [c.label for c in rows].index(r["case"])):
                records.append(_compared(rec, reference, thread_counts[0]))
            if name == "onnxruntime" and not alone:  # for the memory measurement's process (bench.isolated)
                for c in todo:
                    if exported_onnx(c) is not None:
                        onnx_file(c, workdir)
    return records


def isolated_jobs(case, backends: list[str], workdir: Path) -> list:
    """The fresh-process measurements of ``case`` (a model's first row): every path once, tensorplay compiled
    cold (an empty cache directory under ``workdir``) and warm; onnxruntime from the ONNX file exported by the
    timing pass (skipped when there is none)."""
    from bench import numpy_ref
    from bench.isolated import Job
    from bench.worker import exported_file

    jobs = []
    for name in backends:
        if name == "tensorplay compiled":
            cache = workdir / f"cache-{case.model}"
            jobs += [Job(case, name, "cold", str(cache)), Job(case, name, "warm", str(cache))]
        elif name == "onnxruntime":
            if (exported := exported_file(case, workdir)) is not None and "export_s" in exported[1]:
                jobs.append(Job(case, name, onnx_path=str(exported[0]), onnx_export_s=exported[1]["export_s"]))
        elif name != "numpy" or case.model in numpy_ref.FORWARDS:
            jobs.append(Job(case, name))
    return jobs


def measure_isolated(case, backends: list[str], workdir: Path) -> list[dict]:
    """Peak memory of every path and tensorplay's cold and warm compile times for ``case``, each in a process
    of its own (:mod:`bench.isolated`)."""
    from bench.isolated import run_jobs

    records = run_jobs(isolated_jobs(case, backends, workdir))
    for rec in records:
        shown = rec.get("error") or f"peak MiB: setup {rec['setup_peak_mib']:.0f}, run {rec['run_peak_mib']:.0f}"
        if "compile_s" in rec:
            shown += f", compile {rec['compile_s']:.2f} s ({rec['cache']}{'' if rec['from_cache'] else ', compiled'})"
        print(f"  {case.model:12} {case.label:10} isolated {rec['backend']:20} {shown}", flush=True)
    return records


def limits_text(lim: dict) -> str:
    """The machine limits as markdown bullet points."""
    p = lim["peak"]
    gemm = ", ".join(f"{k} {v:.0f}" for k, v in lim["gemm_gflops"].items())
    caveat = f" ({p['note']})" if p["note"] else ""
    return "\n".join([
        f"- CPU: {p['cpu']}, {p['cores']} cores at {p['ghz']:.2f} GHz, read from {p['ghz_source']} (under a "
        "hypervisor that is the nominal clock; cores may boost above it)",
        f"- theoretical fp32 peak = cores x GHz x 2 FMA x {p['lanes']} lanes x 2 = {p['gflops_total']:.0f} GFLOP/s, "
        f"{p['gflops_per_core']:.0f} per core{caveat}",
        f"- GEMM {lim['gemm_n']}^3 GFLOP/s: {gemm}",
        f"- memory copy bandwidth (1 thread, read + write): {lim['memory_copy_gbs']:.1f} GB/s",
        f"- numpy BLAS: {lim['numpy_blas']}"])


def render(doc: dict, backends: list[str], reference: str) -> str:
    """The markdown report of one run: header, machine limits, then the four tables."""
    from bench import report

    v, res = doc["versions"], doc["results"]
    notes = sorted({f"- {r['backend']}: {r['note']}" for r in res if r.get("note")})
    parts = [
        f"Run {doc['date']}, {'quick' if doc['quick'] else 'full'} mode, {doc['seconds']:.0f} s; "
        + ", ".join(f"{k} {val}" for k, val in v.items())
        + {"alone": "; each path timed in a process of its own",
           "shared": "; all paths timed in one process",
           "interleaved": "; the paths of a model timed in alternating rounds in one process per thread count"}[
               doc.get("timing", "alone")]
        + f"; load average before {doc['load_before'][0]:.2f}, after {doc['load_after'][0]:.2f} "
        "(other processes on these cores distort the 2-thread rows most)",
        limits_text(doc["limits"]) if "limits" in doc else "",
        "### Latency, ms (median / p90)", report.latency_table(res, backends),
        *([f"`*`: timed while other processes or the hypervisor (steal time) took at least "
           f"{report.DISTURBED_SHARE:.0%} of the machine's cores (`others` and `steal` in the JSON)"]
          if any(report.disturbed(r) for r in res) else []),
        *(["### tensorplay compiled / each path, ratio of the round medians: median over the rounds (range)",
           report.round_ratio_table(res, backends)] if report.has_round_ratios(res) else []),
        f"### Max abs diff vs {reference}", report.diff_table(res, backends, reference),
        "### Compile / export time, s", report.setup_table(res, backends),
        *(["### Compile time in a new process, s (tensorplay: cold cache, then warm)",
           report.compile_table(doc["isolated"]),
           "### Peak memory, MiB over the process's baseline (setup / run)",
           report.memory_table(doc["isolated"], backends)] if doc.get("isolated") else []),
        "### Achieved rate: GFLOP/s, or GB/s of compulsory memory traffic for memory-bound rows",
        report.rate_table(res, backends),
        "Notes:\n" + "\n".join(notes) if notes else "",
        "### Where tensorplay compiled loses: per-kernel profiles (1 thread)\n\n" + doc["profiles_text"]
        if "profiles_text" in doc else ""]
    return "\n\n".join(p for p in parts if p)


def _profile_losers(doc: dict, selected: list, budget: float) -> None:
    """Add the per-kernel profiles of the rows tensorplay compiled loses to ``doc``."""
    from bench.models import make_pair
    from bench.profile import losing_rows, profile_case, profiles_text

    losses = losing_rows(doc["results"])
    by_row = {(c.model, c.label): c for c in selected}
    doc["profiles"] = []
    for model, label, _, _ in losses:
        print(f"  profiling {model} {label}", flush=True)
        doc["profiles"].append(profile_case(by_row[(model, label)], make_pair(model)[1], max(budget, 0.5)))
    doc["profiles_text"] = profiles_text(losses, doc["profiles"])


def update_readme(text: str, path: Path = ROOT / "bench" / "README.md") -> None:
    """Replace what lies between the ``results:start`` / ``results:end`` markers of ``path``."""
    start, end = "<!-- results:start -->", "<!-- results:end -->"
    doc = path.read_text()
    if start not in doc or end not in doc:
        raise ValueError(f"{path}: expected the markers {start} and {end}")
    head, rest = doc.split(start, 1)
    path.write_text(f"{head}{start}\n{text}\n{end}{rest.split(end, 1)[1]}")


def _versions() -> dict[str, str]:
    import importlib

    found = {}
    for name in ("numpy", "torch", "onnxruntime", "onnx", "llvmlite"):
        try:
            found[name] = importlib.import_module(name).__version__
        except ImportError:
            found[name] = "absent"
    return found


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark; print the report and return the JSON document it writes (``text`` holds
    the report)."""
    opts = parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import torch  # noqa: F401  (before _quiet: importing torch resets its loggers)

    _quiet()
    from bench import report
    from bench.backends import BACKENDS, REFERENCE, release
    from bench.machine import limits
    from bench.models import REAL_SIZE, cases

    if any(k in os.environ for k in OVERRIDES):
        print(f"warning: {'/'.join(OVERRIDES)} set: numpy's BLAS runs a slower kernel", file=sys.stderr)
    wanted = {m for m in opts.models.split(",") if m}
    selected = [c for c in cases(opts.quick) if not wanted or c.model in wanted]
    if wanted != {c.model for c in selected} and wanted:
        raise SystemExit(f"--models: expected names from {sorted({c.model for c in cases(False)})}, got {opts.models}")
    backends = [b for b in opts.backends.split(",") if b] or list(BACKENDS)
    if unknown := [b for b in backends if b not in BACKENDS]:
        raise SystemExit(f"--backends: expected names from {list(BACKENDS)}, got {unknown}")
    if REFERENCE not in backends:
        backends.insert(0, REFERENCE)
    budget = opts.budget or (0.1 if opts.quick else 1.0)

    t0 = time.perf_counter()
    doc: dict = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "quick": opts.quick, "budget_s": budget,
                 "threads": opts.threads, "timing": opts.timing, "load_before": os.getloadavg(),
                 "versions": _versions()}
    if not opts.no_limits:
        doc["limits"] = limits(opts.quick)
        print(limits_text(doc["limits"]), flush=True)
    doc["results"], doc["isolated"] = [], []
    isolated_models = {"all": {c.model for c in cases(False)}, "real": set(REAL_SIZE), "none": set()}[opts.isolated]
    with tempfile.TemporaryDirectory(prefix="tensorplay-bench-") as workdir:
        for model in dict.fromkeys(c.model for c in selected):
            rows = [c for c in selected if c.model == model]
            doc["results"] += measure_model(rows, backends, opts.threads, budget, opts.quick, Path(workdir),
                                            timing=opts.timing)
            if model in isolated_models:
                doc["isolated"] += measure_isolated(rows[0], backends, Path(workdir))
            release(model)
    if opts.profile_losers:
        _profile_losers(doc, selected, budget)
    doc["seconds"] = time.perf_counter() - t0
    doc["load_after"] = os.getloadavg()
    doc["text"] = render(doc, backends, REFERENCE)

    opts.out.mkdir(parents=True, exist_ok=True)
    stem = opts.out / time.strftime("%Y%m%d-%H%M%S")
    stem.with_suffix(".json").write_text(json.dumps(doc, indent=1, default=str))
    written = [stem.with_suffix(".json")]
    try:
        written.append(report.chart(doc["results"], backends, REFERENCE, stem.with_suffix(".png")))
    except ImportError as exc:
        print(f"no chart: {exc} (matplotlib is in the 'bench' extra)", file=sys.stderr)
    if opts.update_readme:
        update_readme(doc["text"])
        written.append(ROOT / "bench" / "README.md")
    print("\n" + doc["text"] + "\n\nwrote " + " and ".join(map(str, written)))
    return doc


if __name__ == "__main__":
    reexec_without_openblas_overrides()
    main()
