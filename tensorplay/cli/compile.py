"""Add native code for this host to an archive (every program, or the one named by --model)."""
from __future__ import annotations

import argparse
import os

from ._common import add_archive, compilable, load_archive, pick_model, progress


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_archive(p)
    p.add_argument("-o", "--output", default=None, metavar="OUT.pt2", help="where to write (default: FILE in place)")
    p.add_argument("--threads", type=int, default=None, help="intra-op threads the code is built for")


def execute(args: argparse.Namespace) -> None:
    import tensorplay as tp
    from tensorplay.export import package_pt2
    from tensorplay.export.native_archive import native_files_of

    contents = load_archive(args.file)
    programs = contents.exported_programs
    names = [pick_model(contents, args.model, args.file)] if args.model else sorted(programs)
    options = {} if args.threads is None else {"num_threads": args.threads}
    for name in names:
        with progress(f"compiling {name!r}"):
            compiled = tp.compile(compilable(programs[name]), **options)
        print(f"{name}: {compiled.stats['kernels']} kernels, compiled in {compiled.stats['compile_seconds']:.2f}s")
    files = {name: [(c.artifact, c.dialect, getattr(c, "kernels", None)) for c in runners.values()]
             for name, runners in contents.tp_runners.items()}
    host = native_files_of({n: programs[n] for n in names})
    for name, items in host.items():
        triples = {item[0].triple for item in items}
        files[name] = [it for it in files.get(name, []) if it[0].triple not in triples] + items
    out = args.output or args.file
    tmp = f"{out}.tmp-{os.getpid()}"
    package_pt2(tmp, exported_programs=programs, tp_files=files or None, extra_files=contents.extra_files or None)
    os.replace(tmp, out)
    print(f"wrote {out}")
