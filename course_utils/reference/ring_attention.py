"""Ring attention and context parallelism (上下文并行): one sequence's attention split across devices.

When one sequence's keys and values (or a training step's activations) no longer fit one device, the *sequence* is
cut into ``world_size`` chunks, one per device (a "rank"). Each rank keeps its query chunk. In **ring attention**
the K/V chunks travel around a ring: at step ``t`` rank ``r`` holds the K/V chunk of rank ``(r - t) % world_size``,
attends its queries to it, giving a partial ``(out, lse)`` over those keys, and merges it into its running result
with the log-sum-exp merge of split-K (``merge_partials``, notebook 13) while the next chunk is already on its way.
After ``world_size`` steps every query has seen every key, exactly.

Causal attention makes the ring lopsided: with contiguous chunks rank 0's queries see only its own keys, the last
rank's see all of them. The **zigzag** layout cuts the sequence into ``2 * world_size`` pieces and gives rank ``r``
pieces ``r`` and ``2 * world_size - 1 - r`` (one early, one late): every rank then has the same visible query-key
pairs at every step. The work is balanced only if a step computes just those: at every step but the first, the
visible pairs of a zigzag chunk are one half of the queries against all keys, or all queries against one half of the
keys (ring-flash-attention's zigzag forward slices so, as PyTorch's ``_templated_ring_attention`` does). A step
here computes the rows that see some key against the keys some row sees (``attend_visible``), which is that half.

K and V travel with their own heads (``Hkv`` of them, under GQA fewer than the query heads): a rank expands them to
the query heads only after receiving them, so the ring sends ``Hkv / H`` of what expanded K/V would cost.

The two other ways to split attention over the sequence are here as byte counts and as simulations:
**all-gather** context parallelism (every rank gathers all K/V, then attends its queries) and **Ulysses** (an
all-to-all turns "all heads, a chunk of tokens" into "all tokens, a chunk of heads" and back).

Two forms of the ring: ``ring_attention_simulated`` runs every rank in one process over a list of chunks (for the
notebook, the tests and the grader; differentiable), and ``ring_attention_rank`` is one rank's side over
``torch.distributed`` (gloo on CPU, NCCL on GPUs), run by ``launch_local`` (torch.multiprocessing, loopback only)
or unchanged by ``torchrun`` (``torchrun --nproc-per-node=N -m course_utils.reference.ring_torchrun``).
"""

from __future__ import annotations

import math
import os
import queue
import shutil
import socket
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..lang import pick
from .split_k import merge_partials

LAYOUTS = ("contiguous", "zigzag")


# ---------------------------------------------------------------------------------------------
# which tokens each rank holds


def _check_split(seq_len, world_size, layout):
    if layout not in LAYOUTS:
        raise ValueError(
            pick(
                f"layout must be one of {LAYOUTS}, got {layout!r}",
                f"layout 必须是 {LAYOUTS} 之一，收到的是 {layout!r}",
            )
        )
    if not (isinstance(world_size, int) and world_size >= 1):
        raise ValueError(
            pick(
                f"world_size must be a positive int, got {world_size!r}",
                f"world_size 必须是正整数，收到的是 {world_size!r}",
            )
        )
    pieces = world_size * (2 if layout == "zigzag" else 1)
    if seq_len < pieces:
        raise ValueError(
            pick(
                f"{seq_len} tokens cannot be cut into {pieces} non-empty pieces ({layout}, world_size={world_size})",
                f"{seq_len} 个 token 切不成 {pieces} 段非空的片段（{layout}，world_size={world_size}）",
            )
        )


def chunk_positions(seq_len: int, world_size: int, layout: str = "contiguous") -> list[torch.Tensor]:
    """The positions (into the sequence) of the tokens each rank holds, as a list of ``world_size`` long tensors.

    contiguous: rank r holds the r-th of ``world_size`` runs (sizes differ by at most one when world_size does not
    divide seq_len, as ``torch.tensor_split`` cuts). zigzag: the sequence is cut into ``2 * world_size`` pieces the
    same way and rank r holds pieces r and ``2 * world_size - 1 - r``.
    """
    _check_split(seq_len, world_size, layout)
    positions = torch.arange(seq_len)
    if layout == "contiguous":
        return list(positions.tensor_split(world_size))
    pieces = positions.tensor_split(2 * world_size)
    return [torch.cat([pieces[r], pieces[2 * world_size - 1 - r]]) for r in range(world_size)]


def split_sequence(x: torch.Tensor, world_size: int, layout: str = "contiguous") -> list[torch.Tensor]:
    """x (..., S, d) -> each rank's chunk (..., S_r, d), in the layout's order."""
    return [x[..., pos, :] for pos in chunk_positions(x.shape[-2], world_size, layout)]


def gather_sequence(chunks: list[torch.Tensor], layout: str = "contiguous") -> torch.Tensor:
    """The inverse of ``split_sequence``: each rank's chunk (..., S_r, d) -> x (..., S, d) in sequence order."""
    seq_len = sum(c.shape[-2] for c in chunks)
    order = torch.cat(chunk_positions(seq_len, len(chunks), layout))  # where each stacked row belongs
    return torch.cat(chunks, dim=-2)[..., torch.argsort(order), :]


def ring_sources(world_size: int) -> list[list[int]]:
    """sources[step][rank]: whose K/V chunk rank ``rank`` holds at step ``step`` (it arrived from rank - 1)."""
    return [[(rank - step) % world_size for rank in range(world_size)] for step in range(world_size)]


# ---------------------------------------------------------------------------------------------
# one step: a query chunk against one K/V chunk, and the merge


def attend_chunk(q, k, v, q_pos, k_pos, causal: bool, scale=None):
    """softmax over one K/V chunk: q (..., H, Sq, d), k (..., Hkv, Sk, d), v (..., Hkv, Sk, dv) at sequence positions
    q_pos (Sq,) and k_pos (Sk,); Hkv divides H (GQA: query head h reads K/V head h // (H / Hkv), as ``repeat_kv``);
    causal hides keys after their query. Returns (out (..., H, Sq, dv), lse (..., H, Sq)); a row whose keys are all
    hidden gets out = 0 and lse = -inf, with gradients 0, not NaN."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if q.ndim >= 3 and k.shape[-3] != q.shape[-3]:  # K/V arrived with their own heads: expand them here
        group = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    s = (q @ k.transpose(-2, -1)) * scale  # (..., Sq, Sk)
    if causal:
        s = s.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
    m = s.amax(dim=-1, keepdim=True)  # (..., Sq, 1)
    seen = torch.isfinite(m)
    m_safe = torch.where(seen, m, torch.zeros_like(m))  # a fully hidden row: subtract 0, exp gives 0, not NaN
    p = torch.exp(s - m_safe)
    total = p.sum(dim=-1, keepdim=True)
    total_safe = torch.where(seen, total, torch.ones_like(total))  # log and divide by 1, never by 0
    out = torch.where(seen, (p @ v) / total_safe, torch.zeros_like(total))
    lse = torch.where(seen, m_safe + torch.log(total_safe), torch.full_like(m, float("-inf")))
    return out, lse[..., 0]


def merge_step(out, lse, out_i, lse_i):
    """The running (out, lse) merged with one more chunk's (out_i, lse_i): split-K's merge of two partials."""
    if out is None:
        return out_i, lse_i
    return merge_partials(torch.stack([out, out_i]), torch.stack([lse, lse_i]))


def chunk_hidden(q_pos, k_pos, causal: bool) -> bool:
    """True when every key of the chunk is after every query (causal): the step is skipped, no work done."""
    return causal and bool(k_pos.min() > q_pos.max())


def visible_pairs(q_pos, k_pos, causal: bool) -> int:
    """How many (query, key) scores of this step are not hidden: the work the step really needs."""
    if not causal:
        return len(q_pos) * len(k_pos)
    return int((k_pos[None, :] <= q_pos[:, None]).sum())


def visible_rows_and_keys(q_pos, k_pos, causal: bool):
    """(rows, keys): the query rows that see some key of the chunk, and the keys some row sees (index tensors)."""
    if not causal:
        return torch.arange(len(q_pos), device=q_pos.device), torch.arange(len(k_pos), device=k_pos.device)
    rows = torch.nonzero(q_pos >= k_pos.min()).flatten()
    keys = torch.nonzero(k_pos <= q_pos.max()).flatten()
    return rows, keys


def computed_scores(q_pos, k_pos, causal: bool) -> int:
    """How many scores ``attend_visible`` computes at this step: rows that see something x keys that are seen."""
    rows, keys = visible_rows_and_keys(q_pos, k_pos, causal)
    return len(rows) * len(keys)


def attend_visible(q, k, v, q_pos, k_pos, causal: bool, scale=None):
    """``attend_chunk`` on the part of the chunk that matters: the rows that see some key against the keys some row
    sees (with zigzag, at every step but the first, one half of the block); the other rows get out = 0 and
    lse = -inf, as ``attend_chunk`` gives them. The same result, fewer scores computed."""
    rows, keys = visible_rows_and_keys(q_pos, k_pos, causal)
    if len(rows) == len(q_pos) and len(keys) == len(k_pos):
        return attend_chunk(q, k, v, q_pos, k_pos, causal, scale)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    out_rows, lse_rows = attend_chunk(
        q[..., rows, :], k[..., keys, :], v[..., keys, :], q_pos[rows], k_pos[keys], causal, scale
    )
    out = out_rows.new_zeros(*out_rows.shape[:-2], len(q_pos), out_rows.shape[-1])
    lse = lse_rows.new_full((*lse_rows.shape[:-1], len(q_pos)), float("-inf"))
    out = out.index_copy(-2, rows, out_rows)  # out of place: gradients flow to the computed rows
    lse = lse.index_copy(-1, rows, lse_rows)
    return out, lse


# ---------------------------------------------------------------------------------------------
# the ring, every rank simulated in one process


def _check_qkv(q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.ndim < 2:
            raise ValueError(
                pick(
                    f"{name} must be a tensor of shape (..., num_tokens, dim), got "
                    f"{getattr(t, 'shape', type(t).__name__)}",
                    f"{name} 必须是形状为 (..., num_tokens, dim) 的张量，收到的是 "
                    f"{getattr(t, 'shape', type(t).__name__)}",
                )
            )
    gqa = q.ndim >= 3 and k.ndim == q.ndim and 0 < k.shape[-3] and q.shape[-3] % k.shape[-3] == 0
    same_lead = q.shape[:-1] == k.shape[:-1] or (gqa and (q.shape[:-3], q.shape[-2]) == (k.shape[:-3], k.shape[-2]))
    if not same_lead or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]:
        raise ValueError(
            pick(
                f"self-attention over one sequence needs q, k (..., S, d) and v (..., S, dv) with the same "
                f"leading axes (or, GQA, K/V heads dividing the query heads), got {tuple(q.shape)}, {tuple(k.shape)}, "
                f"{tuple(v.shape)}",
                f"对一条序列做自注意力，需要 q、k (..., S, d) 和 v (..., S, dv) 的前几个轴相同（GQA 时 K/V 头数要整除"
                f"查询头数），收到的是 {tuple(q.shape)}、{tuple(k.shape)}、{tuple(v.shape)}",
            )
        )


def ring_attention_simulated(q, k, v, world_size: int, causal: bool = False, layout: str = "contiguous", scale=None):
    """Ring attention with ``world_size`` ranks simulated in one process; returns (out (..., S, dv), lse (..., S))
    in sequence order, equal to softmax(q k^T * scale) v (causal or not). q, k (..., S, d), v (..., S, dv)."""
    _check_qkv(q, k, v)
    positions = [p.to(q.device) for p in chunk_positions(q.shape[-2], world_size, layout)]
    q_chunks, k_chunks, v_chunks = (split_sequence(t, world_size, layout) for t in (q, k, v))
    outs, lses = [], []
    for rank in range(world_size):
        out = lse = None
        for step in range(world_size):
            src = (rank - step) % world_size  # the K/V chunk that has travelled ``step`` hops to reach this rank
            if chunk_hidden(positions[rank], positions[src], causal):
                continue
            out_i, lse_i = attend_visible(
                q_chunks[rank], k_chunks[src], v_chunks[src], positions[rank], positions[src], causal, scale
            )
            out, lse = merge_step(out, lse, out_i, lse_i)
        assert out is not None and lse is not None  # step 0, the rank's own chunk, is never hidden
        outs.append(out)
        lses.append(lse)
    return gather_sequence(outs, layout), gather_sequence([x[..., None] for x in lses], layout)[..., 0]


def work_per_step(
    seq_len: int, world_size: int, causal: bool, layout: str = "contiguous", computed: bool = False
) -> torch.Tensor:
    """work[step, rank]: the visible (query, key) pairs rank ``rank`` has at ring step ``step`` (``computed``: the
    scores it computes for them, ``computed_scores``; a step whose chunk is hidden computes none). A step's time is
    its slowest rank's, so the ring's time is ``work.amax(dim=1).sum()``; perfect balance is
    ``visible.sum() / world_size``."""
    positions = chunk_positions(seq_len, world_size, layout)
    count = computed_scores if computed else visible_pairs
    return torch.tensor(
        [
            [
                0
                if chunk_hidden(positions[rank], positions[src], causal)
                else count(positions[rank], positions[src], causal)
                for rank, src in enumerate(sources)
            ]
            for sources in ring_sources(world_size)
        ]
    )


# ---------------------------------------------------------------------------------------------
# the other two: all-gather context parallelism and Ulysses, simulated


def allgather_attention_simulated(
    q, k, v, world_size: int, causal: bool = False, layout: str = "contiguous", scale=None
):
    """All-gather context parallelism (as Llama 3 trained at long context): every rank gathers every rank's
    K/V chunk, then attends its own query chunk to all of it in one call. Returns (out, lse) in sequence order."""
    _check_qkv(q, k, v)
    positions = [p.to(q.device) for p in chunk_positions(q.shape[-2], world_size, layout)]
    q_chunks, k_chunks, v_chunks = (split_sequence(t, world_size, layout) for t in (q, k, v))
    k_all, v_all, k_pos = torch.cat(k_chunks, -2), torch.cat(v_chunks, -2), torch.cat(positions)  # the gather
    results = [attend_chunk(q_chunks[r], k_all, v_all, positions[r], k_pos, causal, scale) for r in range(world_size)]
    return (
        gather_sequence([o for o, _ in results], layout),
        gather_sequence([lse[..., None] for _, lse in results], layout)[..., 0],
    )


def ulysses_attention_simulated(q, k, v, world_size: int, causal: bool = False, scale=None):
    """DeepSpeed-Ulysses: q, k, v (B, H, S, d), each rank holding a contiguous chunk of tokens for all heads. An
    all-to-all gives each rank all tokens for H / world_size heads; it attends them whole; a second all-to-all
    sends the outputs back to token chunks. Returns out (B, H, S, dv)."""
    _check_qkv(q, k, v)
    if q.ndim != 4 or q.shape[1] % world_size:
        raise ValueError(
            pick(
                f"Ulysses needs q (B, H, S, d) with H divisible by world_size={world_size}, got {tuple(q.shape)}",
                f"Ulysses 需要 q 的形状为 (B, H, S, d)，且 H 能被 world_size={world_size} 整除，"
                f"收到的是 {tuple(q.shape)}",
            )
        )
    seq_len = q.shape[-2]
    token_chunks = [split_sequence(t, world_size) for t in (q, k, v)]  # [tensor][rank]: (B, H, S_r, d)

    def all_to_all(per_rank):  # rank r's (B, H, S_r, .) -> rank r's (B, H / W, S, .): heads r*H/W.. of every token
        return [torch.cat([chunk.chunk(world_size, dim=1)[r] for chunk in per_rank], dim=-2) for r in range(world_size)]

    qh, kh, vh = (all_to_all(chunks) for chunks in token_chunks)
    pos = torch.arange(seq_len, device=q.device)
    outs = [attend_chunk(qh[r], kh[r], vh[r], pos, pos, causal, scale)[0] for r in range(world_size)]
    return torch.cat(outs, dim=1)  # the inverse all-to-all, heads back together


# ---------------------------------------------------------------------------------------------
# bytes each rank sends, by formula


def comm_bytes_per_rank(
    method: str,
    seq_len: int,
    world_size: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    bytes_per_element: int = 2,
    batch: int = 1,
) -> float:
    """Bytes one rank sends for one attention layer's forward, with the sequence split evenly:

    ring:       world_size - 1 hops, each passing its K and V chunk:      (W-1)/W * S * 2 * Hkv * d
    all-gather: its K/V chunk reaches the W-1 others (a ring all-gather): (W-1)/W * S * 2 * Hkv * d
    ulysses:    all-to-all of q, k, v in and of the output back, keeping 1/W of each: (W-1)/W * S/W * (2H + 2Hkv) * d
    """
    W, S = world_size, seq_len
    per_token = {
        "ring": 2 * num_kv_heads,
        "allgather": 2 * num_kv_heads,
        "ulysses": (2 * num_heads + 2 * num_kv_heads) / W,
    }
    if method not in per_token:
        raise ValueError(
            pick(
                f"method must be one of {tuple(per_token)}, got {method!r}",
                f"method 必须是 {tuple(per_token)} 之一，收到的是 {method!r}",
            )
        )
    if method == "ulysses" and (num_heads % W or num_kv_heads % W):
        raise ValueError(
            pick(
                f"Ulysses splits heads: world_size={W} must divide num_heads={num_heads} and "
                f"num_kv_heads={num_kv_heads} (replicate K/V heads first for more ranks)",
                f"Ulysses 按头切分：world_size={W} 必须整除 num_heads={num_heads} 和 num_kv_heads={num_kv_heads}"
                "（要用更多 rank，请先复制 K/V 头）",
            )
        )
    return (W - 1) / W * S * per_token[method] * head_dim * bytes_per_element * batch


# ---------------------------------------------------------------------------------------------
# the ring across processes: torch.distributed


def _wait(work, timeout_s, what, waited=None):
    """Wait for one transfer at most ``timeout_s`` seconds; a neighbour that never sends or receives (a deadlock)
    is then named as a TimeoutError instead of hanging the ring. ``waited``: a list the seconds spent are added to."""
    start = time.perf_counter()
    try:
        done = work.wait(timedelta(seconds=timeout_s))
    except RuntimeError as exc:  # gloo raises on its timeout; NCCL's watchdog aborts
        if "timed out" not in str(exc).lower():
            raise
        done = False
    if waited is not None:
        waited.append(time.perf_counter() - start)
    if done is False:
        raise TimeoutError(
            pick(
                f"{what} did not complete in {timeout_s} s: a neighbour that never sends or receives (a deadlock?)",
                f"{what} 在 {timeout_s} 秒内没有完成：某个邻居一直不发送或不接收（死锁？）",
            )
        )


def ring_attention_rank(
    q,
    k,
    v,
    seq_len: int,
    causal: bool = False,
    layout: str = "contiguous",
    scale=None,
    timeout_s: float = 30.0,
    overlap: bool = True,
    waited: list | None = None,
):
    """One rank's side of ring attention over the default process group: q (..., H, S_r, d), k (..., Hkv, S_r, d),
    v (..., Hkv, S_r, dv) are this rank's chunks (``split_sequence`` of the whole sequence of ``seq_len`` tokens).
    Returns (out, lse, bytes_sent): this rank's output rows, their log-sum-exp, and the bytes it handed to isend.

    While the chunk received last step is attended, the next one is already travelling (isend to rank + 1, irecv
    from rank - 1, posted together before the compute): communication overlapped with compute. ``overlap=False``
    waits for each hop before attending instead (the blocking ring, to compare). K/V travel with their Hkv heads and
    are expanded to the query heads after receipt. Every wait is bounded by ``timeout_s``, so a stuck ring is named
    by a timeout, not a hang; ``waited`` collects the seconds spent in each wait."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    positions = [p.to(q.device) for p in chunk_positions(seq_len, world_size, layout)]  # all ranks': sizes, masks
    nxt, prev = (rank + 1) % world_size, (rank - 1) % world_size
    kv = torch.cat([k, v], dim=-1).contiguous()  # one message per hop: (..., Hkv, S_src, d + dv)
    d = k.shape[-1]
    out = lse = None
    bytes_sent = 0
    for step in range(world_size):
        src = (rank - step) % world_size
        pending = []
        if step < world_size - 1:  # post the next hop before computing: it travels while we attend
            incoming = kv.new_empty(*kv.shape[:-2], len(positions[(src - 1) % world_size]), kv.shape[-1])
            pending = dist.batch_isend_irecv([dist.P2POp(dist.isend, kv, nxt), dist.P2POp(dist.irecv, incoming, prev)])
            bytes_sent += kv.numel() * kv.element_size()
        held = kv
        if not overlap:  # the blocking ring: the hop completes before this step's attention starts
            for work in pending:
                _wait(work, timeout_s, f"rank {rank}: ring step {step}", waited)
            pending = []
        if not chunk_hidden(positions[rank], positions[src], causal):
            out_i, lse_i = attend_visible(
                q, held[..., :d], held[..., d:], positions[rank], positions[src], causal, scale
            )
            out, lse = merge_step(out, lse, out_i, lse_i)
        for work in pending:
            _wait(work, timeout_s, f"rank {rank}: ring step {step}", waited)
        if step < world_size - 1:
            kv = incoming
    return out, lse, bytes_sent


def allgather_attention_rank(
    q,
    k,
    v,
    seq_len: int,
    causal: bool = False,
    layout: str = "contiguous",
    scale=None,
    timeout_s: float = 30.0,
    waited: list | None = None,
):
    """One rank's side of all-gather context parallelism (Llama 3's): gather every rank's K/V chunk, then attend
    this rank's queries to all of it at once. Returns (out, lse, bytes_sent): its chunk goes to the W - 1 others
    (chunks padded to the longest, as ``all_gather`` needs one shape)."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    positions = [p.to(q.device) for p in chunk_positions(seq_len, world_size, layout)]
    longest = max(len(p) for p in positions)
    kv = torch.cat([k, v], dim=-1)
    kv = torch.cat([kv, kv.new_zeros(*kv.shape[:-2], longest - kv.shape[-2], kv.shape[-1])], dim=-2)
    gathered = [torch.empty_like(kv) for _ in range(world_size)]
    _wait(dist.all_gather(gathered, kv.contiguous(), async_op=True), timeout_s, f"rank {rank}: all-gather", waited)
    kv_all = torch.cat([g[..., : len(p), :] for g, p in zip(gathered, positions, strict=True)], dim=-2)
    d = k.shape[-1]
    out, lse = attend_chunk(q, kv_all[..., :d], kv_all[..., d:], positions[rank], torch.cat(positions), causal, scale)
    return out, lse, (world_size - 1) * kv.numel() * kv.element_size()


def ulysses_attention_rank(
    q,
    k,
    v,
    seq_len: int,
    causal: bool = False,
    layout: str = "contiguous",
    scale=None,
    timeout_s: float = 30.0,
    waited: list | None = None,
):
    """One rank's side of DeepSpeed-Ulysses: q, k, v (B, H, S/W, d) are this rank's contiguous chunk of tokens
    for all heads. An all-to-all gives it every token for H/W heads; it attends them; a second all-to-all sends
    the outputs back to token chunks. Returns (out, lse, bytes_sent): of each all-to-all, the W - 1 parts that
    leave the rank."""
    world_size = dist.get_world_size()
    batch, heads, chunk = q.shape[0], q.shape[1], q.shape[2]
    if layout != "contiguous" or seq_len % world_size or heads % world_size or k.shape[1] != heads:
        raise ValueError(
            pick(
                f"this Ulysses needs the contiguous layout, world_size={world_size} dividing seq_len={seq_len} and "
                f"the {heads} heads, and as many K/V heads as query heads",
                f"这里的 Ulysses 需要连续切分、world_size={world_size} 整除 seq_len={seq_len} 和 {heads} 个头，"
                f"并且 K/V 头数与查询头数相同",
            )
        )
    sent = 0

    def exchange(send):  # send (W, ...): part r goes to rank r; returns recv (W, ...): part r came from rank r
        nonlocal sent
        recv = torch.empty_like(send)
        _wait(dist.all_to_all_single(recv, send, async_op=True), timeout_s, "all-to-all", waited)
        sent += (world_size - 1) * send[0].numel() * send.element_size()
        return recv

    def to_heads(x):  # (B, H, S/W, e) -> (B, H/W, S, e): every token, this rank's heads
        parts = x.reshape(batch, world_size, heads // world_size, chunk, x.shape[-1]).movedim(1, 0).contiguous()
        return exchange(parts).movedim(0, 2).reshape(batch, heads // world_size, world_size * chunk, x.shape[-1])

    def to_tokens(x):  # (B, H/W, S, e) -> (B, H, S/W, e): this rank's tokens, every head
        parts = x.reshape(batch, heads // world_size, world_size, chunk, x.shape[-1]).movedim(2, 0).contiguous()
        return exchange(parts).movedim(0, 1).reshape(batch, heads, chunk, x.shape[-1])

    pos = torch.arange(seq_len, device=q.device)
    out, lse = attend_chunk(to_heads(q), to_heads(k), to_heads(v), pos, pos, causal, scale)
    out = to_tokens(out)
    method_bytes = sent  # q, k, v in and the output back: what the method needs
    lse = to_tokens(lse[..., None])[..., 0]  # for the caller's check only
    return out, lse, method_bytes


def blocking_ring_attention_rank(q, k, v, seq_len: int, **kwargs):
    """The ring without overlap: each hop completes before the step's attention starts (to time against the ring)."""
    return ring_attention_rank(q, k, v, seq_len, overlap=False, **kwargs)


RANK_FUNCTIONS = {
    "ring": ring_attention_rank,
    "ring_blocking": blocking_ring_attention_rank,
    "allgather": allgather_attention_rank,
    "ulysses": ulysses_attention_rank,
}


def _loopback_interface() -> str:
    names = [name for _, name in socket.if_nameindex() if name.startswith("lo")]
    return names[0] if names else "lo"


def _local_worker(rank, world_size, store_path, run, results):
    """One process of ``launch_local``: join the group on loopback, run its rank, put (rank, out, lse, bytes,
    seconds per repeat, seconds spent waiting for transfers per repeat).

    The rendezvous is a file (a TCP store's server would listen on every interface), and gloo's own sockets are
    bound to the loopback interface: nothing outside this machine can reach the ring."""
    os.environ["GLOO_SOCKET_IFNAME"] = _loopback_interface()
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{store_path}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=run["timeout_s"]),
    )
    try:
        q, k, v = example_qkv(
            run["seq_len"],
            run["seed"],
            run["dtype"],
            heads=run["heads"],
            head_dim=run["head_dim"],
            kv_heads=run["kv_heads"],
        )
        chunks = [split_sequence(t, world_size, run["layout"])[rank] for t in (q, k, v)]
        fn = RANK_FUNCTIONS[run["method"]]
        kwargs = dict(seq_len=run["seq_len"], causal=run["causal"], layout=run["layout"], timeout_s=run["timeout_s"])
        out, lse, sent = fn(*chunks, **kwargs)
        seconds, waits = [], []
        for _ in range(run["repeats"]):  # timed runs, all ranks starting together
            waited: list[float] = []
            dist.barrier()
            start = time.perf_counter()
            fn(*chunks, **kwargs, waited=waited)
            seconds.append(time.perf_counter() - start)
            waits.append(sum(waited))
        # plain arrays: no shared memory to outlive us
        results.put((rank, out.numpy(), lse.numpy(), sent, seconds, waits))
    finally:
        dist.destroy_process_group()


def example_qkv(
    seq_len: int,
    seed: int = 0,
    dtype=torch.float32,
    batch: int = 1,
    heads: int = 2,
    head_dim: int = 8,
    kv_heads: int | None = None,
):
    """The example every rank builds identically from ``seed``: q (batch, heads, seq_len, head_dim), k and v
    (batch, kv_heads, seq_len, head_dim), kv_heads (default: heads) dividing heads."""
    g = torch.Generator().manual_seed(seed)
    kv_heads = heads if kv_heads is None else kv_heads
    return [torch.randn(batch, h, seq_len, head_dim, generator=g, dtype=dtype) for h in (heads, kv_heads, kv_heads)]


def launch_local(
    world_size: int,
    seq_len: int,
    causal: bool = True,
    layout: str = "zigzag",
    seed: int = 0,
    dtype=torch.float32,
    timeout_s: float = 30.0,
    start_method: str | None = None,
):
    """Run ring attention on ``world_size`` local processes (gloo, loopback only) over ``example_qkv(seq_len,
    seed)``. Returns (out, lse, bytes_sent per rank) with out and lse gathered into sequence order.

    ``start_method`` defaults to "fork" where the platform has it (a forked child starts in milliseconds; a spawned
    one imports torch again, a second or more each), else "spawn"."""
    out, lse, sent, _, _ = run_local(
        world_size,
        seq_len,
        "ring",
        causal=causal,
        layout=layout,
        seed=seed,
        dtype=dtype,
        timeout_s=timeout_s,
        start_method=start_method,
    )
    return out, lse, sent


def run_local(
    world_size: int,
    seq_len: int,
    method: str = "ring",
    causal: bool = True,
    layout: str = "contiguous",
    seed: int = 0,
    dtype=torch.float32,
    heads: int = 2,
    repeats: int = 0,
    timeout_s: float = 30.0,
    start_method: str | None = None,
    head_dim: int = 8,
    kv_heads: int | None = None,
):
    """``method`` ("ring", "ring_blocking", "allgather" or "ulysses") on ``world_size`` local processes over
    ``example_qkv(seq_len, seed, heads=heads, head_dim=head_dim, kv_heads=kv_heads)``, then ``repeats`` timed runs.
    Returns (out, lse, bytes_sent per rank, seconds per rank per repeat, seconds spent waiting for transfers per
    rank per repeat), out and lse in sequence order."""
    if method not in RANK_FUNCTIONS:
        raise ValueError(
            pick(
                f"method must be one of {tuple(RANK_FUNCTIONS)}, got {method!r}",
                f"method 必须是 {tuple(RANK_FUNCTIONS)} 之一，收到的是 {method!r}",
            )
        )
    if start_method is None:
        start_method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    results = mp.get_context(start_method).Queue()
    store_dir = tempfile.mkdtemp(prefix="ring-")
    run = dict(
        seq_len=seq_len,
        method=method,
        causal=causal,
        layout=layout,
        seed=seed,
        dtype=dtype,
        heads=heads,
        head_dim=head_dim,
        kv_heads=kv_heads,
        repeats=repeats,
        timeout_s=timeout_s,
    )
    args = (world_size, os.path.join(store_dir, "store"), run, results)
    procs = mp.start_processes(_local_worker, args=args, nprocs=world_size, join=False, start_method=start_method)
    got: dict[int, tuple[torch.Tensor, torch.Tensor, int, list[float], list[float]]] = {}  # rank -> out, lse, ...
    try:
        deadline = time.monotonic() + 2 * timeout_s + repeats * timeout_s
        while len(got) < world_size:  # read while they run: a child blocks on a full pipe until we do
            if time.monotonic() > deadline:
                raise TimeoutError(
                    pick(
                        f"{method} on {world_size} processes: no result in time",
                        f"{world_size} 个进程上的 {method}：没有按时返回结果",
                    )
                )
            procs.join(timeout=0)  # raises at once, with the child's traceback, if a process failed
            try:
                rank, out, lse, sent, seconds, waits = results.get(timeout=0.05)
            except queue.Empty:
                continue
            got[rank] = (torch.from_numpy(out), torch.from_numpy(lse), sent, seconds, waits)
        procs.join(timeout=timeout_s)  # they have sent their results; one still running then is ended below
    finally:
        for p in procs.processes:  # only ours, and only if still running after an error
            if p.is_alive():
                p.terminate()
                p.join()
        shutil.rmtree(store_dir, ignore_errors=True)
    outs = [got[r][0] for r in range(world_size)]
    lses = [got[r][1][..., None] for r in range(world_size)]
    return (
        gather_sequence(outs, layout),
        gather_sequence(lses, layout)[..., 0],
        [got[r][2] for r in range(world_size)],
        [got[r][3] for r in range(world_size)],
        [got[r][4] for r in range(world_size)],
    )
