"""The table of registry ops, generated for ``docs/ops.md`` (``python -m tensorplay.ops._docs``).

>>> "| add |" in ops_markdown()
True
"""
from __future__ import annotations

from ._registry import REGISTRY, methods

__all__ = ["ops_markdown"]


def ops_markdown() -> str:
    """One row per op: primitive or composite, differentiable, tensor method, in-place variant."""
    bound = {op.name for op in methods().values()}
    rows = ["| op | kind | backward | method | in-place |", "| --- | --- | --- | --- | --- |"]
    for name in sorted(REGISTRY):
        op = REGISTRY[name]
        if op.inplace_of is not None:
            continue
        kind = "primitive" if op.primitive else ("composite" if op.decomposition else "kept")
        inplace = f"`{name}_`" if f"{name}_" in REGISTRY else ""
        rows.append(f"| {name} | {kind} | {'yes' if op.backward else ''} | "
                    f"{'yes' if name in bound else ''} | {inplace} |")
    head = ("# Supported ops\n\nGenerated from the op registry by `python -m tensorplay.ops._docs > docs/ops.md`; "
            "a test keeps it current.\n\n*primitive*: compiled directly; *composite*: reaches the compiler "
            "through its decomposition; *kept*: no decomposition and not a primitive (lowered by a dedicated "
            "rule, or run on the interpreter).\n\n")
    return head + "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(ops_markdown(), end="")
