"""Warm starts: compiled programs in the on-disk cache, keyed on the exported program before any lowering.

The object cache (:mod:`tensorplay.runtime.cache`) is keyed on LLVM IR, so a process that finds a
program's object there has already run the whole lowering (decompositions, conversion, fusion,
codegen). This cache sits in front of it: :func:`program_key` hashes the exported program's serialized
form (graph, signature, range constraints, example and weight shapes and dtypes; the bytes only of graph
constants, which the compiler may bake into the code as literals; never the weights, which the code reads
on every call, nor what no compiler stage reads: the nodes' source locations and module paths
(``nn_module_stack``) and the module call graph (the same model exported from another line or script finds its
code), the compile options, the host CPU and a fingerprint of the compiler's own files. A program restored from
the cache shows the source locations of the one compiled first in its ``ir("tp")`` text.
:func:`store` keeps everything a loader needs (the archive record of
:func:`tensorplay.lowering.aot.archive_entry`, the ``tp`` and kernel texts, the stats); :func:`restore`
maps it back as a :class:`tensorplay.lowering.pipeline.FreshProgram` without lowering anything, and starts
packing its constant GEMM weights on a background thread
(:func:`tensorplay.lowering.microkernels.gemm_prepack.pack_ahead`, started before the code is mapped): calls made
before a weight's packed copy is ready pack it in the kernel, as code without a prepacker does. Both steps run
with the garbage collector paused (:func:`_collections_paused`), and the code and its GEMM kernels are mapped in one
link unit (:func:`tensorplay.runtime.standalone.load_objects`).

Measured in a new process that has just built and exported the model (one thread, CPU time of the calling thread,
load average 5-15 from other jobs): key + restore take 19-27 ms for the bench ResNet (key 7 ms), 54-65 ms for
ResNet-50 (key 30 ms, 17-20 of them :func:`tensorplay.export.save_load.program_to_document`), 59-73 ms for MobileNetV2
(key 46 ms), 32-49 ms for BERT-base and 51-54 ms for ViT-B/16; before the collector was paused, ResNet-50's key
started a full collection (0.25-0.76 s) on every warm start. The key's document is built without the parts it
leaves out (``program_to_document(keyed=True)``): with them built and dropped it took 20-32 ms for ResNet-50 and
MobileNetV2 and 14-19 for ViT-B/16, now 14-25 and 11-16 (CPU ms, min of 7, load average 4-8).

Where a warm start's time goes (Dec 2, as ``bench/isolated.py`` measures it: its imports preloaded, a collection
after building the model; CPU ms, load average 4-6, so wall times were 1.5-2x these): the key 6-9 ms for the bench
ResNet and 15-30 for the real-size models (the document 15, its JSON 5-9); the restore 10-20 (reading and checking
the entry 1.5, the artifact 2, mapping the code in one link unit 6-8, the executable 1-4, the first program of a
process also compiling the call trampoline and mapping the packing routines, 5-7); packing the constant weights on
the background thread (ResNet-50 48-59 ms, ViT-B/16 144-162, BERT-base 111-660 in these runs, 69 alone: weight
bytes over memory bandwidth, first-touch page faults of the copies included), started before the code is mapped so
the two overlap; the first
call then costs 15-35 ms more than later ones (first-touch page faults of its workspace, 2000 for MobileNetV2 and
7500 for ResNet-50, and the front end's call plan). Ready to call (``tp.compile`` + packing + first call - a later
call, process CPU, 3 runs interleaved with the code before these changes): the bench ResNet 23-37 ms (before: 30-37),
ResNet-50 154-180 (204-242: the Winograd filters' transform and packing now native, 93-98 -> 20-27 ms),
MobileNetV2 55-95 (86-100), ViT-B/16 217-266 (249-502) and BERT-base 193-726 (136-736): packing dominates the last
two, and the runs varied by 2-5x with the neighbours' load.
The issue's 50 ms is met by the bench ResNet; with real-size weights the packing is the floor (a packed copy kept in
the cache would need a hash of every weight to be served safely, which reads them all again).

>>> import tensorplay as tp
>>> from tensorplay.export import export
>>> prog = export(tp.nn.Linear(3, 2), tp.ones(4, 3))
>>> from tensorplay.lowering.pipeline import CompileOptions
>>> len(program_key(prog, CompileOptions())) == 64, program_key(prog, CompileOptions()) == program_key(
...     export(tp.nn.Linear(3, 2), tp.ones(4, 3)), CompileOptions())   # other weights, same code
(True, True)
"""
from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib.util
import json
import os
import struct
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from tensorplay.runtime.abi import Executable
from tensorplay.runtime.artifact import NativeArtifact
from tensorplay.runtime.cache import CompileCache, default_cache
from tensorplay.runtime.jit import undefined_symbols
from tensorplay.runtime.standalone import load_objects
from tensorplay.runtime.target import feature_string, host_cpu

from .aot import BINDING_KEY, archive_entry, decode_binding, decode_held, decode_pack_sites
from .microkernels.gemm_prepack import Prepacker, pack_ahead
from .native_program import storage_of
from .resolvers import RESOLVERS, check_external_symbols

if TYPE_CHECKING:
    from tensorplay.export.exported_program import ExportedProgram

    from .pipeline import CompileOptions, FreshProgram

__all__ = ["KIND", "program_key", "restore", "store"]

#: The cache entries of compiled programs (the object cache's are ``"o"``).
KIND = "program"
_MAGIC = b"TPPROG01"
_U64 = struct.Struct("<Q")
_fingerprint: list[bytes] = []


def _compiler_fingerprint() -> bytes:
    """sha256 over the path, size and modification time of every source file of tensorplay (front end,
    dialect, lowering, runtime): any change to the compiler is a new key. Computed once per process."""
    if not _fingerprint:
        h = hashlib.sha256()
        packages = ("tensorplay", "tensorplay.dialect", "tensorplay.lowering", "tensorplay.runtime")
        for top in sorted({os.path.dirname(importlib.util.find_spec(p).origin) for p in packages}):
            for root, subdirs, files in os.walk(top):
                subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
                for name in sorted(files):
                    if name.endswith((".py", ".lark", ".in")):
                        st = os.stat(os.path.join(root, name))
                        h.update(f"{root}/{name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        _fingerprint.append(h.digest())
    return _fingerprint[0]


@contextlib.contextmanager
def _collections_paused() -> Iterator[None]:
    """The garbage collector off for one step (on again after it, if it was on). The key's document and the
    restore's decoding allocate thousands of short-lived containers, all freed by reference counting when the
    step ends; counted by the collector they would start a collection, and in a process that has just built a
    model a full one scans every object it holds (0.2-0.4 s for ResNet-50 with torch loaded)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def program_key(program: ExportedProgram, options: CompileOptions) -> str | None:
    """Hex sha256 naming the compiled code of ``program`` under ``options`` on this host (see the module
    docstring for what it covers); None for a program with no serialized form (nothing an archive can hold:
    it is compiled every time)."""
    with _collections_paused():
        return _program_key(program, options)


def _program_key(program: ExportedProgram, options: CompileOptions) -> str | None:
    from tensorplay.export.save_load import program_to_document

    try:
        doc, groups = program_to_document(program, keyed=True)
    except (ValueError, TypeError):
        return None
    _drop_unread_lines(doc)
    cpu = host_cpu()
    h = hashlib.sha256(_compiler_fingerprint())
    for part in (cpu.triple, cpu.name, feature_string(options.prefer_vector_width), cpu.llvmlite,
                 f"profile={options.profile}", json.dumps(doc, sort_keys=True, default=repr)):
        data = part.encode()
        h.update(_U64.pack(len(data)) + data)
    state = {rec["ref"] for rec in doc["state"] if rec["group"] == "constants"}
    for i, t in enumerate(groups["constants"]):  # graph constants: maybe literals in the code
        if i not in state:
            h.update(np.ascontiguousarray(t._data).tobytes())
    return h.hexdigest()


def _drop_unread_lines(doc: dict) -> None:
    """Take the line each undeclared-dimension record names out of a keyed program document (read from the live
    program when a call needs it, never from the code); the document leaves out the other parts no compiler stage
    reads: every node's ``stack_trace`` and ``nn_module_stack``, and the module call graph (what ``unflatten``
    rebuilds modules from: 30% of MobileNetV2's document)."""
    records = doc["meta"].get("static_extents")
    if isinstance(records, list):
        doc["meta"]["static_extents"] = [r[:4] if isinstance(r, list) else r for r in records]


def store(key: str, compiled: FreshProgram, program: ExportedProgram, cache: CompileCache | None = None) -> None:
    """Keep ``compiled`` under ``key``: its archive record, kernel objects, IR texts and stats. Skipped when a
    loader could not bind the code to ``program`` from the record alone (no stored binding: state or fixed
    inputs; a bound graph constant that is no placeholder)."""
    artifact, kernel_text, kernels = archive_entry(compiled)
    placeholders = {n.name for n in program.graph.placeholders}
    if artifact.signature.meta[BINDING_KEY].get("binding") is None or any(
            literal is None and ref.name not in placeholders
            for ref, literal in zip(compiled._held, compiled._literals, strict=True)):
        return
    try:
        head = json.dumps({"tp": compiled.ir("tp"), "kernel": kernel_text, "stats": compiled.stats}).encode()
    except (TypeError, ValueError):  # stats JSON cannot hold
        return
    blobs = [head, artifact.to_bytes(), *kernels]
    (cache or default_cache()).put(key, _MAGIC + _U64.pack(len(blobs)) + b"".join(
        _U64.pack(len(b)) + b for b in blobs), kind=KIND)


def _blobs(data: bytes) -> list[bytes] | None:
    if not data.startswith(_MAGIC) or len(data) < len(_MAGIC) + _U64.size:
        return None
    (count,) = _U64.unpack_from(data, len(_MAGIC))
    pos, out = len(_MAGIC) + _U64.size, []
    for _ in range(count):
        if pos + _U64.size > len(data):
            return None
        (n,) = _U64.unpack_from(data, pos)
        pos += _U64.size
        if n > len(data) - pos:
            return None
        out.append(data[pos:pos + n])
        pos += n
    return out if pos == len(data) and len(out) >= 2 else None


def restore(key: str, program: ExportedProgram, options: CompileOptions, *,
            shape_error: type[BaseException] = RuntimeError, cache: CompileCache | None = None
            ) -> FreshProgram | None:
    """The program cached under ``key``, mapped and bound to ``program`` without lowering; None on a miss (or an
    entry that does not load, which the next :func:`store` replaces)."""
    with _collections_paused():
        return _restore(key, program, options, shape_error, cache)


def _restore(key: str, program: ExportedProgram, options: CompileOptions, shape_error: type[BaseException],
             cache: CompileCache | None) -> FreshProgram | None:
    from .pipeline import FreshProgram

    start = time.perf_counter()
    data = (cache or default_cache()).get(key, kind=KIND)
    blobs = _blobs(data) if data is not None else None
    if blobs is None:
        return None
    try:
        head = json.loads(blobs[0])
        artifact = NativeArtifact.from_bytes(blobs[1])
        kernels = blobs[2:]
        for obj in (artifact.object, *kernels):
            check_external_symbols(undefined_symbols(obj), "a cached program")
        signature = artifact.signature
        n_user, held, literals = decode_held(signature)
        sites = decode_pack_sites(signature.meta[BINDING_KEY])
        state = {**program.state_dict, **program.constants}
        target = {spec.arg.name: spec.target for spec in program.graph_signature.input_specs if spec.target}
        # the weights' packed copies are made on a background thread from now on: mapping the code overlaps it
        weights = {ref.name: state[target[ref.name]] for ref in held if ref is not None and ref.name in target}
        ahead = pack_ahead(sites, n_user, held, literals, weights) if sites else None
        library = load_objects(kernels, artifact, resolvers=RESOLVERS)
        binding = decode_binding(signature.meta[BINDING_KEY]["binding"])
        for ref in held:  # the values compiling would have bound (held_weights reads them without a program)
            if ref is not None:
                binding.weights[ref.name] = storage_of(state[target[ref.name]])
        executable = Executable(library, artifact.prefix, signature, shape_error=shape_error,
                                num_threads=options.num_threads)
        stats = {**head["stats"], "compile_seconds": round(time.perf_counter() - start, 4), "from_cache": True}
        compiled = FreshProgram.restored(executable, binding, held, literals, {"tp": head["tp"],
                                         "kernel": head["kernel"]}, stats, options)
    except (ValueError, KeyError, TypeError, RuntimeError):  # a damaged or foreign entry: compile again
        return None
    if sites:  # ready to call now: calls take the kernels' own packing route until a weight's copy is ready
        packer = Prepacker(library, artifact.prefix, dict(enumerate(sites)), n_user, held, literals, ahead=ahead)
        compiled._prepack = packer if packer else None
    return compiled
