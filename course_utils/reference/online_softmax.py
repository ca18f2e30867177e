"""Attention tile by tile with an online softmax (在线 softmax): the idea inside FlashAttention, in plain PyTorch.

Naive attention writes the whole (Sq, Sk) score matrix to memory, reads it back for the softmax, writes the weights,
and reads them again for ``@ V``. The online softmax never holds more than one (block, block) tile of scores: for
each query block it walks over the key blocks and keeps, per query row,

* ``m``: the running maximum of the scores seen so far (for a stable ``exp``),
* ``l``: the running sum of ``exp(score - m)``,
* ``acc``: the running, *unnormalised* output ``sum exp(score - m) * v``.

When a new block raises the maximum from ``m`` to ``m_new``, everything accumulated so far was computed relative
to the old maximum, so ``l`` and ``acc`` are both rescaled by ``exp(m - m_new)``. Only at the end is ``acc``
divided by ``l``. The log-sum-exp ``m + log(l)`` of each row is returned too: it is all that the backward pass
needs to recompute any tile of the softmax weights, ``exp(score - lse)``, without storing them.
"""

from __future__ import annotations

import math

import torch

from ..lang import pick
from .masks import check_mask


def _check(q, k, v, block_size, causal, mask):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(
                pick(
                    f"{name} must be a torch.Tensor, got {type(t).__name__}",
                    f"{name} 必须是 torch.Tensor，收到的是 {type(t).__name__}",
                )
            )
        if t.ndim < 2:
            raise ValueError(
                pick(
                    f"{name} must have shape (..., num_tokens, dim), got {tuple(t.shape)}",
                    f"{name} 的形状必须是 (..., num_tokens, dim)，收到的是 {tuple(t.shape)}",
                )
            )
    if not (isinstance(block_size, int) and block_size >= 1):
        raise ValueError(
            pick(
                f"block_size must be a positive int, got {block_size!r}",
                f"block_size 必须是正整数，收到的是 {block_size!r}",
            )
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            pick(
                f"queries and keys need the same head_dim, got q {tuple(q.shape)} and k {tuple(k.shape)}",
                f"查询和键的 head_dim 必须相同，收到的是 q {tuple(q.shape)} 和 k {tuple(k.shape)}",
            )
        )
    if k.shape[:-1] != v.shape[:-1]:
        raise ValueError(
            pick(
                f"keys and values need one row per key token, got k {tuple(k.shape)} and v {tuple(v.shape)}",
                f"键和值必须每个键 token 一行，收到的是 k {tuple(k.shape)} 和 v {tuple(v.shape)}",
            )
        )
    if q.shape[:-2] != k.shape[:-2]:
        raise ValueError(
            pick(
                f"q and k must share their leading (batch, heads) axes, got {tuple(q.shape)} and "
                f"{tuple(k.shape)}; for GQA repeat the K/V heads first (repeat_kv)",
                f"q 和 k 的前几个轴 (batch, heads) 必须相同，收到的是 {tuple(q.shape)} 和 {tuple(k.shape)}；"
                "GQA 请先复制 K/V 头（repeat_kv）",
            )
        )
    if not (q.dtype == k.dtype == v.dtype) or not q.is_floating_point():
        raise ValueError(
            pick(
                f"q, k, v must share one floating dtype, got {q.dtype}, {k.dtype}, {v.dtype}",
                f"q、k、v 必须是同一种浮点 dtype，收到的是 {q.dtype}、{k.dtype}、{v.dtype}",
            )
        )
    num_queries, num_keys = q.shape[-2], k.shape[-2]
    if causal and num_queries > num_keys:
        raise ValueError(
            pick(
                f"causal attention: {num_queries} queries cannot follow only {num_keys} keys",
                f"因果注意力：{num_queries} 个查询不能只跟在 {num_keys} 个键之后",
            )
        )
    if mask is None:
        return None
    check_mask(mask)
    full = (*q.shape[:-2], num_queries, num_keys)
    try:
        return mask.expand(full)  # a view: slicing a tile of it costs nothing
    except RuntimeError:
        raise ValueError(
            pick(
                f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
                f"{full} (..., num_queries, num_keys)",
                f"形状为 {tuple(mask.shape)} 的掩码不能广播到分数的形状 {full} (..., num_queries, num_keys)",
            )
        ) from None


def online_softmax_attention(q, k, v, block_size: int = 64, causal: bool = False, mask=None, scale=None):
    """softmax(q k^T * scale, hidden -> -inf) v, one (block_size, block_size) tile of scores at a time.

    q (..., Sq, d), k (..., Sk, d), v (..., Sk, dv); ``causal`` aligns the queries to the *last* Sq keys (query i
    sits at position Sk - Sq + i, as with a KV cache); ``mask`` is bool, True = hidden, broadcastable to
    (..., Sq, Sk). ``scale`` defaults to 1/sqrt(d).

    Returns ``(out, lse)``: out (..., Sq, dv) in q's dtype, and the log-sum-exp of each row's scaled scores
    (..., Sq) in the accumulation dtype (float32 for half inputs). A row with every key hidden gets out = 0 and
    lse = -inf, not NaN (as ``course_utils.attend`` and SDPA give zero for it).
    """
    hidden = _check(q, k, v, block_size, causal, mask)
    acc_dtype = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    num_queries, num_keys = q.shape[-2], k.shape[-2]
    offset = num_keys - num_queries  # query i sits at position offset + i
    out = q.new_zeros(*q.shape[:-1], v.shape[-1])
    lse = torch.full(q.shape[:-1], float("-inf"), dtype=acc_dtype, device=q.device)

    for qs in range(0, num_queries, block_size):
        qe = min(qs + block_size, num_queries)
        q_blk = q[..., qs:qe, :].to(acc_dtype) * scale  # (..., bq, d)
        m = torch.full(q_blk.shape[:-1], float("-inf"), dtype=acc_dtype, device=q.device)  # (..., bq)
        l = torch.zeros_like(m)
        acc = torch.zeros(*q_blk.shape[:-1], v.shape[-1], dtype=acc_dtype, device=q.device)  # (..., bq, dv)
        # causal: keys after the block's last query (position offset + qe - 1) are hidden from all of it: skip them
        key_end = min(num_keys, offset + qe) if causal else num_keys
        for ks in range(0, key_end, block_size):
            ke = min(ks + block_size, num_keys)
            s = q_blk @ k[..., ks:ke, :].to(acc_dtype).transpose(-2, -1)  # (..., bq, bk): one tile
            if causal and ke - 1 > offset + qs:  # the tile crosses the diagonal: hide its upper part
                q_pos = torch.arange(offset + qs, offset + qe, device=q.device)[:, None]
                k_pos = torch.arange(ks, ke, device=q.device)[None, :]
                s = s.masked_fill(k_pos > q_pos, float("-inf"))
            if hidden is not None:
                s = s.masked_fill(hidden[..., qs:qe, ks:ke], float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))
            # rows with nothing visible yet have m_new = -inf: subtract 0 instead, so exp gives 0 rather than NaN
            m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            p = torch.exp(s - m_safe[..., None])  # (..., bq, bk)
            alpha = torch.exp(m - m_safe)  # rescales what was accumulated relative to the old maximum
            l = alpha * l + p.sum(dim=-1)
            acc = alpha[..., None] * acc + p @ v[..., ks:ke, :].to(acc_dtype)
            m = m_new
        seen = l > 0
        out[..., qs:qe, :] = torch.where(seen[..., None], acc / torch.where(seen, l, 1.0)[..., None], 0.0).to(q.dtype)
        lse[..., qs:qe] = m + torch.log(l)  # -inf + log(0) = -inf for a fully hidden row
    return out, lse
