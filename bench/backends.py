"""The columns of the table: one ``prepare`` function per inference path.

``prepare(case, pair, threads)`` returns a :class:`Runner` (a zero-argument call returning the
output as numpy, plus the seconds spent compiling or exporting first) or raises
:class:`Unavailable` with the text to print instead of a number.

>>> from bench.models import cases, make_pair
>>> case = cases(quick=True)[0]
>>> runner = BACKENDS["torch eager"](case, make_pair(case.model), 1)
>>> runner.call().shape
(1, 10)
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import numpy_ref
from .models import Case

DYNAMIC_AXIS = {"mlp": 0, "resnet": 0, "transformer": 0, "lstm": 0, "gpt": 1,  # exported as dynamic
                "resnet50": 0, "mobilenetv2": 0, "bert": 0, "gpt2": 1, "vit": 0}
SEQUENCE_MODELS = {m for m, axis in DYNAMIC_AXIS.items() if axis == 1}  # torch.compile marks their sequence dynamic


class Unavailable(Exception):
    """A cell that has no number: the reason is printed in its place."""


def error_text(exc: BaseException, prefix: str = "error") -> str:
    """One line for a table cell: ``error: ValueError: first line of the message``."""
    first = str(exc).splitlines()[0][:160] if str(exc) else ""
    return f"{prefix}: {type(exc).__name__}: {first}"


@dataclass
class Runner:
    call: Callable[[], np.ndarray]
    setup_s: float | None = None  # compile/export time, for compiled paths
    note: str = ""
    info: dict | None = None  # extra facts for the JSON record (e.g. the compiler's stats)


def _torch_inputs(case: Case) -> list:
    import torch

    return [torch.from_numpy(x) for x in case.inputs]


def tensorplay_eager(case: Case, pair: tuple[Any, Any], threads: int) -> Runner:
    import tensorplay

    model, args = pair[1], [tensorplay.from_numpy(x) for x in case.inputs]

    def call() -> np.ndarray:
        with tensorplay.inference_mode():
            return model(*args).numpy()

    return Runner(call)


def _as_array(result: Any) -> np.ndarray:
    """The first output of a compiled call (a Tensor, an ndarray, or a tuple/list of them) as numpy."""
    if isinstance(result, (tuple, list)):
        result = result[0]
    return np.asarray(result.numpy() if hasattr(result, "numpy") else result)


_PROGRAMS: dict[tuple, tuple[Any, dict]] = {}


def _compiled_entry(case: Case, model: Any, threads: int) -> tuple[Callable[[], Any], dict, dict] | None:
    """The model exported with ``tensorplay.export.export`` (batch, or sequence for GPT, dynamic) and
    compiled by ``tensorplay.compile(program, num_threads=threads)``, once per model and thread
    count: every row of a model runs the same dynamic-shape program. Returns the call (running the
    native code), the compiler's stats and ``{"export_s", "compile_s"}`` when it compiled now (empty when
    an earlier row did); None while ``tensorplay.compile`` does not exist."""
    import tensorplay

    if not hasattr(tensorplay, "compile"):
        return None
    from tensorplay.export import Dim, export

    args = tuple(tensorplay.from_numpy(x) for x in case.inputs)
    axis = DYNAMIC_AXIS.get(case.model)
    key = (case.model, "dyn" if axis is not None else case.label, threads)
    times = {}
    if key not in _PROGRAMS:
        dynamic = None if axis is None else [{axis: Dim.AUTO}] + [None] * (len(args) - 1)
        t0 = time.perf_counter()
        program = export(model, *args, dynamic_shapes=dynamic)
        t1 = time.perf_counter()
        compiled = tensorplay.compile(program, num_threads=threads)
        times = {"export_s": t1 - t0, "compile_s": time.perf_counter() - t1}
        _packed(compiled)
        _PROGRAMS[key] = program, dict(getattr(compiled, "stats", None) or {})
    program, stats = _PROGRAMS[key]
    return (lambda: program(*args)), stats, times


def _packed(compiled: Any) -> None:
    """Wait for the weight packing a program restored from the compile cache runs on a background thread, so
    the timed calls are steady-state ones (before it ends, calls pack their weights in the kernels)."""
    packer = getattr(compiled, "_prepack", None)
    if packer is not None:
        packer.wait()


def tensorplay_compiled(case: Case, pair: tuple[Any, Any], threads: int) -> Runner:
    """The exported program compiled to native code (see :func:`_compiled_entry`); setup is export +
    compile (once per model and thread count) + first call. "n/a (not built)" before the compiler
    exists; its error when it fails."""
    t0 = time.perf_counter()
    try:
        entry = _compiled_entry(case, pair[1], threads)
        if entry is None:
            raise Unavailable("n/a (not built)")
        call, stats, times = entry
        call()
    except Unavailable:
        raise
    except Exception as exc:  # an unsupported model is a result: show why
        raise Unavailable(error_text(exc)) from exc
    return Runner(lambda: _as_array(call()), time.perf_counter() - t0, info={"compiler_stats": stats, **times},
                  note="setup = export + compile (once per model and thread count: later rows of a model reuse "
                  "its dynamic-shape program) + first call")


_IMPORTED: dict[tuple, tuple[Any, dict]] = {}


def tensorplay_imported(case: Case, pair: tuple[Any, Any], threads: int) -> Runner:
    """The PyTorch instance (the one the torch columns run) exported by ``torch.export`` with the same
    dynamic axis, imported by ``tensorplay.export.from_torch`` and compiled as "tensorplay compiled" is
    (once per model and thread count); setup is export + import + compile + first call."""
    import torch

    import tensorplay
    from tensorplay.export import from_torch

    t0 = time.perf_counter()
    args = tuple(tensorplay.from_numpy(x) for x in case.inputs)
    axis = DYNAMIC_AXIS.get(case.model)
    key = (case.model, "dyn" if axis is not None else case.label, threads)
    try:
        if key not in _IMPORTED:
            torch_args = tuple(_torch_inputs(case))
            if axis is not None and torch_args[0].shape[axis] == 1:  # torch would make an extent-1 example static
                torch_args = (torch.cat([torch_args[0]] * 2, axis), *torch_args[1:])
            def spec(size: Any) -> Any:
                return None if axis is None else ({axis: size},) + (None,) * (len(torch_args) - 1)
            try:  # Dim.AUTO would leave out size 1 (torch's "0/1 specialization")
                program = from_torch(pair[0], torch_args, dynamic_shapes=spec(torch.export.Dim("size", min=1)))
            except torch._dynamo.exc.UserError:  # the model needs more than 1 along the axis (GPT's sequence)
                program = from_torch(pair[0], torch_args, dynamic_shapes=spec(torch.export.Dim.AUTO))
            compiled = tensorplay.compile(program, num_threads=threads)
            _packed(compiled)
            _IMPORTED[key] = program, dict(getattr(compiled, "stats", None) or {})
        program, stats = _IMPORTED[key]
        program(*args)
    except Exception as exc:  # an unsupported model is a result: show why
        raise Unavailable(error_text(exc)) from exc
    return Runner(lambda: _as_array(program(*args)), time.perf_counter() - t0, info={"compiler_stats": stats},
                  note="setup = torch.export + from_torch + compile (once per model and thread count) + first call")


def torch_eager(case: Case, pair: tuple[Any, Any], threads: int) -> Runner:
    import torch

    model, args = pair[0], _torch_inputs(case)

    def call() -> np.ndarray:
        with torch.inference_mode():
            return model(*args).numpy()

    return Runner(call)


def torch_compile(case: Case, pair: tuple[Any, Any], threads: int) -> Runner:
    """Inductor, compiled after the thread count is set (its C++ kernels fix it at compile time)."""
    import torch

    torch._dynamo.reset()
    args = _torch_inputs(case)
    if case.model in SEQUENCE_MODELS:
        torch._dynamo.mark_dynamic(args[0], 1)
    compiled = torch.compile(pair[0], backend="inductor")
    t0 = time.perf_counter()
    try:
        with torch.inference_mode():
            compiled(*args)
    except Exception as exc:  # the error text is the result, shown in the table
        raise Unavailable(error_text(exc)) from exc
    setup = time.perf_counter() - t0

    def call() -> np.ndarray:
        with torch.inference_mode():
            return compiled(*args).numpy()

    has_rnn = any(isinstance(m, torch.nn.RNNBase) for m in pair[0].modules())
    skipped = has_rnn and not torch._dynamo.config.allow_rnn
    note = "dynamo skips nn.LSTM (allow_rnn=False): the LSTM row runs eager" if skipped else ""
    return Runner(call, setup, note=note)


_ONNX_CACHE: dict[tuple[str, str], tuple[bytes, float]] = {}


def onnx_key(case: Case) -> tuple[str, str]:
    """The rows sharing one ONNX export: a model's, when its batch (GPT: sequence) axis is dynamic; else one row's."""
    return case.model, "dyn" if case.model in DYNAMIC_AXIS else case.label


def exported_onnx(case: Case) -> tuple[bytes, float] | None:
    """The ONNX bytes exported for ``case``'s model in this process and the seconds it took, if any."""
    return _ONNX_CACHE.get(onnx_key(case))


def preload_onnx(case: Case, blob: bytes, export_s: float) -> None:
    """Make ``blob`` (exported in ``export_s`` seconds, elsewhere) the ONNX model of ``case``'s rows."""
    _ONNX_CACHE[onnx_key(case)] = blob, export_s


def onnx_bytes(case: Case, model: Any) -> tuple[bytes, float]:
    """The model exported with ``torch.onnx.export`` (dynamo exporter) and the seconds it took, cached per
    model; the batch (sequence for GPT) axis is dynamic so one export serves every row of a model."""
    import torch

    axis = DYNAMIC_AXIS.get(case.model)
    key = onnx_key(case)
    if key not in _ONNX_CACHE:
        args = tuple(_torch_inputs(case))
        dynamic = None if axis is None else ({axis: torch.export.Dim.AUTO},)
        t0 = time.perf_counter()
        try:
            program = torch.onnx.export(model, args, dynamic_shapes=dynamic, dynamo=True, verbose=False)
            blob = program.model_proto.SerializeToString()
        except Exception as exc:
            raise Unavailable(error_text(exc, "export error")) from exc
        _ONNX_CACHE[key] = (blob, time.perf_counter() - t0)
    return _ONNX_CACHE[key]


def onnxruntime(case: Case, pair: tuple[Any, Any], threads: int) -> Runner:
    """ONNX Runtime (CPU provider, all graph optimisations) on the torch.onnx export: ``threads`` intra-op threads,
    one inter-op thread (sequential execution), workers spinning between calls (the default)."""
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise Unavailable("n/a (onnxruntime not installed)") from exc
    blob, export_s = onnx_bytes(case, pair[0])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1")  # ORT's default, as a deployment runs it
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    t0 = time.perf_counter()
    session = ort.InferenceSession(blob, opts, providers=["CPUExecutionProvider"])
    feeds = {i.name: x for i, x in zip(session.get_inputs(), case.inputs)}
    setup = export_s + time.perf_counter() - t0
    return Runner(lambda: session.run(None, feeds)[0], setup,
                  note="setup = torch.onnx export (once per model, reused by its rows) + session creation")


def known_unavailable(backend: str, case: Case) -> str | None:
    """Why ``backend`` has no number for ``case``, when that is known without building the models."""
    if backend == "numpy":
        if case.model not in numpy_ref.FORWARDS:
            return "n/a (not hand-written)"
        if case.model in numpy_ref.NEEDS_ERF and numpy_ref.ERF is None:
            return "n/a (needs scipy for erf)"
    return None


def numpy_forward(case: Case, pair: tuple[Any, Any], threads: int) -> Runner:
    if (why := known_unavailable("numpy", case)) is not None:
        raise Unavailable(why)
    forward = numpy_ref.FORWARDS[case.model]
    params = {k: v.detach().numpy() for k, v in pair[0].state_dict().items()}
    return Runner(lambda: forward(params, *case.inputs))


def release(model: str) -> None:
    """Drop the programs and ONNX exports kept for ``model``'s later rows (after its last row)."""
    for cache in (_PROGRAMS, _IMPORTED, _ONNX_CACHE):
        for key in [k for k in cache if k[0] == model]:
            del cache[key]


BACKENDS: dict[str, Callable[[Case, tuple[Any, Any], int], Runner]] = {
    "tensorplay eager": tensorplay_eager,
    "tensorplay compiled": tensorplay_compiled,
    "tensorplay imported": tensorplay_imported,
    "torch eager": torch_eager,
    "torch.compile": torch_compile,
    "onnxruntime": onnxruntime,
    "numpy": numpy_forward,
}
REFERENCE = "torch eager"
