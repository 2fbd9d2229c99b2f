"""Pictures of a program: its captured graph, and optionally its fused native kernels, as Graphviz.

:func:`to_dot` writes the graph in Graphviz's dot language: one node per input, parameter, op and the
output, one edge per value with its dtype and shape (symbolic dims by name, ``float32[batch, 4]``).
With ``kernels=True`` a second cluster shows the kernels the compiler fused the program into: one node
per kernel (its ops), edges for the buffers between kernels. :func:`draw` renders to SVG (PNG, PDF: by the
file's suffix) with Graphviz's ``dot`` program when it is installed, and otherwise writes the dot text
next to the requested path (``out.dot``) and says so.

>>> import tensorplay as tp
>>> from tensorplay.export import export
>>> text = to_dot(export(lambda x: (x * 2).exp(), tp.ones(3)))
>>> print("\\n".join(line for line in text.splitlines() if "->" in line))
    g_x -> g_mul [label="float32[3]"];
    g_mul -> g_exp [label="float32[3]"];
    g_exp -> g_output [label="float32[3]"];
"""
from __future__ import annotations

import shutil
import subprocess
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sympy

if TYPE_CHECKING:
    from .exported_program import ExportedProgram

__all__ = ["draw", "to_dot"]

_INPUT_COLORS = {"USER_INPUT": "#dbeafe", "PARAMETER": "#e5e7eb", "BUFFER": "#fef3c7", "CONSTANT_TENSOR": "#e5e7eb",
                 "CUSTOM_OBJ": "#e5e7eb", "TOKEN": "#e5e7eb"}
#: kernel ops that write a buffer operand (by position); every other buffer operand is read
_WRITES = {"kernel.store": (1,), "kernel.store_at": (1,), "kernel.gemm": (2,), "kernel.nonzero": (1,),
           "kernel.random": (1,), "kernel.sort": (1, 2, 3)}
_NOT_COMPUTE = {"kernel.load", "kernel.load_at", "kernel.store", "kernel.store_at", "kernel.for", "kernel.yield",
                "kernel.index", "kernel.constant", "kernel.check_index"}
_MAX_OPS_SHOWN = 6


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _label(*lines: str) -> str:
    """A quoted dot label of several lines."""
    return _quote("\n".join(lines))


def _value_label(value: Any, names: dict | None = None) -> str:
    """``float32[batch, 4]`` for a tensor's meta; the type name for anything else."""
    if isinstance(value, tuple | list):  # an op with several results
        return "(" + ", ".join(_value_label(v, names) for v in value) + ")"
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return "" if value is None else type(value).__name__
    dims = [sympy.sympify(d).subs(names) if names and not isinstance(d, int) else d for d in shape]
    return f"{getattr(dtype, 'name', dtype)}[{', '.join(str(d) for d in dims)}]"


def _target_name(node: Any) -> str:
    target = node.target
    if node.op == "call_method":
        return f".{target}()"
    name = getattr(target, "name", None) or getattr(target, "__name__", None) or str(target)
    module = getattr(target, "__module__", "") or ""
    return f"{'operator.' if module in ('_operator', 'operator') else ''}{name}"


def _graph_lines(program: ExportedProgram) -> list[str]:
    kinds = {spec.arg.name: spec.kind.name for spec in program.graph_signature.input_specs
             if getattr(spec.arg, "name", None)}
    lines = ['  subgraph cluster_graph {', '    label="captured graph"; style=rounded; color="#9ca3af";']
    for node in program.graph.nodes:
        ident = f"g_{node.name}"
        if node.op == "placeholder":
            kind = kinds.get(node.name, "USER_INPUT")
            what = "input" if kind == "USER_INPUT" else kind.lower().replace("_", " ")
            lines.append(f"    {ident} [label={_label(node.name, what)}, shape=ellipse, "
                         f"fillcolor={_quote(_INPUT_COLORS.get(kind, '#e5e7eb'))}];")
        elif node.op == "output":
            lines.append(f'    {ident} [label="output", shape=doubleoctagon, fillcolor="#dcfce7"];')
        else:
            lines.append(f"    {ident} [label={_label(node.name, _target_name(node))}];")
    for node in program.graph.nodes:
        for used in node.all_input_nodes:
            lines.append(f"    g_{used.name} -> g_{node.name} [label={_quote(_value_label(used.meta.get('val')))}];")
    lines.append("  }")
    return lines


def _symbol_names(program: ExportedProgram, function: Any) -> dict:
    """Kernel-level symbols (``s0``) -> the program's names for them (``batch``), read off the inputs."""
    metas = {n.name: n.meta.get("val") for n in program.graph.placeholders}
    names = {}
    for arg in function.args:
        meta = metas.get(arg.name)
        if meta is None or not hasattr(meta, "shape"):
            continue
        for ours, theirs in zip(arg.type.shape, meta.shape, strict=False):
            if isinstance(ours, sympy.Symbol) and isinstance(theirs, sympy.Symbol):
                names[ours] = theirs
    return names


def _kernel_lines(program: ExportedProgram, kernel_text: str) -> list[str]:
    from tensorplay.dialect import parse

    function = parse(kernel_text).functions[0]
    names = _symbol_names(program, function)
    arguments = {id(a): a for a in function.args}
    writer: dict[int, str] = {}  # buffer -> the kernel that last wrote it
    lines = ['  subgraph cluster_kernels {', '    label="native kernels"; style=rounded; color="#9ca3af";']
    for arg in function.args:
        lines.append(f"    k_arg_{arg.name} [label={_quote(arg.name)}, shape=ellipse, fillcolor=\"#dbeafe\"];")
        writer[id(arg)] = f"k_arg_{arg.name}"
    edges = []
    for top in function.body.ops:
        if top.name != "kernel.kernel":
            continue
        ident = f"k_{top.attr.name}"
        reads, writes, ops = {}, {}, []
        for op in top.walk():
            if op is top:
                continue
            if op.name not in _NOT_COMPUTE:
                ops.append(op.name.removeprefix("kernel."))
            written = _WRITES.get(op.name, ())
            for i, value in enumerate(op.operands):
                if hasattr(value.type, "shape") and hasattr(value.type, "dtype") and op.name != "kernel.alloc":
                    (writes if i in written else reads)[id(value)] = value
        shown = ", ".join(dict.fromkeys(ops[:_MAX_OPS_SHOWN])) + (", ..." if len(ops) > _MAX_OPS_SHOWN else "")
        count = f"{len(ops)} op" + ("s" if len(ops) != 1 else "")
        lines.append(f'    {ident} [label={_label(top.attr.name, f"{count}: {shown}")}, fillcolor="#ede9fe"];')
        for key, value in reads.items():
            source = writer.get(key)
            if source is not None and source != ident:
                edges.append(f"    {source} -> {ident} [label={_quote(_value_label(value.type, names))}];")
        for key in writes:
            writer[key] = ident
    for arg in function.args:  # outputs: the kernel that wrote each output argument
        source = writer.get(id(arg))
        if source is not None and source != f"k_arg_{arg.name}":
            lines.append(f"    k_out_{arg.name} [label={_label(arg.name, 'output')}, shape=doubleoctagon, "
                         f'fillcolor="#dcfce7"];')
            edges.append(f"    {source} -> k_out_{arg.name} [label={_quote(_value_label(arg.type, names))}];")
    unused = {f"k_arg_{a.name}" for a in arguments.values() if not any(e.startswith(f"    k_arg_{a.name} ")
                                                                       for e in edges)}
    lines = [line for line in lines if not any(line.startswith(f"    {u} ") for u in unused)]
    return lines + edges + ["  }"]


def to_dot(program: ExportedProgram, *, kernels: bool = False, kernel_text: str | None = None) -> str:
    """The program's graph in Graphviz's dot language; ``kernels=True`` adds the fused native kernels
    (compiling the program, unless its kernel-level IR is given as ``kernel_text``)."""
    lines = ["digraph program {", '  graph [rankdir=TB, fontname="Helvetica", fontsize=11];',
             '  node [shape=box, style="rounded,filled", fillcolor="#f9fafb", fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=9, color="#4b5563"];']
    lines += _graph_lines(program)
    if kernels:
        if kernel_text is None:
            from .native import compile as compile_native
            kernel_text = compile_native(program).ir("kernel")
        lines += _kernel_lines(program, kernel_text)
    lines.append("}")
    return "\n".join(lines) + "\n"


def draw(program: ExportedProgram, path: str | Path, *, kernels: bool = False, kernel_text: str | None = None) -> Path:
    """Draw the program into ``path`` and return the file written.

    ``.dot`` / ``.gv`` get the dot text; other suffixes (``.svg``, ``.png``, ``.pdf``) are rendered by
    Graphviz's ``dot`` program. Without ``dot`` the text goes to ``path`` with the suffix ``.dot`` and a
    warning says how to render it.
    """
    path = Path(path)
    text = to_dot(program, kernels=kernels, kernel_text=kernel_text)
    fmt = path.suffix.lstrip(".").lower() or "svg"
    if fmt in ("dot", "gv"):
        path.write_text(text)
        return path
    dot = shutil.which("dot")
    if dot is None:
        fallback = path.with_suffix(".dot")
        fallback.write_text(text)
        warnings.warn(f"Graphviz's dot program is not installed: wrote the graph as dot text to {fallback} "
                      f"(render it with `dot -T{fmt} {fallback} -o {path}`)", UserWarning, stacklevel=2)
        return fallback
    done = subprocess.run([dot, f"-T{fmt}", "-o", str(path)], input=text, capture_output=True, text=True,
                          timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"dot could not render {path}: {done.stderr.strip() or f'exit status {done.returncode}'}")
    return path
