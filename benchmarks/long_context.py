"""Benchmark for notebook 12: a sliding-window layer decoding with a ring-buffer cache against a growing cache.

Both decode the same ``steps`` tokens one at a time, each new query attending to the last ``window`` keys (RoPE
applied before caching, to all positions at once: the rotation is the same whichever cache follows). The ring
(``course_utils.RingKVCache``) holds ``window`` slots from the first step to the last: a step writes one slot and
attends over the slots in place, as Mistral's reference code does; the growing cache (``course_utils.GrowingKVCache``)
keeps every token (one ``torch.cat`` per step) and slices its last ``window`` keys. Neither timed step needs a mask:
the ring's held slots are exactly the window, as the growing cache's last ``window`` keys are (Mistral's reference
passes no mask when decoding one token). The short run checks that: every step there builds the window mask from
the ring's ``key_positions``, which must hide nothing.
Correctness first: the two must give the same outputs at every step (checked on a short run, and at the last step
of the long one); the bytes held are checked against the formula ``2 * batch * kv_heads * tokens * head_dim *
element_size``. Timing: the two take turns, many rounds, one CPU thread (benchmarks/timing.py); reported, the
median of the rounds' speed ratios and its interquartile range.
"""

from __future__ import annotations

import statistics

import torch

from course_utils import GrowingKVCache, RingKVCache, attend, rope, sliding_window_mask_at

from .timing import cpu_threads, load_average, paired_speed_ratio, round_times


def _decode(cache, q, k, v, window, checkpoints=(), check_mask=False):
    """One token at a time through ``cache`` (q and k already rotated); returns each step's output and the bytes held
    at ``checkpoints``. ``check_mask``: also build the ring's window mask and require that it hides nothing."""
    steps = q.shape[2]
    outs, held = [], {}
    for t in range(steps):
        keys, values = cache.update(k[:, :, t : t + 1], v[:, :, t : t + 1])
        if isinstance(cache, RingKVCache):
            if check_mask:
                position = torch.tensor([t], device=q.device)
                if sliding_window_mask_at(position, cache.key_positions, window=window).any():
                    raise AssertionError(f"step {t}: the window mask disagrees with the ring, it hides a held key")
        else:  # the growing cache: its last `window` keys are exactly the window
            keys, values = keys[:, :, -window:], values[:, :, -window:]
        outs.append(attend(q[:, :, t : t + 1], keys, values)[0])
        if t + 1 in checkpoints:
            held[t + 1] = cache.nbytes
    return outs, held


def _rotated(q, k):
    """RoPE at the absolute positions 0 .. T - 1, for every step at once."""
    positions = torch.arange(q.shape[2], device=q.device)
    return rope(q, positions), rope(k, positions)


def bench_ring_cache(cfg, device, log):
    with torch.no_grad(), cpu_threads(cfg["long_context"].get("threads")):
        return _bench_ring_cache(cfg, device, log)


def _bench_ring_cache(cfg, device, log):
    c = cfg["long_context"]
    dtype = getattr(torch, c["dtype"])
    b, h, hd, window, steps = c["batch"], c["kv_heads"], c["head_dim"], c["window"], c["steps"]
    elem = torch.empty(0, dtype=dtype).element_size()

    def make(kind):
        return RingKVCache(b, h, window, hd, dtype=dtype, device=device) if kind == "ring" else GrowingKVCache()

    # correctness on a short run: every step agrees
    torch.manual_seed(6)
    short = 3 * window + 1
    q, k, v = (torch.randn(b, h, short, hd, device=device, dtype=dtype) for _ in range(3))
    q, k = _rotated(q, k)
    ring_out, _ = _decode(make("ring"), q, k, v, window, check_mask=True)
    growing_out, _ = _decode(make("growing"), q, k, v, window)
    error = max((r - g).abs().max().item() for r, g in zip(ring_out, growing_out, strict=True))
    if error > c["atol"]:
        raise AssertionError(f"ring-buffer and growing-cache decoding disagree by {error:.3g} (atol {c['atol']})")

    torch.manual_seed(7)
    q, k, v = (torch.randn(b, h, steps, hd, device=device, dtype=dtype) for _ in range(3))
    q, k = _rotated(q, k)
    checkpoints = sorted({max(1, steps * i // 8) for i in range(1, 9)})
    results = {}
    for kind in ("ring", "growing"):
        outs, held = _decode(make(kind), q, k, v, window, checkpoints)
        results[kind] = {"last_output": outs[-1], "bytes_held": held}
    last_error = (results["ring"]["last_output"] - results["growing"]["last_output"]).abs().max().item()
    if last_error > c["atol"]:
        raise AssertionError(f"after {steps} steps ring and growing caches disagree by {last_error:.3g}")
    for kind, tokens in (("ring", lambda n: min(n, window)), ("growing", lambda n: n)):
        for n, held in results[kind]["bytes_held"].items():
            expected = 2 * b * h * tokens(n) * hd * elem if kind == "growing" else 2 * b * h * window * hd * elem
            if held != expected:
                raise AssertionError(f"{kind} cache holds {held} bytes after {n} steps, the formula says {expected}")

    rounds = round_times(
        {kind: (lambda kind=kind: _decode(make(kind), q, k, v, window)) for kind in results},
        device,
        c["repeats"],
        c.get("warmup", 0),
    )
    times = {kind: statistics.median(t) for kind, t in rounds.items()}
    speed = paired_speed_ratio(rounds, "ring", baseline="growing")
    out = {
        "shape": dict(batch=b, kv_heads=h, head_dim=hd, window=window, steps=steps, dtype=c["dtype"]),
        "max_abs_error": max(error, last_error),
        "threads": c.get("threads") or torch.get_num_threads(),
        "load_average_1min": load_average(),  # other processes on the machine, for reading the spread
        "ring_vs_growing_tokens_per_s": speed,
        "results": {},
    }
    for kind in results:
        held = results[kind]["bytes_held"]
        out["results"][kind] = {
            "bytes_held": {str(n): held[n] for n in held},
            "seconds": times[kind],
            "tokens_per_s": steps * b / times[kind],
        }
        log(
            f"  {kind:8s} cache after {steps} steps {held[steps] / 2**20:9.3f} MiB {steps * b / times[kind]:9.1f} tok/s"
        )
    log(
        f"  ring / growing tokens/s: median {speed['median']:.3f} over {speed['rounds']} rounds "
        f"(IQR {speed['q1']:.3f}-{speed['q3']:.3f})"
    )
    return out


def long_context_ratios(report) -> dict:
    """Ratios of the ring-buffer section (empty when the report has none)."""
    if "long_context" not in report:
        return {}
    res = report["long_context"]["results"]
    steps = str(report["long_context"]["shape"]["steps"])
    speed = report["long_context"]["ring_vs_growing_tokens_per_s"]  # round by round: median and quartiles
    return {
        "growing_vs_ring_cache_bytes": res["growing"]["bytes_held"][steps] / res["ring"]["bytes_held"][steps],
        "ring_vs_growing_decode_time": res["ring"]["seconds"] / res["growing"]["seconds"],
        "ring_vs_growing_tokens_per_s": speed["median"],
        "ring_vs_growing_tokens_per_s_q1": speed["q1"],
        "ring_vs_growing_tokens_per_s_q3": speed["q3"],
    }
