"""PassBase / PassResult: hook order, result checking."""

import operator
from types import SimpleNamespace

import pytest

from tensorplay.graph import Graph, Interpreter
from tensorplay.graph.passes import PassBase, PassResult


def _module_with_dead_code():
    g = Graph()
    x = g.placeholder("x")
    g.call_function(operator.mul, (x, 100))  # unused
    g.output(g.call_function(operator.add, (x, 1)))
    return SimpleNamespace(graph=g)


class DeadCodePass(PassBase):
    def __init__(self):
        self.log = []

    def requires(self, graph_module):
        self.log.append("requires")
        graph_module.graph.lint()

    def call(self, graph_module):
        self.log.append("call")
        return PassResult(graph_module, graph_module.graph.eliminate_dead_code())

    def ensures(self, graph_module):
        self.log.append("ensures")
        graph_module.graph.lint()


def test_pass_runs_hooks_in_order_and_reports_modification():
    module = _module_with_dead_code()
    p = DeadCodePass()
    result = p(module)
    assert p.log == ["requires", "call", "ensures"]
    assert isinstance(result, PassResult) and result.modified is True and result.graph_module is module
    graph_module, modified = result
    assert graph_module is module and modified
    assert [n.name for n in module.graph.nodes] == ["x", "add", "output"]
    assert Interpreter(module).run(4) == 5
    assert p(module).modified is False  # fixed point reached


def test_requires_can_refuse_and_bad_results_are_rejected():
    class Refuses(DeadCodePass):
        def requires(self, graph_module):
            raise ValueError("needs a linted graph")

    with pytest.raises(ValueError, match="needs a linted graph"):
        Refuses()(_module_with_dead_code())

    class ReturnsGarbage(PassBase):
        def call(self, graph_module):
            return True

    with pytest.raises(TypeError, match="must return a PassResult or None, got bool"):
        ReturnsGarbage()(_module_with_dead_code())

    with pytest.raises(TypeError):
        PassBase()  # abstract
