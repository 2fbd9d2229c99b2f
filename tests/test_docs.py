"""Generated documentation stays in step with the code."""
from __future__ import annotations

import pathlib

from tensorplay.ops._docs import ops_markdown

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"


def test_ops_table_is_current():
    assert (DOCS / "ops.md").read_text() == ops_markdown(), "regenerate: python -m tensorplay.ops._docs > docs/ops.md"
