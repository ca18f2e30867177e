"""Benchmark for notebook 16: a Gated DeltaNet layer against the course's KV-cached attention, and the chunked form
of the gated delta rule against the recurrence.

Decoding: after a prompt of ``context`` tokens, each layer decodes ``steps`` tokens one at a time. The attention layer
(``course_utils.GroupedQueryAttention`` with a ``PreallocatedKVCache``, notebooks 05-06) reads all its cached keys and
values at every step; the Gated DeltaNet layer (``course_utils.capstone.recall.GatedDeltaNetLayer``, the same width
and heads) updates and reads its fixed (d, d) state per head, whatever the context. Both include their projections.
Correctness first: fed the same tokens, the layer's step-by-step outputs equal its one-pass (chunked) outputs, and the
cached attention's equal attention recomputed over the whole sequence. Bytes held per sequence after the prompt are
measured (a growing cache's tensors, the state's) and checked against ``kv_cache_bytes`` and ``linear_state_bytes``.
Timing: the two take turns, many rounds, one CPU thread (benchmarks/timing.py); reported per context, the median of
the rounds' time ratios (attention / Gated DeltaNet: > 1 where the state is faster) and the crossover, the shortest
context where attention's decoding step is the slower.

Prefill: ``chunk_gated_delta_rule`` against ``recurrent_gated_delta_rule`` on one sequence of ``prefill_len`` tokens,
outputs and final states compared first.
"""

from __future__ import annotations

import statistics

import torch

from course_utils import (
    GroupedQueryAttention,
    GrowingKVCache,
    PreallocatedKVCache,
    chunk_gated_delta_rule,
    kv_cache_bytes,
    l2norm,
    linear_state_bytes,
    recurrent_gated_delta_rule,
)
from course_utils.capstone.recall import GatedDeltaNetLayer

from .timing import cpu_threads, load_average, paired_speed_ratio, round_times


def _layers(c, device, dtype):
    torch.manual_seed(11)
    d, heads, hd = c["heads"] * c["head_dim"], c["heads"], c["head_dim"]
    context = max(c["contexts"]) + c["steps"]
    attention = GroupedQueryAttention(d, d, context, 0.0, heads, heads).to(device, dtype).eval()
    gdn = GatedDeltaNetLayer(d, heads, hd, chunk_size=c["chunk_size"]).to(device, dtype).eval()
    return attention, gdn


def _decode_gdn(gdn, xs, state):
    outs = []
    for t in range(xs.shape[1]):
        out, state = gdn(xs[:, t : t + 1], state=state, return_state=True)
        outs.append(out)
    return torch.cat(outs, dim=1), state


def _decode_attention(attention, xs, cache):
    return torch.cat([attention(xs[:, t : t + 1], cache=cache) for t in range(xs.shape[1])], dim=1)


def _check(attention, gdn, c, device, dtype):
    """Step by step equals one pass, for both layers (a short sequence); returns the largest difference."""
    torch.manual_seed(12)
    d = c["heads"] * c["head_dim"]
    prompt, rest = 37, 9
    x = torch.randn(c["batch"], prompt + rest, d, device=device, dtype=dtype)
    whole = gdn(x)
    first, state = gdn(x[:, :prompt], return_state=True)
    stepped, _ = _decode_gdn(gdn, x[:, prompt:], state)
    cache = PreallocatedKVCache(c["batch"], c["heads"], prompt + rest, c["head_dim"], dtype=dtype, device=device)
    attention(x[:, :prompt], cache=cache)
    cached = _decode_attention(attention, x[:, prompt:], cache)
    errors = [(torch.cat([first, stepped], 1) - whole).abs().max().item()]
    errors.append((cached - attention(x)[:, prompt:]).abs().max().item())
    if max(errors) > c["atol"]:
        raise AssertionError(f"decoding step by step differs from one pass by {max(errors):.3g} (atol {c['atol']})")
    return max(errors)


def bench_linear_decode(cfg, device, log):
    with torch.no_grad(), cpu_threads(cfg["linear_attention"].get("threads")):
        return _bench_linear_decode(cfg, device, log)


def _bench_linear_decode(cfg, device, log):
    c = cfg["linear_attention"]
    dtype = getattr(torch, c["dtype"])
    b, heads, hd, steps = c["batch"], c["heads"], c["head_dim"], c["steps"]
    elem = torch.empty(0, dtype=dtype).element_size()
    attention, gdn = _layers(c, device, dtype)
    error = _check(attention, gdn, c, device, dtype)

    results = {}
    for context in c["contexts"]:
        torch.manual_seed(13)
        prompt = torch.randn(b, context, heads * hd, device=device, dtype=dtype)
        xs = torch.randn(b, steps, heads * hd, device=device, dtype=dtype)
        # the prompt's keys and values go straight into the caches: a step's time depends on how many there are,
        # not on their values, and attention over a long prompt at once would need a (context, context) score matrix
        keys = torch.randn(b, heads, context, hd, device=device, dtype=dtype)
        values = torch.randn_like(keys)
        cache = PreallocatedKVCache(b, heads, context + steps, hd, dtype=dtype, device=device)
        cache.update(keys, values)
        growing = GrowingKVCache()  # bytes held after the prompt, as tensors of exactly that size
        growing.update(keys, values)
        _, state = gdn(prompt, return_state=True)
        cache_bytes, state_bytes = growing.nbytes, state.numel() * state.element_size()
        if cache_bytes != kv_cache_bytes(1, heads, hd, context, b, elem):
            raise AssertionError(f"the cache holds {cache_bytes} bytes, kv_cache_bytes says otherwise")
        if state_bytes != linear_state_bytes(1, heads, hd, hd, b, state.element_size()):
            raise AssertionError(f"the state holds {state_bytes} bytes, linear_state_bytes says otherwise")

        def attention_steps(cache=cache, context=context, xs=xs):
            cache.seq_len = context  # back to the prompt: every round decodes the same steps
            _decode_attention(attention, xs, cache)

        rounds = round_times(
            {"gated_deltanet": lambda xs=xs, state=state: _decode_gdn(gdn, xs, state), "attention": attention_steps},
            device,
            c["repeats"],
            c.get("warmup", 1),
        )
        speed = paired_speed_ratio(rounds, "gated_deltanet", baseline="attention")
        results[str(context)] = {
            "attention_ms_per_token": 1e3 * statistics.median(rounds["attention"]) / steps,
            "gated_deltanet_ms_per_token": 1e3 * statistics.median(rounds["gated_deltanet"]) / steps,
            "attention_vs_gated_deltanet_time": speed,
            "attention_bytes": cache_bytes,
            "gated_deltanet_bytes": state_bytes,
        }
        log(
            f"  context {context:6d}: attention {results[str(context)]['attention_ms_per_token']:7.3f} ms/token, "
            f"Gated DeltaNet {results[str(context)]['gated_deltanet_ms_per_token']:7.3f} ms/token "
            f"(ratio {speed['median']:.2f}, IQR {speed['q1']:.2f}-{speed['q3']:.2f}); "
            f"bytes {cache_bytes / 2**10:9.1f} KiB vs {state_bytes / 2**10:6.1f} KiB"
        )
    slower = [int(n) for n, r in results.items() if r["attention_vs_gated_deltanet_time"]["median"] > 1]
    return {
        "shape": dict(batch=b, heads=heads, head_dim=hd, steps=steps, contexts=c["contexts"], dtype=c["dtype"]),
        "max_abs_error": error,
        "threads": c.get("threads") or torch.get_num_threads(),
        "load_average_1min": load_average(),
        "crossover_context": min(slower) if slower else None,
        "results": results,
    }


def bench_linear_prefill(cfg, device, log):
    with torch.no_grad(), cpu_threads(cfg["linear_attention"].get("threads")):
        c = cfg["linear_attention"]
        dtype = getattr(torch, c["dtype"])
        torch.manual_seed(14)
        b, t, h, hd = c["batch"], c["prefill_len"], c["heads"], c["head_dim"]
        q, k, v = (torch.randn(b, t, h, hd, device=device, dtype=dtype) for _ in range(3))
        k = l2norm(k)
        g = -torch.rand(b, t, h, device=device, dtype=dtype) * 0.1
        beta = torch.rand(b, t, h, device=device, dtype=dtype)
        runs = {
            "chunk": lambda: chunk_gated_delta_rule(q, k, v, g, beta, c["chunk_size"], output_final_state=True),
            "recurrent": lambda: recurrent_gated_delta_rule(q, k, v, g, beta, output_final_state=True),
        }
        (out_c, state_c), (out_r, state_r) = runs["chunk"](), runs["recurrent"]()
        error = max((out_c - out_r).abs().max().item(), (state_c - state_r).abs().max().item())
        if error > c["atol"]:
            raise AssertionError(f"chunked and recurrent prefill disagree by {error:.3g} (atol {c['atol']})")
        rounds = round_times(runs, device, c["prefill_repeats"], 1)
        speed = paired_speed_ratio(rounds, "chunk", baseline="recurrent")
        log(
            f"  prefill of {t} tokens: recurrent {statistics.median(rounds['recurrent']) * 1e3:8.1f} ms, chunked "
            f"{statistics.median(rounds['chunk']) * 1e3:8.1f} ms: {speed['median']:.1f}x"
        )
        return {
            "shape": dict(batch=b, tokens=t, heads=h, head_dim=hd, chunk_size=c["chunk_size"], dtype=c["dtype"]),
            "max_abs_error": error,
            "recurrent_seconds": statistics.median(rounds["recurrent"]),
            "chunk_seconds": statistics.median(rounds["chunk"]),
            "recurrent_vs_chunk_time": speed,
        }


def linear_attention_ratios(report) -> dict:
    """Ratios of the linear-attention section (empty when the report has none)."""
    if "linear_decode" not in report:
        return {}
    decode, prefill = report["linear_decode"], report["linear_prefill"]
    out = {}
    for context, r in decode["results"].items():
        out[f"attention_vs_gated_deltanet_decode_time_{context}"] = r["attention_vs_gated_deltanet_time"]["median"]
        out[f"attention_vs_gated_deltanet_bytes_{context}"] = r["attention_bytes"] / r["gated_deltanet_bytes"]
    out["gated_deltanet_decode_crossover_context"] = decode["crossover_context"]
    out["recurrent_vs_chunk_prefill_time"] = prefill["recurrent_vs_chunk_time"]["median"]
    return out
