"""Exercise 9: ``online_softmax_attention(q, k, v, block_size, causal)``, FlashAttention's tiled loop with
its running max and sum (a function: it returns the output and the log-sum-exp)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from ..kinds.function import Call
from ..kit import Mistake, case_titles, draw_seed, mutant
from ..registry import Exercise
from ..types import Case

# ---------------------------------------------------------------------------------------------
# the reference computation, its mistakes as flags


@dataclass(frozen=True)
class OnlineVariant:
    update_max: bool = True  # False: m = m_new forgotten
    lse_from: str = "m"  # m | m_new (with update_max False) | none (lse = log(l))
    subtract_max: bool = True  # False: exp of the raw scores (overflows)
    rescale_out: bool = True
    rescale_sum: bool = True
    divide: str = "end"  # end | tile (divide each tile's p @ v by the running sum) | running (acc /= l)
    causal_skip: str = "ok"  # ok | diagonal (diagonal tile skipped too)
    fully_masked: str = "nan"  # what a row with no key gives in a buggy variant: nan | zero
    diagonal_mask: bool = True  # False: the diagonal tile is computed without its mask
    scale: bool = True
    materialise: bool = False  # the full score matrix is built (outputs right, "tiled" wrong)


def online_forward(q, k, v, block_size, causal, var: OnlineVariant):
    """The canonical tiled loop with the variant's mistakes; returns {out, lse}. q (B, h, Sq, d), k/v (B, h, Sk, d)."""
    num_q, num_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(d) if var.scale else 1.0
    offset = num_k - num_q
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:-1], dtype=q.dtype)
    for qs in range(0, num_q, block_size):
        qe = min(qs + block_size, num_q)
        q_blk = q[..., qs:qe, :]
        m = torch.full(q_blk.shape[:-1], float("-inf"), dtype=q.dtype)
        l = torch.zeros_like(m)
        acc = torch.zeros_like(q_blk)
        m_new = m
        stop = num_k
        if causal:
            stop = min(num_k, offset + qe) if var.causal_skip == "ok" else min(num_k, offset + qs)
        for ks in range(0, stop, block_size):
            ke = min(ks + block_size, num_k)
            s = (q_blk @ k[..., ks:ke, :].transpose(-2, -1)) * scale
            if causal and var.diagonal_mask:
                q_pos = torch.arange(offset + qs, offset + qe)[:, None]
                s = s.masked_fill(torch.arange(ks, ke)[None, :] > q_pos, float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))
            m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            if var.subtract_max:
                p, alpha = torch.exp(s - m_safe[..., None]), torch.exp(m - m_safe)
            else:
                p, alpha = torch.exp(s), torch.ones_like(m)
            l = (alpha * l if var.rescale_sum else l) + p.sum(dim=-1)
            pv = p @ v[..., ks:ke, :]
            if var.divide == "tile":
                pv = pv / l[..., None]
            acc = (alpha[..., None] * acc if var.rescale_out else acc) + pv
            if var.divide == "running":
                acc = acc / l[..., None]
            if var.update_max:
                m = m_new
        if var.divide == "end":
            if var.fully_masked == "zero":
                out[..., qs:qe, :] = torch.where(l[..., None] > 0, acc / torch.where(l > 0, l, 1.0)[..., None], 0.0)
            else:
                out[..., qs:qe, :] = acc / l[..., None]
        else:
            out[..., qs:qe, :] = acc
        lse_max = {"m": m, "m_new": m_new, "none": torch.zeros_like(m)}[var.lse_from]
        if not var.subtract_max:
            lse_max = torch.zeros_like(m)
        lse[..., qs:qe] = lse_max + torch.log(l)
    return {"out": out, "lse": lse}


# ---------------------------------------------------------------------------------------------
# cases


def function_case(name, g, shape_q, shape_k, block_size, causal, high=0.0, check_tiles=True, peak=False):
    """``high``: every score about that much (q and k share a direction): exp overflows without the running max,
    while the weights keep the spread of an ordinary case, so that every other mistake shows as it does there."""
    q = torch.randn(shape_q, generator=g)
    k = torch.randn(shape_k, generator=g)
    v = torch.randn(shape_k, generator=g)
    if high:
        q[..., 0] = 10.0
        k[..., 0] = high * math.sqrt(shape_q[-1]) / 10.0
    b, h, n_q, d = shape_q
    n_k = shape_k[-2]
    # a tile-sized computation never builds a float tensor larger than the inputs/outputs or a (rows, block) tile
    bound = b * h * max(n_q * max(block_size, d), n_k * d)
    tile_bound = bound if check_tiles and b * h * n_q * n_k > bound else None
    # ``peak``: the process's memory may rise by half a (block, n_k) strip of float32 scores (room for copies of
    # the inputs, in float64 too, when block >> head_dim), measured from outside the learner's code: scores built
    # with NumPy or in another thread count too
    peak_bound = b * h * block_size * n_k * 4 // 2 if peak else None
    call = Call((q, k, v, block_size, causal), seed=draw_seed(g), tile_bound=tile_bound, peak_bound=peak_bound)
    return Case(
        name,
        {"block_size": block_size, "causal": causal},
        {},
        [call],
        meta={"tile_bound": tile_bound, **({"tol": (2e-3, 2e-4)} if high else {})},
    )


def cases(g) -> list[Case]:
    """The cases, drawn from ``g`` (seeded by the grader's secret seed)."""
    return [
        function_case(
            "not causal, 5 queries x 11 keys, 2 heads, batch 2, block 4 (does not divide 11)",
            g,
            (2, 2, 5, 8),
            (2, 2, 11, 8),
            4,
            False,
        ),
        function_case("causal, 13 tokens, 3 heads, batch 2, block 4", g, (2, 3, 13, 8), (2, 3, 13, 8), 4, True),
        function_case(
            "causal, 24 tokens, 2 heads, block 5, scores in the hundreds (exp overflows without the running max)",
            g,
            (1, 2, 24, 8),
            (1, 2, 24, 8),
            5,
            True,
            high=300.0,
        ),
        function_case(
            "not causal, 16 queries x 16 keys, one block of 32",
            g,
            (1, 2, 16, 4),
            (1, 2, 16, 4),
            32,
            False,
            check_tiles=False,
        ),
        # last, when the code it runs is loaded: 256 x 32768 float32 scores are 32 MiB, a (128, 32768) strip 16 MiB,
        # a tile 64 KiB, the inputs 2 MiB; the process's peak memory may rise by 8 MiB at most (see function_case)
        function_case(
            "not causal, 256 queries x 32768 keys, head_dim 8, block 128 (the process's peak memory is measured)",
            g,
            (1, 1, 256, 8),
            (1, 1, 32768, 8),
            128,
            False,
            peak=True,
        ),
    ]


def expected(case: Case, v: OnlineVariant) -> dict:
    """{name: tensor}, named as the harness names the learner's outputs (step1.out, step1.lse, step1.tiled)."""
    with torch.no_grad():
        q, k, val, block_size, causal = case.calls[0].args
        found = online_forward(q, k, val, block_size, causal, v)
        outs = {"step1.out": found["out"], "step1.lse": found["lse"]}
        if case.meta.get("tile_bound") is not None:
            outs["step1.tiled"] = torch.tensor(0.0 if v.materialise else 1.0)
        return outs


M_MAX_STALE = Mistake("max_not_updated")
M_NO_MAX = Mistake("no_running_max")
M_OUT_NOT_RESCALED = Mistake("output_not_rescaled")
M_SUM_NOT_RESCALED = Mistake("sum_not_rescaled")
M_DIVIDE_EARLY = Mistake("divided_too_early")
M_SKIP_DIAGONAL = Mistake("causal_blocks_skipped_wrongly")
M_DIAGONAL_UNMASKED = Mistake("causal_tile_not_masked")
M_LSE = Mistake("lse_without_max")
M_NO_SCALE = Mistake("no_scale", text="no_scale_online")
M_MATERIALISED = Mistake("scores_materialised")


def mutants() -> list:
    """Known-wrong variants, most specific first."""
    ok = OnlineVariant()
    return [
        mutant(M_MATERIALISED, replace(ok, materialise=True)),
        mutant(M_MAX_STALE, replace(ok, update_max=False)),
        mutant(M_MAX_STALE, replace(ok, update_max=False, lse_from="m_new")),
        mutant(M_NO_MAX, replace(ok, subtract_max=False)),
        mutant(M_OUT_NOT_RESCALED, replace(ok, rescale_out=False)),
        mutant(M_SUM_NOT_RESCALED, replace(ok, rescale_sum=False)),
        mutant(M_DIVIDE_EARLY, replace(ok, divide="tile")),
        mutant(M_DIVIDE_EARLY, replace(ok, divide="running")),
        mutant(M_SKIP_DIAGONAL, replace(ok, causal_skip="diagonal")),
        mutant(M_SKIP_DIAGONAL, replace(ok, causal_skip="diagonal", fully_masked="zero")),
        mutant(M_DIAGONAL_UNMASKED, replace(ok, diagonal_mask=False)),
        mutant(M_LSE, replace(ok, lse_from="none")),
        mutant(M_NO_SCALE, replace(ok, scale=False)),
    ]


TEXTS: dict[str, tuple[str, str]] = {
    "mutant.max_not_updated": (
        "the running maximum is never updated (m = m_new is missing): each new tile rescales "
        "everything before it by exp(-inf) = 0, so only the last tile counts",
        "运行最大值从未更新（缺了 m = m_new）：每个新分块都会把之前的结果乘以 exp(-inf) = 0，"
        "最后只剩最后一个分块的贡献",
    ),
    "mutant.no_running_max": (
        "exp of the raw scores: without subtracting the running maximum exp overflows to inf "
        "(scores in the hundreds give NaN); use p = exp(s - m_new)",
        "直接对原始分数取了 exp：不减去运行最大值，exp 会溢出成 inf（分数上百时得到 NaN）；请用 p = exp(s - m_new)",
    ),
    "mutant.output_not_rescaled": (
        "the partial output is not rescaled when the maximum grows: acc = exp(m - m_new) * acc + p @ v",
        "最大值变大时没有重新缩放已经累加的输出：acc = exp(m - m_new) * acc + p @ v",
    ),
    "mutant.sum_not_rescaled": (
        "the running sum is not rescaled when the maximum grows: l = exp(m - m_new) * l + p.sum(-1)",
        "最大值变大时没有重新缩放累加和：l = exp(m - m_new) * l + p.sum(-1)",
    ),
    "mutant.divided_too_early": (
        "divided by the sum inside the loop: keep acc unnormalised and divide by l once, after the last tile",
        "在循环里就除以了和：acc 应当保持未归一化，等最后一个分块算完再除以 l，只除一次",
    ),
    "mutant.causal_blocks_skipped_wrongly": (
        "causal tiles skipped wrongly: the tile on the diagonal must be computed "
        "(with its mask); skip only key tiles that start after the block's last "
        "query",
        "因果分块跳错了：对角线上的分块必须计算（并加上掩码）；只有起点在该块最后一个查询之后的键分块才能跳过",
    ),
    "mutant.causal_tile_not_masked": (
        "the diagonal tile is computed without the causal mask: inside a tile crossing "
        "the diagonal, hide key j from query i when j > i",
        "对角线上的分块没有加因果掩码：在跨过对角线的分块里，当 j > i 时要对查询 i 遮住键 j",
    ),
    "mutant.lse_without_max": (
        "the log-sum-exp lacks the maximum: lse = m + log(l)",
        "log-sum-exp（LSE）少加了最大值：lse = m + log(l)",
    ),
    "mutant.no_scale_online": (
        "scores are not scaled: multiply q @ k^T by 1/sqrt(head_dim)",
        "注意力分数没有缩放：要把 q @ k^T 乘以 1/sqrt(head_dim)",
    ),
    "mutant.scores_materialised": (
        "the outputs are right, but the full (n_q, n_k) score matrix, or a (block, n_k) "
        "strip of it with a plain softmax, is built: compute one (block, block) tile of "
        "scores at a time, with the running max and sum",
        "输出是对的，但构造了完整的 (n_q, n_k) 分数矩阵，或用普通 softmax 算了"
        "其中一整条 (block, n_k) 的行带：应当一次只算一个 (block, block) 的分数分块，"
        "配合运行中的最大值和和",
    ),
    **case_titles(
        {
            "not causal, 5 queries x 11 keys, 2 heads, batch 2, block 4 (does not divide 11)": "非因果，5 个查询 × 11 个键，2 个头，batch 2，block 4（不能整除 11）",
            "causal, 13 tokens, 3 heads, batch 2, block 4": "因果，13 个 token，3 个头，batch 2，block 4",
            "causal, 24 tokens, 2 heads, block 5, scores in the hundreds (exp overflows without the running max)": "因果，24 个 token，2 个头，block 5，分数上百（不减运行最大值时 exp 会溢出）",
            "not causal, 16 queries x 16 keys, one block of 32": "非因果，16 个查询 × 16 个键，只有一个大小为 32 的 block",
            "not causal, 256 queries x 32768 keys, head_dim 8, block 128 (the process's peak memory is measured)": "非因果，256 个查询 × 32768 个键，head_dim 8，block 128（测量进程的内存峰值）",
        }
    ),
}


EXERCISE = Exercise(
    id="online_softmax",
    order=9,
    notebook="09_online_softmax",
    points=3,
    kind="function",
    contract="online_softmax_attention",
    args=("q", "k", "v", "block_size", "causal"),
    cases=cases,
    expected=expected,
    correct=OnlineVariant(),
    mutants=mutants,
)
