"""KV cache (KV 缓存): decoding token by token or in chunks equals one full forward pass."""

import pytest
import torch
import torch.nn.functional as F

from course_utils import (
    GroupedQueryAttention,
    GrowingKVCache,
    MultiHeadAttention,
    PreallocatedKVCache,
    kv_cache_bytes,
    padding_mask,
)

T, CTX, D_IN, D_OUT = 8, 10, 6, 12

# (num_heads, num_kv_groups)
HEADS = [pytest.param(6, 6, id="mha"), pytest.param(6, 2, id="gqa"), pytest.param(6, 1, id="mqa")]
CHUNKINGS = [
    pytest.param([1] * T, id="token-by-token"),
    pytest.param([3, 1, 2, 2], id="chunks"),
    pytest.param([5, 3], id="prefill+chunk"),
]


def decode(m, x, chunks, cache, mask=None):
    """Feed x chunk by chunk through the cache; the padding mask covers all keys seen so far."""
    outs, start = [], 0
    for n in chunks:
        seen = None if mask is None else mask[:, : start + n]
        outs.append(m(x[:, start : start + n], mask=seen, cache=cache))
        start += n
    assert cache.seq_len == start == x.shape[1]
    return torch.cat(outs, dim=1)


def make(nh, ng, randomize, **kw):
    return randomize(GroupedQueryAttention(D_IN, D_OUT, CTX, 0.0, nh, ng, qkv_bias=True, **kw)).double()


@pytest.mark.parametrize("nh,ng", HEADS)
@pytest.mark.parametrize("chunks", CHUNKINGS)
@pytest.mark.parametrize("preallocate", [False, True])
@pytest.mark.parametrize("use_sdpa", [False, True])
def test_cached_decoding_equals_full_forward(nh, ng, chunks, preallocate, use_sdpa, randomize, close):
    m = make(nh, ng, randomize, use_sdpa=use_sdpa)
    x = torch.randn(2, T, D_IN, dtype=torch.float64)
    cache = m.make_cache(2, preallocate=preallocate)
    assert isinstance(cache, PreallocatedKVCache if preallocate else GrowingKVCache)
    close(decode(m, x, chunks, cache), m(x))


@pytest.mark.parametrize("nh,ng", HEADS)
def test_growing_and_preallocated_caches_agree(nh, ng, randomize):
    m = make(nh, ng, randomize)
    x = torch.randn(2, T, D_IN, dtype=torch.float64)
    growing, prealloc = GrowingKVCache(), m.make_cache(2, preallocate=True, max_len=T)
    out_g, out_p = decode(m, x, [2, 3, 1, 2], growing), decode(m, x, [2, 3, 1, 2], prealloc)
    torch.testing.assert_close(out_p, out_g, atol=0, rtol=0)
    torch.testing.assert_close(prealloc.keys, growing.keys, atol=0, rtol=0)
    torch.testing.assert_close(prealloc.values, growing.values, atol=0, rtol=0)
    assert growing.keys.shape == (2, ng, T, D_OUT // nh)  # only the K/V heads are cached


@pytest.mark.parametrize("preallocate", [False, True])
def test_cached_decoding_with_padding_mask(preallocate, randomize, close):
    m = make(6, 2, randomize)
    x = torch.randn(3, T, D_IN, dtype=torch.float64)
    pad = padding_mask([T, 5, 3], T)
    cache = m.make_cache(3, preallocate=preallocate)
    close(decode(m, x, [4, 1, 3], cache, mask=pad), m(x, mask=pad))


def test_gqa_cache_holds_groups_over_heads_of_the_mha_bytes(randomize):
    nh, x = 6, torch.randn(2, T, D_IN)
    sizes = {}
    for ng in (6, 3, 2, 1):
        m = randomize(GroupedQueryAttention(D_IN, D_OUT, CTX, 0.0, nh, ng))
        cache = GrowingKVCache()
        m(x, cache=cache)
        sizes[ng] = cache.keys.nbytes + cache.values.nbytes  # measured from the tensors
        assert cache.nbytes == sizes[ng]
        assert sizes[ng] == kv_cache_bytes(1, ng, D_OUT // nh, T, batch_size=2, bytes_per_element=4)
    for ng, size in sizes.items():
        assert size * nh == sizes[nh] * ng
    assert sizes[1] * nh == sizes[6]  # MQA: one K/V head instead of six


def test_preallocated_cache_bytes_follow_max_len():
    cache = PreallocatedKVCache(2, 3, 16, 4, dtype=torch.float16)
    assert cache.nbytes == cache.keys.nbytes + cache.values.nbytes == kv_cache_bytes(1, 3, 4, 16, 2, 2)


def test_sdpa_is_causal_on_a_chunk_is_wrong_and_our_alignment_is_right(randomize, close):
    """SDPA's is_causal=True aligns the mask top-left: with 5 cached and 3 new tokens, new query i may then
    only see keys 0..i instead of 0..5+i. Our mask is aligned to the END of the cache."""
    m = make(4, 4, randomize)
    x = torch.randn(2, T, D_IN, dtype=torch.float64)
    full = m(x)
    cache = GrowingKVCache()
    m(x[:, :5], cache=cache)
    ours = m(x[:, 5:], cache=cache)  # 3 new queries, 8 keys
    close(ours, full[:, 5:])

    b, hd = 2, m.head_dim
    q = m.W_query(x[:, 5:]).view(b, 3, m.num_heads, hd).transpose(1, 2)
    pitfall = F.scaled_dot_product_attention(q, cache.keys, cache.values, is_causal=True)
    pitfall = m.out_proj(pitfall.transpose(1, 2).reshape(b, 3, D_OUT))
    assert (pitfall - full[:, 5:]).abs().max() > 1e-2  # the pitfall is real
    aligned = torch.ones(3, T, dtype=torch.bool).tril(diagonal=T - 3)  # bottom-right
    fixed = F.scaled_dot_product_attention(q, cache.keys, cache.values, attn_mask=aligned)
    close(m.out_proj(fixed.transpose(1, 2).reshape(b, 3, D_OUT)), full[:, 5:])


def test_cache_reset_starts_over(randomize, close):
    m = make(6, 3, randomize)
    x = torch.randn(1, 4, D_IN, dtype=torch.float64)
    for cache in (GrowingKVCache(), m.make_cache(1, preallocate=True)):
        m(torch.randn(1, 3, D_IN, dtype=torch.float64), cache=cache)
        cache.reset()
        assert cache.seq_len == 0
        close(m(x, cache=cache), m(x))


def test_make_cache_follows_module_dtype():
    m = MultiHeadAttention(4, 8, 6, 0.0, 2).to(torch.bfloat16)
    cache = m.make_cache(3, preallocate=True)
    assert cache.keys.dtype == torch.bfloat16 and cache.keys.shape == (3, 2, 6, 4)
