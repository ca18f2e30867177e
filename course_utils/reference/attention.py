"""Single-head attention, step by step, as in LLMs-from-scratch chapter 3.

Constructor signatures and the order in which parameters are created follow the book, so that
with the same ``torch.manual_seed`` these modules print the book's numbers.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..lang import pick
from ._checks import check_tokens
from .masks import check_mask


def simple_self_attention(inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Self-attention without trainable weights: (num_tokens, d) -> context (num_tokens, d), weights.

    Scores are plain dot products ``inputs @ inputs.T`` (no scaling), normalised by softmax.
    """
    if inputs.ndim != 2:
        raise ValueError(
            pick(
                f"inputs must have shape (num_tokens, d), got {tuple(inputs.shape)}",
                f"inputs 的形状必须是 (num_tokens, d)，收到的是 {tuple(inputs.shape)}",
            )
        )
    attn_scores = inputs @ inputs.T  # (T, T)
    attn_weights = torch.softmax(attn_scores, dim=-1)  # each row sums to 1
    return attn_weights @ inputs, attn_weights


def attend(queries, keys, values, mask=None, dropout: nn.Module | None = None):
    """Scaled dot-product attention: softmax(Q K^T / sqrt(head_dim), hidden keys -> -inf) V.

    Shapes: queries (..., Sq, hd), keys and values (..., Sk, hd), mask bool broadcastable to
    (..., Sq, Sk) with True = hidden (``course_utils.masks``). Returns (context (..., Sq, hd), weights (..., Sq, Sk)).

    For float16/bfloat16 inputs the scores, the softmax and the weighted sum of the values run in float32, and
    the results are rounded to the input dtype once, at the end: what SDPA's and FlashAttention's kernels do, and
    about 10x closer to float64 than the same steps in half precision (tests/reference/test_sdpa.py), for twice
    the memory of the (Sq, Sk) scores, which this unfused reference materialises. Upcasting only the softmax, as
    Hugging Face's eager attention does (``softmax(scores, dtype=torch.float32)``), is not enough: the scores have
    already been rounded to half precision, and on the CPU PyTorch's half-precision softmax already gives the same
    bits as that upcast one.

    A query row whose keys are *all* hidden would be softmax over only -inf, i.e. NaN. Here it gets
    all-zero weights instead, so its context vector is zero (SDPA on the CPU does the same in this PyTorch
    version; nn.MultiheadAttention returns NaN).
    """
    if mask is not None:
        check_mask(mask)
    in_dtype = queries.dtype
    if in_dtype in (torch.float16, torch.bfloat16):
        queries, keys, values = queries.float(), keys.float(), values.float()
    head_dim = queries.shape[-1]
    attn_scores = queries @ keys.transpose(-2, -1) / math.sqrt(head_dim)  # (..., Sq, Sk)
    if mask is not None:
        attn_scores = attn_scores.masked_fill(mask, float("-inf"))
    attn_weights = torch.softmax(attn_scores, dim=-1)
    if mask is not None:
        # rows with nothing to attend to are NaN after softmax; make them attend to nothing
        attn_weights = attn_weights.masked_fill(mask.all(dim=-1, keepdim=True), 0.0)
    if dropout is not None:
        attn_weights = dropout(attn_weights)
    return (attn_weights @ values).to(in_dtype), attn_weights.to(in_dtype)


class SelfAttention_v1(nn.Module):
    """Self-attention with raw ``nn.Parameter`` weights: (..., T, d_in) -> (..., T, d_out)."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.d_in, self.d_out = d_in, d_out
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        if x.shape[-1] != self.d_in:
            raise ValueError(
                pick(
                    f"x has {x.shape[-1]} features in its last axis, but d_in={self.d_in}",
                    f"x 最后一个轴有 {x.shape[-1]} 个特征，但 d_in={self.d_in}",
                )
            )
        keys = x @ self.W_key  # (..., T, d_out)
        queries = x @ self.W_query
        values = x @ self.W_value
        context, _ = attend(queries, keys, values)
        return context


class SelfAttention_v2(nn.Module):
    """Self-attention with ``nn.Linear`` projections: (..., T, d_in) -> (..., T, d_out)."""

    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.d_in, self.d_out = d_in, d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        if x.shape[-1] != self.d_in:
            raise ValueError(
                pick(
                    f"x has {x.shape[-1]} features in its last axis, but d_in={self.d_in}",
                    f"x 最后一个轴有 {x.shape[-1]} 个特征，但 d_in={self.d_in}",
                )
            )
        context, _ = attend(self.W_query(x), self.W_key(x), self.W_value(x))
        return context

    def load_from_v1(self, v1: SelfAttention_v1) -> "SelfAttention_v2":
        """Copy a ``SelfAttention_v1``'s weights; nn.Linear stores W transposed: (d_out, d_in)."""
        with torch.no_grad():
            self.W_query.weight.copy_(v1.W_query.T)
            self.W_key.weight.copy_(v1.W_key.T)
            self.W_value.weight.copy_(v1.W_value.T)
        return self


class CausalAttention(nn.Module):
    """Single-head causal self-attention with dropout: (B, T, d_in) -> (B, T, d_out)."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.d_in, self.d_out, self.context_length = d_in, d_out, context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        # a buffer follows .to(device) and is saved in the state_dict, as in the book
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        check_tokens(x, self.d_in, self.context_length)
        num_tokens = x.shape[1]
        mask = self.mask.bool()[:num_tokens, :num_tokens]  # slice to the actual length; True = hidden
        context, _ = attend(self.W_query(x), self.W_key(x), self.W_value(x), mask, self.dropout)
        return context


class MultiHeadAttentionWrapper(nn.Module):
    """``num_heads`` independent ``CausalAttention`` heads, concatenated: (B, T, d_in) -> (B, T, num_heads*d_out)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)]
        )

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)
