"""Benchmarks for notebook 17: a sparse decoding step against a dense one as the context grows, and a KIVI-quantised
cache against a float one.

* Sparse vs dense decode: one new query per head against ``L`` cached keys. Dense: SDPA over all ``L`` keys. Sparse
  (``course_utils.dsa_attention``): the lightning indexer scores all ``L`` index keys (few heads, one small key per
  token), keeps the ``top_k`` best, gathers those keys and values and attends to them: O(L) for the indexer's small
  dot products, O(top_k) for the attention. Before timing, the sparse step must equal SDPA masked to its own
  selection, and SDPA itself when ``top_k >= L``. Reported per ``L``: each one's time and the ratio
  sparse / dense (< 1: sparse faster); the crossover is where it falls under 1.
* Quantised vs float cache: ``course_utils.QuantizedKVCache`` (keys per channel, values per token, a full-precision
  window) against a ``PreallocatedKVCache``, both decoding ``steps`` tokens after a prefill; each step appends one
  token and attends over the whole cache (the quantised one dequantises it first, as a cache without a fused kernel
  must). Before timing, every step must equal attention over ``kivi_quantize`` of the tokens so far. Reported per
  bit width: bytes held after the last step (float / quantised) and the time ratio (quantised / float).
"""

from __future__ import annotations

import statistics

import torch
import torch.nn.functional as F

from course_utils import (
    PreallocatedKVCache,
    QuantizedKVCache,
    attend,
    dsa_attention,
    kivi_quantize,
    selection_mask,
)

from .timing import cpu_threads, load_average, paired_speed_ratio, round_times


def _dsa_inputs(c, length, device, dtype, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=dtype).to(device)

    q = randn(1, c["heads"], 1, c["head_dim"])
    k, v = randn(1, c["kv_heads"], length, c["head_dim"]), randn(1, c["kv_heads"], length, c["head_dim"])
    q_idx, k_idx = randn(1, 1, c["index_heads"], c["index_dim"]), randn(1, length, c["index_dim"])
    w = randn(1, 1, c["index_heads"])
    return q, k, v, q_idx, k_idx, w


def _check_sparse(c, device, dtype):
    """The sparse step equals SDPA on its own selection, and plain SDPA when top_k covers every key."""
    length = 3 * c["check_top_k"]
    q, k, v, q_idx, k_idx, w = _dsa_inputs(c, length, device, dtype, seed=11)
    worst = 0.0
    for top_k in (c["check_top_k"], length):
        out, indices = dsa_attention(q, k, v, q_idx, k_idx, w, top_k)
        allow = ~selection_mask(indices, length)[:, None]  # (1, 1, 1, L), the same for every head
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=allow, enable_gqa=True)
        if top_k >= length:
            expected = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        worst = max(worst, (out - expected).abs().max().item())
    if worst > c["atol"]:
        raise AssertionError(f"sparse and dense decoding disagree by {worst:.3g} (atol {c['atol']})")
    return worst


def _decode_steps(inputs, top_k):
    """The two decoding steps over the same cache: SDPA over every key, and DSA over its selection."""
    q, k, v, q_idx, k_idx, w = inputs
    return {
        "dense": lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
        "sparse": lambda: dsa_attention(q, k, v, q_idx, k_idx, w, top_k),
    }


def bench_sparse_decode(cfg, device, log):
    with torch.no_grad(), cpu_threads(cfg["sparse"].get("threads")):
        return _bench_sparse_decode(cfg, device, log)


def _bench_sparse_decode(cfg, device, log):
    c = cfg["sparse"]
    dtype = getattr(torch, c["dtype"])
    error = _check_sparse(c, device, dtype)
    results = {}
    for length in c["lengths"]:
        inputs = _dsa_inputs(c, length, device, dtype, seed=12)
        rounds = round_times(_decode_steps(inputs, c["top_k"]), device, c["repeats"], c.get("warmup", 1))
        entry = {name: {"seconds": statistics.median(t)} for name, t in rounds.items()}
        entry["sparse_vs_dense_time"] = paired_speed_ratio(rounds, "dense", "sparse")["median"]  # sparse s / dense s
        results[str(length)] = entry
        log(
            f"  L={length:6d}: dense {entry['dense']['seconds'] * 1e3:8.3f} ms, sparse (top {c['top_k']}) "
            f"{entry['sparse']['seconds'] * 1e3:8.3f} ms, sparse / dense {entry['sparse_vs_dense_time']:.2f}"
        )
    keys = [k for k in ("heads", "kv_heads", "head_dim", "index_heads", "index_dim", "top_k", "lengths", "dtype")]
    return {
        "shape": {key: c[key] for key in keys},
        "max_abs_error": error,
        "threads": c.get("threads") or torch.get_num_threads(),
        "load_average_1min": load_average(),
        "results": results,
    }


def _decode(cache, prompt_k, prompt_v, new_k, new_v, queries):
    """A prefill, then one token per step: append, attend over the whole cache. Returns each step's output."""
    cache.update(prompt_k, prompt_v)
    outs = []
    for t in range(queries.shape[2]):
        keys, values = cache.update(new_k[:, :, t : t + 1], new_v[:, :, t : t + 1])
        outs.append(attend(queries[:, :, t : t + 1], keys, values)[0])
    return outs


def bench_quantized_cache(cfg, device, log):
    with torch.no_grad(), cpu_threads(cfg["kv_quant"].get("threads")):
        return _bench_quantized_cache(cfg, device, log)


def _bench_quantized_cache(cfg, device, log):
    c = cfg["kv_quant"]
    dtype = getattr(torch, c["dtype"])
    b, h, hd, p, steps = c["batch"], c["kv_heads"], c["head_dim"], c["prompt_len"], c["steps"]
    g = torch.Generator(device="cpu").manual_seed(13)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=dtype).to(device)

    prompt_k, prompt_v = randn(b, h, p, hd), randn(b, h, p, hd)
    new_k, new_v, queries = randn(b, h, steps, hd), randn(b, h, steps, hd), randn(b, h, steps, hd)
    all_k, all_v = torch.cat([prompt_k, new_k], dim=2), torch.cat([prompt_v, new_v], dim=2)

    def make(bits):
        if bits is None:
            return PreallocatedKVCache(b, h, p + steps, hd, dtype=dtype, device=device)
        return QuantizedKVCache(b, h, hd, bits, c["group_size"], c["residual"], dtype=dtype, device=device)

    # correctness first: every step of the quantised cache is attention over kivi_quantize of the tokens so far
    worst = 0.0
    for bits in c["bits"]:
        outs = _decode(make(bits), prompt_k, prompt_v, new_k, new_v, queries)
        for t in range(0, steps, max(1, steps // 4)):
            k_hat, v_hat = kivi_quantize(
                all_k[:, :, : p + t + 1], all_v[:, :, : p + t + 1], bits, c["group_size"], c["residual"]
            )
            expected = attend(queries[:, :, t : t + 1], k_hat, v_hat)[0]
            worst = max(worst, (outs[t] - expected).abs().max().item())
    if worst > c["atol"]:
        raise AssertionError(f"the quantised cache disagrees with kivi_quantize by {worst:.3g} (atol {c['atol']})")

    caches = {"float": None, **{f"{bits}bit": bits for bits in c["bits"]}}
    held = {}
    for name, bits in caches.items():
        cache = make(bits)
        _decode(cache, prompt_k, prompt_v, new_k, new_v, queries)
        held[name] = cache.nbytes
    rounds = round_times(
        {
            name: (lambda bits=bits: _decode(make(bits), prompt_k, prompt_v, new_k, new_v, queries))
            for name, bits in caches.items()
        },
        device,
        c["repeats"],
        c.get("warmup", 1),
    )
    results = {}
    for name in caches:
        results[name] = {
            "bytes_held": held[name],
            "seconds": statistics.median(rounds[name]),
            "vs_float_time": paired_speed_ratio(rounds, "float", name)["median"],  # this cache's s / the float's s
        }
        log(
            f"  {name:6s} cache {held[name] / 2**10:9.1f} KiB ({held['float'] / held[name]:.2f}x less), decode "
            f"{results[name]['seconds'] * 1e3:8.1f} ms ({results[name]['vs_float_time']:.2f}x the float cache's time)"
        )
    keys = ("batch", "kv_heads", "head_dim", "prompt_len", "steps", "group_size", "residual", "bits", "dtype")
    return {
        "shape": {key: c[key] for key in keys},
        "max_abs_error": worst,
        "threads": c.get("threads") or torch.get_num_threads(),
        "load_average_1min": load_average(),
        "results": results,
    }


def sparse_ratios(report) -> dict:
    """Ratios of notebook 17's sections (empty when the report has none)."""
    ratios = {}
    if "sparse_decode" in report:
        for length, entry in report["sparse_decode"]["results"].items():
            ratios[f"sparse_vs_dense_decode_time_{length}"] = entry["sparse_vs_dense_time"]
    if "kv_quant" in report:
        res = report["kv_quant"]["results"]
        for name, entry in res.items():
            if name != "float":
                ratios[f"float_vs_{name}_cache_bytes"] = res["float"]["bytes_held"] / entry["bytes_held"]
                ratios[f"{name}_vs_float_decode_time"] = entry["vs_float_time"]
    return ratios
