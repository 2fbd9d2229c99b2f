"""Compile progress: every stage of compiling a program, reported as it finishes.

A :class:`CompileProgress` times consecutive stages (:data:`STAGES`: capture, decompose, lower, fuse,
llvm, link). When a stage ends it becomes one INFO record on the ``tensorplay.compile`` logger (a child
of ``tensorplay``, so ``logging.getLogger("tensorplay")`` sees it) carrying the stage name, its counts
and its elapsed time, and one step of a tqdm progress bar when a bar is shown. Nothing is printed unless
logging is configured to show the records (the front end adds a ``NullHandler`` to ``tensorplay``; the
CLI, ``tp.compile(..., verbose=True)`` and ``TENSORPLAY_LOG=info`` configure it).

>>> import logging
>>> progress = CompileProgress("main", stages=("lower", "fuse"))
>>> progress.start("lower")
>>> progress.advance("fuse", tp_ops=12)
>>> [(r.name, r.counts) for r in progress.finish(kernels=2)]
[('lower', {'tp_ops': 12}), ('fuse', {'kernels': 2})]
>>> describe(StageRecord("fuse", 0.25, {"kernels": 2}))
'fuse: 2 kernels, 0.250 s'
"""
from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["STAGES", "LOGGER", "CompileProgress", "StageRecord", "describe", "shows_bar"]

#: Every stage a program goes through, in order: ``capture`` (export, done by the front end),
#: ``decompose`` (the registry's decompositions, inputs made functional), ``lower`` (graph -> ``tp``
#: dialect and its cleanup passes), ``fuse`` (``tp`` -> ``kernel`` loop nests and the memory plan),
#: ``llvm`` (LLVM IR emitted, optimized and compiled to object code, or taken from the disk cache) and
#: ``link`` (object code loaded into memory, constant GEMM weights packed).
STAGES = ("capture", "decompose", "lower", "fuse", "llvm", "link")
#: The stage records' logger.
LOGGER = logging.getLogger("tensorplay.compile")


@dataclass
class StageRecord:
    """One finished stage: its name, elapsed seconds and counts (``{"kernels": 3}``)."""

    name: str
    seconds: float
    counts: dict[str, Any] = field(default_factory=dict)


def describe(record: StageRecord) -> str:
    """The record as one line: ``"fuse: 3 kernels, 0.012 s"`` (``ops_in`` reads "ops in")."""
    counts = ", ".join(f"{v} {k.replace('_', ' ')}" if isinstance(v, int) and not isinstance(v, bool)
                       else f"{k.replace('_', ' ')} {v}" for k, v in record.counts.items())
    return f"{record.name}: {counts + ', ' if counts else ''}{record.seconds:.3f} s"


def shows_bar(logger: logging.Logger = LOGGER, stream: Any = None) -> bool:
    """Whether a progress bar is shown: the records are wanted (``logger`` enabled for INFO), tqdm is
    installed and ``stream`` (default stderr) is a terminal."""
    stream = sys.stderr if stream is None else stream
    if not logger.isEnabledFor(logging.INFO) or not getattr(stream, "isatty", lambda: False)():
        return False
    try:
        import tqdm  # noqa: F401
    except ImportError:
        return False
    return True


class CompileProgress:
    """Times consecutive compile stages of one program (``label`` names it in every record).

    :meth:`start` begins a stage, :meth:`advance` ends the running one with its counts and begins the
    next, :meth:`finish` ends the last one and returns every :class:`StageRecord`. ``bar``: show a tqdm
    bar over ``stages`` (default: :func:`shows_bar`); log lines then print above it.
    """

    def __init__(self, label: str = "program", *, stages: Sequence[str] = STAGES[1:], bar: bool | None = None,
                 stream: Any = None):
        self.label = label
        self.stages = tuple(stages)
        self.records: list[StageRecord] = []
        self._running: tuple[str, float] | None = None
        self._counts: dict[str, Any] = {}
        self._stream = sys.stderr if stream is None else stream
        self._bar = None
        self._redirect: contextlib.ExitStack | None = None
        if bar if bar is not None else shows_bar(LOGGER, self._stream):
            self._open_bar()

    def start(self, stage: str) -> None:
        """Begin ``stage`` (the running stage, if any, ends without counts)."""
        if self._running is not None:
            self._end({})
        self._running = (stage, time.perf_counter())
        if self._bar is not None:
            self._bar.set_description_str(f"{self.label}: {stage}")

    def advance(self, stage: str, **counts: Any) -> None:
        """End the running stage with ``counts`` and begin ``stage``."""
        self._end(counts)
        self.start(stage)

    def note(self, **counts: Any) -> None:
        """Add ``counts`` to the running stage's record (reported when it ends)."""
        if self._running is not None:
            self._counts.update(counts)

    def finish(self, **counts: Any) -> list[StageRecord]:
        """End the running stage with ``counts``, close the bar, return the records of every stage."""
        self._end(counts)
        self.close()
        return self.records

    def close(self) -> None:
        """Close the bar (also when compiling failed part way)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._redirect is not None:
            self._redirect.close()
            self._redirect = None

    def seconds(self) -> dict[str, float]:
        """Elapsed seconds by stage, rounded to 0.1 ms."""
        return {r.name: round(r.seconds, 4) for r in self.records}

    def _end(self, counts: dict[str, Any]) -> None:
        if self._running is None:
            return
        stage, began = self._running
        self._running = None
        record = StageRecord(stage, time.perf_counter() - began, {**self._counts, **counts})
        self._counts = {}
        self.records.append(record)
        LOGGER.info("%s: %s", self.label, describe(record),
                    extra={"stage": stage, "seconds": record.seconds, "counts": record.counts})
        if self._bar is not None:
            self._bar.update(1)

    def _open_bar(self) -> None:
        from tqdm import tqdm
        from tqdm.contrib.logging import logging_redirect_tqdm

        self._redirect = contextlib.ExitStack()
        # loggers printing on the console (tensorplay's, the root's) print above the bar instead of through it
        consoles = [logger for logger in (logging.getLogger("tensorplay"), logging.getLogger())
                    if any(_is_console(h) for h in logger.handlers)]
        if consoles:
            self._redirect.enter_context(logging_redirect_tqdm(consoles))
        self._bar = tqdm(total=len(self.stages), desc=self.label, file=self._stream, unit="stage", leave=False,
                         mininterval=0, bar_format="{desc} {bar} {n_fmt}/{total_fmt} [{elapsed}]")


def _is_console(handler: logging.Handler) -> bool:
    return isinstance(handler, logging.StreamHandler) and getattr(handler, "stream", None) in (sys.stdout, sys.stderr)
