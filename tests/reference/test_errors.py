"""Bad input raises a ValueError that names the problem; fully masked rows give zeros, not NaN."""

import re

import pytest
import torch
import torch.nn.functional as F

from course_utils import (
    DEVICE_ENV_VAR,
    CausalAttention,
    GroupedQueryAttention,
    GrowingKVCache,
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    PreallocatedKVCache,
    SelfAttention_v1,
    SelfAttention_v2,
    attend,
    causal_mask,
    get_device,
    padding_mask,
    simple_self_attention,
    synchronize,
    to_nn_multihead,
    to_sdpa_mask,
)


def gqa(**kw):
    args = dict(d_in=4, d_out=8, context_length=6, dropout=0.0, num_heads=4, num_kv_groups=2)
    return GroupedQueryAttention(**{**args, **kw})


# ---------------------------------------------------------------- constructor arguments


def test_d_out_not_divisible_by_num_heads():
    with pytest.raises(ValueError, match=re.escape("d_out (6) and num_heads (4)")):
        GroupedQueryAttention(4, 6, 8, 0.0, 4, 2)
    with pytest.raises(ValueError, match=re.escape("d_out (10) and num_heads (4)")):
        MultiHeadAttention(3, 10, 8, 0.0, num_heads=4)


def test_num_heads_not_divisible_by_num_kv_groups():
    with pytest.raises(ValueError, match=re.escape("num_heads (4) and num_kv_groups (3)")):
        GroupedQueryAttention(4, 8, 8, 0.0, 4, 3)
    with pytest.raises(ValueError, match="positive"):
        GroupedQueryAttention(4, 8, 8, 0.0, 4, 0)


# ---------------------------------------------------------------- inputs

RANK_CASES = [torch.randn(5, 4), torch.randn(1, 2, 5, 4)]


@pytest.mark.parametrize("x", RANK_CASES, ids=["2-D", "4-D"])
@pytest.mark.parametrize(
    "module",
    [
        lambda: gqa(),
        lambda: CausalAttention(4, 2, 6, 0.0),
        lambda: MultiHeadAttentionWrapper(4, 2, 6, 0.0, 2),
    ],
    ids=["gqa", "causal", "wrapper"],
)
def test_wrong_rank(x, module):
    with pytest.raises(ValueError, match=rf"shape \(batch, num_tokens, d_in=4\), got a {x.ndim}-D tensor"):
        module()(x)


def test_wrong_rank_hints_at_batch_axis():
    with pytest.raises(ValueError, match=re.escape("x.unsqueeze(0)")):
        gqa()(torch.randn(5, 4))


@pytest.mark.parametrize(
    "module",
    [
        lambda: gqa(),
        lambda: CausalAttention(4, 2, 6, 0.0),
        lambda: MultiHeadAttentionWrapper(4, 2, 6, 0.0, 2),
        lambda: SelfAttention_v1(4, 2),
        lambda: SelfAttention_v2(4, 2),
    ],
    ids=["gqa", "causal", "wrapper", "v1", "v2"],
)
def test_wrong_feature_size(module):
    with pytest.raises(ValueError, match=r"x has 5 features in its last axis, but .*d_in=4"):
        module()(torch.randn(2, 3, 5))


def test_wrong_input_type():
    with pytest.raises(ValueError, match="must be a torch.Tensor, got list"):
        gqa()([[0.0] * 4])


def test_simple_self_attention_wants_2d():
    with pytest.raises(ValueError, match=re.escape("(num_tokens, d)")):
        simple_self_attention(torch.randn(2, 3, 4))


@pytest.mark.parametrize("module", [lambda: gqa(), lambda: CausalAttention(4, 2, 6, 0.0)], ids=["gqa", "causal"])
def test_sequence_longer_than_context_length(module):
    with pytest.raises(ValueError, match=re.escape("7 tokens, longer than context_length=6")):
        module()(torch.randn(2, 7, 4))


def test_cross_attention_errors():
    with pytest.raises(ValueError, match="causal=False"):
        gqa()(torch.randn(2, 3, 4), torch.randn(2, 5, 4))
    cross = gqa(causal=False, d_context=7)
    with pytest.raises(ValueError, match=r"context has 4 features in its last axis, but .*d_in=7"):
        cross(torch.randn(2, 3, 4), torch.randn(2, 5, 4))
    with pytest.raises(ValueError, match="context has batch 3 but x has batch 2"):
        cross(torch.randn(2, 3, 4), torch.randn(3, 5, 7))
    with pytest.raises(ValueError, match="cross-attention keys/values do not grow"):
        cross(torch.randn(2, 3, 4), torch.randn(2, 5, 7), cache=GrowingKVCache())


def test_return_weights_needs_reference_path():
    with pytest.raises(ValueError, match="use_sdpa=False"):
        gqa(use_sdpa=True)(torch.randn(1, 3, 4), return_weights=True)


def test_to_nn_multihead_refuses_grouped_kv():
    with pytest.raises(ValueError, match="no grouped K/V heads"):
        to_nn_multihead(gqa())


# ---------------------------------------------------------------- masks


@pytest.mark.parametrize(
    "mask,message",
    [
        (torch.ones(2, 6, dtype=torch.bool), r"padding mask of shape \(2, 6\) does not fit.*num_keys=5"),
        (torch.ones(3, 5, dtype=torch.bool), r"padding mask of shape \(3, 5\) does not fit.*batch=2"),
        (torch.ones(2, 1, 4, 5, dtype=torch.bool), r"attention mask of shape \(2, 1, 4, 5\) does not fit"),
        (torch.ones(2, 3, 5, 5, dtype=torch.bool), r"has 3 heads in axis 1; expected 1 \(broadcast\) or num_heads=4"),
        (torch.ones(2, 5, 5, dtype=torch.bool), r"must be 2-D \(batch, num_keys\) or 4-D"),
        (torch.ones(2, 5), r"mask must be bool \(True = hidden\), got dtype torch.float32"),
        (torch.ones(2, 5, dtype=torch.int64), r"must be bool.*torch.int64"),
        ([[True] * 5] * 2, "mask must be a bool torch.Tensor \\(True = hidden\\), got list"),
    ],
    ids=["keys", "batch", "queries", "heads", "3-D", "float", "int", "list"],
)
@pytest.mark.parametrize("use_sdpa", [False, True])
def test_bad_masks(mask, message, use_sdpa):
    with pytest.raises(ValueError, match=message):
        gqa(use_sdpa=use_sdpa)(torch.randn(2, 5, 4), mask=mask)


def test_attend_rejects_float_mask():
    q = torch.randn(1, 3, 4)
    with pytest.raises(ValueError, match=r"mask must be bool \(True = hidden\)"):
        attend(q, q, q, torch.triu(torch.ones(3, 3), diagonal=1))


def test_mask_helpers_reject_bad_arguments():
    with pytest.raises(ValueError, match="4 queries cannot follow only 3 keys"):
        causal_mask(4, 3)
    with pytest.raises(ValueError, match=r"every length must lie in \[0, 4\]"):
        padding_mask([2, 5], 4)
    with pytest.raises(ValueError, match="lengths must be 1-D"):
        padding_mask([[1, 2]], 4)


# ---------------------------------------------------------------- KV caches


def test_preallocated_cache_overflow():
    m = gqa(context_length=10)
    cache = m.make_cache(1, preallocate=True, max_len=4)
    m(torch.randn(1, 3, 4), cache=cache)
    with pytest.raises(ValueError, match=r"KV cache overflow: it holds 4 tokens, 3 are cached and 2 more would need 5"):
        m(torch.randn(1, 2, 4), cache=cache)
    assert cache.seq_len == 3  # a failed update leaves the cache as it was


@pytest.mark.parametrize("preallocate", [False, True])
def test_cached_plus_new_beyond_context_length(preallocate):
    m = gqa()
    cache = m.make_cache(1, preallocate=preallocate)
    m(torch.randn(1, 4, 4), cache=cache)
    with pytest.raises(ValueError, match=re.escape("4 cached + 3 new tokens exceed context_length=6")):
        m(torch.randn(1, 3, 4), cache=cache)


@pytest.mark.parametrize(
    "cache", [lambda: GrowingKVCache(), lambda: PreallocatedKVCache(2, 2, 8, 3)], ids=["growing", "preallocated"]
)
def test_cache_rejects_mismatched_keys(cache):
    c = cache()
    c.update(torch.randn(2, 2, 1, 3), torch.randn(2, 2, 1, 3))
    with pytest.raises(ValueError, match=re.escape("KV cache holds (batch=2, num_kv_heads=2, head_dim=3)")):
        c.update(torch.randn(3, 2, 1, 3), torch.randn(3, 2, 1, 3))
    with pytest.raises(ValueError, match="keys and values of the same shape"):
        c.update(torch.randn(2, 2, 1, 3), torch.randn(2, 2, 2, 3))


# ---------------------------------------------------------------- fully masked rows


def test_fully_masked_row_gives_zeros_like_sdpa():
    """A query whose keys are all hidden (e.g. a sequence that is all padding) has nothing to attend to.

    Softmax over only -inf would be NaN; ``attend`` gives that row all-zero weights, so its context is
    zero. F.scaled_dot_product_attention in torch 2.13 does the same (checked here), so the use_sdpa
    path agrees. Gradients stay finite.
    """
    q = torch.randn(2, 2, 3, 4, dtype=torch.float64, requires_grad=True)
    k, v = torch.randn(2, 2, 5, 4, dtype=torch.float64), torch.randn(2, 2, 5, 4, dtype=torch.float64)
    hide = torch.zeros(2, 1, 3, 5, dtype=torch.bool)
    hide[0, :, 1] = True  # batch 0, query 1 sees nothing
    context, weights = attend(q, k, v, hide)
    assert not context.isnan().any()
    assert torch.all(context[0, :, 1] == 0) and torch.all(weights[0, :, 1] == 0)
    torch.testing.assert_close(weights[1].sum(-1), torch.ones(2, 3, dtype=torch.float64))
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=~hide)
    torch.testing.assert_close(context, sdpa, atol=1e-12, rtol=0)  # torch 2.13: zeros as well
    context.sum().backward()
    assert torch.isfinite(q.grad).all()


@pytest.mark.parametrize("use_sdpa", [False, True])
def test_all_padding_sequence_gives_out_proj_bias(use_sdpa):
    m = gqa(causal=False, use_sdpa=use_sdpa, context_length=8).double()
    x = torch.randn(3, 5, 4, dtype=torch.float64)
    out = m(x, mask=padding_mask([5, 0, 2], 5))  # sequence 1 is all padding
    assert not out.isnan().any()
    torch.testing.assert_close(out[1], m.out_proj.bias.expand(5, -1))  # zero context -> only the bias
    assert (out[0] - m.out_proj.bias).abs().max() > 1e-3


@pytest.mark.parametrize("use_sdpa", [False, True])
def test_left_padding_with_causal_mask_has_no_nan(use_sdpa):
    """Left padding + causal: the first query of a left-padded row sees only padding keys."""
    m = gqa(use_sdpa=use_sdpa).double()
    hidden = torch.tensor([[False] * 5, [True, True, False, False, False]])
    out = m(torch.randn(2, 5, 4, dtype=torch.float64), mask=hidden)
    assert not out.isnan().any()
    torch.testing.assert_close(out[1, :2], m.out_proj.bias.expand(2, -1))


# ---------------------------------------------------------------- device helper


def test_env_var_forces_cpu(monkeypatch):
    monkeypatch.setenv(DEVICE_ENV_VAR, "cpu")
    assert get_device() == torch.device("cpu")
    synchronize(get_device())  # a no-op on CPU, must not raise


def test_prefer_beats_env_var(monkeypatch):
    monkeypatch.setenv(DEVICE_ENV_VAR, "not-a-device")
    assert get_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="'not-a-device' is not a device name"):
        get_device()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised when CUDA is missing")
def test_cuda_without_cuda_raises(monkeypatch):
    monkeypatch.setenv(DEVICE_ENV_VAR, "cuda")
    with pytest.raises(ValueError, match=f"{DEVICE_ENV_VAR}='cuda' asks for CUDA, but torch sees no CUDA device"):
        get_device()


def test_default_device_without_env_var(monkeypatch):
    monkeypatch.delenv(DEVICE_ENV_VAR, raising=False)
    expected = "cuda" if torch.cuda.is_available() else None
    device = get_device()
    if expected:
        assert device.type == expected
    else:
        assert device.type in ("mps", "cpu")


def test_masks_have_one_convention_true_is_hidden():
    """causal_mask and padding_mask against independent formulations; to_sdpa_mask is SDPA's complement."""
    torch.testing.assert_close(causal_mask(5), torch.nn.Transformer.generate_square_subsequent_mask(5) != 0)
    assert torch.equal(causal_mask(2, 4), torch.tensor([[False, False, False, True], [False, False, False, False]]))
    assert torch.equal(padding_mask([3, 1], 4), torch.tensor([[False, False, False, True], [False, True, True, True]]))
    assert torch.equal(to_sdpa_mask(causal_mask(3)), torch.ones(3, 3, dtype=torch.bool).tril())
    with pytest.raises(ValueError, match=r"mask must be bool \(True = hidden\), got dtype torch.int64"):
        to_sdpa_mask(torch.ones(3, 3, dtype=torch.int64))
