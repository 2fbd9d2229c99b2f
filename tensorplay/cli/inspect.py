"""Show the programs of an archive: inputs and outputs with symbolic shapes and ranges, parameters, native code,
and (``--graph out.svg``) a picture of the captured graph."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from ._common import CLIError, add_archive, load_archive, pick_model, progress, user_inputs

LEVELS = ("tp", "kernel", "llvm", "asm")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_archive(p)
    p.add_argument("--ir", choices=LEVELS, default=None, metavar="LEVEL",
                   help=f"also print the IR at LEVEL ({', '.join(LEVELS)}); compiles if needed")
    p.add_argument("--graph", default=None, metavar="OUT.svg",
                   help="draw the captured graph with shapes on its edges (Graphviz's dot renders .svg/.png/.pdf; "
                        "without dot, or for .dot, the dot text is written)")
    p.add_argument("--kernels", action="store_true", help="with --graph: draw the fused native kernels too")


def describe(name: str, program: Any, runners: Any) -> list[str]:
    """The lines ``inspect`` prints for one program."""
    lines = [f"program {name!r}"]
    lines.append("  inputs:")
    for arg, meta in user_inputs(program):
        shape = ", ".join(str(d) for d in meta.shape)
        lines.append(f"    {arg}: {str(meta.dtype).replace('tensorplay.', '')}[{shape}]")
    if program.range_constraints:
        lines.append("  dynamic dimensions:")
        for key, r in program.range_constraints.items():
            lo, hi = (r.get("min"), r.get("max")) if isinstance(r, dict) else (r, None)
            lines.append(f"    {key} in [{lo}, {hi if hi is not None else 'inf'}]")
    outs = [s for s in program.graph_signature.output_specs]
    lines.append(f"  outputs: {len(outs)} ({', '.join(s.kind.name.lower() for s in outs)})")
    returned = next(n for n in program.graph.nodes if n.op == "output").args[0]
    for spec, node in zip(outs, returned, strict=False):
        meta = getattr(node, "meta", {}).get("val")
        what = f"{str(meta.dtype).replace('tensorplay.', '')}[{', '.join(str(d) for d in meta.shape)}]" \
            if hasattr(meta, "shape") and hasattr(meta, "dtype") else repr(node)
        kind = "" if spec.kind.name == "USER_OUTPUT" else f" ({spec.kind.name.lower()})"
        lines.append(f"    {getattr(spec.arg, 'name', '?')}: {what}{kind}")
    state = {**program.state_dict, **program.constants}
    count = sum(int(np.prod(t.shape)) for t in state.values() if hasattr(t, "shape"))
    nbytes = sum(int(getattr(t, "_data", np.empty(0)).nbytes) for t in state.values())
    lines.append(f"  parameters and buffers: {len(state)} tensors, {count} values, {nbytes} bytes")
    if runners:
        lines.append("  native code:")
        for triple, code in runners.items():
            why = code.incompatibility
            art = code.artifact
            use = "runs on this host" if why is None else f"not for this host ({why})"
            lines.append(f"    {triple} cpu={art.cpu_name} {len(art.object)} bytes: "
                         + (use if code.trusted else "not trusted: the program compiles here instead"))
    else:
        lines.append("  native code: none (run `tensorplay compile` to add it)")
    return lines


def execute(args: argparse.Namespace) -> None:
    contents = load_archive(args)
    names = [pick_model(contents, args.model, args.file)] if args.model or args.ir else sorted(
        contents.exported_programs)
    if not names:
        raise CLIError(f"{args.file} holds no exported program")
    for name in names:
        print("\n".join(describe(name, contents.exported_programs[name], contents.tp_runners.get(name))))
    if contents.extra_files:
        print(f"extra files: {', '.join(sorted(contents.extra_files))}")
    if args.graph:
        draw_graph(args, contents, names[0] if len(names) == 1 else pick_model(contents, args.model, args.file))
    elif args.kernels:
        raise CLIError("--kernels draws the kernels into the --graph picture; give --graph OUT.svg")
    if args.ir:
        import tensorplay as tp

        program = contents.exported_programs[names[0]]
        runners = contents.tp_runners.get(names[0])
        if args.ir == "kernel" and runners and any(c.dialect for c in runners.values()):
            print(next(c.dialect for c in runners.values() if c.dialect))
            return
        with progress(f"compiling {names[0]!r}"):
            compiled = tp.compile(program)
        print(compiled.ir(args.ir))


def draw_graph(args: argparse.Namespace, contents: Any, name: str) -> None:
    """Write the picture ``--graph`` asks for (``--kernels``: compiling, unless the archive keeps the
    kernel-level IR) and say where it went."""
    import warnings

    from tensorplay.export.draw import draw

    program = contents.exported_programs[name]
    kernel_text = None
    if args.kernels:
        runners = contents.tp_runners.get(name) or {}
        kernel_text = next((c.dialect for c in runners.values() if c.dialect), None)
        if kernel_text is None:
            import tensorplay as tp

            with progress(f"compiling {name!r}"):
                kernel_text = tp.compile(program).ir("kernel")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # said below, in one line
        written = draw(program, args.graph, kernels=args.kernels, kernel_text=kernel_text)
    wanted = Path(args.graph)
    if written != wanted:
        fmt = wanted.suffix.lstrip(".") or "svg"
        print(f"wrote {written}: Graphviz's dot program is not installed, so this is the dot text "
              f"(render it with `dot -T{fmt} {written} -o {wanted}`)")
    else:
        print(f"wrote {written}")
