"""Markdown tables and the latency-ratio chart drawn from the result records of :mod:`bench.run`.

A record is a dict with ``model, case, threads, backend`` and either ``median_ms/p90_ms`` or
``error``; optional ``setup_s``, ``max_abs_diff``, ``gflops``, ``gbs``, ``note``. The records of
:mod:`bench.isolated` (memory, cold and warm compiles) have their own two tables.

>>> rec = [{"model": "mlp", "case": "b1", "threads": 1, "backend": "numpy", "median_ms": 0.1, "p90_ms": 0.2}]
>>> print(latency_table(rec, ["numpy"]).splitlines()[-1])
| mlp | b1 | 1 | 0.100 / 0.200 |
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

Record = dict


def _rows(records: list[Record]) -> dict[tuple, dict[str, Record]]:
    rows: dict[tuple, dict[str, Record]] = {}
    for r in records:
        rows.setdefault((r["model"], r["case"], r["threads"]), {})[r["backend"]] = r
    return rows


def _table(records: list[Record], backends: list[str], cell: Callable[[Record], str],
           keep: Callable[[tuple], bool] = lambda key: True) -> str:
    head = "| model | case | threads | " + " | ".join(backends) + " |"
    lines = [head, "|" + "---|" * (3 + len(backends))]
    for key, row in _rows(records).items():
        if keep(key):
            cells = [cell(row[b]) if b in row else "" for b in backends]
            lines.append(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: Share of the machine's cores (other processes' work plus the hypervisor's steal) from which a timed cell is marked
#: as disturbed (:func:`disturbed`): at the 10 ms tick of ``/proc/stat``, a 0.1 s cell on 2 cores reads in 5% steps.
DISTURBED_SHARE = 0.2


def disturbed(r: Record) -> bool:
    """Whether other processes or the hypervisor took at least :data:`DISTURBED_SHARE` of the machine while ``r``
    was timed (records from before these fields never are)."""
    return (r.get("others") or 0.0) + (r.get("steal") or 0.0) >= DISTURBED_SHARE


def latency_table(records: list[Record], backends: list[str], width: int = 90) -> str:
    """Median / p90 latency in milliseconds, or the reason a cell has no number (cut to ``width``
    characters; the JSON keeps it whole); a cell timed while the machine was busy elsewhere (:func:`disturbed`)
    ends in ``*``."""
    def cell(r: Record) -> str:
        if "error" in r:
            return r["error"] if len(r["error"]) <= width else r["error"][: width - 3] + "..."
        return f"{r['median_ms']:.3f} / {r['p90_ms']:.3f}" + (" *" if disturbed(r) else "")

    return _table(records, backends, cell)


#: the path the round ratios divide (:func:`round_ratio_table`)
COMPILED = "tensorplay compiled"


def has_round_ratios(records: list[Record], numerator: str = COMPILED) -> bool:
    """Whether some row of ``records`` timed ``numerator`` in alternating rounds."""
    return any("round_ms" in r and r["backend"] == numerator for r in records)


def round_ratio_table(records: list[Record], backends: list[str], numerator: str = COMPILED) -> str:
    """Rows timed in alternating rounds (``round_ms``, ``python -m bench --timing interleaved``): per other path,
    ``numerator``'s round median over that path's, median over the rounds and their range (below 1: ``numerator``
    is faster)."""
    import numpy as np

    others = [b for b in backends if b != numerator]
    rows = _rows(records)

    def keep(key: tuple) -> bool:
        return "round_ms" in rows[key].get(numerator, {})

    def cell(r: Record) -> str:
        if "round_ms" not in r:
            return "-"
        mine = rows[(r["model"], r["case"], r["threads"])][numerator]["round_ms"]
        ratios = np.asarray(mine) / np.asarray(r["round_ms"])
        return f"{np.median(ratios):.2f} ({ratios.min():.2f}-{ratios.max():.2f})"

    return _table(records, others, cell, keep)


def diff_table(records: list[Record], backends: list[str], reference: str) -> str:
    """Max |output - reference output| of each path (first thread count only; the same weights)."""
    first = min(r["threads"] for r in records)

    def cell(r: Record) -> str:
        return "ref" if r["backend"] == reference else ("-" if "max_abs_diff" not in r else f"{r['max_abs_diff']:.1e}")

    return _table(records, backends, cell, keep=lambda key: key[2] == first)


def setup_table(records: list[Record], backends: list[str]) -> str:
    """Seconds spent compiling/exporting before the first call, for the compiled paths."""
    return _table(records, backends, lambda r: "-" if r.get("setup_s") is None else f"{r['setup_s']:.2f}")


def _isolated_rows(isolated: list[Record]) -> dict[tuple, dict[str, Record]]:
    """``(model, case) -> {column: record}``; tensorplay compiled's two runs as ``"tensorplay compiled cold"``
    and ``"... warm"``."""
    rows: dict[tuple, dict[str, Record]] = {}
    for r in isolated:
        column = f"{r['backend']} {r['cache']}" if "cache" in r else r["backend"]
        rows.setdefault((r["model"], r["case"]), {})[column] = r
    return rows


def _short(error: str, width: int = 40) -> str:
    return error if len(error) <= width else error[: width - 3] + "..."


def _seconds(r: Record | None, field: str) -> str:
    if r is None:
        return ""
    if "error" in r:
        return _short(r["error"])
    miss = " (miss)" if field in ("compile_s", "ready_s") and r.get("cache") == "warm" and not r["from_cache"] else ""
    return f"{r[field]:.3f}{miss}"


def compile_table(isolated: list[Record]) -> str:
    """Seconds to a first result in a fresh process (:mod:`bench.isolated`): tensorplay's export, its compile
    on an empty compile cache (cold) and, ready to call, on the cache that run filled (warm: compile + first call -
    one later call, see :mod:`bench.isolated`; "(miss)" when the warm run compiled after all), the warm process's
    first call; torch.compile's compile + first call; ONNX Runtime's torch.onnx export + session creation."""
    tp = "tensorplay compiled"
    lines = ["| model | case | tensorplay export | tensorplay cold | tensorplay warm (ready) | warm first call "
             "| torch.compile "
             "| onnxruntime |", "|---|---|---|---|---|---|---|---|"]
    for (model, case), row in _isolated_rows(isolated).items():
        cold, warm = row.get(f"{tp} cold"), row.get(f"{tp} warm")
        ready = "ready_s" if warm is not None and "ready_s" in warm else "compile_s"  # (records from before ready_s)
        cells = [_seconds(cold, "export_s"), _seconds(cold, "compile_s"), _seconds(warm, ready),
                 _seconds(warm, "first_call_s"), _seconds(row.get("torch.compile"), "setup_s"),
                 _seconds(row.get("onnxruntime"), "setup_s")]
        lines.append(f"| {model} | {case} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def memory_table(isolated: list[Record], backends: list[str]) -> str:
    """Peak resident MiB over the process's baseline (:mod:`bench.isolated`), "setup / run": up to the first
    result, then over further calls; tensorplay compiled's cold and warm runs in two columns. ``weights`` is
    the model's state_dict size."""
    columns = [c for b in backends for c in ((f"{b} cold", f"{b} warm") if b == "tensorplay compiled" else (b,))]
    lines = ["| model | case | weights | " + " | ".join(columns) + " |", "|" + "---|" * (3 + len(columns))]
    for (model, case), row in _isolated_rows(isolated).items():
        cells = []
        for c in columns:
            r = row.get(c)
            cells.append("" if r is None else _short(r["error"]) if "error" in r
                         else f"{r['setup_peak_mib']:.0f} / {r['run_peak_mib']:.0f}")
        weights = next((f"{r['weights_mib']:.0f}" for r in row.values() if "weights_mib" in r), "")
        lines.append(f"| {model} | {case} | {weights} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def rate_table(records: list[Record], backends: list[str]) -> str:
    """Achieved GFLOP/s, or GB/s for memory-bound rows (from the median), of the rows that know
    their FLOP or byte count: to be read against the machine limits."""
    def cell(r: Record) -> str:
        return f"{r['gflops']:.3g} GFLOP/s" if "gflops" in r else f"{r['gbs']:.3g} GB/s"

    return _table([r for r in records if "gflops" in r or "gbs" in r], backends, cell)


def chart(records: list[Record], backends: list[str], reference: str, path: Path) -> Path:
    """One bar group per row: each path's median latency divided by the reference's (log scale, lower
    is faster); one panel per thread count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = _rows(records)
    counts = sorted({key[2] for key in rows})
    fig, axes = plt.subplots(len(counts), 1, figsize=(14, 4.5 * len(counts)), squeeze=False)
    others = [b for b in backends if b != reference]
    width = 0.8 / len(others)
    for ax, t in zip(axes[:, 0], counts):
        keys = [k for k in rows if k[2] == t and "median_ms" in rows[k].get(reference, {})]
        for j, b in enumerate(others):
            xs, ys = [], []
            for i, k in enumerate(keys):
                if "median_ms" in rows[k].get(b, {}):
                    xs.append(i + (j - (len(others) - 1) / 2) * width)
                    ys.append(rows[k][b]["median_ms"] / rows[k][reference]["median_ms"])
            ax.bar(xs, ys, width, label=b)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_xticks(range(len(keys)), [f"{k[0]}\n{k[1]}" for k in keys], fontsize=8)
        ax.set_ylabel(f"latency / {reference}")
        ax.set_title(f"{t} thread{'s' if t > 1 else ''}: median latency relative to {reference} (lower is faster)")
        ax.legend(fontsize=8, ncol=len(others))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
