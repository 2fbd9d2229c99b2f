"""The ``tensorplay`` logger: silent in library use unless asked.

Compiling reports each stage (capture, decompose, lower, fuse, llvm, link) as an INFO record on the
``tensorplay.compile`` logger, with its counts and elapsed time (each pass's time is a DEBUG record).
The package adds a ``NullHandler`` to ``tensorplay``, so nothing is printed unless asked:

- ``TENSORPLAY_LOG=info`` (or ``debug``) prints the records of that level on stderr for the whole
  process (read when ``tensorplay`` is imported);
- ``tp.compile(..., verbose=True)`` prints them while it compiles (:func:`showing`);
- the ``tensorplay`` command line prints them (``-q`` silences them);
- or configure ``logging.getLogger("tensorplay")`` as any other library's logger.

Where records are printed and stderr is a terminal with tqdm installed, a progress bar over the stages
shows too (lines print above it).

>>> import logging, tensorplay as tp
>>> any(isinstance(h, logging.NullHandler) for h in logging.getLogger("tensorplay").handlers)
True
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Iterator

__all__ = ["ENV", "LOGGER", "StderrHandler", "install", "showing"]

ENV = "TENSORPLAY_LOG"
LOGGER = logging.getLogger("tensorplay")
FORMAT = "tensorplay: %(message)s"
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


class StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record arrives (test captures and redirections)."""

    def __init__(self, level: int = logging.NOTSET) -> None:
        super().__init__()
        self.setLevel(level)
        self.setFormatter(logging.Formatter(FORMAT))

    @property
    def stream(self):  # noqa: D102 - the current stderr
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ assigns it
        pass


def install() -> None:
    """Add the ``NullHandler``; with ``TENSORPLAY_LOG`` set, print records of its level on stderr."""
    if not any(isinstance(h, logging.NullHandler) for h in LOGGER.handlers):
        LOGGER.addHandler(logging.NullHandler())
    value = os.environ.get(ENV, "").strip().lower()
    if not value:
        return
    level = _LEVELS.get(value)
    if level is None:
        warnings.warn(f"{ENV} must be one of {sorted(_LEVELS)}, got {value!r}; ignored", stacklevel=3)
        return
    if not any(isinstance(h, StderrHandler) for h in LOGGER.handlers):
        LOGGER.addHandler(StderrHandler())
    LOGGER.setLevel(level)


def _prints(logger: logging.Logger, level: int) -> bool:
    """Whether a record of ``level`` on ``logger`` reaches a handler that outputs something."""
    if not logger.isEnabledFor(level):
        return False
    current: logging.Logger | None = logger
    while current is not None:
        if any(not isinstance(h, logging.NullHandler) and level >= h.level for h in current.handlers):
            return True
        current = current.parent if current.propagate else None
    return False


@contextlib.contextmanager
def showing(enabled: bool = True, level: int = logging.INFO) -> Iterator[None]:
    """Print ``tensorplay`` records of ``level`` on stderr inside the block (nothing changes when
    ``enabled`` is false or logging already prints them)."""
    if not enabled or _prints(LOGGER, level):
        yield
        return
    handler = StderrHandler(level)
    previous = LOGGER.level, LOGGER.propagate
    LOGGER.addHandler(handler)
    LOGGER.propagate = False  # handlers above that do not print this level would print these records
    if not LOGGER.isEnabledFor(level):
        LOGGER.setLevel(level)
    try:
        yield
    finally:
        LOGGER.removeHandler(handler)
        LOGGER.setLevel(previous[0])
        LOGGER.propagate = previous[1]
