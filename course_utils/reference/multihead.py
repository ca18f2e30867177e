"""Multi-head attention with split weights, and its generalisation grouped-query attention (GQA).

``GroupedQueryAttention`` is the general module: ``num_heads`` query heads share ``num_kv_groups`` key/value
heads. ``MultiHeadAttention`` is the special case ``num_kv_groups == num_heads`` (the book's class, same
signature, parameters created in the same order), and MQA is ``num_kv_groups == 1``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..lang import pick
from ._checks import check_divisible, check_tokens
from .attention import attend
from .kv_cache import GrowingKVCache, KVCache, PreallocatedKVCache
from .masks import expand_mask, to_sdpa_mask
from .rotary import apply_rope, rope_cos_sin


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(B, n_kv, T, hd) -> (B, n_kv * n_rep, T, hd); equals torch.repeat_interleave(x, n_rep, dim=1)."""
    if n_rep == 1:
        return x
    b, n_kv, t, hd = x.shape
    return x[:, :, None].expand(b, n_kv, n_rep, t, hd).reshape(b, n_kv * n_rep, t, hd)


class GroupedQueryAttention(nn.Module):
    """Grouped-query attention: (B, Sq, d_in) -> (B, Sq, d_out).

    Query head ``h`` reads K/V group ``h // (num_heads // num_kv_groups)``, the ``repeat_interleave``
    convention of SDPA's ``enable_gqa`` and Hugging Face's ``repeat_kv``.

    forward(x, context=None, *, mask=None, cache=None, return_weights=False, positions=None)
      x:          (B, Sq, d_in) queries (and keys/values, for self-attention)
      context:    (B, Sk, d_context) keys/values for cross-attention (needs ``causal=False``)
      mask:       bool, True = hidden (``course_utils.masks``); (B, Sk) padding or (B, 1, Sq, Sk); combined with
                  the causal mask
      cache:      a ``KVCache``; x holds only the new tokens, which follow the cached ones
      positions:  with ``rope=True``, the new tokens' positions, (Sq,) or (B, Sq); default past_len ... past_len+Sq-1

    ``rope=True`` rotates queries and keys (never values) by RoPE with ``rope_base``, per head, *before* the keys
    enter the cache: cached keys are already rotated, and new tokens take positions past_len, past_len + 1, ...
    """

    mask: torch.Tensor  # (context_length, context_length), 1 above the diagonal: a buffer, when causal

    def __init__(
        self,
        d_in,
        d_out,
        context_length,
        dropout,
        num_heads,
        num_kv_groups,
        qkv_bias=False,
        *,
        causal=True,
        d_context=None,
        use_sdpa=False,
        rope=False,
        rope_base=10000.0,
    ):
        super().__init__()
        check_divisible(d_out, num_heads, f"d_out ({d_out}) and num_heads ({num_heads})")
        check_divisible(num_heads, num_kv_groups, f"num_heads ({num_heads}) and num_kv_groups ({num_kv_groups})")
        if rope and (d_out // num_heads) % 2:
            raise ValueError(
                pick(
                    f"rope=True rotates pairs of features: head_dim = d_out // num_heads = "
                    f"{d_out // num_heads} must be even",
                    f"rope=True 要成对旋转特征：head_dim = d_out // num_heads = {d_out // num_heads} 必须是偶数",
                )
            )
        if rope and not rope_base > 1:
            raise ValueError(
                pick(
                    f"rope_base must be > 1, got {rope_base}",
                    f"rope_base 必须大于 1，收到的是 {rope_base}",
                )
            )
        self.d_in, self.d_out, self.context_length = d_in, d_out, context_length
        self.d_context = d_in if d_context is None else d_context
        self.num_heads, self.num_kv_groups = num_heads, num_kv_groups
        self.head_dim = d_out // num_heads
        self.group_size = num_heads // num_kv_groups  # query heads per K/V head
        self.causal, self.use_sdpa = causal, use_sdpa
        self.rope, self.rope_base = rope, rope_base

        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(self.d_context, num_kv_groups * self.head_dim, bias=qkv_bias)
        self.W_value = nn.Linear(self.d_context, num_kv_groups * self.head_dim, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        if causal:
            self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def make_cache(self, batch_size: int, preallocate: bool = False, max_len: int | None = None) -> KVCache:
        """A cache for this layer: growing (torch.cat), or preallocated for ``max_len`` tokens."""
        if not preallocate:
            return GrowingKVCache()
        weight = self.W_key.weight
        return PreallocatedKVCache(
            batch_size,
            self.num_kv_groups,
            max_len or self.context_length,
            self.head_dim,
            dtype=weight.dtype,
            device=weight.device,
        )

    def _split_heads(self, x, num_heads):
        b, t, _ = x.shape
        return x.view(b, t, num_heads, self.head_dim).transpose(1, 2)  # (B, heads, T, hd)

    def forward(
        self, x, context=None, *, mask=None, cache: KVCache | None = None, return_weights=False, positions=None
    ):
        check_tokens(x, self.d_in, self.context_length)
        b, num_queries, _ = x.shape
        if positions is not None and not self.rope:
            raise ValueError(
                pick(
                    "positions=... is only used with RoPE: build the module with rope=True",
                    "positions=... 只在使用 RoPE 时有用：请用 rope=True 构造模块",
                )
            )
        if context is None:
            context = x
        else:
            if self.causal:
                raise ValueError(
                    pick(
                        "cross-attention (context=...) is not causal: build the module with causal=False",
                        "交叉注意力（context=...）不是因果的：请用 causal=False 构造模块",
                    )
                )
            if self.rope:
                raise ValueError(
                    pick(
                        "rope=True is for self-attention: a cross-attention context has no positions in x's sequence",
                        "rope=True 用于自注意力：交叉注意力的 context 在 x 的序列里没有位置",
                    )
                )
            check_tokens(context, self.d_context, name="context")
            if context.shape[0] != b:
                raise ValueError(
                    pick(
                        f"context has batch {context.shape[0]} but x has batch {b}",
                        f"context 的 batch 是 {context.shape[0]}，而 x 的 batch 是 {b}",
                    )
                )
            if cache is not None:
                # the cache appends every call's keys/values: right for new tokens, wrong for a fixed context
                raise ValueError(
                    pick(
                        "cache=... is for self-attention decoding; cross-attention keys/values do not grow",
                        "cache=... 用于自注意力的解码；交叉注意力的键和值不会增长",
                    )
                )

        queries = self._split_heads(self.W_query(x), self.num_heads)  # (B, nh, Sq, hd)
        keys = self._split_heads(self.W_key(context), self.num_kv_groups)  # (B, ng, Sk, hd)
        values = self._split_heads(self.W_value(context), self.num_kv_groups)  # (B, ng, Sk, hd)

        past_len = 0
        if cache is not None:
            past_len = cache.seq_len
            if past_len + num_queries > self.context_length:
                raise ValueError(
                    pick(
                        f"{past_len} cached + {num_queries} new tokens exceed context_length={self.context_length}",
                        f"已缓存 {past_len} 个 + 新的 {num_queries} 个 token "
                        f"超过了 context_length={self.context_length}",
                    )
                )
        if self.rope:
            queries, keys = self._rotate(queries, keys, past_len, positions)  # before caching; values never
        if cache is not None:
            keys, values = cache.update(keys, values)  # all tokens so far
        num_keys = keys.shape[2]

        hidden = None  # True = hidden, broadcastable to (B, nh, Sq, Sk)
        if self.causal:
            # the new queries are the last num_queries positions: slice the mask's rows from past_len
            # slice before .bool(): converting the whole (context_length, context_length) buffer would cost
            # O(context_length^2) per decoded token
            hidden = self.mask[past_len : past_len + num_queries, :num_keys].bool()
        if mask is not None:
            extra = expand_mask(mask, b, num_queries, num_keys)  # (B or 1, 1 or nh, Sq or 1, Sk)
            if extra.shape[1] not in (1, self.num_heads):
                raise ValueError(
                    pick(
                        f"attention mask of shape {tuple(mask.shape)} has {extra.shape[1]} "
                        f"heads in axis 1; expected 1 (broadcast) or num_heads={self.num_heads}",
                        f"形状为 {tuple(mask.shape)} 的注意力掩码在第 1 轴有 {extra.shape[1]} 个头；应为 1"
                        f"（广播）或 num_heads={self.num_heads}",
                    )
                )
            hidden = extra if hidden is None else hidden | extra

        if self.use_sdpa:
            if return_weights:
                raise ValueError(
                    pick(
                        "return_weights=True needs the reference path (use_sdpa=False)",
                        "return_weights=True 需要走参考实现（use_sdpa=False）",
                    )
                )
            context_vec = self._sdpa(queries, keys, values, hidden, plain_causal=mask is None and past_len == 0)
            weights = None
        else:
            context_vec, weights = attend(
                queries, repeat_kv(keys, self.group_size), repeat_kv(values, self.group_size), hidden, self.dropout
            )
        context_vec = context_vec.transpose(1, 2).contiguous().view(b, num_queries, self.d_out)  # merge heads
        out = self.out_proj(context_vec)
        return (out, weights) if return_weights else out

    def _rotate(self, queries, keys, past_len, positions):
        """RoPE on the new queries and keys, at ``positions`` (default: past_len ... past_len + Sq - 1)."""
        b, _, num_new, _ = queries.shape
        if positions is None:
            positions = torch.arange(past_len, past_len + num_new, device=queries.device)
        else:
            positions = torch.as_tensor(positions, device=queries.device)
            if positions.shape not in ((num_new,), (b, num_new)):
                raise ValueError(
                    pick(
                        f"positions must have shape ({num_new},) or ({b}, {num_new}), one per new token; "
                        f"got {tuple(positions.shape)}",
                        f"positions 的形状必须是 ({num_new},) 或 ({b}, {num_new})，每个新 token 一个位置；"
                        f"收到的是 {tuple(positions.shape)}",
                    )
                )
        cos, sin = rope_cos_sin(positions, self.head_dim, self.rope_base, dtype=queries.dtype, device=queries.device)
        return apply_rope(queries, cos, sin), apply_rope(keys, cos, sin)

    def _sdpa(self, queries, keys, values, hidden, plain_causal):
        """The fused kernel; is_causal only where the mask is the plain square one (no cache, no padding)."""
        dropout_p = self.dropout.p if self.training else 0.0
        gqa = self.group_size > 1
        if self.causal and plain_causal:
            return F.scaled_dot_product_attention(
                queries, keys, values, dropout_p=dropout_p, is_causal=True, enable_gqa=gqa
            )
        # the one place where this module meets SDPA's convention (True = may attend)
        sdpa_mask = None if hidden is None else to_sdpa_mask(hidden)
        out = F.scaled_dot_product_attention(
            queries, keys, values, attn_mask=sdpa_mask, dropout_p=dropout_p, enable_gqa=gqa
        )
        if hidden is None:
            return out
        # rows with no visible key: zero, as in attend(); some fused GPU kernels have returned NaN here
        return out.masked_fill(hidden.all(dim=-1, keepdim=True), 0.0)


class MultiHeadAttention(GroupedQueryAttention):
    """The book's causal multi-head attention: (B, T, d_in) -> (B, T, d_out).

    Parameters ``W_query``, ``W_key``, ``W_value`` (d_in -> d_out) and ``out_proj`` (d_out -> d_out), created
    in the book's order; it is ``GroupedQueryAttention`` with ``num_kv_groups == num_heads``.
    """

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, **kwargs):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, num_heads, qkv_bias, **kwargs)
