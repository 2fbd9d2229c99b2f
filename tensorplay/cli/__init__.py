"""The ``tensorplay`` command line (also ``python -m tensorplay``): one module per command.

    tensorplay inspect FILE.pt2 [--ir LEVEL]          programs, signatures, shapes, parameters
    tensorplay compile FILE.pt2 [-o OUT.pt2]          add native code for this host
    tensorplay build FILE.pt2 -o DIR                  lib<name>.so + <name>.h + weights file
    tensorplay run FILE.pt2 [--inputs X.npz] [--shape NAME=SIZE ...]
    tensorplay bench FILE.pt2 [--shape NAME=SIZE ...] [--threads N]

Every failure prints one ``tensorplay: error: ...`` line and exits with status 1 (2 for bad usage); a
closed pipe (``tensorplay inspect m.pt2 | head -1``) ends quietly with status 141. Compiling reports its
stages on stderr (a progress bar too, with tqdm installed) when stderr is a terminal or with ``-v``;
``-q`` keeps it quiet, and ``TENSORPLAY_LOG=info`` asks for the stages everywhere.

>>> main(["inspect", "/no/such.pt2"])
1
"""
from __future__ import annotations

import argparse
import logging
import os
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
    verbosity = argparse.ArgumentParser(add_help=False)
    loud = verbosity.add_mutually_exclusive_group()
    loud.add_argument("-v", "--verbose", action="store_true", help="report the compile stages (also when piped)")
    loud.add_argument("-q", "--quiet", action="store_true", help="report no compile stages")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in COMMANDS.items():
        doc = (module.__doc__ or name).strip().splitlines()[0]
        cmd = sub.add_parser(name, help=doc, description=doc, parents=[verbosity])
        module.add_arguments(cmd)
        cmd.set_defaults(handler=module.execute)
    return p


def _reports_stages(args: argparse.Namespace) -> bool:
    """Whether compile stages are printed: ``-v``, else not with ``-q``, else on a terminal (or as
    ``TENSORPLAY_LOG`` says)."""
    if args.verbose or args.quiet:
        return args.verbose
    if os.environ.get("TENSORPLAY_LOG"):
        return logging.getLogger("tensorplay").isEnabledFor(logging.INFO)
    return sys.stderr.isatty()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (errors print one line on stderr)."""
    from tensorplay._logging import showing

    args = parser().parse_args(argv)
    try:
        with showing(_reports_stages(args)):
            args.handler(args)
            sys.stdout.flush()  # a closed pipe shows here, inside the handlers below
    except KeyboardInterrupt:
        print("tensorplay: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as other command-line tools do
        try:  # the interpreter's last flush of stdout must not fail again
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError):  # stdout is not a file (a test's capture)
            pass
        return 141
    except (CLIError, ValueError, TypeError, KeyError, OSError, RuntimeError, NotImplementedError,
            AssertionError, ImportError) as exc:
        message = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        line = " ".join(message.split()) or type(exc).__name__
        print(f"tensorplay: error: {line}", file=sys.stderr)
        return 1
    return 0
