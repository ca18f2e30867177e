"""Multi-head latent attention (MLA, 多头潜在注意力; DeepSeek-V2, also DeepSeek-V3). Its caches, growing and
preallocated, are in ``course_utils.kv_cache`` with the K/V caches.

Instead of per-head keys and values, each token is compressed into one latent ``c_KV = W_dkv x`` of
``kv_latent_dim`` numbers; the heads' keys and values are up-projections of it, ``k_h = W_uk_h c_KV`` and
``v_h = W_uv_h c_KV``. RoPE on the up-projected keys would put a position-dependent rotation between ``W_uk``
and the query and stop the up-projection from being folded away (rotating the latent itself, against a query
absorbed into latent space, stays absorbable but leaves no explicit form), so a small **decoupled** key
``k_rope = RoPE(W_kr x)`` of ``rope_dim`` numbers, shared by all heads, carries the positions; each head's query
has a matching ``q_rope`` part. The cache holds only ``c_KV`` and ``k_rope``: ``kv_latent_dim + rope_dim``
numbers per token per layer, against ``2 * num_kv_heads * head_dim`` for MHA/GQA.

Two forms compute the same function:

* **explicit**: up-project the cached latents to per-head keys and values, then attend as usual;
* **absorbed**: ``q_h . (W_uk_h c) = (W_uk_h^T q_h) . c``, so fold ``W_uk`` into the query side, attend directly
  over the latents (MQA with one shared key head of width ``kv_latent_dim + rope_dim`` and value head of width
  ``kv_latent_dim``), and apply ``W_uv`` after attending. Decoding then never materialises per-head keys or
  values. Here ``W_uv`` is folded into ``out_proj`` (the same function); at DeepSeek-V3's sizes that folded
  matrix is 4x ``out_proj``, so its reference code applies ``W_uv`` and then ``out_proj``.

Simplifications against DeepSeek's layer: no RMSNorm on the latents (DeepSeek caches the normalised latent),
head_dim = d_out // num_heads for both the non-rotated query/key part and the values, the rotate-half RoPE layout,
and no YaRN scaling.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..lang import pick
from ._checks import check_divisible, check_tokens
from .kv_cache import GrowingLatentKVCache, LatentKVCache, PreallocatedLatentKVCache
from .rotary import apply_rope, rope_cos_sin


class MultiHeadLatentAttention(nn.Module):
    """Causal multi-head latent attention: (B, T, d_in) -> (B, T, d_out).

    Parameters (nn.Linear, weights (out, in)): ``W_query`` d_in -> num_heads * (head_dim + rope_dim) (per head,
    the first head_dim features meet the up-projected keys, the last rope_dim are rotated), ``W_dkv`` d_in ->
    kv_latent_dim, ``W_kr`` d_in -> rope_dim, ``W_uk`` and ``W_uv`` kv_latent_dim -> num_heads * head_dim (no
    bias), ``out_proj`` d_out -> d_out. With ``q_latent_dim`` the query is low-rank too: ``W_dq`` d_in ->
    q_latent_dim, then ``W_query`` q_latent_dim -> ... (DeepSeek's q_lora_rank). Scores are scaled by
    1/sqrt(head_dim + rope_dim).

    forward(x, *, cache=None, absorb=False, return_weights=False)
      cache:  a ``LatentKVCache`` (``make_cache``); x holds only the new tokens, at positions past_len ...
      absorb: attend in latent space with the up-projections folded into the query and output projections
    """

    mask: torch.Tensor  # (context_length, context_length), 1 above the diagonal: a buffer

    def __init__(
        self,
        d_in,
        d_out,
        context_length,
        dropout,
        num_heads,
        kv_latent_dim,
        rope_dim,
        qkv_bias=False,
        *,
        q_latent_dim=None,
        rope_base=10000.0,
    ):
        super().__init__()
        check_divisible(d_out, num_heads, f"d_out ({d_out}) and num_heads ({num_heads})")
        for name, value in (("kv_latent_dim", kv_latent_dim), ("rope_dim", rope_dim)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(
                    pick(
                        f"{name} must be a positive int, got {value!r}",
                        f"{name} 必须是正整数，收到的是 {value!r}",
                    )
                )
        if rope_dim % 2:
            raise ValueError(
                pick(
                    f"rope_dim must be even (RoPE rotates pairs of features), got {rope_dim}",
                    f"rope_dim 必须是偶数（RoPE 成对旋转特征），收到的是 {rope_dim}",
                )
            )
        if q_latent_dim is not None and (not isinstance(q_latent_dim, int) or q_latent_dim <= 0):
            raise ValueError(
                pick(
                    f"q_latent_dim must be None or a positive int, got {q_latent_dim!r}",
                    f"q_latent_dim 必须是 None 或正整数，收到的是 {q_latent_dim!r}",
                )
            )
        self.d_in, self.d_out, self.context_length = d_in, d_out, context_length
        self.num_heads, self.head_dim = num_heads, d_out // num_heads
        self.kv_latent_dim, self.rope_dim, self.q_latent_dim = kv_latent_dim, rope_dim, q_latent_dim
        self.rope_base = rope_base

        if q_latent_dim is not None:
            self.W_dq = nn.Linear(d_in, q_latent_dim, bias=qkv_bias)
        self.W_query = nn.Linear(q_latent_dim or d_in, num_heads * (self.head_dim + rope_dim), bias=qkv_bias)
        self.W_dkv = nn.Linear(d_in, kv_latent_dim, bias=qkv_bias)  # the cached latent c_KV
        self.W_kr = nn.Linear(d_in, rope_dim, bias=qkv_bias)  # the decoupled RoPE key, shared by the heads
        self.W_uk = nn.Linear(kv_latent_dim, d_out, bias=False)
        self.W_uv = nn.Linear(kv_latent_dim, d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def make_cache(self, batch_size: int, preallocate: bool = False, max_len: int | None = None) -> LatentKVCache:
        """A latent cache for this layer: growing, or preallocated for ``max_len`` (default context_length)."""
        if not preallocate:
            return GrowingLatentKVCache()
        w = self.W_dkv.weight
        return PreallocatedLatentKVCache(
            batch_size,
            max_len or self.context_length,
            self.kv_latent_dim,
            self.rope_dim,
            dtype=w.dtype,
            device=w.device,
        )

    def cache_floats_per_token(self) -> int:
        """kv_latent_dim + rope_dim: what one token costs in this layer's cache."""
        return self.kv_latent_dim + self.rope_dim

    def _queries(self, x):
        b, n, _ = x.shape
        xq = self.W_dq(x) if self.q_latent_dim is not None else x
        q = self.W_query(xq).view(b, n, self.num_heads, self.head_dim + self.rope_dim).transpose(1, 2)
        return q.split([self.head_dim, self.rope_dim], dim=-1)  # (B, nh, n, hd), (B, nh, n, r)

    def _project(self, x, positions, cache: LatentKVCache | None):
        """The new tokens' queries (B, nh, n, hd) and rotated (B, nh, n, r), and all latents (B, N, dc) and rotated
        shared keys (B, N, r) so far: the new ones at ``positions``, appended to ``cache`` when there is one."""
        q_nope, q_rope = self._queries(x)
        c_kv = self.W_dkv(x)  # (B, n, dc)
        k_rope = self.W_kr(x)  # (B, n, r)
        cos, sin = rope_cos_sin(positions, self.rope_dim, self.rope_base, dtype=x.dtype, device=x.device)
        q_rope, k_rope = apply_rope(q_rope, cos, sin), apply_rope(k_rope, cos, sin)
        if cache is not None:
            c_kv, k_rope = cache.update(c_kv, k_rope)  # (B, N, dc), (B, N, r): what the cache holds
        return q_nope, q_rope, c_kv, k_rope

    def _up_project(self, c_kv):
        """The per-head keys and values of every latent c_kv (B, N, dc), each (B, nh, N, hd): MLA's MHA mode."""
        b, num_keys, _ = c_kv.shape
        k_nope = self.W_uk(c_kv).view(b, num_keys, self.num_heads, self.head_dim).transpose(1, 2)
        values = self.W_uv(c_kv).view(b, num_keys, self.num_heads, self.head_dim).transpose(1, 2)
        return k_nope, values

    def absorbed_weights(self):
        """(W_uk per head (nh, hd, dc), W_uv per head (nh, hd, dc), out_proj folded with W_uv (d_out, nh, dc)).

        nn.Linear stores W_uk as (out = nh * hd, in = dc), so head h's block is ``weight.view(nh, hd, dc)[h]``
        and ``k_h = W_uk_h @ c``; then q_h . k_h = (q_h @ W_uk_h) . c.
        """
        nh, hd, dc = self.num_heads, self.head_dim, self.kv_latent_dim
        w_uk = self.W_uk.weight.view(nh, hd, dc)
        w_uv = self.W_uv.weight.view(nh, hd, dc)
        w_out = torch.einsum("ohd,hdc->ohc", self.out_proj.weight.view(self.d_out, nh, hd), w_uv)
        return w_uk, w_uv, w_out

    def _new_positions(self, x, cache) -> torch.Tensor:
        """The positions of x's tokens after what the cache holds; refused past context_length."""
        check_tokens(x, self.d_in, self.context_length)
        n = x.shape[1]
        past_len = 0 if cache is None else cache.seq_len
        if past_len + n > self.context_length:
            raise ValueError(
                pick(
                    f"{past_len} cached + {n} new tokens exceed context_length={self.context_length}",
                    f"已缓存 {past_len} 个 + 新的 {n} 个 token 超过了 context_length={self.context_length}",
                )
            )
        return torch.arange(past_len, past_len + n, device=x.device)

    def forward(self, x, *, cache: LatentKVCache | None = None, absorb: bool = False, return_weights: bool = False):
        positions = self._new_positions(x, cache)
        b, n, _ = x.shape
        past_len = 0 if cache is None else cache.seq_len
        q_nope, q_rope, c_kv, k_rope = self._project(x, positions, cache)
        num_keys = c_kv.shape[1]

        rope_scores = q_rope @ k_rope[:, None].transpose(-2, -1)  # (B, nh, n, N), one k_rope for every head
        if absorb:
            w_uk, _, w_out = self.absorbed_weights()
            q_latent = q_nope @ w_uk  # (B, nh, n, hd) @ (nh, hd, dc) -> (B, nh, n, dc)
            scores = q_latent @ c_kv[:, None].transpose(-2, -1) + rope_scores  # (B, nh, n, N)
        else:
            k_nope, values = self._up_project(c_kv)  # (B, nh, N, hd) each
            scores = q_nope @ k_nope.transpose(-2, -1) + rope_scores
        scores = scores / math.sqrt(self.head_dim + self.rope_dim)
        hidden = self.mask[past_len : past_len + n, :num_keys].bool()  # new queries are the last n positions
        weights = self.dropout(torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1))

        if absorb:
            context_latent = weights @ c_kv[:, None]  # (B, nh, n, dc): attention over the latents themselves
            out = torch.einsum("bhnc,ohc->bno", context_latent, w_out) + self.out_proj.bias
        else:
            context = (weights @ values).transpose(1, 2).reshape(b, n, self.d_out)  # (B, n, nh * hd)
            out = self.out_proj(context)
        return (out, weights) if return_weights else out
