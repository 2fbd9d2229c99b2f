"""Import a PyTorch program (an archive written by torch.export.save) into a tensorplay archive."""
from __future__ import annotations

import argparse
import os

from ._common import CLIError, progress


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="TORCH_PROGRAM.pt2", help="an archive written by torch.export.save")
    p.add_argument("-o", "--output", required=True, metavar="OUT.pt2", help="the tensorplay archive to write")
    p.add_argument("--name", default="model", help="the program's name in the archive (default: model)")
    p.add_argument("--compile", action="store_true", help="also store native code for this host, as "
                   "`tensorplay compile` does")
    p.add_argument("--threads", type=int, default=None, help="intra-op threads the code is built for")


def execute(args: argparse.Namespace) -> None:
    import tensorplay as tp
    from tensorplay.export import from_torch, package_pt2
    from tensorplay.export.from_torch import require_torch
    from tensorplay.export.native_archive import native_files_of
    from tensorplay.export.pt2_archive import is_pt2_package

    torch = require_torch()
    if not os.path.isfile(args.file):
        raise CLIError(f"no such file: {args.file}")
    if is_pt2_package(args.file):
        raise CLIError(f"{args.file} is a tensorplay archive already (import takes one written by torch.export.save)")
    try:
        with progress(f"loading {args.file}"):
            torch_program = torch.export.load(args.file)
    except Exception as exc:  # torch raises many kinds for a file that is not its archive
        raise CLIError(f"{args.file} is not an archive written by torch.export.save: {' '.join(str(exc).split())}") \
            from None
    with progress("importing"):
        program = from_torch(torch_program)
    files = None
    if args.compile:
        options = {} if args.threads is None else {"num_threads": args.threads}
        with progress(f"compiling {args.name!r}"):
            compiled = tp.compile(program, **options)
        print(f"{args.name}: {compiled.stats['kernels']} kernels, compiled in "
              f"{compiled.stats['compile_seconds']:.2f}s")
        files = native_files_of({args.name: program}) or None
    tmp = f"{args.output}.tmp-{os.getpid()}"
    package_pt2(tmp, exported_programs={args.name: program}, tp_files=files)
    os.replace(tmp, args.output)
    print(f"wrote {args.output}")
