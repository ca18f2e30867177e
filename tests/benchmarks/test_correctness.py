"""The benchmarks' correctness part, on tiny sizes (no timing assertions: timings are not stable in CI)."""

import json
from pathlib import Path

import pytest
import torch

from benchmarks import run as bench
from benchmarks.decoder import CACHE_MODES, build_model, cache_bytes, generate
from benchmarks.timing import median_time
from benchmarks.variants import VARIANTS, bare_sdpa, build_variants, check_variants_agree

ROOT = Path(__file__).resolve().parents[2]

TINY = dict(
    variants=dict(batch=2, seq_len=8, d_in=6, d_out=8, num_heads=2, dtype="float32", atol=1e-5),
    variant_repeats=1,
    variant_warmup=0,
    decoder=dict(vocab_size=32, d_model=16, num_layers=2, num_heads=4, prompt_len=3, batch=2),
    decode_lengths=[2, 4, 8],
    decode_repeats=2,
    kv_groups=[4, 2, 1],
    kv_new_tokens=4,
    online_softmax=dict(
        batch=2, heads=2, head_dim=8, seq_lens=[7, 12], block_size=4, dtype="float32", atol=1e-5, repeats=1, warmup=0
    ),
    mla=dict(
        d_model=16,
        num_heads=4,
        kv_latent_dim=6,
        rope_dim=2,
        num_kv_groups=2,
        prompt_len=3,
        new_tokens=4,
        atol=1e-5,
        repeats=1,
    ),
    long_context=dict(batch=2, kv_heads=2, head_dim=4, window=3, steps=10, dtype="float32", atol=1e-5, repeats=1),
    serving=dict(
        batch=3,
        kv_heads=2,
        heads=4,
        head_dim=8,
        block_size=4,
        min_prompt=1,
        max_prompt=9,
        max_len=16,
        steps=3,
        dtype="float32",
        atol=1e-5,
        repeats=1,
        split_keys=[37],
        split_heads=2,
        split_head_dim=8,
        split_chunk=8,
    ),
)
TINY["linear_attention"] = dict(
    batch=2,
    heads=2,
    head_dim=4,
    steps=3,
    contexts=[5, 70],
    chunk_size=8,
    dtype="float32",
    atol=1e-5,
    repeats=1,
    threads=1,
    prefill_len=21,
    prefill_repeats=1,
)
TINY["sparse"] = dict(
    heads=4,
    kv_heads=2,
    head_dim=8,
    index_heads=2,
    index_dim=4,
    top_k=5,
    lengths=[4, 30],
    dtype="float32",
    atol=1e-5,
    check_top_k=4,
    repeats=1,
    warmup=0,
)
TINY["kv_quant"] = dict(
    batch=1,
    kv_heads=2,
    head_dim=8,
    prompt_len=9,
    steps=5,
    group_size=4,
    residual=4,
    bits=[2, 4, 8],
    dtype="float32",
    atol=1e-5,
    repeats=1,
    warmup=0,
)
TINY_MODEL = dict(vocab_size=32, d_model=16, num_layers=2, num_heads=4, context_length=24)


@pytest.mark.parametrize(
    "d_in, d_out, num_heads, seq_len, context_length",
    [
        (6, 8, 2, 5, 9),  # d_in < d_out, sequence shorter than context_length
        (12, 8, 4, 7, 7),  # d_in > d_out, four heads
        (8, 8, 2, 6, 10),  # d_in == d_out: nn.MultiheadAttention's packed in_proj
    ],
)
def test_variants_agree(d_in, d_out, num_heads, seq_len, context_length):
    fns, modules = build_variants(d_in, d_out, context_length, num_heads, "cpu")
    assert set(fns) == set(VARIANTS)
    x = torch.randn(3, seq_len, d_in)
    errors = check_variants_agree(fns, modules, x, atol=1e-5)
    assert max(errors.values()) < 1e-5


def test_variant_check_catches_a_missing_mask():
    fns, modules = build_variants(6, 8, 9, 2, "cpu")
    mha = modules[0]

    def no_mask(x):  # attends to future tokens
        b, t, _ = x.shape
        q, k, v = (lin(x).view(b, t, 2, 4).transpose(1, 2) for lin in (mha.W_query, mha.W_key, mha.W_value))
        ctx = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return mha.out_proj(ctx.transpose(1, 2).reshape(b, t, 8))

    fns["broken"] = no_mask
    with pytest.raises(AssertionError, match="broken"):
        check_variants_agree(fns, modules, torch.randn(2, 5, 6), atol=1e-5)
    # and the bare SDPA helper itself is causal: changing a later token leaves earlier outputs alone
    x = torch.randn(1, 5, 6)
    y = x.clone()
    y[0, 4] += 1.0
    with torch.no_grad():
        torch.testing.assert_close(bare_sdpa(mha, x)[0, :4], bare_sdpa(mha, y)[0, :4])


def test_greedy_tokens_identical_across_caches():
    model = build_model(TINY_MODEL, 4, "cpu", torch.float32)
    prompt = torch.randint(0, 32, (2, 3))
    tokens = {mode: generate(model, prompt, 12, mode)[0] for mode in CACHE_MODES}
    assert tokens["none"].shape == (2, 12)
    for mode in CACHE_MODES[1:]:
        assert torch.equal(tokens[mode], tokens["none"]), mode


def test_tokens_depend_on_the_context():
    """The identity check above can fail: a decoder that forgets the past produces other tokens."""
    model = build_model(TINY_MODEL, 4, "cpu", torch.float32)
    prompt = torch.randint(0, 32, (2, 3))
    reference = generate(model, prompt, 12, "none")[0]
    with torch.no_grad():
        feed, forgetful = prompt, []
        for _ in range(12):
            feed = model(feed)[:, -1].argmax(dim=-1, keepdim=True)  # sees only the last token
            forgetful.append(feed)
    assert not torch.equal(torch.cat(forgetful, dim=1), reference)


@pytest.mark.parametrize("groups", [4, 2, 1])
def test_cache_bytes_match_the_formula(groups):
    model = build_model(TINY_MODEL, groups, "cpu", torch.float32)
    prompt = torch.randint(0, 32, (2, 3))
    for mode in ("growing", "preallocated"):
        _, _, caches = generate(model, prompt, 6, mode)
        measured, theory = cache_bytes(model, caches, 2, 4)
        # 3 prompt + 5 fed-back tokens; the 6th new token is never fed back
        assert caches[0].seq_len == 8
        assert measured == theory == 2 * 2 * groups * 4 * 8 * 2 * 4


def test_generate_rejects_too_long_and_bad_mode():
    model = build_model(TINY_MODEL, 4, "cpu", torch.float32)
    prompt = torch.randint(0, 32, (1, 10))
    with pytest.raises(ValueError, match="context_length"):
        generate(model, prompt, 20, "none")
    with pytest.raises(ValueError, match="mode"):
        generate(model, prompt, 2, "static")
    with pytest.raises(ValueError, match="repeats"):
        median_time(lambda: None, "cpu", 0)


def test_timing_alternates_the_order_and_pairs_the_rounds():
    from benchmarks.timing import cpu_threads, paired_speed_ratio, round_times

    calls = []
    times = round_times({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, "cpu", 3, warmup=1)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]  # warm-up, then A B, B A, A B
    assert all(len(t) == 3 for t in times.values())
    # round by round: b took 2, 3 and 6 seconds where a took 1, 1 and 2: a ran 2x, 3x and 3x faster
    speed = paired_speed_ratio({"a": [1.0, 1.0, 2.0], "b": [2.0, 3.0, 6.0]}, "a", baseline="b")
    assert speed == {"median": 3.0, "q1": 2.5, "q3": 3.0, "rounds": 3}
    before = torch.get_num_threads()
    with cpu_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_run_writes_json_with_required_keys(tmp_path):
    out = tmp_path / "cpu-tiny.json"
    bench.run(TINY, "cpu", out, log=lambda *args: None, quick=True)
    report = json.loads(out.read_text())
    for key in ("torch", "device_name", "num_threads", "cpu_model"):
        assert key in report["env"]
    assert report["env"]["device_name"] == "cpu"
    assert set(report["variants"]["results"]) == set(VARIANTS)
    for timing in report["variants"]["results"].values():
        for mode in ("forward", "forward_backward"):
            assert timing[mode]["seconds"] > 0 and timing[mode]["attention_gflop_per_s"] > 0
    assert report["decoding"]["tokens_identical"] is True
    for mode in CACHE_MODES:
        assert set(report["decoding"]["results"][mode]) == {"2", "4", "8"}
        profile = report["decoding"]["step_profile_ms"]
        assert len(profile[mode]) == len(profile["positions"])
    kv = report["kv_variants"]["results"]
    assert [kv[name]["num_kv_heads"] for name in ("mha", "gqa2", "mqa")] == [4, 2, 1]
    ratios = report["ratios"]
    for key in bench.REQUIRED_RATIOS:
        assert isinstance(ratios[key], float) and ratios[key] >= 0, key
    assert ratios["gqa_cache_bytes_ratio_error"] == 0.0
    for key in bench.BEYOND_RATIOS:
        assert isinstance(ratios[key], float) and ratios[key] >= 0, key
    # online softmax: every attention agrees, and the naive one holds the (B, h, T, T) scores
    online = report["online_softmax"]["results"]
    assert set(online) == {"7", "12"}
    for entry in online.values():
        assert max(e["max_abs_error"] for e in entry.values()) < 1e-5
    assert online["12"]["naive"]["peak_bytes"] >= 2 * 2 * 12 * 12 * 4
    # MLA: the cache holds (latent + rope) = 8 numbers a token, GQA 2 groups x 2 x head_dim 4 = 16
    assert ratios["gqa_vs_mla_cache_bytes"] == 2.0 and ratios["gqa_vs_mla_cache_bytes_error"] == 0.0
    mla = report["mla_cache"]["results"]
    assert mla["mla_explicit"]["cache_bytes_measured"] == 7 * 8 * 4 == mla["mla_absorbed"]["cache_bytes_measured"]
    assert report["mla_cache"]["deepseek_v3_bf16_bytes_per_token"] == {"mla": 70_272, "mha_same_heads": 4_997_120}
    # ring buffer: 3 slots from the first step, against all 10 tokens (2 * batch 2 * heads 2 * head_dim 4 * 4 bytes)
    for key in bench.LONG_CONTEXT_RATIOS:
        assert isinstance(ratios[key], float) and ratios[key] > 0, key
    held = report["long_context"]["results"]
    assert set(held["ring"]["bytes_held"].values()) == {3 * 2 * 2 * 2 * 4 * 4}
    assert held["growing"]["bytes_held"]["10"] == 10 * 2 * 2 * 2 * 4 * 4
    assert ratios["growing_vs_ring_cache_bytes"] == 10 / 3
    assert report["long_context"]["max_abs_error"] < 1e-5
    # linear attention: the cache grows with the context (2 * batch 2 * heads 2 * head_dim 4 * 4 bytes a token), the
    # state does not (batch 2 * heads 2 * 4 * 4 * 4 bytes)
    for key in bench.LINEAR_ATTENTION_RATIOS:
        assert key in ratios, key
    decode = report["linear_decode"]["results"]
    assert {n: r["attention_bytes"] for n, r in decode.items()} == {"5": 5 * 128, "70": 70 * 128}
    assert {r["gated_deltanet_bytes"] for r in decode.values()} == {2 * 2 * 4 * 4 * 4}
    assert ratios["attention_vs_gated_deltanet_bytes_70"] == 70 * 128 / 256
    assert report["linear_decode"]["max_abs_error"] < 1e-5 and report["linear_prefill"]["max_abs_error"] < 1e-5
    # notebook 17: the sparse step checked against SDPA, one ratio per context length; the quantised cache's bytes
    for key in bench.SPARSE_RATIOS:
        assert isinstance(ratios[key], float) and ratios[key] > 0, key
    assert {"sparse_vs_dense_decode_time_4", "sparse_vs_dense_decode_time_30"} <= set(ratios)
    assert report["sparse_decode"]["max_abs_error"] < 1e-5 and report["kv_quant"]["max_abs_error"] < 1e-5
    held = report["kv_quant"]["results"]
    assert held["float"]["bytes_held"] == 2 * 2 * 14 * 8 * 4  # K and V, 2 heads, 14 tokens, head_dim 8, float32
    # 4 bits, 14 tokens: keys 12 quantised (3 groups of 4) + 2 full; values 10 quantised + 4 full
    codes, stats = (12 + 10) * 2 * 8 * 4 // 8, (3 * 8 * 2 + 10 * 2 * 2) * 2 * 4
    assert held["4bit"]["bytes_held"] == codes + stats + (2 + 4) * 2 * 8 * 4


def test_ring_cache_benchmark_refuses_disagreeing_results(monkeypatch):
    from benchmarks import long_context

    # a window one key short (hides key i - w + 1 too); forgetting the mask altogether would not show in decoding,
    # where the ring returns exactly the window's keys
    monkeypatch.setattr(
        long_context, "sliding_window_mask_at", lambda q, k, window: k[None, :] <= q[:, None] - window + 1
    )
    with pytest.raises(AssertionError, match="disagree"):
        long_context.bench_ring_cache(TINY, "cpu", log=lambda *args: None)


def test_linear_attention_benchmark_refuses_disagreeing_results(monkeypatch):
    from benchmarks import linear_attention

    recurrence = linear_attention.recurrent_gated_delta_rule

    def without_decay(q, k, v, g, beta, *args, **kwargs):  # the recurrence with the gate left out
        return recurrence(q, k, v, torch.zeros_like(g), beta, *args, **kwargs)

    monkeypatch.setattr(linear_attention, "recurrent_gated_delta_rule", without_decay)
    with pytest.raises(AssertionError, match="disagree"):
        linear_attention.bench_linear_prefill(TINY, "cpu", log=lambda *args: None)


def test_online_softmax_benchmark_refuses_disagreeing_results(monkeypatch):
    from benchmarks import beyond

    monkeypatch.setattr(beyond, "online_softmax_attention", lambda q, k, v, **kw: (q, None))
    with pytest.raises(AssertionError, match="attention results disagree"):
        beyond.bench_online_softmax(TINY, "cpu", log=lambda *args: None)


def test_peak_bytes_sees_the_score_matrix():
    from benchmarks.beyond import naive_attention, peak_bytes

    q = torch.randn(1, 2, 64, 8)
    assert peak_bytes(lambda: naive_attention(q, q, q, causal=True), "cpu") >= 2 * 64 * 64 * 4


def test_committed_results_have_required_keys():
    """A committed results file (what the notebook shows) must have every ratio; skipped before one exists."""
    files = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
    if not files:
        pytest.skip("no committed benchmark results yet")
    for path in files:
        report = json.loads(path.read_text())
        missing = [key for key in bench.REQUIRED_RATIOS if key not in report["ratios"]]
        assert not missing, f"{path.name} lacks ratios {missing}"
        assert report["ratios"]["gqa_cache_bytes_ratio_error"] == 0.0
        assert report["decoding"]["tokens_identical"] is True
        if "online_softmax" in report or "mla_cache" in report:  # results from after notebooks 09 and 10
            missing = [key for key in bench.BEYOND_RATIOS if key not in report["ratios"]]
            assert not missing, f"{path.name} lacks ratios {missing}"
            assert report["ratios"]["gqa_vs_mla_cache_bytes_error"] == 0.0
        if "long_context" in report:  # results from after notebook 12
            missing = [key for key in bench.LONG_CONTEXT_RATIOS if key not in report["ratios"]]
            assert not missing, f"{path.name} lacks ratios {missing}"
        if "linear_decode" in report:  # results from after notebook 16
            missing = [key for key in bench.LINEAR_ATTENTION_RATIOS if key not in report["ratios"]]
            assert not missing, f"{path.name} lacks ratios {missing}"


def test_serving_benchmark_checks_and_counts_bytes():
    from benchmarks.serving import bench_paged_decode, bench_split_k, serving_ratios

    paged = bench_paged_decode(TINY, "cpu", log=lambda *args: None)
    assert paged["max_abs_error"] < 1e-5
    shape = paged["shape"]
    stored = sum(shape["prompt_lens"]) + 3 * 3
    slot = 2 * 2 * 8 * 4  # K and V, 2 kv heads, head_dim 8, float32
    assert paged["contiguous"]["bytes_reserved"] == 3 * 16 * slot
    assert paged["contiguous"]["bytes_wasted"] == (3 * 16 - stored) * slot
    assert paged["paged"]["bytes_wasted"] < 3 * 4 * slot  # under one block per sequence
    split = bench_split_k(TINY, "cpu", log=lambda *args: None)
    assert split["results"]["37"]["num_splits"] == 5 and split["results"]["37"]["split_k"]["max_abs_error"] < 1e-5
    ratios = serving_ratios({"paged_decode": paged, "split_k": split})
    assert set(ratios) == {
        "paged_vs_contiguous_tokens_per_s",
        "paged_vs_contiguous_tokens_per_s_q1",
        "paged_vs_contiguous_tokens_per_s_q3",
        "contiguous_vs_paged_bytes_wasted",
        "split_k_vs_one_pass_time_37",
    }
    assert ratios["contiguous_vs_paged_bytes_wasted"] > 1


def test_serving_benchmark_refuses_disagreeing_results(monkeypatch):
    from benchmarks import serving

    monkeypatch.setattr(serving, "split_k_attention", lambda q, k, v, **kw: (q, None))
    with pytest.raises(AssertionError, match="disagree"):
        serving.bench_split_k(TINY, "cpu", log=lambda *args: None)
    monkeypatch.setattr(serving, "paged_attention", lambda q, cache, ids: q)
    with pytest.raises(AssertionError, match="differs from the contiguous"):
        serving.bench_paged_decode(TINY, "cpu", log=lambda *args: None)


def test_flash_triton_benchmark_checks_correctness_on_the_cpu():
    """On the CPU the Triton kernel runs interpreted: the section reports its errors against PyTorch, no time."""
    # through the course's module, which sets TRITON_INTERPRET before importing triton (triton reads it then)
    if not pytest.importorskip("course_utils.reference.flash_triton").TRITON_AVAILABLE:
        pytest.skip("triton is not installed (it has wheels for Linux only)")
    from benchmarks.flash_triton import CONFIGS, bench_flash_triton, flash_triton_ratios, forward_flops, peak_tflops

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU: the section times the compiled kernel (make bench)")
    section = bench_flash_triton({"flash_triton": CONFIGS["cpu-quick"]}, "cpu", log=lambda *args: None)
    assert section["interpreted"] and set(section["results"]) == {"1x2x37x16", "1x2x37x16 causal"}
    assert all(max(errors.values()) < 2e-5 for errors in section["results"].values())
    assert flash_triton_ratios({"flash_triton": section}) == {}
    assert forward_flops(1, 1, 4, 2, causal=False) == 2 * forward_flops(1, 1, 4, 2, causal=True) == 128
    assert peak_tflops("NVIDIA H100 PCIe") == 756.0 and peak_tflops("NVIDIA H100 80GB HBM3") == 989.4
    assert peak_tflops("some other GPU") is None


def test_flash_triton_benchmark_refuses_disagreeing_results():
    from benchmarks.flash_triton import check_correct

    wrong = lambda q, k, v, causal: (q, torch.zeros(q.shape[:-1]))  # noqa: E731 - returns q, not attention
    with pytest.raises(AssertionError, match="disagree"):
        check_correct(wrong, [(1, 1, 5, 16)], torch.float32, 1e-4)


CONTEXT_PARALLEL = dict(
    context_parallel=dict(
        heads=4,
        world_sizes=[2, 4],
        seq_lens=[32],
        time_seq_len=32,
        time_world_sizes=[1, 2],
        repeats=1,
        atol=1e-5,
        timeout_s=30,
    )
)


def test_context_parallel_benchmark_counts_what_the_processes_send():
    from benchmarks.context_parallel import bench_context_parallel_bytes, bench_ring_step_time, context_parallel_ratios

    sent = bench_context_parallel_bytes(CONTEXT_PARALLEL, log=lambda *args: None)
    kv = 2 * 4 * 8 * 4  # K and V, 4 heads, head_dim 8, float32: bytes per token
    for world_size in (2, 4):
        entry = sent["results"][f"{world_size}x32"]
        assert (
            entry["ring"]["bytes_per_rank"]
            == entry["allgather"]["bytes_per_rank"]
            == (world_size - 1) * 32 // world_size * kv
        )
        assert entry["ulysses"]["bytes_per_rank"] == (world_size - 1) * 32 // world_size**2 * 2 * kv  # q,k,v,out
    steps = bench_ring_step_time(CONTEXT_PARALLEL, log=lambda *args: None)
    ratios = context_parallel_ratios({"cp_bytes": sent, "cp_ring_time": steps})
    assert set(ratios) == {
        "cp_ring_vs_ulysses_bytes_2x32",
        "cp_ring_vs_ulysses_bytes_4x32",
        "cp_ring_step_vs_sdpa_time_1",
        "cp_ring_step_vs_sdpa_time_2",
    }
    assert ratios["cp_ring_vs_ulysses_bytes_2x32"] == 1 and ratios["cp_ring_vs_ulysses_bytes_4x32"] == 2


def test_context_parallel_benchmark_refuses_a_wrong_formula(monkeypatch):
    from benchmarks import context_parallel

    monkeypatch.setattr(context_parallel, "comm_bytes_per_rank", lambda *args, **kw: 1.0)
    with pytest.raises(AssertionError, match="the formula says 1.0"):
        context_parallel.bench_context_parallel_bytes(CONTEXT_PARALLEL, log=lambda *args: None)


def test_sparse_benchmark_refuses_disagreeing_results(monkeypatch):
    from benchmarks import sparse

    # a selection that is not causal-aware: every query keeps the first top_k keys whatever their scores
    monkeypatch.setattr(sparse, "selection_mask", lambda indices, n: torch.arange(n)[None, None] >= 1)
    with pytest.raises(AssertionError, match="disagree"):
        sparse.bench_sparse_decode(TINY, "cpu", log=lambda *args: None)


def test_quantized_cache_benchmark_refuses_disagreeing_results(monkeypatch):
    from benchmarks import sparse

    real = sparse.kivi_quantize
    monkeypatch.setattr(sparse, "kivi_quantize", lambda k, v, bits, g, r: real(k, v, bits, g, 2 * r))  # wrong window
    with pytest.raises(AssertionError, match="disagrees"):
        sparse.bench_quantized_cache(TINY, "cpu", log=lambda *args: None)
