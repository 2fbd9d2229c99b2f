"""Experimental helpers on exported programs.

>>> import tensorplay as tp
>>> from tensorplay.export import export
>>> def f(items):
...     items[0].add_(1)
...     return items[1] * 2
>>> items = [tp.ones(2), tp.ones(2)]
>>> prog = export(f, items)
>>> update_tensor_list_mutable(prog, [items[0]]) is prog
True
"""
from __future__ import annotations

from typing import Any

from .exported_program import ExportedProgram
from .graph_signature import OutputKind

__all__ = ["update_tensor_list_mutable"]


def update_tensor_list_mutable(ep: ExportedProgram, mutable_from_list: list | tuple | None = None) -> ExportedProgram:
    """Check that every input container the program mutates is covered by ``mutable_from_list``.

    For each ``USER_INPUT_MUTATION`` output naming an input container of ``ep.example_inputs``, at
    least one element of that example container must be (by identity) in ``mutable_from_list``;
    otherwise ``ValueError``. Returns ``ep`` unchanged (``None`` skips the check).
    """
    if mutable_from_list is None:
        return ep
    if not isinstance(mutable_from_list, list | tuple):
        raise TypeError(f"mutable_from_list must be a list or tuple of tensors, got "
                        f"{type(mutable_from_list).__name__}")
    allowed = {id(t) for t in mutable_from_list}
    for spec in ep.graph_signature.output_specs:
        if spec.kind is not OutputKind.USER_INPUT_MUTATION:
            continue
        container: Any = ep.example_inputs.get(spec.target)
        if not isinstance(container, list | tuple | dict):
            continue
        items = container.values() if isinstance(container, dict) else container
        if not any(id(item) in allowed for item in items):
            raise ValueError(f"input {spec.target!r} is mutated by the program, but none of its elements is in "
                             f"mutable_from_list")
    return ep
