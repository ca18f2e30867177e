"""Online softmax (在线 softmax) attention, tile by tile: equal to F.scaled_dot_product_attention for every block size,
causal or not, with masks, in float64/float32/bfloat16; its log-sum-exp; fully masked rows; peak memory."""

import math
import re

import pytest
import torch
import torch.nn.functional as F

from course_utils import TensorMemoryTracker, online_softmax_attention, peak_tensor_bytes
from tests.conftest import assert_close, causal_allow

BLOCKS = [1, 3, 4, 7, 16, 64]  # 3 and 7 do not divide the lengths below; 64 is larger than all of them


def inputs(b, h, sq, sk, d, dv=None, dtype=torch.float64, scale=1.0):
    q = torch.randn(b, h, sq, d, dtype=dtype) * scale
    k = torch.randn(b, h, sk, d, dtype=dtype) * scale
    v = torch.randn(b, h, sk, dv or d, dtype=dtype)
    return q, k, v


def expected_lse(q, k, allow=None):
    scores = (q.double() @ k.double().transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if allow is not None:
        scores = scores.masked_fill(~allow, float("-inf"))
    return torch.logsumexp(scores, dim=-1)


@pytest.mark.parametrize("block_size", BLOCKS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq,sk", [(12, 12), (5, 12), (1, 9)])
def test_equals_sdpa_in_float64(block_size, causal, sq, sk):
    q, k, v = inputs(2, 3, sq, sk, 8, dv=5)  # batch 2, 3 heads, value width != key width
    allow = causal_allow(sq, sk) if causal else None  # the queries are the last sq positions
    out, lse = online_softmax_attention(q, k, v, block_size=block_size, causal=causal)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=allow))
    torch.testing.assert_close(lse, expected_lse(q, k, allow))


@pytest.mark.parametrize("block_size", [3, 8])
def test_causal_square_equals_is_causal(block_size):
    q, k, v = inputs(2, 2, 17, 17, 4)
    out, _ = online_softmax_attention(q, k, v, block_size=block_size, causal=True)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_lower_precision_is_as_close_to_float64_as_sdpa(dtype, causal):
    q, k, v = inputs(2, 4, 33, 33, 16)
    truth = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    out, lse = online_softmax_attention(q.to(dtype), k.to(dtype), v.to(dtype), block_size=8, causal=causal)
    assert out.dtype == dtype and lse.dtype == torch.float32  # accumulated in float32, like FlashAttention
    assert_close(out.double(), truth, dtype=dtype)
    sdpa_error = (
        (F.scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype), is_causal=causal).double() - truth)
        .abs()
        .max()
    )
    assert (out.double() - truth).abs().max() <= 2 * sdpa_error + 1e-6


@pytest.mark.parametrize("block_size", [2, 5])
def test_padding_and_arbitrary_masks(block_size):
    q, k, v = inputs(3, 2, 6, 11, 8)
    lengths = torch.tensor([11, 4, 7])
    padding_allow = (torch.arange(11) < lengths[:, None])[:, None, None, :]  # (B, 1, 1, Sk)
    out, _ = online_softmax_attention(q, k, v, block_size=block_size, mask=~padding_allow)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=padding_allow))
    # causal and a random mask together
    random_allow = torch.rand(3, 2, 6, 11) > 0.5
    random_allow[..., range(6), range(5, 11)] = True  # query i keeps key 5 + i, its own position
    allow = random_allow & causal_allow(6, 11)
    out, lse = online_softmax_attention(q, k, v, block_size=block_size, causal=True, mask=~random_allow)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=allow))
    torch.testing.assert_close(lse, expected_lse(q, k, allow))


@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_fully_masked_rows_are_zero_with_lse_minus_inf(block_size):
    q, k, v = inputs(2, 2, 5, 9, 4)
    hide = torch.zeros(2, 2, 5, 9, dtype=torch.bool)
    hide[0, 1, 2] = True  # one row sees nothing
    hide[1, :, :, :] = True  # a whole sequence sees nothing
    out, lse = online_softmax_attention(q, k, v, block_size=block_size, mask=hide)
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    assert out[0, 1, 2].abs().max() == 0 and out[1].abs().max() == 0
    assert lse[0, 1, 2] == float("-inf") and (lse[1] == float("-inf")).all()
    allow = ~hide
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=allow).masked_fill(hide.all(-1, keepdim=True), 0)
    torch.testing.assert_close(out, expected)


def test_large_scores_do_not_overflow():
    """Scores in the hundreds: exp would overflow without the running maximum."""
    q, k, v = inputs(1, 2, 20, 20, 8, scale=12.0)
    k[..., 15:, :] *= 4  # later blocks raise the maximum far above the first block's
    out, lse = online_softmax_attention(q, k, v, block_size=4)
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
    q32, k32, v32 = q.float(), k.float(), v.float()
    out32, _ = online_softmax_attention(q32, k32, v32, block_size=4)
    torch.testing.assert_close(out32.double(), out, atol=1e-4, rtol=1e-4)


def test_lse_recomputes_the_weights_of_any_tile():
    """What the backward pass uses: weights = exp(scaled score - lse), without storing the weight matrix."""
    q, k, v = inputs(2, 2, 10, 10, 8)
    _, lse = online_softmax_attention(q, k, v, block_size=4, causal=True)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill(~causal_allow(10, 10), float("-inf"))
    torch.testing.assert_close(
        torch.exp(scores[..., 4:8, 0:4] - lse[..., 4:8, None]), torch.softmax(scores, dim=-1)[..., 4:8, 0:4]
    )


def test_gradients_equal_sdpa():
    q, k, v = (t.requires_grad_() for t in inputs(2, 2, 9, 9, 4))
    out, _ = online_softmax_attention(q, k, v, block_size=4, causal=True)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    for got, exp in zip(grads, torch.autograd.grad(ref.square().sum(), (q, k, v)), strict=True):
        torch.testing.assert_close(got, exp)


def test_custom_scale_and_three_dim_inputs():
    q, k, v = (t[0] for t in inputs(1, 4, 7, 7, 8))  # (heads, T, d): any leading axes
    out, _ = online_softmax_attention(q, k, v, block_size=3, scale=0.1)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=0.1))


# ---------------------------------------------------------------- memory


def naive_attention(q, k, v):
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)  # (..., T, T)
    return weights @ v


def test_peak_memory_naive_is_quadratic_tiles_are_linear():
    d, block = 16, 32
    naive, tiled = {}, {}
    for t in (128, 256, 512):
        q, k, v = inputs(1, 2, t, t, d, dtype=torch.float32)
        naive[t] = peak_tensor_bytes(naive_attention, q, k, v)
        tiled[t] = peak_tensor_bytes(online_softmax_attention, q, k, v, block_size=block)
        assert naive[t] >= 2 * t * t * 4  # the (2, T, T) float32 score matrix, at least
    assert tiled[512] < naive[512] / 8
    assert naive[512] / naive[256] > 3.5  # doubling T quadruples it
    assert tiled[512] / tiled[256] < 2.2  # ... and only doubles the tiled version's (its output)


def test_memory_tracker_counts_views_once_and_frees():
    x = torch.zeros(1000)
    with TensorMemoryTracker() as mem:
        y = x + 1  # 4000 bytes
        views = [y[:10], y.view(10, 100), y[::2]]
        del y, views
        z = x * 2  # reuses the freed budget
    assert mem.peak_bytes == 4000 and mem.current_bytes == 4000 and mem.num_ops >= 5
    del z
    assert mem.current_bytes == 0


# ---------------------------------------------------------------- errors


def test_errors_name_the_problem():
    q, k, v = inputs(1, 2, 4, 6, 8)
    with pytest.raises(ValueError, match="block_size must be a positive int, got 0"):
        online_softmax_attention(q, k, v, block_size=0)
    with pytest.raises(ValueError, match="same head_dim"):
        online_softmax_attention(q, k[..., :4], v)
    with pytest.raises(ValueError, match="one row per key token"):
        online_softmax_attention(q, k, v[..., :5, :])
    with pytest.raises(ValueError, match="repeat_kv"):
        online_softmax_attention(q, k[:, :1], v[:, :1])
    with pytest.raises(ValueError, match="6 queries cannot follow only 4 keys"):
        online_softmax_attention(k, q, q, causal=True)
    with pytest.raises(ValueError, match=re.escape("mask must be bool (True = hidden), got dtype torch.float32")):
        online_softmax_attention(q, k, v, mask=torch.zeros(4, 6))
    with pytest.raises(ValueError, match=re.escape("does not broadcast to the scores' shape (1, 2, 4, 6)")):
        online_softmax_attention(q, k, v, mask=torch.zeros(4, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="one floating dtype"):
        online_softmax_attention(q, k.float(), v)
