"""Timing helpers: medians of repeats after warm-up, synchronising the device around each repeat."""

from __future__ import annotations

import contextlib
import os
import statistics
import time

import torch

from course_utils import synchronize


def median_times(fns: dict, device, repeats: int, warmup: int = 1) -> dict:
    """{name: median wall seconds of fns[name]()} over ``repeats`` rounds, after ``warmup`` untimed rounds.

    Each round calls every function once, in turn, so that a busy spell on a shared machine slows all of them
    alike instead of the one that happened to be running; the median then drops the outlying rounds.
    """
    return {name: statistics.median(t) for name, t in round_times(fns, device, repeats, warmup).items()}


def median_time(fn, device, repeats: int, warmup: int = 1) -> float:
    """Median wall seconds of ``fn()`` over ``repeats`` runs after ``warmup`` untimed runs."""
    return median_times({"fn": fn}, device, repeats, warmup)["fn"]


def round_times(fns: dict, device, repeats: int, warmup: int = 1) -> dict:
    """{name: [wall seconds of fns[name]() in round 0, 1, ...]}: ``repeats`` rounds after ``warmup`` untimed ones.

    The functions take turns within a round, in the reverse order every other round (A B, B A, ...), so that
    neither always runs right after the other one has filled or flushed the caches.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    synchronize(device)
    times = {name: [] for name in fns}
    for r in range(repeats):
        for name in list(fns) if r % 2 == 0 else reversed(list(fns)):
            start = time.perf_counter()
            fns[name]()
            synchronize(device)  # GPU kernels run asynchronously: wait for them before reading the clock
            times[name].append(time.perf_counter() - start)
    return times


def paired_speed_ratio(times: dict, name: str, baseline: str) -> dict:
    """How much faster ``name`` runs than ``baseline`` (baseline seconds / name seconds; > 1 = faster), taken round
    by round from ``round_times``: the two ran seconds apart, under the same load. Returns the median over the
    rounds and the interquartile range (the middle half of the rounds' ratios), which says how far to trust it."""
    ratios = sorted(b / t for t, b in zip(times[name], times[baseline], strict=True))
    q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else ratios * 3
    return {"median": statistics.median(ratios), "q1": q1, "q3": q3, "rounds": len(ratios)}


@contextlib.contextmanager
def cpu_threads(num_threads: int | None):
    """Run the block with ``torch.set_num_threads(num_threads)`` (None: leave it), then restore the old count.

    A decoding step on the CPU is many small ops; a second intra-op thread barely speeds them up, and on a machine
    whose cores are shared it makes each op wait for a thread that may be descheduled, which is most of the
    run-to-run spread. A fixed thread count makes two runs comparable."""
    before = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def load_average() -> float | None:
    """The machine's 1-minute load average (None where the OS has none): other processes widen the spread."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None
