"""Capture models as exported programs (``tensorplay.export``).

A tour: declare which sizes vary, capture, inspect, call.

>>> import tensorplay as tp
>>> from tensorplay.export import Dim, export
>>> model = tp.nn.Sequential(tp.nn.Linear(3, 4), tp.nn.ReLU())
>>> batch = Dim("batch", min=1, max=64)
>>> prog = export(model, tp.ones(8, 3), dynamic_shapes={"input": {0: batch}})
>>> [n.name for n in prog.graph.placeholders]
['p_0_weight', 'p_0_bias', 'input']
>>> prog.graph_signature.parameters
('0.weight', '0.bias')
>>> tuple(prog(tp.ones(5, 3)).shape)                  # any batch in [1, 64]
(5, 4)
>>> tuple(prog.module()(tp.ones(2, 3)).shape)         # the unlifted nn.Module view
(2, 4)

Guards that Python control flow puts on a named ``Dim`` either hold for its whole range or
export fails with ``ConstraintsExceededError`` and ``Suggested fixes:`` that
:func:`refine_dynamic_shapes_from_suggested_fixes` applies to the spec.
"""
from __future__ import annotations

import importlib
from typing import Any

from .draft_export import draft_export
from .dynamic_shapes import (
    Constraint,
    ConstraintsExceededError,
    DerivedDim,
    Dim,
    dims,
    refine_dynamic_shapes_from_suggested_fixes,
)
from .exported_program import EqualityConstraint, ExportedProgram, ModuleCallEntry, ModuleCallSignature
from .exporter import export, export_for_training, export_joint
from .graph_signature import (
    ArgumentSpec,
    ConstantArgument,
    CustomObjArgument,
    ExportBackwardSignature,
    ExportGraphSignature,
    GraphSignature,
    InputKind,
    InputSpec,
    OutputKind,
    OutputSpec,
    SymBoolArgument,
    SymFloatArgument,
    SymIntArgument,
    TensorArgument,
    TokenArgument,
)
from .shapes_collection import AdditionalInputs, ShapesCollection

__all__ = [
    "AdditionalInputs", "ArgumentSpec", "ConstantArgument", "Constraint", "ConstraintsExceededError",
    "CustomDecompTable", "CustomObjArgument", "DerivedDim", "Dim", "EqualityConstraint", "ExportBackwardSignature",
    "ExportGraphSignature", "ExportedProgram", "FlatArgsAdapter", "GraphSignature", "InputKind", "InputSpec",
    "ModuleCallEntry", "ModuleCallSignature", "OutputKind", "OutputSpec", "PT2ArchiveContents", "ShapesCollection",
    "SymBoolArgument", "SymFloatArgument", "SymIntArgument", "TensorArgument", "TokenArgument",
    "UnflattenedModule", "UnsupportedTorchOpError", "WeightType", "default_decompositions", "dims", "draft_export",
    "export", "export_for_training", "from_torch", "refine_dynamic_shapes_from_suggested_fixes", "register_dataclass",
    "save", "load", "unflatten",
]

# Names defined by sibling modules, resolved on first use (the first candidate module that defines it).
_LAZY: dict[str, tuple[str, ...]] = {
    "CustomDecompTable": ("decomp",), "default_decompositions": ("decomp",),
    "FlatArgsAdapter": ("unflatten",), "UnflattenedModule": ("unflatten",),
    "register_dataclass": ("custom_obj",), "unflatten": ("unflatten",),
    "PT2ArchiveContents": ("pt2_archive",), "WeightType": ("pt2_archive",),
    "save": ("save_load",), "load": ("save_load",),
    "package_pt2": ("save_load",), "load_pt2": ("save_load",),
    "lower": ("native",),
}


def _load_unflatten() -> None:
    """Bind ``unflatten`` and ``from_torch`` to the functions (the submodules of the same names would shadow
    them; neither import is heavy: ``from_torch`` imports torch only when called)."""
    globals()["unflatten"] = importlib.import_module(f"{__name__}.unflatten").unflatten
    importer = importlib.import_module(f"{__name__}.from_torch")
    globals()["from_torch"] = importer.from_torch
    globals()["UnsupportedTorchOpError"] = importer.UnsupportedTorchOpError


def __getattr__(name: str) -> Any:
    for module_name in _LAZY.get(name, ()):
        module = importlib.import_module(f"{__name__}.{module_name}")
        if hasattr(module, name):
            value = getattr(module, name)
            globals()[name] = value
            return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | {"package_pt2", "load_pt2"})


_load_unflatten()
