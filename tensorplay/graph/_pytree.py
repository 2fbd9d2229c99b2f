"""Pytrees: flatten nested containers into a list of leaves plus a structure spec, and back.

A pytree is a nest of registered containers (tuple, list, dict, OrderedDict, namedtuples, ``None``
and anything added with :func:`register_pytree_node`); everything else is a leaf.

>>> leaves, spec = tree_flatten({"a": (1, 2), "b": [3, None]})
>>> leaves
[1, 2, 3]
>>> tree_unflatten([10, 20, 30], spec)
{'a': (10, 20), 'b': [30, None]}
>>> TreeSpec.from_json(spec.to_json()) == spec
True

The JSON encoding names container types by their registered serialized name (never by pickle),
so a spec can be stored in an archive and read back without executing code.
"""

from __future__ import annotations

import collections
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "LeafSpec",
    "TreeSpec",
    "register_namedtuple",
    "register_pytree_node",
    "tree_flatten",
    "tree_leaves",
    "tree_map",
    "tree_structure",
    "tree_unflatten",
]

Context = Any
FlattenFn = Callable[[Any], tuple[list[Any], Context]]
UnflattenFn = Callable[[Iterable[Any], Context], Any]

_JSON_FORMAT = "tensorplay.pytree"
_JSON_VERSION = 1


@dataclass(frozen=True, slots=True)
class _NodeDef:
    cls: type
    flatten: FlattenFn
    unflatten: UnflattenFn
    serialized_type_name: str
    to_dumpable_context: Callable[[Context], Any] | None
    from_dumpable_context: Callable[[Any], Context] | None
    none_children_are_leaves: bool = False


_NODE_DEFS: dict[type, _NodeDef] = {}
_TYPES_BY_NAME: dict[str, type] = {}
_NAMEDTUPLE_NAMES: dict[type, str] = {}


def _qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def register_pytree_node(
    cls: type,
    flatten_fn: FlattenFn,
    unflatten_fn: UnflattenFn,
    *,
    serialized_type_name: str | None = None,
    to_dumpable_context: Callable[[Context], Any] | None = None,
    from_dumpable_context: Callable[[Any], Context] | None = None,
    none_children_are_leaves: bool = False,
) -> None:
    """Make ``cls`` a pytree container.

    ``flatten_fn(obj) -> (children, context)`` and ``unflatten_fn(children, context) -> obj``.
    ``context`` must be JSON-serialisable for :meth:`TreeSpec.to_json` unless
    ``to_dumpable_context``/``from_dumpable_context`` convert it. With
    ``none_children_are_leaves=True`` a child that is ``None`` is a leaf (``None`` elsewhere is an
    empty container with no leaves).

    >>> class Pair:
    ...     def __init__(self, a, b): self.a, self.b = a, b
    >>> register_pytree_node(Pair, lambda p: ([p.a, p.b], None), lambda ch, _: Pair(*ch),
    ...                      serialized_type_name="doc.Pair")
    >>> tree_leaves(Pair(1, (2, 3)))
    [1, 2, 3]
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_pytree_node expected a class, got {cls!r}")
    if not callable(flatten_fn) or not callable(unflatten_fn):
        raise TypeError(
            f"register_pytree_node expected callable flatten_fn and unflatten_fn, got "
            f"{type(flatten_fn).__name__} and {type(unflatten_fn).__name__}"
        )
    if cls in _NODE_DEFS:
        raise ValueError(f"{_qualified_name(cls)} is already registered as a pytree node")
    if not isinstance(none_children_are_leaves, bool):
        raise TypeError(f"none_children_are_leaves must be a bool, got {none_children_are_leaves!r}")
    name = serialized_type_name if serialized_type_name is not None else _qualified_name(cls)
    if not isinstance(name, str) or not name:
        raise TypeError(f"serialized_type_name must be a non-empty str, got {serialized_type_name!r}")
    if name in _TYPES_BY_NAME and _TYPES_BY_NAME[name] is not cls:
        raise ValueError(
            f"serialized_type_name {name!r} is already used by {_qualified_name(_TYPES_BY_NAME[name])}"
        )
    _NODE_DEFS[cls] = _NodeDef(
        cls, flatten_fn, unflatten_fn, name, to_dumpable_context, from_dumpable_context,
        none_children_are_leaves,
    )
    _TYPES_BY_NAME[name] = cls


def _is_namedtuple_type(cls: type) -> bool:
    return issubclass(cls, tuple) and isinstance(getattr(cls, "_fields", None), tuple)


def register_namedtuple(cls: type, *, serialized_type_name: str | None = None) -> None:
    """Give a namedtuple class a stable name for :meth:`TreeSpec.to_json` / ``from_json``.

    Namedtuples flatten without registration; registering only fixes the name used in JSON (the
    default is ``module.QualName``), so specs stay loadable after the class moves.

    >>> Point = collections.namedtuple("Point", "x y")
    >>> register_namedtuple(Point, serialized_type_name="doc.Point")
    >>> '"doc.Point"' in tree_structure(Point(1, 2)).to_json()
    True
    """
    if not isinstance(cls, type) or not _is_namedtuple_type(cls):
        raise TypeError(f"register_namedtuple expected a namedtuple class, got {cls!r}")
    name = serialized_type_name if serialized_type_name is not None else _qualified_name(cls)
    if name in _TYPES_BY_NAME and _TYPES_BY_NAME[name] is not cls:
        raise ValueError(
            f"serialized_type_name {name!r} is already used by {_qualified_name(_TYPES_BY_NAME[name])}"
        )
    old = _NAMEDTUPLE_NAMES.get(cls)
    if old is not None and old != name:
        raise ValueError(f"namedtuple {_qualified_name(cls)} is already registered as {old!r}")
    _NAMEDTUPLE_NAMES[cls] = name
    _TYPES_BY_NAME[name] = cls


def _dict_flatten(d: dict) -> tuple[list[Any], Context]:
    return list(d.values()), list(d.keys())


def _keys_to_json(keys: list[Any]) -> list[Any]:
    for key in keys:
        if type(key) not in (str, int):
            raise TypeError(
                f"TreeSpec.to_json supports dict keys of type str or int, got key {key!r} "
                f"of type {type(key).__name__}"
            )
    return list(keys)


register_pytree_node(
    tuple, lambda t: (list(t), None), lambda ch, _: tuple(ch), serialized_type_name="builtins.tuple"
)
register_pytree_node(
    list, lambda t: (list(t), None), lambda ch, _: list(ch), serialized_type_name="builtins.list"
)
register_pytree_node(
    dict,
    _dict_flatten,
    lambda ch, keys: dict(zip(keys, ch, strict=True)),
    serialized_type_name="builtins.dict",
    to_dumpable_context=_keys_to_json,
    from_dumpable_context=list,
)
register_pytree_node(
    collections.OrderedDict,
    _dict_flatten,
    lambda ch, keys: collections.OrderedDict(zip(keys, ch, strict=True)),
    serialized_type_name="collections.OrderedDict",
    to_dumpable_context=_keys_to_json,
    from_dumpable_context=list,
)
register_pytree_node(
    type(None), lambda _: ([], None), lambda ch, _: None, serialized_type_name="builtins.NoneType"
)


def _namedtuple_name(cls: type) -> str:
    name = _NAMEDTUPLE_NAMES.get(cls)
    if name is None:
        name = _qualified_name(cls)
        if "<locals>" not in name and name not in _TYPES_BY_NAME:
            _TYPES_BY_NAME[name] = cls
    return name


def _resolve_type_name(name: str) -> type:
    cls = _TYPES_BY_NAME.get(name)
    if cls is not None:
        return cls
    # A namedtuple from an already imported module: look it up without importing anything.
    module_name, _, qualname = name.rpartition(".")
    while module_name:
        module = sys.modules.get(module_name)
        if module is not None:
            obj: Any = module
            for part in qualname.split("."):
                obj = getattr(obj, part, None)
            if isinstance(obj, type) and _is_namedtuple_type(obj):
                return obj
            break
        module_name, _, head = module_name.rpartition(".")
        qualname = f"{head}.{qualname}"
    raise ValueError(
        f"TreeSpec.from_json found unknown type name {name!r}; expected a name registered with "
        "register_pytree_node / register_namedtuple (or a namedtuple of an imported module)"
    )


class TreeSpec:
    """The structure of a flattened pytree: container type, its context and one spec per child.

    ``type`` is None for a leaf. ``num_leaves`` counts the leaves below.

    >>> tree_structure((1, [2, 3]))
    TreeSpec(tuple, None, [*, TreeSpec(list, None, [*, *])])
    """

    __slots__ = ("type", "context", "children_specs", "num_leaves", "num_nodes")

    def __init__(self, type: type | None, context: Context, children_specs: list[TreeSpec]) -> None:
        self.type = type
        self.context = context
        self.children_specs = list(children_specs)
        if type is None:
            self.num_leaves = 1
            self.num_nodes = 1
        else:
            self.num_leaves = sum(c.num_leaves for c in self.children_specs)
            self.num_nodes = 1 + sum(c.num_nodes for c in self.children_specs)

    @property
    def num_children(self) -> int:
        return len(self.children_specs)

    def is_leaf(self) -> bool:
        return self.type is None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TreeSpec):
            return NotImplemented
        return (
            self.type is other.type
            and _context_equal(self.context, other.context)
            and self.children_specs == other.children_specs
        )

    def __hash__(self) -> int:
        return hash((self.type, self.num_nodes, self.num_leaves))

    def __repr__(self) -> str:
        if self.type is None:
            return "*"
        name = self.type.__name__
        children = ", ".join(repr(c) for c in self.children_specs)
        return f"TreeSpec({name}, {self.context!r}, [{children}])"

    def unflatten(self, leaves: Iterable[Any]) -> Any:
        return tree_unflatten(leaves, self)

    # --- JSON ---------------------------------------------------------------------------------
    def to_json(self) -> str:
        """Encode as JSON text; types are recorded by their registered serialized name."""
        return json.dumps({"format": _JSON_FORMAT, "version": _JSON_VERSION, "spec": self._to_obj()})

    def _to_obj(self) -> dict[str, Any]:
        if self.type is None:
            return {"type": None}
        if self.type in _NODE_DEFS:
            node_def = _NODE_DEFS[self.type]
            name = node_def.serialized_type_name
            context = self.context
            if node_def.to_dumpable_context is not None:
                context = node_def.to_dumpable_context(context)
            try:
                json.dumps(context)
            except (TypeError, ValueError) as exc:
                raise TypeError(
                    f"TreeSpec.to_json needs a JSON-serialisable context for {name}, got {context!r}; "
                    "pass to_dumpable_context/from_dumpable_context to register_pytree_node"
                ) from exc
        else:  # namedtuple: the type itself is the context
            name = _namedtuple_name(self.type)
            context = None
        return {"type": name, "context": context, "children": [c._to_obj() for c in self.children_specs]}

    @classmethod
    def from_json(cls, text: str) -> TreeSpec:
        """Decode the output of :meth:`to_json`."""
        try:
            doc = json.loads(text)
        except (TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"TreeSpec.from_json expected JSON text, got {text!r:.80}") from exc
        if not isinstance(doc, dict) or doc.get("format") != _JSON_FORMAT:
            raise ValueError(f"TreeSpec.from_json expected a {_JSON_FORMAT!r} document, got {text!r:.80}")
        if doc.get("version") != _JSON_VERSION:
            raise ValueError(
                f"TreeSpec.from_json supports version {_JSON_VERSION}, got {doc.get('version')!r}"
            )
        return cls._from_obj(doc.get("spec"))

    @classmethod
    def _from_obj(cls, obj: Any) -> TreeSpec:
        if not isinstance(obj, dict) or "type" not in obj:
            raise ValueError(f"TreeSpec.from_json expected an object with a 'type' key, got {obj!r:.80}")
        if obj["type"] is None:
            return LeafSpec()
        typ = _resolve_type_name(obj["type"])
        children = [cls._from_obj(c) for c in obj.get("children", [])]
        if typ in _NODE_DEFS:
            node_def = _NODE_DEFS[typ]
            context = obj.get("context")
            if node_def.from_dumpable_context is not None:
                context = node_def.from_dumpable_context(context)
        else:
            context = typ
        return TreeSpec(typ, context, children)


def _context_equal(a: Any, b: Any) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(type(x) is type(y) and x == y for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


class LeafSpec(TreeSpec):
    """The spec of a single leaf (printed as ``*``)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(None, None, [])


def _flatten_one(node: Any) -> tuple[type, list[Any], Context, bool] | None:
    """``(type, children, context, none_children_are_leaves)`` of a container, None for a leaf."""
    cls = type(node)
    node_def = _NODE_DEFS.get(cls)
    if node_def is not None:
        children, context = node_def.flatten(node)
        return cls, list(children), context, node_def.none_children_are_leaves
    if _is_namedtuple_type(cls):
        return cls, list(node), cls, False
    return None


def tree_flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> tuple[list[Any], TreeSpec]:
    """Return the leaves of ``tree`` (depth first, left to right) and its :class:`TreeSpec`.

    >>> tree_flatten([1, (2, None)])
    ([1, 2], TreeSpec(list, None, [*, TreeSpec(tuple, None, [*, TreeSpec(NoneType, None, [])])]))
    """
    leaves: list[Any] = []

    def walk(node: Any) -> TreeSpec:
        if is_leaf is not None and is_leaf(node):
            leaves.append(node)
            return LeafSpec()
        flat = _flatten_one(node)
        if flat is None:
            leaves.append(node)
            return LeafSpec()
        cls, children, context, none_leaves = flat
        return TreeSpec(cls, context, [none_leaf() if none_leaves and c is None else walk(c) for c in children])

    def none_leaf() -> TreeSpec:
        leaves.append(None)
        return LeafSpec()

    spec = walk(tree)
    return leaves, spec


def tree_unflatten(leaves: Iterable[Any], treespec: TreeSpec) -> Any:
    """Rebuild a pytree of shape ``treespec`` from ``leaves``.

    >>> _, spec = tree_flatten({"x": 1, "y": [2]})
    >>> tree_unflatten(["a", "b"], spec)
    {'x': 'a', 'y': ['b']}
    """
    if not isinstance(treespec, TreeSpec):
        raise TypeError(f"tree_unflatten expected a TreeSpec, got {type(treespec).__name__}")
    leaves = list(leaves)
    if len(leaves) != treespec.num_leaves:
        raise ValueError(
            f"tree_unflatten expected {treespec.num_leaves} leaves for {treespec!r}, got {len(leaves)}"
        )
    return _build(treespec, iter(leaves))


def _build(spec: TreeSpec, leaves: Iterator[Any]) -> Any:
    """The node of ``spec`` from the next leaves (a plain function: a self-referencing closure would form a
    reference cycle keeping every leaf alive until the cyclic garbage collector runs)."""
    if spec.type is None:
        return next(leaves)
    children = [_build(c, leaves) for c in spec.children_specs]
    node_def = _NODE_DEFS.get(spec.type)
    if node_def is not None:
        return node_def.unflatten(children, spec.context)
    return spec.type(*children)  # namedtuple


def tree_leaves(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> list[Any]:
    """The leaves of ``tree``: ``tree_leaves({"a": [1, 2]}) == [1, 2]``."""
    return tree_flatten(tree, is_leaf)[0]


def tree_structure(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> TreeSpec:
    """The :class:`TreeSpec` of ``tree``."""
    return tree_flatten(tree, is_leaf)[1]


def tree_map(
    fn: Callable[..., Any], tree: Any, *rests: Any, is_leaf: Callable[[Any], bool] | None = None
) -> Any:
    """Apply ``fn`` to every leaf (and the matching leaves of ``rests``), keeping the structure.

    >>> tree_map(lambda v: v * 10, {"a": (1, 2), "b": None})
    {'a': (10, 20), 'b': None}
    >>> tree_map(lambda a, b: a + b, [1, 2], [10, 20])
    [11, 22]
    """
    leaves, spec = tree_flatten(tree, is_leaf)
    other_leaves = []
    for i, rest in enumerate(rests):
        r_leaves, r_spec = tree_flatten(rest, is_leaf)
        if r_spec != spec:
            raise ValueError(f"tree_map: tree {i + 1} has structure {r_spec!r}, expected {spec!r}")
        other_leaves.append(r_leaves)
    return tree_unflatten([fn(*args) for args in zip(leaves, *other_leaves, strict=True)], spec)
