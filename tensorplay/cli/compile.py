"""Add native code for this host to an archive (every program, or the one named by --model)."""
from __future__ import annotations

import argparse
import os

from ._common import CLIError, add_archive, load_archive, pick_model, progress


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_archive(p)
    p.add_argument("-o", "--output", default=None, metavar="OUT.pt2", help="where to write (default: FILE in place)")
    p.add_argument("--threads", type=int, default=None, help="intra-op threads the code is built for")
    p.add_argument("--sign-key", default=None, metavar="FILE",
                   help="sign the native code with this key (HMAC-SHA256), so loaders trusting it run the code; "
                        "stored code for other targets is kept only if trusted (--trust-native-code, --trusted-key)")


def execute(args: argparse.Namespace) -> None:
    import tensorplay as tp
    from tensorplay.export import package_pt2
    from tensorplay.export.native_archive import native_files_of

    key = None
    if args.sign_key is not None:
        from tensorplay.export.trust import read_key
        try:
            key = read_key(args.sign_key)
        except ValueError as exc:
            raise CLIError(str(exc)) from None
    contents = load_archive(args)
    programs = contents.exported_programs
    names = [pick_model(contents, args.model, args.file)] if args.model else sorted(programs)
    options = {} if args.threads is None else {"num_threads": args.threads}
    for name in names:
        with progress(f"compiling {name!r}"):
            compiled = tp.compile(programs[name], **options)
        print(f"{name}: {compiled.stats['kernels']} kernels, compiled in {compiled.stats['compile_seconds']:.2f}s")
    host = native_files_of({n: programs[n] for n in names})
    files = {name: list(items) for name, items in host.items()}
    for name, runners in contents.tp_runners.items():
        built = {item[0].triple for item in host.get(name, [])}
        for triple, code in runners.items():
            if code.artifact.triple in built:
                continue  # replaced by the code compiled here
            if key is not None and not code.trusted:  # never sign code nobody vouched for
                print(f"{name}: dropped the untrusted stored native code for {triple}")
                continue
            files.setdefault(name, []).append(code)
    out = args.output or args.file
    tmp = f"{out}.tmp-{os.getpid()}"
    package_pt2(tmp, exported_programs=programs, tp_files=files or None, extra_files=contents.extra_files or None,
                sign_key=key)
    os.replace(tmp, out)
    print(f"wrote {out}" + (" (native code signed)" if key is not None else ""))
