"""Exercise 14: ``flash_attention(q, k, v, causal, block_m, block_n)``, FlashAttention's forward as a Triton kernel
(notebook 14). The learner writes the kernel's loop over key blocks and its epilogue (the division by l, the stores
of the output and the log-sum-exp); the wrapper that launches it is given. A function: it returns (out, lse).

The kernel runs in Triton's interpreter, on the CPU, everywhere it is graded (the notebook's kernel, the sandbox,
nbgrader), so that one file gets one verdict. The grader passes the block sizes, so the reference below replays the
kernel's tiles exactly, each misconception a flag of ``FlashVariant``. q, k and v are views of longer buffers
whose rows past the sequence's end hold NaN: a load without its mask reads them, as it would read a neighbour's
memory on a GPU, and the reference reads the same rows (``as_strided`` over the same storage).

This module owns its texts (``TEXTS``: key -> (English, Chinese)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from ..kinds.function import Call
from ..kit import Mistake, draw_seed, mutant
from ..registry import Exercise
from ..types import Case

PAD_ROWS = 128  # rows of NaN past each sequence's end: more than any block a learner may choose reads

TEXTS: dict[str, tuple[str, str]] = {
    "mutant.flash_accumulator_not_rescaled": (
        "the accumulator is not rescaled when the running maximum grows: acc = acc * alpha[:, None] + tl.dot(p, v), "
        "with alpha = exp(m_old - m_new)",
        "运行最大值变大时没有重新缩放累加器：应为 acc = acc * alpha[:, None] + tl.dot(p, v)，"
        "其中 alpha = exp(m_old - m_new)",
    ),
    "mutant.flash_sum_not_rescaled": (
        "the running sum is not rescaled when the running maximum grows: l = l * alpha + tl.sum(p, 1)",
        "运行最大值变大时没有重新缩放运行和：应为 l = l * alpha + tl.sum(p, 1)",
    ),
    "mutant.flash_max_started_at_zero": (
        "the running maximum starts at 0 instead of -inf: when every score of a row is far below 0, exp(s - 0) "
        "underflows to 0 and the row divides 0 by 0; start it with tl.full((BLOCK_M,), float('-inf'), tl.float32)",
        "运行最大值从 0 而不是 -inf 开始：某一行的分数全都远小于 0 时，exp(s - 0) 下溢为 0，这一行就成了 0 除以 0；"
        "应当用 tl.full((BLOCK_M,), float('-inf'), tl.float32) 初始化",
    ),
    "mutant.flash_tail_read_without_mask": (
        "the last key block is read without a mask: past the sequence's end tl.load reads whatever lies in memory "
        "(here NaN) and raises nothing; load K and V with mask=cols[:, None] < seq_len, other=0.0",
        "读取最后一个键块时没有加掩码：超出序列末尾后，tl.load 读到的是内存里碰巧存着的东西"
        "（这里是 NaN），而且不会报错；"
        "加载 K 和 V 时要带上 mask=cols[:, None] < seq_len, other=0.0",
    ),
    "mutant.flash_tail_scores_not_hidden": (
        "the keys past the sequence's end are loaded as zeros but their scores are not hidden: each gets the weight "
        "exp(0 - m); set their scores to -inf with tl.where(cols[None, :] < seq_len, s, float('-inf'))",
        "超出序列末尾的键按 0 加载了，但它们的分数没有被遮住：每个都分到了权重 exp(0 - m)；"
        "要用 tl.where(cols[None, :] < seq_len, s, float('-inf')) 把它们的分数设为 -inf",
    ),
    "mutant.flash_diagonal_block_unmasked": (
        "causal: the key blocks that cross the diagonal are not masked, so a query sees the later keys of its "
        "block; hide them with cols[None, :] <= rows[:, None]",
        "因果：跨过对角线的键块没有加掩码，查询看到了同一块里排在它后面的键；"
        "要用 cols[None, :] <= rows[:, None] 遮住它们",
    ),
    "mutant.flash_causal_ignored": (
        "causal=True computes full attention: stop the loop at the diagonal and mask the blocks that cross it",
        "causal=True 时算成了完整注意力：循环要停在对角线处，并给跨过对角线的块加掩码",
    ),
    "mutant.flash_scale_after_softmax": (
        "the scale 1/sqrt(d) is applied after the softmax (to the output): it belongs to the scores, before the "
        "maximum and exp: s = tl.dot(q, tl.trans(k)) * scale",
        "1/sqrt(d) 的缩放放在了 softmax 之后（乘到了输出上）：它应当作用在分数上，在求最大值和 exp 之前："
        "s = tl.dot(q, tl.trans(k)) * scale",
    ),
    "mutant.flash_no_scale": (
        "the scores are not scaled: s = tl.dot(q, tl.trans(k)) * scale, with scale = 1/sqrt(d)",
        "分数没有缩放：应为 s = tl.dot(q, tl.trans(k)) * scale，其中 scale = 1/sqrt(d)",
    ),
    "mutant.flash_max_frozen_at_first_block": (
        "the running maximum is taken from the first key block and never updated: when a later block holds scores "
        "far above it (here, hundreds), exp(s - m) overflows to inf and the row becomes NaN; update it at every "
        "block, m_new = tl.maximum(m_i, tl.max(s, 1)), and rescale l and acc by alpha = exp(m_i - m_new)",
        "运行最大值只取自第一个键块，之后再没更新：后面的块里分数比它大很多时（这里大几百），exp(s - m) 溢出成 inf，"
        "这一行就成了 NaN；每个块都要更新它，m_new = tl.maximum(m_i, tl.max(s, 1))，并用 alpha = exp(m_i - m_new) "
        "重新缩放 l 和 acc",
    ),
    "mutant.flash_rows_assumed_contiguous": (
        "the K/V rows are addressed as if each row were HEAD_DIM elements after the previous one (cols * HEAD_DIM): "
        "a tensor's rows lie stride_t apart, which is not HEAD_DIM when the heads are interleaved, (B, T, H, d) "
        "transposed, or the rows padded; address K and V as cols[:, None] * stride_t + dims[None, :] * stride_d",
        "按“每一行紧跟在上一行后面 HEAD_DIM 个元素”去定位 K/V 的行（cols * HEAD_DIM）：张量的相邻两行相隔 "
        "stride_t，而在多头交错存放、(B, T, H, d) 转置过来或行带填充时它都不是 HEAD_DIM；K 和 V 的地址要写成 "
        "cols[:, None] * stride_t + dims[None, :] * stride_d",
    ),
    "mutant.flash_store_without_mask": (
        "the output (or the log-sum-exp) is stored without its mask: the last query block's rows past the sequence's "
        "end are written past the end of the tensor (on a GPU into other memory, in the interpreter into the heap); "
        "store with mask=rows[:, None] < seq_len (rows < seq_len for the lse)",
        "存输出（或 log-sum-exp）时没有加掩码：最后一个查询块里超出序列末尾的行被写到了张量的末尾之外（在 GPU 上"
        "写进别的内存，在解释器里写坏了堆）；存的时候要加 mask=rows[:, None] < seq_len（lse 用 rows < seq_len）",
    ),
    "mutant.flash_lse_stored_wrong": (
        "the log-sum-exp stored is wrong: it is m + log(l), in natural log, with m and l after the last key block "
        "(with exp2 and scores in log2 units, convert back: (m + log2(l)) * ln 2)",
        "存下的 log-sum-exp 不对：应为 m + log(l)（自然对数），m 和 l 取最后一个键块之后的值"
        "（如果用 exp2、分数以 log2 为单位，要换算回来：(m + log2(l)) * ln 2）",
    ),
    "case:full attention, T = 37: a tail in the last query and key blocks, blocks of 32 x 32": (
        "full attention, T = 37: a tail in the last query and key blocks, blocks of 32 x 32",
        "完整注意力，T = 37：最后一个查询块和键块都有尾部，块大小 32 x 32",
    ),
    "case:causal, T = 37, blocks of 32 queries x 16 keys: two key blocks cross each diagonal": (
        "causal, T = 37, blocks of 32 queries x 16 keys: two key blocks cross each diagonal",
        "因果，T = 37，块大小为 32 个查询 x 16 个键：每条对角线穿过两个键块",
    ),
    "case:causal, T = 32 (no tail), head dim 32, blocks of 16 x 16": (
        "causal, T = 32 (no tail), head dim 32, blocks of 16 x 16",
        "因果，T = 32（没有尾部），头维度 32，块大小 16 x 16",
    ),
    "case:full attention, every score near -150 (a maximum started at 0 underflows), T = 20": (
        "full attention, every score near -150 (a maximum started at 0 underflows), T = 20",
        "完整注意力，所有分数都在 -150 附近（从 0 开始的最大值会下溢），T = 20",
    ),
    "case:full attention, the later key blocks score hundreds above the first, T = 40, blocks of 16 x 16": (
        "full attention, the later key blocks score hundreds above the first, T = 40, blocks of 16 x 16",
        "完整注意力，后面的键块分数比第一个高几百，T = 40，块大小 16 x 16",
    ),
    "case:causal, batch 2, 3 heads, head dim 64, memory laid out (B, T, H, d): rows 3 x 64 apart, T = 21, blocks "
    "of 16 x 16": (
        "causal, batch 2, 3 heads, head dim 64, memory laid out (B, T, H, d): rows 3 x 64 apart, T = 21, blocks of "
        "16 x 16",
        "因果，batch 2，3 个头，头维度 64，内存按 (B, T, H, d) 排布：相邻两行相隔 3 x 64 个元素，T = 21，块大小 "
        "16 x 16",
    ),
}


M_ACC = Mistake("flash_accumulator_not_rescaled")
M_SUM = Mistake("flash_sum_not_rescaled")
M_MAX0 = Mistake("flash_max_started_at_zero")
M_TAIL = Mistake("flash_tail_read_without_mask")
M_TAIL_SCORES = Mistake("flash_tail_scores_not_hidden")
M_DIAGONAL = Mistake("flash_diagonal_block_unmasked")
M_CAUSAL = Mistake("flash_causal_ignored")
M_SCALE_AFTER = Mistake("flash_scale_after_softmax")
M_NO_SCALE = Mistake("flash_no_scale")
M_LSE = Mistake("flash_lse_stored_wrong")
M_MAX_FROZEN = Mistake("flash_max_frozen_at_first_block")
M_ROWS_CONTIGUOUS = Mistake("flash_rows_assumed_contiguous")
M_STORE = Mistake("flash_store_without_mask")


class StoreOutOfBounds(Exception):
    """What a store without its mask does where the sequence has a tail: the harness stops the kernel as it writes
    past the end of the output (sandbox/interpreted.py)."""

    where = "forward"
    error_type = "OutOfBounds"  # interpreted.OutOfBounds: only that error matches this mistake


@dataclass(frozen=True)
class FlashVariant:
    max_start: float = float("-inf")  # 0.0: the running maximum started at 0
    rescale_acc: bool = True
    rescale_sum: bool = True
    tail: str = "masked"  # masked | loads (K, V read past T; scores still hidden) | unmasked (neither)
    tail_scores: bool = True  # False: K, V loaded as zeros past T, but their scores not hidden
    diagonal: bool = True  # False: the blocks crossing the diagonal unmasked
    causal: bool = True  # False: causal=True computes full attention
    scale: str = "scores"  # scores | after_softmax (the output times the scale) | none
    lse: str = "ok"  # ok | max (m alone) | log_sum (log l alone) | sum (m + l) | log2 (m + log2 l, log2 units)
    max_update: str = "every_block"  # every_block | first_block (the maximum of the first key block, kept)
    kv_rows: str = "stride"  # stride | contiguous (K/V row r read at r * HEAD_DIM, the row stride ignored)
    store_mask: bool = True  # False: the output stored without its mask (past the tensor's end where T has a tail)


# ---------------------------------------------------------------------------------------------
# the reference: the kernel's tiles replayed in PyTorch, with the variant's mistakes


def _rows_past_end(t: torch.Tensor, rows: int, v: FlashVariant) -> torch.Tensor:
    """``t`` (B, H, T, d) extended to ``rows`` rows through its own storage: what an unmasked load reads (with the
    variant's row stride: HEAD_DIM where the kernel ignores the tensor's)."""
    stride = list(t.stride())
    if v.kv_rows == "contiguous":
        stride[2:] = [t.shape[3], 1]
    return t.as_strided((*t.shape[:2], rows, t.shape[3]), stride, t.storage_offset())


def flash_forward(args, v: FlashVariant):
    """(out (B, H, T, d), lse (B, H, T)) as the learner's kernel computes them, float32."""
    q, k, val, causal, block_m, block_n = args
    causal = causal and v.causal
    batch, heads, seq_len, d = q.shape
    scale = 1.0 / math.sqrt(d)
    if not v.store_mask and seq_len % block_m:  # the last query block's rows past T written past the output's end
        raise StoreOutOfBounds()
    span = -(-seq_len // block_n) * block_n + block_m  # every key row a loop may reach
    k_all, v_all = _rows_past_end(k, span, v).float(), _rows_past_end(val, span, v).float()
    out = torch.empty(batch, heads, seq_len, d)
    lse = torch.empty(batch, heads, seq_len)
    for first in range(0, seq_len, block_m):
        rows = torch.arange(first, first + block_m)
        q_blk = torch.zeros(batch, heads, block_m, d)
        q_blk[:, :, : min(block_m, seq_len - first)] = q[:, :, first : first + block_m].float()  # a masked load
        m = torch.full((batch, heads, block_m), v.max_start)
        l_sum = torch.zeros(batch, heads, block_m)
        acc = torch.zeros(batch, heads, block_m, d)
        end = min(first + block_m, seq_len) if causal else seq_len
        for start in range(0, end, block_n):
            cols = torch.arange(start, start + block_n)
            inside = cols < seq_len
            k_blk, v_blk = k_all[:, :, start : start + block_n], v_all[:, :, start : start + block_n]
            if v.tail == "masked":
                k_blk = torch.where(inside[:, None], k_blk, torch.zeros(()))
                v_blk = torch.where(inside[:, None], v_blk, torch.zeros(()))
            s = q_blk @ k_blk.transpose(-2, -1)
            if v.scale == "scores":
                s = s * scale
            visible = inside[None, :].expand(block_m, block_n)
            if v.tail == "unmasked" or not v.tail_scores:
                visible = torch.ones(block_m, block_n, dtype=torch.bool)
            if causal and v.diagonal:
                visible = visible & (cols[None, :] <= rows[:, None])
            s = torch.where(visible, s, torch.tensor(float("-inf")))
            m_new = m if v.max_update == "first_block" and start > 0 else torch.maximum(m, s.amax(-1))
            alpha = torch.exp(m - m_new)
            p = torch.exp(s - m_new[..., None])
            l_sum = (l_sum * alpha if v.rescale_sum else l_sum) + p.sum(-1)
            acc = (acc * alpha[..., None] if v.rescale_acc else acc) + p @ v_blk
            m = m_new
        o = acc / l_sum[..., None]
        if v.scale == "after_softmax":
            o = o * scale
        row_lse = {
            "ok": m + torch.log(l_sum),
            "max": m,
            "log_sum": torch.log(l_sum),
            "sum": m + l_sum,
            "log2": (m + torch.log(l_sum)) / math.log(2),
        }[v.lse]
        keep = min(block_m, seq_len - first)
        out[:, :, first : first + keep], lse[:, :, first : first + keep] = o[:, :, :keep], row_lse[:, :, :keep]
    return out, lse


# ---------------------------------------------------------------------------------------------
# cases


def padded(g, batch, heads, seq_len, d, shift=None, tokens_first=False):
    """A (B, H, T, d) view of a buffer whose rows past T hold NaN: (B, H, T + PAD_ROWS, d), or with
    ``tokens_first`` (B, T + PAD_ROWS, H, d) seen through a transpose (rows H * d apart, heads interleaved)."""
    shape = (batch, seq_len + PAD_ROWS, heads, d) if tokens_first else (batch, heads, seq_len + PAD_ROWS, d)
    buffer = torch.full(shape, float("nan"))
    view = buffer.transpose(1, 2) if tokens_first else buffer
    values = torch.randn(batch, heads, seq_len, d, generator=g)
    if shift is not None:
        values = values * 0.1 + shift
    view[:, :, :seq_len] = values
    return view[:, :, :seq_len]


def flash_case(
    name, g, batch, heads, seq_len, d, causal, block_m, block_n, negative=False, tokens_first=False, later=0.0
):
    """``negative``: every score near -150 (q along -e0, k along +e0, 25 apart). ``later``: every score with a key
    past the first key block lies about ``later`` above the first block's (q and those keys share a direction)."""
    e0 = torch.zeros(d)
    e0[0] = 25.0
    q = padded(g, batch, heads, seq_len, d, shift=-e0 if negative else None, tokens_first=tokens_first)
    k = padded(g, batch, heads, seq_len, d, shift=e0 if negative else None, tokens_first=tokens_first)
    v = padded(g, batch, heads, seq_len, d, tokens_first=tokens_first)
    if later:  # q_0 * k_0 / sqrt(d) = later for every key past the first block
        q[..., 0] += 8.0
        k[:, :, block_n:, 0] += later * math.sqrt(d) / 8.0
    elif negative:  # the last key scores 10 above the others (still near -140): every row's running maximum grows
        # at the last key block on every draw, so a rescaling left out always shows
        k[:, :, seq_len - 1, 0] -= 1.6
    else:  # the last query's largest score is its last key's (3 sqrt(d), the others about 1): likewise
        k[:, :, seq_len - 1] = 3.0 * q[:, :, seq_len - 1]
    args = (q, k, v, causal, block_m, block_n)
    call = Call(args, seed=draw_seed(g))
    # scores in the hundreds carry float32 rounding errors of ~1e-4 that the kernel's and the replay's products
    # place differently: their cases get the looser tolerance of every "scores in the hundreds" case of the course
    tol = (2e-3, 2e-4) if negative or later else (2e-4, 2e-5)
    return Case(
        name,
        {"causal": causal, "block_m": block_m, "block_n": block_n},
        {},
        [call],
        meta={"tol": tol},
    )


def cases(g) -> list[Case]:
    """The cases, drawn from ``g`` (seeded by the grader's secret seed). Small: the interpreter runs each program
    instance as NumPy code."""
    return [
        flash_case(
            "full attention, T = 37: a tail in the last query and key blocks, blocks of 32 x 32",
            g,
            1,
            2,
            37,
            16,
            False,
            32,
            32,
        ),
        flash_case(
            "causal, T = 37, blocks of 32 queries x 16 keys: two key blocks cross each diagonal",
            g,
            1,
            1,
            37,
            16,
            True,
            32,
            16,
        ),
        flash_case("causal, T = 32 (no tail), head dim 32, blocks of 16 x 16", g, 1, 1, 32, 32, True, 16, 16),
        flash_case(
            "full attention, every score near -150 (a maximum started at 0 underflows), T = 20",
            g,
            1,
            1,
            20,
            16,
            False,
            16,
            16,
            negative=True,
        ),
        flash_case(
            "full attention, the later key blocks score hundreds above the first, T = 40, blocks of 16 x 16",
            g,
            1,
            1,
            40,
            16,
            False,
            16,
            16,
            later=300.0,
        ),
        flash_case(
            "causal, batch 2, 3 heads, head dim 64, memory laid out (B, T, H, d): rows 3 x 64 apart, T = 21, blocks "
            "of 16 x 16",
            g,
            2,
            3,
            21,
            64,
            True,
            16,
            16,
            tokens_first=True,
        ),
    ]


def expected(case: Case, variant: FlashVariant) -> dict:
    """{name: tensor}, named as the harness names the learner's outputs."""
    with torch.no_grad():
        out, lse = flash_forward(case.calls[0].args, variant)
        return {"step1.out": out, "step1.lse": lse}


def mutants() -> list:
    """Known-wrong variants, most specific first; named alone (paired=False): the replay is a Python loop."""
    ok = FlashVariant()
    found = [
        (M_ACC, replace(ok, rescale_acc=False)),
        (M_SUM, replace(ok, rescale_sum=False)),
        (M_ACC, replace(ok, rescale_acc=False, rescale_sum=False)),
        (M_MAX0, replace(ok, max_start=0.0)),
        (M_TAIL, replace(ok, tail="loads")),
        (M_TAIL, replace(ok, tail="unmasked")),
        (M_TAIL_SCORES, replace(ok, tail_scores=False)),
        (M_DIAGONAL, replace(ok, diagonal=False)),
        (M_CAUSAL, replace(ok, causal=False)),
        (M_SCALE_AFTER, replace(ok, scale="after_softmax")),
        (M_NO_SCALE, replace(ok, scale="none")),
        (M_MAX_FROZEN, replace(ok, max_update="first_block")),
        (M_ROWS_CONTIGUOUS, replace(ok, kv_rows="contiguous")),
        (M_STORE, replace(ok, store_mask=False)),
    ] + [(M_LSE, replace(ok, lse=form)) for form in ("max", "log_sum", "sum", "log2")]
    return [mutant(pair, variant, paired=False) for pair, variant in found]


EXERCISE = Exercise(
    id="flash_triton",
    order=14,
    notebook="14_flash_triton",
    points=3,
    kind="kernel",
    contract="flash_attention",
    args=("q", "k", "v", "causal", "block_m", "block_n"),
    cases=cases,
    expected=expected,
    correct=FlashVariant(),
    mutants=mutants,
)
