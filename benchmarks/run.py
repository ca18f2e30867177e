"""``make bench``: time the attention variants and KV-cache decoding, write benchmarks/results/<device>.json.

    python -m benchmarks.run            # full run (a few minutes on a 2-core CPU)
    BENCH_QUICK=1 python -m benchmarks.run   # or --quick: smaller sizes, fewer repeats, <device>-quick.json

Every time is a median of ``repeats`` runs after warm-up, with the device synchronised (course_utils.synchronize);
the competitors take turns within each repeat, in the reverse order every other repeat, and a decoding time is the
sum over steps of each step's median. The two decoding races of notebooks 12 and 13 (ring vs growing cache, paged
vs contiguous) run on one CPU thread and report the median of the rounds' speed ratios with its interquartile range.
Correctness is checked before anything is timed: the variants must agree with the reference, the three decoders
must produce the same greedy tokens, and the measured cache bytes must equal course_utils.kv_cache_bytes.
The online softmax (notebook 09) is timed and its peak memory measured against SDPA and naive attention, and MLA's
latent cache (notebook 10) against GQA's (benchmarks/beyond.py); both sections are skipped for a config without them.
A sliding-window layer decodes 4096 steps with a ring-buffer cache against a growing one (notebook 12,
benchmarks/long_context.py): bytes held and time. Ring attention, all-gather and Ulysses run on local gloo
processes (notebook 15, benchmarks/context_parallel.py): bytes per rank checked against the formula, and the ring's
time per step against SDPA in one process.
A Gated DeltaNet layer decodes against the course's KV-cached attention as the context grows, and the chunked gated
delta rule prefills against the recurrence (notebook 16, benchmarks/linear_attention.py): time and bytes per sequence.
Notebook 17 (benchmarks/sparse.py): a DeepSeek-Sparse-Attention decoding step against a dense one as the context
grows (the crossover), and a KIVI-quantised cache against a float one (bytes held, decode time).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
from pathlib import Path

import torch

from course_utils import get_device

from .beyond import bench_mla_cache, bench_online_softmax, beyond_ratios
from .context_parallel import bench_context_parallel_bytes, bench_ring_step_time, context_parallel_ratios
from .decoder import CACHE_MODES, build_model, cache_bytes, generate
from .flash_triton import CONFIGS as FLASH_TRITON_CONFIGS
from .flash_triton import bench_flash_triton, flash_triton_ratios
from .linear_attention import bench_linear_decode, bench_linear_prefill, linear_attention_ratios
from .long_context import bench_ring_cache, long_context_ratios
from .serving import bench_paged_decode, bench_split_k, serving_ratios
from .sparse import bench_quantized_cache, bench_sparse_decode, sparse_ratios
from .timing import median_time, median_times
from .variants import VARIANTS, build_variants, check_variants_agree

RESULTS_DIR = Path(__file__).resolve().parent / "results"

# sizes: the CPU ones suit 2 cores; on CUDA the variants run in bfloat16 and large enough for the flash kernel.
# The decoder stays float32 everywhere: the no-cache and cached decoders round differently, and in bfloat16
# that alone can flip a greedy argmax; float32 keeps the token-identity check meaningful.
# the ring of gloo processes runs on the CPU whatever the device benchmarked: one size for both
CONTEXT_PARALLEL = dict(
    heads=4,
    world_sizes=[2, 4],
    seq_lens=[256, 1024],
    time_seq_len=2048,
    time_world_sizes=[1, 2, 4],
    repeats=3,
    atol=1e-5,
    timeout_s=60,
)
CONTEXT_PARALLEL_QUICK = {**CONTEXT_PARALLEL, "seq_lens": [256], "time_seq_len": 512, "repeats": 1}

# notebook 17: a sparse decoding step (DSA) against a dense one as the context grows, and a KIVI cache against a float
# one; the CPU sizes run one thread, the GPU ones in bfloat16 with 8x the context
SPARSE = dict(
    heads=16,
    kv_heads=2,
    head_dim=128,
    index_heads=8,
    index_dim=64,
    top_k=512,
    lengths=[1024, 4096, 16384, 65536],
    dtype="float32",
    atol=1e-4,
    check_top_k=64,
    repeats=7,
    warmup=1,
    threads=1,
)
KV_QUANT = dict(
    batch=1,
    kv_heads=2,
    head_dim=128,
    prompt_len=4096,
    steps=32,
    group_size=32,
    residual=128,
    bits=[2, 4, 8],
    dtype="float32",
    atol=1e-4,
    repeats=3,
    warmup=1,
    threads=1,
)
SPARSE_QUICK = {**SPARSE, "lengths": [1024, 16384], "repeats": 3}
KV_QUANT_QUICK = {**KV_QUANT, "prompt_len": 1024, "steps": 8, "repeats": 1}
SPARSE_CUDA = {
    **SPARSE,
    "lengths": [8192, 32768, 131072, 524288],
    "top_k": 2048,
    "dtype": "bfloat16",
    "atol": 5e-2,
    "threads": None,
}
KV_QUANT_CUDA = {**KV_QUANT, "batch": 8, "kv_heads": 8, "prompt_len": 16384, "dtype": "bfloat16", "atol": 5e-2}

CONFIGS = {
    "cpu": dict(
        variants=dict(batch=4, seq_len=512, d_in=768, d_out=768, num_heads=12, dtype="float32", atol=2e-4),
        variant_repeats=5,
        variant_warmup=1,
        decoder=dict(vocab_size=512, d_model=128, num_layers=4, num_heads=4, prompt_len=16, batch=1),
        decode_lengths=[128, 512, 1024],
        decode_repeats=3,
        kv_groups=[4, 2, 1],
        kv_new_tokens=512,
        online_softmax=dict(
            batch=1,
            heads=8,
            head_dim=64,
            seq_lens=[512, 1024, 2048],
            block_size=128,
            dtype="float32",
            atol=1e-4,
            repeats=3,
        ),
        mla=dict(
            d_model=256,
            num_heads=8,
            kv_latent_dim=64,
            rope_dim=16,
            num_kv_groups=2,
            prompt_len=16,
            new_tokens=256,
            atol=1e-4,
            repeats=3,
        ),
        # the two decoding races: one thread, many alternating rounds (benchmarks/timing.py, cpu_threads)
        long_context=dict(
            batch=1,
            kv_heads=2,
            head_dim=64,
            window=512,
            steps=4096,
            dtype="float32",
            atol=1e-5,
            repeats=9,
            warmup=1,
            threads=1,
        ),
        serving=dict(
            batch=8,
            kv_heads=2,
            heads=8,
            head_dim=64,
            block_size=16,
            min_prompt=16,
            max_prompt=512,
            max_len=1024,
            steps=32,
            dtype="float32",
            atol=1e-4,
            repeats=31,
            warmup=2,
            threads=1,
            split_keys=[16384, 32768, 65536],
            split_heads=8,
            split_head_dim=64,
            split_chunk=1024,
        ),
        # notebook 16: one thread, the two layers taking turns over many rounds at each context (benchmarks/timing.py)
        linear_attention=dict(
            batch=1,
            heads=4,
            head_dim=64,
            steps=32,
            contexts=[64, 256, 1024, 4096],
            chunk_size=64,
            dtype="float32",
            atol=1e-4,
            repeats=21,
            warmup=3,
            threads=1,
            prefill_len=2048,
            prefill_repeats=5,
        ),
        context_parallel=CONTEXT_PARALLEL,
        sparse=SPARSE,
        kv_quant=KV_QUANT,
    ),
    "cpu-quick": dict(
        variants=dict(batch=2, seq_len=128, d_in=256, d_out=256, num_heads=4, dtype="float32", atol=1e-4),
        variant_repeats=3,
        variant_warmup=1,
        decoder=dict(vocab_size=128, d_model=64, num_layers=2, num_heads=4, prompt_len=8, batch=1),
        decode_lengths=[128, 512, 1024],
        decode_repeats=1,
        kv_groups=[4, 2, 1],
        kv_new_tokens=128,
        online_softmax=dict(
            batch=1, heads=4, head_dim=64, seq_lens=[256, 512], block_size=128, dtype="float32", atol=1e-4, repeats=1
        ),
        mla=dict(
            d_model=128,
            num_heads=4,
            kv_latent_dim=32,
            rope_dim=8,
            num_kv_groups=2,
            prompt_len=8,
            new_tokens=64,
            atol=1e-4,
            repeats=1,
        ),
        long_context=dict(
            batch=1, kv_heads=1, head_dim=32, window=256, steps=4096, dtype="float32", atol=1e-5, repeats=1
        ),
        serving=dict(
            batch=4,
            kv_heads=2,
            heads=4,
            head_dim=32,
            block_size=16,
            min_prompt=16,
            max_prompt=256,
            max_len=512,
            steps=8,
            dtype="float32",
            atol=1e-4,
            repeats=1,
            split_keys=[16384],
            split_heads=4,
            split_head_dim=64,
            split_chunk=1024,
        ),
        linear_attention=dict(
            batch=1,
            heads=2,
            head_dim=32,
            steps=8,
            contexts=[64, 1024],
            chunk_size=64,
            dtype="float32",
            atol=1e-4,
            repeats=3,
            threads=1,
            prefill_len=512,
            prefill_repeats=1,
        ),
        context_parallel=CONTEXT_PARALLEL_QUICK,
        sparse=SPARSE_QUICK,
        kv_quant=KV_QUANT_QUICK,
    ),
    "cuda": dict(
        variants=dict(batch=8, seq_len=2048, d_in=2048, d_out=2048, num_heads=16, dtype="bfloat16", atol=5e-2),
        variant_repeats=20,
        variant_warmup=3,
        decoder=dict(vocab_size=32000, d_model=1024, num_layers=8, num_heads=16, prompt_len=16, batch=1),
        decode_lengths=[128, 512, 1024],
        decode_repeats=3,
        kv_groups=[16, 4, 1],
        kv_new_tokens=512,
        online_softmax=dict(
            batch=1,
            heads=16,
            head_dim=128,
            seq_lens=[1024, 4096, 8192],
            block_size=128,
            dtype="bfloat16",
            atol=5e-2,
            repeats=5,
            warmup=2,
        ),
        mla=dict(
            d_model=1024,
            num_heads=16,
            kv_latent_dim=256,
            rope_dim=32,
            num_kv_groups=4,
            prompt_len=16,
            new_tokens=256,
            atol=1e-3,
            repeats=3,
        ),
        long_context=dict(
            batch=8, kv_heads=8, head_dim=128, window=512, steps=4096, dtype="bfloat16", atol=5e-2, repeats=3, warmup=1
        ),
        serving=dict(
            batch=32,
            kv_heads=8,
            heads=32,
            head_dim=128,
            block_size=16,
            min_prompt=64,
            max_prompt=2048,
            max_len=4096,
            steps=32,
            dtype="bfloat16",
            atol=5e-2,
            repeats=3,
            split_keys=[16384, 32768, 65536],
            split_heads=32,
            split_head_dim=128,
            split_chunk=1024,
        ),
        linear_attention=dict(
            batch=8,
            heads=16,
            head_dim=128,
            steps=32,
            contexts=[256, 1024, 4096, 16384],
            chunk_size=64,
            dtype="float32",
            atol=1e-3,
            repeats=5,
            prefill_len=4096,
            prefill_repeats=3,
        ),
        context_parallel=CONTEXT_PARALLEL,
        sparse=SPARSE_CUDA,
        kv_quant=KV_QUANT_CUDA,
    ),
    "cuda-quick": dict(
        variants=dict(batch=4, seq_len=1024, d_in=1024, d_out=1024, num_heads=8, dtype="bfloat16", atol=5e-2),
        variant_repeats=5,
        variant_warmup=2,
        decoder=dict(vocab_size=1024, d_model=256, num_layers=4, num_heads=8, prompt_len=8, batch=1),
        decode_lengths=[128, 512, 1024],
        decode_repeats=1,
        kv_groups=[8, 2, 1],
        kv_new_tokens=128,
        online_softmax=dict(
            batch=1,
            heads=8,
            head_dim=128,
            seq_lens=[1024, 4096],
            block_size=128,
            dtype="bfloat16",
            atol=5e-2,
            repeats=3,
            warmup=1,
        ),
        mla=dict(
            d_model=512,
            num_heads=8,
            kv_latent_dim=128,
            rope_dim=32,
            num_kv_groups=2,
            prompt_len=8,
            new_tokens=64,
            atol=1e-3,
            repeats=1,
        ),
        long_context=dict(
            batch=4, kv_heads=8, head_dim=128, window=512, steps=4096, dtype="bfloat16", atol=5e-2, repeats=1
        ),
        serving=dict(
            batch=8,
            kv_heads=2,
            heads=8,
            head_dim=128,
            block_size=16,
            min_prompt=64,
            max_prompt=1024,
            max_len=2048,
            steps=8,
            dtype="bfloat16",
            atol=5e-2,
            repeats=1,
            split_keys=[16384],
            split_heads=8,
            split_head_dim=128,
            split_chunk=1024,
        ),
        linear_attention=dict(
            batch=4,
            heads=8,
            head_dim=128,
            steps=8,
            contexts=[256, 4096],
            chunk_size=64,
            dtype="float32",
            atol=1e-3,
            repeats=3,
            prefill_len=1024,
            prefill_repeats=1,
        ),
        context_parallel=CONTEXT_PARALLEL_QUICK,
        sparse={**SPARSE_CUDA, "lengths": [8192, 131072], "repeats": 3},
        kv_quant={**KV_QUANT_CUDA, "prompt_len": 4096, "steps": 8, "repeats": 1},
    ),
}

for _name, _cfg in CONFIGS.items():  # notebook 14's kernel: correctness on the CPU (interpreted), TFLOP/s on a GPU
    _cfg["flash_triton"] = FLASH_TRITON_CONFIGS[_name]

REQUIRED_RATIOS = (
    "fastest_mha_vs_sdpa",
    "fastest_mha_vs_nn_mha",
    "cache_speedup_512",
    "static_vs_growing_1024",
    "gqa_cache_bytes_ratio_error",
)
# present when the config has the online_softmax and mla sections (results committed before them lack these)
BEYOND_RATIOS = (
    "online_softmax_vs_sdpa_time",
    "naive_vs_sdpa_time",
    "naive_vs_online_softmax_peak_bytes",
    "gqa_vs_mla_cache_bytes",
    "gqa_vs_mla_cache_bytes_error",
    "mla_absorbed_vs_explicit_decode_time",
)
# present when the config has the long_context section (notebook 12)
LONG_CONTEXT_RATIOS = ("growing_vs_ring_cache_bytes", "ring_vs_growing_decode_time")
# present when the config has the linear_attention section (notebook 16)
LINEAR_ATTENTION_RATIOS = ("gated_deltanet_decode_crossover_context", "recurrent_vs_chunk_prefill_time")
# present when the config has the sparse and kv_quant sections (notebook 17)
SPARSE_RATIOS = ("float_vs_4bit_cache_bytes", "4bit_vs_float_decode_time")


def device_label(device: torch.device) -> str:
    """'cpu', or e.g. 'cuda-NVIDIA-H100-80GB-HBM3': the name of the results file."""
    if device.type == "cuda":
        return "cuda-" + "-".join(torch.cuda.get_device_name(device).split())
    return device.type


def environment(device: torch.device) -> dict:
    env = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": str(device),
        "device_name": device_label(device),
        "num_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
    }
    if device.type == "cuda":
        env["cuda"] = torch.version.cuda
        env["gpu"] = torch.cuda.get_device_name(device)
    return env


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def attention_flops(batch, num_heads, seq_len, head_dim):
    """Causal attention forward: QK^T and AV, 2 flops per multiply-add each, half the (T, T) square."""
    return 4 * batch * num_heads * seq_len * seq_len * head_dim // 2


def bench_variants(cfg, device, log):
    v = cfg["variants"]
    dtype = getattr(torch, v["dtype"])
    b, t, d_in, d_out, nh = v["batch"], v["seq_len"], v["d_in"], v["d_out"], v["num_heads"]
    fns, modules = build_variants(d_in, d_out, t, nh, device, dtype)

    # correctness first, on a slice small enough for the slow variants
    torch.manual_seed(1)
    x_small = torch.randn(2, min(t, 64), d_in, device=device, dtype=dtype)
    errors = check_variants_agree(fns, modules, x_small, atol=v["atol"], rtol=v["atol"])

    torch.manual_seed(2)
    x = torch.randn(b, t, d_in, device=device, dtype=dtype)
    grad_out = torch.randn(b, t, d_out, device=device, dtype=dtype)
    hd = d_out // nh
    attn_fwd = attention_flops(b, nh, t, hd)
    proj_fwd = 2 * b * t * (3 * d_in * d_out + d_out * d_out)
    # backward costs about twice the forward for matmuls; FlashAttention counts 2.5x for attention
    flops = {"forward": (attn_fwd, proj_fwd), "forward_backward": (3.5 * attn_fwd, 3 * proj_fwd)}

    def forward(fn):
        with torch.no_grad():
            fn(x)

    def forward_backward(fn):
        fn(x).backward(grad_out)
        modules.zero_grad(set_to_none=True)

    results = {name: {} for name in VARIANTS}
    for mode, step in (("forward", forward), ("forward_backward", forward_backward)):
        calls = {name: (lambda fn=fns[name], step=step: step(fn)) for name in VARIANTS}
        times = median_times(calls, device, cfg["variant_repeats"], cfg["variant_warmup"])
        attn, proj = flops[mode]
        for name, seconds in times.items():
            results[name][mode] = {
                "seconds": seconds,
                "attention_gflop_per_s": attn / seconds / 1e9,
                "layer_gflop_per_s": (attn + proj) / seconds / 1e9,
            }
            log(f"  {name:18s} {mode:16s} {seconds * 1e3:9.2f} ms")
    return {
        "shape": dict(batch=b, seq_len=t, d_in=d_in, d_out=d_out, num_heads=nh, head_dim=hd, dtype=v["dtype"]),
        "attention_flops_forward": attn_fwd,
        "projection_flops_forward": proj_fwd,
        "max_abs_error_vs_reference": errors,
        "results": results,
    }


def bench_attention_core(cfg, device, log):
    """F.scaled_dot_product_attention(is_causal=True) alone on (B, nh, T, hd) tensors: the kernel's throughput.

    On CUDA it runs once more restricted to the flash kernel: if that raises, the default was not flash either.
    """
    v = cfg["variants"]
    dtype = getattr(torch, v["dtype"])
    b, t, nh = v["batch"], v["seq_len"], v["num_heads"]
    hd = v["d_out"] // nh
    torch.manual_seed(3)
    q, k, val = (torch.randn(b, nh, t, hd, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    grad = torch.randn(b, nh, t, hd, device=device, dtype=dtype)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    flops = attention_flops(b, nh, t, hd)

    def forward():
        with torch.no_grad():
            sdpa(q, k, val, is_causal=True)

    def forward_backward():
        sdpa(q, k, val, is_causal=True).backward(grad)
        q.grad = k.grad = val.grad = None

    backends = {"default": contextlib.nullcontext}
    if device.type == "cuda":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backends["flash_only"] = lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)
    out = {}
    for label, backend in backends.items():
        entry = {}
        for mode, fn, factor in (("forward", forward, 1.0), ("forward_backward", forward_backward, 3.5)):

            def call(fn=fn, backend=backend):
                with backend():
                    fn()

            try:
                seconds = median_time(call, device, cfg["variant_repeats"], cfg["variant_warmup"])
            except RuntimeError as err:  # no flash kernel for this dtype, shape or GPU
                entry[mode] = {"error": str(err).splitlines()[0]}
                continue
            entry[mode] = {"seconds": seconds, "attention_gflop_per_s": factor * flops / seconds / 1e9}
            log(
                f"  sdpa core ({label}) {mode:16s} {seconds * 1e3:9.2f} ms "
                f"{entry[mode]['attention_gflop_per_s']:8.1f} GFLOP/s"
            )
        out[label] = entry
    return out


def _median_steps(runs):
    """Per decoding step, the median over the repeats: one descheduled step on a busy machine is then
    outvoted instead of added to the total."""
    return [statistics.median(steps) for steps in zip(*(r[1] for r in runs), strict=True)]


def _bin_profile(step_seconds, prompt_len, num_bins=32):
    """Average per-step times into bins: (sequence length at the bin's middle, ms per token)."""
    n = len(step_seconds)
    size = max(1, n // num_bins)
    positions, ms = [], []
    for start in range(0, n, size):
        chunk = step_seconds[start : start + size]
        positions.append(prompt_len + start + len(chunk) // 2)
        ms.append(1e3 * sum(chunk) / len(chunk))
    return positions, ms


def bench_decoding(cfg, device, log):
    d = cfg["decoder"]
    lengths = cfg["decode_lengths"]
    model_cfg = dict(d, context_length=d["prompt_len"] + max(max(lengths), cfg["kv_new_tokens"]))
    model = build_model(model_cfg, d["num_heads"], device, torch.float32)
    torch.manual_seed(4)
    prompt = torch.randint(0, d["vocab_size"], (d["batch"], d["prompt_len"]), device=device)

    for mode in CACHE_MODES:  # warm-up: allocator, kernels, threads
        generate(model, prompt, min(16, min(lengths)), mode)
    results, tokens, profile = {}, {}, {}
    for n in lengths:
        # the modes take turns within each repeat, so a busy spell on the machine hits all three
        rounds = [
            {mode: generate(model, prompt, n, mode) for mode in CACHE_MODES} for _ in range(cfg["decode_repeats"])
        ]
        for mode in CACHE_MODES:
            runs = [r[mode] for r in rounds]
            tokens[(mode, n)] = runs[0][0]
            per_step = _median_steps(runs)
            seconds = sum(per_step)
            results.setdefault(mode, {})[str(n)] = {"seconds": seconds, "tokens_per_s": n * d["batch"] / seconds}
            log(f"  decode {mode:12s} {n:5d} tokens {seconds:8.3f} s {n / seconds:9.1f} tok/s")
            if n == max(lengths):  # time per token vs sequence length
                profile["positions"], profile[mode] = _bin_profile(per_step, d["prompt_len"])
        reference = tokens[("none", n)]
        for mode in CACHE_MODES[1:]:
            if not torch.equal(tokens[(mode, n)], reference):
                first = int((tokens[(mode, n)] != reference).any(dim=0).nonzero()[0])
                raise AssertionError(
                    f"greedy decoding with the {mode} cache differs from no cache at new token {first} of {n}"
                )
    return {
        "model": dict(model_cfg, num_parameters=sum(p.numel() for p in model.parameters()), dtype="float32"),
        "lengths": lengths,
        "tokens_identical": True,  # checked above: it raised otherwise
        "results": results,
        "step_profile_ms": profile,
    }


def bench_kv_variants(cfg, device, log):
    """MHA vs GQA vs MQA: the same decoder with fewer K/V heads; cache bytes measured vs theory, and speed."""
    d = cfg["decoder"]
    n = cfg["kv_new_tokens"]
    model_cfg = dict(d, context_length=d["prompt_len"] + max(max(cfg["decode_lengths"]), n))
    torch.manual_seed(5)
    prompt = torch.randint(0, d["vocab_size"], (d["batch"], d["prompt_len"]), device=device)
    names = {d["num_heads"]: "mha", 1: "mqa"}
    models = {names.get(g, f"gqa{g}"): build_model(model_cfg, g, device, torch.float32) for g in cfg["kv_groups"]}
    for model in models.values():  # warm-up
        generate(model, prompt, min(16, n), "preallocated")
    rounds = [
        {name: generate(model, prompt, n, "preallocated") for name, model in models.items()}
        for _ in range(cfg["decode_repeats"])
    ]
    out = {}
    for name, model in models.items():
        runs = [r[name] for r in rounds]
        seconds = sum(_median_steps(runs))
        elem = next(model.parameters()).element_size()
        prealloc = runs[-1][2]
        measured, theory = cache_bytes(model, prealloc, d["batch"], elem)
        _, _, growing = generate(model, prompt, n, "growing")
        measured_growing, theory_growing = cache_bytes(model, growing, d["batch"], elem)
        if measured != theory or measured_growing != theory_growing:
            raise AssertionError(
                f"{name}: cache holds {measured} / {measured_growing} bytes, "
                f"kv_cache_bytes says {theory} / {theory_growing}"
            )
        attn = model.blocks[0].attn
        out[name] = {
            "num_heads": attn.num_heads,
            "num_kv_heads": attn.num_kv_groups,
            "head_dim": attn.head_dim,
            "num_layers": len(model.blocks),
            "cache_tokens": prealloc[0].max_len,
            "bytes_per_element": elem,
            "cache_bytes_measured": measured,
            "cache_bytes_theory": theory,
            "growing_cache_tokens": growing[0].seq_len,
            "growing_cache_bytes_measured": measured_growing,
            "seconds": seconds,
            "tokens_per_s": n * d["batch"] / seconds,
        }
        log(f"  {name:6s} kv_heads={attn.num_kv_groups:3d} cache {measured / 2**20:8.3f} MiB {n / seconds:9.1f} tok/s")
    return {"new_tokens": n, "results": out}


def compute_ratios(report, cfg):
    var = report["variants"]["results"]
    fwd = {name: r["forward"]["seconds"] for name, r in var.items()}
    dec = report["decoding"]["results"]
    short, mid, long = (str(n) for n in cfg["decode_lengths"])
    kv = report["kv_variants"]["results"]
    gqa = next(name for name in kv if name.startswith("gqa"))
    measured = kv[gqa]["cache_bytes_measured"] / kv["mha"]["cache_bytes_measured"]
    theory = kv[gqa]["num_kv_heads"] / kv["mha"]["num_kv_heads"]  # 2*L*hd*len*bytes cancels
    return {
        "fastest_mha_vs_sdpa": fwd["ours_sdpa"] / fwd["sdpa_is_causal"],
        "fastest_mha_vs_nn_mha": fwd["ours_sdpa"] / fwd["nn_mha"],
        "fastest_mha_vs_nn_mha_no_weights": fwd["ours_sdpa"] / fwd["nn_mha_no_weights"],
        "fastest_mha_vs_reference": fwd["ours_sdpa"] / fwd["mha_reference"],
        "fastest_mha_vs_sdpa_forward_backward": var["ours_sdpa"]["forward_backward"]["seconds"]
        / var["sdpa_is_causal"]["forward_backward"]["seconds"],
        "cache_speedup_512": dec["none"][mid]["seconds"] / dec["preallocated"][mid]["seconds"],
        "static_vs_growing_1024": dec["growing"][long]["seconds"] / dec["preallocated"][long]["seconds"],
        "gqa_cache_bytes_ratio_error": abs(measured - theory),
        "gqa_cache_bytes_ratio": measured,
        **beyond_ratios(report),
        **long_context_ratios(report),
        **serving_ratios(report),
        **flash_triton_ratios(report),
        **context_parallel_ratios(report),
        **linear_attention_ratios(report),
        **sparse_ratios(report),
        "ratio_notes": {
            "forward": "forward times, no_grad; sdpa = the same projections around one bare SDPA call",
            "cache_speedup_512": f"no cache / preallocated cache, {mid} new tokens",
            "static_vs_growing_1024": f"growing cache / preallocated cache, {long} new tokens",
            "gqa": f"{gqa} vs mha",
            "online_softmax": "longest T; time and peak bytes of causal attention alone (no projections)",
            "mla": "one layer each, same width and heads; GQA with RoPE, preallocated caches",
            "long_context": "one sliding-window layer, one token per step: bytes held after the last step, and "
            "time; ring_vs_growing_tokens_per_s = median over alternating rounds of each round's speed ratio, "
            "_q1/_q3 its quartiles (CPU: one thread)",
            "serving": "paged decoding (one scatter and one gather per step through the slot mapping) vs a "
            "preallocated padded cache, tokens/s (median over alternating rounds of each round's ratio, _q1/_q3 its "
            "quartiles; CPU: one thread) and unused bytes; split-K (all chunks in one batched "
            "call) vs the online softmax walking the key blocks one after another, one query per head, "
            "time ratio per key count",
            "flash_triton": "GPU only: the course's Triton forward over SDPA's flash backend, TFLOP/s, bfloat16 "
            "(on the CPU the interpreter is checked for correctness, not timed)",
            "context_parallel": "causal attention on W local gloo processes (CPU, loopback): bytes per rank of the "
            "ring vs Ulysses (equal K/V and query heads), checked against what the ranks hand to "
            "torch.distributed; the zigzag ring's time per step over SDPA in one process, one "
            "thread each",
            "linear_attention": "one Gated DeltaNet layer vs one KV-cached GroupedQueryAttention layer, the same width "
            "and heads, one token per step after a prompt of each context length: attention / Gated DeltaNet time per "
            "token (median over alternating rounds of each round's ratio; CPU: one thread) and bytes per sequence; "
            "the crossover = the shortest context where attention is slower; prefill = recurrent / chunked time",
            "sparse": "one decoding query (16 heads on 2 K/V heads): SDPA over all L keys vs the lightning indexer "
            "over all L index keys, top-k, and attention over the selected keys (course_utils.dsa_attention); "
            "sparse / dense time, median of alternating rounds' ratios",
            "kv_quant": "KIVI's cache (course_utils.QuantizedKVCache, dequantised whole at every step) vs a "
            "preallocated float cache: bytes held after the last step (float / quantised) and decode time "
            "(quantised / float, median of alternating rounds' ratios)",
        },
    }


def run(cfg, device, out_path=None, log=print, quick=False):
    """Measure everything in ``cfg`` on ``device``; write the JSON to ``out_path`` (if given) and return it."""
    device = torch.device(device)
    report = {"schema": 1, "quick": quick, "env": environment(device), "config": cfg}
    log("MHA variants")
    report["variants"] = bench_variants(cfg, device, log)
    report["attention_core"] = bench_attention_core(cfg, device, log)
    log("KV-cache decoding")
    report["decoding"] = bench_decoding(cfg, device, log)
    log("MHA vs GQA vs MQA")
    report["kv_variants"] = bench_kv_variants(cfg, device, log)
    if "online_softmax" in cfg:
        log("Online softmax vs SDPA vs naive attention")
        report["online_softmax"] = bench_online_softmax(cfg, device, log)
    if "mla" in cfg:
        log("MLA vs GQA cache")
        report["mla_cache"] = bench_mla_cache(cfg, device, log)
    if "long_context" in cfg:
        log("Ring-buffer vs growing KV cache (sliding window)")
        report["long_context"] = bench_ring_cache(cfg, device, log)
    if "serving" in cfg:
        log("Serving: paged vs contiguous decoding, split-K vs one pass")
        report["paged_decode"] = bench_paged_decode(cfg, device, log)
        report["split_k"] = bench_split_k(cfg, device, log)
    if "flash_triton" in cfg:
        log("FlashAttention in Triton (notebook 14) vs SDPA's flash backend")
        report["flash_triton"] = bench_flash_triton(cfg, device, log)
    if "linear_attention" in cfg:
        log("Linear attention: a Gated DeltaNet layer vs KV-cached attention, chunked vs recurrent prefill")
        report["linear_decode"] = bench_linear_decode(cfg, device, log)
        report["linear_prefill"] = bench_linear_prefill(cfg, device, log)
    if "context_parallel" in cfg:
        log("Context parallelism: bytes per rank (ring, all-gather, Ulysses) and the gloo ring's time per step")
        report["cp_bytes"] = bench_context_parallel_bytes(cfg, log)
        report["cp_ring_time"] = bench_ring_step_time(cfg, log)
    if "sparse" in cfg:
        log("Sparse (DSA) vs dense decoding as the context grows")
        report["sparse_decode"] = bench_sparse_decode(cfg, device, log)
    if "kv_quant" in cfg:
        log("A KIVI-quantised KV cache vs a float one")
        report["kv_quant"] = bench_quantized_cache(cfg, device, log)
    report["ratios"] = compute_ratios(report, cfg)
    if out_path is not None:
        out_path = Path(out_path)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(report, indent=1) + "\n")
        log(f"wrote {out_path}")
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat (also BENCH_QUICK=1)")
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR, help="where the JSON goes")
    args = parser.parse_args(argv)
    quick = args.quick or os.environ.get("BENCH_QUICK", "") not in ("", "0")
    device = get_device()
    base = "cuda" if device.type == "cuda" else "cpu"
    cfg = CONFIGS[base + ("-quick" if quick else "")]
    name = device_label(device) + ("-quick" if quick else "") + ".json"
    report = run(cfg, device, args.out_dir / name, quick=quick)
    print(json.dumps({k: v for k, v in report["ratios"].items() if k != "ratio_notes"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
