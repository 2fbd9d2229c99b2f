"""Unflatten an exported program back into a module hierarchy.

Capture inlines every child module into one flat graph, but records for each node the modules it
ran inside (``meta["nn_module_stack"]``) and, per distinct child call, the nodes it took and
returned (``graph_module.meta["module_calls"]``). :func:`unflatten` cuts the flat graph back into
one graph module per recorded submodule, each holding its own parameters and buffers, called from
its parent through ``call_module`` nodes:

>>> import tensorplay as tp
>>> from tensorplay.export import export
>>> class Block(tp.nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.proj = tp.nn.Linear(3, 3)
...     def forward(self, x):
...         return self.proj(x).relu()
>>> class Net(tp.nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.block, self.head = Block(), tp.nn.Linear(3, 1)
...     def forward(self, x):
...         return self.head(self.block(x))
>>> view = unflatten(export(Net(), tp.ones(2, 3)))
>>> tuple(view.block.proj.weight.shape), [n.op for n in view.graph.nodes]
((3, 3), ['placeholder', 'call_module', 'call_module', 'output'])
>>> tuple(view(tp.ones(5, 3)).shape)
(5, 1)
"""
from __future__ import annotations

import abc
import copy
import operator
from collections.abc import Iterator
from typing import Any

from ..graph import Graph, GraphModule, Interpreter, Node
from ..graph._pytree import tree_flatten, tree_unflatten
from ..nn import Module, Parameter

__all__ = ["FlatArgsAdapter", "InterpreterModule", "UnflattenedModule", "unflatten"]


class FlatArgsAdapter(abc.ABC):
    """Adapts the flat inputs a caller passes to the flat inputs the exported program expects."""

    @abc.abstractmethod
    def adapt(self, target_spec: Any, input_spec: Any, input_args: list, metadata: Any = None,
              obj: Any = None) -> list:
        """Return the flat argument list for ``target_spec`` given ``input_args`` laid out as ``input_spec``."""

    def get_flat_arg_paths(self) -> list:
        """Paths of the flat arguments, when the adapter knows them (default: none)."""
        return []


class InterpreterModule(Module):
    """Run a graph module's graph through :class:`~tensorplay.graph.Interpreter` (handy for debugging).

    Positional arguments feed the placeholders; leading mutation outputs
    (``meta["num_mutations"]``) are stripped from the result.

    >>> import operator
    >>> g = Graph()
    >>> x = g.placeholder("x")
    >>> _ = g.output(g.call_function(operator.mul, (x, 3)))
    >>> m = InterpreterModule(GraphModule({}, g), ty="Triple")
    >>> m(2), m.print_readable(print_output=False).splitlines()[0]
    (6, 'class Triple(tensorplay.nn.Module):  # InterpreterModule')
    """

    def __init__(self, graph_module: GraphModule, ty: str | None = None):
        super().__init__()
        if not isinstance(graph_module, GraphModule):
            raise TypeError(f"InterpreterModule expects a GraphModule, got {type(graph_module).__name__}")
        object.__setattr__(self, "_graph_module", graph_module)
        object.__setattr__(self, "ty", ty)

    @property
    def graph_module(self) -> GraphModule:
        return self.__dict__["_graph_module"]

    @property
    def graph(self) -> Graph:
        return self.graph_module.graph

    def forward(self, *args: Any) -> Any:
        result = Interpreter(self.graph_module).run(*args)
        strip = self.graph_module.meta.get("num_mutations", 0)
        if strip and isinstance(result, tuple | list):
            user = list(result)[strip:]
            return user[0] if len(user) == 1 else tuple(user)
        return result

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.__dict__["_graph_module"], name)

    def print_readable(self, print_output: bool = True) -> str:
        """A class header naming ``ty``, then the graph module's readable form."""
        name = self.ty or self.graph_module.class_name
        body = self.graph_module.print_readable(print_output=False)
        text = f"class {name}(tensorplay.nn.Module):  # InterpreterModule\n" + \
            "".join(f"    {line}\n" for line in body.splitlines())
        if print_output:
            print(text)
        return text


class UnflattenedModule(Module):
    """An exported program viewed as a module: hierarchical when capture recorded child calls.

    ``graph_module`` (also ``root``) is the top-level graph module; its ``call_module`` nodes reach
    one graph module per recorded submodule. Attribute reads that the view itself does not answer
    go to ``root``, so ``view.block.proj.weight`` works.
    """

    def __init__(self, export_module: Any, flat_args_adapter: FlatArgsAdapter | None = None):
        from .exported_program import ExportedProgram

        super().__init__()
        program, adapter = export_module, flat_args_adapter
        if not isinstance(program, ExportedProgram):
            raise TypeError(f"UnflattenedModule expects an ExportedProgram, got {type(program).__name__}")
        if adapter is not None and not isinstance(adapter, FlatArgsAdapter):
            raise TypeError(f"flat_args_adapter must be a FlatArgsAdapter, got {type(adapter).__name__}")
        d = self.__dict__
        d["exported_program"] = program
        d["adapter"] = adapter
        d["graph_signature"] = program.graph_signature.clone()
        d["module_call_graph"] = copy.deepcopy(program.module_call_graph)
        d["range_constraints"] = copy.deepcopy(program.range_constraints)
        hierarchical = adapter is None and _has_hierarchy(program)
        d["_hierarchical"] = hierarchical
        d["_graph_module"] = _build_hierarchy(program) if hierarchical else program.module()

    # --- views
    @property
    def graph_module(self) -> GraphModule:
        return self.__dict__["_graph_module"]

    @property
    def root(self) -> GraphModule:
        return self.graph_module

    @property
    def graph(self) -> Graph:
        return self.graph_module.graph

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.__dict__["_graph_module"], name)

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Parameter]]:
        return self.graph_module.named_parameters(prefix, recurse, remove_duplicate)

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Any]]:
        return self.graph_module.named_buffers(prefix, recurse, remove_duplicate)

    def named_children(self) -> Iterator[tuple[str, Module]]:
        return self.graph_module.named_children()

    def state_dict(self, *args: Any, **kwargs: Any) -> dict:
        return self.graph_module.state_dict(*args, **kwargs)

    def train(self, mode: bool = True) -> UnflattenedModule:
        super().train(mode)
        self.graph_module.train(mode)
        return self

    def __repr__(self) -> str:
        inner = repr(self.graph_module).replace("\n", "\n  ")
        kind = "hierarchical" if self._hierarchical else "flat"
        return f"UnflattenedModule({kind}\n  (root): {inner}\n)"

    # --- running
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        program = self.exported_program
        adapter = self.adapter
        if adapter is not None:
            flat, spec = tree_flatten((args, kwargs))
            target = program.call_spec.in_spec
            adapted = adapter.adapt(target_spec=target, input_spec=spec, input_args=flat, metadata=None, obj=self)
            args, kwargs = tree_unflatten(list(adapted), target) if target is not None else (tuple(adapted), {})
            return program(*args, **kwargs)
        if self._hierarchical:
            return self.graph_module(*args, **kwargs)
        # The flat view is ``program.module()``: the Python graph, which follows the inputs' sizes.
        return program.module()(*args, **kwargs)

    def recompile(self) -> None:
        """Regenerate the code of every graph module in the hierarchy (after editing a graph)."""
        for module in self.graph_module.modules():
            if isinstance(module, GraphModule):
                module.recompile()

    def print_readable(self, print_output: bool = True) -> str:
        """The top-level graph module and its submodules as class definitions."""
        return self.graph_module.print_readable(print_output=print_output)


def unflatten(module: Any, flat_args_adapter: FlatArgsAdapter | None = None,
              preserve_ops: Any = ()) -> UnflattenedModule:
    """View the exported program ``module`` as a module; with recorded child calls (and no adapter), as
    the original hierarchy.

    ``preserve_ops`` is accepted for API compatibility; no op is rewritten here, so every op is kept.
    """
    return UnflattenedModule(module, flat_args_adapter)


# --- rebuilding the hierarchy ------------------------------------------------------------------------------

def _has_hierarchy(program: Any) -> bool:
    calls = program.graph_module.meta.get("module_calls") or []
    return bool(calls) and any("nn_module_stack" in n.meta for n in program.graph.nodes)


def _stack_of(node: Node) -> tuple[str, ...] | None:
    stack = node.meta.get("nn_module_stack")
    return tuple(stack) if isinstance(stack, dict) else None


def _assign_stacks(graph: Graph) -> dict[Node, tuple[str, ...]]:
    """Module path stack per computing node; nodes recorded without one (size reads) take the
    innermost module enclosing both neighbours that have one."""
    nodes = [n for n in graph.nodes if n.op not in ("placeholder", "output", "get_attr")]
    known = [_stack_of(n) for n in nodes]
    stacks: dict[Node, tuple[str, ...]] = {}
    for i, node in enumerate(nodes):
        if known[i] is not None:
            stacks[node] = known[i]
            continue
        before = next((known[j] for j in range(i - 1, -1, -1) if known[j] is not None), ())
        after = next((known[j] for j in range(i + 1, len(nodes)) if known[j] is not None), ())
        common = []
        for a, b in zip(before, after, strict=False):
            if a != b:
                break
            common.append(a)
        stacks[node] = tuple(common)
    return stacks


class _Builder:
    """Cuts one graph into call_module calls of per-submodule graph modules, recursively."""

    def __init__(self, program: Any):
        self.unlifted = program.module()
        self.calls = list(program.graph_module.meta.get("module_calls") or [])
        self.types = {}
        for node in program.graph.nodes:
            for path, (_, typ) in (node.meta.get("nn_module_stack") or {}).items():
                self.types.setdefault(path, typ)
        self.graph_attrs = dict(self.unlifted._graph_attrs)
        self.root_type = type(program.graph_module.root).__name__

    def build(self) -> GraphModule:
        graph = copy.deepcopy(self.unlifted.graph)
        stacks = _assign_stacks(graph)
        for node in graph.nodes:
            if node.op == "get_attr":
                node.meta["unflatten_target"] = node.target
        holder = Module()
        self._outline(graph, stacks, 0, "", holder)
        gm = self._module(holder, graph, "", self.root_type)
        gm.meta.update({k: v for k, v in self.unlifted.meta.items()})
        return gm

    # the state a graph still reads with get_attr goes into its holder, at the relative path
    def _module(self, holder: Module, graph: Graph, prefix: str, class_name: str) -> GraphModule:
        for node in graph.nodes:
            if node.op != "get_attr" or node.target in self.graph_attrs:
                continue
            full = node.meta.get("unflatten_target", node.target)
            self._place(holder, node.target, full)
        graph.eliminate_dead_code()
        name = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in class_name) or "Module"
        if not name.isidentifier():
            name = f"M_{name}"
        return GraphModule(holder, graph, class_name=name, graph_attrs=self.graph_attrs)

    def _place(self, holder: Module, rel: str, full: str) -> None:
        value, owner, leaf = _resolve_state(self.unlifted, full)
        *path, field = rel.split(".")
        target = holder
        for part in path:
            child = target._modules.get(part)
            if child is None:
                child = Module()
                target.add_module(part, child)
            target = child
        if field in target._parameters or field in target._buffers or field in target.__dict__:
            return
        if isinstance(value, Parameter):
            target.register_parameter(field, value)
        elif owner is not None and leaf in owner._buffers:
            target.register_buffer(field, value, persistent=leaf not in owner._non_persistent_buffers_set)
        else:
            object.__setattr__(target, field, value)

    def _outline(self, graph: Graph, stacks: dict, depth: int, prefix: str, holder: Module) -> None:
        children: list[str] = []
        for node in graph.nodes:
            stack = stacks.get(node)
            if stack is not None and len(stack) > depth and stack[depth] not in children:
                children.append(stack[depth])
        for child in children:
            self._outline_child(graph, stacks, depth, prefix, holder, child)

    def _outline_child(self, graph: Graph, stacks: dict, depth: int, prefix: str, holder: Module,
                       child: str) -> None:
        rel = child[len(prefix) + 1:] if prefix else child
        entries = [c for c in self.calls if c.get("path") == child]
        wirings = {tuple(c.get("inputs") or ()) for c in entries}
        if len(wirings) > 1:
            raise NotImplementedError(f"unflatten: module {child!r} is called with different arguments "
                                      f"({sorted(wirings)}); only repeated calls with the same wiring are supported")

        def member(n: Node) -> bool:
            s = stacks.get(n)
            return s is not None and len(s) > depth and s[depth] == child

        def owned(n: Node) -> bool:
            full = n.meta.get("unflatten_target", "")
            return n.op == "get_attr" and full.startswith(child + ".") and bool(n.users) and \
                all(member(u) for u in n.users)

        slices = _split_calls([n for n in graph.nodes if member(n)], entries)
        module = None
        shape = None
        for nodes in slices:
            inside = set(nodes)
            inputs: list[Node] = []
            for n in nodes:
                for inp in n.all_input_nodes:
                    if inp not in inside and not owned(inp) and inp not in inputs:
                        inputs.append(inp)
            outputs = [n for n in nodes if any(u not in inside for u in n.users)]
            signature = [(n.op, n.target) for n in nodes]
            if module is None:
                sub, sub_stacks = self._subgraph(nodes, inputs, outputs, owned, child, stacks)
                sub_holder = Module()
                self._outline(sub, sub_stacks, depth + 1, child, sub_holder)
                typ = self.types.get(child, "Module").split(".")[-1]
                module = self._module(sub_holder, sub, child, typ)
                _add_module(holder, rel, module)
                shape = signature
            elif signature != shape:
                raise NotImplementedError(f"unflatten: the calls of module {child!r} record different code")
            last = nodes[-1]
            with graph.inserting_after(last):
                call = graph.call_module(rel, tuple(inputs))
                call.meta["nn_module_stack"] = {p: (p, self.types.get(p, "")) for p in stacks[last][:depth]}
                stacks[call] = stacks[last][:depth]
                results = [call] if len(outputs) == 1 else []
                for i in range(len(outputs) if len(outputs) != 1 else 0):
                    item = graph.call_function(operator.getitem, (call, i))
                    item.meta.update({k: v for k, v in outputs[i].meta.items() if k in ("val", "example_value")})
                    stacks[item] = stacks[call]
                    results.append(item)
            if len(outputs) == 1:
                call.meta.update({k: v for k, v in outputs[0].meta.items() if k in ("val", "example_value")})
            for out, new in zip(outputs, results, strict=True):
                out.replace_all_uses_with(new, delete_user_cb=lambda u, inside=inside: u not in inside)
            for n in reversed(nodes):
                graph.erase_node(n)
                stacks.pop(n, None)
        for node in list(graph.nodes):
            full = node.meta.get("unflatten_target", "")
            if node.op == "get_attr" and not node.users and full.startswith(child + "."):
                graph.erase_node(node)

    def _subgraph(self, nodes: list[Node], inputs: list[Node], outputs: list[Node], owned, child: str,
                  stacks: dict) -> tuple[Graph, dict]:
        sub = Graph()
        env: dict[Node, Node] = {}
        for inp in inputs:
            ph = sub.placeholder(inp.name)
            ph.meta = {k: v for k, v in inp.meta.items() if k in ("val", "example_value")}
            env[inp] = ph

        def lookup(n: Node) -> Node:
            if n not in env and owned(n):
                full = n.meta["unflatten_target"]
                with sub.inserting_after(_last_header_node(sub)):
                    attr = sub.get_attr(full[len(child) + 1:])
                attr.meta = dict(n.meta)
                env[n] = attr
            return env[n]

        sub_stacks: dict[Node, tuple] = {}
        for n in nodes:
            new = sub.node_copy(n, lookup)
            env[n] = new
            sub_stacks[new] = stacks[n]
        result = env[outputs[0]] if len(outputs) == 1 else tuple(env[o] for o in outputs)
        sub.output(result)
        sub.lint()
        return sub, sub_stacks


def _last_header_node(graph: Graph) -> Node | None:
    """The last of the leading placeholder / get_attr nodes (state reads go after it, in order)."""
    last = None
    for n in graph.nodes:
        if n.op not in ("placeholder", "get_attr"):
            break
        last = n
    return last


def _split_calls(nodes: list[Node], entries: list[dict]) -> list[list[Node]]:
    """The nodes of each call of one module, in graph order: backward from each call's recorded results."""
    if len(entries) <= 1:
        return [nodes] if nodes else []
    members = set(nodes)
    by_name = {n.name: n for n in nodes}
    owner: dict[Node, int] = {}
    for i, entry in enumerate(entries):
        todo = [by_name[name] for name in entry.get("outputs") or () if name in by_name]
        while todo:
            n = todo.pop()
            if n in owner:
                continue
            owner[n] = i
            todo.extend(inp for inp in n.all_input_nodes if inp in members)
    current = 0
    for n in nodes:  # nodes no result reaches (in-place writes) go with the call they sit in
        current = owner.setdefault(n, current)
    slices: list[list[Node]] = [[] for _ in entries]
    for n in nodes:
        slices[owner[n]].append(n)
    return [s for s in slices if s]


def _resolve_state(root: Module, full: str) -> tuple[Any, Module | None, str]:
    *path, leaf = full.split(".")
    owner: Any = root
    for part in path:
        owner = getattr(owner, part)
    value = getattr(owner, leaf)
    return value, owner if isinstance(owner, Module) else None, leaf


def _add_module(holder: Module, rel: str, module: Module) -> None:
    *path, leaf = rel.split(".")
    target = holder
    for part in path:
        child = target._modules.get(part)
        if child is None:
            child = Module()
            target.add_module(part, child)
        target = child
    target.add_module(leaf, module)


def _build_hierarchy(program: Any) -> GraphModule:
    return _Builder(program).build()
