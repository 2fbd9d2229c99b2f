"""Turn ``kernel.global`` buffers (module weights and inline literals) into input buffer arguments.

For back ends and runtimes that pass every buffer in: the globals become arguments after the
inputs and before the outputs, and the returned list says what each one must hold::

    func @main(%x: buffer<[s0, 4], f32>, %out0: buffer<[s0, 4], f32>) -> () {
      %0 = kernel.global {value = @scale} : buffer<[4], f32>
      ...

becomes ``func @main(%x: ..., %scale: buffer<[4], f32>, %out0: ...)`` with ``[WeightRef("scale")]``.

>>> import numpy as np
>>> from tensorplay.lowering.fusion.fuse import FUSION_PIPELINE
>>> from tensorplay.dialect import parse
>>> from tensorplay.dialect.passes import PassManager
>>> m = parse('''weight @scale : tensor<[4], f32>
... func @main(%x: tensor<[s0, 4], f32>) -> (tensor<[s0, 4], f32>) where {s0 in [1, 8]} {
...   %w = tp.constant {value = @scale} : tensor<[4], f32>
...   %0 = tp.mul %x, %w : tensor<[s0, 4], f32>
...   tp.return %0
... }
... ''')
>>> _ = PassManager(FUSION_PIPELINE).run(m)
>>> f, held = globals_to_args(m.functions[0], num_outputs=1)
>>> [a.name for a in f.args], held
(['x', 'scale', 'out0'], [WeightRef(name='scale')])
"""

from __future__ import annotations

import re

from tensorplay.dialect.attrs import Dense, WeightRef
from tensorplay.dialect.ir import Function

__all__ = ["globals_to_args"]


def _arg_name(value: Dense | WeightRef, k: int, taken: set[str]) -> str:
    base = re.sub(r"\W", "_", value.name) if isinstance(value, WeightRef) else f"const{k}"
    name = base
    while name in taken:
        name = "_" + name
    taken.add(name)
    return name


def globals_to_args(f: Function, num_outputs: int) -> tuple[Function, list[Dense | WeightRef]]:
    """A copy-free rewrite of kernel-level ``f`` (its ops move to the result; do not use ``f`` after).

    ``num_outputs`` trailing arguments of ``f`` are its outputs. Returns the new function and, for each
    new argument in order, the weight reference or literal it must be bound to.
    """
    if not 0 <= num_outputs <= len(f.args):
        raise ValueError(f"num_outputs must be in [0, {len(f.args)}], got {num_outputs}")
    globals_ = [op for op in f.body.ops if op.name == "kernel.global"]
    inputs, outputs = f.args[:len(f.args) - num_outputs], f.args[len(f.args) - num_outputs:]
    taken = {a.name for a in f.args if a.name}
    held = [op.attr.value for op in globals_]
    extra = [(_arg_name(v, k, taken), op.result.type) for k, (v, op) in enumerate(zip(held, globals_))]
    new = Function(f.name, [(a.name, a.type) for a in inputs] + extra + [(a.name, a.type) for a in outputs],
                   f.result_types, f.symbols, f.equalities, f.workspace)
    olds = list(inputs) + [op.result for op in globals_] + list(outputs)
    for old, arg in zip(olds, new.args):
        old.replace_all_uses_with(arg)
    for op in list(f.body.ops):
        f.body.ops.remove(op)
        if op.name != "kernel.global":
            new.body.append(op)
    return new, held
