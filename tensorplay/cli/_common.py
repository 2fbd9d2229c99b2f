"""Shared pieces of the commands: archive loading, shape options, inputs, progress on a terminal."""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np


class CLIError(Exception):
    """A user mistake the command line reports as one line."""


def add_archive(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE.pt2", help="a tensorplay archive (tensorplay.export.save / package_pt2)")
    p.add_argument("--model", default=None, help="program name inside the archive (default: the only one)")
    p.add_argument("--trust-native-code", action="store_true", default=None,
                   help="run the archive's stored native code (default: compile the program here; also "
                        "TENSORPLAY_TRUST_NATIVE_CODE=1)")
    p.add_argument("--trusted-key", action="append", default=None, metavar="FILE",
                   help="run stored native code signed with this key (repeatable; also TENSORPLAY_TRUSTED_KEYS)")


def load_archive(args: argparse.Namespace, **options: Any) -> Any:
    """``load_pt2(args.file)`` trusting what the command line says, with a one-line error for missing or
    malformed files."""
    from tensorplay.export import load_pt2

    path = args.file
    if not os.path.exists(path):
        raise CLIError(f"no such file: {path}")
    if os.path.isdir(path):
        raise CLIError(f"{path} is a directory, expected a .pt2 archive")
    try:
        return load_pt2(path, trust_native_code=args.trust_native_code, trusted_keys=args.trusted_key, **options)
    except (ValueError, KeyError, TypeError) as exc:
        raise CLIError(f"{path} is not a valid tensorplay archive: {exc}") from None


def pick_model(contents: Any, name: str | None, path: str) -> str:
    models = sorted(contents.exported_programs)
    if name is not None:
        if name not in models:
            raise CLIError(f"{path} has no program {name!r}; it has {models}")
        return name
    if not models:
        raise CLIError(f"{path} holds no exported program")
    if len(models) > 1:
        raise CLIError(f"{path} holds several programs {models}; choose one with --model")
    return models[0]


def add_shapes(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shape", action="append", default=[], metavar="NAME=SIZE",
                   help="value of a dynamic dimension, by its Dim name (repeatable)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")


def parse_shapes(items: list[str]) -> dict[str, int]:
    """``["batch=4"]`` -> ``{"batch": 4}``; a malformed item is a CLIError."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip().lstrip("-").isdigit():
            raise CLIError(f"--shape expects NAME=SIZE with an integer SIZE, got {item!r}")
        size = int(value)
        if size < 0:
            raise CLIError(f"--shape {name}: a size must be >= 0, got {size}")
        out[name.strip()] = size
    return out


def user_inputs(program: Any) -> list[tuple[str, Any]]:
    """``(placeholder name, TensorMeta)`` of every user input, in call order."""
    nodes = {n.name: n for n in program.graph.placeholders}
    out = []
    for spec in program.graph_signature.input_specs:
        if spec.kind.name == "USER_INPUT":
            meta = nodes[spec.arg.name].meta.get("val")
            if meta is None or not hasattr(meta, "shape"):
                raise CLIError(f"input {spec.arg.name!r} is not a tensor; the command line feeds tensors only")
            out.append((spec.arg.name, meta))
    return out


def symbol_values(program: Any, given: dict[str, int]) -> dict[str, int]:
    """A size for every dynamic dimension: ``--shape`` values, else the example inputs' sizes."""
    import sympy

    ranges = program.range_constraints
    unknown = sorted(set(given) - {str(k) for k in ranges})
    if unknown:
        raise CLIError(f"--shape names {unknown} are not dynamic dimensions of this program; "
                       f"its dimensions are {sorted(str(k) for k in ranges) or 'all static'}")
    values: dict[str, int] = {}
    examples = getattr(program, "example_inputs", {}) or {}
    for name, meta in user_inputs(program):
        example = examples.get(name)
        for axis, d in enumerate(meta.shape):
            if isinstance(d, sympy.Symbol) and str(d) not in values and example is not None:
                values[str(d)] = int(example.shape[axis])
    for key, r in ranges.items():
        lo = r.get("min", 1) if isinstance(r, dict) else 1
        values.setdefault(str(key), max(int(lo or 1), 1))
    values.update(given)
    for key, r in ranges.items():
        v = values[str(key)]
        lo, hi = (r.get("min"), r.get("max")) if isinstance(r, dict) else (None, None)
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            raise CLIError(f"--shape {key}={v} is outside its range [{lo}, {hi}]")
    return values


def make_inputs(program: Any, shapes: dict[str, int], seed: int, npz: str | None = None) -> list[Any]:
    """Tensors for every user input: from ``npz`` (by input name, else in order), else random."""

    import tensorplay as tp

    specs = user_inputs(program)
    if npz is not None:
        if not os.path.exists(npz):
            raise CLIError(f"no such inputs file: {npz}")
        try:
            with np.load(npz, allow_pickle=False) as data:
                arrays = dict(data)
        except (ValueError, OSError) as exc:
            raise CLIError(f"{npz} is not a readable .npz file: {exc}") from None
        keys = list(arrays)
        out = []
        for i, (name, meta) in enumerate(specs):
            key = name if name in arrays else keys[i] if i < len(keys) and keys[i].startswith("arr_") else None
            if key is None:
                raise CLIError(f"{npz} has no array for input {name!r} (it has {keys})")
            a = arrays[key]
            if a.ndim != len(meta.shape):
                raise CLIError(f"input {name!r} must have rank {len(meta.shape)}, {npz} gives shape {a.shape}")
            out.append(tp.tensor(a.astype(str(meta.dtype).replace("tensorplay.", ""), copy=False)))
        return out
    values = symbol_values(program, shapes)
    rng = np.random.default_rng(seed)
    out = []
    for _, meta in specs:
        dims = [_size(d, values) for d in meta.shape]
        dtype = np.dtype(str(meta.dtype).replace("tensorplay.", "").replace("bfloat16", "float32"))
        if dtype.kind == "f":
            a = rng.standard_normal(dims).astype(dtype)
        elif dtype.kind == "b":
            a = rng.integers(0, 2, dims).astype(bool)
        else:
            a = rng.integers(0, 10, dims).astype(dtype)
        out.append(tp.tensor(a))
    return out


def _size(d: Any, values: dict[str, int]) -> int:
    import sympy

    expr = sympy.sympify(d)
    return int(expr.subs({s: values[str(s)] for s in expr.free_symbols if str(s) in values}))


def flat_outputs(result: Any) -> list[Any]:
    from tensorplay.graph._pytree import tree_flatten

    leaves, _ = tree_flatten(result)
    return leaves


@contextlib.contextmanager
def progress(label: str, stream: Any = None) -> Iterator[None]:
    """Show ``label`` with the elapsed time on a terminal while the block runs (silent when piped). When
    the compile stages are reported (``tensorplay -v``, a terminal), ``label`` and its time are INFO records
    around them instead of a spinner."""
    import logging

    logger = logging.getLogger("tensorplay.cli")
    if logger.isEnabledFor(logging.INFO):
        start = time.perf_counter()
        logger.info("%s ...", label)
        yield
        logger.info("%s: done in %.1f s", label, time.perf_counter() - start)
        return
    stream = stream or sys.stderr
    if not getattr(stream, "isatty", lambda: False)():
        yield
        return
    done = threading.Event()
    start = time.perf_counter()

    def tick() -> None:
        frames = "|/-\\"
        i = 0
        while not done.wait(0.2):
            stream.write(f"\r{frames[i % 4]} {label} {time.perf_counter() - start:5.1f}s")
            stream.flush()
            i += 1

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        stream.write(f"\r{label} done in {time.perf_counter() - start:.1f}s\n")
        stream.flush()
