"""Seeing what compiling does: stage records on the ``tensorplay`` logger, silent unless asked,
``verbose=True``, ``TENSORPLAY_LOG``, and the progress bar on a terminal."""
from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import textwrap

import pytest

import tensorplay as tp
from tensorplay.export import export

STAGES = ["decompose", "lower", "fuse", "llvm", "link"]


def _program():
    model = tp.nn.Sequential(tp.nn.Linear(3, 4), tp.nn.GELU(), tp.nn.Linear(4, 2)).eval()
    return export(model, tp.ones(2, 3))


def _stage_records(caplog):
    return [r for r in caplog.records if hasattr(r, "stage")]


def test_compiling_a_program_reports_every_stage_in_order(caplog):
    with caplog.at_level(logging.INFO, logger="tensorplay"):
        compiled = tp.compile(_program(), cache=False)  # the program cache would skip every stage
    records = _stage_records(caplog)
    assert [r.stage for r in records] == STAGES
    assert all(r.name == "tensorplay.compile" and r.levelno == logging.INFO for r in records)
    assert all(r.seconds >= 0 for r in records)
    by_stage = {r.stage: r for r in records}
    assert by_stage["fuse"].counts["kernels"] == compiled.stats["kernels"]
    assert by_stage["llvm"].counts["kernel_functions"] == compiled.stats["kernel_functions"]
    assert by_stage["decompose"].counts["graph_ops"] > 0 and by_stage["lower"].counts["tp_ops"] > 0
    assert "Sequential: fuse: 2 kernels" in by_stage["fuse"].getMessage()
    assert list(compiled.stats["stage_seconds"]) == STAGES


def test_compiling_a_module_reports_the_capture_first(caplog):
    compiled = tp.compile(tp.nn.Linear(3, 2).eval(), dynamic=True)
    with caplog.at_level(logging.INFO, logger="tensorplay"):
        compiled(tp.ones(2, 3))
    records = _stage_records(caplog)
    assert [r.stage for r in records] == ["capture", *STAGES]
    assert records[0].counts["graph_ops"] == 1 and "batch dynamic" in records[0].getMessage()


def test_pass_times_are_debug_records(caplog):
    with caplog.at_level(logging.DEBUG, logger="tensorplay"):
        tp.compile(_program(), cache=False)
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    passes = [m for m in messages if m.startswith("pass ")]
    assert any(m.startswith("pass fuse: ") for m in passes) and any(m.startswith("pass cse: ") for m in passes)


def test_nothing_is_printed_unless_asked(capsys):
    tp.compile(_program())
    assert capsys.readouterr().err == ""


def test_verbose_prints_the_stages_on_stderr(capsys):
    tp.compile(_program(), verbose=True, cache=False)
    err = capsys.readouterr().err.splitlines()
    assert [line.split(": ")[2] for line in err] == STAGES
    assert all(line.startswith("tensorplay: Sequential: ") for line in err)
    tp.compile(_program())  # the handler was only for that call
    assert capsys.readouterr().err == ""


def test_a_program_from_the_compile_cache_says_so(caplog):
    tp.compile(_program())
    with caplog.at_level(logging.INFO, logger="tensorplay"):
        compiled = tp.compile(_program())
    assert compiled.stats["from_cache"] and not _stage_records(caplog)
    assert [r.getMessage().split(", ")[0] for r in caplog.records] == [
        "Sequential: from the compile cache (nothing lowered)"]


def _run(code: str, **env) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "TENSORPLAY_LOG"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env={**environment, **env}, timeout=300)


_COMPILE = """
    import tensorplay as tp
    from tensorplay.export import export
    program = export(lambda x: (x * 2).exp(), tp.ones(3))
    print(program(tp.ones(3)).tolist())
"""


def test_tensorplay_log_info_prints_the_stages_of_every_compile():
    quiet = _run(_COMPILE)
    assert quiet.returncode == 0 and quiet.stderr == ""
    loud = _run(_COMPILE, TENSORPLAY_LOG="info", TENSORPLAY_CACHE="0")  # every stage runs (no program cache)
    assert loud.returncode == 0, loud.stderr
    stages = [line.split(": ")[2] for line in loud.stderr.splitlines() if line.startswith("tensorplay: ")]
    assert stages == STAGES
    assert loud.stdout.strip() == quiet.stdout.strip()
    bad = _run(_COMPILE, TENSORPLAY_LOG="loud")
    assert bad.returncode == 0 and "TENSORPLAY_LOG must be one of" in bad.stderr


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_shows_on_a_terminal_when_records_are_wanted():
    pytest.importorskip("tqdm")
    from tensorplay.lowering.progress import LOGGER, CompileProgress, shows_bar

    terminal, pipe = _Terminal(), io.StringIO()
    previous = LOGGER.level
    LOGGER.setLevel(logging.INFO)
    try:
        assert shows_bar(LOGGER, terminal) and not shows_bar(LOGGER, pipe)
        progress = CompileProgress("Net", stages=("lower", "fuse"), stream=terminal)
        progress.start("lower")
        progress.advance("fuse", tp_ops=3)
        records = progress.finish(kernels=1)
    finally:
        LOGGER.setLevel(previous)
    assert [r.name for r in records] == ["lower", "fuse"]
    shown = terminal.getvalue()
    assert "Net: lower" in shown and "Net: fuse" in shown and "2/2" in shown
    assert not shows_bar(LOGGER, terminal)  # records not wanted: no bar
