"""Golden IR tests of the fusion pipeline: ``golden/*.tp`` (input IR, ``// RUN:`` pipeline, CHECK lines).

``fuse_*.tp`` run the whole pipeline on tp IR; ``stage_*.tp`` run one stage of it on that stage's input.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tensorplay.lowering.fusion.fuse import FUSION_PIPELINE
from tests.dialect.conftest import check_output, run_golden

FILES = sorted((Path(__file__).parent / "golden").glob("*.tp"))
_RUN = re.compile(r"^// RUN: ([\w-]+)", re.M)


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_golden(path: Path):
    source = path.read_text()
    check_output(source, run_golden(source))


def test_every_stage_of_the_pipeline_has_a_golden_file_of_its_own():
    stages = {m.group(1) for p in FILES if p.stem.startswith("stage_") for m in [_RUN.search(p.read_text())]
              if m and "," not in p.read_text().split("\n", 1)[0]}
    assert stages == set(FUSION_PIPELINE.split(","))
    assert len([p for p in FILES if p.stem.startswith("fuse_")]) >= 3
