"""Docstring examples run as tests, the generated op table, and the package's import boundary."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import subprocess
import sys

import pytest

import tensorplay.dialect as dialect
from tensorplay.dialect import REGISTRY, docs_markdown

MODULES = sorted({"tensorplay.dialect"}
                 | {m.name for m in pkgutil.walk_packages(dialect.__path__, "tensorplay.dialect.")})


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    mod = importlib.import_module(name)
    result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_docs_table_lists_every_op_once():
    table = docs_markdown()
    rows = [r for r in table.splitlines() if r.startswith("| `")]
    assert sorted(r.split("`")[1] for r in rows) == sorted(REGISTRY)
    assert "| `tp.sum` | input | axes: int list, keepdim: bool = False |" in table
    kernel_rows = [r for r in docs_markdown("kernel").splitlines() if r.startswith("| `")]
    assert kernel_rows and all(r.startswith("| `kernel.") for r in kernel_rows)


def test_kernel_scalar_ops_come_from_the_tp_tables():
    from tensorplay.dialect.ops import BINARY_OPS, UNARY_OPS
    for name, *_ in UNARY_OPS + BINARY_OPS:
        assert f"tp.{name}" in REGISTRY and f"kernel.{name}" in REGISTRY


def test_dialect_imports_no_other_tensorplay_package():
    # the dialect folder loaded on its own, as a top-level package: it needs nothing above itself
    code = ("import sys, dialect, dialect.passes, dialect.interpret, dialect.bisect, dialect.verify; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('tensorplay', 'lowering', 'runtime')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(
        __import__("pathlib").Path(dialect.__file__).parent.parent))
    assert r.returncode == 0, r.stdout + r.stderr
