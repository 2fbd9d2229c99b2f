"""Import PyTorch programs: ``torch.export`` in, a tensorplay :class:`ExportedProgram` out.

A tour (needs the ``torch`` extra, ``pip install 'tensorplay[torch]'``)::

    import torch, tensorplay as tp
    from tensorplay.export import from_torch

    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU()).eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    prog = from_torch(model, (torch.randn(8, 3),), dynamic_shapes={"input": {0: batch}})
    prog.graph_signature.parameters            # ('0.weight', '0.bias'): PyTorch's state_dict keys
    tp.compile(prog)                           # native code, as for tensorplay's own programs
    prog(tp.randn(5, 3))                       # any batch in [1, 64]

``from_torch(torch_program)`` imports an ``ExportedProgram`` that ``torch.export.export`` (or
``torch.export.load``) gave, before or after ``run_decompositions()``: every ATen node is rebuilt
from tensorplay's op registry through one table (:data:`~.table.ATEN_OPS`), torch's symbols keep
their names and ranges, and its runtime assertions become tensorplay's. Ops the table lacks are
refused all at once with :class:`UnsupportedTorchOpError`; nothing runs on PyTorch.

Importing this package does not import torch; :func:`from_torch` does, on first use.
"""
from __future__ import annotations

from typing import Any

__all__ = ["UnsupportedTorchOpError", "from_torch", "supported_aten_ops"]


class UnsupportedTorchOpError(NotImplementedError):
    """A PyTorch program uses ops (or forms of them) the importer cannot express in tensorplay.

    ``unsupported`` lists ``(ATen op name, user source line)`` for every refused node; the message
    names them all.
    """

    def __init__(self, message: str, unsupported: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.unsupported = list(unsupported or [])


def require_torch() -> Any:
    """The ``torch`` module, or an ImportError saying how to install it."""
    try:
        import torch
    except ImportError as exc:
        raise ImportError("importing PyTorch programs needs PyTorch: pip install 'tensorplay[torch]'") from exc
    return torch


def from_torch(program: Any, args: tuple | None = None, kwargs: dict | None = None,
               dynamic_shapes: Any = None) -> Any:
    """A tensorplay ``ExportedProgram`` computing what the PyTorch ``program`` computes.

    ``program`` is a ``torch.export.ExportedProgram``, or a ``torch.nn.Module`` (or function) that is
    first exported with ``torch.export.export(program, args, kwargs, dynamic_shapes=dynamic_shapes)``
    (torch's argument convention: ``args`` a tuple, torch ``Dim`` objects in ``dynamic_shapes``).
    """
    torch = require_torch()
    from .importer import import_program

    if not isinstance(program, torch.export.ExportedProgram):
        if args is None:
            raise TypeError("from_torch(module, args, ...): give the example arguments as a tuple, as "
                            "torch.export.export takes them")
        if not isinstance(args, tuple):
            raise TypeError(f"from_torch: args must be a tuple (torch.export's convention), got "
                            f"{type(args).__name__}")
        program = torch.export.export(program, args, kwargs, dynamic_shapes=dynamic_shapes)
    elif args is not None or kwargs is not None or dynamic_shapes is not None:
        raise TypeError("from_torch: args, kwargs and dynamic_shapes are for a module; a torch ExportedProgram "
                        "already holds them")
    return import_program(program)


def supported_aten_ops() -> list[str]:
    """Names of the ATen ops (``aten.add.Tensor``) :func:`from_torch` imports, sorted (torch not needed).

    >>> "aten.convolution.default" in supported_aten_ops()
    True
    """
    from .table import ATEN_OPS
    return sorted(k for k in ATEN_OPS if k.startswith("aten."))
