"""RoPE (旋转位置编码): against complex multiplication, the relative-position property, the two layouts and their
conversion, and RoPE inside GroupedQueryAttention with the KV cache (cached decoding == the full pass)."""

import re

import pytest
import torch
import torch.nn.functional as F

from course_utils import (
    GroupedQueryAttention,
    GrowingKVCache,
    MultiHeadAttention,
    PreallocatedKVCache,
    apply_rope,
    half_to_interleaved,
    interleaved_to_half,
    rope,
    rope_cos_sin,
    rope_inv_freq,
    rope_positions,
    rotate_every_two,
    rotate_half,
    to_nn_multihead,
)
from tests.conftest import causal_allow
from tests.rope_reference import complex_rope, frequencies

LAYOUTS = [pytest.param(False, id="rotate-half"), pytest.param(True, id="interleaved")]


# ---------------------------------------------------------------- the rotation itself


@pytest.mark.parametrize("interleaved", LAYOUTS)
@pytest.mark.parametrize("head_dim,base", [(2, 10000.0), (8, 10000.0), (16, 500000.0), (6, 100.0)])
def test_rope_equals_complex_multiplication(interleaved, head_dim, base):
    x = torch.randn(2, 3, 7, head_dim, dtype=torch.float64)  # (B, heads, T, hd)
    positions = torch.tensor([0, 1, 2, 5, 17, 100, 4095])
    cos, sin = rope_cos_sin(positions, head_dim, base, interleaved=interleaved, dtype=torch.float64)
    torch.testing.assert_close(
        apply_rope(x, cos, sin, interleaved=interleaved),
        complex_rope(x, positions, base, interleaved),
        atol=1e-6,
        rtol=1e-6,
    )


def test_inv_freq_and_tables():
    torch.testing.assert_close(rope_inv_freq(8, 10000.0).double(), frequencies(8, 10000.0))
    cos, sin = rope_cos_sin(5, 8)
    assert cos.shape == sin.shape == (5, 8) and cos.dtype == torch.float32
    torch.testing.assert_close(cos[0], torch.ones(8))  # position 0: no rotation
    torch.testing.assert_close(cos[:, :4], cos[:, 4:])  # rotate half: the frequencies twice, one after the other
    cos_i, _ = rope_cos_sin(5, 8, interleaved=True)
    torch.testing.assert_close(cos_i[:, 0::2], cos_i[:, 1::2])  # interleaved: each frequency twice in a row
    torch.testing.assert_close(cos_i[:, 0::2], cos[:, :4])


@pytest.mark.parametrize("start", [0, 1, 7, 1000])
def test_tables_for_a_start_offset_are_rows_of_the_full_table(start):
    cos_all, sin_all = rope_cos_sin(start + 6, 8, dtype=torch.float64)
    cos, sin = rope_cos_sin(rope_positions(start, 6), 8, dtype=torch.float64)
    torch.testing.assert_close(cos, cos_all[start:])
    torch.testing.assert_close(sin, sin_all[start:])


def test_per_sequence_positions_broadcast_over_heads():
    x = torch.randn(2, 3, 4, 8, dtype=torch.float64)
    positions = torch.tensor([[0, 1, 2, 3], [5, 6, 7, 8]])  # e.g. a left-padded batch
    cos, sin = rope_cos_sin(positions, 8, dtype=torch.float64)
    assert cos.shape == (2, 4, 8)
    torch.testing.assert_close(apply_rope(x, cos, sin), complex_rope(x, positions))


@pytest.mark.parametrize("interleaved", LAYOUTS)
def test_rotation_keeps_norms_and_position_zero_is_identity(interleaved):
    x = torch.randn(4, 10, 16, dtype=torch.float64)
    y = rope(x, torch.arange(10) * 37, interleaved=interleaved)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(rope(x[:, :1], torch.zeros(1, dtype=torch.long), interleaved=interleaved), x[:, :1])


def test_quarter_turns():
    x = torch.arange(1.0, 7.0)
    assert rotate_half(x).tolist() == [-4.0, -5.0, -6.0, 1.0, 2.0, 3.0]
    assert rotate_every_two(x).tolist() == [-2.0, 1.0, -4.0, 3.0, -6.0, 5.0]
    torch.testing.assert_close(rotate_half(rotate_half(x)), -x)  # two quarter turns = half a turn


@pytest.mark.parametrize("interleaved", LAYOUTS)
@pytest.mark.parametrize("shift", [1, 13, 1000])
def test_scores_depend_only_on_the_relative_position(interleaved, shift):
    q, k = torch.randn(8, 16, dtype=torch.float64), torch.randn(8, 16, dtype=torch.float64)
    m, n = torch.tensor([5, 0, 3, 7, 2, 9, 4, 6]), torch.tensor([1, 0, 3, 2, 8, 6, 4, 5])
    scores = (rope(q, m, interleaved=interleaved) * rope(k, n, interleaved=interleaved)).sum(-1)
    shifted = (rope(q, m + shift, interleaved=interleaved) * rope(k, n + shift, interleaved=interleaved)).sum(-1)
    torch.testing.assert_close(shifted, scores, atol=1e-9, rtol=1e-9)
    # and they do depend on it: the same pairs at other distances score differently
    other = (rope(q, m + shift, interleaved=interleaved) * rope(k, n, interleaved=interleaved)).sum(-1)
    assert not torch.allclose(other, scores, atol=1e-3)


# ---------------------------------------------------------------- the two layouts


def test_layout_conversion_is_a_permutation_and_inverts():
    x = torch.arange(8.0)
    assert interleaved_to_half(x).tolist() == [0.0, 2.0, 4.0, 6.0, 1.0, 3.0, 5.0, 7.0]
    assert half_to_interleaved(interleaved_to_half(x)).tolist() == x.tolist()
    y = torch.randn(3, 4, 10)
    torch.testing.assert_close(interleaved_to_half(half_to_interleaved(y, dim=1), dim=1), y)


@pytest.mark.parametrize("head_dim", [2, 8, 64])
def test_rotate_half_of_converted_features_equals_converted_interleaved(head_dim):
    x = torch.randn(2, 5, head_dim, dtype=torch.float64)
    positions = torch.arange(3, 8)
    torch.testing.assert_close(
        rope(interleaved_to_half(x), positions), interleaved_to_half(rope(x, positions, interleaved=True))
    )
    # without the conversion the layouts disagree (for head_dim > 2): the pairing is a real choice
    if head_dim > 2:
        assert not torch.allclose(rope(x, positions), rope(x, positions, interleaved=True), atol=1e-3)


def test_converting_a_checkpoint_permutes_query_and_key_rows_per_head(randomize):
    """An interleaved-layout checkpoint, its W_query / W_key rows permuted per head, computes the same function
    in GroupedQueryAttention's rotate-half layout (what Hugging Face's Llama conversion script does)."""
    nh, ng, hd, d_in, t = 4, 2, 8, 6, 7
    m = randomize(GroupedQueryAttention(d_in, nh * hd, 10, 0.0, nh, ng, rope=True)).double().eval()
    x = torch.randn(2, t, d_in, dtype=torch.float64)
    # the interleaved "original" weights are those that, converted, give m's weights
    w_q = half_to_interleaved(m.W_query.weight.view(nh, hd, d_in), dim=1).reshape(nh * hd, d_in)
    w_k = half_to_interleaved(m.W_key.weight.view(ng, hd, d_in), dim=1).reshape(ng * hd, d_in)
    q = (x @ w_q.T).view(2, t, nh, hd).transpose(1, 2)
    k = (x @ w_k.T).view(2, t, ng, hd).transpose(1, 2)
    v = m.W_value(x).view(2, t, ng, hd).transpose(1, 2)
    q, k = complex_rope(q, torch.arange(t), interleaved=True), complex_rope(k, torch.arange(t), interleaved=True)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    expected = m.out_proj(out.transpose(1, 2).reshape(2, t, nh * hd))
    with torch.no_grad():
        torch.testing.assert_close(m(x), expected)


# ---------------------------------------------------------------- RoPE in GroupedQueryAttention


def sdpa_rope_attention(m, x, positions):
    """m's function with RoPE, from m's parameters: complex-number RoPE on Q and K (not V), then SDPA."""
    b, t, _ = x.shape
    nh, ng, hd = m.num_heads, m.num_kv_groups, m.head_dim
    q = F.linear(x, m.W_query.weight, m.W_query.bias).view(b, t, nh, hd).transpose(1, 2)
    k = F.linear(x, m.W_key.weight, m.W_key.bias).view(b, t, ng, hd).transpose(1, 2)
    v = F.linear(x, m.W_value.weight, m.W_value.bias).view(b, t, ng, hd).transpose(1, 2)
    q, k = complex_rope(q, positions, m.rope_base), complex_rope(k, positions, m.rope_base)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_allow(t, t), enable_gqa=ng != nh)
    return F.linear(out.transpose(1, 2).reshape(b, t, nh * hd), m.out_proj.weight, m.out_proj.bias)


# (d_in, d_out, num_heads, num_kv_groups): d_in < d_out, d_in > d_out, MHA, GQA, MQA
SHAPES = [
    pytest.param(6, 16, 4, 4, id="mha-din<dout"),
    pytest.param(20, 16, 4, 2, id="gqa-din>dout"),
    pytest.param(8, 24, 6, 1, id="mqa"),
    pytest.param(5, 12, 3, 3, id="hd4"),
]


@pytest.mark.parametrize("d_in,d_out,nh,ng", SHAPES)
@pytest.mark.parametrize("use_sdpa", [False, True])
def test_rope_attention_matches_complex_rope_and_sdpa(d_in, d_out, nh, ng, use_sdpa, randomize, close):
    m = (
        randomize(
            GroupedQueryAttention(
                d_in, d_out, 12, 0.0, nh, ng, qkv_bias=True, rope=True, rope_base=100.0, use_sdpa=use_sdpa
            )
        )
        .double()
        .eval()
    )
    x = torch.randn(3, 9, d_in, dtype=torch.float64)  # batch 3, 9 tokens < context_length 12
    with torch.no_grad():
        close(m(x), sdpa_rope_attention(m, x, torch.arange(9)))


T, CTX = 9, 12
CHUNKINGS = [
    pytest.param([1] * T, id="token-by-token"),
    pytest.param([4, 1, 3, 1], id="chunks"),
    pytest.param([6, 3], id="prefill+chunk"),
]


@pytest.mark.parametrize("d_in,d_out,nh,ng", SHAPES)
@pytest.mark.parametrize("chunks", CHUNKINGS)
@pytest.mark.parametrize("preallocate", [False, True])
def test_cached_rope_decoding_equals_the_full_pass(d_in, d_out, nh, ng, chunks, preallocate, randomize, close):
    m = randomize(GroupedQueryAttention(d_in, d_out, CTX, 0.0, nh, ng, rope=True)).double().eval()
    x = torch.randn(2, T, d_in, dtype=torch.float64)
    cache = m.make_cache(2, preallocate=preallocate)
    assert isinstance(cache, PreallocatedKVCache if preallocate else GrowingKVCache)
    outs, start = [], 0
    with torch.no_grad():
        full = m(x)
        for n in chunks:
            outs.append(m(x[:, start : start + n], cache=cache))
            start += n
    close(torch.cat(outs, dim=1), full)
    # the cache holds keys already rotated to their positions, and values never rotated
    keys = cache.keys[:, :, :T]
    k = m.W_key(x).view(2, T, ng, d_out // nh).transpose(1, 2)
    close(keys, complex_rope(k, torch.arange(T)))
    close(cache.values[:, :, :T], m.W_value(x).view(2, T, ng, d_out // nh).transpose(1, 2))


def test_cached_rope_with_sdpa_path(randomize, close):
    m = randomize(GroupedQueryAttention(6, 16, CTX, 0.0, 4, 2, rope=True, use_sdpa=True)).double().eval()
    x = torch.randn(2, T, 6, dtype=torch.float64)
    cache = m.make_cache(2)
    with torch.no_grad():
        close(torch.cat([m(x[:, :5], cache=cache), m(x[:, 5:], cache=cache)], dim=1), m(x))


def test_shifting_every_position_changes_nothing(randomize, close):
    """Relative positions only: the module at positions 100 ... gives the outputs it gives at 0 ..."""
    m = randomize(GroupedQueryAttention(6, 16, CTX, 0.0, 4, 2, rope=True)).double().eval()
    x = torch.randn(2, T, 6, dtype=torch.float64)
    with torch.no_grad():
        close(m(x, positions=torch.arange(100, 100 + T)), m(x))
        close(m(x, positions=torch.arange(T).expand(2, T) + torch.tensor([[0], [50]])), m(x))
        assert not torch.allclose(m(x, positions=torch.arange(T) * 2), m(x), atol=1e-4)


def test_rope_changes_the_output_and_off_is_unchanged(randomize):
    """Without RoPE attention is blind to order; the option changes that, and off keeps the old module."""
    plain = randomize(GroupedQueryAttention(6, 16, CTX, 0.0, 4, 2, causal=False)).double().eval()
    roped = GroupedQueryAttention(6, 16, CTX, 0.0, 4, 2, causal=False, rope=True).double().eval()
    roped.load_state_dict(plain.state_dict())  # the same parameters and buffers: RoPE adds none
    x = torch.randn(1, T, 6, dtype=torch.float64)
    perm = torch.randperm(T)
    with torch.no_grad():
        torch.testing.assert_close(plain(x[:, perm]), plain(x)[:, perm])  # permutation equivariant
        assert not torch.allclose(roped(x[:, perm]), roped(x)[:, perm], atol=1e-4)
    assert GroupedQueryAttention(6, 16, CTX, 0.0, 4, 2).rope is False


def test_rope_in_bfloat16_is_close_to_float64(randomize):
    m = randomize(GroupedQueryAttention(6, 16, CTX, 0.0, 4, 2, rope=True)).double().eval()
    low = GroupedQueryAttention(6, 16, CTX, 0.0, 4, 2, rope=True).to(torch.bfloat16).eval()
    low.load_state_dict(m.state_dict())
    x = torch.randn(2, T, 6, dtype=torch.float64)
    with torch.no_grad():
        expected = m(x)
        torch.testing.assert_close(
            low(x.bfloat16()).double(), expected, atol=0.05 * expected.abs().max().item(), rtol=0.05
        )


# ---------------------------------------------------------------- errors


def test_rope_errors():
    with pytest.raises(ValueError, match=re.escape("head_dim = d_out // num_heads = 3 must be even")):
        GroupedQueryAttention(4, 12, 8, 0.0, 4, 2, rope=True)
    with pytest.raises(ValueError, match="rope_base must be > 1"):
        GroupedQueryAttention(4, 8, 8, 0.0, 2, 1, rope=True, rope_base=1.0)
    m = GroupedQueryAttention(4, 8, 8, 0.0, 2, 1, rope=True)
    with pytest.raises(ValueError, match=re.escape("positions must have shape (3,) or (2, 3)")):
        m(torch.randn(2, 3, 4), positions=torch.arange(4))
    with pytest.raises(ValueError, match="only used with RoPE"):
        GroupedQueryAttention(4, 8, 8, 0.0, 2, 1)(torch.randn(1, 3, 4), positions=torch.arange(3))
    cross = GroupedQueryAttention(4, 8, 8, 0.0, 2, 1, causal=False, rope=True)
    with pytest.raises(ValueError, match="rope=True is for self-attention"):
        cross(torch.randn(1, 3, 4), torch.randn(1, 5, 4))
    with pytest.raises(ValueError, match="head_dim must be a positive even int, got 7"):
        rope_cos_sin(4, 7)
    with pytest.raises(ValueError, match="positions must be integers"):
        rope_cos_sin(torch.tensor([0.0, 1.0]), 8)
    cos, sin = rope_cos_sin(4, 16)
    with pytest.raises(ValueError, match=re.escape("tables are for head_dim=16, but x has head_dim=8")):
        apply_rope(torch.randn(2, 4, 8), cos, sin)
    with pytest.raises(ValueError, match="cover 4 positions, but x has 3 tokens"):
        apply_rope(torch.randn(2, 3, 16), cos, sin)
    with pytest.raises(ValueError, match="start >= 0"):
        rope_positions(-1, 3)
    with pytest.raises(ValueError, match="no rotary position embedding"):
        to_nn_multihead(MultiHeadAttention(4, 8, 8, 0.0, 2, rope=True))
