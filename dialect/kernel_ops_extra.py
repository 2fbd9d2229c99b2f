"""Kernel-level ops the tp -> kernel lowering needs beyond :mod:`tensorplay.dialect.kernel_ops`.

Registered through the same ``@op`` table (imported by :mod:`tensorplay.lowering.fusion.lower`)::

    %w = kernel.global {value = @p_fc1_weight} : buffer<[10, 784], f32>
    %c = kernel.global {value = dense<[1.0, 2.0, 4.0]>} : buffer<[3], f32>
"""

from __future__ import annotations

from .attrs import CONST, Dense
from .opdef import PURE, A, op

__all__: list[str] = []


@op("kernel.global", attrs=[A("value", CONST)], traits=[PURE])
class Global:
    """A read-only buffer holding a module weight (``@name``) or an inline literal (``dense<...>``).

        %w = kernel.global {value = @p_fc1_weight} : buffer<[10, 784], f32>
    """

    def infer(types, attrs, facts):
        return None  # the buffer type is written explicitly

    def reference(ctx, args, attrs):
        v = attrs["value"]
        return [v.array.copy() if isinstance(v, Dense) else ctx.weight(v.name)]
