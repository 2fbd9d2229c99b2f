"""Standalone artifacts from compiled programs: the archive record and the C library bundle.

:func:`artifact_of` turns a :class:`tensorplay.lowering.pipeline.FreshProgram` into a storable
``tensorplay.runtime.artifact.NativeArtifact`` whose signature meta says how every argument is bound (user
inputs, program weights by placeholder name, inline literals with their bytes, GEMM pack sites and the
output structure); :func:`archive_entry` adds the GEMM kernels' object code. The ``decode_*`` functions
read that record back (:mod:`tensorplay.lowering.loaded` runs archived code with them).
:func:`build_library` writes ``lib<name>.so``, ``<name>.h`` and ``<name>.tpw`` (the
weights file) plus ``<name>.tpa`` (the artifact, loadable from Python with
:class:`tensorplay.runtime.standalone.StandaloneModel`).

>>> import tensorplay as tp, tempfile
>>> from tensorplay.export import export
>>> compiled = tp.compile(export(tp.nn.Linear(3, 2), tp.ones(4, 3)))
>>> out = build_library(compiled, tempfile.mkdtemp(), "linear")        # doctest: +SKIP
>>> sorted(p.name for p in out.values())                                 # doctest: +SKIP
['liblinear.so', 'linear.h', 'linear.tpa', 'linear.tpw']
"""
from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tensorplay.dialect.attrs import WeightRef
from tensorplay.runtime.abi import Signature
from tensorplay.runtime.artifact import NativeArtifact
from tensorplay.runtime.standalone import write_bundle

from .from_graph.binding import ArgSource, Binding, Result, Write
from .fusion.winograd import FILTER_TRANSFORM
from .microkernels.gemm_library import configs_of_object, gemm_objects
from .microkernels.gemm_prepack import PackSite
from .native_program import storage_of
from .pipeline import FreshProgram

if TYPE_CHECKING:
    from tensorplay.export.exported_program import ExportedProgram

__all__ = ["BINDING_KEY", "archive_entry", "artifact_of", "build_library", "decode_binding", "decode_held",
           "decode_pack_sites", "held_weights", "stored_weights"]

BINDING_KEY = "tensorplay_binding"
_META_KEY = BINDING_KEY


def artifact_of(compiled: FreshProgram) -> tuple[NativeArtifact, str]:
    """``(NativeArtifact, kernel dialect text)`` for a program compiled on this host.

    The artifact's signature meta records what each non-user argument is bound to (a program
    weight by placeholder name, or an inline literal with its bytes), so a loader can run it
    with nothing but the program's state.
    """
    exe = compiled.executable
    sig = exe.signature
    n_user = len(compiled.binding.arguments)
    held = []
    for ref, literal in zip(compiled._held, compiled._literals, strict=True):
        if literal is None:
            held.append({"weight": ref.name})
        else:
            a = np.asarray(literal, order="C")  # ascontiguousarray would make 0-d 1-d
            held.append({"literal": {"dtype": a.dtype.str, "shape": list(a.shape),
                                     "data": base64.b64encode(a.tobytes()).decode("ascii")}})
    record: dict[str, Any] = {"user_inputs": n_user, "held": held}
    if compiled._prepack:  # the loader packs these weights once too (tensorplay.lowering.microkernels.gemm_prepack)
        record["pack_sites"] = [[s.index, s.arg, s.k, s.n, s.trans_b, *([s.transform] if s.transform else [])]
                                for s in compiled._prepack.sites]
    binding = _encode_binding(compiled.binding)
    if binding is not None:
        record["binding"] = binding
    meta = {**sig.meta, _META_KEY: record}
    signature = Signature(sig.inputs, sig.outputs, sig.assertions, meta)
    artifact = NativeArtifact.from_library(exe.library, exe.prefix, signature)
    return artifact, compiled.ir("kernel")


def archive_entry(compiled: FreshProgram) -> tuple[NativeArtifact, str, list[bytes]]:
    """``(artifact, kernel dialect text, GEMM kernel objects)``: everything a loader needs to run the
    program without compiling (what an archive stores per target).

    >>> import tensorplay as tp
    >>> from tensorplay.export import export
    >>> artifact, dialect, kernels = archive_entry(tp.compile(export(tp.nn.Linear(3, 2), tp.ones(4, 3))))
    >>> artifact.signature.inputs[0].name, "kernel." in dialect, len(kernels)
    ('input', True, 1)
    """
    artifact, dialect = artifact_of(compiled)
    return artifact, dialect, gemm_objects(configs_of_object(artifact.object))


def _encode_outputs(spec: Any) -> Any:
    if isinstance(spec, Result):
        return {"result": spec.index, "number": spec.number}
    if isinstance(spec, list | tuple):
        return {"list" if isinstance(spec, list) else "tuple": [_encode_outputs(s) for s in spec]}
    if isinstance(spec, dict) and all(isinstance(k, str) for k in spec):
        return {"dict": {k: _encode_outputs(v) for k, v in spec.items()}}
    if spec is None or isinstance(spec, bool | int | float | str):
        return {"value": spec}
    raise TypeError(f"output leaf {type(spec).__name__} is not storable")


def _decode_outputs(d: Any) -> Any:
    if not isinstance(d, dict) or len(d) not in (1, 2):
        raise ValueError(f"native artifact: malformed output structure record {str(d)[:60]!r}")
    if "result" in d:
        if type(d["result"]) is not int or not isinstance(d.get("number"), bool):
            raise ValueError(f"native artifact: malformed result record {d!r}")
        return Result(d["result"], d["number"])
    if "list" in d or "tuple" in d:
        items = [_decode_outputs(x) for x in d.get("list", d.get("tuple"))]
        return items if "list" in d else tuple(items)
    if "dict" in d and isinstance(d["dict"], dict):
        return {k: _decode_outputs(v) for k, v in d["dict"].items()}
    if "value" in d:
        return d["value"]
    raise ValueError(f"native artifact: malformed output structure record {str(d)[:60]!r}")


def _encode_binding(binding: Binding) -> dict[str, Any] | None:
    """The binding as JSON (argument sources and output structure), or None when it holds state or
    values JSON cannot keep (the loader then derives it from the program again)."""
    if binding.state or binding.fixed:
        return None
    try:
        outputs = _encode_outputs(binding.outputs)
    except TypeError:
        return None
    args = [[a.kind, a.name, list(a.key)] for a in binding.arguments]
    writes = [[w.result, w.name, list(w.key), w.count] for w in binding.writes]
    if not all(isinstance(k, int | str) for _, _, key in args for k in key) or \
            not all(isinstance(k, int | str) for _, _, key, _ in writes for k in key):
        return None
    return {"arguments": args, "outputs": outputs, "symbols": dict(binding.symbols), "writes": writes}


def decode_binding(d: Any) -> Binding:
    """The :class:`tensorplay.lowering.from_graph.binding.Binding` stored by :func:`artifact_of`; ValueError if
    malformed."""
    try:
        args = [ArgSource(str(kind), str(name), tuple(key)) for kind, name, key in d["arguments"]]
        writes = [Write(int(result), str(name), tuple(key), int(count))
                  for result, name, key, count in d.get("writes", [])]
        return Binding(args, _decode_outputs(d["outputs"]), dict(d["symbols"]), writes=writes)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"native artifact: malformed binding record: {exc}") from None


def decode_pack_sites(record: Any) -> list[PackSite]:
    """The :class:`tensorplay.lowering.microkernels.gemm_prepack.PackSite` list a binding record holds
    (``[]`` when none; each ``[index, arg, k, n, trans_b]``, then the transform's name for a transformed weight);
    ValueError if malformed."""
    try:
        sites = [PackSite(int(i), int(arg), int(k), int(n), bool(t), *(str(x) for x in transform))
                 for i, arg, k, n, t, *transform in record.get("pack_sites", [])]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"native artifact: malformed pack site record: {exc}") from None
    if any(min(s.index, s.arg) < 0 or min(s.k, s.n) < 1 for s in sites):
        raise ValueError("native artifact: pack sites need indices >= 0 and extents >= 1")
    if any(s.transform not in (None, FILTER_TRANSFORM) for s in sites):
        raise ValueError("native artifact: unknown weight transform in a pack site record")
    return sites


def _decode_literal(d: Any) -> np.ndarray:
    try:
        dtype = np.dtype(d["dtype"])
        shape = tuple(int(s) for s in d["shape"])
        raw = base64.b64decode(d["data"], validate=True)
        return np.frombuffer(raw, dtype).reshape(shape).copy()
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"native artifact: malformed literal argument record: {exc}") from None


def decode_held(signature: Signature) -> tuple[int, list[WeightRef | None], list[np.ndarray | None]]:
    """``(number of user inputs, held, literals)`` from an artifact's signature: argument
    ``n_user + i`` is program weight ``held[i]`` or literal ``literals[i]`` (the other one is None).
    Code without a binding record takes every argument from its caller; ValueError if malformed."""
    meta = signature.meta.get(_META_KEY)
    n_args = len(signature.inputs)
    if meta is None:
        return n_args, [], []
    if not isinstance(meta, dict) or not isinstance(meta.get("user_inputs"), int) or not isinstance(
            meta.get("held"), list) or meta["user_inputs"] + len(meta["held"]) != n_args:
        raise ValueError(f"native artifact: binding record does not match its {n_args} arguments")
    held: list[WeightRef | None] = []
    literals: list[np.ndarray | None] = []
    for h in meta["held"]:
        if isinstance(h, dict) and isinstance(h.get("weight"), str):
            held.append(WeightRef(h["weight"]))
            literals.append(None)
        elif isinstance(h, dict) and "literal" in h:
            held.append(None)
            literals.append(_decode_literal(h["literal"]))
        else:
            raise ValueError(f"native artifact: unknown argument record {h!r}")
    return meta["user_inputs"], held, literals


def stored_weights(signature: Signature, program: ExportedProgram) -> dict[str, np.ndarray] | None:
    """Values of every non-user argument of stored code by signature name, from ``program``'s current
    state and the stored literals; None when the code has no binding record."""
    if _META_KEY not in signature.meta:
        return None
    n_user, held, literals = decode_held(signature)
    target = {spec.arg.name: spec.target for spec in program.graph_signature.input_specs if spec.target}
    values = {**program.state_dict, **program.constants}
    return {spec.name: literal if literal is not None else storage_of(values[target[ref.name]])
            for spec, ref, literal in zip(signature.inputs[n_user:], held, literals, strict=True)}


def held_weights(compiled: FreshProgram, program: ExportedProgram | None = None) -> dict[str, np.ndarray]:
    """Values of every non-user argument by signature name: program weights (current values when
    ``program`` is given, else those seen at compile time) and inline literals."""
    sig = compiled.executable.signature
    specs = sig.inputs[len(compiled.binding.arguments):]
    live = compiled.state_of(program) if program is not None else {}
    out = {}
    for spec, ref, literal in zip(specs, compiled._held, compiled._literals, strict=True):
        if literal is not None:
            out[spec.name] = literal
            continue
        value = live.get(ref.name, compiled.binding.weights.get(ref.name))
        if value is None:
            raise KeyError(f"no value for weight {ref.name!r}")
        data = getattr(value, "_data", value)
        out[spec.name] = np.asarray(data, order="C")  # 0-d stays 0-d
    return out


def build_library(compiled: FreshProgram, out_dir: str | os.PathLike[str], name: str, *,
                  program: ExportedProgram | None = None, link: bool = True) -> dict[str, Path]:
    """Write the standalone bundle of ``compiled`` into ``out_dir``; returns its paths by kind
    (``"library"``, ``"header"``, ``"weights"``, ``"artifact"``). ``link=False`` skips the C compiler
    (only header, weights and artifact). Without a C compiler, RuntimeError says what to install."""
    artifact, _, kernels = archive_entry(compiled)
    return write_bundle(artifact, held_weights(compiled, program), out_dir, name, objects=kernels, link=link)
