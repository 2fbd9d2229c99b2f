"""Every signature in the seed API document answers as documented.

``data/tensorplay-export-api.md`` is a copy of the seed page. Each ```python block that names a
``tensorplay.export`` function or class, or a method, property or attribute of the class whose
section it sits in, is compared with the real object: parameter names, kinds (positional-only,
keyword-only, ``*args``/``**kwargs``) and defaults, with ``inspect.signature``.
"""
from __future__ import annotations

import ast
import inspect
import io
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.export as tpe

SEED = Path(__file__).with_name("data") / "tensorplay-export-api.md"

# Documented differences between the seed and this implementation: object -> reason.
KNOWN_DIFFERENCES: dict[str, str] = {}
if sys.version_info < (3, 12):  # the seed was rendered on Python >= 3.12, where Enum classes show (*values)
    KNOWN_DIFFERENCES.update(dict.fromkeys(("InputKind", "OutputKind", "WeightType"),
                                           "Enum call signature of Python < 3.12"))
    KNOWN_DIFFERENCES["WeightType.is_integer"] = "int.is_integer is new in Python 3.12 (WeightType is an IntEnum)"

# Keyword-only parameters this implementation adds after the seed's (all with defaults, so every
# seed call still means the same): the archive trust model (docs/guide) and package signing.
EXTENSIONS: dict[str, tuple[str, ...]] = {
    "load": ("trust_native_code", "trusted_keys"),
    "load_pt2": ("trust_native_code", "trusted_keys"),
    "package_pt2": ("sign_key",),
}


def _split_top(text: str, sep: str) -> list[str]:
    """Split ``text`` at ``sep`` outside brackets and quotes."""
    parts, depth, quote, current = [], 0, None, ""
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(current)
            current = ""
            continue
        current += ch
    parts.append(current)
    return parts


def _params(text: str) -> list[tuple[str, str, str | None]]:
    """``(name, kind, default text)`` for a seed parameter list."""
    raw = [p.strip() for p in _split_top(text, ",") if p.strip()]
    if "/" in raw:
        positional_only = raw.index("/")
    else:
        positional_only = 0
    out, keyword_only = [], False
    for i, p in enumerate(raw):
        if p == "/":
            continue
        if p == "*":
            keyword_only = True
            continue
        if p.startswith("**"):
            out.append((p[2:].split(":")[0].strip(), "VAR_KEYWORD", None))
            continue
        if p.startswith("*"):
            out.append((p[1:].split(":")[0].strip(), "VAR_POSITIONAL", None))
            keyword_only = True
            continue
        head, *default = _split_top(p, "=")
        name = head.split(":")[0].strip()
        kind = ("POSITIONAL_ONLY" if i < positional_only else
                "KEYWORD_ONLY" if keyword_only else "POSITIONAL_OR_KEYWORD")
        out.append((name, kind, default[0].strip() if default else None))
    return out


def _call_parts(line: str) -> tuple[str, str] | None:
    """``(name, parameter text)`` of ``name(...)`` at the start of ``line`` (balanced parentheses)."""
    m = re.match(r"([\w.]+)\(", line)
    if not m:
        return None
    depth = 0
    for j in range(m.end() - 1, len(line)):
        depth += {"(": 1, ")": -1}.get(line[j], 0)
        if depth == 0:
            return m.group(1), line[m.end():j]
    raise AssertionError(f"unbalanced signature: {line}")


def _entries() -> list[tuple[str, str, str | None, str]]:
    """(owner class or '', member name, parameter text or None, decorator) for every seed block."""
    text = SEED.read_text(encoding="utf-8")
    entries, owner = [], ""
    for heading, block in re.findall(r"^### (\w+)$|```python\n(.*?)\n```", text, flags=re.M | re.S):
        if heading:
            owner = ""
            continue
        line = block.strip().replace("&#x2192;", "→")
        m = re.match(r"(class|exception) tensorplay\.export\.(\w+)(.*)", line)
        if m:
            owner = m.group(2)
            parts = _call_parts(m.group(2) + m.group(3))
            entries.append(("", m.group(2), parts[1] if parts else None, m.group(1)))
            continue
        if line.startswith("tensorplay.export."):
            parts = _call_parts(line[len("tensorplay.export."):])
            entries.append(("", parts[0] if parts else line.split(".")[-1], parts[1] if parts else None, "attr"))
            continue
        decorator = ""
        m = re.match(r"(classmethod|static|property) (.*)", line)
        if m:
            decorator, line = m.groups()
        parts = _call_parts(line)
        assert owner, f"member outside a class section: {line}"
        if parts:
            entries.append((owner, parts[0], parts[1], decorator))
        else:
            entries.append((owner, re.match(r"\w+", line).group(0), None, decorator or "attr"))
    return entries


ENTRIES = _entries()


def test_the_seed_document_is_parsed():
    owners = {e[0] for e in ENTRIES}
    names = {(e[0], e[1]) for e in ENTRIES}
    assert len(ENTRIES) > 60 and {"CustomDecompTable", "ExportedProgram", "ExportGraphSignature"} <= owners
    assert {("", "unflatten"), ("", "UnflattenedModule"), ("CustomDecompTable", "remove"),
            ("ExportGraphSignature", "get_param_to_buffer")} <= names


def _default_matches(seed: str, actual: object) -> bool:
    if repr(actual) == seed:
        return True
    try:
        return ast.literal_eval(seed) == actual
    except (ValueError, SyntaxError):
        return False


@pytest.mark.parametrize("owner,name,params,decorator", ENTRIES,
                         ids=[f"{o}.{n}" if o else n for o, n, _, _ in ENTRIES])
def test_signature_matches_the_seed(owner, name, params, decorator):
    key = f"{owner}.{name}" if owner else name
    if key in KNOWN_DIFFERENCES:
        pytest.skip(KNOWN_DIFFERENCES[key])
    cls = getattr(tpe, owner) if owner else None
    obj = getattr(cls if cls is not None else tpe, name)
    if decorator == "property":
        assert isinstance(inspect.getattr_static(cls, name), property), f"{key} is not a property"
        return
    if decorator == "classmethod":
        assert getattr(obj, "__self__", None) is cls, f"{key} is not a classmethod"
    if decorator == "static":
        assert isinstance(inspect.getattr_static(cls, name), staticmethod), f"{key} is not a staticmethod"
    if decorator == "exception":
        assert issubclass(obj, Exception)
    if params is None:
        return
    static = inspect.getattr_static(cls, name) if cls is not None else None
    try:
        sig = inspect.signature(obj)
    except ValueError:  # a C method without a text signature: it must be inherited from a builtin type
        assert any(base.__module__ == "builtins" and base.__dict__.get(name) is static for base in cls.__mro__)
        return
    actual = list(sig.parameters.values())
    if decorator == "" and (inspect.isfunction(static) or inspect.ismethoddescriptor(static)):
        actual = actual[1:]  # self
    extra = EXTENSIONS.get(key, ())
    assert [p.name for p in actual[len(actual) - len(extra):]] == list(extra) if extra else True
    for p in actual[len(actual) - len(extra):]:
        assert p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is not inspect.Parameter.empty
    actual = actual[:len(actual) - len(extra)]
    expected = _params(params)
    got = [(p.name, p.kind.name) for p in actual]
    assert got == [(n, k) for n, k, _ in expected], f"{key}: seed ({params}) vs {sig}"
    for (pname, _, default), p in zip(expected, actual, strict=True):
        if default is None:
            assert p.default is inspect.Parameter.empty, f"{key}: {pname} has a default {p.default!r}"
        else:
            assert _default_matches(default, p.default), f"{key}: {pname} default {p.default!r}, seed {default}"


# --- the seed's keyword names and meanings ----------------------------------------------------------------

def _mlp():
    tp.manual_seed(0)
    return tp.nn.Sequential(tp.nn.Linear(4, 3), tp.nn.ReLU(), tp.nn.Linear(3, 2))


class _Reverse(tpe.FlatArgsAdapter):
    def adapt(self, target_spec, input_spec, input_args, metadata=None, obj=None):
        return list(reversed(input_args))


def test_unflatten_and_unflattened_module_take_the_seed_keywords():
    model = _mlp()
    x = tp.randn(5, 4)
    prog = tpe.export(model, x)
    expected = model(x).detach().numpy()
    np.testing.assert_array_equal(tpe.unflatten(module=prog, preserve_ops=())(x).detach().numpy(), expected)
    view = tpe.UnflattenedModule(export_module=prog, flat_args_adapter=None)
    np.testing.assert_array_equal(view(x).detach().numpy(), expected)
    sub = tpe.export(lambda a, b: a - b, tp.ones(2), tp.ones(2))
    swapped = tpe.UnflattenedModule(export_module=sub, flat_args_adapter=_Reverse())
    assert swapped(tp.tensor([1.0, 2.0]), tp.tensor([5.0, 7.0])).numpy().tolist() == [4.0, 5.0]


def test_remove_takes_target_and_returns_the_removed_builder():
    def builder(graph, node):
        return node

    table = tpe.CustomDecompTable({"my_op": builder}, defaults=True)
    assert table.remove(target="my_op") is builder and "my_op" not in table
    softplus = table["softplus"]
    assert table.remove(target="softplus") is softplus and "softplus" not in table
    with pytest.raises(KeyError):
        table.remove(target="softplus")


def test_get_param_to_buffer_pairs_each_parameter_with_its_gradient_output():
    class Loss(tp.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = _mlp()

        def forward(self, a, t):
            return tp.nn.functional.cross_entropy(self.net(a), t)

    model = Loss()
    x, y = tp.randn(6, 4), tp.tensor([0, 1, 1, 0, 1, 0])
    prog = tpe.export_joint(model, x, y)
    pairs = prog.graph_signature.get_param_to_buffer()
    assert sorted(pairs) == sorted(n for n, _ in model.named_parameters())
    out_names = [getattr(a, "name", None) for a in next(n for n in prog.graph.nodes if n.op == "output").args[0]]
    state = dict(model.named_parameters())
    flat = prog.graph_module(*[state[s.target] if s.target else {"a": x, "t": y}[s.arg.name]
                               for s in prog.graph_signature.input_specs])
    _, grads = prog(x, y)
    for target, value_name in pairs.items():  # the call runs native code: equal within the numerical contract
        np.testing.assert_allclose(np.asarray(flat[out_names.index(value_name)]._data),
                                   np.asarray(grads[target]._data), rtol=1e-5, atol=1e-6)
    assert tpe.export(model.net, x).graph_signature.get_param_to_buffer() == {}


def test_assertion_dep_token_names_the_last_assertion_when_there_are_any():
    model = _mlp()
    plain = tpe.export(model, tp.randn(5, 4))
    assert plain.graph_signature.assertion_dep_token is None
    prog = tpe.export(model, tp.randn(5, 4), dynamic_shapes={"input": {0: tpe.Dim("batch", min=2, max=9)}})
    checks = [n.name for n in prog.graph.nodes if n.op == "call_function"
              and n.target.__module__ == "tensorplay.export.assertions"]
    assert checks
    token = prog.graph_signature.assertion_dep_token
    assert token == {len(prog.graph_signature.output_specs): checks[-1]}
    assert prog.graph_signature.clone().assertion_dep_token == token
    buf = io.BytesIO()
    tpe.save(prog, buf)
    buf.seek(0)
    assert tpe.load(buf).graph_signature.assertion_dep_token == token
