"""Where the time goes: per-kernel profiles of the rows where tensorplay compiled is not the fastest path.

``python -m bench --profile-losers`` runs this after the timings: every one-thread row where another path
(PyTorch eager, torch.compile, ONNX Runtime) beats tensorplay compiled is exported again, compiled with
the native per-kernel timers (``tensorplay.compile(program, num_threads=1, profile=True)``, see
``tensorplay.lowering.codegen.profile``) and called for the timing budget; the report gives the time per call by kernel
kind, the slowest kernels, and the rate the GEMM/convolution kernels reach on the row's FLOPs.

>>> losing_rows([{"model": "m", "case": "b1", "threads": 1, "backend": "tensorplay compiled", "median_ms": 2.0},
...              {"model": "m", "case": "b1", "threads": 1, "backend": "onnxruntime", "median_ms": 1.0}])
[('m', 'b1', 'onnxruntime', 2.0)]
"""
from __future__ import annotations

import time
from typing import Any

from .models import Case

OURS = "tensorplay compiled"
RIVALS = ("torch eager", "torch.compile", "onnxruntime")


def losing_rows(results: list[dict]) -> list[tuple[str, str, str, float]]:
    """``(model, case, fastest rival, our time / its time)`` for the one-thread rows we lose."""
    cells: dict[tuple[str, str], dict[str, float]] = {}
    for r in results:
        if r["threads"] == 1 and "median_ms" in r:
            cells.setdefault((r["model"], r["case"]), {})[r["backend"]] = r["median_ms"]
    out = []
    for (model, case), times in cells.items():
        rivals = {b: t for b, t in times.items() if b in RIVALS}
        if OURS in times and rivals:
            best = min(rivals, key=rivals.get)
            if times[OURS] > rivals[best]:
                out.append((model, case, best, times[OURS] / rivals[best]))
    return out


def profile_case(case: Case, model: Any, budget: float, min_calls: int = 20) -> dict:
    """Compile ``model`` for ``case`` with kernel timers (one thread) and profile repeated calls."""
    import tensorplay
    from tensorplay.export import Dim, export

    from .backends import DYNAMIC_AXIS

    args = tuple(tensorplay.from_numpy(x) for x in case.inputs)
    axis = DYNAMIC_AXIS.get(case.model)
    dynamic = None if axis is None else [{axis: Dim.AUTO}] + [None] * (len(args) - 1)
    program = export(model, *args, dynamic_shapes=dynamic)
    compiled = tensorplay.compile(program, num_threads=1, profile=True)
    for _ in range(3):
        program(*args)
    compiled.reset_profile()
    calls, deadline = 0, time.perf_counter() + budget
    while calls < min_calls or time.perf_counter() < deadline:
        program(*args)
        calls += 1
    table = compiled.profile()
    per_call = {kind: s / calls * 1e3 for kind, s in table.by_kind().items()}
    doc = {"model": case.model, "case": case.label, "calls": calls,
           "kernels_ms": table.total_seconds / calls * 1e3, "by_kind_ms": per_call,
           "top": [{"kernel": r.name, "kind": r.kind, "ms": r.seconds / calls * 1e3, "share": r.share,
                    "fused": ",".join(r.origins)} for r in table.top(5)]}
    contraction_ms = per_call.get("gemm", 0.0)
    if case.flops and contraction_ms:
        doc["gemm_gflops"] = case.flops / contraction_ms / 1e6
    return doc


def profiles_text(losses: list[tuple[str, str, str, float]], profiles: list[dict]) -> str:
    """Markdown: one block per losing row."""
    if not losses:
        return "tensorplay compiled is the fastest path on every one-thread row of this run."
    parts = []
    for (model, case, rival, ratio), p in zip(losses, profiles, strict=True):
        kinds = ", ".join(f"{k} {ms:.3f}" for k, ms in sorted(p["by_kind_ms"].items(), key=lambda kv: -kv[1]))
        rate = f"; GEMM-kind kernels reach {p['gemm_gflops']:.0f} GFLOP/s on the row's FLOPs" \
            if "gemm_gflops" in p else ""
        rows = "\n".join(f"| {t['kernel']} | {t['kind']} | {t['ms']:.3f} | {t['share']:.0%} | {t['fused'][:70]} |"
                         for t in p["top"])
        parts.append(f"**{model} {case}**: {ratio:.2f}x the time of {rival}. Kernels take {p['kernels_ms']:.3f} ms "
                     f"per call (by kind, ms: {kinds}){rate}.\n\n"
                     f"| kernel | kind | ms/call | share | fused ops |\n|---|---|---|---|---|\n{rows}")
    return "\n\n".join(parts)
