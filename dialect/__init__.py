"""tensorplay's intermediate representation: an SSA IR whose tensor shapes are sympy expressions.

Two levels, two dialect objects (:mod:`tensorplay.dialect.dialects`): ``TP`` (primitive tensor ops,
declared in :mod:`tensorplay.dialect.ops` and :mod:`tensorplay.dialect.shape_ops`) and ``KERNEL`` (loop
nests over buffers, :mod:`tensorplay.dialect.kernel_ops`). :data:`REGISTRY` is built from those two
objects, and the printer, parser, verifier, interpreter and :func:`docs_markdown` all read it; passes are
listed by name in one table (:mod:`tensorplay.dialect.passes.table`). Nothing registers itself on import.
This package imports nothing from ``tensorplay``, ``lowering`` or ``runtime``.

A tour: build a function, print it, parse it back, verify, run a pass, interpret::

    >>> import numpy as np
    >>> from tensorplay.dialect import Builder, Function, TensorType, F32, sym, parse, structurally_equal
    >>> from tensorplay.dialect.verify import verify
    >>> from tensorplay.dialect.passes import PassManager
    >>> from tensorplay.dialect.interpret import run
    >>> s0 = sym("s0")
    >>> f = Function("main", [("x", TensorType((s0, 4), F32))], symbols={s0: (1, 1024)})
    >>> b = Builder(f, loc="model.py:3")
    >>> one = b.constant(np.ones(4, np.float32))
    >>> y = b.mul(f.args[0], one)                 # x * 1: canonicalize removes it
    >>> z = b.sum(b.exp(y), axes=[1], keepdim=True)
    >>> _ = b.ret(b.div(b.exp(y), z))
    >>> text = print_function(f)
    >>> print(text)  # doctest: +NORMALIZE_WHITESPACE
    func @main(%x: tensor<[s0, 4], f32>) -> (tensor<[s0, 4], f32>) where {s0 in [1, 1024]} {
      %0 = tp.constant {value = dense<[1.0, 1.0, 1.0, 1.0]>} : tensor<[4], f32> loc("model.py:3")
      %1 = tp.mul %x, %0 : tensor<[s0, 4], f32> loc("model.py:3")
      %2 = tp.exp %1 : tensor<[s0, 4], f32> loc("model.py:3")
      %3 = tp.sum %2 {axes = [1], keepdim = true} : tensor<[s0, 1], f32> loc("model.py:3")
      %4 = tp.exp %1 : tensor<[s0, 4], f32> loc("model.py:3")
      %5 = tp.div %4, %3 : tensor<[s0, 4], f32> loc("model.py:3")
      tp.return %5 loc("model.py:3")
    }
    >>> m = parse(text)
    >>> structurally_equal(m.functions[0], f) and str(m) == text
    True
    >>> verify(m)
    >>> PassManager("canonicalize,cse,dce", verify=True).run(m)
    True
    >>> [op.name for op in m.functions[0].body.ops]
    ['tp.exp', 'tp.sum', 'tp.div', 'tp.return']

Ops read through their declaration: attributes by name with declared defaults filled in, operands by
declared name, traits::

    >>> from tensorplay.dialect.opdef import PURE
    >>> s = m.functions[0].body.ops[1]
    >>> s.attr.axes, s.attr.keepdim, s.operand.input.owner.name, s.has(PURE)
    ([1], True, 'tp.exp', True)
    >>> x = np.array([[0.0, 1.0, 2.0, 3.0]], np.float32)
    >>> out = run(m, [x])[0]
    >>> bool(np.allclose(out, np.exp(x) / np.exp(x).sum(1, keepdims=True)))
    True
"""

from .dialects import DIALECTS, KERNEL, REGISTRY, TP, Dialect, docs_markdown, lookup
from .ir import Builder, Function, Module, Operation, Value, structurally_equal
from .parser import DialectParseError, parse, parse_function
from .printer import print_function, print_module
from .types import BF16, F16, F32, F64, I1, I8, I16, I32, I64, INDEX, U8, BufferType, TensorType, sym

__all__ = ["Builder", "Function", "Module", "Operation", "Value", "structurally_equal", "REGISTRY", "lookup",
           "Dialect", "DIALECTS", "TP", "KERNEL", "docs_markdown", "DialectParseError", "parse", "parse_function",
           "print_function", "print_module", "BF16", "F16", "F32", "F64", "I1", "I8", "I16", "I32", "I64", "INDEX",
           "U8", "BufferType", "TensorType", "sym"]
