"""Benchmarks for notebook 13 (serving): paged against contiguous decoding, and split-K against one pass.

* Paged vs contiguous: a batch of sequences of different lengths decodes ``steps`` tokens each, once through a
  ``PagedKVCache`` (``paged_attention``) and once through one preallocated (B, kv_heads, max_len, head_dim) cache
  with a length mask. Both must give the same outputs before anything is timed; reported: tokens/s of each, and the
  bytes each leaves unused (a preallocated cache reserves max_len per sequence, a paged one less than one block).
* Split-K vs one pass: one query per head against 16k-64k keys; ``online_softmax_attention`` walks the key blocks
  one after another (one running max, sum and output), ``split_k_attention`` computes all chunks as one batched
  call and merges them. Both must equal SDPA first.
"""

from __future__ import annotations

import statistics

import torch

from course_utils import PagedKVCache, attend, online_softmax_attention, paged_attention, split_k_attention

from .timing import cpu_threads, load_average, median_times, paired_speed_ratio, round_times


def _contiguous_step(keys, values, lens, new_k, new_v, query):
    """Write each sequence's new key at its own length, then attend over the padded cache with a length mask."""
    rows = torch.arange(keys.shape[0], device=keys.device)
    keys[rows, :, lens] = new_k  # (B, kv_heads, hd) into (B, kv_heads, max_len, hd) at position lens[b]
    values[rows, :, lens] = new_v
    lens += 1
    t = int(lens.max())
    hide = (torch.arange(t, device=keys.device)[None, :] >= lens[:, None])[:, None, None, :]
    n_rep = query.shape[1] // keys.shape[1]
    k = keys[:, :, :t].repeat_interleave(n_rep, dim=1)
    v = values[:, :, :t].repeat_interleave(n_rep, dim=1)
    return attend(query[:, :, None], k, v, mask=hide)[0][:, :, 0]


def bench_paged_decode(cfg, device, log):
    p = cfg["serving"]
    b, hkv, nh, hd, bs, steps = p["batch"], p["kv_heads"], p["heads"], p["head_dim"], p["block_size"], p["steps"]
    dtype = getattr(torch, p["dtype"])
    torch.manual_seed(8)
    prompt_lens = torch.randint(p["min_prompt"], p["max_prompt"] + 1, (b,)).tolist()
    max_len = p["max_len"]  # what a preallocated cache must reserve for every sequence
    prompts = [
        (torch.randn(hkv, n, hd, device=device, dtype=dtype), torch.randn(hkv, n, hd, device=device, dtype=dtype))
        for n in prompt_lens
    ]
    new = [
        (
            torch.randn(b, hkv, hd, device=device, dtype=dtype),
            torch.randn(b, hkv, hd, device=device, dtype=dtype),
            torch.randn(b, nh, hd, device=device, dtype=dtype),
        )
        for _ in range(steps)
    ]
    num_blocks = sum(-(-(n + steps) // bs) for n in prompt_lens)

    def run_paged():
        cache = PagedKVCache(num_blocks, bs, hkv, hd, dtype=dtype, device=device)
        for i, (k, v) in enumerate(prompts):
            cache.add_sequence(i)
            cache.append(i, k, v)
        outs = []
        seq_ids = list(range(b))
        for new_k, new_v, query in new:
            cache.append_tokens(seq_ids, new_k, new_v)  # one scatter through the step's slot mapping
            outs.append(paged_attention(query, cache, seq_ids))  # one gather through the batch's
        return outs, cache

    def run_contiguous():
        keys = torch.zeros(b, hkv, max_len, hd, device=device, dtype=dtype)
        values = torch.zeros_like(keys)
        for i, (k, v) in enumerate(prompts):
            keys[i, :, : k.shape[1]], values[i, :, : v.shape[1]] = k, v
        lens = torch.tensor(prompt_lens, device=device)
        return [_contiguous_step(keys, values, lens, *step) for step in new], keys

    with torch.no_grad(), cpu_threads(p.get("threads")):
        paged_outs, cache = run_paged()
        contiguous_outs, keys = run_contiguous()
        err = max((a - c).abs().max().item() for a, c in zip(paged_outs, contiguous_outs, strict=True))
        if err > p["atol"]:
            raise AssertionError(f"paged decoding differs from the contiguous cache by {err:.3g}")
        contenders = {"paged": run_paged, "contiguous": run_contiguous}
        rounds = round_times(contenders, device, p["repeats"], p.get("warmup", 1))
    times = {name: statistics.median(t) for name, t in rounds.items()}
    speed = paired_speed_ratio(rounds, "paged", baseline="contiguous")
    tokens = b * steps
    stored = sum(prompt_lens) + tokens
    slot_bytes = cache.bytes_per_slot
    contiguous_reserved = b * max_len * slot_bytes
    paged_reserved = cache.num_used_blocks * bs * slot_bytes
    result = {
        "shape": dict(
            batch=b,
            kv_heads=hkv,
            heads=nh,
            head_dim=hd,
            block_size=bs,
            steps=steps,
            max_len=max_len,
            prompt_lens=prompt_lens,
            dtype=p["dtype"],
        ),
        "max_abs_error": err,
        "threads": p.get("threads") or torch.get_num_threads(),
        "load_average_1min": load_average(),  # other processes on the machine, for reading the spread
        "paged_vs_contiguous_tokens_per_s": speed,
        "paged": {
            "seconds": times["paged"],
            "tokens_per_s": tokens / times["paged"],
            "bytes_reserved": paged_reserved,
            "bytes_wasted": cache.wasted_slots * slot_bytes,
        },
        "contiguous": {
            "seconds": times["contiguous"],
            "tokens_per_s": tokens / times["contiguous"],
            "bytes_reserved": contiguous_reserved,
            "bytes_wasted": contiguous_reserved - stored * slot_bytes,
        },
    }
    if result["paged"]["bytes_wasted"] != paged_reserved - stored * slot_bytes:
        raise AssertionError("paged cache: wasted_slots disagrees with the blocks it holds")
    for name in ("paged", "contiguous"):
        r = result[name]
        log(
            f"  {name:10s} {r['tokens_per_s']:9.1f} tok/s  reserved {r['bytes_reserved'] / 2**20:8.3f} MiB, "
            f"unused {r['bytes_wasted'] / 2**20:8.3f} MiB"
        )
    log(
        f"  paged / contiguous tokens/s: median {speed['median']:.3f} over {speed['rounds']} rounds "
        f"(IQR {speed['q1']:.3f}-{speed['q3']:.3f})"
    )
    return result


def bench_split_k(cfg, device, log):
    s = cfg["serving"]
    dtype = getattr(torch, s["dtype"])
    h, d, chunk = s["split_heads"], s["split_head_dim"], s["split_chunk"]
    out = {}
    for t in s["split_keys"]:
        torch.manual_seed(9)
        q = torch.randn(1, h, 1, d, device=device, dtype=dtype)
        k, v = (torch.randn(1, h, t, d, device=device, dtype=dtype) for _ in range(2))
        splits = -(-t // chunk)
        fns = {
            "one_pass": lambda q=q, k=k, v=v: online_softmax_attention(q, k, v, block_size=chunk)[0],
            "split_k": lambda q=q, k=k, v=v, splits=splits: split_k_attention(q, k, v, num_splits=splits)[0],
        }
        with torch.no_grad():
            ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double())
            errors = {name: (fn().double() - ref).abs().max().item() for name, fn in fns.items()}
            if max(errors.values()) > s["atol"]:
                raise AssertionError(f"split-K benchmark, {t} keys: results disagree with SDPA {errors}")
            times = median_times(fns, device, s["repeats"], 1)
        out[str(t)] = {name: {"seconds": times[name], "max_abs_error": errors[name]} for name in fns}
        out[str(t)]["num_splits"] = splits
        log(
            f"  {t:6d} keys: one pass {times['one_pass'] * 1e3:8.2f} ms, split-K ({splits} chunks of {chunk}) "
            f"{times['split_k'] * 1e3:8.2f} ms"
        )
    return {"shape": dict(heads=h, head_dim=d, chunk=chunk, dtype=s["dtype"]), "results": out}


def serving_ratios(report) -> dict:
    """Ratios of the serving sections (empty when the report has none)."""
    if "paged_decode" not in report:
        return {}
    paged, contiguous = report["paged_decode"]["paged"], report["paged_decode"]["contiguous"]
    res = report["split_k"]["results"]
    speed = report["paged_decode"]["paged_vs_contiguous_tokens_per_s"]  # round by round: median and quartiles
    ratios = {
        "paged_vs_contiguous_tokens_per_s": speed["median"],
        "paged_vs_contiguous_tokens_per_s_q1": speed["q1"],
        "paged_vs_contiguous_tokens_per_s_q3": speed["q3"],
        "contiguous_vs_paged_bytes_wasted": contiguous["bytes_wasted"] / max(1, paged["bytes_wasted"]),
    }
    for t, entry in res.items():
        ratios[f"split_k_vs_one_pass_time_{t}"] = entry["split_k"]["seconds"] / entry["one_pass"]["seconds"]
    return ratios
