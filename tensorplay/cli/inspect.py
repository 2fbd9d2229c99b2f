"""Show the programs of an archive: signature, inputs with symbolic shapes and ranges, parameters, native code."""
from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from ._common import CLIError, add_archive, compilable, load_archive, pick_model, progress, user_inputs

LEVELS = ("tp", "kernel", "llvm", "asm")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_archive(p)
    p.add_argument("--ir", choices=LEVELS, default=None, metavar="LEVEL",
                   help=f"also print the IR at LEVEL ({', '.join(LEVELS)}); compiles if needed")


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
    if args.ir:
        import tensorplay as tp

        program = contents.exported_programs[names[0]]
        runners = contents.tp_runners.get(names[0])
        if args.ir == "kernel" and runners and any(c.dialect for c in runners.values()):
            print(next(c.dialect for c in runners.values() if c.dialect))
            return
        with progress(f"compiling {names[0]!r}"):
            compiled = tp.compile(compilable(program))
        print(compiled.ir(args.ir))
