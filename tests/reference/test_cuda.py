"""The same equivalences on a CUDA device, in float32, float16 and bfloat16 (skipped without CUDA).

On the GPU, SDPA picks fused kernels (flash, memory-efficient) that round differently from the
reference path. So in half precision both are compared to a float64 ground truth: ours must be about
as accurate as PyTorch's own result.
"""

import pytest
import torch

from course_utils import (
    DEVICE_ENV_VAR,
    GroupedQueryAttention,
    MultiHeadAttention,
    get_device,
    padding_mask,
    synchronize,
    to_nn_multihead,
)

DEVICE = "cuda"
pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() False)"),
]
HALF = [torch.float16, torch.bfloat16]

# (batch, num_tokens, context_length, d_in, d_out, num_heads, num_kv_groups)
SHAPES = [
    pytest.param(2, 5, 8, 6, 64, 4, 4, id="mha"),
    pytest.param(3, 7, 9, 40, 64, 8, 2, id="gqa"),
    pytest.param(2, 6, 6, 16, 32, 4, 1, id="mqa"),
]


def build(d_in, d_out, ctx, nh, ng, randomize, **kw):
    return randomize(GroupedQueryAttention(d_in, d_out, ctx, 0.0, nh, ng, qkv_bias=True, **kw)).to(DEVICE)


def as_dtype(m, dtype, **kw):
    """A copy of ``m`` in ``dtype`` (parameters copied through the state dict)."""
    copy = GroupedQueryAttention(
        m.d_in, m.d_out, m.context_length, 0.0, m.num_heads, m.num_kv_groups, qkv_bias=True, causal=m.causal, **kw
    ).to(DEVICE, dtype)
    copy.load_state_dict(m.state_dict())
    return copy


def assert_as_accurate_as_sdpa(ours, theirs, truth):
    """ours and theirs: the same function in low precision; truth: float64."""
    err_ours = (ours.double() - truth).abs().max().item()
    err_theirs = (theirs.double() - truth).abs().max().item()
    assert err_ours <= 4 * err_theirs + 1e-3 * truth.abs().max().item(), (err_ours, err_theirs)
    assert err_ours < 0.05 * truth.abs().max().item(), err_ours


@pytest.mark.parametrize("b,t,ctx,d_in,d_out,nh,ng", SHAPES)
def test_cuda_float32_equals_sdpa(b, t, ctx, d_in, d_out, nh, ng, randomize, sdpa_ref):
    m = build(d_in, d_out, ctx, nh, ng, randomize)
    x = torch.randn(b, t, d_in, device=DEVICE)
    torch.testing.assert_close(m(x), sdpa_ref(m, x), atol=1e-4, rtol=1e-4)
    fused = as_dtype(m, torch.float32, use_sdpa=True)
    torch.testing.assert_close(fused(x), m(x), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("b,t,ctx,d_in,d_out,nh,ng", SHAPES)
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("padding", [False, True])
def test_cuda_half_precision_as_accurate_as_sdpa(b, t, ctx, d_in, d_out, nh, ng, dtype, padding, randomize, sdpa_ref):
    m64 = build(d_in, d_out, ctx, nh, ng, randomize).double()
    x64 = torch.randn(b, t, d_in, device=DEVICE, dtype=torch.float64)
    hidden = padding_mask([t - i for i in range(b)], t, device=DEVICE) if padding else None
    allow4 = None if hidden is None else ~hidden[:, None, None, :]  # SDPA's convention, for the reference
    truth = sdpa_ref(m64, x64, allow=allow4)
    low, x = as_dtype(m64, dtype), x64.to(dtype)
    theirs = sdpa_ref(low, x, allow=allow4)
    assert_as_accurate_as_sdpa(low(x, mask=hidden), theirs, truth)
    assert_as_accurate_as_sdpa(as_dtype(m64, dtype, use_sdpa=True)(x, mask=hidden), theirs, truth)


@pytest.mark.parametrize("d_in,d_out", [(32, 32), (16, 32)])
def test_cuda_mha_equals_nn_multihead(d_in, d_out, randomize):
    mha = randomize(MultiHeadAttention(d_in, d_out, 8, 0.0, 4, qkv_bias=True)).to(DEVICE).eval()
    x = torch.randn(2, 6, d_in, device=DEVICE)
    torch_mha = to_nn_multihead(mha).eval()
    hide = torch.ones(6, 6, dtype=torch.bool, device=DEVICE).triu(1)
    expected, _ = torch_mha(x if d_in == d_out else mha.W_query(x), x, x, attn_mask=hide, need_weights=False)
    torch.testing.assert_close(mha(x), expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("preallocate", [False, True])
@pytest.mark.parametrize("use_sdpa", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_cuda_kv_cache_decoding_equals_full_forward(preallocate, use_sdpa, dtype, randomize, sdpa_ref):
    m64 = build(16, 32, 12, 4, 2, randomize).double()
    x64 = torch.randn(2, 10, 16, device=DEVICE, dtype=torch.float64)
    m, x = as_dtype(m64, dtype, use_sdpa=use_sdpa), x64.to(dtype)
    cache = m.make_cache(2, preallocate=preallocate)
    outs = [m(x[:, :4], cache=cache)]  # prefill, then token by token, then a chunk of 3
    outs += [m(x[:, i : i + 1], cache=cache) for i in range(4, 7)] + [m(x[:, 7:], cache=cache)]
    assert cache.seq_len == 10
    assert_as_accurate_as_sdpa(torch.cat(outs, dim=1), m(x), sdpa_ref(m64, x64))


@pytest.mark.parametrize("use_sdpa", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32] + HALF)
def test_cuda_fully_masked_rows_are_zero(use_sdpa, dtype, randomize):
    m = as_dtype(build(16, 32, 8, 4, 2, randomize), dtype, use_sdpa=use_sdpa)
    hidden = torch.tensor([[False] * 6, [True, True, False, False, False, False]], device=DEVICE)  # left padding
    out = m(torch.randn(2, 6, 16, device=DEVICE, dtype=dtype), mask=hidden)
    assert not out.isnan().any()
    torch.testing.assert_close(out[1, :2], m.out_proj.bias.expand(2, -1))


def test_cuda_device_helper(monkeypatch):
    monkeypatch.delenv(DEVICE_ENV_VAR, raising=False)
    assert get_device().type == "cuda"
    monkeypatch.setenv(DEVICE_ENV_VAR, "cpu")
    assert get_device() == torch.device("cpu")
    monkeypatch.setenv(DEVICE_ENV_VAR, f"cuda:{torch.cuda.device_count()}")
    with pytest.raises(ValueError, match="CUDA device"):
        get_device()
    synchronize(DEVICE)
