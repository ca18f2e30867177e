"""Benchmark for notebook 12: a sliding-window layer decoding with a ring-buffer cache against a growing cache.

Both decode the same ``steps`` tokens one at a time, each new query attending to the last ``window`` keys (RoPE
applied before caching). The ring (``course_utils.RingKVCache``) holds ``window`` slots from the first step to the
last: a step writes one slot and attends over the slots in place, as Mistral's reference code does; the growing
cache (``course_utils.GrowingKVCache``) keeps every token (one ``torch.cat`` per step) and slices its last ``window``
keys. The ring's steps also build the window mask from positions; the growing cache's need none.
Correctness first: the two must give the same outputs at every step (checked on a short run, and at the last step
of the long one); the bytes held are checked against the formula ``2 * batch * kv_heads * tokens * head_dim *
element_size``.
"""

from __future__ import annotations

import torch

from course_utils import GrowingKVCache, RingKVCache, attend, rope, sliding_window_mask_at

from .timing import median_times


def _decode(cache, q, k, v, window, checkpoints=()):
    """One token at a time through ``cache``; returns the last step's output and the bytes held at checkpoints."""
    steps = q.shape[2]
    outs, held = [], {}
    for t in range(steps):
        position = torch.arange(t, t + 1, device=q.device)  # no host-to-device copy per step
        q_t, k_t = rope(q[:, :, t : t + 1], position), rope(k[:, :, t : t + 1], position)
        keys, values = cache.update(k_t, v[:, :, t : t + 1])
        if isinstance(cache, RingKVCache):
            hide = sliding_window_mask_at(position, cache.key_positions, window=window)
        else:  # the growing cache: its last `window` keys are exactly the window
            keys, values = keys[:, :, -window:], values[:, :, -window:]
            hide = None
        outs.append(attend(q_t, keys, values, hide)[0])
        if t + 1 in checkpoints:
            held[t + 1] = cache.nbytes
    return outs, held


def bench_ring_cache(cfg, device, log):
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
    ring_out, _ = _decode(make("ring"), q, k, v, window)
    growing_out, _ = _decode(make("growing"), q, k, v, window)
    error = max((r - g).abs().max().item() for r, g in zip(ring_out, growing_out, strict=True))
    if error > c["atol"]:
        raise AssertionError(f"ring-buffer and growing-cache decoding disagree by {error:.3g} (atol {c['atol']})")

    torch.manual_seed(7)
    q, k, v = (torch.randn(b, h, steps, hd, device=device, dtype=dtype) for _ in range(3))
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

    times = median_times(
        {kind: (lambda kind=kind: _decode(make(kind), q, k, v, window)) for kind in results},
        device,
        c["repeats"],
        c.get("warmup", 0),
    )
    out = {
        "shape": dict(batch=b, kv_heads=h, head_dim=hd, window=window, steps=steps, dtype=c["dtype"]),
        "max_abs_error": max(error, last_error),
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
    return out


def long_context_ratios(report) -> dict:
    """Ratios of the ring-buffer section (empty when the report has none)."""
    if "long_context" not in report:
        return {}
    res = report["long_context"]["results"]
    steps = str(report["long_context"]["shape"]["steps"])
    return {
        "growing_vs_ring_cache_bytes": res["growing"]["bytes_held"][steps] / res["ring"]["bytes_held"][steps],
        "ring_vs_growing_decode_time": res["ring"]["seconds"] / res["growing"]["seconds"],
    }
