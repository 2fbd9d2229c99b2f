"""User types that cross the export boundary: dataclass pytrees and named custom objects.

:func:`register_dataclass` makes a dataclass a pytree container (one child per field, in
declaration order) with a stable serialized name, so exported programs can take and return it and
archives can name it without pickle:

>>> import dataclasses
>>> from tensorplay.graph._pytree import tree_flatten, tree_unflatten
>>> @dataclasses.dataclass
... class Pair:
...     left: int
...     right: int
>>> _ = register_dataclass(Pair, serialized_type_name="doc.DataclassPair")
>>> leaves, spec = tree_flatten(Pair(1, 2))
>>> leaves, tree_unflatten([3, 4], spec), registered_dataclass_name(Pair)
([1, 2], Pair(left=3, right=4), 'doc.DataclassPair')

:func:`register_custom_object` registers an opaque class by name with a JSON encoder and decoder
(archives store ``{"class": name, "state": to_json(obj)}``); :func:`resolve_custom_object` looks a
name up again. :class:`ScriptObjectMeta` describes such an object where a graph refers to it.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..graph._pytree import register_pytree_node

__all__ = ["ScriptObjectMeta", "register_dataclass", "registered_dataclass_name", "register_custom_object",
           "resolve_custom_object", "custom_object_name", "encode_custom_object", "decode_custom_object"]

_DATACLASS_NAMES: dict[type, str] = {}


def _stable_name(cls: type) -> str:
    qualname = cls.__qualname__
    if "<locals>" in qualname:
        return f"{cls.__module__}.{cls.__name__}"
    return f"{cls.__module__}.{qualname}"


def register_dataclass(cls: type, *, serialized_type_name: str | None = None,
                       return_none_fields: bool = True) -> type:
    """Register dataclass ``cls`` as a pytree node (children = fields in order); returns ``cls``.

    ``serialized_type_name`` defaults to ``module.QualName`` (``module.Name`` for classes defined
    inside functions). With ``return_none_fields=False`` fields holding ``None`` are left out of
    the children and come back as ``None``; otherwise every field is a child, and a ``None``
    field is a ``None`` leaf (API-SPEC 1.9). Unflattening fills fields missing from the recorded
    context with ``None``.

    >>> @dataclasses.dataclass
    ... class Opt:
    ...     a: Any
    ...     b: Any = None
    >>> _ = register_dataclass(Opt, serialized_type_name="doc.Opt")
    >>> from tensorplay.graph._pytree import tree_flatten, tree_unflatten
    >>> leaves, spec = tree_flatten(Opt(1, 2))
    >>> tree_unflatten([5, 6], spec)
    Opt(a=5, b=6)
    >>> tree_flatten(Opt(1))[0]
    [1, None]
    """
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"register_dataclass expects a dataclass type, got {cls!r}")
    if serialized_type_name is not None and (not isinstance(serialized_type_name, str) or not serialized_type_name):
        raise TypeError(f"serialized_type_name must be a non-empty str, got {serialized_type_name!r}")
    name = serialized_type_name or _stable_name(cls)
    fields = [f.name for f in dataclasses.fields(cls) if f.init]

    def flatten(obj: Any) -> tuple[list, list]:
        names = [f for f in fields if return_none_fields or getattr(obj, f) is not None]
        return [getattr(obj, f) for f in names], names

    def unflatten(children: Any, context: list) -> Any:
        values = dict(zip(context, children, strict=True))
        return cls(**{f: values.get(f) for f in fields})

    register_pytree_node(cls, flatten, unflatten, serialized_type_name=name, none_children_are_leaves=True)
    _DATACLASS_NAMES[cls] = name
    return cls


def registered_dataclass_name(cls: type) -> str:
    """The serialized name :func:`register_dataclass` recorded for ``cls`` (KeyError if unregistered)."""
    try:
        return _DATACLASS_NAMES[cls]
    except (KeyError, TypeError):
        raise KeyError(f"{cls!r} is not a registered dataclass; call register_dataclass first") from None


# --- opaque custom objects ------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ScriptObjectMeta:
    """Where a graph refers to a custom object: the name it is stored under and its registered class name.

    >>> ScriptObjectMeta("c_tokenizer", "examples.Tokenizer").class_fqn
    'examples.Tokenizer'
    """

    constant_name: str
    class_fqn: str

    def __post_init__(self) -> None:
        for field in ("constant_name", "class_fqn"):
            value = getattr(self, field)
            if not isinstance(value, str) or not value:
                raise TypeError(f"ScriptObjectMeta.{field} must be a non-empty str, got {value!r}")


@dataclasses.dataclass(frozen=True)
class _CustomObjectType:
    cls: type
    name: str
    to_json: Callable[[Any], Any]
    from_json: Callable[[Any], Any]


_CUSTOM_BY_NAME: dict[str, _CustomObjectType] = {}
_CUSTOM_BY_CLASS: dict[type, _CustomObjectType] = {}


def register_custom_object(cls: type, *, name: str | None = None, to_json: Callable[[Any], Any] | None = None,
                           from_json: Callable[[Any], Any] | None = None) -> type:
    """Register ``cls`` under ``name`` (default ``module.QualName``) with a JSON state codec; returns ``cls``.

    ``to_json(obj)`` returns JSON-compatible state and ``from_json(state)`` rebuilds the object;
    they default to the class's own ``to_json`` / ``from_json`` attributes when it
    defines them. Registering the same class under the same name again replaces its codec.

    >>> class Vocab:
    ...     def __init__(self, words): self.words = list(words)
    >>> _ = register_custom_object(Vocab, name="doc.Vocab", to_json=lambda v: v.words, from_json=Vocab)
    >>> doc = encode_custom_object(Vocab(["a", "b"]))
    >>> doc, decode_custom_object(doc).words
    ({'class': 'doc.Vocab', 'state': ['a', 'b']}, ['a', 'b'])
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_custom_object expects a class, got {cls!r}")
    name = _stable_name(cls) if name is None else name
    if not isinstance(name, str) or not name:
        raise TypeError(f"custom object name must be a non-empty str, got {name!r}")
    to_json = to_json if to_json is not None else getattr(cls, "to_json", None)
    from_json = from_json if from_json is not None else getattr(cls, "from_json", None)
    if not callable(to_json) or not callable(from_json):
        raise TypeError(f"register_custom_object({cls.__qualname__}): to_json and from_json must be callable "
                        f"(pass them, or define them on the class)")
    known = _CUSTOM_BY_NAME.get(name)
    if known is not None and known.cls is not cls:
        raise ValueError(f"custom object name {name!r} is already used by {known.cls.__qualname__}")
    old = _CUSTOM_BY_CLASS.get(cls)
    if old is not None and old.name != name:
        _CUSTOM_BY_NAME.pop(old.name, None)
    entry = _CustomObjectType(cls, name, to_json, from_json)
    _CUSTOM_BY_NAME[name] = entry
    _CUSTOM_BY_CLASS[cls] = entry
    return cls


def resolve_custom_object(name: str) -> type:
    """The class registered under ``name``; KeyError listing the registered names otherwise."""
    entry = _CUSTOM_BY_NAME.get(name) if isinstance(name, str) else None
    if entry is None:
        raise KeyError(f"no custom object is registered as {name!r}; registered: {sorted(_CUSTOM_BY_NAME)}")
    return entry.cls


def custom_object_name(obj_or_cls: Any) -> str:
    """The registered name of a custom object (or its class); KeyError if unregistered."""
    cls = obj_or_cls if isinstance(obj_or_cls, type) else type(obj_or_cls)
    entry = _CUSTOM_BY_CLASS.get(cls)
    if entry is None:
        raise KeyError(f"{cls.__qualname__} is not a registered custom object; call register_custom_object")
    return entry.name


def encode_custom_object(obj: Any) -> dict:
    """``{"class": name, "state": to_json(obj)}`` for a registered custom object."""
    entry = _CUSTOM_BY_CLASS.get(type(obj))
    if entry is None:
        raise KeyError(f"{type(obj).__qualname__} is not a registered custom object; call register_custom_object")
    return {"class": entry.name, "state": entry.to_json(obj)}


def decode_custom_object(doc: dict) -> Any:
    """Rebuild an object from :func:`encode_custom_object`'s document (ValueError if malformed)."""
    if not isinstance(doc, dict) or set(doc) != {"class", "state"}:
        raise ValueError(f"a custom object document is {{'class': name, 'state': ...}}, got {doc!r}")
    entry = _CUSTOM_BY_NAME.get(doc["class"]) if isinstance(doc["class"], str) else None
    if entry is None:
        raise ValueError(f"custom object class {doc['class']!r} is not registered; registered: "
                         f"{sorted(_CUSTOM_BY_NAME)}")
    return entry.from_json(doc["state"])
