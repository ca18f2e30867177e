"""limits on its own, on this host: the mechanism it picks, a Box around a process that ends well, and the
fallback's watchdog stopping a process tree past its memory total."""

from __future__ import annotations

import subprocess
import sys

import pytest

from course_utils.grade import limits

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the limits are Linux's")


def start(box: limits.Box, code: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code], preexec_fn=box.preexec, start_new_session=True)
    box.watch(proc.pid)
    return proc


def test_a_box_on_this_host_lets_a_small_process_finish():
    assert limits.mechanism() in ("cgroup2", "cgroup1", "rlimits")
    box = limits.Box()
    proc = start(box, "x = bytearray(1 << 20)")
    assert proc.wait(timeout=60) == 0
    usage = box.close()
    assert usage.hit is None and usage.peak >= 0
    assert box.memory == limits.MEMORY_TOTAL and box.tasks == limits.MAX_TASKS


def test_the_fallback_stops_a_tree_past_its_total(monkeypatch):
    monkeypatch.setattr(limits, "_chosen", [("rlimits", None)])  # what a host without a writable cgroup gets
    box = limits.Box(memory=64 << 20)
    proc = start(box, "import time\nx = b'1' * (256 << 20)\ntime.sleep(60)")  # written, so resident
    try:
        proc.wait(timeout=60)
    finally:
        limits.kill_tree(proc.pid)
    usage = box.close()
    assert usage.hit == "memory" and usage.peak > 64 << 20
    assert proc.returncode == -9
