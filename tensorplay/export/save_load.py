"""``save`` / ``load`` / ``package_pt2`` / ``load_pt2``: exported programs in ``.pt2`` archives, without pickle.

>>> import io, tensorplay as tp
>>> from tensorplay.export import Dim, export, load, save
>>> ep = export(tp.nn.Linear(3, 2), tp.ones(4, 3), dynamic_shapes={"input": {0: Dim("batch")}})
>>> buf = io.BytesIO()
>>> save(ep, buf, extra_files={"note.txt": "hello"})
>>> extra = {}
>>> loaded = load(buf, extra_files=extra)
>>> extra, tuple(loaded(tp.ones(7, 3)).shape), type(loaded.state_dict["weight"]).__name__
({'note.txt': 'hello'}, (7, 2), 'Parameter')

A program becomes one JSON document (:func:`program_to_document`: graph, signature, state
records, example inputs, dynamic shapes, constraints, module call graph, graph-module meta) plus
tensor payloads in three groups (weights, constants, sample inputs). See
:mod:`tensorplay.export.pt2_archive` for the zip layout and what loading checks.
"""
from __future__ import annotations

import json
import operator
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

import sympy

from .._tensor import Tensor
from ..graph import Node
from ..graph._pytree import TreeSpec
from . import serde
from .pt2_archive import (
    ExtraFiles,
    NativeCode,
    PT2ArchiveContents,
    PT2ArchiveReader,
    PT2ArchiveWriter,
    check_entry_name,
    check_tensor_entry,
    decode_tensor,
    encode_tensor,
    tensor_entry,
    weight_type_of,
)
from .serde import (
    GROUPS,
    SCHEMA_VERSION,
    SymbolTable,
    TensorTable,
    ValueDecoder,
    arg_from_doc,
    arg_to_doc,
    decode_graph,
    encode_graph,
    encode_value,
    is_state_path,
    malformed,
)
from .trust import NATIVE_FILES, SEAL_FILE, Trust, make_seal, read_key, verify_seal

__all__ = ["document_to_program", "load", "load_pt2", "package_pt2", "program_to_document", "save"]

_MODEL_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_TRIPLE = re.compile(r"^[A-Za-z0-9_.\-]+$")
NATIVE_FORMAT = "tensorplay.native.v1"


def _exported_program_type() -> type:
    from .exported_program import ExportedProgram
    return ExportedProgram


def _check_opset(opset_version: Any, what: str) -> None:
    if opset_version is not None and (not isinstance(opset_version, dict) or not all(
            isinstance(k, str) and type(v) is int for k, v in opset_version.items())):
        raise TypeError(f"{what} must be None or a dict str -> int, got {opset_version!r}")


def _check_protocol(pickle_protocol: Any) -> None:
    if type(pickle_protocol) is not int:  # accepted for compatibility; archives never contain pickle
        raise TypeError(f"pickle_protocol must be an int, got {type(pickle_protocol).__name__}")


# ------------------------------------------------------------------------------------ programs <-> documents

PROGRAM_FORMAT = "tensorplay.exported_program"


def _tensorplay_version() -> str:
    import tensorplay
    return str(getattr(tensorplay, "__version__", "unknown"))


def _is_weight(spec: Any) -> bool:
    from .graph_signature import InputKind
    return spec.kind is InputKind.PARAMETER or (spec.kind is InputKind.BUFFER and bool(spec.persistent))


def program_to_document(ep: Any, opset_version: dict[str, int] | None = None,
                        keyed: bool = False) -> tuple[dict, dict[str, list]]:
    """``(document, {group: [tensors]})`` for an ``ExportedProgram``; payload ``i`` of a group is tensor ``i``.

    Groups: ``weights`` (parameters, persistent buffers), ``constants`` (lifted constants,
    non-persistent buffers, tensors inside the graph) and ``sample_inputs`` (example inputs).
    ``keyed``: the form :func:`tensorplay.lowering.program_cache.program_key` hashes, without what no compiler stage
    reads (the nodes' ``stack_trace`` and ``nn_module_stack``, the module call graph); it is never decoded.
    """
    from ..nn import Parameter
    from .graph_signature import InputKind

    _check_opset(opset_version, "opset_version")
    tables = {g: TensorTable() for g in GROUPS}
    symbols = SymbolTable()
    enc = lambda v, group, where: encode_value(v, tables[group], symbols, where)  # noqa: E731
    sig = ep.graph_signature
    state = []
    for spec in sig.input_specs:
        if spec.kind is InputKind.CUSTOM_OBJ:
            raise ValueError(f"cannot save input {spec.arg.name!r}: custom objects have no archive form")
        if spec.kind in (InputKind.USER_INPUT, InputKind.TOKEN):
            continue
        value = ep._state_value(spec.target)
        if not isinstance(value, Tensor):
            raise ValueError(f"cannot save state {spec.target!r}: expected a Tensor, got {type(value).__name__}")
        group = "weights" if _is_weight(spec) else "constants"
        state.append({"target": spec.target, "group": group, "ref": tables[group].add(value),
                      "weight_type": int(weight_type_of(spec)), "parameter": isinstance(value, Parameter)})
    gm = ep.graph_module
    meta = {}
    for key, value in gm.meta.items():
        if key == "constants":
            continue  # rebuilt from the state records
        if key == "shape_env":
            value = _shape_env_to_value(value)
        meta[key] = enc(value, "constants", f"graph_module.meta[{key!r}]")
    doc = {
        "format": PROGRAM_FORMAT,
        "schema_version": SCHEMA_VERSION,
        "producer": f"tensorplay {_tensorplay_version()}",  # informational: which build wrote the archive
        "opset_version": dict(opset_version or {}),
        "graph": encode_graph(ep.graph, tables["constants"], symbols, *((("val",),) if keyed else ())),
        "graph_attrs": enc(dict(gm._graph_attrs), "constants", "graph constants"),
        "input_specs": [{"kind": s.kind.name, "arg": arg_to_doc(s.arg, enc), "target": s.target,
                         "persistent": s.persistent} for s in sig.input_specs],
        "output_specs": [{"kind": s.kind.name, "arg": arg_to_doc(s.arg, enc), "target": s.target}
                         for s in sig.output_specs],
        "state": state,
        "meta": meta,
        "example_inputs": enc(dict(ep.example_inputs), "sample_inputs", "example_inputs"),
        "dynamic_shapes": enc(dict(ep.dynamic_shapes), "constants", "dynamic_shapes"),
        "range_constraints": enc(dict(ep.range_constraints), "constants", "range_constraints"),
        "equality_constraints": [{"sites": enc(tuple(c.sites), "constants", "equality_constraints"),
                                  "name": c.name} for c in ep.equality_constraints],
        "module_call_graph": [] if keyed else [_call_entry_doc(e, enc) for e in ep.module_call_graph],
        "verifier": getattr(ep.verifier, "dialect", "STABLE"),
    }
    doc["symbols"] = symbols.to_json()
    groups = {g: tables[g].tensors for g in GROUPS}
    doc["payloads"] = {g: [tensor_entry(t) for t in groups[g]] for g in GROUPS}
    return doc, groups


def _call_entry_doc(entry: Any, enc: Callable[..., Any]) -> dict[str, Any]:
    sig = entry.signature
    if sig is None:
        return {"fqn": entry.fqn, "signature": None}
    return {"fqn": entry.fqn, "signature": {
        "inputs": [arg_to_doc(a, enc) for a in sig.inputs], "outputs": [arg_to_doc(a, enc) for a in sig.outputs],
        "in_spec": enc(sig.in_spec, "constants", "in_spec"), "out_spec": enc(sig.out_spec, "constants", "out_spec"),
        "forward_arg_names": sig.forward_arg_names}}


def _shape_env_to_value(env: Any) -> dict[str, Any]:
    symbols = [{"symbol": i.symbol, "hint": i.hint, "lo": i.lo, "hi": i.hi, "kind": i.kind, "reason": i.reason,
                "sources": [tuple(s) for s in i.sources]} for i in env.symbols.values()]
    guards = [{"fact": g.fact, "reason": g.reason, "where": g.where} for g in env.guards]
    return {"$shape_env": 1, "symbols": symbols, "guards": guards}


def _shape_env_from_value(value: Any) -> Any:
    from ..graph.shape_env import Guard, ShapeEnv, SymbolInfo

    def int_or_none(v: Any) -> bool:
        return v is None or type(v) is int

    def good_symbol(s: Any) -> bool:
        keys = {"symbol", "hint", "lo", "hi", "kind", "reason", "sources"}
        return isinstance(s, dict) and set(s) == keys and isinstance(s["symbol"], sympy.Symbol) \
            and int_or_none(s["hint"]) and type(s["lo"]) is int and int_or_none(s["hi"]) \
            and isinstance(s["kind"], str) and isinstance(s["reason"], str) and type(s["sources"]) is list

    def good_guard(g: Any) -> bool:
        return isinstance(g, dict) and set(g) == {"fact", "reason", "where"} and isinstance(g["fact"], sympy.Basic) \
            and isinstance(g["reason"], str) and isinstance(g["where"], str)

    if not isinstance(value, dict) or value.get("$shape_env") != 1 or type(value.get("symbols")) is not list \
            or type(value.get("guards")) is not list or not all(map(good_symbol, value["symbols"])) \
            or not all(map(good_guard, value["guards"])):
        raise malformed("a shape environment record {symbols: [...], guards: [...]}", value)
    env = ShapeEnv()
    for s in value["symbols"]:
        env.symbols[s["symbol"]] = SymbolInfo(s["symbol"], s["hint"], s["lo"], s["hi"], s["kind"], s["reason"],
                                              list(s["sources"]))
    env.guards = [Guard(g["fact"], g["reason"], g["where"]) for g in value["guards"]]
    return env


def _required(doc: dict, key: str, kind: type | tuple[type, ...]) -> Any:
    value = doc.get(key)
    if not isinstance(value, kind):
        raise malformed(f"{key!r} of type {getattr(kind, '__name__', kind)}", value)
    return value


def document_to_program(doc: Any, tensors: dict[str, Callable[[int], Tensor]],
                        state_dict: dict | None = None, constants: dict | None = None,
                        example_inputs: Any = None) -> Any:
    """Rebuild an ``ExportedProgram`` from a document; ``tensors[group](i)`` yields payload ``i``.

    Every part is checked before use (``ValueError`` naming what was expected and what came);
    ``state_dict`` / ``constants`` (target -> tensor) and ``example_inputs`` replace stored values.
    """
    from ..graph import GraphModule
    from .exported_program import EqualityConstraint, ExportedProgram

    if not isinstance(doc, dict) or doc.get("format") != PROGRAM_FORMAT:
        raise malformed(f"a {PROGRAM_FORMAT!r} document", str(doc)[:80])
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"unsupported program schema_version {doc.get('schema_version')!r}; this tensorplay "
                         f"reads version {SCHEMA_VERSION}")
    opset = doc.get("opset_version", {})
    if not isinstance(opset, dict) or not all(isinstance(k, str) and type(v) is int for k, v in opset.items()):
        raise malformed("opset_version as a dict str -> int", opset)
    symbols = SymbolTable.from_json(doc.get("symbols", {}))
    dec = {g: ValueDecoder(symbols, tensors[g]) for g in GROUPS}
    graph = decode_graph(_required(doc, "graph", dict), tensors["constants"], symbols)
    signature = _decode_signature(doc, dec["constants"])
    specs = {s.target: s for s in signature.input_specs if s.target is not None}
    state = _decode_state(_required(doc, "state", list), specs, tensors, state_dict or {}, constants or {})
    graph_attrs = dec["constants"](doc.get("graph_attrs", {"$": "dict", "v": []}))
    if not isinstance(graph_attrs, dict) or not all(
            isinstance(k, str) and serde.IDENT.match(k) and not k.startswith("__") for k in graph_attrs):
        raise malformed("graph constants keyed by identifiers", graph_attrs)
    try:
        gm = GraphModule(_state_root(state, specs), graph, graph_attrs=graph_attrs)
    except Exception as exc:  # GraphError and friends: the document names attributes that do not exist
        raise ValueError(f"malformed program document: {exc}") from None
    gm.meta.update(_decode_meta(_required(doc, "meta", dict), dec["constants"], len(signature.output_specs)))
    gm.meta["constants"] = {t: v for t, v in state.items() if not _is_weight(specs[t])}
    equality = []
    for rec in _required(doc, "equality_constraints", list):
        sites = dec["constants"](rec.get("sites")) if isinstance(rec, dict) else None
        if not isinstance(sites, tuple) or len(sites) < 2 or not all(
                isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) and type(p[1]) is int for p in sites) \
                or not isinstance(rec.get("name"), str | type(None)):
            raise malformed("an equality constraint {sites: ((arg, axis), ...), name}", rec)
        equality.append(EqualityConstraint(sites, name=rec["name"]))
    ranges = dec["constants"](doc.get("range_constraints", {"$": "dict", "v": []}))
    if not isinstance(ranges, dict) or not all(isinstance(k, str) and isinstance(r, dict) and set(r) <= {"min", "max"}
                                               and all(v is None or type(v) is int for v in r.values())
                                               for k, r in ranges.items()):
        raise malformed("range_constraints as name -> {min, max}", ranges)
    dynamic = dec["constants"](doc.get("dynamic_shapes", {"$": "dict", "v": []}))
    if not isinstance(dynamic, dict):
        raise malformed("dynamic_shapes as a dict", dynamic)
    examples = dec["sample_inputs"](doc.get("example_inputs", {"$": "dict", "v": []}))
    if not isinstance(examples, dict):
        raise malformed("example_inputs as a dict", examples)
    program = ExportedProgram(gm, signature, examples if example_inputs is None else example_inputs, dynamic,
                              _decode_calls(_required(doc, "module_call_graph", list), dec["constants"]), ranges,
                              equality)
    try:
        program.validate()
    except Exception as exc:  # GraphLintError / GraphCaptureError: the document contradicts itself
        raise ValueError(f"malformed program document: {exc}") from None
    _restore_placeholder_examples(program)
    return program


def _restore_placeholder_examples(program: Any) -> None:
    """Give placeholders their example values again (state values, example inputs), so the program
    can be re-traced after loading (decompositions, compilation) as it could after export."""
    state = {**program.state_dict, **program.constants}
    for spec, node in zip(program.graph_signature.input_specs, program.graph.placeholders, strict=True):
        value = state.get(spec.target) if spec.target is not None else program.example_inputs.get(node.name)
        if value is not None and "example_value" not in node.meta:
            node.meta["example_value"] = value
    for node in program.graph.nodes:  # tensors read out of container inputs (decompositions trace with them)
        base = node.args[0] if node.op == "call_function" and node.target in (operator.getitem, getattr) else None
        if not isinstance(base, Node) or "example_value" in node.meta or base.meta.get("val") is not None:
            continue
        container = base.meta.get("example_value")
        key = node.args[1]
        if isinstance(container, dict | list | tuple) and node.target is operator.getitem:
            node.meta["example_value"] = container[key]
        elif container is not None and node.target is getattr and isinstance(key, str):
            node.meta["example_value"] = getattr(container, key)
    _restore_computed_examples(program)


def _restore_computed_examples(program: Any) -> None:
    """Computed tensors get stand-in example values (ones of their shape at the capture's example sizes),
    size reads their example extent: a decomposition traced after loading needs an example for each input,
    as after export."""
    import numpy as np

    from ..ops import TensorMeta

    env = program.graph_module.meta.get("shape_env")
    hints = env.hints() if env is not None else {}
    for node in program.graph.nodes:
        val = node.meta.get("val")
        if "example_value" in node.meta:
            continue
        if isinstance(val, sympy.Expr):  # a size read (``x.shape[0]``): its example extent
            extent = val.subs(hints)
            if extent.is_Integer:
                node.meta["example_value"] = int(extent)
            continue
        if not isinstance(val, TensorMeta):
            continue
        if not all(isinstance(d, (int, sympy.Basic)) and not isinstance(d, bool) for d in val.shape):
            raise ValueError(f"node {node.name!r}: its shape {val.shape!r} holds something other than integers "
                             "and size expressions")
        shape = [sympy.sympify(d).subs(hints) for d in val.shape]
        if all(d.is_Integer for d in shape):
            # one element broadcast to the shape: no memory, whatever extent the document states
            ones = np.broadcast_to(np.ones((), val.dtype.storage), [int(d) for d in shape])
            node.meta["example_value"] = Tensor._from_storage(ones, val.dtype)


def _decode_signature(doc: dict, decode: Callable[[Any], Any]) -> Any:
    from . import graph_signature as gs

    try:
        inputs = [gs.InputSpec(gs.InputKind[s["kind"]], arg_from_doc(s["arg"], decode), s["target"], s["persistent"])
                  for s in _required(doc, "input_specs", list)]
        outputs = [gs.OutputSpec(gs.OutputKind[s["kind"]], arg_from_doc(s["arg"], decode), s["target"])
                   for s in _required(doc, "output_specs", list)]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed graph signature record: {exc!r}") from None
    for spec in (*inputs, *outputs):
        if spec.target is not None and not is_state_path(spec.target):
            raise malformed("a dotted state target", spec.target)
    return gs.ExportGraphSignature(inputs, outputs)


def _decode_state(records: list, specs: dict[str, Any], tensors: dict[str, Callable[[int], Tensor]],
                  state_dict: dict, constants: dict) -> dict[str, Tensor]:
    """Lifted state by target, from the payloads (or the caller's replacements); parameters as ``Parameter``."""
    from ..nn import Parameter
    from .graph_signature import InputKind

    values: dict[str, Tensor] = {}
    for rec in records:
        if not isinstance(rec, dict) or not isinstance(rec.get("target"), str) or rec["target"] not in specs \
                or not isinstance(rec.get("group"), str) or rec["group"] not in GROUPS[:2] \
                or type(rec.get("ref")) is not int or not isinstance(rec.get("parameter"), bool):
            raise malformed("a state record {target, group, ref, weight_type, parameter}", rec)
        target = rec["target"]
        override = state_dict if rec["group"] == "weights" else constants
        value = override[target] if target in override else tensors[rec["group"]](rec["ref"])
        if not isinstance(value, Tensor):
            raise TypeError(f"state {target!r}: expected a Tensor, got {type(value).__name__}")
        if rec["parameter"] and not isinstance(value, Parameter):
            value = Parameter(value, requires_grad=value.requires_grad)
        values[target] = value
    missing = [t for t, s in specs.items() if s.kind is not InputKind.USER_INPUT and t not in values]
    if missing:
        raise ValueError(f"malformed program document: no stored value for the lifted state {missing}")
    return values


def _state_root(state: dict[str, Tensor], specs: dict[str, Any]) -> Any:
    """A fresh module tree holding ``state`` at its dotted targets (parameters, buffers, constants)."""
    from ..nn import Module, Parameter
    from .graph_signature import InputKind

    root = Module()
    for target, value in state.items():
        *path, leaf = target.split(".")
        owner = root
        for part in path:
            child = owner._modules.get(part)
            if child is None:
                child = Module()
                owner.add_module(part, child)
            owner = child
        if isinstance(value, Parameter):
            owner.register_parameter(leaf, value)
        elif specs[target].kind is InputKind.BUFFER:
            owner.register_buffer(leaf, value, persistent=bool(specs[target].persistent))
        else:
            object.__setattr__(owner, leaf, value)
    return root


def _decode_meta(meta: dict, decode: Callable[[Any], Any], num_outputs: int) -> dict[str, Any]:
    out = {key: decode(value) for key, value in meta.items()}
    for key in ("in_spec", "out_spec"):
        if out.get(key) is not None and not isinstance(out[key], TreeSpec):
            raise malformed(f"graph_module.meta[{key!r}] as a tree spec", out[key])
    mutations = out.get("num_mutations", 0)
    if type(mutations) is not int or not 0 <= mutations <= num_outputs:
        raise malformed(f"num_mutations between 0 and {num_outputs}", mutations)
    if "shape_env" in out:
        out["shape_env"] = _shape_env_from_value(out["shape_env"])
    return out


def _decode_calls(records: list, decode: Callable[[Any], Any]) -> list:
    from .exported_program import ModuleCallEntry, ModuleCallSignature

    calls = []
    for rec in records:
        if not isinstance(rec, dict) or not isinstance(rec.get("fqn"), str):
            raise malformed("a module call entry {fqn, signature}", rec)
        sig = rec.get("signature")
        if sig is not None:
            names = sig.get("forward_arg_names") if isinstance(sig, dict) else None
            if names is not None and (type(names) is not list or not all(isinstance(n, str) for n in names)):
                raise malformed("forward_arg_names as a list of str", names)
            try:
                sig = ModuleCallSignature([arg_from_doc(a, decode) for a in sig["inputs"]],
                                          [arg_from_doc(a, decode) for a in sig["outputs"]],
                                          decode(sig["in_spec"]), decode(sig["out_spec"]), names)
            except (KeyError, TypeError) as exc:
                raise ValueError(f"malformed module call signature: {exc!r}") from None
        calls.append(ModuleCallEntry(rec["fqn"], sig))
    return calls


# ------------------------------------------------------------------------------------ writing

def save(ep: Any, f: Any, *, extra_files: dict[str, Any] | None = None, opset_version: dict[str, int] | None = None,
         pickle_protocol: int = 4) -> None:
    """Save an ``ExportedProgram`` to a path or writable binary buffer (stored as model ``"model"``).

    ``extra_files`` maps names to ``str`` or ``bytes`` stored under ``extra/``.
    """
    if not isinstance(ep, _exported_program_type()):
        raise TypeError(f"The 'ep' parameter must be an ExportedProgram, got {type(ep).__name__}")
    from .native_archive import native_files_of

    package_pt2(f, exported_programs={"model": ep}, tp_files=native_files_of({"model": ep}) or None,
                extra_files=extra_files, opset_version=opset_version, pickle_protocol=pickle_protocol)


def package_pt2(f: Any, *, exported_programs: Any = None, tp_files: Any = None,
                extra_files: dict[str, Any] | None = None, opset_version: dict[str, int] | None = None,
                pickle_protocol: int = 4, executorch_files: dict[str, bytes] | None = None,
                sign_key: bytes | str | os.PathLike[str] | None = None) -> Any:
    """Write programs, native code and extra files into one archive at ``f``; returns ``f`` (rewound).

    ``exported_programs`` is one program (named ``"model"``) or a dict name -> program.
    ``tp_files`` maps a model name to compiled native code: a ``NativeArtifact`` (``tensorplay.lowering.api``),
    an ``(artifact, dialect_text)`` pair, an ``(artifact, dialect_text, kernel objects[, seal])`` tuple, a
    ``NativeCode`` read from an archive, or a list of them (one per target). Each is stored under
    ``data/native/<name>/<triple>/`` as ``artifact.bin``, ``manifest.json`` (triple, CPU name,
    feature string, llvmlite version), ``program.tp`` (the dialect text it was built from), ``kernels.tpo``
    and ``seal.json``: the digest of those files, signed with HMAC-SHA256 under ``sign_key`` (the key, or
    the path of a key file) when given, so that loaders trusting that key run the code
    (:mod:`tensorplay.export.trust`). Sign only code you trust: every entry written gets the signature. A
    ``NativeCode`` keeps its signature when its files are unchanged.
    """
    ep_type = _exported_program_type()
    _check_opset(opset_version, "opset_version")
    _check_protocol(pickle_protocol)
    if executorch_files:
        raise ValueError("executorch_files are not supported: tensorplay archives hold tensorplay programs only")
    if exported_programs is None and tp_files is None and not extra_files:
        raise ValueError("package_pt2 needs something to package: exported_programs, tp_files or extra_files")
    if isinstance(exported_programs, ep_type):
        programs = {"model": exported_programs}
    elif exported_programs is None:
        programs = {}
    elif isinstance(exported_programs, dict):
        programs = dict(exported_programs)
    else:
        raise TypeError(f"exported_programs must be an ExportedProgram or a dict name -> ExportedProgram, got "
                        f"{type(exported_programs).__name__}")
    for name, program in programs.items():
        if not isinstance(name, str) or not _MODEL_NAME.match(name):
            raise ValueError(f"model name {name!r}: expected letters, digits, '_', '.', '-' (no '/')")
        if not isinstance(program, ep_type):
            raise TypeError(f"exported_programs[{name!r}] must be an ExportedProgram, got {type(program).__name__}")
    if sign_key is not None and not isinstance(sign_key, bytes):
        sign_key = read_key(sign_key)
    native = _check_tp_files(tp_files, sign_key)
    extras = _check_extra_files(extra_files)
    documents = {name: program_to_document(p, opset_version) for name, p in programs.items()}
    if isinstance(f, str | os.PathLike):
        parent = os.path.dirname(os.fspath(f))
        if parent and not os.path.isdir(parent):
            raise FileNotFoundError(f"cannot save to {os.fspath(f)!r}: directory {parent!r} does not exist")
    elif not hasattr(f, "write"):
        raise TypeError(f"f must be a path or a writable binary buffer, got {type(f).__name__}")
    with PT2ArchiveWriter(f) as writer:
        for name, (doc, groups) in documents.items():
            writer.write_string(f"models/{name}.json", json.dumps(doc, indent=1))
            for group, tensors in groups.items():
                for i, t in enumerate(tensors):
                    writer.write_bytes(f"data/{group}/{name}/{i}", encode_tensor(t)[1])
        for path, data in native.items():
            writer.write_bytes(path, data)
        for path, data in extras.items():
            writer.write_bytes(f"extra/{path}", data, compress=True)
    if hasattr(f, "seek") and getattr(f, "seekable", lambda: True)():
        f.seek(0)
    return f


def _as_bytes(value: Any, what: str) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"{what} must be str or bytes, got {type(value).__name__}")


def _check_extra_files(extra_files: Any) -> dict[str, bytes]:
    if extra_files is None:
        return {}
    if not isinstance(extra_files, Mapping):
        raise TypeError(f"extra_files must be a dict name -> str/bytes, got {type(extra_files).__name__}")
    return {check_entry_name(name, "extra file"): _as_bytes(value, f"extra_files[{name!r}]")
            for name, value in extra_files.items()}


def _check_tp_files(tp_files: Any, sign_key: bytes | None = None) -> dict[str, bytes]:
    """``tp_files``: model name -> NativeArtifact, ``(NativeArtifact, dialect_text)``,
    ``(NativeArtifact, dialect_text, kernel objects[, seal])``, ``NativeCode`` or a list of those; the archive
    entries of each, sealed (and signed under ``sign_key``)."""
    if tp_files is None:
        return {}
    if not isinstance(tp_files, dict):
        raise TypeError(f"tp_files must be a dict model name -> NativeArtifact (or a list of them), got "
                        f"{type(tp_files).__name__}")
    from tensorplay.lowering.api import NativeArtifact

    out = {}
    for name, items in tp_files.items():
        if not isinstance(name, str) or not _MODEL_NAME.match(name):
            raise ValueError(f"tp_files model name {name!r}: expected letters, digits, '_', '.', '-'")
        for item in items if isinstance(items, list) else [items]:
            if isinstance(item, NativeCode):
                item = (item.artifact, item.dialect, item.kernels, item.seal)
            item = item if isinstance(item, tuple) and len(item) in (2, 3, 4) else (item, None)
            artifact, dialect, kernels, seal = (*item, None, None, None)[:4]
            if not isinstance(artifact, NativeArtifact) or not isinstance(dialect, str | None):
                raise TypeError(f"tp_files[{name!r}] must hold NativeArtifact or (NativeArtifact, dialect text), "
                                f"got {type(item).__name__}")
            if not _TRIPLE.match(artifact.triple):
                raise ValueError(f"tp_files[{name!r}]: unusable target triple {artifact.triple!r}")
            base = f"data/native/{name}/{artifact.triple}/"
            if f"{base}manifest.json" in out:
                raise ValueError(f"tp_files[{name!r}] has two artifacts for target {artifact.triple!r}")
            manifest = {"format": NATIVE_FORMAT, "triple": artifact.triple, "cpu_name": artifact.cpu_name,
                        "features": artifact.features, "llvmlite": artifact.llvmlite}
            files = {"manifest.json": json.dumps(manifest, indent=1).encode(), "artifact.bin": artifact.to_bytes(),
                     "program.tp": None if dialect is None else dialect.encode("utf-8"), "kernels.tpo": None}
            if kernels:
                from .native_archive import kernels_to_bytes
                files["kernels.tpo"] = kernels_to_bytes(kernels)
            new = make_seal(files, sign_key)
            if sign_key is None and seal and "hmac_sha256" in seal and seal.get("sha256") == new["sha256"]:
                new = dict(seal)  # unchanged files keep their signature
            files[SEAL_FILE] = json.dumps(new, indent=1).encode()
            out.update({f"{base}{file}": data for file, data in files.items() if data is not None})
    return out


# ------------------------------------------------------------------------------------ reading

def load(f: Any, *, extra_files: dict[str, Any] | None = None,
         expected_opset_version: dict[str, int] | None = None, trust_native_code: bool | None = None,
         trusted_keys: list[Any] | None = None) -> Any:
    """Load the program written by :func:`save`; ``extra_files`` (a dict) is updated in place with the
    archive's extra files (``str``; ``bytes`` when not UTF-8). ``ValueError`` when the archive holds no program.
    ``trust_native_code`` and ``trusted_keys`` decide whether stored native code may run (see :func:`load_pt2`)."""
    if extra_files is not None and not isinstance(extra_files, dict):
        raise TypeError(f"extra_files must be a dict (filled in place), got {type(extra_files).__name__}")
    contents = load_pt2(f, expected_opset_version=expected_opset_version, trust_native_code=trust_native_code,
                        trusted_keys=trusted_keys)
    if extra_files is not None:
        extra_files.update(contents.extra_files)
    programs = contents.exported_programs
    if "model" in programs:
        return programs["model"]
    if len(programs) == 1:
        return next(iter(programs.values()))
    if not programs:
        raise ValueError("the archive holds no exported program (no models/<name>.json entry)")
    raise ValueError(f"the archive holds several programs {sorted(programs)} and none is called 'model'; "
                     "use load_pt2 to get them all")


def load_pt2(f: Any, *, expected_opset_version: dict[str, int] | None = None, run_single_threaded: bool = False,
             num_runners: int = 1, device_index: int = -1, load_weights_from_disk: bool = False,
             trust_native_code: bool | None = None, trusted_keys: list[Any] | None = None) -> PT2ArchiveContents:
    """Read every program, native-code entry and extra file of a ``.pt2`` archive, validating all of it.

    ``load_weights_from_disk=True`` memory-maps (copy-on-write) the payloads of a file-backed
    archive instead of reading them into memory. A malformed archive raises ``ValueError``.

    Stored native code runs only when trusted (docs/deployment.md, "Trust"): ``trust_native_code=True``
    trusts every entry, ``trusted_keys`` (paths of key files) trusts entries signed by one of them; None
    reads ``TENSORPLAY_TRUST_NATIVE_CODE`` and ``TENSORPLAY_TRUSTED_KEYS``. Untrusted code is never mapped:
    programs compile from their exported graph (through the local compile cache). Trusted code is checked
    first (seal digest, signature, called symbols, its signature against the program): ``ValueError`` if
    anything disagrees.
    """
    _check_opset(expected_opset_version, "expected_opset_version")
    for name, value in (("run_single_threaded", run_single_threaded), ("load_weights_from_disk",
                                                                        load_weights_from_disk)):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    if type(num_runners) is not int or num_runners < 1:
        raise ValueError(f"num_runners must be a positive int, got {num_runners!r}")
    if type(device_index) is not int or device_index < -1:
        raise ValueError(f"device_index must be -1 (CPU) or a device number, got {device_index!r}")
    trust = Trust.resolve(trust_native_code, trusted_keys)
    with PT2ArchiveReader(f) as reader:
        contents = PT2ArchiveContents()
        names = reader.names()
        models = [n[len("models/"):-len(".json")] for n in names if n.startswith("models/")]
        for model in models:
            contents.exported_programs[model] = _load_model(reader, model, expected_opset_version,
                                                            load_weights_from_disk)
        known = {f"models/{m}.json" for m in models}
        extras = {}
        for name in names:
            if name.startswith("data/") and not name.startswith("data/native/"):
                model = name.split("/")[2]
                if f"models/{model}.json" not in known:
                    raise ValueError(f"archive entry {name!r} belongs to no model")
            elif name.startswith("data/native/"):
                _, _, model, triple, *rest = name.split("/")
                if len(rest) != 1 or rest[0] not in (*NATIVE_FILES, SEAL_FILE) or not _TRIPLE.match(triple):
                    raise ValueError(f"unexpected native-code entry {name!r}; expected data/native/<model>/"
                                     f"<triple>/{{{', '.join((*NATIVE_FILES, SEAL_FILE))}}}")
                if rest[0] == "manifest.json":
                    contents.tp_runners.setdefault(model, {})[triple] = _load_native(
                        reader, model, triple, trust, contents.exported_programs.get(model))
            elif name.startswith("extra/"):
                extras[name[len("extra/"):]] = reader.deferred(name)
        contents.extra_files = ExtraFiles(extras)
        from .native_archive import attach_runners
        attach_runners(contents, num_runners=num_runners, run_single_threaded=run_single_threaded)
        return contents


def _load_model(reader: PT2ArchiveReader, model: str, expected_opset: dict[str, int] | None,
                from_disk: bool) -> Any:
    doc = serde.parse_json(reader.read_bytes(f"models/{model}.json", limit=1 << 28), f"models/{model}.json")
    if not isinstance(doc, dict):
        raise ValueError(f"models/{model}.json: expected a JSON object, got {type(doc).__name__}")
    if expected_opset:
        stored = doc.get("opset_version")
        for key, version in expected_opset.items():
            if not isinstance(stored, dict) or stored.get(key) != version:
                found = stored.get(key) if isinstance(stored, dict) else None
                raise ValueError(f"model {model!r}: expected opset {key!r} version {version}, the archive has {found}")
    payloads = doc.get("payloads")
    if not isinstance(payloads, dict) or set(payloads) != set(serde.GROUPS) or not all(
            isinstance(v, list) for v in payloads.values()):
        raise ValueError(f"models/{model}.json: expected a 'payloads' index with lists {list(serde.GROUPS)}")
    tensors = {}
    for group, entries in payloads.items():
        prefix = f"data/{group}/{model}/"
        present = set(reader.iter_prefix(prefix))
        wanted = {f"{prefix}{i}" for i in range(len(entries))}
        if present != wanted:
            odd = sorted(present ^ wanted)[:3]
            raise ValueError(f"model {model!r}: payload entries under {prefix} do not match the index "
                             f"({len(entries)} listed); mismatched: {odd}")
        for i, entry in enumerate(entries):
            nbytes = check_tensor_entry(entry, f"{prefix}{i}")[3]
            if reader.size(f"{prefix}{i}") != nbytes:
                raise ValueError(f"archive entry {prefix}{i} is {reader.size(prefix + str(i))} bytes; the index "
                                 f"says {nbytes}")
        tensors[group] = _payload_getter(reader, prefix, entries, from_disk and group != "sample_inputs")
    return document_to_program(doc, tensors)


def _load_native(reader: PT2ArchiveReader, model: str, triple: str, trust: Trust, program: Any) -> Any:
    """The native code under ``data/native/<model>/<triple>/``, trusted when ``trust`` says so and it passes every
    check (:mod:`tensorplay.export.trust`)."""
    from tensorplay.lowering.api import NativeArtifact, check_native_code

    base = f"data/native/{model}/{triple}/"
    names = set(reader.names())
    files = {file: reader.read_bytes(f"{base}{file}") if f"{base}{file}" in names else None for file in NATIVE_FILES}
    manifest = serde.parse_json(files["manifest.json"], f"{base}manifest.json") \
        if len(files["manifest.json"]) <= 1 << 20 else None
    keys = ("triple", "cpu_name", "features", "llvmlite")
    if not isinstance(manifest, dict) or manifest.get("format") != NATIVE_FORMAT or not all(
            isinstance(manifest.get(k), str) for k in keys):
        raise ValueError(f"{base}manifest.json: expected {{format: {NATIVE_FORMAT!r}, {', '.join(keys)}}}")
    if files["artifact.bin"] is None:
        raise ValueError(f"{base}: the manifest has no artifact.bin beside it")
    try:
        artifact = NativeArtifact.from_bytes(files["artifact.bin"])
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"{base}artifact.bin is not a valid native artifact: {exc}") from None
    if manifest["triple"] != triple or any(getattr(artifact, k) != manifest[k] for k in keys):
        raise ValueError(f"{base}: the manifest and the artifact disagree on the target they were built for")
    dialect = None
    if files["program.tp"] is not None:
        try:
            dialect = files["program.tp"].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"archive entry {base}program.tp is not UTF-8 text: {exc}") from None
    kernels = None
    if files["kernels.tpo"] is not None:
        from .native_archive import kernels_from_bytes
        kernels = kernels_from_bytes(files["kernels.tpo"], f"{base}kernels.tpo")
    seal = None
    if f"{base}{SEAL_FILE}" in names:
        seal = serde.parse_json(reader.read_bytes(f"{base}{SEAL_FILE}", limit=4096), f"{base}{SEAL_FILE}")
    code = NativeCode(artifact, dialect, kernels, seal if isinstance(seal, dict) else None)
    if not trust.everything and not trust.keys:
        return code  # never used: nothing to check
    if seal is None:
        if trust.everything:
            raise ValueError(f"{base}: the stored native code has no {SEAL_FILE} (an archive from an older "
                             "tensorplay?): it cannot be checked, so it is not run; compile the archive again")
        return code
    verify_seal(files, seal, base)
    try:
        code.trusted = trust.trusts(seal)
    except ValueError as exc:
        raise ValueError(f"{base}: {exc}") from None
    if code.trusted:
        try:
            check_native_code(code, program)
        except ValueError as exc:
            raise ValueError(f"{base}: {exc}") from None
    return code


def _payload_getter(reader: PT2ArchiveReader, prefix: str, entries: list, from_disk: bool) -> Any:
    cache: dict[int, Any] = {}

    def get(i: int) -> Any:
        if type(i) is not int or not 0 <= i < len(entries):
            raise ValueError(f"malformed program document: no payload {i!r} under {prefix}")
        if i not in cache:
            name = f"{prefix}{i}"
            mapped = reader.memmap(name) if from_disk else None
            if mapped is not None:
                cache[i] = decode_tensor(entries[i], mapped, name, copy=False)
            else:
                cache[i] = decode_tensor(entries[i], reader.read_bytes(name), name)
        return cache[i]
    return get
