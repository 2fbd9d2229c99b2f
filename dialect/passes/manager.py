"""Passes and the pass manager.

A pass is a frozen dataclass with a ``name``, typed options (its fields) and ``apply(module) -> bool``.
The pipeline is a string; options go in braces::

    >>> from tensorplay.dialect.passes import PassManager
    >>> pm = PassManager("canonicalize{max_iterations=5},cse,dce")
    >>> [p.name for p in pm.passes]
    ['canonicalize', 'cse', 'dce']

``verify=True`` verifies after each pass; ``dump`` (a callback ``(pass_name, ir_text)``) or the
environment variable ``TENSORPLAY_DUMP_IR=1`` dumps the IR after each pass; ``timings`` records
``(pass name, seconds, changed)`` per pass.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..ir import Module
from .table import PASSES, pass_class

__all__ = ["ModulePass", "PassManager", "UnknownPassError", "PipelineError", "parse_pipeline"]


class PipelineError(ValueError):
    """A malformed pipeline string or a bad pass option."""


class UnknownPassError(PipelineError):
    """A pipeline names a pass that is not in the pass table; the message lists the known ones."""


@dataclass(frozen=True)
class ModulePass:
    """Base class of passes: subclasses set ``name`` and implement ``apply``."""

    name: ClassVar[str] = ""

    def apply(self, module: Module) -> bool:
        raise NotImplementedError(f"pass {type(self).__name__} does not implement apply")


_KINDS = {"int": int, "bool": bool, "str": str, "float": float}


def _option(cls: type[ModulePass], key: str, text: str) -> Any:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if key not in fields:
        raise PipelineError(f"pass {cls.name!r} has no option {key!r} (options: {', '.join(fields) or 'none'})")
    t = fields[key].type
    kind = t if isinstance(t, type) else _KINDS.get(str(t))
    if kind is None:
        raise PipelineError(f"pass {cls.name!r}: option {key} has unsupported type {t}")
    try:
        if kind is bool:
            if text not in ("true", "false"):
                raise ValueError(text)
            return text == "true"
        return kind(text)
    except ValueError:
        raise PipelineError(f"pass {cls.name!r}: option {key} expects {kind.__name__}, got {text!r}") from None


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth < 0:
                raise PipelineError(f"unbalanced '}}' in pipeline {text!r}")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if depth:
        raise PipelineError(f"unbalanced '{{' in pipeline {text!r}")
    return parts + [cur]


def parse_pipeline(text: str) -> list[ModulePass]:
    """``"canonicalize,cse{...},dce"`` -> pass instances; unknown names list the known passes."""
    out = []
    for item in _split_top(text.strip()):
        item = item.strip()
        if not item:
            raise PipelineError(f"empty pass name in pipeline {text!r}")
        name, _, opts = item.partition("{")
        name = name.strip()
        if name not in PASSES:
            raise UnknownPassError(f"unknown pass {name!r}; known passes: {', '.join(sorted(PASSES))}")
        cls = pass_class(name)
        kwargs = {}
        if opts:
            if not opts.endswith("}"):
                raise PipelineError(f"options of {name!r} must end with '}}': {item!r}")
            for kv in filter(None, (s.strip() for s in opts[:-1].split(","))):
                key, eq, val = kv.partition("=")
                if not eq:
                    raise PipelineError(f"option {kv!r} of {name!r} must look like key=value")
                kwargs[key.strip()] = _option(cls, key.strip(), val.strip())
        out.append(cls(**kwargs))
    return out


def _stderr_dump(name: str, text: str) -> None:
    sys.stderr.write(f"// ----- IR after {name} -----\n{text}")


class PassManager:
    """Runs a pipeline over a module, optionally verifying and dumping the IR after each pass."""

    def __init__(self, pipeline: str | Sequence[ModulePass], verify: bool = False,
                 dump: Callable[[str, str], None] | None = None):
        self.passes = parse_pipeline(pipeline) if isinstance(pipeline, str) else list(pipeline)
        self.verify = verify
        if dump is None and os.environ.get("TENSORPLAY_DUMP_IR", "0") not in ("", "0"):
            dump = _stderr_dump
        self.dump = dump
        self.timings: list[tuple[str, float, bool]] = []

    def run(self, module: Module) -> bool:
        """Apply every pass in order; True if any changed the module."""
        from ..verify import VerificationError, verify
        any_changed = False
        for p in self.passes:
            t0 = time.perf_counter()
            changed = bool(p.apply(module))
            self.timings.append((p.name, time.perf_counter() - t0, changed))
            any_changed |= changed
            if self.verify:
                try:
                    verify(module)
                except VerificationError as e:
                    raise VerificationError([f"after pass {p.name}: {d}" for d in e.diagnostics]) from None
            if self.dump is not None:
                self.dump(p.name, str(module))
        return any_changed
