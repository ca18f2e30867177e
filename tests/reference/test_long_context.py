"""Long context (notebook 12): sliding-window masks, the ring-buffer cache, attention sinks, RoPE scaling.

Every check is against an independent formulation: masks from Hugging Face's rule written as a loop, attention from
``F.scaled_dot_product_attention`` with an explicit mask, RoPE from tests/rope_reference.py (complex numbers), and
the RoPE-scaling formulas transcribed afresh in plain Python floats (Hugging Face's rope-init functions, Meta's
``apply_scaling``). The functions take their cases as arguments so that tests/reference/test_long_context_mutants.py
can run them against deliberately broken references.
"""

import math

import pytest
import torch
import torch.nn.functional as F

import course_utils.reference.sliding_window as sw
from course_utils import apply_rope, attend, rope, rope_inv_freq
from course_utils.reference import rope_scaling as rs
from tests.rope_reference import complex_rope

B, H, HD = 2, 3, 8


def hf_window_allow(num_queries, num_keys, window, num_sinks=0):
    """Hugging Face's rule, one entry at a time: causal (kv <= q) and sliding_window_overlay (kv > q - window);
    StreamingLLM's sinks: the first num_sinks keys are also visible (still causally)."""
    allow = torch.zeros(num_queries, num_keys, dtype=torch.bool)
    for qi in range(num_queries):
        q = num_keys - num_queries + qi
        for k in range(num_keys):
            allow[qi, k] = k <= q and (k > q - window or k < num_sinks)
    return allow


@pytest.mark.parametrize(
    "num_queries, num_keys, window, num_sinks",
    [
        (7, 7, 3, 0),  # the window does not divide T
        (7, 7, 1, 0),  # only itself
        (7, 7, 7, 0),  # window == T: plain causal
        (5, 5, 9, 0),  # window > T
        (3, 11, 4, 0),  # queries at the end of a longer key sequence (a cache)
        (9, 9, 3, 2),  # with two sinks
        (1, 12, 5, 1),  # one decoding query, one sink
    ],
)
def test_sliding_window_mask_is_huggingface_rule(num_queries, num_keys, window, num_sinks):
    hide = sw.sliding_window_mask(num_queries, num_keys, window=window, num_sinks=num_sinks)
    assert hide.dtype == torch.bool and hide.shape == (num_queries, num_keys)
    assert torch.equal(~hide, hf_window_allow(num_queries, num_keys, window, num_sinks))
    visible = (~hide).sum(-1)
    if num_sinks == 0:  # a query sees exactly min(window, keys up to itself)
        expected = [min(window, num_keys - num_queries + i + 1) for i in range(num_queries)]
        assert visible.tolist() == expected


def test_window_none_is_causal():
    assert torch.equal(sw.sliding_window_mask(4, 9, window=None), torch.ones(4, 9, dtype=torch.bool).triu(6))


def explicit_allow(T, window, num_sinks=0):
    """True = may attend, with tril: lower triangle minus everything `window` or more diagonals below."""
    ones = torch.ones(T, T, dtype=torch.bool)
    allow = torch.tril(ones) & ~torch.tril(ones, diagonal=-window)
    allow[:, :num_sinks] |= torch.tril(ones)[:, :num_sinks]
    return allow


@pytest.mark.parametrize("T, window, num_sinks", [(13, 4, 0), (13, 5, 2), (16, 16, 0), (10, 1, 0), (11, 3, 1)])
def test_sliding_window_attention_equals_sdpa_float64(T, window, num_sinks):
    q, k, v = (torch.randn(B, H, T, HD, dtype=torch.float64) for _ in range(3))
    ours, weights = attend(q, k, v, sw.sliding_window_mask(T, window=window, num_sinks=num_sinks))
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=explicit_allow(T, window, num_sinks))
    torch.testing.assert_close(ours, expected, atol=1e-10, rtol=1e-10)
    assert torch.equal(weights[0, 0] > 0, explicit_allow(T, window, num_sinks))


def decode_with_ring_cache(q, k, v, window, num_sinks, chunks):
    """Feed q, k, v (B, H, T, hd) through a RingKVCache chunk by chunk, RoPE applied before caching."""
    cache = sw.RingKVCache(q.shape[0], q.shape[1], window, q.shape[3], num_sinks=num_sinks, dtype=q.dtype)
    outs, start = [], 0
    for n in chunks:
        positions = cache.next_positions(n)
        q_new = rope(q[:, :, start : start + n], positions)
        k_new = rope(k[:, :, start : start + n], positions)
        keys, values = cache.update(k_new, v[:, :, start : start + n])
        hide = sw.sliding_window_mask_at(positions, cache.key_positions, window=window, num_sinks=num_sinks)
        outs.append(attend(q_new, keys, values, hide)[0])
        start += n
    return torch.cat(outs, dim=2), cache


def full_recompute(q, k, v, window, num_sinks):
    """The whole sequence at once: independent RoPE (complex numbers) and SDPA with an explicit mask."""
    positions = torch.arange(q.shape[2])
    qr, kr = complex_rope(q, positions), complex_rope(k, positions)
    return F.scaled_dot_product_attention(qr, kr, v, attn_mask=explicit_allow(q.shape[2], window, num_sinks))


RING_CASES = [  # window, num_sinks, chunks
    (4, 0, [1] * 15),  # decode only: the ring wraps three times
    (5, 0, [11, 1, 1, 3, 1]),  # prefill longer than the window, then decode and a chunk
    (3, 2, [1] * 14),  # sinks, decode only
    (4, 2, [9, 2, 1, 1, 4]),  # sinks, prefill past sinks + window
    (6, 0, [2, 2, 2, 2, 2, 1]),  # chunks that do not divide the window
    (3, 3, [2, 2, 1, 5, 1, 1]),  # a chunk that straddles the last sink and the ring
]


@pytest.mark.parametrize("window, num_sinks, chunks", RING_CASES)
def test_ring_cache_decode_equals_full_recompute(window, num_sinks, chunks):
    T = sum(chunks)
    q, k, v = (torch.randn(B, H, T, HD, dtype=torch.float64) for _ in range(3))
    ours, cache = decode_with_ring_cache(q, k, v, window, num_sinks, chunks)
    torch.testing.assert_close(ours, full_recompute(q, k, v, window, num_sinks), atol=1e-10, rtol=1e-10)
    assert cache.seq_len == min(T, num_sinks + window)


@pytest.mark.parametrize("window, num_sinks", [(4, 0), (3, 2)])
def test_ring_cache_memory_is_constant_and_returns_the_window(window, num_sinks):
    """A decoding step writes, then returns the held slots in slot order: exactly the sinks and the window. A chunk
    reads the held keys oldest first, then appends its own."""
    cache = sw.RingKVCache(1, 1, window, 2, num_sinks=num_sinks, dtype=torch.float64)
    bytes_at_start = cache.nbytes
    assert bytes_at_start == 2 * (window + num_sinks) * 2 * 8
    t = 0
    for n in [1] * (4 * window + num_sinks) + [2, 1, 3, 1, 1]:
        new = torch.arange(t, t + n, dtype=torch.float64).view(1, 1, n, 1).expand(1, 1, n, 2)  # key = position
        keys, values = cache.update(new, -new)
        last = t + n - 1
        assert cache.nbytes == bytes_at_start
        assert torch.equal(keys[0, 0, :, 0].long(), cache.key_positions)  # the right key at each position
        assert torch.equal(values, -keys)
        sinks = set(range(min(last + 1, num_sinks)))
        if n == 1:  # the sinks and the window i - w + 1 .. i, nothing the mask must hide
            window_keys = set(range(max(num_sinks, t - window + 1), t + 1))
            assert sorted(cache.key_positions.tolist()) == sorted(sinks | window_keys)
        else:  # sinks, then the held ring, oldest first, then the new keys
            held = set(range(max(num_sinks, t - window), t))
            assert cache.key_positions.tolist() == sorted(sinks | held | set(range(t, t + n)))
        t += n


def test_ring_cache_decoding_step_copies_nothing():
    """One new token: one slot written, then the held slots returned as views of the cache's buffer (no gather, no
    cat): what keeps the ring's decoding at least as fast as a growing cache's (make bench measures it)."""
    cache = sw.RingKVCache(1, 2, 4, 8, num_sinks=1)
    cache.update(torch.randn(1, 2, 7, 8), torch.randn(1, 2, 7, 8))  # a prefill past the wrap-around
    keys, values = cache.update(torch.randn(1, 2, 1, 8), torch.randn(1, 2, 1, 8))
    assert keys.untyped_storage().data_ptr() == cache.keys.untyped_storage().data_ptr()
    assert values.untyped_storage().data_ptr() == cache.values.untyped_storage().data_ptr()
    assert sorted(cache.key_positions.tolist()) == [0, 4, 5, 6, 7]  # the sink and the window, nothing to hide


def test_sink_logit_equals_sdpa_with_a_zero_value_key():
    """gpt-oss's sink = one extra key whose score is the sink logit and whose value is zero."""
    Sq, Sk = 5, 7
    q, k, v = (torch.randn(B, H, n, HD, dtype=torch.float64) for n in (Sq, Sk, Sk))
    sinks = torch.tensor([-1.0, 0.5, 3.0], dtype=torch.float64)
    hide = sw.sliding_window_mask(Sq, Sk, window=3)
    ours, weights = sw.attend_with_sink_logit(q, k, v, sinks, hide)
    k_extra = torch.cat([k, torch.zeros(B, H, 1, HD, dtype=torch.float64)], dim=2)
    v_extra = torch.cat([v, torch.zeros(B, H, 1, HD, dtype=torch.float64)], dim=2)
    bias = torch.zeros(B, H, Sq, Sk + 1, dtype=torch.float64)
    bias[..., :Sk] = bias[..., :Sk].masked_fill(hide, float("-inf"))
    bias[..., Sk] = sinks[:, None]  # q . 0 + sink
    expected = F.scaled_dot_product_attention(q, k_extra, v_extra, attn_mask=bias)
    torch.testing.assert_close(ours, expected, atol=1e-10, rtol=1e-10)
    # each row keeps 1 - (sink's share) for the real keys, and a -inf sink changes nothing
    scores = (q @ k.transpose(-2, -1) / math.sqrt(HD)).masked_fill(hide, float("-inf"))
    share = sinks.exp()[:, None] / (scores.exp().sum(-1) + sinks.exp()[:, None])
    torch.testing.assert_close(weights.sum(-1), 1 - share, atol=1e-12, rtol=1e-12)
    no_sink, _ = sw.attend_with_sink_logit(q, k, v, torch.full((H,), float("-inf"), dtype=torch.float64), hide)
    torch.testing.assert_close(no_sink, attend(q, k, v, hide)[0], atol=1e-12, rtol=1e-12)


def test_layer_windows_and_cache_bytes():
    assert sw.layer_windows(12, 1024, 5) == ([1024] * 5 + [None]) * 2  # Gemma 3's 5 local : 1 global
    assert sw.layer_windows(4, 128, 1) == [128, None, 128, None]  # gpt-oss alternates
    windows = sw.layer_windows(12, 1024, 5)
    full = sw.sliding_window_cache_bytes([None] * 12, 8, 128, 32768)
    mixed = sw.sliding_window_cache_bytes(windows, 8, 128, 32768)
    assert full == 2 * 12 * 8 * 128 * 32768 * 2
    assert mixed == 2 * 8 * 128 * (10 * 1024 + 2 * 32768) * 2
    short = 500  # shorter than every window: local layers cost as much as global ones
    all_global = sw.sliding_window_cache_bytes([None] * 12, 8, 128, short)
    assert sw.sliding_window_cache_bytes(windows, 8, 128, short) == all_global


@pytest.mark.parametrize(
    "bad, match",
    [
        (lambda: sw.sliding_window_mask(4, window=0), "window must be a positive int"),
        (lambda: sw.sliding_window_mask(5, 3, window=2), "cannot follow"),
        (lambda: sw.RingKVCache(1, 1, None, 4), "needs a window"),
        (lambda: sw.RingKVCache(1, 2, 3, 4).update(torch.zeros(1, 1, 1, 4), torch.zeros(1, 1, 1, 4)), "num_kv_heads=2"),
        (
            lambda: sw.attend_with_sink_logit(*(torch.randn(1, 2, 3, 4) for _ in range(3)), torch.zeros(3)),
            "one logit per head",
        ),
        (lambda: rs.yarn_inv_freq(8, factor=0.5, original_max_position_embeddings=64), "factor must be a number >= 1"),
        (lambda: rs.scaled_rope_cos_sin(torch.tensor([0.5]), torch.ones(2)), "positions must be integers"),
    ],
)
def test_bad_input_is_named(bad, match):
    with pytest.raises(ValueError, match=match):
        bad()


# ---- RoPE scaling: Hugging Face's rope-init formulas, transcribed afresh with Python floats


def theta(d, base):
    return [base ** (-(2 * i) / d) for i in range(d // 2)]


def hf_yarn(d, base, s, L, beta_fast=32, beta_slow=1):
    def dim(rot):
        return d * math.log(L / (rot * 2 * math.pi)) / (2 * math.log(base))

    low, high = max(math.floor(dim(beta_fast)), 0), min(math.ceil(dim(beta_slow)), d - 1)
    out = []
    for i, t in enumerate(theta(d, base)):
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)
        extrapolation_factor = 1 - ramp
        out.append(t / s * (1 - extrapolation_factor) + t * extrapolation_factor)
    return out, 0.1 * math.log(s) + 1


def meta_llama31_apply_scaling(d, base, factor=8, low_freq_factor=1, high_freq_factor=4, old_context_len=8192):
    out = []
    for t in theta(d, base):
        wavelen = 2 * math.pi / t
        if wavelen < old_context_len / high_freq_factor:
            out.append(t)
        elif wavelen > old_context_len / low_freq_factor:
            out.append(t / factor)
        else:
            smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append((1 - smooth) * t / factor + smooth * t)
    return out


def as64(values):
    return torch.tensor(values, dtype=torch.float64)


@pytest.mark.parametrize("d, base, s, L", [(128, 10000.0, 4.0, 4096), (64, 10000.0, 8.0, 2048), (16, 500.0, 2.0, 64)])
def test_yarn_matches_huggingface_formula(d, base, s, L):
    inv_freq, attention_factor = rs.yarn_inv_freq(d, base, s, original_max_position_embeddings=L, dtype=torch.float64)
    expected, expected_factor = hf_yarn(d, base, s, L)
    torch.testing.assert_close(inv_freq, as64(expected), atol=0, rtol=1e-12)
    assert attention_factor == pytest.approx(expected_factor, rel=1e-15)
    low, high = rs.yarn_correction_range(d, base, L)
    t = as64(theta(d, base))
    torch.testing.assert_close(inv_freq[:low], t[:low], atol=0, rtol=1e-12)  # fast pairs: untouched
    torch.testing.assert_close(inv_freq[high:], t[high:] / s, atol=0, rtol=1e-12)  # slow pairs: interpolated


def test_yarn_numbers_for_a_llama2_like_head():
    # head_dim 128, base 10000, trained on 4096 tokens, extended 4x: the ramp runs over pairs 20 to 46
    assert rs.yarn_correction_range(128, 10000.0, 4096) == (20, 46)
    _, attention_factor = rs.yarn_inv_freq(128, 10000.0, 4.0, original_max_position_embeddings=4096)
    assert attention_factor == pytest.approx(1.1386294361, abs=1e-10)


def test_llama3_matches_meta_apply_scaling():
    inv_freq, attention_factor = rs.llama3_inv_freq(128, 500000.0, dtype=torch.float64)
    torch.testing.assert_close(inv_freq, as64(meta_llama31_apply_scaling(128, 500000.0)), atol=0, rtol=1e-12)
    assert attention_factor == 1.0
    ratio = rope_inv_freq(128, 500000.0, dtype=torch.float64) / inv_freq
    # Llama 3.1 (head_dim 128, base 500000): 29 pairs kept, 29 divided by 8, 6 smoothed in between
    kept, divided = int((ratio == 1).sum()), int((ratio - 8).abs().lt(1e-12).sum())
    assert (kept, divided, 64 - kept - divided) == (29, 29, 6)


def test_linear_scaling_is_position_interpolation():
    d, s = 16, 4.0
    x = torch.randn(2, 9, d, dtype=torch.float64)
    positions = torch.arange(0, 36, 4)
    inv_freq, _ = rs.linear_scaling_inv_freq(d, 10000.0, s, dtype=torch.float64)
    cos, sin = rs.scaled_rope_cos_sin(positions, inv_freq, dtype=torch.float64)

    torch.testing.assert_close(apply_rope(x, cos, sin), complex_rope(x, positions / s), atol=1e-12, rtol=1e-12)


def test_ntk_scaling_interpolates_the_slowest_pair_by_the_factor():
    d, base, s = 64, 10000.0, 8.0
    inv_freq, _ = rs.ntk_scaling_inv_freq(d, base, s, dtype=torch.float64)
    t = as64(theta(d, base))
    expected_base = base * s ** (d / (d - 2))
    torch.testing.assert_close(inv_freq, as64(theta(d, expected_base)), atol=0, rtol=1e-12)
    assert inv_freq[0] == t[0]  # the fastest pair is untouched
    assert inv_freq[-1].item() == pytest.approx(t[-1].item() / s, rel=1e-12)  # the slowest: exactly / s


def test_attention_factor_scales_scores_by_its_square():
    inv_freq, factor = rs.yarn_inv_freq(16, 10000.0, 4.0, original_max_position_embeddings=64, dtype=torch.float64)
    q, k = torch.randn(1, 5, 16, dtype=torch.float64), torch.randn(1, 5, 16, dtype=torch.float64)

    plain = rs.scaled_rope_cos_sin(torch.arange(5), inv_freq, dtype=torch.float64)
    scaled = rs.scaled_rope_cos_sin(torch.arange(5), inv_freq, factor, dtype=torch.float64)
    s_plain = apply_rope(q, *plain) @ apply_rope(k, *plain).transpose(-2, -1)
    s_scaled = apply_rope(q, *scaled) @ apply_rope(k, *scaled).transpose(-2, -1)
    torch.testing.assert_close(s_scaled, factor**2 * s_plain, atol=1e-12, rtol=1e-12)
