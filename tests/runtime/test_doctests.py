import doctest
import importlib

import pytest

MODULES = ["runtime", "runtime.target", "runtime.jit", "runtime.cache", "runtime.abi", "runtime.aot",
           "runtime.weights", "runtime.artifact"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
