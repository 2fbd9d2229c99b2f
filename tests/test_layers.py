"""Import boundaries between the layers (docs/design.md, "Layers").

Every ``.py`` file of the repository is parsed with ``ast``; every import it makes (at module level and
inside functions, ``import x`` and ``from x import y``, relative imports resolved against the file's
installed package name) is checked against the rules:

- ``dialect/`` (``tensorplay.dialect``) imports nothing of the project outside itself;
- ``runtime/`` (``tensorplay.runtime``) imports neither ``tensorplay.lowering``, ``tensorplay.dialect`` nor
  the front end;
- the front end (``tensorplay/``) imports no runtime module and no lowering module but
  ``tensorplay.lowering.api``;
- no file imports the bare top-level names ``dialect``, ``lowering`` or ``runtime`` (they install as
  ``tensorplay.dialect``, ``tensorplay.lowering``, ``tensorplay.runtime``).
"""
from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: folder of the repository -> the package name it installs as (setup.py's package_dir)
PACKAGES = {"tensorplay": "tensorplay", "dialect": "tensorplay.dialect", "lowering": "tensorplay.lowering",
            "runtime": "tensorplay.runtime"}
BARE = ("dialect", "lowering", "runtime")
COMPILER_ENTRY = "tensorplay.lowering.api"
SKIP_DIRS = {".git", "build", "dist", ".venv", "venv", "__pycache__", ".ruff_cache", ".pytest_cache"}


def module_name(path: Path) -> str:
    """The name a file imports as: ``lowering/fusion/fuse.py`` -> ``tensorplay.lowering.fusion.fuse``;
    files outside the installed packages keep their path (``tests/runtime/test_abi.py`` ->
    ``tests.runtime.test_abi``)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] in PACKAGES:
        parts[0] = PACKAGES[parts[0]]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> Iterator[tuple[int, str, str]]:
    """``(line, imported module, source text)`` for every import in ``path``; ``from x import y`` yields
    ``x.y`` (y may be a submodule) and relative imports are resolved against the file's package."""
    source = path.read_text(encoding="utf-8")
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    lines = source.splitlines()
    for node in ast.walk(ast.parse(source, str(path))):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        text = " ".join(line.strip() for line in lines[node.lineno - 1:node.end_lineno])
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, text
        else:
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                yield node.lineno, base if alias.name == "*" else f"{base}.{alias.name}", text


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def violation(path: Path, module: str) -> str | None:
    """Why ``path`` may not import ``module``, or None when it may."""
    top = module.split(".")[0]
    if top in BARE:
        return f"bare top-level name {top!r}: import tensorplay.{top}"
    name = module_name(path)
    if not within(name, "tensorplay"):
        return None  # tests, bench, examples: any layer
    if within(name, "tensorplay.dialect"):
        if within(module, "tensorplay") and not within(module, "tensorplay.dialect"):
            return "the dialect imports nothing of the project outside tensorplay.dialect"
    elif within(name, "tensorplay.runtime"):
        if within(module, "tensorplay") and not within(module, "tensorplay.runtime"):
            return "the runtime imports nothing of the project outside tensorplay.runtime"
    elif within(name, "tensorplay.lowering"):
        return None
    elif within(module, "tensorplay.runtime"):
        return f"the front end reaches the runtime through {COMPILER_ENTRY} only"
    elif within(module, "tensorplay.lowering") and module not in ("tensorplay.lowering", COMPILER_ENTRY) \
            and not within(module, COMPILER_ENTRY):
        return f"the front end imports no lowering module but {COMPILER_ENTRY}"
    return None


def python_files() -> list[Path]:
    out = []
    for path in ROOT.rglob("*.py"):
        if not SKIP_DIRS.intersection(path.relative_to(ROOT).parts[:-1]):
            out.append(path)
    return sorted(out)


def test_every_import_respects_the_layers():
    files = python_files()
    assert len(files) > 100
    bad = sorted({(str(path.relative_to(ROOT)), line, f"{text}  ({why})")
                  for path in files for line, module, text in imports(path)
                  if (why := violation(path, module)) is not None})
    assert not bad, "imports crossing the layers:\n" + "\n".join(f"{f}:{line}: {what}" for f, line, what in bad)


@pytest.mark.parametrize(("file", "source", "broken"), [
    ("dialect/x.py", "from tensorplay.lowering import api", True),
    ("dialect/passes/x.py", "def f():\n    from ...lowering import pipeline", True),
    ("dialect/passes/x.py", "from ..ir import Module", False),
    ("runtime/x.py", "from tensorplay.dialect import types", True),
    ("runtime/x.py", "from . import abi", False),
    ("runtime/x.py", "def f():\n    import tensorplay", True),
    ("tensorplay/export/x.py", "def f():\n    from tensorplay.lowering.pipeline import compile_program", True),
    ("tensorplay/export/x.py", "def f():\n    from tensorplay.lowering import api", False),
    ("tensorplay/export/x.py", "from tensorplay.lowering.api import compile_program", False),
    ("tensorplay/export/x.py", "from ..lowering.aot import artifact_of", True),
    ("tensorplay/cli/x.py", "import tensorplay.runtime.aot", True),
    ("tensorplay/x.py", "from .dialect import parse", False),
    ("lowering/x.py", "from tensorplay.ops import REGISTRY", False),
    ("tests/x.py", "import runtime.abi", True),
    ("bench/x.py", "def f():\n    from lowering import pipeline", True),
    ("examples/x.py", "from tensorplay.lowering.aot import build_library", False),
])
def test_the_checker_flags_what_the_rules_forbid(tmp_path, monkeypatch, file, source, broken):
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    path = tmp_path / file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source + "\n")
    found = [(line, why) for line, module, _ in imports(path) if (why := violation(path, module))]
    assert bool(found) == broken, found
    if broken:
        assert found[0][0] == source.count("\n") + 1  # the line of the import itself
