"""Golden IR tests of the fusion pipeline: ``golden/*.tp`` (input IR, ``// RUN:`` pipeline, CHECK lines)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.dialect.conftest import check_output, run_golden

FILES = sorted((Path(__file__).parent / "golden").glob("fuse_*.tp"))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_golden(path: Path):
    source = path.read_text()
    check_output(source, run_golden(source))


def test_there_are_golden_files():
    assert len(FILES) >= 3
