"""Multi-head latent attention (多头潜在注意力): against SDPA on explicitly built per-head keys, the absorbed form
against the explicit one, the latent cache against the full pass, and the cache's bytes."""

import re

import pytest
import torch
import torch.nn.functional as F

from course_utils import (
    GroupedQueryAttention,
    GrowingLatentKVCache,
    KVCache,
    LatentKVCache,
    MultiHeadLatentAttention,
    PreallocatedLatentKVCache,
    kv_cache_bytes,
    mla_cache_bytes,
)
from tests.conftest import causal_allow
from tests.rope_reference import complex_rope

# (d_in, d_out, num_heads, kv_latent_dim, rope_dim, q_latent_dim)
SHAPES = [
    pytest.param(6, 16, 4, 8, 4, None, id="din<dout"),
    pytest.param(20, 12, 3, 5, 2, None, id="din>dout-odd-latent"),
    pytest.param(10, 16, 2, 12, 6, 7, id="low-rank-query"),
    pytest.param(8, 24, 6, 4, 8, None, id="latent<head_dim"),
]
T, CTX = 9, 12


def build(d_in, d_out, nh, dc, r, dq, randomize, **kw):
    m = MultiHeadLatentAttention(d_in, d_out, CTX, 0.0, nh, dc, r, qkv_bias=True, q_latent_dim=dq, **kw)
    return randomize(m).double().eval()


def sdpa_mla(m, x):
    """m's function from its parameters: per-head keys [W_uk c ; RoPE(W_kr x)] and queries [q_nope ; RoPE(q_rope)],
    complex-number RoPE, and SDPA (whose default scale 1/sqrt(head_dim + rope_dim) is MLA's)."""
    b, t, _ = x.shape
    nh, hd, r = m.num_heads, m.head_dim, m.rope_dim
    xq = F.linear(x, m.W_dq.weight, m.W_dq.bias) if m.q_latent_dim else x
    q = F.linear(xq, m.W_query.weight, m.W_query.bias).view(b, t, nh, hd + r).transpose(1, 2)
    c = F.linear(x, m.W_dkv.weight, m.W_dkv.bias)  # (B, T, dc)
    k_nope = (c @ m.W_uk.weight.T).view(b, t, nh, hd).transpose(1, 2)
    v = (c @ m.W_uv.weight.T).view(b, t, nh, hd).transpose(1, 2)
    k_rope = complex_rope(F.linear(x, m.W_kr.weight, m.W_kr.bias), torch.arange(t), m.rope_base)  # (B, T, r)
    q = torch.cat([q[..., :hd], complex_rope(q[..., hd:], torch.arange(t), m.rope_base)], dim=-1)
    k = torch.cat([k_nope, k_rope[:, None].expand(b, nh, t, r)], dim=-1)  # one rope key for every head
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_allow(t, t))
    return F.linear(out.transpose(1, 2).reshape(b, t, nh * hd), m.out_proj.weight, m.out_proj.bias)


@pytest.mark.parametrize("d_in,d_out,nh,dc,r,dq", SHAPES)
@pytest.mark.parametrize("absorb", [False, True], ids=["explicit", "absorbed"])
def test_mla_matches_sdpa_on_explicit_keys(d_in, d_out, nh, dc, r, dq, absorb, randomize, close):
    m = build(d_in, d_out, nh, dc, r, dq, randomize)
    x = torch.randn(3, T, d_in, dtype=torch.float64)  # batch 3, T < context_length
    with torch.no_grad():
        close(m(x, absorb=absorb), sdpa_mla(m, x))


CHUNKINGS = [
    pytest.param([1] * T, id="token-by-token"),
    pytest.param([4, 1, 3, 1], id="chunks"),
    pytest.param([6, 3], id="prefill+chunk"),
]


@pytest.mark.parametrize("d_in,d_out,nh,dc,r,dq", SHAPES)
@pytest.mark.parametrize("chunks", CHUNKINGS)
@pytest.mark.parametrize("preallocate", [False, True])
@pytest.mark.parametrize("absorb", [False, True], ids=["explicit", "absorbed"])
def test_cached_decoding_equals_the_full_pass(
    d_in, d_out, nh, dc, r, dq, chunks, preallocate, absorb, randomize, close
):
    m = build(d_in, d_out, nh, dc, r, dq, randomize)
    x = torch.randn(2, T, d_in, dtype=torch.float64)
    cache = m.make_cache(2, preallocate=preallocate)
    outs, start = [], 0
    with torch.no_grad():
        full = m(x)  # explicit, no cache
        for n in chunks:
            outs.append(m(x[:, start : start + n], cache=cache, absorb=absorb))
            start += n
        close(torch.cat(outs, dim=1), full)
        # the cache holds the latents and the rotated shared key, nothing per head
        close(cache.c_kv[:, :T], m.W_dkv(x))
        close(cache.k_rope[:, :T], complex_rope(m.W_kr(x), torch.arange(T), m.rope_base))
    assert cache.seq_len == T


def test_absorbed_weights_fold_the_up_projections(randomize, close):
    m = build(6, 16, 4, 8, 4, None, randomize)
    w_uk, w_uv, w_out = m.absorbed_weights()
    c = torch.randn(5, 8, dtype=torch.float64)
    q = torch.randn(4, 4, dtype=torch.float64)  # one query per head, head_dim 4
    k = (c @ m.W_uk.weight.T).view(5, 4, 4)  # (tokens, heads, hd)
    close(torch.einsum("hd,thd->ht", q, k), torch.einsum("hc,tc->ht", torch.einsum("hd,hdc->hc", q, w_uk), c))
    v = c @ m.W_uv.weight.T  # (tokens, nh * hd)
    close(v @ m.out_proj.weight.T, torch.einsum("tc,ohc->to", c, w_out))  # sum over heads of W_o,h W_uv,h c
    assert w_uk.shape == w_uv.shape == (4, 4, 8) and w_out.shape == (16, 4, 8)


def test_causal_and_weights_sum_to_one(randomize):
    m = build(6, 16, 4, 8, 4, None, randomize)
    x = torch.randn(1, T, 6, dtype=torch.float64)
    y = x.clone()
    y[0, -1] += 1.0
    with torch.no_grad():
        out, weights = m(x, return_weights=True)
        torch.testing.assert_close(m(y)[0, :-1], out[0, :-1])  # later tokens do not change earlier outputs
    torch.testing.assert_close(weights.sum(-1), torch.ones(1, 4, T, dtype=torch.float64))
    assert weights.shape == (1, 4, T, T) and (weights.triu(1) == 0).all()


def test_low_precision_absorbed_close_to_float64(randomize):
    m = build(6, 16, 4, 8, 4, None, randomize)
    low = MultiHeadLatentAttention(6, 16, CTX, 0.0, 4, 8, 4, qkv_bias=True).to(torch.bfloat16).eval()
    low.load_state_dict(m.state_dict())
    x = torch.randn(2, T, 6, dtype=torch.float64)
    with torch.no_grad():
        expected = m(x)
        for absorb in (False, True):
            got = low(x.bfloat16(), absorb=absorb).double()
            torch.testing.assert_close(got, expected, atol=0.05 * expected.abs().max().item(), rtol=0.05)


# ---------------------------------------------------------------- cache bytes


@pytest.mark.parametrize("preallocate", [False, True])
def test_cache_bytes_match_the_formula_and_beat_mha(preallocate, randomize):
    m = build(8, 24, 6, 4, 8, None, randomize).float()
    x = torch.randn(2, 7, 8)
    cache = m.make_cache(2, preallocate=preallocate)
    with torch.no_grad():
        m(x, cache=cache)
    tokens = CTX if preallocate else 7
    assert cache.nbytes == mla_cache_bytes(1, 4, 8, tokens, batch_size=2, bytes_per_element=4) == 2 * tokens * 12 * 4
    assert m.cache_floats_per_token() == 12
    mha = GroupedQueryAttention(8, 24, CTX, 0.0, 6, 6)
    mha_cache = mha.make_cache(2, preallocate=preallocate)
    with torch.no_grad():
        mha(x, cache=mha_cache)
    assert mha_cache.nbytes == kv_cache_bytes(1, 6, 4, tokens, 2, 4) == 4 * cache.nbytes  # 48 vs 12 floats a token


def test_deepseek_v3_cache_numbers():
    # DeepSeek-V3: 61 layers, kv_lora_rank 512, qk_rope_head_dim 64, 128 heads of 128 (+64 rope) / value 128
    per_token = mla_cache_bytes(61, 512, 64, seq_len=1, bytes_per_element=2)
    assert per_token == 70_272  # 68.6 KiB a token in bf16
    mha_per_token = 61 * 128 * (128 + 64 + 128) * 2  # the same heads as MHA: K of 192 and V of 128 per head
    assert mha_per_token == 4_997_120 and round(mha_per_token / per_token, 1) == 71.1


def test_growing_cache_reset_and_preallocated_overflow():
    cache = GrowingLatentKVCache()
    cache.update(torch.zeros(1, 3, 4), torch.zeros(1, 3, 2))
    assert cache.seq_len == 3 and cache.nbytes == 3 * 6 * 4
    cache.reset()
    assert cache.seq_len == 0 and cache.nbytes == 0
    pre = PreallocatedLatentKVCache(1, 4, kv_latent_dim=4, rope_dim=2)
    pre.update(torch.zeros(1, 3, 4), torch.zeros(1, 3, 2))
    with pytest.raises(ValueError, match="latent cache overflow: it holds 4 tokens, 3 are cached"):
        pre.update(torch.zeros(1, 2, 4), torch.zeros(1, 2, 2))


# ---------------------------------------------------------------- errors


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match=re.escape("d_out (10) and num_heads (4)")):
        MultiHeadLatentAttention(4, 10, 8, 0.0, 4, 8, 4)
    with pytest.raises(ValueError, match="rope_dim must be even"):
        MultiHeadLatentAttention(4, 8, 8, 0.0, 2, 8, 3)
    with pytest.raises(ValueError, match="kv_latent_dim must be a positive int"):
        MultiHeadLatentAttention(4, 8, 8, 0.0, 2, 0, 4)
    with pytest.raises(ValueError, match="q_latent_dim must be None or a positive int"):
        MultiHeadLatentAttention(4, 8, 8, 0.0, 2, 8, 4, q_latent_dim=0)
    m = MultiHeadLatentAttention(4, 8, 6, 0.0, 2, 8, 4)
    with pytest.raises(ValueError, match="d_in=4"):
        m(torch.randn(1, 3, 5))
    cache = m.make_cache(1)
    m(torch.randn(1, 4, 4), cache=cache)
    with pytest.raises(ValueError, match="4 cached \\+ 3 new tokens exceed context_length=6"):
        m(torch.randn(1, 3, 4), cache=cache)
    with pytest.raises(ValueError, match="LatentKVCache holds \\(batch=1"):
        m(torch.randn(2, 1, 4), cache=cache)
    with pytest.raises(ValueError, match="for the same tokens"):
        GrowingLatentKVCache().update(torch.zeros(1, 3, 4), torch.zeros(1, 2, 2))
    with pytest.raises(ValueError, match=re.escape("LatentKVCache holds (batch=1, kv_latent_dim=4, rope_dim=2)")):
        PreallocatedLatentKVCache(1, 4, 4, 2).update(torch.zeros(1, 1, 4), torch.zeros(1, 1, 3))


@pytest.mark.parametrize("preallocate", [False, True])
def test_latent_caches_belong_to_the_cache_family(preallocate):
    cache = MultiHeadLatentAttention(4, 8, 6, 0.0, 2, 8, 4).make_cache(1, preallocate=preallocate)
    assert isinstance(cache, LatentKVCache) and isinstance(cache, KVCache)
    assert type(cache) is (PreallocatedLatentKVCache if preallocate else GrowingLatentKVCache)
