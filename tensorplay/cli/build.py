"""Build a standalone library from an archive: lib<name>.so, <name>.h and the <name>.tpw weights file."""
from __future__ import annotations

import argparse
import re

from ._common import CLIError, add_archive, load_archive, pick_model, progress


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_archive(p)
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="directory to write the bundle into")
    p.add_argument("--name", default=None, help="C name of the model (default: the program name)")


def execute(args: argparse.Namespace) -> None:
    import tensorplay as tp
    from tensorplay.export.native_archive import bundle_parts
    from tensorplay.lowering.api import build_library, find_c_compiler, write_bundle

    find_c_compiler()  # fail first, with what to install, before any work
    contents = load_archive(args)
    model = pick_model(contents, args.model, args.file)
    name = args.name or re.sub(r"\W", "_", model)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", name):
        raise CLIError(f"--name must be a C identifier, got {name!r}")
    program = contents.exported_programs[model]
    stored = bundle_parts(contents.tp_runners[model]) if model in contents.tp_runners else None
    if stored is not None and stored[2]:
        artifact, weights, kernels = stored
        with progress(f"linking lib{name}.so"):
            paths = write_bundle(artifact, weights, args.output, name, objects=kernels)
        print(f"used the archive's native code for {artifact.cpu_name} (no compilation)")
    else:
        with progress(f"compiling {model!r}"):
            compiled = tp.compile(program)
        with progress(f"linking lib{name}.so"):
            paths = build_library(compiled, args.output, name, program=program)
    for kind in ("library", "header", "weights", "artifact", "objects"):
        print(f"{kind:9} {paths[kind]}")
