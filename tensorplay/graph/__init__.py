"""tensorplay.graph: the graph IR that capture produces and export, lowering and tools consume.

A :class:`Graph` is an ordered list of :class:`Node` objects in pseudo-SSA form, with six opcodes:
``placeholder`` (an input), ``get_attr`` (read a module attribute), ``call_function``,
``call_method``, ``call_module`` and ``output``. Build one by hand:

>>> import operator, numpy as np
>>> from tensorplay.graph import Graph, Interpreter
>>> g = Graph()
>>> x = g.placeholder("x")
>>> w = g.get_attr("weight")
>>> y = g.call_function(np.matmul, (x, w))
>>> z = g.call_method("clip", (y,), {"min": 0.0})
>>> _ = g.output(g.call_function(operator.add, (z, 1)))
>>> g.lint()

Print it as pseudo-SSA, or as the Python it stands for:

>>> print(g)  # doctest: +NORMALIZE_WHITESPACE
graph():
    %x : [num_users=1] = placeholder[target=x]
    %weight : [num_users=1] = get_attr[target=weight]
    %matmul : [num_users=1] = call_function[target=numpy.matmul](args = (%x, %weight), kwargs = {})
    %clip : [num_users=1] = call_method[target=clip](args = (%matmul,), kwargs = {'min': 0.0})
    %add : [num_users=1] = call_function[target=operator.add](args = (%clip, 1), kwargs = {})
    return %add
>>> print(g.python_code().src.strip())
def forward(self, x):
    weight = self.weight
    matmul = numpy.matmul(x, weight);  x = weight = None
    clip = matmul.clip(min=0.0);  matmul = None
    add = clip + 1;  clip = None
    return add

Run it node by node (attributes come from the module given to the interpreter):

>>> from types import SimpleNamespace
>>> module = SimpleNamespace(graph=g, weight=np.array([[1.0, -1.0]]))
>>> Interpreter(module).run(np.array([[2.0]]))
array([[3., 1.]])

Edit it: insert, redirect uses, drop dead code.

>>> with g.inserting_after(y):
...     doubled = g.call_function(operator.mul, (y, 2))
>>> _ = y.replace_all_uses_with(doubled, delete_user_cb=lambda user: user is not doubled)
>>> Interpreter(module).run(np.array([[2.0]]))
array([[5., 1.]])

``GraphModule(root, graph)`` wraps a graph into an ``nn.Module`` whose ``forward`` is the generated
code; ``tensorplay.graph._pytree`` flattens nested inputs and outputs.
"""

from ._pytree import TreeSpec, tree_flatten, tree_map, tree_unflatten
from .codegen import PythonCode
from .errors import GraphCaptureError, GraphError, GraphLintError
from .graph import Graph
from .graph_module import GraphModule
from .interpreter import Interpreter
from .node import Node, map_aggregate, map_arg

__all__ = [
    "Graph",
    "GraphCaptureError",
    "GraphError",
    "GraphLintError",
    "GraphModule",
    "Interpreter",
    "Node",
    "PythonCode",
    "TreeSpec",
    "map_aggregate",
    "map_arg",
    "tree_flatten",
    "tree_map",
    "tree_unflatten",
]

