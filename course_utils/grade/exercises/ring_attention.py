"""Exercise 15: ``ring_step(q, k_chunk, v_chunk, out, lse, rank, source, world_size, seq_len, layout, causal)``,
one step of ring attention on one rank (notebook 15): the K/V chunk of rank ``source`` has just arrived; attend this
rank's queries to it with the mask that chunk's place in the sequence calls for (contiguous or zigzag layout), and
merge the partial result into the running ``(out, lse)`` by log-sum-exp. A function: it returns (out, lse).
Beside it ``ring_exchange(k, v, rank, world_size) -> (k_next, v_next)``, the step's communication: send this
rank's K/V chunk to rank + 1 and receive rank - 1's, with torch.distributed's point-to-point operations. The last
cases run both on a ring of real processes (``sandbox/kinds/ranks.py``: gloo on loopback), every rank stepping the whole
ring; a ring that deadlocks is stopped after a few seconds and named.

The reference computation and each misconception are the flags of ``RingVariant``. The running ``(out, lse)`` a
case hands over is the reference ring's after its earlier steps, so every row has seen its own chunk already
(finite lse), as in a real ring; the step-0 case starts from out = 0 and lse = -inf.

All the exercise's texts (its mistakes, its cases' titles) are ``TEXTS`` here, English and Chinese.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from ..kinds.ring import Call
from ..kit import Mistake, draw_seed, mutant
from ..registry import Exercise
from ..types import Case
from .online_softmax import M_NO_SCALE  # exercise 09's mistake, in its words

TEXTS: dict[str, tuple[str, str]] = {
    "mutant.ring_merge_without_rescaling": (
        "the running output and the new chunk's output were averaged: each is normalised over its own keys, so "
        "weight each by its share of the row's softmax sum, exp(lse - max(lse, lse_i)), and divide by the sum of "
        "the two weights",
        "把当前输出和新块的输出直接取了平均：两者各自只在自己的键上归一化，要按各自占整行 softmax 之和的份额 "
        "exp(lse - max(lse, lse_i)) 加权，再除以两个权重之和",
    ),
    "mutant.ring_merge_without_max": (
        "the merge weights are exp(lse) and exp(lse_i) without subtracting their maximum: with scores in the "
        "hundreds exp overflows to inf and the output becomes NaN",
        "合并权重直接用了 exp(lse) 和 exp(lse_i)，没有先减去两者的最大值：分数上百时 exp 溢出成 inf，输出变成 NaN",
    ),
    "mutant.ring_lse_not_updated": (
        "the returned lse is the running one from before this step: the next step's merge needs the log-sum-exp "
        "over every key seen so far, max + log(exp(lse - max) + exp(lse_i - max))",
        "返回的 lse 还是这一步之前的：下一步合并需要到目前为止所有键上的 log-sum-exp，即 "
        "max + log(exp(lse - max) + exp(lse_i - max))",
    ),
    "mutant.ring_causal_mask_local": (
        "the causal mask was the usual triangle over the chunk's own indices, whatever the chunk: compare the "
        "tokens' positions in the sequence instead (a chunk from earlier in the sequence is fully visible, one "
        "from later fully hidden)",
        "无论是哪一块，因果掩码都用了块内下标上的常规三角形：应比较 token 在整条序列中的位置（来自序列更早处的块"
        "完全可见，来自更晚处的块完全被遮住）",
    ),
    "mutant.ring_later_chunk_attended": (
        "a chunk from another rank was attended without a causal mask: keys later in the sequence than a query "
        "must stay hidden from it (a chunk wholly after this rank's queries changes nothing)",
        "对来自其他 rank 的块计算注意力时没有加因果掩码：序列中位于查询之后的键必须对它隐藏"
        "（整块都在本 rank 查询之后的块不改变任何结果）",
    ),
    "mutant.ring_earlier_chunk_skipped": (
        "only the rank's own chunk was attended: a chunk from earlier in the sequence is visible to every query "
        "of this rank (fully, or in part with the zigzag layout) and must be merged in",
        "只对本 rank 自己的块计算了注意力：来自序列更早处的块对本 rank 的查询是可见的（完全可见，或在之字形切分下"
        "部分可见），必须合并进来",
    ),
    "mutant.ring_zigzag_as_contiguous": (
        "the zigzag layout was read as contiguous: with zigzag the sequence is cut into 2 * world_size pieces and "
        "rank r holds pieces r and 2 * world_size - 1 - r",
        "把之字形切分当成了连续切分：之字形切分把序列切成 2 * world_size 段，rank r 拿第 r 段和第 "
        "2 * world_size - 1 - r 段",
    ),
    "mutant.ring_zigzag_second_piece": (
        "the zigzag layout's second piece of rank r was taken as piece r + world_size: it is piece "
        "2 * world_size - 1 - r (one early and one late piece, mirrored)",
        "之字形切分中 rank r 的第二段取成了第 r + world_size 段：应为第 2 * world_size - 1 - r 段"
        "（一段靠前、一段靠后，首尾对称）",
    ),
}

TEXTS.update(
    {
        "mutant.ring_merge_summed": (
            "the running output and the new chunk's output were added: each is already normalised over its own keys; "
            "weight each by its share of the row's softmax sum, exp(lse - max(lse, lse_i)), and divide by the sum "
            "of the two weights",
            "把当前输出和新块的输出直接相加了：两者各自已经在自己的键上归一化过，要按各自占整行 softmax 之和的份额 "
            "exp(lse - max(lse, lse_i)) 加权，再除以两个权重之和",
        ),
        "mutant.ring_merge_relative_to_running": (
            "the new chunk was weighted by exp(lse_i - lse), relative to the running lse: when a later chunk holds "
            "scores far above the ones seen so far (here, by more than 88) that weight overflows to inf and the "
            "output becomes NaN; subtract the larger of the two, m = max(lse, lse_i), from both",
            "新块的权重用了 exp(lse_i - lse)，是相对当前 lse 算的：后到的块里分数比之前见过的大很多时（这里大了 88 以上），"
            "这个权重溢出成 inf，输出变成 NaN；应当从两者中都减去较大的那个，m = max(lse, lse_i)",
        ),
        "mutant.ring_pieces_by_chunk": (
            "the pieces were cut with torch.chunk: when the length does not divide evenly it makes pieces of "
            "ceil(n / parts) tokens (and sometimes fewer pieces), not the contract's cut, torch.tensor_split (the "
            "first n % parts pieces one token longer), so the positions no longer match the chunks the ranks hold",
            "用 torch.chunk 切了片：长度不能整除时，它切出的每片是 ceil(n / parts) 个 token（有时片数还更少），不是接口"
            "约定的 torch.tensor_split（前 n % parts 片多一个 token），于是算出的位置和各 rank 手里的块对不上了",
        ),
        "mutant.ring_offsets_from_chunk_length": (
            "a chunk's first position was taken as rank × its own length: when the length does not divide evenly the "
            "chunks differ in length (tensor_split gives the first n % world_size ranks one token more), so the start "
            "of rank r's chunk is the sum of the lengths before it; cut torch.arange(seq_len) with tensor_split",
            "把块的起始位置算成了 rank × 本块长度：长度不能整除时各块长度不同（tensor_split 让前 n % world_size 个 "
            "rank 多一个 token），rank r 的块起点是它前面各块长度之和；应当用 tensor_split 切 torch.arange(seq_len)",
        ),
        "mutant.ring_exchange_collective": (
            "the exchange went through a collective (all_gather, broadcast, ...): a ring passes each rank's chunk "
            "only to its neighbour, rank + 1, with point-to-point sends and receives (dist.isend and dist.irecv, or "
            "dist.batch_isend_irecv), so that each link carries one chunk per step and no rank ever holds every "
            "chunk; a collective moves world_size chunks to each rank",
            "交换用了集合通信（all_gather、broadcast 等）：环只把每个 rank 的块传给它的邻居 rank + 1，用点对点的发送和"
            "接收（dist.isend 与 dist.irecv，或 dist.batch_isend_irecv），这样每条链路每一步只传一个块，也没有哪个 "
            "rank 会拿到全部的块；集合通信会把 world_size 个块都送到每个 rank",
        ),
        "mutant.ring_deadlock": (
            "deadlock: every rank called a blocking send first (or a blocking recv first), so each waits for a "
            "neighbour that is itself waiting and the ring never moves (it was stopped after a few seconds); post "
            "the send and the receive together (dist.isend and dist.irecv, or dist.batch_isend_irecv) and wait on "
            "both, or order them by parity: even ranks send then receive, odd ranks receive then send",
            "死锁：每个 rank 都先调用了阻塞的 send（或都先调用了阻塞的 recv），于是每个 rank 都在等一个同样在等待的"
            "邻居，环一步也走不动（几秒后被终止）。应同时发起发送和接收（dist.isend 与 dist.irecv，或 "
            "dist.batch_isend_irecv）再等待两者完成，或按奇偶排好顺序：偶数 rank 先发后收，奇数 rank 先收后发",
        ),
        "mutant.ring_passed_backwards": (
            "the K/V chunks travel the wrong way round the ring: each rank sent to rank - 1 and received from "
            "rank + 1, so at step t it holds the chunk of rank + t, not that of rank - t (the source ring_step is "
            "told); send to (rank + 1) % world_size and receive from (rank - 1) % world_size",
            "K/V 块在环上传反了方向：每个 rank 发给了 rank - 1、从 rank + 1 接收，于是第 t 步它拿到的是 rank + t "
            "的块，而不是 ring_step 被告知的来源 rank - t 的块。应发给 (rank + 1) % world_size，从 "
            "(rank - 1) % world_size 接收",
        ),
    }
)

RING_TITLES = {
    "a ring of 3 processes (gloo on loopback), contiguous, causal, 12 tokens: ring_step and ring_exchange at "
    "every step": "3 个进程组成的环（回环地址上的 gloo），连续切分，因果，12 个 token：每一步都调用 ring_step 和 "
    "ring_exchange",
    "a ring of 2 processes (gloo on loopback), zigzag, causal, 16 tokens": "2 个进程组成的环（回环地址上的 "
    "gloo），之字形切分，因果，16 个 token",
}
TEXTS.update({"case:" + en: (en, zh) for en, zh in RING_TITLES.items()})
RING_SHAPES = ((3, 12, "contiguous", True), (2, 16, "zigzag", True))  # (world_size, seq_len, layout, causal)
RING_SHARE = 0.5  # of the points: the ring itself (the exchange, every rank stepping), the rest the step

CASE_TITLES = {
    "step 0, contiguous, causal: the rank's own chunk (out = 0, lse = -inf before it), 2 ranks, 9 tokens": "第 0 步，连续切分，因果：本 rank 自己的块（之前 out = 0，lse = -inf），2 个 rank，9 个 token",
    "contiguous, not causal, 3 ranks, 10 tokens, rank 1 receives rank 0's chunk": "连续切分，非因果，3 个 rank，10 个 token，rank 1 收到 rank 0 的块",
    "contiguous, causal, 4 ranks, 13 tokens, rank 2 receives an earlier chunk (rank 0's)": "连续切分，因果，4 个 rank，13 个 token，rank 2 收到更早的块（rank 0 的）",
    "contiguous, causal, 4 ranks, 13 tokens, rank 1 receives a later chunk (rank 3's)": "连续切分，因果，4 个 rank，13 个 token，rank 1 收到更晚的块（rank 3 的）",
    "zigzag, causal, 3 ranks, 18 tokens, rank 0 receives rank 2's chunk": "之字形切分，因果，3 个 rank，18 个 token，rank 0 收到 rank 2 的块",
    "zigzag, causal, 4 ranks, 24 tokens, rank 2 receives rank 1's chunk": "之字形切分，因果，4 个 rank，24 个 token，rank 2 收到 rank 1 的块",
    "scores in the hundreds (exp overflows without the maximum), zigzag, causal, 2 ranks, 12 tokens": "分数上百（不减最大值时 exp 溢出），之字形切分，因果，2 个 rank，12 个 token",
    "larger scores in the later chunk (by hundreds), contiguous, causal, 2 ranks, 10 tokens, rank 1 receives rank "
    "0's chunk": "后到的块分数大得多（大几百），连续切分，因果，2 个 rank，10 个 token，rank 1 收到 rank 0 的块",
    "contiguous, causal, 3 ranks, 11 tokens (chunks of 4, 4 and 3), strided inputs, rank 2 receives rank 1's "
    "chunk": "连续切分，因果，3 个 rank，11 个 token（块长 4、4、3），输入不连续（带步长），rank 2 收到 rank 1 的块",
    "zigzag, causal, 3 ranks, 22 tokens (pieces of 4 and 3), strided inputs, rank 1 receives rank 0's chunk": "之字形切分，因果，3 个 rank，22 个 token（片长 4 和 3），输入不连续（带步长），rank 1 收到 rank 0 的块",
}
TEXTS.update({"case:" + en: (en, zh) for en, zh in CASE_TITLES.items()})


@dataclass(frozen=True)
class RingVariant:
    mask: str = "global"  # global | local (the chunk's own triangle) | others_visible | own_only
    layout: str = "ok"  # ok | zigzag_as_contiguous | zigzag_second_piece (r + W instead of 2W - 1 - r) | chunk (every
    # cut by torch.chunk) | chunk_zigzag (the zigzag pieces by torch.chunk) | offsets_by_length (a contiguous chunk
    # starting at rank x its own length)
    merge: str = "ok"  # ok | mean | mean_after_first (a row that has seen nothing yet takes the chunk's, the others
    # the mean) | sum | relative (the chunk weighted by exp(lse_i - lse), against the running lse) | no_max
    skip: bool = True  # a chunk wholly hidden returns (out, lse) unchanged; False: merged anyway, as out_i = 0
    lse: str = "ok"  # ok | kept (the running lse returned unchanged)
    scale: bool = True
    exchange: str = "ok"  # ok | backwards (K/V sent to rank - 1) | deadlock (every rank blocks in its first exchange)
    # | collective (the chunks passed by a collective, all_gather or broadcast, not point to point)


M_MERGE_MEAN = Mistake("ring_merge_without_rescaling")
M_MERGE_NO_MAX = Mistake("ring_merge_without_max")
M_LSE_KEPT = Mistake("ring_lse_not_updated")
M_MASK_LOCAL = Mistake("ring_causal_mask_local")
M_LATER_ATTENDED = Mistake("ring_later_chunk_attended")
M_EARLIER_SKIPPED = Mistake("ring_earlier_chunk_skipped")
M_ZIGZAG_CONTIGUOUS = Mistake("ring_zigzag_as_contiguous")
M_ZIGZAG_SECOND = Mistake("ring_zigzag_second_piece")
M_DEADLOCK = Mistake("ring_deadlock")
M_BACKWARDS = Mistake("ring_passed_backwards")
M_MERGE_SUM = Mistake("ring_merge_summed")
M_MERGE_RELATIVE = Mistake("ring_merge_relative_to_running")
M_PIECES_CHUNK = Mistake("ring_pieces_by_chunk")
M_OFFSETS = Mistake("ring_offsets_from_chunk_length")
M_COLLECTIVE = Mistake("ring_exchange_collective")


class RingDeadlock(Exception):
    """What a ring whose ranks all block in their first exchange ends in: the harness stops it and says so."""

    where = "forward"
    error_type = "Deadlock"  # sandbox/kinds/ranks.py's DEADLOCK: only that error matches this mistake


# ---------------------------------------------------------------------------------------------
# the reference computation, with the variant's mistakes


def positions(seq_len, world_size, layout, v: RingVariant = RingVariant()):
    """Every rank's token positions, as ``course_utils.chunk_positions`` (tensor_split) cuts them."""
    seq = torch.arange(seq_len)

    def cut(parts, chunked):  # torch.chunk: pieces of ceil(n / parts), and sometimes fewer of them
        return list(seq.chunk(parts)) if chunked else list(seq.tensor_split(parts))

    if layout == "contiguous" or v.layout == "zigzag_as_contiguous":
        return cut(world_size, v.layout == "chunk")
    pieces = cut(2 * world_size, v.layout in ("chunk", "chunk_zigzag"))
    second = (lambda r: r + world_size) if v.layout == "zigzag_second_piece" else (lambda r: 2 * world_size - 1 - r)
    return [torch.cat([pieces[r], pieces[second(r)]]) for r in range(world_size)]


def _hidden(q_pos, k_pos, own: bool, v: RingVariant):
    """(Sq, Sk) bool, True = hidden, for a causal step."""
    true_mask = k_pos[None, :] > q_pos[:, None]
    if v.mask == "local":
        return torch.ones(len(q_pos), len(k_pos), dtype=torch.bool).triu(1)
    if v.mask == "others_visible" and not own:
        return torch.zeros_like(true_mask)
    if v.mask == "own_only" and not own:
        return torch.ones_like(true_mask)
    return true_mask


def ring_forward(args, v: RingVariant):
    """One ring step with the variant's mistakes; returns (out (..., Sq, d), lse (..., Sq))."""
    q, k, val, out, lse, rank, source, world_size, seq_len, layout, causal = args
    pos = positions(seq_len, world_size, layout, v)
    q_pos, k_pos = pos[rank], pos[source]
    if v.layout == "offsets_by_length" and layout == "contiguous":  # rank x its own chunk's length
        q_pos = rank * q.shape[-2] + torch.arange(q.shape[-2])
        k_pos = source * k.shape[-2] + torch.arange(k.shape[-2])
    s = q @ k.transpose(-2, -1)
    if v.scale:
        s = s / math.sqrt(q.shape[-1])
    if causal:
        hidden = _hidden(q_pos, k_pos, rank == source, v)
        if hidden.all() and v.skip:
            return out.clone(), lse.clone()  # nothing visible: the step is skipped
        s = s.masked_fill(hidden, float("-inf"))
    m = s.amax(dim=-1)
    m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m_safe[..., None])
    total = p.sum(dim=-1)
    out_i = (p @ val) / torch.where(total > 0, total, torch.ones_like(total))[..., None]
    lse_i = m_safe + torch.log(total)  # -inf for a row that sees nothing of this chunk
    new_m = torch.maximum(lse, lse_i)
    new_m_safe = torch.where(torch.isfinite(new_m), new_m, torch.zeros_like(new_m))
    if v.merge == "no_max":
        w, w_i = torch.exp(lse), torch.exp(lse_i)
    else:
        w, w_i = torch.exp(lse - new_m_safe), torch.exp(lse_i - new_m_safe)
    both = w + w_i
    merged = (w[..., None] * out + w_i[..., None] * out_i) / both[..., None]
    merged_lse = torch.log(both) if v.merge == "no_max" else new_m_safe + torch.log(both)
    fresh = torch.isneginf(lse)[..., None]  # rows that have seen nothing yet (step 0)
    if v.merge == "mean":
        merged = (out + out_i) / 2
    elif v.merge == "mean_after_first":
        merged = torch.where(fresh, out_i, (out + out_i) / 2)
    elif v.merge == "sum":
        merged = out + out_i
    elif v.merge == "relative":  # overflows where lse_i is far above the running lse
        w_rel = torch.exp(lse_i - lse)[..., None]
        merged = torch.where(fresh, out_i, (out + w_rel * out_i) / (1 + w_rel))
    return merged, (lse.clone() if v.lse == "kept" else merged_lse)


# ---------------------------------------------------------------------------------------------
# cases


def _strided(t):
    """``t`` (B, H, S, d) with the same values in a (B, S, H, d) memory layout: not contiguous."""
    return t.transpose(1, 2).contiguous().transpose(1, 2)


def ring_case(
    name,
    g,
    world_size,
    seq_len,
    layout,
    causal,
    rank,
    source,
    *,
    high=0.0,
    heads=2,
    head_dim=8,
    later=0.0,
    strided=False,
):
    """q, k, v of one sequence (1, heads, seq_len, head_dim) drawn from ``g``; the case hands rank ``rank`` its
    query chunk, ``source``'s K/V chunk and the running (out, lse) of the reference ring after the steps before.
    ``later``: the source chunk's keys and this rank's queries share a direction, so that every score with that
    chunk lies about ``later`` above the scores seen before it. ``high``: every score about that much (exp
    overflows), the weights keeping the spread of an ordinary case. ``strided``: q, k and v not contiguous."""
    q, k, v = (torch.randn(1, heads, seq_len, head_dim, generator=g) for _ in range(3))
    pos = positions(seq_len, world_size, layout)
    if high:
        q[..., 0] = 10.0
        k[..., 0] = high * math.sqrt(head_dim) / 10.0
    if later:  # q_0 * k_0 / sqrt(d) = later, whatever else the scores hold
        q[..., pos[rank], 0] += 8.0
        k[..., pos[source], 0] += later * math.sqrt(head_dim) / 8.0
    q_r = q[..., pos[rank], :]
    out = torch.zeros_like(q_r)
    lse = torch.full(q_r.shape[:-1], float("-inf"))
    step = 0
    while (rank - step) % world_size != source:  # the ring so far: sources rank, rank - 1, ... before ``source``
        src = (rank - step) % world_size
        args = (q_r, k[..., pos[src], :], v[..., pos[src], :], out, lse, rank, src, world_size, seq_len, layout, causal)
        out, lse = ring_forward(args, RingVariant())
        step += 1
    chunks = (q_r, k[..., pos[source], :], v[..., pos[source], :])
    if strided:
        chunks = tuple(_strided(t) for t in chunks)
    args = (*chunks, out, lse, rank, source, world_size, seq_len, layout, causal)
    call = Call(args, seed=draw_seed(g))
    return Case(
        name,
        {"world_size": world_size, "seq_len": seq_len, "layout": layout},
        {},
        [call],
        meta={"tol": (2e-3, 2e-4)} if high or later else {},
    )


def ring_run_case(name, g, world_size, seq_len, layout, causal, heads=2, head_dim=8):
    """The whole ring on ``world_size`` real processes: each rank gets its q, k, v chunk (all of one shape) and
    steps ``ring_step`` and ``ring_exchange`` around the ring; what each rank computes and receives comes back."""
    q, k, v = (torch.randn(1, heads, seq_len, head_dim, generator=g) for _ in range(3))
    pos = positions(seq_len, world_size, layout)
    assert len({len(p) for p in pos}) == 1, "the exchange's contract: every rank's chunk has one shape"
    args = tuple([t[..., p, :] for p in pos] for t in (q, k, v)) + (seq_len, layout, causal)
    call = Call(args, seed=draw_seed(g), ranks=world_size, exchange="ring_exchange")
    return Case(name, {"world_size": world_size, "seq_len": seq_len, "layout": layout}, {}, [call])


def _weighted(step_cases: list[Case], ring_cases: list[Case]) -> list[Case]:
    """The cases, the ring's weighted so that they carry ``RING_SHARE`` of the points (the step's cases and the
    determinism check the rest): a ring that never passes a chunk is half the exercise, not two checks of ten."""
    steps = len(step_cases) + 1  # the determinism check
    for case in ring_cases:
        case.meta["weight"] = steps * RING_SHARE / (1 - RING_SHARE) / len(ring_cases)
    return step_cases + ring_cases


def ring_run(call: Call, v: RingVariant) -> dict:
    """What each rank of a ring with the variant's mistakes computes and receives (the harness's names)."""
    if v.exchange == "deadlock":
        raise RingDeadlock()
    q_chunks, k_chunks, v_chunks, seq_len, layout, causal = call.args
    world_size = call.ring_size
    outputs = {}
    for rank in range(world_size):
        out = torch.zeros_like(q_chunks[rank])
        lse = torch.full(out.shape[:-1], float("-inf"))
        outputs[f"rank{rank}.p2p"] = torch.tensor(0.0 if v.exchange == "collective" else 1.0)
        for step in range(world_size):
            held = (rank + step if v.exchange == "backwards" else rank - step) % world_size
            if step:
                outputs[f"rank{rank}.recv{step}.k"], outputs[f"rank{rank}.recv{step}.v"] = (
                    k_chunks[held],
                    v_chunks[held],
                )
            told = (rank - step) % world_size  # the source the ring tells ring_step, whatever arrived
            args = (
                q_chunks[rank],
                k_chunks[held],
                v_chunks[held],
                out,
                lse,
                rank,
                told,
                world_size,
                seq_len,
                layout,
                causal,
            )
            out, lse = ring_forward(args, v)
        outputs[f"rank{rank}.out"], outputs[f"rank{rank}.lse"] = out, lse
    return outputs


def cases(g) -> list[Case]:
    """The cases, drawn from ``g`` (seeded by the grader's secret seed)."""
    titles = list(CASE_TITLES)
    steps = [
        ring_case(titles[0], g, 2, 9, "contiguous", True, rank=1, source=1),
        ring_case(titles[1], g, 3, 10, "contiguous", False, rank=1, source=0),
        ring_case(titles[2], g, 4, 13, "contiguous", True, rank=2, source=0),
        ring_case(titles[3], g, 4, 13, "contiguous", True, rank=1, source=3),
        ring_case(titles[4], g, 3, 18, "zigzag", True, rank=0, source=2),
        ring_case(titles[5], g, 4, 24, "zigzag", True, rank=2, source=1),
        ring_case(titles[6], g, 2, 12, "zigzag", True, rank=1, source=0, high=300.0),
        ring_case(titles[7], g, 2, 10, "contiguous", True, rank=1, source=0, later=300.0),
        ring_case(titles[8], g, 3, 11, "contiguous", True, rank=2, source=1, strided=True),
        ring_case(titles[9], g, 3, 22, "zigzag", True, rank=1, source=0, strided=True),
    ]
    rings = [ring_run_case(title, g, *shape) for title, shape in zip(RING_TITLES, RING_SHAPES, strict=True)]
    return _weighted(steps, rings)


def expected(case: Case, variant: RingVariant) -> dict:
    """{name: tensor}, named as the harness names the learner's outputs."""
    with torch.no_grad():
        if case.calls[0].ranks:
            return ring_run(case.calls[0], variant)
        out, lse = ring_forward(case.calls[0].args, variant)
        return {"step1.out": out, "step1.lse": lse}


def mutants() -> list:
    """Known-wrong variants, most specific first."""
    ok = RingVariant()
    # a merge is named by what it does to the output, whatever the lse returned beside it and whether a chunk wholly
    # hidden returns early (outputs_only: a mistaken merge of the outputs ignores the lse, or is shown by the outputs)
    merges = [
        mutant(mistake, replace(ok, merge=merge, skip=skip), outputs_only=True)
        for mistake, merge in (
            (M_MERGE_MEAN, "mean"),
            (M_MERGE_MEAN, "mean_after_first"),
            (M_MERGE_SUM, "sum"),
            (M_MERGE_RELATIVE, "relative"),
        )
        for skip in (True, False)
    ]
    return [
        mutant(M_ZIGZAG_CONTIGUOUS, replace(ok, layout="zigzag_as_contiguous")),
        mutant(M_ZIGZAG_SECOND, replace(ok, layout="zigzag_second_piece")),
        *(  # wrong positions crash where their lengths differ from the chunk's: before or after an early return
            mutant(M_PIECES_CHUNK, replace(ok, layout=layout, skip=skip))
            for layout in ("chunk_zigzag", "chunk")
            for skip in (True, False)
        ),
        mutant(M_OFFSETS, replace(ok, layout="offsets_by_length")),
        mutant(M_MASK_LOCAL, replace(ok, mask="local")),
        mutant(M_LATER_ATTENDED, replace(ok, mask="others_visible")),
        mutant(M_EARLIER_SKIPPED, replace(ok, mask="own_only")),
        mutant(M_MERGE_NO_MAX, replace(ok, merge="no_max")),
        *merges,
        mutant(M_LSE_KEPT, replace(ok, lse="kept")),
        mutant(M_NO_SCALE, replace(ok, scale=False)),
        mutant(M_DEADLOCK, replace(ok, exchange="deadlock")),
        mutant(M_BACKWARDS, replace(ok, exchange="backwards")),
        mutant(M_COLLECTIVE, replace(ok, exchange="collective")),
    ]


EXERCISE = Exercise(
    id="ring_attention",
    order=15,
    notebook="15_ring_attention",
    points=3,
    kind="ring",
    contract="ring_step",
    args=("q", "k_chunk", "v_chunk", "out", "lse", "rank", "source", "world_size", "seq_len", "layout", "causal"),
    cases=cases,
    expected=expected,
    correct=RingVariant(),
    mutants=mutants,
)
