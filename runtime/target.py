"""The host CPU as LLVM sees it: target machines and the optimization pipeline.

Everything native in tensorplay is built for the machine it runs on: the process
triple, the host CPU name (``znver4``, ``sapphirerapids`` ...) and its feature string,
so AVX-512 is used where present.

Example::

    >>> tm = host_target_machine()
    >>> host_cpu().triple.startswith("x86_64")  # doctest: +SKIP
    True
"""

from __future__ import annotations

import functools
import os
import threading
from dataclasses import dataclass

import llvmlite
import llvmlite.binding as llvm

__all__ = ["HostCPU", "ensure_initialized", "feature_string", "host_cpu", "host_target_machine",
           "optimize", "parse_features"]

VECTOR_WIDTH_ENV = "TENSORPLAY_VECTOR_WIDTH"
_VALID_WIDTHS = (256, 512)
_init_lock = threading.Lock()
_initialized = False


def ensure_initialized() -> None:
    """Initialise LLVM's native target and asm printer once per process."""
    global _initialized
    if _initialized:
        return
    with _init_lock:
        if not _initialized:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            llvm.initialize_native_asmparser()
            _initialized = True


@dataclass(frozen=True, slots=True)
class HostCPU:
    """What native code compiled here is specialised for.

    ``features`` is LLVM's flattened feature string (``"+avx2,-amx-int8,..."``);
    ``llvmlite`` is the llvmlite version, since object code from another LLVM may differ.
    """

    triple: str
    name: str
    features: str
    llvmlite: str

    def feature_set(self) -> frozenset[str]:
        """The enabled features, without the ``+`` (``{"avx2", "fma", ...}``)."""
        return parse_features(self.features)


def parse_features(features: str) -> frozenset[str]:
    """Enabled features of an LLVM feature string.

    >>> sorted(parse_features("+avx2,-avx512f,+fma"))
    ['avx2', 'fma']
    """
    return frozenset(f[1:] for f in features.split(",") if f.startswith("+"))


@functools.cache
def host_cpu() -> HostCPU:
    """The host's triple, CPU name, feature string and llvmlite version (cached).

    >>> host_cpu().name  # doctest: +SKIP
    'znver4'
    """
    ensure_initialized()
    return HostCPU(
        triple=llvm.get_process_triple(),
        name=llvm.get_host_cpu_name(),
        features=llvm.get_host_cpu_features().flatten(),
        llvmlite=llvmlite.__version__,
    )


def _default_vector_width() -> int:
    raw = os.environ.get(VECTOR_WIDTH_ENV, "512")
    try:
        width = int(raw)
    except ValueError:
        width = -1
    if width not in _VALID_WIDTHS:
        raise ValueError(f"{VECTOR_WIDTH_ENV} must be 256 or 512, got {raw!r}")
    return width


#: Tuning features appended to the host's (they change LLVM's choices, not the instructions the code may use):
#: the loop vectorizer does not emit gathers or scatters for strided accesses (it loads whole vectors and shuffles,
#: or scalarizes). Measured on a Zen 4 (znver4) VM, one thread, one process, compiled both ways and interleaved:
#: with Winograd's transforms (stride-2 taps, the scatter of a transposed product's output) loading and shuffling,
#: the bench ResNet b1 / b16 ran in 0.86 / 0.82 of the time they took with gathers and ResNet-50 b1 in 0.95; the
#: other bench models within noise (0.98-1.02). Results are bitwise equal.
NO_GATHER = ",+prefer-no-gather,+prefer-no-scatter"


def feature_string(prefer_vector_width: int | None = None) -> str:
    """Host features plus the tuning actually given to LLVM: the vector-width preference and :data:`NO_GATHER`.

    With 512, ``-prefer-256-bit`` is appended so LLVM's cost model uses zmm registers on
    cores whose tuning prefers 256-bit vectors.
    """
    width = _default_vector_width() if prefer_vector_width is None else prefer_vector_width
    if width not in _VALID_WIDTHS:
        raise ValueError(f"prefer_vector_width must be 256 or 512, got {width!r}")
    features = host_cpu().features
    return features + (",-prefer-256-bit" if width == 512 else ",+prefer-256-bit") + NO_GATHER


def host_target_machine(*, opt: int = 3, jit: bool = False,
                        prefer_vector_width: int | None = None) -> llvm.TargetMachine:
    """A cached target machine for the host CPU (``reloc="pic"``, default code model).

    ``prefer_vector_width`` is 256 or 512 (default: env ``TENSORPLAY_VECTOR_WIDTH``, else 512).

    The machine is shared: never hand it to an API that takes ownership of its target machine.

    >>> tm = host_target_machine(opt=2)
    >>> tm is host_target_machine(opt=2)
    True
    """
    return _cached_target_machine(_check_opt(opt), bool(jit), feature_string(prefer_vector_width))


def _check_opt(opt: int) -> int:
    if isinstance(opt, bool) or not isinstance(opt, int) or not 0 <= opt <= 3:
        raise ValueError(f"opt must be an int in 0..3, got {opt!r}")
    return opt


@functools.cache
def _cached_target_machine(opt: int, jit: bool, features: str) -> llvm.TargetMachine:
    cpu = host_cpu()
    target = llvm.Target.from_triple(cpu.triple)
    return target.create_target_machine(cpu=cpu.name, features=features, opt=opt, reloc="pic",
                                        codemodel="default", jit=jit)


def prepare_module(module_ref: llvm.ModuleRef, tm: llvm.TargetMachine) -> None:
    """Set the module's triple and data layout to the target machine's."""
    module_ref.triple = tm.triple
    module_ref.data_layout = str(tm.target_data)


def optimize(module_ref: llvm.ModuleRef, tm: llvm.TargetMachine, *, speed_level: int = 3) -> None:
    """Run LLVM's default new-pass-manager pipeline in place, loop and SLP vectorization on.

    The module's triple and data layout are set from ``tm`` first, since the vectorizer's
    cost model comes from the target machine.

    >>> mod = llvm.parse_assembly("define i32 @f(i32 %x) { ret i32 %x }")
    >>> optimize(mod, host_target_machine())
    """
    if not isinstance(speed_level, int) or not 0 <= speed_level <= 3:
        raise ValueError(f"speed_level must be an int in 0..3, got {speed_level!r}")
    prepare_module(module_ref, tm)
    pto = llvm.create_pipeline_tuning_options(speed_level=speed_level)
    if speed_level >= 2:
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pto.loop_unrolling = True
        pto.loop_interleaving = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module_ref, pb)
