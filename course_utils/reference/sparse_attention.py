"""DeepSeek Sparse Attention (DSA, DeepSeek 稀疏注意力; DeepSeek-V3.2-Exp): a lightning indexer picks which keys
each query reads.

The **lightning indexer** (闪电索引器) scores every earlier token ``s`` for the query token ``t`` with a few small
heads that share one key per token (eq. 1 of the V3.2-Exp report):

    I[t, s] = sum_j  w[t, j] * ReLU(q_idx[t, j] . k_idx[s])

``q_idx[t, j]`` and the weight ``w[t, j]`` come from the query token, ``k_idx[s]`` from the earlier token. The weights
are signed and used as they are: DeepSeek's reference (``Indexer`` in ``inference/model.py``) multiplies them by
``n_heads ** -0.5``, ``head_dim ** -0.5`` and the index query's FP8 scale, all positive, and applies no softmax over
the heads. Each query keeps the ``top_k`` keys of highest score (2048 in V3.2), **one selection shared by all the
query heads** of the main attention, and attends to those alone: with MLA in its MQA mode (absorbed, notebook 10)
every head reads the same latents, so one gather serves them all (DeepSeek's serving kernels, FlashMLA's sparse
attention, gather; its reference code instead scores every cached key and hides the unselected ones). Selection is
causal: a query at position ``i`` ranks keys ``0 .. i`` only. A row with fewer than ``top_k`` visible keys (the first
``top_k - 1`` positions of a prefill) fills its other slots with ``-1``, the convention of fla's ``naive_dsa_indexer``
and of FlashMLA's sparse kernels; DeepSeek's reference instead takes ``top_k`` indices among the masked scores and
lets the causal mask hide the future ones again. Either way a padding slot is never attended.

The indexer is warmed up against the frozen dense attention before sparse training (section 2.1 of the report): the
main attention's weights, summed over heads and L1-normalised per query, are the target ``p``, and the loss is
``KL(p || softmax(I))`` (``indexer_warmup_loss``).

What the course leaves out of DeepSeek's indexer: its Hadamard rotation of ``q_idx`` and ``k_idx`` and their FP8
cast (the index scores are computed in FP8, with a float32 scale per 128 numbers: per token for the keys, per token
and head for the queries). RoPE turns the first ``rope_dim`` features in the rotate-half (non-interleaved) layout,
which is the layout of DeepSeek's indexer: its inference code applied the interleaved one there until DeepSeek
corrected it (README update of 2025-11-17: non-interleaved in the indexer, interleaved in MLA).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..lang import pick
from .kv_cache import GrowingLatentKVCache, LatentKVCache
from .masks import causal_mask
from .mla import MultiHeadLatentAttention
from .rotary import apply_rope, rope_cos_sin

PAD = -1  # an unused selection slot


def _check_tensor(x, ndim: int, name: str, shape: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise ValueError(
            pick(
                f"{name} must be a torch.Tensor of shape {shape}, got {type(x).__name__}",
                f"{name} 必须是形状为 {shape} 的 torch.Tensor，收到的是 {type(x).__name__}",
            )
        )
    if x.ndim != ndim:
        raise ValueError(
            pick(
                f"{name} must have shape {shape}, got a {x.ndim}-D tensor of shape {tuple(x.shape)}",
                f"{name} 的形状必须是 {shape}，收到的是形状为 {tuple(x.shape)} 的 {x.ndim} 维张量",
            )
        )


def indexer_scores(q_idx: torch.Tensor, k_idx: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The lightning indexer's scores: (B, Tq, Tk) = sum_j weights[:, :, j] * ReLU(q_idx[:, :, j] . k_idx).

    q_idx (B, Tq, H_I, d_I): one query per indexer head; k_idx (B, Tk, d_I): one key per token, shared by the
    heads; weights (B, Tq, H_I): signed, per query token and head, used as given (no softmax). Every score is
    computed, future keys included: ``top_k_indices`` hides those.
    """
    _check_tensor(q_idx, 4, "q_idx", "(batch, num_queries, index_heads, index_dim)")
    _check_tensor(k_idx, 3, "k_idx", "(batch, num_keys, index_dim)")
    _check_tensor(weights, 3, "weights", "(batch, num_queries, index_heads)")
    b, tq, h, d = q_idx.shape
    if k_idx.shape[0] != b or k_idx.shape[2] != d:
        raise ValueError(
            pick(
                f"k_idx {tuple(k_idx.shape)} does not fit q_idx {tuple(q_idx.shape)}: need (B={b}, Tk, {d})",
                f"k_idx {tuple(k_idx.shape)} 与 q_idx {tuple(q_idx.shape)} 不匹配：需要 (B={b}, Tk, {d})",
            )
        )
    if weights.shape != (b, tq, h):
        raise ValueError(
            pick(
                f"weights must have shape (B={b}, Tq={tq}, index_heads={h}), got {tuple(weights.shape)}",
                f"weights 的形状必须是 (B={b}, Tq={tq}, index_heads={h})，收到的是 {tuple(weights.shape)}",
            )
        )
    per_head = torch.relu(torch.einsum("bqhd,bkd->bqhk", q_idx, k_idx))  # (B, Tq, H_I, Tk), >= 0
    return torch.einsum("bqhk,bqh->bqk", per_head, weights)


def top_k_indices(scores: torch.Tensor, top_k: int) -> torch.Tensor:
    """(B, Tq, top_k) long: for each query, its ``top_k`` visible keys of highest score, ``-1`` in unused slots.

    scores (B, Tq, Tk): the queries are the *last* Tq of the Tk positions (a prefill has Tq == Tk, a decoding step
    Tq == 1), so query ``i`` sees keys ``0 .. Tk - Tq + i``. Slots are ordered by score; compare selections as sets.
    """
    _check_tensor(scores, 3, "scores", "(batch, num_queries, num_keys)")
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
        raise ValueError(
            pick(f"top_k must be a positive int, got {top_k!r}", f"top_k 必须是正整数，收到的是 {top_k!r}")
        )
    _, tq, tk = scores.shape
    if tq > tk:
        raise ValueError(
            pick(
                f"top-k selection: {tq} queries cannot follow only {tk} keys",
                f"前 k 个选择：{tq} 个查询不能只跟在 {tk} 个键之后",
            )
        )
    future = causal_mask(tq, tk, device=scores.device)  # (Tq, Tk), True = hidden
    kept = min(top_k, tk)
    values, indices = scores.masked_fill(future, float("-inf")).topk(kept, dim=-1)
    indices = indices.masked_fill(values == float("-inf"), PAD)  # a row with fewer visible keys than top_k
    if kept < top_k:
        indices = torch.cat([indices, indices.new_full((*indices.shape[:-1], top_k - kept), PAD)], dim=-1)
    return indices


def selection_mask(indices: torch.Tensor, num_keys: int) -> torch.Tensor:
    """(B, Tq, num_keys) bool, True = hidden (the course's convention): every key that ``indices`` does not select.

    ``-1`` slots select nothing."""
    _check_tensor(indices, 3, "indices", "(batch, num_queries, top_k)")
    b, tq, _ = indices.shape
    selected = torch.zeros(b, tq, num_keys + 1, dtype=torch.bool, device=indices.device)
    selected.scatter_(-1, indices.masked_fill(indices < 0, num_keys), True)  # -1 goes to a spare column
    return ~selected[..., :num_keys]


def sparse_attention(q, k, v, indices, scale: float | None = None) -> torch.Tensor:
    """Attention of each query over its selected keys only, gathered: O(Tq * top_k) work, not O(Tq * Tk).

    q (B, H, Tq, d), k (B, H_kv, Tk, d), v (B, H_kv, Tk, d_v) with H a multiple of H_kv (GQA, MQA), indices
    (B, Tq, top_k) from ``top_k_indices``, one selection for every head, ``-1`` = unused slot. Returns
    (B, H, Tq, d_v). Scaled by ``scale`` (default 1/sqrt(d)). A row whose slots are all unused is an error: every
    query sees at least itself.
    """
    _check_tensor(q, 4, "q", "(batch, heads, num_queries, head_dim)")
    _check_tensor(k, 4, "k", "(batch, kv_heads, num_keys, head_dim)")
    _check_tensor(v, 4, "v", "(batch, kv_heads, num_keys, value_dim)")
    _check_tensor(indices, 3, "indices", "(batch, num_queries, top_k)")
    b, h, tq, d = q.shape
    h_kv, tk = k.shape[1], k.shape[2]
    if k.shape[0] != b or k.shape[3] != d or v.shape[:3] != k.shape[:3] or h % h_kv:
        raise ValueError(
            pick(
                f"q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)} do not fit: k and v need "
                f"(B={b}, H_kv, Tk, ...) with H_kv dividing H={h} and k's last axis {d}",
                f"q {tuple(q.shape)}、k {tuple(k.shape)} 和 v {tuple(v.shape)} 不匹配：k 和 v 需要 "
                f"(B={b}, H_kv, Tk, ...)，H_kv 整除 H={h}，k 的最后一维为 {d}",
            )
        )
    if indices.shape[:2] != (b, tq):
        raise ValueError(
            pick(
                f"indices must have shape (B={b}, Tq={tq}, top_k), got {tuple(indices.shape)}",
                f"indices 的形状必须是 (B={b}, Tq={tq}, top_k)，收到的是 {tuple(indices.shape)}",
            )
        )
    if bool((indices >= tk).any()) or bool((indices < PAD).any()):
        raise ValueError(
            pick(
                f"indices must lie in [0, {tk - 1}] (or be -1 for an unused slot)",
                f"indices 必须在 [0, {tk - 1}] 之间（没用到的位置为 -1）",
            )
        )
    used = indices >= 0  # (B, Tq, K)
    if not bool(used.any(-1).all()):
        raise ValueError(
            pick(
                "a query has no selected key: every row of indices needs at least one index >= 0",
                "有一个查询没有选中任何键：indices 的每一行至少要有一个 >= 0 的下标",
            )
        )
    top_k = indices.shape[-1]
    flat = indices.clamp(min=0).reshape(b, 1, tq * top_k, 1)  # the gather reads slot 0 for padding, then hides it
    k_sel = k.gather(2, flat.expand(b, h_kv, tq * top_k, d)).view(b, h_kv, tq, top_k, d)  # one gather for all heads
    v_sel = v.gather(2, flat.expand(b, h_kv, tq * top_k, v.shape[3])).view(b, h_kv, tq, top_k, v.shape[3])
    q_grouped = q.reshape(b, h_kv, h // h_kv, tq, d)  # query head g * group + i reads K/V head g (repeat_kv)
    scores = torch.einsum("bgiqd,bgqkd->bgiqk", q_grouped, k_sel) * (scale or 1 / math.sqrt(d))
    scores = scores.masked_fill(~used[:, None, None], float("-inf"))  # the unused slots
    weights = torch.softmax(scores, dim=-1)
    out = torch.einsum("bgiqk,bgqkd->bgiqd", weights, v_sel)
    return out.reshape(b, h, tq, v.shape[3])


def dsa_attention(q, k, v, q_idx, k_idx, weights, top_k: int, scale: float | None = None):
    """The whole step: index scores, top-k selection shared by the heads, attention over the selection.

    Shapes as in ``indexer_scores`` and ``sparse_attention`` (the queries are the last Tq of the Tk tokens).
    Returns (output (B, H, Tq, d_v), indices (B, Tq, top_k)). With ``top_k >= Tk`` it is causal attention."""
    indices = top_k_indices(indexer_scores(q_idx, k_idx, weights), top_k)
    return sparse_attention(q, k, v, indices, scale), indices


def indexer_warmup_loss(index_scores: torch.Tensor, attention_weights: torch.Tensor) -> torch.Tensor:
    """The dense warm-up's loss (eq. 3 of the V3.2-Exp report): sum over queries of KL(p_t || softmax(I_t)), averaged
    over the batch.

    index_scores (B, Tq, Tk) from the indexer; attention_weights (B, H, Tq, Tk) from the frozen dense attention
    (causal: zero on future keys). The target p_t is the weights summed over the heads and L1-normalised per query;
    future keys are hidden from the indexer's softmax, and keys with p = 0 add nothing to the KL.
    """
    _check_tensor(index_scores, 3, "index_scores", "(batch, num_queries, num_keys)")
    _check_tensor(attention_weights, 4, "attention_weights", "(batch, heads, num_queries, num_keys)")
    if attention_weights.shape[0] != index_scores.shape[0] or attention_weights.shape[2:] != index_scores.shape[1:]:
        raise ValueError(
            pick(
                f"attention_weights {tuple(attention_weights.shape)} do not fit index_scores "
                f"{tuple(index_scores.shape)}",
                f"attention_weights {tuple(attention_weights.shape)} 与 index_scores "
                f"{tuple(index_scores.shape)} 不匹配",
            )
        )
    target = attention_weights.detach().sum(1)  # (B, Tq, Tk)
    target = target / target.sum(-1, keepdim=True)
    _, tq, tk = index_scores.shape
    future = causal_mask(tq, tk, device=index_scores.device)  # the queries are the last tq positions
    log_q = torch.log_softmax(index_scores.masked_fill(future, float("-inf")), dim=-1)
    terms = torch.where(target > 0, target * (torch.log(target.clamp_min(1e-30)) - log_q), 0.0)
    return terms.sum((-1, -2)).mean()


def recall(selected: torch.Tensor, reference: torch.Tensor) -> float:
    """The share of ``reference``'s selected keys that ``selected`` also selects (both (B, Tq, k), ``-1`` ignored)."""
    _check_tensor(selected, 3, "selected", "(batch, num_queries, k)")
    _check_tensor(reference, 3, "reference", "(batch, num_queries, k)")
    hits = (selected[..., :, None] == reference[..., None, :]) & (reference[..., None, :] >= 0)
    return hits.any(-2).sum().item() / max(1, int((reference >= 0).sum()))


class LightningIndexer(nn.Module):
    """DeepSeek-V3.2's lightning indexer: index queries per head, one index key per token, per-head weights.

    ``wq`` q_in -> n_heads * head_dim (q_in: MLA's query latent, or x), ``wk`` d_in -> head_dim followed by a
    LayerNorm (``k_norm``), ``weights_proj`` d_in -> n_heads. RoPE turns the first ``rope_dim`` features of the index
    queries and keys (0: none). ``forward(x, q_in, positions, keys=None)`` returns the scores (B, T, N) of the T new
    tokens against ``keys`` (the past index keys and the new ones; default: the new ones only).
    """

    def __init__(self, d_in: int, q_in: int, n_heads: int, head_dim: int, rope_dim: int = 0, rope_base=10000.0):
        super().__init__()
        for name, value in (("n_heads", n_heads), ("head_dim", head_dim)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(
                    pick(f"{name} must be a positive int, got {value!r}", f"{name} 必须是正整数，收到的是 {value!r}")
                )
        if not isinstance(rope_dim, int) or rope_dim < 0 or rope_dim % 2 or rope_dim > head_dim:
            raise ValueError(
                pick(
                    f"rope_dim must be an even int in [0, head_dim={head_dim}], got {rope_dim!r}",
                    f"rope_dim 必须是 [0, head_dim={head_dim}] 之间的偶数，收到的是 {rope_dim!r}",
                )
            )
        self.n_heads, self.head_dim, self.rope_dim, self.rope_base = n_heads, head_dim, rope_dim, rope_base
        self.wq = nn.Linear(q_in, n_heads * head_dim, bias=False)
        self.wk = nn.Linear(d_in, head_dim, bias=False)
        self.k_norm = nn.LayerNorm(head_dim)
        self.weights_proj = nn.Linear(d_in, n_heads, bias=False)

    def _rotate(self, x, positions):  # RoPE on the first rope_dim features (DeepSeek's indexer: rope first)
        if not self.rope_dim:
            return x
        cos, sin = rope_cos_sin(positions, self.rope_dim, self.rope_base, dtype=x.dtype, device=x.device)
        part = x[..., : self.rope_dim]
        if x.ndim == 4:  # (B, T, H, d): rotated as (B, H, T, d), the layout apply_rope reads
            rotated = apply_rope(part.transpose(1, 2), cos, sin).transpose(1, 2)
        else:
            rotated = apply_rope(part, cos, sin)
        return torch.cat([rotated, x[..., self.rope_dim :]], dim=-1)

    def keys(self, x, positions):
        """(B, T, head_dim): the index keys of the tokens x at ``positions``: what an indexer cache holds."""
        return self._rotate(self.k_norm(self.wk(x)), positions)

    def queries(self, x, q_in, positions):
        """(index queries (B, T, H_I, d_I), weights (B, T, H_I)), the weights scaled as DeepSeek's reference scales
        them: by n_heads ** -0.5 and head_dim ** -0.5 (the score's 1/sqrt(d) folded in; the FP8 scale of the index
        query that its reference folds in too has no counterpart here)."""
        b, t, _ = q_in.shape
        q = self._rotate(self.wq(q_in).view(b, t, self.n_heads, self.head_dim), positions)
        weights = self.weights_proj(x) * self.n_heads**-0.5 * self.head_dim**-0.5
        return q, weights

    def forward(self, x, q_in=None, positions=None, keys=None):
        t = x.shape[1]
        positions = torch.arange(t, device=x.device) if positions is None else positions
        q, weights = self.queries(x, x if q_in is None else q_in, positions)
        return indexer_scores(q, self.keys(x, positions) if keys is None else keys, weights)


class SparseLatentCache(GrowingLatentKVCache):
    """MLA's latent cache plus the indexer's keys, one (B, T, index_dim) tensor: what a DSA layer keeps per token.

    ``update(c_kv, k_rope)`` as the latent cache; ``update_index_keys(k_idx)`` appends the index keys and returns all
    of them so far."""

    def __init__(self) -> None:
        super().__init__()
        self.index_keys: torch.Tensor | None = None

    def update_index_keys(self, k_idx: torch.Tensor) -> torch.Tensor:
        self.index_keys = k_idx if self.index_keys is None else torch.cat([self.index_keys, k_idx], dim=1)
        return self.index_keys

    def reset(self):
        super().reset()
        self.index_keys = None

    def _held(self):
        return (*super()._held(), self.index_keys)


class SparseLatentAttention(MultiHeadLatentAttention):
    """MLA with DeepSeek Sparse Attention: the lightning indexer picks ``top_k`` latents per query, shared by every
    head, and the heads attend to those alone.

    Same constructor as ``MultiHeadLatentAttention`` plus ``index_heads``, ``index_dim``, ``index_rope_dim`` (the
    indexer's sizes) and ``top_k``. ``forward(x, *, cache=None, absorb=False, return_indices=False)``: explicit
    (MLA's MHA mode, which DeepSeek prefills in), the dense scores with every unselected key hidden; absorbed (MQA
    mode, which DeepSeek decodes in), the selected latents gathered, one gather for all heads, as a sparse attention
    kernel does (DeepSeek's reference code decodes with the unselected latents hidden instead: the same output).
    With ``top_k >= T`` it is MLA.
    """

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
        index_heads: int,
        index_dim: int,
        top_k: int,
        index_rope_dim: int = 0,
        q_latent_dim=None,
        rope_base=10000.0,
    ):
        super().__init__(
            d_in,
            d_out,
            context_length,
            dropout,
            num_heads,
            kv_latent_dim,
            rope_dim,
            qkv_bias,
            q_latent_dim=q_latent_dim,
            rope_base=rope_base,
        )
        if not isinstance(top_k, int) or top_k < 1:
            raise ValueError(
                pick(f"top_k must be a positive int, got {top_k!r}", f"top_k 必须是正整数，收到的是 {top_k!r}")
            )
        self.top_k = top_k
        self.indexer = LightningIndexer(d_in, q_latent_dim or d_in, index_heads, index_dim, index_rope_dim, rope_base)

    def make_cache(self, batch_size: int, preallocate: bool = False, max_len: int | None = None) -> LatentKVCache:
        """A growing latent cache that also keeps the indexer's keys."""
        if preallocate:
            raise ValueError(
                pick(
                    "SparseLatentAttention keeps a growing cache (latents and index keys): preallocate=False",
                    "SparseLatentAttention 用的是逐步增长的缓存（潜在向量和索引键）：preallocate=False",
                )
            )
        return SparseLatentCache()

    def forward(self, x, *, cache=None, absorb=False, return_weights=False, return_indices=False):
        if return_weights:
            raise ValueError(
                pick(
                    "return_weights: not kept by the sparse layer; use return_indices for the selection",
                    "稀疏层不保留注意力权重（return_weights）；要看选择结果请用 return_indices",
                )
            )
        if cache is not None and not isinstance(cache, SparseLatentCache):
            raise ValueError(
                pick(
                    "a SparseLatentAttention needs its own cache (make_cache): it keeps the index keys too",
                    "SparseLatentAttention 需要它自己的缓存（make_cache）：它还要存索引键",
                )
            )
        positions = self._new_positions(x, cache)
        b, n, _ = x.shape
        q_nope, q_rope, c_kv, k_rope = self._project(x, positions, cache)
        num_keys = c_kv.shape[1]

        q_in = self.W_dq(x) if self.q_latent_dim is not None else x
        k_idx = self.indexer.keys(x, positions)
        if cache is not None:
            k_idx = cache.update_index_keys(k_idx)
        q_idx, w_idx = self.indexer.queries(x, q_in, positions)
        indices = top_k_indices(indexer_scores(q_idx, k_idx, w_idx), self.top_k)  # (B, n, top_k), shared by heads

        scale = 1 / math.sqrt(self.head_dim + self.rope_dim)
        if absorb:  # gather the selected latents once for all heads: attention over top_k entries, not N
            w_uk, _, w_out = self.absorbed_weights()
            q_latent = q_nope @ w_uk  # (B, nh, n, dc)
            flat = indices.clamp(min=0).reshape(b, n * self.top_k, 1)
            c_sel = c_kv.gather(1, flat.expand(-1, -1, self.kv_latent_dim)).view(b, n, self.top_k, -1)
            r_sel = k_rope.gather(1, flat.expand(-1, -1, self.rope_dim)).view(b, n, self.top_k, -1)
            scores = torch.einsum("bhnc,bnkc->bhnk", q_latent, c_sel) + torch.einsum("bhnr,bnkr->bhnk", q_rope, r_sel)
            scores = (scores * scale).masked_fill((indices < 0)[:, None], float("-inf"))  # padding slots
            weights = self.dropout(torch.softmax(scores, dim=-1))
            context_latent = torch.einsum("bhnk,bnkc->bhnc", weights, c_sel)
            out = torch.einsum("bhnc,ohc->bno", context_latent, w_out) + self.out_proj.bias
        else:  # DeepSeek's prefill: dense scores, every key outside the selection hidden
            k_nope, values = self._up_project(c_kv)  # (B, nh, N, hd) each
            scores = (q_nope @ k_nope.transpose(-2, -1) + q_rope @ k_rope[:, None].transpose(-2, -1)) * scale
            hidden = selection_mask(indices, num_keys)[:, None]  # (B, 1, n, N): the same for every head
            weights = self.dropout(torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1))
            out = self.out_proj((weights @ values).transpose(1, 2).reshape(b, n, self.d_out))
        return (out, indices) if return_indices else out
