"""Run a program on given or random inputs and print each output's shape and a summary."""
from __future__ import annotations

import argparse

import numpy as np

from ._common import (
    add_archive,
    add_shapes,
    flat_outputs,
    load_archive,
    make_inputs,
    parse_shapes,
    pick_model,
    user_inputs,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_archive(p)
    p.add_argument("--inputs", default=None, metavar="FILE.npz", help="input arrays by input name (or arr_0, ...)")
    add_shapes(p)
    p.add_argument("--save", default=None, metavar="OUT.npz", help="also write the outputs to OUT.npz")


def summary(a: np.ndarray) -> str:
    if a.size == 0:
        return "empty"
    if a.dtype.kind in "fc":
        f = a.astype(np.float64)
        return f"mean={f.mean():.6g} std={f.std():.6g} min={f.min():.6g} max={f.max():.6g}"
    return f"min={a.min()} max={a.max()} sum={a.sum()}"


def execute(args: argparse.Namespace) -> None:
    contents = load_archive(args)
    model = pick_model(contents, args.model, args.file)
    program = contents.exported_programs[model]
    inputs = make_inputs(program, parse_shapes(args.shape), args.seed, args.inputs)
    for (name, _), t in zip(user_inputs(program), inputs, strict=True):
        print(f"input {name}: {tuple(t.shape)} {str(t.dtype).replace('tensorplay.', '')}")
    outputs = [np.asarray(getattr(o, "_data", o)) for o in flat_outputs(program(*inputs))]
    for i, a in enumerate(outputs):
        print(f"output {i}: {a.shape} {a.dtype} {summary(a)}")
    if args.save:
        np.savez(args.save, **{f"output_{i}": a for i, a in enumerate(outputs)})
