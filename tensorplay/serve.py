"""Serve and batch-infer compiled programs on Ray: a Ray Serve deployment and a Ray Data predictor.

Both load an archive once per replica / worker and call the program, which runs its native code
(the archive's stored code, or compiled on first use). Requests and data batches are split and joined
along the program's dynamic batch dimension: the ``Dim`` that every user input and every output
carries (``export(..., dynamic_shapes={"x": {0: Dim("batch")}})``).

Online inference with Ray Serve (a request is the program's inputs, numpy arrays with their batch axis)::

    from ray import serve
    from tensorplay.serve import deployment
    handle = serve.run(deployment("mlp.pt2", num_replicas=2, num_threads=1, max_batch_size=32))
    y = handle.remote(x).result()                 # x: [rows, 784] float32 -> y: [rows, 10]
    handle.batch_sizes.remote().result()          # requests per program call, most recent last

Batch inference with Ray Data (dict-of-columns batches, numpy in and out)::

    import ray
    from tensorplay.serve import map_batches
    ds = map_batches(ray.data.from_numpy(x), "mlp.pt2", workers=2, num_threads=1)   # column "output"

``archive`` is a path every worker can read (shared storage), the archive's bytes, or an
``ExportedProgram``, which Ray pickles by value (its archive bytes, native code included; see
:mod:`tensorplay.export.pickling`). Ray is imported only by :class:`ProgramServer`, :func:`deployment`
and :func:`map_batches`, never by ``import tensorplay``; without it they raise ``ImportError`` naming
``pip install 'tensorplay[ray]'``. :class:`BatchLayout` and :class:`ProgramPredictor` need no Ray.
"""
from __future__ import annotations

import asyncio
import collections
import os
from typing import Any

import numpy as np
import sympy

__all__ = ["BatchLayout", "ProgramPredictor", "ProgramServer", "deployment", "load_program", "map_batches"]

_INSTALL = "pip install 'tensorplay[ray]'"


def _import_ray(what: str, module: str) -> Any:
    """``ray.serve`` or ``ray.data``, or an ``ImportError`` saying how to install them."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{what} needs {module} (Ray Serve and Ray Data): {_INSTALL}") from exc


def load_program(archive: Any) -> Any:
    """The ``ExportedProgram`` of ``archive``: a path or the bytes of a ``.pt2`` archive (read with
    ``tensorplay.export.load``), or a program (returned as is)."""
    from .export import ExportedProgram, load

    if isinstance(archive, ExportedProgram):
        return archive
    if isinstance(archive, bytes | bytearray | memoryview | str | os.PathLike):
        return load(bytes(archive) if isinstance(archive, bytearray | memoryview) else archive)
    raise TypeError(f"archive must be a path, archive bytes or an ExportedProgram, got {type(archive).__name__}")


def _use_threads(num_threads: int | None) -> None:
    """Intra-op threads of the native code run in this process (a Ray replica or worker is its own process)."""
    if num_threads is None:
        return
    if type(num_threads) is not int or num_threads < 1:
        raise ValueError(f"num_threads must be a positive int or None, got {num_threads!r}")
    from .lowering.api import NUM_THREADS_ENV

    os.environ[NUM_THREADS_ENV] = str(num_threads)


class BatchLayout:
    """Where a program's batch dimension sits in each user input and output, and how to batch requests.

    The batch dimension is the symbol every user input and every user output has as exactly one whole
    dimension (``batch_dim`` names it when several qualify). ``fits`` checks one request against the
    program's input specs and shape assertions without running it; ``run`` calls the program once on
    requests joined along the batch axis and splits the results back.

    >>> import numpy as np, tensorplay as tp
    >>> from tensorplay.export import Dim, export
    >>> layout = BatchLayout(export(tp.nn.Linear(3, 2), tp.ones(4, 3),
    ...                             dynamic_shapes={"input": {0: Dim("batch", max=8)}}))
    >>> layout.inputs, layout.input_axes, layout.output_axes, layout.max_rows
    (['input'], [0], [0], 8)
    >>> layout.fits([np.ones((9, 3), np.float32)]), layout.fits([np.ones((2, 3), np.float64)])
    (False, False)
    >>> [y.shape for y in layout.run([[np.ones((1, 3), np.float32)], [np.ones((2, 3), np.float32)]])]
    [(1, 2), (2, 2)]
    """

    def __init__(self, program: Any, batch_dim: str | None = None) -> None:
        from .export.graph_signature import InputKind
        from .ops import TensorMeta

        self.program = program
        nodes = {n.name: n for n in program.graph.placeholders}
        self.inputs = [s.arg.name for s in program.graph_signature.input_specs if s.kind is InputKind.USER_INPUT]
        self.metas = []
        for name in self.inputs:
            meta = nodes[name].meta.get("val")
            if not isinstance(meta, TensorMeta):
                raise ValueError(f"input {name!r} is not a tensor: tensorplay.serve batches programs whose inputs "
                                 "are all tensors")
            self.metas.append(meta)
        outputs = _user_output_metas(program)
        symbols = _batch_symbols([m.shape for m in self.metas] + [m.shape for m in outputs])
        if batch_dim is not None:
            symbols = {s: axes for s, axes in symbols.items() if str(s) == batch_dim}
        if len(symbols) != 1:
            raise ValueError(_no_batch_message(self.inputs, self.metas, outputs, symbols, batch_dim))
        ((self.symbol, axes),) = symbols.items()
        self.input_axes, self.output_axes = axes[:len(self.inputs)], axes[len(self.inputs):]
        bounds = program.range_constraints.get(str(self.symbol), {})
        self.max_rows = bounds.get("max")
        self._assertions = _shape_assertions(program, self.inputs)

    # ------------------------------------------------------------------ one request
    def bind(self, args: tuple, kwargs: dict) -> list[np.ndarray]:
        """A request's inputs as arrays in the program's input order (``args`` positional, ``kwargs`` by name)."""
        if len(args) > len(self.inputs):
            raise TypeError(f"the program takes {len(self.inputs)} inputs {self.inputs}, got {len(args)}")
        bound = dict(zip(self.inputs, args, strict=False))
        for key, value in kwargs.items():
            if key not in self.inputs or key in bound:
                raise TypeError(f"unexpected or repeated input {key!r}; the program's inputs are {self.inputs}")
            bound[key] = value
        missing = [name for name in self.inputs if name not in bound]
        if missing:
            raise TypeError(f"missing inputs {missing}; the program's inputs are {self.inputs}")
        return [value if isinstance(value, np.ndarray) else np.asarray(value, dtype=meta.dtype.storage)
                for value, meta in ((bound[n], m) for n, m in zip(self.inputs, self.metas, strict=True))]

    def rows(self, arrays: list[np.ndarray]) -> int:
        return int(arrays[0].shape[self.input_axes[0]])

    def fits(self, arrays: list[np.ndarray]) -> bool:
        """Whether the program accepts these inputs: rank, dtype, static extents and its shape assertions."""
        from . import _dtype
        from .export.dynamic_shapes import ConstraintsExceededError

        for array, meta in zip(arrays, self.metas, strict=True):
            try:
                dtype = _dtype.from_numpy_dtype(array.dtype)
            except (TypeError, ValueError, KeyError):
                return False
            if dtype is not meta.dtype or array.ndim != len(meta.shape) or any(
                    isinstance(want, int) and want != got for want, got in zip(meta.shape, array.shape, strict=True)):
                return False
        for check, args in self._assertions:
            try:
                check(*_substitute(args, arrays))
            except ConstraintsExceededError:
                return False
        return True

    # ------------------------------------------------------------------ running
    def call(self, arrays: list[np.ndarray]) -> tuple[list[np.ndarray], Any]:
        """The program on ``arrays``: ``(flat outputs as arrays, tree spec of its result)``."""
        from . import from_numpy
        from ._tensor import Tensor
        from .graph._pytree import tree_flatten

        leaves, spec = tree_flatten(self.program(*[from_numpy(a) for a in arrays]))
        if len(leaves) != len(self.output_axes) or not all(isinstance(t, Tensor) for t in leaves):
            kinds = [type(t).__name__ for t in leaves]
            raise TypeError(f"expected {len(self.output_axes)} tensor outputs, got {kinds}")
        return [t.numpy(force=True) for t in leaves], spec

    def run(self, requests: list[list[np.ndarray]]) -> list[Any]:
        """One program call on ``requests`` joined along the batch axis (same non-batch extents and dtypes);
        each request's result comes back in the program's output structure, as numpy arrays."""
        from .graph._pytree import tree_unflatten

        if len(requests) == 1:
            joined = requests[0]
        else:
            joined = [np.concatenate([r[i] for r in requests], axis=axis) for i, axis in enumerate(self.input_axes)]
        outputs, spec = self.call(joined)
        cuts = np.cumsum([self.rows(r) for r in requests])[:-1]
        pieces = [np.split(out, cuts, axis=axis) for out, axis in zip(outputs, self.output_axes, strict=True)]
        return [tree_unflatten([p[i] for p in pieces], spec) for i in range(len(requests))]

    def groups(self, requests: list[list[np.ndarray]]) -> list[list[int]]:
        """Request indices to run together: same dtypes and non-batch extents, at most ``max_rows`` rows."""
        by_key: dict[tuple, list[list[int]]] = {}
        filled: dict[tuple, int] = {}  # rows in the last chunk of each key
        for index, arrays in enumerate(requests):
            key = tuple((a.dtype.str, a.shape[:axis] + a.shape[axis + 1:])
                        for a, axis in zip(arrays, self.input_axes, strict=True))
            chunks = by_key.setdefault(key, [[]])
            rows = self.rows(arrays)
            if chunks[-1] and self.max_rows is not None and filled[key] + rows > self.max_rows:
                chunks.append([])
            filled[key] = (filled[key] if chunks[-1] else 0) + rows
            chunks[-1].append(index)
        return [chunk for chunks in by_key.values() for chunk in chunks]


def _user_output_metas(program: Any) -> list:
    from .ops import TensorMeta

    (result,) = program.graph.output_node.args
    flat = list(result) if isinstance(result, list | tuple) else [result]
    metas = []
    for i, node in enumerate(flat[program.graph_module.meta.get("num_mutations", 0):]):
        meta = getattr(node, "meta", {}).get("val")
        if not isinstance(meta, TensorMeta):
            raise ValueError(f"output {i} is not a tensor: tensorplay.serve splits tensor outputs only")
        metas.append(meta)
    return metas


def _batch_symbols(shapes: list) -> dict[Any, list[int]]:
    """Symbols that are exactly one whole dimension of every shape, with that axis per shape."""
    found: dict[Any, list[int]] | None = None
    for shape in shapes:
        axes = {}
        for axis, dim in enumerate(shape):
            if isinstance(dim, sympy.Symbol):
                axes[dim] = None if dim in axes else axis
        here = {s: a for s, a in axes.items() if a is not None}
        found = {s: [a] for s, a in here.items()} if found is None else \
            {s: [*axes_, here[s]] for s, axes_ in found.items() if s in here}
    return found or {}


def _no_batch_message(inputs: list, metas: list, outputs: list, symbols: dict, batch_dim: str | None) -> str:
    shapes = ", ".join(f"{n}: {list(m.shape)}" for n, m in zip(inputs, metas, strict=True))
    shapes += "; outputs: " + ", ".join(str(list(m.shape)) for m in outputs)
    if symbols:
        return (f"several dimensions could be the batch ({', '.join(sorted(map(str, symbols)))}); name one with "
                f"batch_dim= (inputs {shapes})")
    named = f" named {batch_dim!r}" if batch_dim is not None else ""
    return (f"the program has no dynamic batch dimension{named} shared by every input and output (inputs {shapes}); "
            "export it with one, e.g. dynamic_shapes={'x': {0: Dim('batch')}}")


def _shape_assertions(program: Any, inputs: list[str]) -> list[tuple[Any, tuple]]:
    """The graph's shape assertions over user inputs only, as ``(function, args)``; a placeholder argument
    becomes ``_Input(i)`` (checked by :class:`BatchLayout` without running the program)."""
    from .export import assertions

    checks = {assertions.assert_dim_range, assertions.assert_dim_equal, assertions.assert_dim_relation,
              assertions.assert_guard}
    position = {name: i for i, name in enumerate(inputs)}
    found = []
    for node in program.graph.nodes:
        if node.op != "call_function" or node.target not in checks:
            continue
        try:
            found.append((node.target, _symbolic(node.args, position)))
        except KeyError:  # reads something other than a user input: left to the program itself
            continue
    return found


class _Input(int):
    """Argument ``i`` of a request, inside a stored assertion call."""


def _symbolic(value: Any, position: dict[str, int]) -> Any:
    if hasattr(value, "op"):
        if value.op != "placeholder":
            raise KeyError(value.name)
        return _Input(position[value.name])
    if isinstance(value, tuple | list):
        return type(value)(_symbolic(v, position) for v in value)
    return value


def _substitute(value: Any, arrays: list[np.ndarray]) -> Any:
    if type(value) is _Input:
        return arrays[value]
    if isinstance(value, tuple | list):
        return type(value)(_substitute(v, arrays) for v in value)
    return value


def _run_alone(layout: BatchLayout, arrays: list[np.ndarray]) -> Any:
    """The request's result, or the exception the program raised for it."""
    try:
        return layout.run([arrays])[0]
    except Exception as exc:  # handed to this request only
        return exc


class ProgramServer:
    """The body of a Ray Serve deployment: one program per replica, requests batched along its batch dimension.

    A request is the program's inputs (positional or by name; numpy arrays carrying the batch axis, or
    nested lists), or an HTTP request whose JSON body maps input names to nested lists. Requests that
    fit the program are queued by ``serve.batch`` (``max_batch_size`` requests, waiting at most
    ``batch_wait_timeout_s`` for more), joined along the batch axis per group of equal other extents
    (at most the ``Dim``'s max rows per call), run once, and split back. A request the program's
    input checks refuse runs alone and gets the program's own error; the rest of the batch is not
    affected. ``batch_sizes()`` lists how many requests each program call joined (most recent last).
    """

    def __init__(self, archive: Any, *, max_batch_size: int = 16, batch_wait_timeout_s: float = 0.005,
                 num_threads: int | None = None, batch_dim: str | None = None, history: int = 1024) -> None:
        serve = _import_ray("tensorplay.serve.ProgramServer", "ray.serve")

        _use_threads(num_threads)
        self.layout = BatchLayout(load_program(archive), batch_dim)
        self._formed: collections.deque[int] = collections.deque(maxlen=history)
        self._batched = serve.batch(max_batch_size=max_batch_size,
                                    batch_wait_timeout_s=batch_wait_timeout_s)(self._run_batch)

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and _is_http(args[0]):
            return await self._http(args[0])
        arrays = self.layout.bind(args, kwargs)
        if self.layout.fits(arrays):
            result = await self._batched(arrays)
        else:  # the program raises its own error for it, before any kernel runs
            result = await asyncio.to_thread(_run_alone, self.layout, arrays)
        if isinstance(result, BaseException):
            raise result
        return result

    async def _run_batch(self, requests: list[list[np.ndarray]]) -> list[Any]:
        return await asyncio.to_thread(self._run, requests)

    def _run(self, requests: list[list[np.ndarray]]) -> list[Any]:
        results: list[Any] = [None] * len(requests)
        for indices in self.layout.groups(requests):
            self._formed.append(len(indices))
            try:
                outputs = self.layout.run([requests[i] for i in indices])
            except Exception:  # something the checks did not foresee: each request alone gets its own answer
                outputs = [_run_alone(self.layout, requests[i]) for i in indices]
            for i, out in zip(indices, outputs, strict=True):
                results[i] = out
        return results

    async def _http(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        from .graph._pytree import tree_map

        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise TypeError(f"expected a JSON object mapping input names to arrays, got {type(body).__name__}")
            result = await self(**body)
        except (ValueError, TypeError, RuntimeError) as exc:  # bad JSON or inputs, shapes the program refuses
            return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=400)
        return JSONResponse(tree_map(lambda a: a.tolist(), result))

    def batch_sizes(self) -> list[int]:
        """How many requests each program call joined, oldest first (the last ``history`` calls)."""
        return list(self._formed)

    def stats(self) -> dict[str, Any]:
        """This replica's id and :meth:`batch_sizes` (a handle call reaches one replica of several)."""
        from ray import serve

        return {"replica": str(serve.get_replica_context().replica_id), "batch_sizes": self.batch_sizes()}


def _is_http(value: Any) -> bool:
    return hasattr(value, "scope") and hasattr(value, "json")


def deployment(archive: Any, *, num_replicas: int = 1, num_threads: int = 1, max_batch_size: int = 16,
               batch_wait_timeout_s: float = 0.005, batch_dim: str | None = None, name: str = "tensorplay",
               **options: Any) -> Any:
    """A Ray Serve application serving ``archive``: ``num_replicas`` replicas of :class:`ProgramServer`,
    each reserving ``num_threads`` CPUs and running the native code on that many threads.

    ``options`` go to ``serve.deployment`` (``max_ongoing_requests`` defaults to twice ``max_batch_size``,
    so one batch forms while another runs). Start it with ``serve.run(deployment(...))``.
    """
    serve = _import_ray("tensorplay.serve.deployment", "ray.serve")
    options.setdefault("max_ongoing_requests", 2 * max_batch_size)
    options.setdefault("ray_actor_options", {"num_cpus": num_threads})
    app = serve.deployment(ProgramServer, name=name, num_replicas=num_replicas, **options)
    return app.bind(archive, max_batch_size=max_batch_size, batch_wait_timeout_s=batch_wait_timeout_s,
                    num_threads=num_threads, batch_dim=batch_dim)


class ProgramPredictor:
    """A callable class for Ray Data's ``Dataset.map_batches``: loads the archive once per worker and runs
    each batch of rows (a dict of numpy columns; row ``i`` of every input column is row ``i`` of the batch).

    ``input_columns`` name the columns holding the program's inputs (default: the input names);
    ``output_columns`` name the outputs in the order the program's result flattens (default: ``output``
    for one tensor, the keys of a dict result, else ``output_0``, ``output_1``...); ``keep_columns`` are
    copied through (an id to join on, say). Batches larger than the batch ``Dim``'s max run in chunks.
    ``num_threads`` sets this worker's native threads (``TENSORPLAY_NUM_THREADS``). No Ray needed.

    >>> import numpy as np, tensorplay as tp
    >>> from tensorplay.export import Dim, export
    >>> predict = ProgramPredictor(export(tp.nn.Linear(3, 2), tp.ones(4, 3),
    ...                                   dynamic_shapes={"input": {0: Dim("batch", max=4)}}), keep_columns=["id"])
    >>> out = predict({"id": np.arange(10), "input": np.ones((10, 3), np.float32)})
    >>> sorted(out), out["output"].shape
    (['id', 'output'], (10, 2))
    """

    def __init__(self, archive: Any, *, input_columns: list[str] | None = None,
                 output_columns: list[str] | None = None, keep_columns: list[str] | tuple = (),
                 num_threads: int | None = None, batch_dim: str | None = None) -> None:
        _use_threads(num_threads)
        self.layout = BatchLayout(load_program(archive), batch_dim)
        self.input_columns = list(input_columns or self.layout.inputs)
        if len(self.input_columns) != len(self.layout.inputs):
            raise ValueError(f"input_columns {self.input_columns} must name the program's "
                             f"{len(self.layout.inputs)} inputs {self.layout.inputs}")
        self.output_columns = list(output_columns) if output_columns is not None else None
        if self.output_columns is not None and len(self.output_columns) != len(self.layout.output_axes):
            raise ValueError(f"output_columns {self.output_columns} must name the program's "
                             f"{len(self.layout.output_axes)} outputs")
        self.keep_columns = list(keep_columns)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        arrays = [np.moveaxis(np.asarray(batch[c]), 0, axis)
                  for c, axis in zip(self.input_columns, self.layout.input_axes, strict=True)]
        rows, step = self.layout.rows(arrays), self.layout.max_rows
        if step is None or rows <= step:
            outputs, spec = self.layout.call(arrays)
        else:  # more rows than the program takes at once
            parts = []
            for start in range(0, rows, step):
                outputs, spec = self.layout.call([_rows(a, axis, start, start + step)
                                                  for a, axis in zip(arrays, self.layout.input_axes, strict=True)])
                parts.append(outputs)
            outputs = [np.concatenate([p[i] for p in parts], axis=axis)
                       for i, axis in enumerate(self.layout.output_axes)]
        names = self.output_columns or _output_names(spec)
        result = {name: batch[name] for name in self.keep_columns}
        for name, out, axis in zip(names, outputs, self.layout.output_axes, strict=True):
            result[name] = np.moveaxis(out, axis, 0)
        return result


def _rows(array: np.ndarray, axis: int, start: int, stop: int) -> np.ndarray:
    return array[(slice(None),) * axis + (slice(start, stop),)]


def _output_names(spec: Any) -> list[str]:
    if spec.is_leaf():
        return ["output"]
    if spec.type is dict and all(isinstance(k, str) and c.is_leaf()
                                 for k, c in zip(spec.context, spec.children_specs, strict=True)):
        return list(spec.context)
    return [f"output_{i}" for i in range(spec.num_leaves)]


def map_batches(dataset: Any, archive: Any, *, workers: int = 1, num_threads: int = 1, batch_size: int = 256,
                **options: Any) -> Any:
    """``dataset.map_batches`` with a :class:`ProgramPredictor` on ``workers`` actors, each reserving
    ``num_threads`` CPUs; ``options`` are the predictor's keyword arguments (``input_columns``,
    ``output_columns``, ``keep_columns``, ``batch_dim``) plus any ``map_batches`` argument."""
    data = _import_ray("tensorplay.serve.map_batches", "ray.data")
    names = ("input_columns", "output_columns", "keep_columns", "batch_dim")
    kwargs = {k: options.pop(k) for k in names if k in options}
    return dataset.map_batches(ProgramPredictor, fn_constructor_args=(archive,),
                               fn_constructor_kwargs={**kwargs, "num_threads": num_threads},
                               compute=data.ActorPoolStrategy(size=workers), num_cpus=num_threads,
                               batch_size=batch_size, batch_format="numpy", **options)
