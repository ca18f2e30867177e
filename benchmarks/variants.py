"""Causal multi-head attention written eight ways, all computing the same function.

Every variant starts from one reference ``MultiHeadAttention`` (``mha``) and either calls it, shares its
parameters, or holds copies of them, so that outputs and gradients can be compared directly:

  wrapper            MultiHeadAttentionWrapper (one CausalAttention per head), then mha.out_proj
  mha_reference      course_utils MultiHeadAttention, reference path (explicit scores and softmax)
  fused_qkv          one nn.Linear d_in -> 3*d_out, then the reference attention (course_utils.attend)
  einsum             projections, scores and head merge as einsum calls
  sdpa_is_causal     mha's projections + F.scaled_dot_product_attention(is_causal=True): the bare SDPA call
  sdpa_mask          the same with an explicit boolean causal mask
  nn_mha             nn.MultiheadAttention (default call: need_weights=True)
  nn_mha_no_weights  nn.MultiheadAttention(..., need_weights=False)
  ours_sdpa          course_utils MultiHeadAttention(..., use_sdpa=True): the course's fastest path
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from course_utils import (
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    attend,
    causal_mask,
    copy_parameters,
    to_nn_multihead,
    to_sdpa_mask,
)

VARIANTS = (
    "wrapper",
    "mha_reference",
    "fused_qkv",
    "einsum",
    "sdpa_is_causal",
    "sdpa_mask",
    "nn_mha",
    "nn_mha_no_weights",
    "ours_sdpa",
)


class FusedQKV(nn.Module):
    """One projection for queries, keys and values (nanoGPT's ``c_attn``), reference attention after it."""

    def __init__(self, mha: MultiHeadAttention):
        super().__init__()
        self.num_heads, self.head_dim, self.d_out = mha.num_heads, mha.head_dim, mha.d_out
        w = mha.W_query.weight
        self.qkv = nn.Linear(mha.d_in, 3 * mha.d_out, bias=mha.W_query.bias is not None, device=w.device, dtype=w.dtype)
        self.out_proj = mha.out_proj  # shared
        with torch.no_grad():
            self.qkv.weight.copy_(torch.cat([mha.W_query.weight, mha.W_key.weight, mha.W_value.weight]))
            if self.qkv.bias is not None:
                self.qkv.bias.copy_(torch.cat([mha.W_query.bias, mha.W_key.bias, mha.W_value.bias]))

    def forward(self, x):
        b, t, _ = x.shape
        # one matmul, then split: (B, T, 3, nh, hs) -> three (B, nh, T, hs)
        q, k, v = self.qkv(x).view(b, t, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        ctx, _ = attend(q, k, v, causal_mask(t, device=x.device))
        return self.out_proj(ctx.transpose(1, 2).reshape(b, t, self.d_out))


def einsum_mha(mha: MultiHeadAttention, x):
    """The whole layer as einsum calls on mha's weights; the head axis is just another index."""
    nh, hs, t = mha.num_heads, mha.head_dim, x.shape[1]

    def heads(linear):  # nn.Linear weight (nh*hs, d_in) -> (nh, hs, d_in)
        out = torch.einsum("btd,hkd->bhtk", x, linear.weight.view(nh, hs, -1))  # (B, nh, T, hs)
        return out if linear.bias is None else out + linear.bias.view(1, nh, 1, hs)

    q, k, v = heads(mha.W_query), heads(mha.W_key), heads(mha.W_value)
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / hs**0.5  # (B, nh, T, T)
    scores = scores.masked_fill(causal_mask(t, device=x.device), float("-inf"))
    ctx = torch.einsum("bhqk,bhkd->bhqd", torch.softmax(scores, dim=-1), v)  # (B, nh, T, hs)
    # merging heads and out_proj in one contraction: (B, nh, T, hs) x (d_out, nh, hs) -> (B, T, d_out)
    w_o = mha.out_proj.weight.view(mha.d_out, nh, hs)
    return torch.einsum("bhtk,ohk->bto", ctx, w_o) + mha.out_proj.bias


def bare_sdpa(mha: MultiHeadAttention, x, explicit_mask: bool = False):
    """mha's projections around one F.scaled_dot_product_attention call, no module machinery."""
    b, t, _ = x.shape
    nh, hs = mha.num_heads, mha.head_dim
    q = mha.W_query(x).view(b, t, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
    k = mha.W_key(x).view(b, t, nh, hs).transpose(1, 2)
    v = mha.W_value(x).view(b, t, nh, hs).transpose(1, 2)
    if explicit_mask:
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=to_sdpa_mask(causal_mask(t, device=x.device)))
    else:
        ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return mha.out_proj(ctx.transpose(1, 2).reshape(b, t, mha.d_out))


def wrapper_from(mha: MultiHeadAttention) -> MultiHeadAttentionWrapper:
    """A MultiHeadAttentionWrapper whose head h holds rows h*hs:(h+1)*hs of mha's projections."""
    w = mha.W_query.weight
    wrapper = MultiHeadAttentionWrapper(
        mha.d_in, mha.head_dim, mha.context_length, mha.dropout.p, mha.num_heads, qkv_bias=mha.W_query.bias is not None
    )
    wrapper = wrapper.to(device=w.device, dtype=w.dtype)
    with torch.no_grad():
        for h, head in enumerate(wrapper.heads):
            rows = slice(h * mha.head_dim, (h + 1) * mha.head_dim)
            for name in ("W_query", "W_key", "W_value"):
                getattr(head, name).weight.copy_(getattr(mha, name).weight[rows])
                if getattr(head, name).bias is not None:
                    getattr(head, name).bias.copy_(getattr(mha, name).bias[rows])
    return wrapper


def build_variants(d_in, d_out, context_length, num_heads, device, dtype=torch.float32, seed=0):
    """{name: fn(x) -> (B, T, d_out)} for every name in VARIANTS, and the modules holding their parameters."""
    torch.manual_seed(seed)
    mha = MultiHeadAttention(d_in, d_out, context_length, 0.0, num_heads).to(device=device, dtype=dtype).eval()
    ours = MultiHeadAttention(d_in, d_out, context_length, 0.0, num_heads, use_sdpa=True)
    ours = copy_parameters(mha, ours.to(device=device, dtype=dtype)).eval()
    wrapper = wrapper_from(mha).eval()
    fused = FusedQKV(mha).eval()
    torch_mha = to_nn_multihead(mha).eval()
    same_width = d_in == d_out

    def nn_call(x, need_weights):
        # with d_in != d_out, nn.MultiheadAttention's query projection is the identity (see to_nn_multihead)
        query = x if same_width else mha.W_query(x)
        mask = causal_mask(x.shape[1], device=x.device)  # nn.MultiheadAttention reads True = hidden too
        return torch_mha(query, x, x, attn_mask=mask, need_weights=need_weights)[0]

    fns = {
        "wrapper": lambda x: mha.out_proj(wrapper(x)),
        "mha_reference": mha,
        "fused_qkv": fused,
        "einsum": lambda x: einsum_mha(mha, x),
        "sdpa_is_causal": lambda x: bare_sdpa(mha, x),
        "sdpa_mask": lambda x: bare_sdpa(mha, x, explicit_mask=True),
        "nn_mha": lambda x: nn_call(x, True),
        "nn_mha_no_weights": lambda x: nn_call(x, False),
        "ours_sdpa": ours,
    }
    modules = nn.ModuleList([mha, ours, wrapper, fused, torch_mha])
    return fns, modules


def check_variants_agree(fns, modules, x, atol, rtol=0.0):
    """Outputs and input gradients of every variant must match mha_reference; returns the max abs errors."""
    grad_out = torch.randn(*x.shape[:2], modules[0].d_out, device=x.device, dtype=x.dtype)
    results = {}
    for name, fn in fns.items():
        xg = x.detach().clone().requires_grad_(True)
        out = fn(xg)
        out.backward(grad_out)
        results[name] = (out.detach(), xg.grad)
        modules.zero_grad(set_to_none=True)
    ref_out, ref_grad = results["mha_reference"]
    errors = {}
    for name, (out, grad) in results.items():
        err_out = (out - ref_out).abs().max().item()
        err_grad = (grad - ref_grad).abs().max().item()
        tol_out = atol + rtol * ref_out.abs().max().item()
        tol_grad = atol + rtol * ref_grad.abs().max().item()
        if not (err_out <= tol_out and err_grad <= tol_grad):  # also catches NaN
            raise AssertionError(
                f"variant {name} disagrees with mha_reference: max |out diff| = {err_out:.3g}, "
                f"max |grad diff| = {err_grad:.3g} (tolerances {tol_out:.3g}, {tol_grad:.3g})"
            )
        errors[name] = max(err_out, err_grad)
    return errors
