"""Every reference module equals PyTorch's built-ins on shapes chosen to expose bugs.

Several heads, d_in smaller and larger than d_out, sequences shorter than context_length, batch > 1,
with and without qkv bias; float64 tight, float32 and bfloat16 with looser tolerances.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from course_utils import (
    CausalAttention,
    GroupedQueryAttention,
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    SelfAttention_v1,
    SelfAttention_v2,
    attend,
    padding_mask,
    repeat_kv,
    simple_self_attention,
    to_nn_multihead,
    wrapper_to_mha,
)

DTYPES = [torch.float64, torch.float32, torch.bfloat16]

# (batch, num_tokens, context_length, d_in, d_out, num_heads, qkv_bias)
MHA_SHAPES = [
    pytest.param(2, 5, 8, 3, 8, 4, False, id="d_in<d_out,T<ctx"),
    pytest.param(3, 7, 7, 12, 6, 3, True, id="d_in>d_out,bias"),
    pytest.param(2, 4, 9, 8, 8, 2, True, id="d_in=d_out,bias"),
]
# (batch, num_tokens, context_length, d_in, d_out, num_heads, num_kv_groups, qkv_bias)
GQA_SHAPES = [
    pytest.param(2, 5, 8, 6, 12, 6, 6, True, id="mha"),
    pytest.param(2, 6, 6, 10, 8, 4, 1, False, id="mqa"),
    pytest.param(3, 4, 10, 5, 16, 8, 2, True, id="gqa-8/2"),
    pytest.param(2, 7, 9, 12, 12, 6, 3, False, id="gqa-6/3"),
]


# ---------------------------------------------------------------- single head


@pytest.mark.parametrize("dtype", DTYPES)
def test_simple_self_attention_is_unscaled_sdpa(dtype, close):
    x = torch.randn(7, 5, dtype=dtype)
    context, weights = simple_self_attention(x)
    close(context, F.scaled_dot_product_attention(x, x, x, scale=1.0))
    close(weights.sum(-1), torch.ones(7, dtype=dtype))


@pytest.mark.parametrize("d_in,d_out", [(3, 5), (6, 2)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_self_attention_v1_v2_equal_sdpa(d_in, d_out, dtype, close):
    v1 = SelfAttention_v1(d_in, d_out).to(dtype)
    x = torch.randn(3, 6, d_in, dtype=dtype)  # also accepts a batch axis
    q, k, v = x @ v1.W_query, x @ v1.W_key, x @ v1.W_value
    close(v1(x), F.scaled_dot_product_attention(q, k, v))
    close(v1(x[0]), v1(x)[0])
    v2 = SelfAttention_v2(d_in, d_out).to(dtype).load_from_v1(v1)
    close(v2(x), v1(x))


def test_self_attention_v2_with_bias_equals_sdpa(close, randomize):
    sa = randomize(SelfAttention_v2(4, 6, qkv_bias=True).double())
    x = torch.randn(2, 5, 4, dtype=torch.float64)
    close(sa(x), F.scaled_dot_product_attention(sa.W_query(x), sa.W_key(x), sa.W_value(x)))


@pytest.mark.parametrize("b,t,ctx,d_in,d_out,bias", [(2, 5, 8, 3, 6, False), (3, 6, 6, 7, 2, True)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_causal_attention_equals_sdpa(b, t, ctx, d_in, d_out, bias, dtype, close, randomize):
    ca = randomize(CausalAttention(d_in, d_out, ctx, 0.0, qkv_bias=bias)).to(dtype)
    x = torch.randn(b, t, d_in, dtype=dtype)
    expected = F.scaled_dot_product_attention(ca.W_query(x), ca.W_key(x), ca.W_value(x), is_causal=True)
    close(ca(x), expected)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("d_in,d_head,num_heads", [(3, 2, 3), (10, 4, 2)])
def test_wrapper_equals_per_head_sdpa_and_wrapper_to_mha(bias, d_in, d_head, num_heads, close, randomize):
    wrapper = randomize(MultiHeadAttentionWrapper(d_in, d_head, 8, 0.0, num_heads, qkv_bias=bias)).double()
    x = torch.randn(2, 6, d_in, dtype=torch.float64)
    heads = [
        F.scaled_dot_product_attention(h.W_query(x), h.W_key(x), h.W_value(x), is_causal=True) for h in wrapper.heads
    ]
    out = wrapper(x)
    assert out.shape == (2, 6, num_heads * d_head)
    close(out, torch.cat(heads, dim=-1))
    mha = wrapper_to_mha(wrapper)
    assert isinstance(mha, MultiHeadAttention) and mha.d_out == num_heads * d_head
    close(mha(x), out)


# ---------------------------------------------------------------- multi-head


@pytest.mark.parametrize("b,t,ctx,d_in,d_out,nh,bias", MHA_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_mha_equals_sdpa_and_nn_multihead(b, t, ctx, d_in, d_out, nh, bias, dtype, close, randomize, sdpa_ref):
    mha = randomize(MultiHeadAttention(d_in, d_out, ctx, 0.0, nh, qkv_bias=bias)).to(dtype).eval()
    x = torch.randn(b, t, d_in, dtype=dtype)
    out = mha(x)
    assert out.shape == (b, t, d_out)
    close(out, sdpa_ref(mha, x))

    torch_mha = to_nn_multihead(mha).eval()
    query = x if d_in == d_out else mha.W_query(x)  # nn.MultiheadAttention's query projection is the identity then
    hide = torch.ones(t, t, dtype=torch.bool).triu(1)  # nn.MultiheadAttention: True = hide
    expected, _ = torch_mha(query, x, x, attn_mask=hide, need_weights=False)
    close(out, expected)


@pytest.mark.parametrize("b,t,ctx,d_in,d_out,nh,ng,bias", GQA_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gqa_equals_sdpa_enable_gqa(b, t, ctx, d_in, d_out, nh, ng, bias, dtype, close, randomize, sdpa_ref):
    gqa = randomize(GroupedQueryAttention(d_in, d_out, ctx, 0.0, nh, ng, qkv_bias=bias)).to(dtype)
    assert gqa.W_key.out_features == ng * (d_out // nh)  # only num_kv_groups K/V heads are projected
    x = torch.randn(b, t, d_in, dtype=dtype)
    close(gqa(x), sdpa_ref(gqa, x))


@pytest.mark.parametrize("b,t,ctx,d_in,d_out,nh,bias", MHA_SHAPES)
def test_mha_is_gqa_with_one_kv_head_per_query_head(b, t, ctx, d_in, d_out, nh, bias, close):
    ng = nh
    torch.manual_seed(1)
    gqa = GroupedQueryAttention(d_in, d_out, ctx, 0.0, nh, ng, qkv_bias=bias).double()
    torch.manual_seed(1)
    mha = MultiHeadAttention(d_in, d_out, ctx, 0.0, nh, qkv_bias=bias).double()
    x = torch.randn(b, t, d_in, dtype=torch.float64)
    close(mha(x), gqa(x))


@pytest.mark.parametrize("b,t,ctx,d_in,d_out,nh,ng,bias", GQA_SHAPES)
@pytest.mark.parametrize("mask_kind", ["none", "padding", "4d"])
def test_use_sdpa_path_equals_reference_path(b, t, ctx, d_in, d_out, nh, ng, bias, mask_kind, close, randomize):
    ref = randomize(GroupedQueryAttention(d_in, d_out, ctx, 0.0, nh, ng, qkv_bias=bias)).double()
    fused = GroupedQueryAttention(d_in, d_out, ctx, 0.0, nh, ng, qkv_bias=bias, use_sdpa=True).double()
    fused.load_state_dict(ref.state_dict())
    x = torch.randn(b, t, d_in, dtype=torch.float64)
    mask = None
    if mask_kind == "padding":
        mask = padding_mask([t - i for i in range(b)], t)
    elif mask_kind == "4d":
        mask = torch.rand(b, 1, t, t) < 0.3
        mask[..., 0] = False  # keep at least one key per row: fully hidden rows are tested elsewhere
    close(fused(x, mask=mask), ref(x, mask=mask))


def test_return_weights_are_the_softmax_rows(randomize):
    gqa = randomize(GroupedQueryAttention(6, 8, 8, 0.0, 4, 2)).double()
    x = torch.randn(2, 5, 6, dtype=torch.float64)
    out, weights = gqa(x, return_weights=True)
    assert weights.shape == (2, 4, 5, 5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 5, dtype=torch.float64))
    assert torch.all(weights.masked_select(torch.ones(5, 5, dtype=torch.bool).triu(1)) == 0)
    torch.testing.assert_close(out, gqa(x))


# ---------------------------------------------------------------- grouped K/V heads


@pytest.mark.parametrize("n_kv,n_rep", [(1, 4), (2, 3), (3, 1), (4, 2)])
def test_repeat_kv_equals_repeat_interleave(n_kv, n_rep):
    x = torch.randn(2, n_kv, 5, 3)
    out = repeat_kv(x, n_rep)
    torch.testing.assert_close(out, torch.repeat_interleave(x, n_rep, dim=1), atol=0, rtol=0)
    if n_kv > 1 and n_rep > 1:  # tiling (x.repeat) is a different, wrong order
        assert not torch.equal(out, x.repeat(1, n_rep, 1, 1))


@pytest.mark.parametrize("nh,ng", [(6, 2), (8, 4), (4, 1), (4, 4)])
@pytest.mark.parametrize("use_sdpa", [False, True])
def test_query_head_reads_its_kv_group(nh, ng, use_sdpa):
    """Make every value of K/V group g equal to g: the context of query head h must then be h // (nh // ng)."""
    hd = 2
    gqa = GroupedQueryAttention(5, nh * hd, 8, 0.0, nh, ng, qkv_bias=True, use_sdpa=use_sdpa).double()
    with torch.no_grad():
        gqa.W_value.weight.zero_()
        gqa.W_value.bias.copy_(torch.arange(ng, dtype=torch.float64).repeat_interleave(hd))
        gqa.out_proj.weight.copy_(torch.eye(nh * hd))
        gqa.out_proj.bias.zero_()
    out = gqa(torch.randn(2, 6, 5, dtype=torch.float64))  # (B, T, nh * hd)
    group_of_head = torch.arange(nh) // (nh // ng)
    expected = group_of_head.double().repeat_interleave(hd).expand_as(out)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


# ---------------------------------------------------------------- cross-attention


@pytest.mark.parametrize("sq,sk", [(3, 7), (6, 2)])
@pytest.mark.parametrize("nh,ng", [(4, 4), (4, 2), (4, 1)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_cross_attention_equals_sdpa(sq, sk, nh, ng, dtype, close, randomize, sdpa_ref):
    d_in, d_ctx, d_out = 5, 9, 8
    m = randomize(GroupedQueryAttention(d_in, d_out, 8, 0.0, nh, ng, qkv_bias=True, causal=False, d_context=d_ctx)).to(
        dtype
    )
    x, ctx = torch.randn(2, sq, d_in, dtype=dtype), torch.randn(2, sk, d_ctx, dtype=dtype)
    out = m(x, ctx)
    assert out.shape == (2, sq, d_out)
    close(out, sdpa_ref(m, x, ctx))
    fused = GroupedQueryAttention(
        d_in, d_out, 8, 0.0, nh, ng, qkv_bias=True, causal=False, d_context=d_ctx, use_sdpa=True
    ).to(dtype)
    fused.load_state_dict(m.state_dict())
    close(fused(x, ctx), out)


@pytest.mark.parametrize("d_in,d_ctx,d_out", [(5, 9, 8), (8, 3, 8), (8, 8, 8)])
@pytest.mark.parametrize("bias", [False, True])
def test_cross_attention_equals_nn_multihead_kdim_vdim(d_in, d_ctx, d_out, bias, close, randomize):
    m = randomize(MultiHeadAttention(d_in, d_out, 8, 0.0, 2, qkv_bias=bias, causal=False, d_context=d_ctx)).double()
    x, ctx = torch.randn(3, 4, d_in, dtype=torch.float64), torch.randn(3, 6, d_ctx, dtype=torch.float64)
    torch_mha = to_nn_multihead(m).eval()
    same = d_in == d_out == d_ctx
    if not same:
        assert (torch_mha.kdim, torch_mha.vdim) == (d_ctx, d_ctx)
    lengths = [6, 3, 1]
    expected, _ = torch_mha(
        x if same else m.W_query(x), ctx, ctx, key_padding_mask=padding_mask(lengths, 6), need_weights=False
    )
    close(m(x, ctx, mask=padding_mask(lengths, 6)), expected)


# ---------------------------------------------------------------- padding masks


@pytest.mark.parametrize("b,t,ctx,d_in,d_out,nh,ng,bias", GQA_SHAPES)
@pytest.mark.parametrize("use_sdpa", [False, True])
def test_padding_masks_2d_and_4d_equal_sdpa(b, t, ctx, d_in, d_out, nh, ng, bias, use_sdpa, close, randomize, sdpa_ref):
    m = randomize(GroupedQueryAttention(d_in, d_out, ctx, 0.0, nh, ng, qkv_bias=bias, use_sdpa=use_sdpa)).double()
    x = torch.randn(b, t, d_in, dtype=torch.float64)
    lengths = torch.tensor([t - 2 * i for i in range(b)])
    pad = padding_mask(lengths, t)  # (B, Sk), right padding, True = hidden
    allow = (torch.arange(t) < lengths[:, None])[:, None, None, :]  # built independently, SDPA's convention
    expected = sdpa_ref(m, x, allow=allow)
    close(m(x, mask=pad), expected)
    close(m(x, mask=pad[:, None, None, :].expand(b, 1, t, t)), expected)  # (B, 1, Sq, Sk)
    per_head = torch.rand(b, nh, t, t) < 0.4
    per_head[..., 0] = False
    close(m(x, mask=per_head), sdpa_ref(m, x, allow=~per_head))  # (B, nh, Sq, Sk)


@pytest.mark.parametrize("d_in,d_out", [(8, 8), (5, 8)])
def test_mha_padding_equals_nn_multihead_key_padding_mask(d_in, d_out, close, randomize):
    mha = randomize(MultiHeadAttention(d_in, d_out, 8, 0.0, 4, qkv_bias=True)).double()
    x = torch.randn(3, 6, d_in, dtype=torch.float64)
    lengths = [6, 4, 2]
    torch_mha = to_nn_multihead(mha).eval()
    expected, _ = torch_mha(
        x if d_in == d_out else mha.W_query(x),
        x,
        x,
        attn_mask=torch.ones(6, 6, dtype=torch.bool).triu(1),
        key_padding_mask=padding_mask(lengths, 6),
        need_weights=False,
    )
    close(mha(x, mask=padding_mask(lengths, 6)), expected)


# ---------------------------------------------------------------- gradients


@pytest.mark.parametrize("nh,ng", [(4, 4), (4, 2)])
def test_backward_matches_sdpa(nh, ng, close, randomize, sdpa_ref):
    m = randomize(GroupedQueryAttention(6, 8, 8, 0.0, nh, ng, qkv_bias=True)).double()
    x = torch.randn(2, 5, 6, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(2, 5, 8, dtype=torch.float64)
    grads_ours = torch.autograd.grad((m(x) * upstream).sum(), [x, *m.parameters()])
    grads_sdpa = torch.autograd.grad((sdpa_ref(m, x) * upstream).sum(), [x, *m.parameters()])
    for ours, theirs in zip(grads_ours, grads_sdpa, strict=True):
        close(ours, theirs)
    assert grads_ours[0].abs().sum() > 0


def test_attend_equals_sdpa_with_mask(close):
    q = torch.randn(2, 3, 4, 5, dtype=torch.float64)
    k, v = torch.randn(2, 2, 3, 6, 5, dtype=torch.float64)
    hide = torch.rand(2, 1, 4, 6) > 0.6
    hide[..., -1] = False
    ctx, weights = attend(q, k, v, hide)
    close(ctx, F.scaled_dot_product_attention(q, k, v, attn_mask=~hide))
    assert torch.all(weights[hide.expand_as(weights)] == 0)


# ---------------------------------------------------------------- half precision


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_attend_in_half_precision_accumulates_in_float32(dtype):
    """Against float64 truth on the same (rounded) inputs: attend is as close as SDPA, and about 10x closer than
    the same steps in half precision, with or without Hugging Face's upcast softmax."""
    q, k, v = (torch.randn(2, 4, n, 32).mul(s).to(dtype) for n, s in ((64, 2.0), (256, 2.0), (256, 1.0)))
    mask = torch.rand(64, 256) < 0.2
    truth, truth_weights = attend(q.double(), k.double(), v.double(), mask)
    context, weights = attend(q, k, v, mask)
    assert context.dtype == weights.dtype == dtype

    scores = (q @ k.transpose(-2, -1) / math.sqrt(32)).masked_fill(mask, float("-inf"))  # rounded to dtype
    half_weights = torch.softmax(scores, dim=-1)  # the old attend: every step in dtype
    hf_weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(dtype)  # HF's eager attention
    assert torch.equal(hf_weights, half_weights)  # on the CPU, the upcast softmax alone changes nothing

    def error(x, reference):
        return (x.double() - reference).abs().max().item()

    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=~mask)
    assert error(context, truth) <= 1.1 * error(sdpa, truth)
    assert error(context, truth) < error(half_weights @ v, truth) / 5
    assert error(weights, truth_weights) < error(half_weights, truth_weights)
