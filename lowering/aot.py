"""Standalone artifacts from compiled programs: the archive record and the C library bundle.

:func:`artifact_of` turns a :class:`tensorplay.lowering.pipeline.CompiledProgram` into a storable
``tensorplay.runtime.artifact.NativeArtifact`` whose signature meta says how every argument is bound (user
inputs, program weights by placeholder name, inline literals with their bytes, and the output
structure). :func:`build_library` writes ``lib<name>.so``, ``<name>.h`` and ``<name>.tpw`` (the
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
from typing import Any

import numpy as np

__all__ = ["BINDING_KEY", "artifact_of", "build_library", "decode_binding", "held_weights"]

BINDING_KEY = "tensorplay_binding"
_META_KEY = BINDING_KEY


def artifact_of(compiled: Any) -> tuple[Any, str]:
    """``(NativeArtifact, kernel dialect text)`` for a ``CompiledProgram`` built on this host.

    The artifact's signature meta records what each non-user argument is bound to (a program
    weight by placeholder name, or an inline literal with its bytes), so a loader can run it
    with nothing but the program's state.
    """
    from tensorplay.runtime.abi import Signature
    from tensorplay.runtime.artifact import NativeArtifact

    exe = compiled.executable
    sig = exe.signature
    n_user = len(compiled.binding.arguments)
    held = []
    for ref, literal in zip(compiled._held, compiled._literals, strict=True):
        if literal is None:
            held.append({"weight": ref.name})
        else:
            a = np.ascontiguousarray(literal)
            held.append({"literal": {"dtype": a.dtype.str, "shape": list(a.shape),
                                     "data": base64.b64encode(a.tobytes()).decode("ascii")}})
    record: dict[str, Any] = {"user_inputs": n_user, "held": held}
    if compiled._prepack:  # the loader packs these weights once too (tensorplay.lowering.microkernels.gemm_prepack)
        record["pack_sites"] = [[s.index, s.arg, s.k, s.n, s.trans_b] for s in compiled._prepack.sites]
    binding = _encode_binding(compiled.binding)
    if binding is not None:
        record["binding"] = binding
    meta = {**sig.meta, _META_KEY: record}
    signature = Signature(sig.inputs, sig.outputs, sig.assertions, meta)
    artifact = NativeArtifact.from_library(exe.library, exe.prefix, signature)
    return artifact, compiled.ir("kernel")


def _encode_outputs(spec: Any) -> Any:
    from .from_graph.binding import Result

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
    from .from_graph.binding import Result

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


def _encode_binding(binding: Any) -> dict[str, Any] | None:
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


def decode_binding(d: Any) -> Any:
    """The :class:`tensorplay.lowering.from_graph.binding.Binding` stored by :func:`artifact_of`; ValueError if
    malformed."""
    from .from_graph.binding import ArgSource, Binding, Write

    try:
        args = [ArgSource(str(kind), str(name), tuple(key)) for kind, name, key in d["arguments"]]
        writes = [Write(int(result), str(name), tuple(key), int(count))
                  for result, name, key, count in d.get("writes", [])]
        return Binding(args, _decode_outputs(d["outputs"]), dict(d["symbols"]), writes=writes)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"native artifact: malformed binding record: {exc}") from None


def decode_pack_sites(record: Any) -> list[Any]:
    """The :class:`tensorplay.lowering.microkernels.gemm_prepack.PackSite` list an archive stored (``[]`` when none);
    ValueError
    if malformed."""
    from .microkernels.gemm_prepack import PackSite

    try:
        sites = [PackSite(int(i), int(arg), int(k), int(n), bool(t))
                 for i, arg, k, n, t in record.get("pack_sites", [])]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"native artifact: malformed pack site record: {exc}") from None
    if any(min(s.index, s.arg) < 0 or min(s.k, s.n) < 1 for s in sites):
        raise ValueError("native artifact: pack sites need indices >= 0 and extents >= 1")
    return sites


def held_weights(compiled: Any, program: Any = None) -> dict[str, np.ndarray]:
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
        out[spec.name] = np.ascontiguousarray(np.asarray(data))
    return out


def build_library(compiled: Any, out_dir: str | os.PathLike[str], name: str, *, program: Any = None,
                  link: bool = True) -> dict[str, Path]:
    """Write the standalone bundle of ``compiled`` into ``out_dir``; returns its paths by kind
    (``"library"``, ``"header"``, ``"weights"``, ``"artifact"``). ``link=False`` skips the C compiler
    (only header, weights and artifact). Without a C compiler, RuntimeError says what to install."""
    from tensorplay.runtime.standalone import write_bundle

    from .microkernels.gemm_library import configs_of_object, gemm_objects

    artifact, _ = artifact_of(compiled)
    kernels = gemm_objects(configs_of_object(artifact.object))
    return write_bundle(artifact, held_weights(compiled, program), out_dir, name, objects=kernels, link=link)
