"""Per-kernel profiles: native timers around every kernel call, read back as a table.

Compiled with ``profile=True`` (``tp.compile(program, profile=True)``, ``CompileOptions(profile=True)``
or ``TENSORPLAY_PROFILE=1``), ``<prefix>.body`` reads ``clock_gettime(CLOCK_MONOTONIC)`` before and
after each kernel call and adds the nanoseconds and one call to the kernel's two slots of the global
``int64 <prefix>_profile[2 * kernels]`` (atomic adds, so concurrent calls are all counted). Without
the option no timer is emitted. :func:`profile_table` turns the counters into rows::

    >>> import numpy as np, tensorplay as tp
    >>> from tensorplay.export import export
    >>> from tensorplay.lowering.pipeline import CompileOptions, compile_program
    >>> prog = export(tp.nn.Sequential(tp.nn.LayerNorm(8), tp.nn.Linear(8, 8), tp.nn.Softmax(-1)), tp.ones(4, 8))
    >>> compiled = compile_program(prog, CompileOptions(profile=True))
    >>> _ = compiled.run({"input": tp.ones(4, 8), **compiled.state_of(prog)})
    >>> table = compiled.profile()
    >>> [(row.kind, row.calls) for row in table.rows]
    [('reduction', 1), ('gemm', 1), ('reduction', 1)]
    >>> print(table)  # doctest: +SKIP
    kernel   kind       ops  calls  total ms  share  fused
    fused_0  reduction   12      1     0.000  17.1%  add,layer_norm,mean,mean_1,mul,mul_1,...
    gemm_1   gemm         1      1     0.002  60.2%  matmul
    fused_2  reduction    7      1     0.001  22.7%  amax,exp,softmax,sub_1,sum
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import llvmlite.ir as ir
import numpy as np

from .expr import I32, I64, PTR, i64

__all__ = ["ProfileEmitter", "ProfileRow", "ProfileTable", "profile_table", "reset_profile", "counters_symbol"]

_CLOCK_MONOTONIC = 1


def counters_symbol(prefix: str) -> str:
    """Name of the counters global of the program compiled under ``prefix``."""
    return f"{prefix}_profile"


class ProfileEmitter:
    """Emits the timers: ``start(b)`` before a kernel call, ``stop(b, start, k)`` after it."""

    __slots__ = ("counters", "clock", "_timespecs")

    def __init__(self, module: ir.Module, prefix: str, num_kernels: int) -> None:
        ty = ir.ArrayType(I64, 2 * max(num_kernels, 1))
        self.counters = ir.GlobalVariable(module, ty, counters_symbol(prefix))
        self.counters.initializer = ir.Constant(ty, None)
        self.counters.align = 64
        self.clock = ir.Function(module, ir.FunctionType(I32, [I32, PTR]), "clock_gettime")
        self._timespecs: dict[str, ir.Value] = {}

    def _now(self, b: ir.IRBuilder) -> ir.Value:
        ty = ir.ArrayType(I64, 2)
        ts = self._timespecs.get(b.function.name)
        if ts is None:
            here = b.block
            b.position_at_start(b.function.entry_basic_block)
            ts = self._timespecs[b.function.name] = b.alloca(ty, name="timespec")
            ts.type = PTR  # opaque pointer, as the rest of the module uses
            b.position_at_end(here)
        b.call(self.clock, [ir.Constant(I32, _CLOCK_MONOTONIC), ts])
        sec, nsec = (b.load(b.gep(ts, [i64(0), i64(k)], inbounds=True, source_etype=ty), typ=I64) for k in (0, 1))
        return b.add(b.mul(sec, i64(1_000_000_000)), nsec)

    def start(self, b: ir.IRBuilder) -> ir.Value:
        return self._now(b)

    def stop(self, b: ir.IRBuilder, start: ir.Value, k: int) -> None:
        elapsed = b.sub(self._now(b), start)
        ty = self.counters.value_type
        for slot, v in ((2 * k, elapsed), (2 * k + 1, i64(1))):
            ptr = b.gep(self.counters, [i64(0), i64(slot)], inbounds=True, source_etype=ty)
            b.atomic_rmw("add", ptr, v, "monotonic")


@dataclass(frozen=True, slots=True)
class ProfileRow:
    """One kernel: ``name``, ``kind``, scalar compute ops, tp ops fused, calls, seconds, share of the total,
    and the LLVM ``function`` it runs (kernels with equal code share one)."""

    name: str
    kind: str
    compute_ops: int
    origins: tuple[str, ...]
    calls: int
    seconds: float
    share: float
    function: str


@dataclass(frozen=True)
class ProfileTable:
    """The rows of a profile in program order; ``by_kind()`` sums them per kind; ``str()`` is a table."""

    rows: tuple[ProfileRow, ...]

    @property
    def total_seconds(self) -> float:
        return sum(r.seconds for r in self.rows)

    def top(self, n: int = 10) -> list[ProfileRow]:
        """The ``n`` kernels that took longest."""
        return sorted(self.rows, key=lambda r: -r.seconds)[:n]

    def by_kind(self) -> dict[str, float]:
        """Seconds per kernel kind, largest first."""
        out: dict[str, float] = {}
        for r in self.rows:
            out[r.kind] = out.get(r.kind, 0.0) + r.seconds
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def format(self, rows: Sequence[ProfileRow] | None = None) -> str:
        rows = self.rows if rows is None else rows
        head = ("kernel", "kind", "ops", "calls", "total ms", "share", "fused")
        body = [(r.name, r.kind, str(r.compute_ops), str(r.calls), f"{r.seconds * 1e3:.3f}", f"{r.share:.1%}",
                 ",".join(r.origins[:6]) + (",..." if len(r.origins) > 6 else "")) for r in rows]
        widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head) - 1)]
        lines = []
        for cells in [head, *body]:
            parts = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))]
            lines.append("  ".join(parts + [cells[-1]]).rstrip())
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


def _counters(executable: Any) -> np.ndarray:
    meta = executable.signature.meta
    if not meta.get("profile"):
        raise ValueError("this program was compiled without profiling; compile it with profile=True "
                         "(or TENSORPLAY_PROFILE=1)")
    n = 2 * max(len(meta["kernels"]), 1)
    addr = executable.library.address(counters_symbol(executable.prefix))
    return np.ctypeslib.as_array((ctypes.c_int64 * n).from_address(addr))


def profile_table(executable: Any) -> ProfileTable:
    """The counters of a profiled :class:`tensorplay.runtime.abi.Executable` as a :class:`ProfileTable` (since the
    last :func:`reset_profile`); ValueError if it was compiled without ``profile=True``."""
    counts = _counters(executable).copy()
    kernels = executable.signature.meta["kernels"]
    total = float(counts[0::2].sum()) or 1.0
    rows = tuple(ProfileRow(k["name"], k["kind"], k["compute_ops"], tuple(k["origins"]), int(counts[2 * i + 1]),
                            float(counts[2 * i]) * 1e-9, float(counts[2 * i]) / total, k["function"])
                 for i, k in enumerate(kernels))
    return ProfileTable(rows)


def reset_profile(executable: Any) -> None:
    """Zero the counters of a profiled executable."""
    _counters(executable)[:] = 0
