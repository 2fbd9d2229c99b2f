"""The ``tensorplay`` command line (also ``python -m tensorplay``): one module per command.

    tensorplay inspect FILE.pt2 [--ir LEVEL]          programs, signatures, shapes, parameters
    tensorplay compile FILE.pt2 [-o OUT.pt2]          add native code for this host
    tensorplay build FILE.pt2 -o DIR                  lib<name>.so + <name>.h + weights file
    tensorplay run FILE.pt2 [--inputs X.npz] [--shape NAME=SIZE ...]
    tensorplay bench FILE.pt2 [--shape NAME=SIZE ...] [--threads N]

Every failure prints one ``tensorplay: error: ...`` line and exits with status 1 (2 for bad usage).

>>> main(["inspect", "/no/such.pt2"])
1
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import bench, build, compile, import_torch, inspect, run
from ._common import CLIError

__all__ = ["main"]

COMMANDS = {"inspect": inspect, "compile": compile, "build": build, "run": run, "bench": bench, "import": import_torch}


def parser() -> argparse.ArgumentParser:
    """The argument parser with one sub-command per module of :data:`COMMANDS`."""
    p = argparse.ArgumentParser(prog="tensorplay", description="Inspect, compile, build, run and benchmark "
                                "tensorplay .pt2 archives.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in COMMANDS.items():
        doc = (module.__doc__ or name).strip().splitlines()[0]
        cmd = sub.add_parser(name, help=doc, description=doc)
        module.add_arguments(cmd)
        cmd.set_defaults(handler=module.execute)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (errors print one line on stderr)."""
    args = parser().parse_args(argv)
    try:
        args.handler(args)
    except KeyboardInterrupt:
        print("tensorplay: interrupted", file=sys.stderr)
        return 130
    except (CLIError, ValueError, TypeError, KeyError, OSError, RuntimeError, NotImplementedError,
            AssertionError, ImportError) as exc:
        message = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        line = " ".join(message.split()) or type(exc).__name__
        print(f"tensorplay: error: {line}", file=sys.stderr)
        return 1
    return 0
