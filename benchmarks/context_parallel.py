"""Benchmarks for notebook 15 (attention across devices): ring, all-gather and Ulysses on local processes.

* Bytes per rank: each method runs on ``W`` processes (gloo, loopback only) for each sequence length; its output
  must equal SDPA over the whole sequence and the bytes each rank hands to ``torch.distributed`` must equal
  ``comm_bytes_per_rank``'s formula, or the benchmark stops. Reported: the bytes, and ring / Ulysses ratios.
* The gloo ring's time per step vs world size: one ring run on ``W`` processes (one thread each, all starting
  after a barrier; a run lasts as long as its slowest rank), divided by its ``W`` steps, as a ratio to SDPA over the
  whole sequence in one process on one thread, measured in the same run. On this CPU the processes share the
  cores, so the ratio shows the ring's overheads (messages, merges, masks), not a speed-up.
"""

from __future__ import annotations

import statistics

import torch
import torch.nn.functional as F

from course_utils import comm_bytes_per_rank, example_qkv
from course_utils.reference.ring_attention import run_local

from .timing import median_time

METHODS = ("ring", "allgather", "ulysses")
HEAD_DIM = 8  # example_qkv's


def bench_context_parallel_bytes(cfg, log):
    p = cfg["context_parallel"]
    heads = p["heads"]
    out = {}
    for world_size in p["world_sizes"]:
        for seq_len in p["seq_lens"]:
            q, k, v = example_qkv(seq_len, heads=heads)
            want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            entry = {}
            for method in METHODS:
                got, _, sent, _, _ = run_local(
                    world_size, seq_len, method, causal=True, layout="contiguous", heads=heads, timeout_s=p["timeout_s"]
                )
                error = (got - want).abs().max().item()
                if error > p["atol"]:
                    raise AssertionError(
                        f"{method}, {world_size} ranks, {seq_len} tokens: output disagrees with SDPA by {error:.1e}"
                    )
                formula = comm_bytes_per_rank(
                    method, seq_len, world_size, heads, heads, HEAD_DIM, bytes_per_element=q.element_size()
                )
                if any(s != formula for s in sent):
                    raise AssertionError(
                        f"{method}, {world_size} ranks, {seq_len} tokens: the ranks sent {sent} "
                        f"bytes, the formula says {formula}"
                    )
                entry[method] = {"bytes_per_rank": sent[0], "formula": formula, "max_abs_error": error}
            out[f"{world_size}x{seq_len}"] = entry
            log(
                f"  {world_size} ranks, {seq_len:5d} tokens: "
                + ", ".join(f"{m} {entry[m]['bytes_per_rank'] / 2**10:8.1f} KiB" for m in METHODS)
                + " per rank (= formula)"
            )
    return {"shape": dict(heads=heads, kv_heads=heads, head_dim=HEAD_DIM, dtype="float32"), "results": out}


def bench_ring_step_time(cfg, log):
    p = cfg["context_parallel"]
    seq_len, heads = p["time_seq_len"], p["heads"]
    q, k, v = example_qkv(seq_len, heads=heads)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each rank runs
    try:
        sdpa = median_time(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), "cpu", p["repeats"])
    finally:
        torch.set_num_threads(threads)
    out = {"sdpa_seconds": sdpa}
    for world_size in p["time_world_sizes"]:
        _, _, _, seconds, _ = run_local(
            world_size,
            seq_len,
            "ring",
            causal=True,
            layout="zigzag",
            heads=heads,
            repeats=p["repeats"],
            timeout_s=p["timeout_s"],
        )
        run = statistics.median(max(rank[i] for rank in seconds) for i in range(p["repeats"]))  # slowest rank
        out[str(world_size)] = {"ring_seconds": run, "step_seconds": run / world_size}
        log(
            f"  {world_size} ranks, {seq_len} tokens: ring {run * 1e3:7.2f} ms, {run / world_size * 1e3:6.2f} ms "
            f"per step; SDPA in one process {sdpa * 1e3:6.2f} ms"
        )
    return {"seq_len": seq_len, "results": out}


def context_parallel_ratios(report) -> dict:
    """Ratios of the context-parallel sections (empty when the report has none)."""
    if "cp_bytes" not in report:
        return {}
    ratios = {}
    for key, entry in report["cp_bytes"]["results"].items():
        ratios[f"cp_ring_vs_ulysses_bytes_{key}"] = entry["ring"]["bytes_per_rank"] / entry["ulysses"]["bytes_per_rank"]
    steps = report["cp_ring_time"]["results"]
    for world_size, entry in steps.items():
        if world_size != "sdpa_seconds":
            ratios[f"cp_ring_step_vs_sdpa_time_{world_size}"] = entry["step_seconds"] / steps["sdpa_seconds"]
    return ratios
