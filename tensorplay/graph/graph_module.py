"""`GraphModule`: an ``nn.Module`` whose ``forward`` is Python generated from a `Graph`.

>>> import operator
>>> from tensorplay.graph import Graph, GraphModule
>>> g = Graph()
>>> x = g.placeholder("x")
>>> _ = g.output(g.call_function(operator.mul, (x, g.get_attr("scale"))))
>>> gm = GraphModule({"scale": 3}, g)
>>> gm(5)
15
>>> print(gm.code.strip())
def forward(self, x):
    scale = self.scale
    mul = x * scale;  x = scale = None
    return mul
"""

from __future__ import annotations

import copy
import hashlib
import keyword
import linecache
import types
from typing import Any

from ..nn import Module
from .codegen import PythonCode, generate_python
from .errors import GraphError
from .graph import Graph

__all__ = ["GraphModule"]


def _register_source(src: str) -> str:
    """A linecache entry for generated code, so tracebacks show its lines."""
    filename = f"<tensorplay-graph-{hashlib.sha1(src.encode()).hexdigest()[:12]}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(keepends=True), filename)
    return filename


class GraphModule(Module):
    """Run ``graph`` as a module: ``forward`` is compiled from ``graph.python_code()``.

    ``root`` is a ``Module`` (the attributes that get_attr / call_module nodes name are copied over
    at the same dotted paths, as the same objects) or a dict ``name -> value``. ``graph_attrs``
    (kept in ``_graph_attrs``) holds values such as tensor constants; get_attr resolves there first.
    The original ``root`` stays reachable as ``.root``; ``meta`` is a free dict.
    """

    def __init__(
        self,
        root: Module | dict[str, Any],
        graph: Graph,
        class_name: str = "GraphModule",
        *,
        graph_attrs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(graph, Graph):
            raise TypeError(f"GraphModule expected a Graph, got {type(graph).__name__}")
        if not isinstance(root, Module | dict):
            raise TypeError(f"GraphModule root must be an nn.Module or a dict, got {type(root).__name__}")
        if not isinstance(class_name, str) or not class_name.isidentifier():
            raise ValueError(f"class_name must be a Python identifier, got {class_name!r}")
        object.__setattr__(self, "_root", root)
        object.__setattr__(self, "class_name", class_name)
        object.__setattr__(self, "_graph_attrs", dict(graph_attrs or {}))
        object.__setattr__(self, "meta", {})
        for node in graph.nodes:
            if node.op in ("get_attr", "call_module") and node.target not in self._graph_attrs:
                self._copy_attr(root, node.target)
        self.graph = graph

    # --- attributes -----------------------------------------------------------------------------
    def _copy_attr(self, root: Module | dict[str, Any], target: str) -> None:
        first = target.split(".")[0]
        if first in _RESERVED_ATTRS or hasattr(type(self), first):
            raise GraphError(
                f"graph target {target!r} clashes with the GraphModule attribute {first!r}; rename the target"
            )
        *prefix, field = target.split(".")
        src_owner: Any = None
        if isinstance(root, dict):
            value = root.get(target, _MISSING)
        else:
            src_owner = root
            for part in prefix:
                src_owner = getattr(src_owner, part, None)
            value = _MISSING if src_owner is None else getattr(src_owner, field, _MISSING)
        if value is _MISSING:
            where = "dict has no entry" if isinstance(root, dict) else "has no attribute"
            raise GraphError(f"GraphModule root {where} {target!r}, which the graph uses")
        holder: Module = self
        for part in prefix:
            child = getattr(holder, part, None)
            if child is None:
                child = Module()
                setattr(holder, part, child)
            if not isinstance(child, Module):
                kind = type(child).__name__
                raise GraphError(f"cannot place {target!r}: {part!r} is a {kind}, not a Module")
            holder = child
        if getattr(holder, field, _MISSING) is value:
            return  # already reachable, e.g. through a whole submodule copied earlier
        buffers = getattr(src_owner, "_buffers", {}) if src_owner is not None else {}
        if field in buffers:
            persistent = field not in getattr(src_owner, "_non_persistent_buffers_set", ())
            holder.register_buffer(field, value, persistent=persistent)
        else:
            setattr(holder, field, value)

    @property
    def root(self) -> Module | dict[str, Any]:
        """The object the graph module was built from (not registered as a child module)."""
        return self.__dict__["_root"]

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "root":  # Module.__setattr__ would register a Module value as a child
            object.__setattr__(self, "_root", value)
        else:
            super().__setattr__(name, value)

    def __getattr__(self, name: str) -> Any:
        graph_attrs = self.__dict__.get("_graph_attrs")
        if graph_attrs is not None and name in graph_attrs:
            return graph_attrs[name]
        return super().__getattr__(name)

    def _dict_resolved_attrs(self) -> set[str]:
        """_graph_attrs keys that ``self.<key>`` would not reach (dotted or shadowed)."""
        registries = [self.__dict__.get(d, {}) for d in ("_modules", "_parameters", "_buffers")]
        return {
            key
            for key in self._graph_attrs
            if not key.isidentifier()
            or keyword.iskeyword(key)
            or key in _RESERVED_ATTRS
            or hasattr(type(self), key)
            or key in self.__dict__
            or any(key in registry for registry in registries)
        }

    # --- graph and code -------------------------------------------------------------------------
    @property
    def graph(self) -> Graph:
        return self.__dict__["_graph"]

    @graph.setter
    def graph(self, graph: Graph) -> None:
        if not isinstance(graph, Graph):
            raise TypeError(f"GraphModule.graph must be a Graph, got {type(graph).__name__}")
        object.__setattr__(self, "_graph", graph)
        graph.owning_module = self
        self.recompile()

    @property
    def code(self) -> str:
        """The generated Python source of ``forward``."""
        return self.__dict__["_code"]

    def recompile(self) -> PythonCode:
        """Regenerate and recompile ``forward`` from ``self.graph`` (call after editing the graph)."""
        code = generate_python(self.graph, "self", dict_attrs=self._dict_resolved_attrs())
        filename = _register_source(code.src)
        namespace = dict(code.globals)
        exec(compile(code.src, filename, "exec"), namespace)
        object.__setattr__(self, "_code", code.src)
        object.__setattr__(self, "forward", types.MethodType(namespace["forward"], self))
        return code

    def print_readable(self, print_output: bool = True) -> str:
        """The module as a class definition with its generated ``forward`` (printed, and returned)."""
        body = "".join(f"    {line}\n" if line else "\n" for line in self.code.splitlines())
        text = f"class {self.class_name}(tensorplay.nn.Module):\n{body}"
        for name, child in getattr(self, "_modules", {}).items():
            if isinstance(child, GraphModule):
                nested = child.print_readable(print_output=False)
                text += f"\n    # submodule {name}\n"
                text += "".join(f"    {line}\n" for line in nested.splitlines())
        if print_output:
            print(text)
        return text

    def _get_name(self) -> str:
        return self.class_name

    def __str__(self) -> str:
        return f"{super().__str__()}\n{self.code}"

    def __deepcopy__(self, memo: dict[int, Any]) -> GraphModule:
        cls = type(self)
        new = cls.__new__(cls)
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            if key not in ("forward", "_graph", "_code"):
                object.__setattr__(new, key, copy.deepcopy(value, memo))
        new.graph = copy.deepcopy(self.graph, memo)
        return new


_MISSING = object()
_RESERVED_ATTRS = frozenset({"root", "meta", "class_name", "graph", "code", "forward", "training"})
