"""Benchmark for notebook 14: the course's Triton FlashAttention forward (course_utils/reference/flash_triton.py)
against SDPA's flash backend.

* On a CUDA GPU: bfloat16, causal and not, T = 1k-16k, head_dim 64 and 128, 16k tokens per batch and 2048 model
  dimensions (heads = 2048 / head_dim). Both must agree before anything is timed. Reported: TFLOP/s of each
  (forward FLOPs 4 B H T^2 d, half of them when causal), the ratio, and % of the GPU's dense bfloat16 peak where the
  datasheet value is known.
* On the CPU the kernel runs in Triton's interpreter, which executes each program instance as NumPy code: its time
  says nothing about a GPU, so only correctness is reported (out against SDPA, lse against torch.logsumexp).
* Without triton (macOS, Windows, WITH_TRITON=0): the section says so and reports nothing else.
"""

from __future__ import annotations

import importlib.util
import math

import torch
import torch.nn.functional as F

from .timing import median_times

# dense bfloat16 tensor-core peak, TFLOP/s, from NVIDIA's datasheets (without sparsity), by a part of the name
# torch.cuda.get_device_name returns
PEAK_BF16_TFLOPS = {"H100 PCIe": 756.0, "H100 NVL": 835.0, "H100": 989.4, "H200": 989.4, "A100": 312.0}

CONFIGS = {
    "cpu": dict(shapes=[(1, 2, 37, 16), (1, 2, 64, 64), (2, 1, 45, 80)], dtype="float32", atol=2e-5),
    "cpu-quick": dict(shapes=[(1, 2, 37, 16)], dtype="float32", atol=2e-5),
    "cuda": dict(
        seq_lens=[1024, 2048, 4096, 8192, 16384],
        head_dims=[64, 128],
        tokens=16384,
        model_dim=2048,
        dtype="bfloat16",
        atol=2e-2,
        repeats=10,
    ),
    "cuda-quick": dict(
        seq_lens=[1024, 4096], head_dims=[128], tokens=8192, model_dim=2048, dtype="bfloat16", atol=2e-2, repeats=3
    ),
}


def peak_tflops(device_name: str) -> float | None:
    for part, peak in PEAK_BF16_TFLOPS.items():  # most specific first: "H100 PCIe" before "H100"
        if part in device_name:
            return peak
    return None


def forward_flops(batch, heads, seq_len, head_dim, causal) -> float:
    """Q K^T and P V, 2 T^2 d FLOPs each per head; causal computes about half of the square."""
    return 4 * batch * heads * seq_len * seq_len * head_dim / (2 if causal else 1)


def _expected(q, k, v, causal):
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        seq_len = q.shape[-2]
        hide = torch.ones(seq_len, seq_len, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(hide, float("-inf"))
    return torch.softmax(scores, -1) @ v, torch.logsumexp(scores, -1)


def check_correct(flash, shapes, dtype, atol, device="cpu") -> dict:
    """{shape/causal: errors of out and lse}; AssertionError when the kernel and PyTorch disagree."""
    results = {}
    for shape in shapes:
        for causal in (False, True):
            g = torch.Generator().manual_seed(sum(shape))
            q, k, v = (torch.randn(shape, generator=g).to(device=device, dtype=dtype) for _ in range(3))
            out, lse = flash(q, k, v, causal=causal)
            want_out, want_lse = _expected(q, k, v, causal)
            errors = {
                "max_abs_error": (out.double() - want_out).abs().max().item(),
                "lse_max_abs_error": (lse.double() - want_lse).abs().max().item(),
            }
            assert max(errors.values()) < atol, f"the Triton kernel and PyTorch disagree at {shape}: {errors}"
            results[f"{'x'.join(map(str, shape))}{' causal' if causal else ''}"] = errors
    return results


def bench_flash_triton(cfg, device, log) -> dict:
    p = cfg["flash_triton"]
    if importlib.util.find_spec("triton") is None:
        log("  triton is not installed: skipped")
        return {"skipped": "triton is not installed (Linux only; make setup without WITH_TRITON=0)"}
    from course_utils.reference import flash_triton

    device = torch.device(device)
    dtype = getattr(torch, p["dtype"])
    if device.type != "cuda" or flash_triton.INTERPRETED:
        results = check_correct(flash_triton.flash_attention_triton, p["shapes"], dtype, p["atol"])
        log(f"  interpreted on the CPU: {len(results)} shapes agree with SDPA and logsumexp (no timing)")
        return {
            "interpreted": True,
            "note": "Triton's interpreter on the CPU: correctness only, its time is not a performance figure",
            "results": results,
        }
    from torch.nn.attention import SDPBackend, sdpa_kernel

    name = torch.cuda.get_device_name(device)
    peak = peak_tflops(name)
    results = {}
    for d in p["head_dims"]:
        heads = p["model_dim"] // d
        for seq_len in p["seq_lens"]:
            batch = max(1, p["tokens"] // seq_len)
            q, k, v = (torch.randn(batch, heads, seq_len, d, device=device, dtype=dtype) for _ in range(3))
            for causal in (False, True):
                ours, _ = flash_triton.flash_attention_triton(q, k, v, causal=causal)
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                error = (ours.float() - theirs.float()).abs().max().item()
                assert error < p["atol"], f"the Triton kernel and SDPA disagree at T={seq_len}, d={d}: {error}"

                def sdpa(q=q, k=k, v=v, causal=causal):
                    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                        F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                def triton_kernel(q=q, k=k, v=v, causal=causal):
                    flash_triton.flash_attention_triton(q, k, v, causal=causal)

                times = median_times({"triton": triton_kernel, "sdpa_flash": sdpa}, device, p["repeats"], warmup=2)
                flops = forward_flops(batch, heads, seq_len, d, causal)
                entry = {"batch": batch, "heads": heads, "max_abs_error": error}
                for label, seconds in times.items():
                    tflops = flops / seconds / 1e12
                    entry[label] = {
                        "seconds": seconds,
                        "tflops": tflops,
                        "percent_of_peak": None if peak is None else 100 * tflops / peak,
                    }
                entry["triton_vs_sdpa_tflops"] = entry["triton"]["tflops"] / entry["sdpa_flash"]["tflops"]
                key = f"T{seq_len}_d{d}_{'causal' if causal else 'full'}"
                results[key] = entry
                log(
                    f"  {key}: triton {entry['triton']['tflops']:.0f} TFLOP/s, SDPA flash "
                    f"{entry['sdpa_flash']['tflops']:.0f}, ratio {entry['triton_vs_sdpa_tflops']:.2f}"
                )
    return {"interpreted": False, "device_name": name, "peak_bf16_tflops": peak, "results": results}


def flash_triton_ratios(report) -> dict:
    """The Triton kernel's TFLOP/s over SDPA's, per GPU shape (empty on the CPU, where nothing is timed)."""
    section = report.get("flash_triton", {})
    if section.get("interpreted", True):
        return {}
    return {f"flash_triton_vs_sdpa_{key}": entry["triton_vs_sdpa_tflops"] for key, entry in section["results"].items()}
