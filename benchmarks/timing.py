"""Timing helpers: medians of repeats after warm-up, synchronising the device around each repeat."""

from __future__ import annotations

import statistics
import time

from course_utils import synchronize


def median_times(fns: dict, device, repeats: int, warmup: int = 1) -> dict:
    """{name: median wall seconds of fns[name]()} over ``repeats`` rounds, after ``warmup`` untimed rounds.

    Each round calls every function once, in turn, so that a busy spell on a shared machine slows all of them
    alike instead of the one that happened to be running; the median then drops the outlying rounds.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    synchronize(device)
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            synchronize(device)  # GPU kernels run asynchronously: wait for them before reading the clock
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def median_time(fn, device, repeats: int, warmup: int = 1) -> float:
    """Median wall seconds of ``fn()`` over ``repeats`` runs after ``warmup`` untimed runs."""
    return median_times({"fn": fn}, device, repeats, warmup)["fn"]
