"""Programs pickle by value: as the bytes of their ``.pt2`` archive, read back by the public load path.

``pickle.dumps(program)`` stores what ``tensorplay.export.save`` writes (graph, weights and, for a
compiled program, its native code) and the name of :func:`program_from_archive`, which calls
``tensorplay.export.load`` on those bytes. No tensor, graph or code object is pickled, and unpickling
validates the archive exactly as ``load`` does (a damaged archive raises its ``ValueError``) and uses
the stored native code only where ``load`` would. This is how programs reach Ray actors,
``multiprocessing`` and ``concurrent.futures`` workers.

>>> import pickle, tensorplay as tp
>>> from tensorplay.export import export
>>> prog = export(tp.nn.Linear(3, 2), tp.ones(4, 3))
>>> func, (data,) = prog.__reduce__()
>>> func.__name__, data[:2]
('program_from_archive', b'PK')
>>> tuple(pickle.loads(pickle.dumps(prog))(tp.ones(4, 3)).shape)
(4, 2)

What ``load_pt2`` returns pickles the same way: a ``PT2ArchiveContents`` as the archive
``package_pt2`` writes of it (programs, stored native code, extra files), a ``ModelRunners`` as an
archive holding its model alone; the loaders keep ``num_runners`` and ``run_single_threaded``.
"""
from __future__ import annotations

import copyreg
import io
from typing import Any

from .pt2_archive import PT2ArchiveContents

__all__ = ["archive_bytes", "contents_from_archive", "program_from_archive", "runners_from_archive"]


def archive_bytes(program: Any) -> bytes:
    """The archive ``tensorplay.export.save`` writes for ``program`` (with its native code when compiled)."""
    from .save_load import save

    buffer = io.BytesIO()
    save(program, buffer)
    return buffer.getvalue()


def program_from_archive(data: bytes) -> Any:
    """Unpickle an ``ExportedProgram``: ``tensorplay.export.load`` of its archive bytes."""
    from .save_load import load

    return load(data)


def contents_from_archive(data: bytes, num_runners: int, run_single_threaded: bool) -> PT2ArchiveContents:
    """Unpickle a ``PT2ArchiveContents``: ``tensorplay.export.load_pt2`` of its archive bytes."""
    from .save_load import load_pt2

    return load_pt2(data, num_runners=num_runners, run_single_threaded=run_single_threaded)


def runners_from_archive(data: bytes, num_runners: int, run_single_threaded: bool) -> Any:
    """Unpickle a ``ModelRunners``: the runners of model ``"model"`` of its archive bytes."""
    return contents_from_archive(data, num_runners, run_single_threaded).tp_runners["model"]


def _stored_native(runners: Any) -> list[tuple]:
    """``tp_files`` entries of the native code a ``ModelRunners`` (or a ``{triple: NativeCode}``) holds, with their
    seals (a signature travels; whether to trust it is the receiving process's decision)."""
    return [(code.artifact, code.dialect, getattr(code, "kernels", None), getattr(code, "seal", None))
            for code in runners.values()]


def _runner_options(runners: Any) -> tuple[int, bool]:
    return getattr(runners, "num_runners", 1), getattr(runners, "num_threads", None) == 1


def _package(programs: dict[str, Any], tp_files: dict[str, list], extra_files: dict[str, Any]) -> bytes:
    from .native_archive import native_files_of
    from .save_load import package_pt2

    files = {name: list(items) for name, items in tp_files.items() if items}
    for name, items in native_files_of(programs).items():  # code compiled here after loading
        stored = {item[0].triple for item in files.get(name, [])}
        files.setdefault(name, []).extend(item for item in items if item[0].triple not in stored)
    buffer = io.BytesIO()
    package_pt2(buffer, exported_programs=programs or None, tp_files=files or None, extra_files=extra_files or None)
    return buffer.getvalue()


def _reduce_contents(contents: PT2ArchiveContents) -> tuple:
    runners = list(contents.tp_runners.values())
    options = _runner_options(runners[0]) if runners else (1, False)
    data = _package(dict(contents.exported_programs), {n: _stored_native(r) for n, r in contents.tp_runners.items()},
                    dict(contents.extra_files))
    return contents_from_archive, (data, *options)


def _reduce_runners(runners: Any) -> tuple:
    programs = {"model": runners.program} if runners.program is not None else {}
    return runners_from_archive, (_package(programs, {"model": _stored_native(runners)}, {}),
                                  *_runner_options(runners))


def _register() -> None:
    from .native_archive import ModelRunners

    copyreg.pickle(PT2ArchiveContents, _reduce_contents)
    copyreg.pickle(ModelRunners, _reduce_runners)


_register()
