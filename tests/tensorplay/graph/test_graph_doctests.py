"""The docstring examples of tensorplay.graph's IR modules run and print what they claim."""

import doctest
import importlib

import pytest

MODULES = [
    "tensorplay.graph",
    "tensorplay.graph._pytree",
    "tensorplay.graph.node",
    "tensorplay.graph.graph",
    "tensorplay.graph.codegen",
    "tensorplay.graph.graph_module",
    "tensorplay.graph.interpreter",
    "tensorplay.graph.errors",
    "tensorplay.graph.passes.pass_base",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
