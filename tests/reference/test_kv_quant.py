"""A KV cache in 2, 4 or 8 bits: group-wise quantisation against a loop over the groups, KIVI's split (keys per
channel, values per token, a full-precision window) against slices built here, the streaming cache against the
one-shot function at every step, packing, bytes, and the constant group that KIVI's own code divides by zero."""

import re

import pytest
import torch

from course_utils import (
    QuantizedKVCache,
    fake_quantize,
    kivi_bytes_per_token,
    kivi_quantize,
    kivi_split,
    pack_codes,
    quantize,
    unpack_codes,
)


def quantize_by_loop(x, bits, group):
    """Asymmetric min-max quantisation of one 1-D group, written out."""
    low, high = float(x.min()), float(x.max())
    scale = (high - low) / (2**bits - 1) or 1.0
    return torch.tensor([round((float(v) - low) / scale) * scale + low for v in x], dtype=x.dtype)


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_per_channel_and_per_token_groups_match_a_loop(bits):
    x = torch.randn(2, 12, 8, dtype=torch.float64)  # (heads, tokens, channels)
    by_channel = fake_quantize(x, bits, along=-2, group_size=4)  # 3 groups of 4 tokens per channel
    by_token = fake_quantize(x, bits, along=-1, group_size=4)  # 2 groups of 4 channels per token
    for h in range(2):
        for c in range(8):
            for g in range(3):
                rows = slice(4 * g, 4 * g + 4)
                torch.testing.assert_close(by_channel[h, rows, c], quantize_by_loop(x[h, rows, c], bits, 4))
        for t in range(12):
            for g in range(2):
                cols = slice(4 * g, 4 * g + 4)
                torch.testing.assert_close(by_token[h, t, cols], quantize_by_loop(x[h, t, cols], bits, 4))


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("bits", [2, 4, 8])
def test_the_error_is_at_most_half_a_step(bits, symmetric):
    x = torch.randn(5, 16, dtype=torch.float64) + 3.0  # off-centre: symmetric wastes range
    q = quantize(x, bits, along=-1, symmetric=symmetric)
    step = q.scale.reshape(5, 1)  # one group per row
    assert bool(((q.dequantize() - x).abs() <= step / 2 + 1e-12).all())
    assert (q.zero is None) == symmetric
    if symmetric:
        assert q.codes.dtype == torch.int8 and int(q.codes.abs().max()) <= 2 ** (bits - 1) - 1
    else:
        assert q.codes.dtype == torch.uint8 and int(q.codes.max()) <= 2**bits - 1


def test_asymmetric_beats_symmetric_off_centre():
    x = torch.rand(64, 32, dtype=torch.float64) + 5.0
    err = {s: (fake_quantize(x, 4, along=-1, symmetric=s) - x).norm() for s in (False, True)}
    assert err[False] < err[True] / 5


def test_a_constant_group_comes_back_exactly_where_kivi_divides_by_zero():
    x = torch.randn(8, 6)
    x[:, 2] = 0.5  # a constant channel over the group of 8 tokens
    out = fake_quantize(x, 2, along=-2)
    assert not out.isnan().any() and torch.equal(out[:, 2], x[:, 2])
    low, high = x.amin(0), x.amax(0)  # KIVI's quant_and_pack_kcache: scale = (mx - mn) / max_int, unguarded
    kivi_scale = (high - low) / 3
    assert kivi_scale[2] == 0 and ((x - low) / kivi_scale)[:, 2].isnan().all()  # 0 / 0


@pytest.mark.parametrize("tokens,residual", [(40, 16), (32, 16), (7, 8), (16, 8), (17, 8)])
def test_kivi_split_keys_in_windows_values_token_by_token(tokens, residual):
    keys, values = torch.randn(2, 3, tokens, 8), torch.randn(2, 3, tokens, 8)
    k_hat, v_hat = kivi_quantize(keys, values, bits=2, group_size=4, residual=residual)
    n_k, n_v = tokens - tokens % residual, max(0, tokens - residual)
    assert kivi_split(tokens, residual) == (n_k, n_v)
    torch.testing.assert_close(k_hat[:, :, n_k:], keys[:, :, n_k:], atol=0, rtol=0)  # the full-precision tokens
    torch.testing.assert_close(v_hat[:, :, n_v:], values[:, :, n_v:], atol=0, rtol=0)
    if n_k:
        torch.testing.assert_close(k_hat[:, :, :n_k], fake_quantize(keys[:, :, :n_k], 2, along=-2, group_size=4))
        assert (k_hat[:, :, :n_k] != keys[:, :, :n_k]).any()
    if n_v:
        torch.testing.assert_close(v_hat[:, :, :n_v], fake_quantize(values[:, :, :n_v], 2, along=-1, group_size=4))


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("chunks", [[1] * 40, [13, 1, 1, 20, 5], [40]])
def test_the_streaming_cache_equals_kivi_quantize_at_every_step(bits, chunks):
    cache = QuantizedKVCache(2, 3, 16, bits, group_size=8, residual=16, dtype=torch.float64)
    keys, values = torch.randn(2, 3, 40, 16, dtype=torch.float64), torch.randn(2, 3, 40, 16, dtype=torch.float64)
    start = 0
    for n in chunks:
        got = cache.update(keys[:, :, start : start + n], values[:, :, start : start + n])
        start += n
        expected = kivi_quantize(keys[:, :, :start], values[:, :, :start], bits, 8, 16)
        for g, e in zip(got, expected, strict=True):
            torch.testing.assert_close(g, e, atol=0, rtol=0)
    assert cache.seq_len == 40
    assert cache.key_full.shape[2] == 40 % 16 and cache.value_full.shape[2] == 16


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_cache_bytes_match_the_formula(bits):
    d, g, r, t = 32, 16, 16, 64  # the full-precision tokens: 0 keys, 16 values
    cache = QuantizedKVCache(1, 1, d, bits, group_size=g, residual=r, dtype=torch.float16)
    cache.update(torch.randn(1, 1, t, d, dtype=torch.float16), torch.randn(1, 1, t, d, dtype=torch.float16))
    quantised_values = t - r
    expected = (
        t * d * bits / 8 + 2 * (t // g) * d * 2  # key codes, a scale and a zero per channel per group of tokens
        + quantised_values * d * bits / 8 + 2 * quantised_values * (d // g) * 2  # value codes and statistics
        + r * d * 2  # the values still in float16
    )  # fmt: skip
    assert cache.nbytes == expected
    assert cache.nbytes - r * d * 2 - (t - quantised_values) * (d * bits / 8 + 2 * (d // g) * 2) == pytest.approx(
        quantised_values * kivi_bytes_per_token(d, bits, g)
    )


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_pack_and_unpack(bits):
    codes = torch.randint(0, 2**bits, (3, 5, 16), dtype=torch.uint8)
    packed = pack_codes(codes, bits)
    assert packed.shape == (3, 5, 16 * bits // 8) and torch.equal(unpack_codes(packed, bits), codes)
    one = torch.zeros(8 // bits, dtype=torch.uint8)
    one[-1] = 1
    assert int(pack_codes(one, bits)[0]) == 1 << (8 - bits)  # code i in bits bits * i onwards


def test_bad_input_gets_a_clear_error():
    with pytest.raises(ValueError, match=re.escape("bits must be one of (2, 4, 8), got 3")):
        quantize(torch.randn(4, 4), 3, along=-1)
    with pytest.raises(ValueError, match="group_size=3 must divide axis -1"):
        quantize(torch.randn(4, 4), 4, along=-1, group_size=3)
    with pytest.raises(ValueError, match="inf or NaN"):
        quantize(torch.tensor([[1.0, float("nan")]]), 4, along=-1)
    with pytest.raises(ValueError, match="residual must be a positive multiple of group_size=8"):
        kivi_quantize(torch.randn(1, 1, 4, 8), torch.randn(1, 1, 4, 8), 4, 8, 12)
    with pytest.raises(ValueError, match="keys must be a"):
        kivi_quantize(torch.randn(4, 8), torch.randn(4, 8), 4, 8, 8)
    with pytest.raises(ValueError, match="floating-point"):
        quantize(torch.ones(4, 4, dtype=torch.int64), 4, along=-1)
