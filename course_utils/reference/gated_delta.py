"""Linear attention with the gated delta rule (门控 delta 规则): Gated DeltaNet and Kimi Delta Attention (KDA), as a
recurrence and in chunks.

A linear-attention layer keeps, per head, one fixed-size state ``S`` of shape (K, V) instead of a growing KV cache.
Each token decays the state, writes a correction, and reads it with its query:

    S = exp(g_t) * S                               decay (the gate alpha_t = exp(g_t), g_t <= 0)
    S = S + k_t (beta_t * (v_t - S^T k_t))^T       the delta rule: write what S got wrong about k_t, at rate beta_t
    o_t = S^T (scale * q_t)                        read

Gated DeltaNet (Yang et al. 2025; Qwen3-Next and Qwen3.5's linear layers) has one gate per head and token, ``g`` of
shape [B, T, HV]; KDA (Kimi Linear, 2025) one per key channel, ``g`` of shape [B, T, HV, K], which decays each row of
``S`` at its own rate. The recurrence is the definition; the chunked form computes the same outputs and final state
with matrix products: inside a chunk of C tokens the writes depend on each other only through a unit lower-triangular
system (the UT transform of the WY representation, Yang et al. 2024), solved once per chunk, and the state carries
the past from one chunk to the next.

Layout and argument order follow flash-linear-attention's (fla) pure-PyTorch references, ``fla/ops/gated_delta_rule
/naive.py`` and ``fla/ops/kda/naive.py``, so that numbers can be compared with them one to one: q, k [B, T, H, K],
v [B, T, HV, V] (HV a multiple of H: each query/key head serves HV / H value heads, as Qwen3-Next's 16 key and 32 value
heads; fla's kernels and naive KDA take HV, its naive Gated DeltaNet functions HV = H only), beta [B, T, HV], the state
[B, HV, K, V] (the default layout of fla's functions and Hugging Face's, the transpose of the DeltaNet papers'
S in R^{V x K}; fla's kernels can also keep it [B, HV, V, K], ``state_v_first=True``), ``scale`` 1 / sqrt(K) by
default. Gated DeltaNet takes (q, k, v, g, beta, ...) in both forms, the order of fla's chunked
reference, its kernels and Hugging Face's ``torch_*_gated_delta_rule`` fallbacks; fla's naive *recurrent* function
alone puts beta before g (a swap is refused here: g must be <= 0, beta is positive). KDA keeps fla's order too, with
``chunk_size`` last. ``use_qk_l2norm_in_kernel`` normalises q and k as fla's kernels and Hugging Face do
(x / sqrt(sum x^2 + 1e-6), in float32 or wider).

Outputs come back in the inputs' dtype, the final state in the accumulation dtype: float32 for half inputs (as
Hugging Face keeps its recurrent state), float64 stays float64.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..lang import pick


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last axis: fla's (and Hugging Face's) normalisation of q and k."""
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


# ------------------------------------------------------------------------------------------------------ input checks


def _check(q, k, v, g, beta, initial_state, per_channel: bool) -> None:
    for name, t in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta)):
        if not isinstance(t, torch.Tensor):
            kind = type(t).__name__
            raise ValueError(
                pick(f"{name} must be a torch.Tensor, got {kind}", f"{name} 必须是 torch.Tensor，收到的是 {kind}")
            )
        if not t.is_floating_point():
            raise ValueError(
                pick(
                    f"{name} must be a floating tensor, got dtype {t.dtype}",
                    f"{name} 必须是浮点张量，收到的 dtype 是 {t.dtype}",
                )
            )
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim != 4:
            shape = tuple(t.shape)
            raise ValueError(
                pick(
                    f"{name} must have shape [B, T, heads, head_dim], got {shape}; fla's layout puts the tokens before "
                    "the heads: x.transpose(1, 2) from (B, H, T, d)",
                    f"{name} 的形状必须是 [B, T, heads, head_dim]，收到的是 {shape}；fla 的布局把 token 放在头之前："
                    "从 (B, H, T, d) 用 x.transpose(1, 2) 转过来",
                )
            )
    if q.shape != k.shape:
        qs, ks = tuple(q.shape), tuple(k.shape)
        raise ValueError(
            pick(
                f"q and k must have the same shape [B, T, H, K], got {qs} and {ks}",
                f"q 和 k 的形状必须相同 [B, T, H, K]，收到的是 {qs} 和 {ks}",
            )
        )
    if not (q.dtype == k.dtype == v.dtype):
        dtypes = f"{q.dtype}, {k.dtype}, {v.dtype}"
        raise ValueError(
            pick(f"q, k, v must share one dtype, got {dtypes}", f"q、k、v 的 dtype 必须相同，收到的是 {dtypes}")
        )
    b, t, h, dk = q.shape
    if v.shape[:2] != (b, t):
        vs = tuple(v.shape)
        raise ValueError(
            pick(
                f"v must have shape [B={b}, T={t}, HV, V], got {vs}",
                f"v 的形状必须是 [B={b}, T={t}, HV, V]，收到的是 {vs}",
            )
        )
    hv = v.shape[2]
    if hv % h != 0:
        raise ValueError(
            pick(
                f"the value heads HV={hv} must be a multiple of the query/key heads H={h}",
                f"值头数 HV={hv} 必须是查询/键头数 H={h} 的整数倍",
            )
        )
    gate_shape, gs = ((b, t, hv, dk) if per_channel else (b, t, hv)), tuple(g.shape)
    if gs != gate_shape:
        raise ValueError(
            pick(
                f"g ({'one log-decay per key channel' if per_channel else 'one log-decay per value head and token'}) "
                f"must have shape {list(gate_shape)}, got {gs}",
                f"g（{'每个键通道一个衰减的对数' if per_channel else '每个值头、每个 token 一个衰减的对数'}）"
                f"的形状必须是 {list(gate_shape)}，收到的是 {gs}",
            )
        )
    if tuple(beta.shape) != (b, t, hv):
        bs = tuple(beta.shape)
        raise ValueError(
            pick(
                f"beta must have shape [B, T, HV] = {[b, t, hv]}, got {bs}",
                f"beta 的形状必须是 [B, T, HV] = {[b, t, hv]}，收到的是 {bs}",
            )
        )
    if not bool((g <= 0).all()):  # also catches NaN
        top = f"{g.max().item():.3g}"
        raise ValueError(
            pick(
                "g is the log of the decay alpha = exp(g) <= 1, so every entry must be <= 0 (and not NaN); "
                f"got max {top}. Did you pass alpha itself, or beta in g's place?",
                "g 是衰减 alpha = exp(g) <= 1 的对数，所以每个元素都必须 <= 0（且不能是 NaN）；"
                f"收到的最大值是 {top}。是不是把 alpha 本身、或者把 beta 传到了 g 的位置？",
            )
        )
    if initial_state is None:
        return
    expected = [b, hv, dk, v.shape[-1]]
    if not isinstance(initial_state, torch.Tensor) or not initial_state.is_floating_point():
        raise ValueError(
            pick(
                f"initial_state must be a floating torch.Tensor of shape [B, HV, K, V] = {expected}",
                f"initial_state 必须是形状为 [B, HV, K, V] = {expected} 的浮点 torch.Tensor",
            )
        )
    if list(initial_state.shape) != expected:
        got = tuple(initial_state.shape)
        raise ValueError(
            pick(
                f"initial_state must have shape [B, HV, K, V] = {expected}, got {got}",
                f"initial_state 的形状必须是 [B, HV, K, V] = {expected}，收到的是 {got}",
            )
        )


def _prepare(q, k, v, g, beta, scale, initial_state, use_qk_l2norm_in_kernel, per_channel):
    """Checked inputs as (B, HV, T, ...) tensors in the accumulation dtype, q scaled, g as (B, HV, T, 1 or K)."""
    _check(q, k, v, g, beta, initial_state, per_channel)
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    groups = v.shape[2] // q.shape[2]
    q, k, v, g, beta = (x.to(acc) for x in (q, k, v, g, beta))
    if use_qk_l2norm_in_kernel:
        q, k = l2norm(q), l2norm(k)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    q = q * scale
    if groups > 1:  # each query/key head serves `groups` consecutive value heads
        q, k = q.repeat_interleave(groups, dim=2), k.repeat_interleave(groups, dim=2)
    if not per_channel:
        g = g[..., None]  # (B, T, HV, 1): one rate for every key channel
    q, k, v, g = (x.transpose(1, 2) for x in (q, k, v, g))  # (B, HV, T, ...)
    beta = beta.transpose(1, 2)  # (B, HV, T)
    state = None if initial_state is None else initial_state.to(acc)
    return q, k, v, g, beta, state


# -------------------------------------------------------------------------------------------------- the recurrence


def _recurrent(q, k, v, g, beta, state):
    """q, k (B, HV, T, K), v (B, HV, T, V), g (B, HV, T, 1 or K), beta (B, HV, T): one token at a time."""
    b, hv, t, dk = k.shape
    s = q.new_zeros(b, hv, dk, v.shape[-1]) if state is None else state.clone()  # (B, HV, K, V)
    out = q.new_zeros(b, hv, t, v.shape[-1])
    for i in range(t):
        s = s * g[:, :, i].exp()[..., None]  # decay: each key row (GDN: all rows alike)
        k_i = k[:, :, i]  # (B, HV, K)
        predicted = torch.einsum("bhk,bhkv->bhv", k_i, s)  # what the state returns for k_i: S^T k
        correction = beta[:, :, i, None] * (v[:, :, i] - predicted)  # (B, HV, V)
        s = s + k_i[..., None] * correction[..., None, :]  # rank-one write k (beta (v - S^T k))^T
        out[:, :, i] = torch.einsum("bhk,bhkv->bhv", q[:, :, i], s)
    return out, s


def _finish(out, state, like, output_final_state):
    return out.transpose(1, 2).to(like.dtype), (state if output_final_state else None)


def recurrent_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Gated DeltaNet, one token at a time: returns (o [B, T, HV, V], final state [B, HV, K, V] or None).

    q, k [B, T, H, K]; v [B, T, HV, V]; g [B, T, HV] (the log of the per-head decay, <= 0); beta [B, T, HV] (the
    write strength, sigmoid of a projection in Qwen3-Next). Layout of fla's ``naive_recurrent_gated_delta_rule``,
    whose arguments are (q, k, v, beta, g, ...); here g comes before beta, as in fla's kernels and Hugging Face's
    ``torch_recurrent_gated_delta_rule``.
    """
    q_, k_, v_, g_, beta_, state = _prepare(q, k, v, g, beta, scale, initial_state, use_qk_l2norm_in_kernel, False)
    out, state = _recurrent(q_, k_, v_, g_, beta_, state)
    return _finish(out, state, v, output_final_state)


def recurrent_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Kimi Delta Attention, one token at a time: the gated delta rule with g [B, T, HV, K], one log-decay per key
    channel (each row of the state decays at its own rate). Arguments as fla's ``naive_recurrent_kda``."""
    q_, k_, v_, g_, beta_, state = _prepare(q, k, v, g, beta, scale, initial_state, use_qk_l2norm_in_kernel, True)
    out, state = _recurrent(q_, k_, v_, g_, beta_, state)
    return _finish(out, state, v, output_final_state)


# ------------------------------------------------------------------------------------------------- the chunked form


def _within_chunk(q, k, gamma):
    """kk[i, j] = k_i . k_j and qk[i, j] = q_i . k_j, each decayed from token j to token i by exp(gamma_i - gamma_j);
    0 for j > i (a later token). q, k (..., C, K), gamma (..., C, 1 or K); returns two (..., C, C)."""
    c = k.shape[-2]
    future = torch.ones(c, c, dtype=torch.bool, device=k.device).triu(1)  # j > i
    if gamma.shape[-1] == 1:  # Gated DeltaNet: one rate per head, so the pairwise decay is a (C, C) matrix
        gap = gamma[..., :, None, 0] - gamma[..., None, :, 0]  # (..., C, C); exponentiated only where j <= i
        decay = gap.masked_fill(future, float("-inf")).exp()
        return (k @ k.transpose(-1, -2)) * decay, (q @ k.transpose(-1, -2)) * decay
    gap = gamma[..., :, None, :] - gamma[..., None, :, :]  # KDA: (..., C, C, K), the decay inside the dot product
    decay = gap.masked_fill(future[..., None], float("-inf")).exp()
    kk = torch.einsum("...id,...jd,...ijd->...ij", k, k, decay)
    return kk, torch.einsum("...id,...jd,...ijd->...ij", q, k, decay)


def _ut_transform(kk, k, v, beta, gamma):
    """The writes of one chunk, u_i = beta_i (v_i - S_{i-1}^T k_i), all at once, as U = u - w S0 (S0: the state
    before the chunk). Unrolled, (I + L) U = beta V - beta exp(gamma) K S0 with L[i, j] = beta_i kk[i, j] for j < i
    only (token i corrects what the EARLIER writes predict for k_i), so u and w solve one unit lower-triangular system
    (the UT transform; fla's naive reference inverts it by forward substitution, row by row)."""
    c = k.shape[-2]
    system = torch.eye(c, dtype=k.dtype, device=k.device) + (beta * kk).tril(-1)
    u = torch.linalg.solve_triangular(system, beta * v, upper=False, unitriangular=True)  # (..., C, V)
    w = torch.linalg.solve_triangular(system, beta * k * gamma.exp(), upper=False, unitriangular=True)  # (..., C, K)
    return u, w


def _chunked(q, k, v, g, beta, state, chunk_size):
    """The same as ``_recurrent``, ``chunk_size`` tokens at a time: inside a chunk in parallel, across chunks by the
    state."""
    b, hv, t, dk = k.shape
    dv = v.shape[-1]
    c = chunk_size
    pad = -t % c
    if pad:  # padded tokens write nothing (beta = 0, k = 0) and decay nothing (g = 0): the state passes unchanged
        q, k, v, g = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v, g))
        beta = F.pad(beta, (0, pad))
    n = (t + pad) // c
    q, k, v, g = (x.reshape(b, hv, n, c, x.shape[-1]) for x in (q, k, v, g))  # (B, HV, N, C, ...)
    beta = beta.reshape(b, hv, n, c, 1)
    gamma = g.cumsum(dim=-2)  # (B, HV, N, C, 1 or K): log of the decay from the chunk's start to each token
    kk, qk = _within_chunk(q, k, gamma)  # (B, HV, N, C, C); qk keeps its diagonal: a token reads its own write
    u, w = _ut_transform(kk, k, v, beta, gamma)

    s = q.new_zeros(b, hv, dk, dv) if state is None else state.clone()
    out = q.new_zeros(b, hv, n, c, dv)
    for i in range(n):
        writes = u[:, :, i] - w[:, :, i] @ s  # (B, HV, C, V): the corrections, given the state before the chunk
        out[:, :, i] = (q[:, :, i] * gamma[:, :, i].exp()) @ s + qk[:, :, i] @ writes  # the past state + this chunk
        last = gamma[:, :, i, -1]  # (B, HV, 1 or K): the whole chunk's decay
        carried = k[:, :, i] * (last[:, :, None] - gamma[:, :, i]).exp()  # each key, decayed to the chunk's end
        s = last.exp()[..., None] * s + carried.transpose(-1, -2) @ writes
    return out.reshape(b, hv, n * c, dv)[:, :, :t], s


def _check_chunk_size(chunk_size) -> None:
    if not (isinstance(chunk_size, int) and not isinstance(chunk_size, bool) and chunk_size >= 1):
        raise ValueError(
            pick(
                f"chunk_size must be a positive int, got {chunk_size!r}",
                f"chunk_size 必须是正整数，收到的是 {chunk_size!r}",
            )
        )


def chunk_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    chunk_size: int = 64,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Gated DeltaNet in chunks of ``chunk_size`` tokens (any T: the last chunk is padded with tokens that change
    nothing). Arguments and layout of fla's ``naive_chunk_gated_delta_rule``; returns what
    ``recurrent_gated_delta_rule`` returns, up to rounding."""
    _check_chunk_size(chunk_size)
    q_, k_, v_, g_, beta_, state = _prepare(q, k, v, g, beta, scale, initial_state, use_qk_l2norm_in_kernel, False)
    out, state = _chunked(q_, k_, v_, g_, beta_, state, chunk_size)
    return _finish(out, state, v, output_final_state)


def chunk_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    chunk_size: int = 64,
    use_qk_l2norm_in_kernel: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Kimi Delta Attention in chunks; arguments of fla's ``naive_chunk_kda`` (``chunk_size`` after
    ``output_final_state``), any T. The per-channel decay makes the pairwise decay a (C, C, K) tensor."""
    _check_chunk_size(chunk_size)
    q_, k_, v_, g_, beta_, state = _prepare(q, k, v, g, beta, scale, initial_state, use_qk_l2norm_in_kernel, True)
    out, state = _chunked(q_, k_, v_, g_, beta_, state, chunk_size)
    return _finish(out, state, v, output_final_state)
