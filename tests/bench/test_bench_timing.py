"""The bench's record of how busy the machine was while a cell was timed (``others``, ``steal``) and the mark it
leaves in the latency table."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from bench import report
from bench.timing import _shares, machine_ticks, measure

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs Linux's /proc/stat")


def test_shares_subtract_this_process_and_divide_by_all_cores():
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    before, after = (100, 0, 1000), (300, 20, 1400)  # 200 busy, 20 stolen of 400 ticks on all cores
    others, steal = _shares(before, after, own_cpu_s=50 * tick)
    assert others == pytest.approx(150 / 400) and steal == pytest.approx(20 / 400)
    assert _shares(before, after, own_cpu_s=500 * tick)[0] == 0.0  # never negative (ticks are coarse)
    assert _shares(None, after, 0.0) == (None, None) and _shares(after, after, 0.0) == (None, None)


def test_ticks_only_grow_and_busy_stays_below_total():
    first = machine_ticks()
    time.sleep(0.05)
    second = machine_ticks()
    assert all(b >= a for a, b in zip(first, second))
    assert 0 <= second[0] + second[1] <= second[2]


def test_a_process_spinning_beside_the_timing_shows_as_others():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)  # started and spinning
        stats = measure(lambda: time.sleep(0.01), budget_s=0.5, warmup=0)
    finally:
        spinner.kill()
        spinner.wait()
    cores = os.cpu_count() or 1
    # The spinner alone keeps one core busy (more when the machine is loaded); the timed call sleeps.
    assert stats.others >= 0.5 / cores and 0.0 <= stats.steal <= 1.0


def test_disturbed_cells_are_marked_in_the_latency_table():
    cell = {"model": "m", "case": "b1", "threads": 1, "median_ms": 1.0, "p90_ms": 2.0}
    recs = [dict(cell, backend="quiet", others=0.05, steal=0.0), dict(cell, backend="busy", others=0.15, steal=0.1),
            dict(cell, backend="old")]  # a record from before the fields
    assert [report.disturbed(r) for r in recs] == [False, True, False]
    assert report.latency_table(recs, ["quiet", "busy", "old"]).splitlines()[-1] == \
        "| m | b1 | 1 | 1.000 / 2.000 | 1.000 / 2.000 * | 1.000 / 2.000 |"
