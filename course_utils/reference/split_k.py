"""FlashDecoding (split-K, 沿 KV 序列切分): one query against a long cache, the keys cut into chunks run in parallel.

While decoding, each sequence has one new query per head. FlashAttention parallelises over (batch, heads, query
blocks): with batch 1 and 32 heads that is 32 thread blocks on a GPU with 132 streaming multiprocessors, and each of
them walks the whole cache alone. Split-K cuts the *keys* into ``num_splits`` chunks; each chunk gives a partial
output and the log-sum-exp (LSE) of its scores, exactly what ``online_softmax_attention`` returns (notebook 09),
and a small second step merges the partials:

    m = max_i lse_i,   w_i = exp(lse_i - m),   out = sum_i w_i out_i / sum_i w_i,   lse = m + log(sum_i w_i)

Each ``out_i`` is normalised by its own chunk's softmax sum ``exp(lse_i)``; the weights ``w_i / sum w`` put back the
share of the whole row's sum that chunk holds, so the merge is exact, not an approximation. Subtracting the
largest ``lse_i`` keeps every ``exp`` at most 1, as the running maximum does inside a chunk.
FlashAttention's ``flash_attn_with_kvcache`` (``num_splits``) writes float32 partial outputs and LSEs and combines
them this way; vLLM's PagedAttention V2 does the same over partitions of 512 tokens.

Splitting costs a write and a re-read of the partials and a second kernel, so it pays only when the GPU would
otherwise have too few thread blocks. vLLM runs its unsplit kernel (V1) whenever the longest sequence is at most
8192 tokens and either fits one 512-token partition or ``num_seqs * num_heads > 512`` already fills the GPU;
FlashAttention's ``num_splits_heuristic`` keeps one split once batch x heads x query blocks reach 80% of the SMs.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..lang import pick
from .online_softmax import online_softmax_attention


def merge_partials(outs: torch.Tensor, lses: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge partial attention results over disjoint key chunks into the result over all their keys.

    outs (S, ..., dv): each chunk's softmax-normalised output; lses (S, ...): each chunk's log-sum-exp of its
    scaled scores (-inf for a chunk with every key hidden, whose output is then ignored).
    Returns (out (..., dv), lse (...)); a row hidden in every chunk gets out = 0 and lse = -inf.
    """
    if outs.shape[:-1] != lses.shape:
        raise ValueError(
            pick(
                f"outs (S, ..., dv) and lses (S, ...) must match, got {tuple(outs.shape)} and {tuple(lses.shape)}",
                f"outs (S, ..., dv) 和 lses (S, ...) 必须对应，收到的是 {tuple(outs.shape)} 和 {tuple(lses.shape)}",
            )
        )
    m = lses.amax(dim=0)  # (...)
    m_safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)  # every chunk hidden: avoid -inf - -inf
    w = torch.exp(lses - m_safe)  # (S, ...), each <= 1; 0 for a fully hidden chunk
    total = w.sum(dim=0)  # (...)
    seen = total > 0
    out = (w[..., None] * outs.to(w.dtype)).sum(dim=0) / torch.where(seen, total, 1.0)[..., None]
    return out, m + torch.log(total)  # log(0) = -inf for a row that saw nothing


def split_k_attention(q, k, v, num_splits: int, scale=None, mask=None):
    """softmax(q k^T * scale) v with the keys cut into ``num_splits`` chunks, all chunks in one batched call.

    q (..., Sq, d), k (..., Sk, d), v (..., Sk, dv); mask bool (True = hide) broadcastable to (..., Sq, Sk).
    The chunks have ceil(Sk / num_splits) keys (the last one fewer: its padding is hidden). The split axis becomes
    a batch axis of ``online_softmax_attention``, as each split is one thread block on a GPU; the partials are
    then merged by ``merge_partials``. Returns (out (..., Sq, dv) in q's dtype, lse (..., Sq)); partials are kept
    in float32 for half inputs, as FlashAttention does.
    """
    if not (isinstance(num_splits, int) and num_splits >= 1):
        raise ValueError(
            pick(
                f"num_splits must be a positive int, got {num_splits!r}",
                f"num_splits 必须是正整数，收到的是 {num_splits!r}",
            )
        )
    num_queries, num_keys = q.shape[-2], k.shape[-2]
    if k.shape[-2] != v.shape[-2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(
            pick(
                f"need q (..., Sq, d), k (..., Sk, d), v (..., Sk, dv), got {tuple(q.shape)}, "
                f"{tuple(k.shape)}, {tuple(v.shape)}",
                f"需要 q (..., Sq, d)、k (..., Sk, d)、v (..., Sk, dv)，收到的是 {tuple(q.shape)}、{tuple(k.shape)}、"
                f"{tuple(v.shape)}",
            )
        )
    if num_splits > num_keys:
        raise ValueError(
            pick(
                f"num_splits={num_splits} is more than the {num_keys} keys: some chunks would be empty",
                f"num_splits={num_splits} 比键的个数 {num_keys} 还多：有些块会是空的",
            )
        )
    acc_dtype = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    chunk = -(-num_keys // num_splits)  # ceil
    num_splits = -(-num_keys // chunk)  # e.g. 10 keys in 4 splits of 3: 3, 3, 3, 1 (never an empty split)
    pad = num_splits * chunk - num_keys
    hide = torch.zeros(num_queries, num_keys, dtype=torch.bool, device=q.device) if mask is None else mask
    hide = hide.expand(*q.shape[:-2], num_queries, num_keys)
    if pad:  # the last chunk's missing keys: zeros, hidden
        k, v = F.pad(k, (0, 0, 0, pad)), F.pad(v, (0, 0, 0, pad))
        hide = F.pad(hide, (0, pad), value=True)
    lead = q.shape[:-2]
    k_split = k.reshape(*lead, num_splits, chunk, k.shape[-1]).to(acc_dtype)  # (..., S, chunk, d)
    v_split = v.reshape(*lead, num_splits, chunk, v.shape[-1]).to(acc_dtype)
    hide_split = hide.reshape(*lead, num_queries, num_splits, chunk).movedim(-2, -3)  # (..., S, Sq, chunk)
    q_split = q.to(acc_dtype).unsqueeze(-3).expand(*lead, num_splits, num_queries, q.shape[-1])  # a view
    outs, lses = online_softmax_attention(
        q_split, k_split, v_split, block_size=chunk, mask=hide_split, scale=scale
    )  # (..., S, Sq, dv), (..., S, Sq)
    out, lse = merge_partials(outs.movedim(-3, 0), lses.movedim(-2, 0))
    return out.to(q.dtype), lse
