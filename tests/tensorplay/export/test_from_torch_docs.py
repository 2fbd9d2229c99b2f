"""docs/torch-import.md lists exactly the ATen ops of the importer's table (as docs/ops.md the registry)."""
from __future__ import annotations

import pathlib

from tensorplay.export.from_torch.table import markdown

PAGE = pathlib.Path(__file__).resolve().parents[3] / "docs" / "torch-import.md"


def test_supported_op_list_is_current() -> None:
    text = PAGE.read_text()
    listed = text.split("<!-- aten-ops -->\n", 1)[1].split("<!-- /aten-ops -->", 1)[0]
    assert listed == markdown(), "regenerate the list: python -m tensorplay.export.from_torch.table"


def test_page_is_linked_from_the_guide_and_readme() -> None:
    root = PAGE.parents[1]
    assert "torch-import.md" in (root / "docs" / "guide.md").read_text()
    assert "docs/torch-import.md" in (root / "README.md").read_text()
