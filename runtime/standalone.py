"""Standalone model bundles: a C library with a plain API, its weights file, and a Python loader.

A bundle built by :func:`write_bundle` (usually through ``tensorplay.lowering.aot.build_library`` or
``tensorplay build``) holds, for a model called ``<name>``:

* ``lib<name>.so`` — the compiled program plus the C API of ``runtime/c/model_api.c.in``
  (create from a weights path, query ranks and size rules, output dims, run, last error,
  destroy); only those ``<name>_*`` functions are exported;
* ``<name>.h`` — the header declaring that API;
* ``<name>.tpw`` — the weights (:mod:`tensorplay.runtime.weights`), memory-mapped at create, never linked in;
* ``<name>.tpa`` — the :class:`tensorplay.runtime.artifact.NativeArtifact`, which :class:`StandaloneModel`
  loads with numpy and llvmlite alone (no tensorplay, no C compiler);
* ``<name>.tpo`` — the object code of the shared kernels the program calls (GEMMs), linked into
  the library and mapped next to the artifact by :class:`StandaloneModel`. The worker pool of
  parallel loops (:mod:`tensorplay.runtime.threadpool`) is linked into the library too, but not stored: the
  loader links the process's own pool.

>>> model = StandaloneModel.load("build/", "mlp")        # doctest: +SKIP
>>> (y,) = model(np.ones((4, 8), np.float32))             # doctest: +SKIP
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .abi import Executable, Signature
from .aot import find_c_compiler
from .artifact import IncompatibleArtifact, NativeArtifact
from .dtypes import C_TYPES, storage_dtype
from .jit import Resolver, load_object, undefined_symbols
from .threadpool import needs_pool, pool_object
from .weights import read_weights, write_weights

__all__ = ["StandaloneModel", "api_header", "load_objects", "objects_from_bytes", "objects_to_bytes", "read_objects",
           "user_input_count", "write_bundle", "write_objects"]

_OBJ_MAGIC = b"TPOBJS01"
_U64 = struct.Struct("<Q")

_TEMPLATE = Path(__file__).with_name("c") / "model_api.c.in"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
_BINDING_KEY = "tensorplay_binding"


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"model name must be a C identifier of at most 64 characters, got {name!r}")
    return name


def user_input_count(signature: Signature) -> int:
    """How many leading signature inputs the caller supplies (the rest come from the weights file)."""
    record = signature.meta.get(_BINDING_KEY)
    n = record.get("user_inputs") if isinstance(record, dict) else None
    if type(n) is not int or not 0 <= n <= len(signature.inputs):
        return len(signature.inputs)
    return n


def _user_names(signature: Signature) -> Any:
    """A function renaming the program's size symbols (``s0``) to the user's Dim names (``batch``)."""
    record = signature.meta.get(_BINDING_KEY)
    binding = record.get("binding") if isinstance(record, dict) else None
    names = binding.get("symbols") if isinstance(binding, dict) else None
    if not isinstance(names, dict) or not names:
        return lambda text: text
    pattern = re.compile(r"\b(" + "|".join(re.escape(str(k)) for k in names) + r")\b")
    return lambda text: pattern.sub(lambda m: str(names[m.group(1)]), text)


def _c_str(text: str) -> str:
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "?":
            out.append("\\?")
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            out.extend(f"\\{b:03o}" for b in ch.encode("utf-8"))
    return '"' + "".join(out) + '"'


def _array(ctype: str, name: str, items: list[str]) -> str:
    return f"static const {ctype} {name}[{max(1, len(items))}] = {{{', '.join(items) or '0'}}};"


def _fnv1a(data: bytes) -> int:
    h = 1469598103934665603
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def _tables(signature: Signature, n_user: int, weights_path: Path, weight_offsets: list[int],
            weight_shapes: list[tuple[int, ...]]) -> str:
    ins, outs = signature.inputs[:n_user], signature.outputs
    rename = _user_names(signature)
    raw = weights_path.read_bytes()
    index_off, index_len = int.from_bytes(raw[8:16], "little"), int.from_bytes(raw[16:24], "little")
    shape_of = [list(t.shape or ("?",) * t.rank) for t in ins]
    out_shape_of = [list(t.shape or ("?",) * t.rank) for t in outs]
    starts, pos = [], 0
    for t in ins:
        starts.append(str(pos))
        pos += t.rank
    out_starts, pos = [], 0
    for t in outs:
        out_starts.append(str(pos))
        pos += t.rank
    lines = [
        f"#define N_USER {n_user}", f"#define N_WEIGHTS {len(signature.inputs) - n_user}",
        f"#define N_OUT {len(outs)}", f"#define N_IN_DIMS {signature.num_in_dims}",
        f"#define N_USER_DIMS {sum(t.rank for t in ins)}", f"#define N_OUT_DIMS {signature.num_out_dims}",
        f"#define N_ASSERT {len(signature.assertions)}",
        f"#define WEIGHTS_FILE_SIZE {len(raw)}ULL", f"#define WEIGHTS_INDEX_LEN {index_len}ULL",
        f"#define WEIGHTS_INDEX_HASH {_fnv1a(raw[index_off:index_off + index_len])}ULL",
        _array("unsigned char", "weights_sha256", [str(b) for b in hashlib.sha256(raw).digest()]),
        _array("int32_t", "in_rank", [str(t.rank) for t in ins]),
        _array("int32_t", "out_rank", [str(t.rank) for t in outs]),
        _array("char *const", "in_name", [_c_str(t.name) for t in ins]),
        _array("char *const", "out_name", [_c_str(t.name) for t in outs]),
        _array("char *const", "in_dtype", [_c_str(t.dtype) for t in ins]),
        _array("char *const", "out_dtype", [_c_str(t.dtype) for t in outs]),
        _array("int32_t", "in_dim_start", starts), _array("int32_t", "out_dim_start", out_starts),
        _array("char *const", "in_shape", [_c_str(rename(d)) for s in shape_of for d in s]),
        _array("char *const", "out_shape", [_c_str(rename(d)) for s in out_shape_of for d in s]),
        _array("char *const", "assert_message", [_c_str(a.message) for a in signature.assertions]),
        _array("int32_t", "assert_num_values", [str(a.num_values) for a in signature.assertions]),
        _array("uint64_t", "weight_offset", [f"{o}ULL" for o in weight_offsets]),
        _array("int64_t", "weight_dims", [str(d) for s in weight_shapes for d in s]),
    ]
    return "\n".join(lines)


def api_header(signature: Signature, name: str, n_user: int | None = None) -> str:
    """The C header of a bundle's API for model ``name``.

    >>> from tensorplay.runtime.abi import TensorSpec
    >>> sig = Signature((TensorSpec("x", "float32", 1, ("s0",)),), (TensorSpec("y", "float32", 1, ("s0",)),))
    >>> "int32_t net_run(const net_model *model" in api_header(sig, "net")
    True
    """
    name = _check_name(name)
    n_user = user_input_count(signature) if n_user is None else n_user
    up, m = name.upper(), f"{name}_model"
    rename = _user_names(signature)
    doc = []
    for kind, specs in (("input", signature.inputs[:n_user]), ("output", signature.outputs)):
        for i, t in enumerate(specs):
            shape = rename(", ".join(t.shape)) if t.shape is not None else "?"
            doc.append(f" *   {kind} {i} {t.name.replace('*/', '')}: {C_TYPES[t.dtype]} ({t.dtype}) [{shape}]")
    return "\n".join([
        f"/* {name}.h: C API of the tensorplay model {name!r} (generated; do not edit).",
        " *",
        f" *   {m} *m = {name}_create(\"{name}.tpw\");         // NULL on error: see {name}_last_error()",
        " *                                            (a file of another build or with changed bytes is refused)",
        f" *   {name}_output_dims(m, in_dims, out_dims);       // checks every shape rule, gives output dims",
        f" *   {name}_run(m, inputs, in_dims, outputs);        // caller-allocated, C-contiguous buffers",
        f" *   {name}_destroy(m);",
        " *",
        " * in_dims holds every input's dims in input order; out_dims receives every output's dims.",
        " * A non-zero return is a failed shape rule (message in last_error) or -1 for a bad argument.",
        " * A model is read-only after create: threads may run it at once. Tensors:",
        *doc,
        " */",
        f"#ifndef TENSORPLAY_{up}_API_H", f"#define TENSORPLAY_{up}_API_H", "",
        "#include <stdint.h>", "",
        "#ifdef __cplusplus", 'extern "C" {', "#endif", "",
        f"#define {up}_NUM_INPUTS {n_user}", f"#define {up}_NUM_OUTPUTS {len(signature.outputs)}",
        f"#define {up}_NUM_IN_DIMS {sum(t.rank for t in signature.inputs[:n_user])}",
        f"#define {up}_NUM_OUT_DIMS {signature.num_out_dims}", "",
        f"typedef struct {m} {m};", "",
        f"{m} *{name}_create(const char *weights_path);",
        f"/* {name}_create with flags: {up}_CREATE_SKIP_DIGEST skips the sha256 of the file (very large files;",
        f" * size and index are still checked), {up}_CREATE_COPY reads the weights into memory instead of",
        " * mapping the file (immune to later changes of it; the .c file says what a mapping cannot protect) */",
        f"#define {up}_CREATE_SKIP_DIGEST 1u", f"#define {up}_CREATE_COPY 2u",
        f"{m} *{name}_create_flags(const char *weights_path, uint32_t flags);",
        f"void {name}_destroy({m} *model);",
        f"const char *{name}_last_error(void);",
        f"int32_t {name}_set_num_threads({m} *model, int32_t num_threads);",
        f"int32_t {name}_num_inputs(void);", f"int32_t {name}_num_outputs(void);",
        f"int32_t {name}_input_rank(int32_t i);", f"int32_t {name}_output_rank(int32_t i);",
        f"const char *{name}_input_name(int32_t i);", f"const char *{name}_output_name(int32_t i);",
        f"const char *{name}_input_dtype(int32_t i);", f"const char *{name}_output_dtype(int32_t i);",
        "/* size rule of one axis, e.g. \"8\" or \"batch\" or \"2*batch + 1\" */",
        f"const char *{name}_input_size_rule(int32_t i, int32_t axis);",
        f"const char *{name}_output_size_rule(int32_t i, int32_t axis);",
        f"int32_t {name}_output_dims(const {m} *model, const int64_t *in_dims, int64_t *out_dims);",
        f"int32_t {name}_run(const {m} *model, const void *const *inputs, const int64_t *in_dims,",
        f"{' ' * (len(name) + 13)}void *const *outputs);", "",
        "#ifdef __cplusplus", "}", "#endif", "",
        f"#endif /* TENSORPLAY_{up}_API_H */", "",
    ])


_API = ("create", "create_flags", "destroy", "last_error", "set_num_threads", "num_inputs", "num_outputs", "input_rank",
        "output_rank", "input_name", "output_name", "input_dtype", "output_dtype", "input_size_rule",
        "output_size_rule", "output_dims", "run")


def objects_to_bytes(objects: list[bytes]) -> bytes:
    """ELF objects as one blob: magic ``TPOBJS01``, u64 count, then (u64 length, bytes) each."""
    return _OBJ_MAGIC + _U64.pack(len(objects)) + b"".join(_U64.pack(len(o)) + bytes(o) for o in objects)


def objects_from_bytes(data: bytes, what: str = "object blob") -> list[bytes]:
    """The objects of :func:`objects_to_bytes`; truncated or foreign data raises ValueError.

    >>> objects_from_bytes(objects_to_bytes([b"\\x7fELFa", b"\\x7fELFbc"]))
    [b'\\x7fELFa', b'\\x7fELFbc']
    """
    data = bytes(data)
    head = len(_OBJ_MAGIC) + _U64.size
    if len(data) < head or not data.startswith(_OBJ_MAGIC):
        raise ValueError(f"{what} is not a tensorplay object file (expected magic {_OBJ_MAGIC!r})")
    (count,) = _U64.unpack_from(data, len(_OBJ_MAGIC))
    pos, objects = head, []
    for i in range(count):
        if pos + _U64.size > len(data):
            raise ValueError(f"{what} is truncated at object {i} of {count}")
        (n,) = _U64.unpack_from(data, pos)
        pos += _U64.size
        if n > len(data) - pos or not data[pos:pos + 4] == b"\x7fELF":
            raise ValueError(f"{what}: object {i} has a bad length or is not ELF")
        objects.append(data[pos:pos + n])
        pos += n
    if pos != len(data):
        raise ValueError(f"{what} has {len(data) - pos} trailing bytes")
    return objects


def write_objects(path: str | os.PathLike[str], objects: list[bytes]) -> Path:
    """Write :func:`objects_to_bytes` of ``objects`` to ``path``."""
    out = Path(path)
    out.write_bytes(objects_to_bytes(objects))
    return out


def read_objects(path: str | os.PathLike[str]) -> list[bytes]:
    """The objects stored by :func:`write_objects`; ValueError for a truncated or foreign file."""
    return objects_from_bytes(Path(path).read_bytes(), repr(os.fspath(path)))


def load_objects(objects: list[bytes], artifact: NativeArtifact,
                 resolvers: Mapping[str, Resolver] | None = None) -> Any:
    """Map ``artifact`` (checked against this host) and the kernel ``objects`` it calls, without compiling, in one
    link unit; ``resolvers`` supply the libraries of other symbols it calls
    (:func:`tensorplay.runtime.jit.load_object`).

    Returns the artifact's Library, whose code includes the kernels'.
    """
    reason = artifact.incompatibility()
    if reason is not None:
        raise IncompatibleArtifact(reason)
    return load_object(artifact.object, name=artifact.prefix, features=artifact.features, resolvers=resolvers,
                       with_objects=objects)


#: Symbols resolved by a Python host at load time (tensorplay.lowering.codegen.random's draws): no bundle can provide
# them.
_HOST_CALLBACK_PREFIXES = ("tp_random_",)


def write_bundle(artifact: NativeArtifact, weights: Mapping[str, np.ndarray], out_dir: str | os.PathLike[str],
                 name: str, *, objects: list[bytes] = (), link: bool = True) -> dict[str, Path]:
    """Write ``<name>.tpa``, ``<name>.tpo``, ``<name>.tpw``, ``<name>.h`` and (``link=True``) ``lib<name>.so``.

    ``weights`` gives every non-user signature input by name; ``objects`` is the code of the shared
    kernels the program's object calls (e.g. ``tensorplay.lowering.microkernels.gemm_library.gemm_objects``).
    Linking compiles
    the C API with the system ``cc`` and hides every other symbol; RuntimeError (saying what to
    install) without one.
    """
    name = _check_name(name)
    if not isinstance(artifact, NativeArtifact):
        raise TypeError("write_bundle expects a tensorplay.runtime.artifact.NativeArtifact, "
                        f"got {type(artifact).__name__}")
    host_only = sorted(s for s in undefined_symbols(artifact.object) if s.startswith(_HOST_CALLBACK_PREFIXES))
    if host_only:
        raise ValueError(f"this program cannot be built as a standalone bundle: its code calls back into a Python "
                         f"process ({', '.join(host_only)}: random ops draw through tensorplay's generator); save "
                         f"it with tensorplay.export.save and load it in Python instead")
    sig = artifact.signature
    n_user = user_input_count(sig)
    held = sig.inputs[n_user:]
    missing = [t.name for t in held if t.name not in weights]
    if missing:
        raise ValueError(f"weights lack {missing}; the program takes {[t.name for t in held]} from the weights file")
    cc = find_c_compiler() if link else None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"artifact": out / f"{name}.tpa", "weights": out / f"{name}.tpw", "header": out / f"{name}.h",
             "objects": out / f"{name}.tpo"}
    tensors: dict[str, Any] = {}
    shapes = []
    for t in held:
        a = np.asarray(weights[t.name], dtype=storage_dtype(t.dtype), order="C")  # 0-d stays 0-d
        if a.ndim != t.rank:
            raise ValueError(f"weight {t.name!r} must have rank {t.rank}, got shape {a.shape}")
        tensors[t.name] = (a, t.dtype)
        shapes.append(a.shape)
    write_weights(paths["weights"], tensors)
    paths["artifact"].write_bytes(artifact.to_bytes())
    write_objects(paths["objects"], list(objects))
    paths["header"].write_text(api_header(sig, name, n_user), encoding="utf-8")
    if cc is None:
        return paths
    offsets = [read_weights(paths["weights"], mmap_file=False).entries[t.name].offset for t in held]
    source = (_TEMPLATE.read_text(encoding="utf-8").replace("@NAME@", name).replace("@UP@", name.upper())
              .replace("@PREFIX@", artifact.prefix)
              .replace("@TABLES@", _tables(sig, n_user, paths["weights"], offsets, shapes)))
    paths["library"] = out / f"lib{name}.so"
    with tempfile.TemporaryDirectory(prefix="tp-build-") as tmp:
        (Path(tmp) / f"{name}.c").write_text(source, encoding="utf-8")
        shutil.copy(paths["header"], Path(tmp) / f"{name}.h")
        (Path(tmp) / "program.o").write_bytes(artifact.object)
        kernels = []
        pool = [pool_object()] if needs_pool(artifact.object) else []  # parallel loops' worker pool
        for i, obj in enumerate(list(objects) + pool):
            (Path(tmp) / f"kernel{i}.o").write_bytes(obj)
            kernels.append(f"kernel{i}.o")
        (Path(tmp) / "exports.map").write_text(
            "{ global: " + " ".join(f"{name}_{f};" for f in _API) + " local: *; };\n", encoding="utf-8")
        cmd = [cc, "-O2", "-fPIC", "-shared", "-pthread", "-o", str(paths["library"].absolute()), f"{name}.c",
               "program.o", *kernels, "-lm", "-Wl,--version-script=exports.map"]
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"building lib{name}.so failed ({' '.join(cmd)}):\n{proc.stderr.strip()}")
    return paths


class StandaloneModel:
    """A bundle's model run from Python with numpy and llvmlite only: the artifact's code mapped into
    the JIT (no compiling) and its weights memory-mapped from the weights file.

    ``model(*inputs) -> list[np.ndarray]`` takes the user inputs (numpy arrays) in signature order.
    """

    def __init__(self, artifact: NativeArtifact, weights_path: str | os.PathLike[str], objects: list[bytes] = (), *,
                 num_threads: int | None = None) -> None:
        self.artifact = artifact
        self.signature = artifact.signature
        self.num_user_inputs = user_input_count(self.signature)
        stored = read_weights(weights_path)
        self._weights = []
        for t in self.signature.inputs[self.num_user_inputs:]:
            if t.name not in stored:
                raise ValueError(f"weights file {os.fspath(weights_path)!r} lacks {t.name!r}")
            self._weights.append(stored[t.name])
        library = load_objects(list(objects), artifact)
        self.executable = Executable(library, artifact.prefix, self.signature, num_threads=num_threads)

    @classmethod
    def load(cls, directory: str | os.PathLike[str], name: str, **options: Any) -> StandaloneModel:
        """The model ``name`` of the bundle in ``directory`` (``<name>.tpa``, ``.tpo`` and ``.tpw``)."""
        d = Path(directory)
        path = d / f"{_check_name(name)}.tpa"
        if not path.is_file():
            raise FileNotFoundError(f"no artifact {str(path)!r} (build the bundle first)")
        kernels = d / f"{name}.tpo"
        objects = read_objects(kernels) if kernels.is_file() else []
        return cls(NativeArtifact.from_bytes(path.read_bytes()), d / f"{name}.tpw", objects, **options)

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self.signature.inputs[:self.num_user_inputs]]

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]:
        if len(inputs) != self.num_user_inputs:
            raise TypeError(f"model takes {self.num_user_inputs} inputs ({', '.join(self.input_names)}), "
                            f"got {len(inputs)}")
        return self.executable(*(np.asarray(a, order="C") for a in inputs), *self._weights)
