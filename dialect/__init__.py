"""tensorplay's intermediate representation: an SSA IR whose tensor shapes are sympy expressions.

Two levels share one declarative op table (:mod:`tensorplay.dialect.ops`, :mod:`tensorplay.dialect.shape_ops`,
:mod:`tensorplay.dialect.kernel_ops`): ``tp`` (primitive tensor ops) and ``kernel`` (loop nests over buffers).
The printer, parser, verifier, interpreter and :func:`docs_markdown` all read that table. This
package imports nothing from ``tensorplay``, ``lowering`` or ``runtime``.

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
    >>> x = np.array([[0.0, 1.0, 2.0, 3.0]], np.float32)
    >>> out = run(m, [x])[0]
    >>> bool(np.allclose(out, np.exp(x) / np.exp(x).sum(1, keepdims=True)))
    True
"""

from . import kernel_ops as _kernel_ops  # noqa: F401  (registers the kernel level)
from . import ops as _ops  # noqa: F401  (registers the tp level)
from .ir import Builder, Function, Module, Operation, Value, structurally_equal
from .opdef import REGISTRY, docs_markdown
from .parser import DialectParseError, parse, parse_function
from .printer import print_function, print_module
from .types import BF16, F16, F32, F64, I1, I8, I16, I32, I64, INDEX, U8, BufferType, TensorType, sym

__all__ = ["Builder", "Function", "Module", "Operation", "Value", "structurally_equal", "REGISTRY",
           "docs_markdown", "DialectParseError", "parse", "parse_function", "print_function", "print_module",
           "BF16", "F16", "F32", "F64", "I1", "I8", "I16", "I32", "I64", "INDEX", "U8", "BufferType", "TensorType",
           "sym"]
