"""Ahead-of-time output: object files, shared libraries and C headers.

The weights file format lives in :mod:`tensorplay.runtime.weights` and is re-exported here.

The object code is the same ``pic`` object the JIT loads (:func:`tensorplay.runtime.jit.compile_object`),
so an artifact built here behaves exactly like the JIT-compiled program. Linking uses the
system C compiler (``$CC``, else ``cc``); llvmlite ships no linker.

Example::

    >>> obj = emit_object("define i32 @answer() { ret i32 42 }")       # doctest: +SKIP
    >>> link_shared([obj], "/tmp/libanswer.so")                        # doctest: +SKIP
    PosixPath('/tmp/libanswer.so')
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import llvmlite.ir

from .abi import MAX_ERR_VALUES, WORKSPACE_ALIGN, Signature
from .dtypes import C_TYPES
from .jit import compile_object
from .threadpool import needs_pool, pool_object
from .weights import WeightsFile, read_weights, write_weights

__all__ = ["SharedLibrary", "WeightsFile", "emit_object", "find_c_compiler", "header_text", "link_shared",
           "read_weights", "write_weights", "write_header"]

_C_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: what the header comment adds to the C type of dtypes that C has no type for
_C_NOTES = {"float16": " (IEEE half bits)", "bfloat16": " (bfloat16 bits)", "bool": " (0 or 1)"}


def emit_object(llvm_ir: str | llvmlite.ir.Module, *, opt: int = 3, cache: bool = True,
                prefer_vector_width: int | None = None) -> bytes:
    """Relocatable ELF object (``reloc="pic"``) for the host CPU, ready for :func:`link_shared`."""
    obj, _ = compile_object(llvm_ir, opt=opt, cache=cache, prefer_vector_width=prefer_vector_width)
    return obj


def find_c_compiler() -> str:
    """Path of the C compiler (``$CC`` or ``cc``); RuntimeError saying what to install if absent."""
    name = os.environ.get("CC") or "cc"
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"no C compiler found (looked for {name!r} on PATH): building a shared library "
                           "needs one; install gcc (e.g. `apt-get install gcc`) or set CC")
    return path


def link_shared(objects: Sequence[bytes | str | os.PathLike[str]], out_path: str | os.PathLike[str], *,
                extra_args: Sequence[str] = ()) -> Path:
    """Link object code (bytes or paths to .o files) into a shared library with the system ``cc``.

    The library links against libm, since generated code may call ``expf`` and friends, and gets
    the worker pool's object (:func:`tensorplay.runtime.threadpool.pool_object`) when an object calls it
    (parallel loops) and it is not among ``objects`` already.
    Raises RuntimeError with the compiler's output when linking fails.
    """
    if not objects:
        raise ValueError("link_shared needs at least one object, got none")
    objects = [*objects, *_pool_if_needed(objects)]
    cc = find_c_compiler()
    out = Path(out_path)
    with tempfile.TemporaryDirectory(prefix="tp-link-") as tmp:
        paths = []
        for i, obj in enumerate(objects):
            if isinstance(obj, (bytes, bytearray, memoryview)):
                if not bytes(obj[:4]) == b"\x7fELF":
                    raise ValueError(f"object {i} is not an ELF object (starts with {bytes(obj[:8])!r})")
                p = Path(tmp) / f"obj{i}.o"
                p.write_bytes(obj)
                paths.append(str(p))
            elif isinstance(obj, (str, os.PathLike)):
                paths.append(os.fspath(obj))
            else:
                raise TypeError(f"object {i} must be bytes or a path, got {type(obj).__name__}")
        out.parent.mkdir(parents=True, exist_ok=True)
        cmd = [cc, "-shared", "-o", str(out), *paths, "-lm", *extra_args]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"linking {out.name} failed ({' '.join(cmd)}):\n{proc.stderr.strip()}")
    return out


def _pool_if_needed(objects: Sequence[bytes | str | os.PathLike[str]]) -> list[bytes]:
    """``[pool object]`` when one of ``objects`` calls the pool and none is the pool; bad entries are
    left for the linker to report."""
    blobs = [bytes(o) if isinstance(o, (bytes, bytearray, memoryview)) else Path(o).read_bytes()
             for o in objects if isinstance(o, (bytes, bytearray, memoryview))
             or (isinstance(o, (str, os.PathLike)) and Path(o).is_file())]
    try:
        if not any(needs_pool(b) for b in blobs if b[:4] == b"\x7fELF"):
            return []
    except ValueError:  # a malformed object
        return []
    pool = pool_object()
    return [] if pool in blobs else [pool]


class SharedLibrary:
    """A shared library built by :func:`link_shared`, loaded with ``ctypes.CDLL``.

    Offers the same ``address`` / ``function`` interface as :class:`tensorplay.runtime.jit.Library`,
    so :class:`tensorplay.runtime.abi.Executable` runs it too.
    """

    __slots__ = ("path", "name", "_dll")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.name = self.path.name
        try:
            self._dll = ctypes.CDLL(str(self.path.resolve()))
        except OSError as exc:
            raise ValueError(f"cannot load shared library {str(self.path)!r}: {exc}") from None

    def __repr__(self) -> str:
        return f"<SharedLibrary {str(self.path)!r}>"

    def address(self, symbol: str) -> int:
        """Address of ``symbol``; KeyError names it when the library does not export it."""
        try:
            return ctypes.cast(getattr(self._dll, symbol), ctypes.c_void_p).value or 0
        except AttributeError:
            raise KeyError(f"symbol {symbol!r} is not defined in library {self.name!r}") from None

    def function(self, symbol: str, restype: object, *argtypes: object) -> object:
        """A ctypes function (GIL released while it runs) that keeps the library loaded."""
        fn = ctypes.CFUNCTYPE(restype, *argtypes)(self.address(symbol))
        fn._tp_library = self
        return fn


def _c_string(text: str) -> str:
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "?":
            out.append("\\?")  # avoid trigraphs
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            out.extend(f"\\{b:03o}" for b in ch.encode("utf-8"))
    return '"' + "".join(out) + '"'


def _comment(text: str) -> str:
    return text.replace("*/", "* /").replace("\n", " ")


def header_text(signature: Signature, prefix: str) -> str:
    """The C header declaring ``<prefix>_prepare`` / ``<prefix>_run`` and describing the signature."""
    if not isinstance(prefix, str) or not _C_IDENT.match(prefix):
        raise ValueError(f"prefix must be a C identifier, got {prefix!r}")
    if not isinstance(signature, Signature):
        raise TypeError(f"write_header expects a tensorplay.runtime.abi.Signature, got {type(signature).__name__}")
    up = prefix.upper()
    guard = f"TENSORPLAY_{up}_H"
    lines = [
        f"/* {prefix}.h: entry points of a tensorplay compiled program (generated; do not edit).",
        " *",
        " * Call sequence: fill in_dims with every input's dims (flattened in input order), call",
        f" * {prefix}_prepare; on 0, allocate outputs from out_dims and a workspace of workspace_bytes",
        f" * ({WORKSPACE_ALIGN}-byte aligned; may be NULL when 0), then call {prefix}_run with the",
        " * same in_dims.",
        " * Tensors are dense, C-contiguous, native byte order. Both calls are thread-safe.",
        " * A non-zero return is the 1-based code of a failed assertion (see the _ASSERT_ macros);",
        f" * {prefix}_prepare then leaves the message's numbers in err_values[0..{MAX_ERR_VALUES}).",
        " */",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        "#include <stdint.h>",
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
        f"#define {up}_NUM_INPUTS {len(signature.inputs)}",
        f"#define {up}_NUM_OUTPUTS {len(signature.outputs)}",
        f"#define {up}_NUM_IN_DIMS {signature.num_in_dims}",
        f"#define {up}_NUM_OUT_DIMS {signature.num_out_dims}",
        f"#define {up}_MAX_ERR_VALUES {MAX_ERR_VALUES}",
        f"#define {up}_WORKSPACE_ALIGN {WORKSPACE_ALIGN}",
        "",
    ]
    for kind, specs in (("INPUT", signature.inputs), ("OUTPUT", signature.outputs)):
        for i, t in enumerate(specs):
            shape = f" shape [{', '.join(t.shape)}]" if t.shape is not None else ""
            ctype = C_TYPES[t.dtype] + _C_NOTES.get(t.dtype, "")
            lines.append(f"/* {kind.lower()} {i} {_comment(t.name)}: {ctype}, rank {t.rank}{shape} */")
            lines.append(f"#define {up}_{kind}_{i}_RANK {t.rank}")
            lines.append(f"#define {up}_{kind}_{i}_NAME {_c_string(t.name)}")
            lines.append(f"#define {up}_{kind}_{i}_DTYPE {_c_string(t.dtype)}")
    lines.append("")
    for code, a in enumerate(signature.assertions, start=1):
        lines.append(f"/* code {code}: {a.kind} assertion, {a.num_values} value(s), "
                     "message template uses {0}, {1}, ... for err_values */")
        lines.append(f"#define {up}_ASSERT_{code}_KIND {_c_string(a.kind)}")
        lines.append(f"#define {up}_ASSERT_{code}_MESSAGE {_c_string(a.message)}")
        lines.append(f"#define {up}_ASSERT_{code}_NUM_VALUES {a.num_values}")
    lines += [
        "",
        f"int32_t {prefix}_prepare(const int64_t *in_dims, int64_t *out_dims, int64_t *workspace_bytes,",
        f"{' ' * (len(prefix) + 17)}int64_t *err_values);",
        f"int32_t {prefix}_run(void *const *in_ptrs, void *const *out_ptrs, const int64_t *in_dims,",
        f"{' ' * (len(prefix) + 13)}void *workspace, int32_t num_threads);",
        "",
        "#ifdef __cplusplus",
        "}",
        "#endif",
        "",
        f"#endif /* {guard} */",
        "",
    ]
    return "\n".join(lines)


def write_header(signature: Signature, prefix: str, path: str | os.PathLike[str]) -> Path:
    """Write :func:`header_text` to ``path`` and return it.

    >>> from tensorplay.runtime.abi import TensorSpec
    >>> sig = Signature((TensorSpec("x", "float32", 1),), (TensorSpec("y", "float32", 1),))
    >>> "int32_t prog_run(" in write_header(sig, "prog", "/tmp/prog.h").read_text()
    True
    """
    out = Path(path)
    out.write_text(header_text(signature, prefix), encoding="utf-8")
    return out
