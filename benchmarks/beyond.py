"""Benchmarks for notebooks 09 and 10: the online softmax against SDPA and naive attention (time and peak memory),
and MLA's latent cache against GQA's (bytes, measured against the formulas, and decoding time).

Correctness comes first, as in the rest of ``make bench``: the three attentions must agree, and cached MLA decoding
(explicit and absorbed) must equal its full pass, before anything is timed.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_utils import (
    GroupedQueryAttention,
    MultiHeadLatentAttention,
    TensorMemoryTracker,
    kv_cache_bytes,
    mla_cache_bytes,
    online_softmax_attention,
    synchronize,
)

from .timing import median_times

# DeepSeek-V3's published configuration (config.json): the cache per token it implies, in bfloat16
DEEPSEEK_V3 = dict(
    num_hidden_layers=61,
    num_attention_heads=128,
    kv_lora_rank=512,
    qk_nope_head_dim=128,
    qk_rope_head_dim=64,
    v_head_dim=128,
)


def naive_attention(q, k, v, causal):
    """softmax(q k^T / sqrt(d)) v with the whole (T, T) score matrix materialised."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, h, T, T)
    if causal:
        t = q.shape[-2]
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def peak_bytes(fn, device) -> int:
    """Peak bytes of tensors alive at once during ``fn()``: CUDA's allocator statistics on a GPU, else the tensors
    PyTorch's operations return (TensorMemoryTracker; a fused kernel's internal buffers are invisible to it)."""
    device = torch.device(device)
    with torch.no_grad():
        if device.type == "cuda":
            synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
            out = fn()
            synchronize(device)
            del out
            return torch.cuda.max_memory_allocated(device) - base
        with TensorMemoryTracker() as mem:
            out = fn()
            del out
        return mem.peak_bytes


def bench_online_softmax(cfg, device, log):
    o = cfg["online_softmax"]
    dtype = getattr(torch, o["dtype"])
    b, h, d, block, causal = o["batch"], o["heads"], o["head_dim"], o["block_size"], o.get("causal", True)
    fns_of = {
        "naive": lambda q, k, v: naive_attention(q, k, v, causal),
        "online_softmax": lambda q, k, v: online_softmax_attention(q, k, v, block_size=block, causal=causal)[0],
        "sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
    }
    out = {}
    for t in o["seq_lens"]:
        torch.manual_seed(6)
        q, k, v = (torch.randn(b, h, t, d, device=device, dtype=dtype) for _ in range(3))
        with torch.no_grad():
            ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
            errors = {name: (fn(q, k, v).double() - ref).abs().max().item() for name, fn in fns_of.items()}
        if max(errors.values()) > o["atol"]:
            raise AssertionError(f"online softmax benchmark, T={t}: attention results disagree {errors}")

        def call(fn, q=q, k=k, v=v):
            with torch.no_grad():
                fn(q, k, v)

        times = median_times(
            {name: (lambda fn=fn: call(fn)) for name, fn in fns_of.items()}, device, o["repeats"], o.get("warmup", 1)
        )
        peaks = {name: peak_bytes(lambda fn=fn, q=q, k=k, v=v: fn(q, k, v), device) for name, fn in fns_of.items()}
        out[str(t)] = {
            name: {"seconds": times[name], "peak_bytes": peaks[name], "max_abs_error": errors[name]} for name in fns_of
        }
        log(
            f"  T={t:5d} "
            + "  ".join(f"{name} {times[name] * 1e3:8.2f} ms {peaks[name] / 2**20:8.2f} MiB" for name in fns_of)
        )
    return {
        "shape": dict(batch=b, heads=h, head_dim=d, block_size=block, causal=causal, dtype=o["dtype"]),
        "peak_memory_method": "torch.cuda.max_memory_allocated"
        if torch.device(device).type == "cuda"
        else "course_utils.TensorMemoryTracker (tensors returned by PyTorch operations)",
        "results": out,
    }


def bench_mla_cache(cfg, device, log):
    """One MLA layer and one GQA layer of the same width and heads: decode, then compare cache bytes and time."""
    m = cfg["mla"]
    d, nh, n = m["d_model"], m["num_heads"], m["new_tokens"]
    context = m["prompt_len"] + n
    torch.manual_seed(7)
    mla = MultiHeadLatentAttention(d, d, context, 0.0, nh, m["kv_latent_dim"], m["rope_dim"]).to(device).eval()
    gqa = GroupedQueryAttention(d, d, context, 0.0, nh, m["num_kv_groups"], rope=True).to(device).eval()
    x = torch.randn(1, context, d, device=device)
    elem = x.element_size()

    def decode(layer, **kw):
        cache = layer.make_cache(1, preallocate=True)
        with torch.no_grad():
            outs = [layer(x[:, : m["prompt_len"]], cache=cache, **kw)]
            outs += [layer(x[:, t : t + 1], cache=cache, **kw) for t in range(m["prompt_len"], context)]
        return torch.cat(outs, dim=1), cache

    with torch.no_grad():
        full = mla(x)
    results = {}
    for name, layer, kw in (("mla_explicit", mla, {}), ("mla_absorbed", mla, {"absorb": True}), ("gqa", gqa, {})):
        out, cache = decode(layer, **kw)
        if name.startswith("mla"):
            err = (out - full).abs().max().item()
            if err > m["atol"]:
                raise AssertionError(f"{name}: cached decoding differs from the full pass by {err:.3g}")
            theory = mla_cache_bytes(1, m["kv_latent_dim"], m["rope_dim"], context, 1, elem)
        else:
            theory = kv_cache_bytes(1, m["num_kv_groups"], d // nh, context, 1, elem)
        if cache.nbytes != theory:
            raise AssertionError(f"{name}: the cache holds {cache.nbytes} bytes, the formula says {theory}")
        results[name] = {"cache_bytes_measured": cache.nbytes, "cache_bytes_theory": theory}
    times = median_times(
        {
            name: (lambda layer=layer, kw=kw: decode(layer, **kw))
            for name, layer, kw in (
                ("mla_explicit", mla, {}),
                ("mla_absorbed", mla, {"absorb": True}),
                ("gqa", gqa, {}),
            )
        },
        device,
        m["repeats"],
        1,
    )
    for name, seconds in times.items():
        results[name].update(seconds=seconds, tokens_per_s=n / seconds)
        log(f"  {name:13s} cache {results[name]['cache_bytes_measured']:9d} bytes {n / seconds:9.1f} tok/s")
    v3 = DEEPSEEK_V3
    v3_mla = mla_cache_bytes(v3["num_hidden_layers"], v3["kv_lora_rank"], v3["qk_rope_head_dim"], 1, 1, 2)
    v3_mha = (
        v3["num_hidden_layers"]
        * v3["num_attention_heads"]
        * (v3["qk_nope_head_dim"] + v3["qk_rope_head_dim"] + v3["v_head_dim"])
        * 2
    )
    return {
        "layer": dict(m, cache_tokens=context, bytes_per_element=elem, gqa_head_dim=d // nh),
        "results": results,
        "deepseek_v3_bf16_bytes_per_token": {"mla": v3_mla, "mha_same_heads": v3_mha},
    }


def beyond_ratios(report) -> dict:
    """Ratios of the online-softmax and MLA sections (empty when the report has neither)."""
    ratios = {}
    if "online_softmax" in report:
        res = report["online_softmax"]["results"]
        longest = res[max(res, key=int)]
        ratios.update(
            {
                "online_softmax_vs_sdpa_time": longest["online_softmax"]["seconds"] / longest["sdpa"]["seconds"],
                "naive_vs_sdpa_time": longest["naive"]["seconds"] / longest["sdpa"]["seconds"],
                "naive_vs_online_softmax_peak_bytes": longest["naive"]["peak_bytes"]
                / longest["online_softmax"]["peak_bytes"],
            }
        )
    if "mla_cache" in report:
        res = report["mla_cache"]["results"]
        layer = report["mla_cache"]["layer"]
        measured = res["gqa"]["cache_bytes_measured"] / res["mla_explicit"]["cache_bytes_measured"]
        theory = (2 * layer["num_kv_groups"] * layer["gqa_head_dim"]) / (layer["kv_latent_dim"] + layer["rope_dim"])
        v3 = report["mla_cache"]["deepseek_v3_bf16_bytes_per_token"]
        ratios.update(
            {
                "gqa_vs_mla_cache_bytes": measured,
                "gqa_vs_mla_cache_bytes_error": abs(measured - theory),
                "mla_absorbed_vs_explicit_decode_time": res["mla_absorbed"]["seconds"] / res["mla_explicit"]["seconds"],
                "deepseek_v3_mha_vs_mla_cache_bytes": v3["mha_same_heads"] / v3["mla"],
            }
        )
    return ratios
