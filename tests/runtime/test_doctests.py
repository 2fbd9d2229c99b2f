import doctest
import importlib

import pytest

MODULES = ["tensorplay.runtime", "tensorplay.runtime.target", "tensorplay.runtime.jit",
           "tensorplay.runtime.cache", "tensorplay.runtime.abi", "tensorplay.runtime.aot",
           "tensorplay.runtime.weights", "tensorplay.runtime.artifact", "tensorplay.runtime.dtypes"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
