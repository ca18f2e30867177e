"""Exercise 17a: ``dsa_attention(q, k, v, q_idx, k_idx, weights, top_k) -> (out, indices)``, DeepSeek Sparse
Attention over a prefill (notebook 17): the lightning indexer's scores ``I[t, s] = sum_j weights[t, j] *
ReLU(q_idx[t, j] . k_idx[s])`` (signed weights, no softmax over the heads), each query's ``top_k`` visible keys of
highest score (causal; a row with fewer visible keys fills its other slots with -1), one selection shared by every
query head, and attention over the selected keys only. A function returning a pair, both graded: the output,
attention over exactly the selected keys, so every mistake of the scores, the selection, the padding or the sharing
changes it; and the indices (an integer tensor, which the function kind reads for this exercise: the call's
``integer_outputs``), compared as a set per query (``as_sets``: the order of the slots is free, a key its query cannot
see is one, -1 where the query sees fewer keys than top_k is another), a row that differs from the reference only by
keys tied with its k-th score accepted (``ties_read_as_reference``). Indices that are not the keys attended, the
future keys topk keeps in the slots of a row that sees fewer than top_k keys, are a mistake named of their own.

The reference computation and each misconception are the flags of ``DsaVariant``. Every case is drawn so that no
variant meets a tie at the boundary of its top-k (the ReLU makes exact zeros, where ``topk`` may keep either key):
each row's k-th and (k+1)-th visible scores differ by a margin, for the reference and for every mistake. Every case
has as many indexer heads as attention heads, so that a selection per head can be written, and named.
"""

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

MARGIN = 1e-4  # the smallest gap between a row's k-th and (k+1)-th visible scores, relative to the row's scale


@dataclass(frozen=True)
class DsaVariant:
    relu: bool = True  # False: the heads' dot products summed as they are
    weights: str = "signed"  # signed | softmax (over the heads) | ones (every head counts the same)
    causal: bool = True  # False: the top-k ranks every key, the future included, and attends to what it keeps
    padding: str = "hidden"  # hidden | first_key (a -1 slot gathers key 0, attended once more) | last_key (a
    # gathered -1 wraps to key T - 1, a future key). Clamping the -1 slots to 0 in a mask is harmless: a row with a
    # -1 slot keeps every key it sees, key 0 included
    shared: bool = True  # False: query head h attends to the top-k of indexer head h's own dot products q_h . k
    largest: bool = True  # False: the ranking ascending (argsort without descending=True): the first top_k slots are
    # the hidden future keys (-inf, then -1) and the lowest-scoring visible keys
    empty_row: str = "nan"  # what a query that attends to no key gets (only a mistake leaves one so): nan, a softmax
    # over -inf alone, or zero, as PyTorch's scaled_dot_product_attention gives
    padded: bool = True  # False: the indices returned are topk's as they are, future keys in the slots of a row that
    # sees fewer than top_k keys (the attention itself masks them out: only the indices are wrong)


def index_scores(q_idx, k_idx, weights, v: DsaVariant):
    """(B, T, T) scores of the shared selection, or (B, H_I, T, T) per indexer head when not shared."""
    dots = torch.einsum("bthd,bsd->bhts", q_idx, k_idx)  # (B, H_I, T, T)
    if not v.shared:  # each head ranks by its own dot products (ReLU and a head's weight keep or reverse that order)
        return dots
    if v.relu:
        dots = torch.relu(dots)
    w = {"signed": weights, "softmax": torch.softmax(weights, dim=-1), "ones": torch.ones_like(weights)}[v.weights]
    return (dots * w.transpose(1, 2)[..., None]).sum(1)  # (B, T, T)


def select(scores, top_k, v: DsaVariant, padded: bool = True):
    """(..., T, top_k) indices, -1 where a row has fewer visible keys than top_k (never with causal=False); without
    ``padded``, topk's own indices there (future keys)."""
    t = scores.shape[-1]
    hide = torch.ones(t, t, dtype=torch.bool).triu(1) if v.causal else torch.zeros(t, t, dtype=torch.bool)
    kept = min(top_k, t)
    masked = scores.masked_fill(hide, float("-inf"))
    if v.largest:
        values, indices = masked.topk(kept, dim=-1)
    else:
        indices = masked.argsort(dim=-1)[..., :kept]
        values = masked.gather(-1, indices)
    if padded:
        indices = indices.masked_fill(values == float("-inf"), -1)
    if kept < top_k:
        indices = torch.cat([indices, indices.new_full((*indices.shape[:-1], top_k - kept), -1)], dim=-1)
    return indices


def attend_selected(q, k, v_, indices, v: DsaVariant):
    """q (B, H, T, d), k and v (B, H, T, d), indices (B, T, K) shared or (B, H, T, K) per head -> (B, H, T, d).

    hidden attends to the selection as a set of keys (a mask); first_key and last_key gather every slot, a -1 slot
    gathering key 0 or key T - 1 once more (a key counted twice weighs twice)."""
    b, h, t, d = q.shape
    per_head = indices if indices.ndim == 4 else indices[:, None].expand(b, h, t, indices.shape[-1])
    if v.padding == "hidden":
        slots = per_head.masked_fill(per_head < 0, t)  # a spare column takes the -1 slots
        keep = torch.zeros(b, h, t, t + 1, dtype=torch.bool).scatter_(-1, slots, True)[..., :t]
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d)
        out = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1) @ v_
        return out.nan_to_num(0.0) if v.empty_row == "zero" else out
    slots = per_head.clamp(min=0) if v.padding == "first_key" else per_head % t
    gather = slots.reshape(b, h, t * slots.shape[-1], 1)
    k_sel = k.gather(2, gather.expand(-1, -1, -1, d)).view(b, h, t, -1, d)
    v_sel = v_.gather(2, gather.expand(-1, -1, -1, v_.shape[-1])).view(b, h, t, -1, v_.shape[-1])
    weights = torch.softmax(torch.einsum("bhtd,bhtkd->bhtk", q, k_sel) / math.sqrt(d), dim=-1)
    return torch.einsum("bhtk,bhtkd->bhtd", weights, v_sel)


def dsa_forward(args, v: DsaVariant):
    """(out (B, H, T, d), indices): the variant's whole step."""
    q, k, v_, q_idx, k_idx, weights, top_k = args
    scores = index_scores(q_idx, k_idx, weights, v)
    indices = select(scores, top_k, v)
    out = attend_selected(q, k, v_, indices, v)
    return out, indices if v.padded else select(scores, top_k, v, padded=False)


def as_sets(indices):
    """Each row's selection (a prefill's: row t is query t) as the grader compares it, float64: the row sorted (the
    order of the slots is free), a key the query cannot see (a future one) read as T, whichever it is, and an index
    that is no key at all (below -1, T or more, not whole) as -2; -1 stays -1."""
    if not isinstance(indices, torch.Tensor) or indices.ndim < 2 or not bool(torch.isfinite(indices).all()):
        return indices
    t = indices.shape[-2]
    idx = indices.double()
    invalid = (idx < -1) | (idx >= t) | (idx != idx.round())
    future = ~invalid & (idx > torch.arange(t)[:, None])
    return idx.masked_fill(future, float(t)).masked_fill(invalid, -2.0).sort(dim=-1).values


TIE = 1e-5  # scores this close (relative to the row's largest |score|) are tied: topk may keep either key


def ties_read_as_reference(got, args):
    """``got`` (as_sets' form) with each row that differs from the reference's selection only by keys tied with the
    row's k-th visible score (within TIE) read as the reference's row: any of the tied keys is a right selection."""
    q, k, v_, q_idx, k_idx, weights, top_k = args
    ok = DsaVariant()
    scores = index_scores(q_idx, k_idx, weights, ok)  # (B, T, T)
    ref = as_sets(select(scores, top_k, ok))
    if not isinstance(got, torch.Tensor) or got.shape != ref.shape or torch.equal(got, ref):
        return got
    got = got.clone()
    for b, row in (got != ref).any(-1).nonzero().tolist():
        visible = scores[b, row, : row + 1]
        if row + 1 <= top_k:  # no choice to make: every visible key is selected
            continue
        kth = visible.sort(descending=True).values[top_k - 1]
        keys = got[b, row].long()
        if bool((keys < 0).any() | (keys > row).any()) or len(set(keys.tolist())) != top_k:
            continue  # a -1, a future key, no key at all, a key twice: not a selection of top_k visible keys
        swapped = set(keys.tolist()) ^ set(ref[b, row].long().tolist())
        scale = visible.abs().max().clamp_min(1e-6)
        if all(abs(float(visible[s] - kth)) <= TIE * float(scale) for s in swapped):
            got[b, row] = ref[b, row]
    return got


def well_separated(args, variants) -> bool:
    """No variant meets a tie at the boundary of its top-k: in every row with more visible keys than top_k, the gap
    between its k-th and (k+1)-th visible scores exceeds MARGIN times the row's largest |score|."""
    q, k, v_, q_idx, k_idx, weights, top_k = args
    t = k_idx.shape[1]
    if top_k >= t:
        return True
    rows = (~torch.ones(t, t, dtype=torch.bool).triu(1)).sum(-1) > top_k  # causal rows that must choose
    for v in variants:
        scores = index_scores(q_idx, k_idx, weights, v)
        hide = torch.ones(t, t, dtype=torch.bool).triu(1) if v.causal else torch.zeros(t, t, dtype=torch.bool)
        ranked = scores.masked_fill(hide, float("-inf")).sort(dim=-1, descending=v.largest).values
        scale = scores.masked_fill(hide, 0.0).abs().amax(-1).clamp_min(1e-6)
        if v.largest:
            gap = ranked[..., top_k - 1] - ranked[..., top_k]  # (..., T)
            choosing = rows if v.causal else torch.ones(t, dtype=torch.bool)
        else:  # ascending: a boundary inside the hidden keys (all -inf, all read as -1) makes no choice
            gap = ranked[..., top_k] - ranked[..., top_k - 1]
            choosing = torch.isfinite(ranked[..., top_k - 1])
        if bool(((gap <= MARGIN * scale) & choosing).any()):
            return False
    return True


def _variants():
    ok = DsaVariant()
    return [ok] + [m.variant for m in mutants()]


def selections_apart(args) -> bool:
    """Every mistake of the scores (the ReLU left out, the heads' weights softmaxed or all one, a selection per head)
    selects other keys than the reference in some row that must choose, so that each is caught by the same cases on
    every draw (the same wrong answer, the same score): on its own draw, a mistake may happen to keep every row's
    top-k."""
    q, k, v_, q_idx, k_idx, weights, top_k = args
    t = k_idx.shape[1]
    if top_k >= t:  # no row chooses: no mistake of the scores can show, on any draw
        return True
    ok = DsaVariant()
    chosen = as_sets(select(index_scores(q_idx, k_idx, weights, ok), top_k, ok))
    for v in (replace(ok, relu=False), replace(ok, weights="softmax"), replace(ok, weights="ones")):
        if torch.equal(as_sets(select(index_scores(q_idx, k_idx, weights, v), top_k, v)), chosen):
            return False
    return True


def draw_args(g, b, h, t, d, d_i, top_k, bias=2.0, tries=200):
    """Arguments drawn until no variant meets a tie at its top-k boundary (h index heads, as many as the attention's).
    ``bias``: a shared direction added to the index queries and keys, so that most of their dot products are
    positive and a score of exactly 0 (every head negative) is rare, while enough negative ones remain for the ReLU
    to matter."""
    for _ in range(tries):
        u = torch.randn(d_i, generator=g)
        u = u / u.norm()
        q, k, v = (torch.randn(b, h, t, d, generator=g) for _ in range(3))
        q_idx = torch.randn(b, t, h, d_i, generator=g) + bias * u
        k_idx = torch.randn(b, t, d_i, generator=g) + bias * u
        weights = torch.randn(b, t, h, generator=g)
        args = (q, k, v, q_idx, k_idx, weights, top_k)
        if well_separated(args, _variants()) and selections_apart(args):
            return args
    raise RuntimeError("no case without a tie at the top-k boundary in 200 draws")  # never met: a tie is rare


def dsa_case(name, g, b, h, t, d, d_i, top_k):
    args = draw_args(g, b, h, t, d, d_i, top_k)
    return Case(name, {"top_k": top_k}, {}, [Call(args, seed=draw_seed(g), integer_outputs=("step1.lse",))])


def cases(g) -> list[Case]:
    """The cases, drawn from ``g`` (seeded by the grader's secret seed)."""
    return [
        dsa_case("a prefill of 12 tokens, 4 heads, 4 index heads, top-4, batch 2", g, 2, 4, 12, 8, 8, 4),
        dsa_case("top_k equal to the 7 tokens: causal attention", g, 1, 2, 7, 8, 4, 7),
        dsa_case("a prefill of 10 tokens, 3 heads, 3 index heads, top-3, batch 2", g, 2, 3, 10, 8, 6, 3),
    ]


def read_back(case: Case, outputs: dict) -> dict:
    """The learner's output and its indices (the pair's second, read as float64 by the function kind), as sets."""
    indices = ties_read_as_reference(as_sets(outputs.get("step1.lse")), case.calls[0].args)
    return {"step1.out": outputs.get("step1.out"), "step1.indices": indices, "repeat.out": outputs.get("repeat.out")}


def expected(case: Case, variant: DsaVariant) -> dict:
    """{name: tensor}, named as ``read_back`` names the learner's outputs."""
    with torch.no_grad():
        out, indices = dsa_forward(case.calls[0].args, variant)
    return {"step1.out": out, "step1.indices": as_sets(indices)}


# ---------------------------------------------------------------------------------------------
# the mistakes

M_NO_RELU = Mistake("dsa_no_relu")
M_SOFTMAX_WEIGHTS = Mistake("dsa_softmax_over_head_weights")
M_UNWEIGHTED = Mistake("dsa_unweighted_heads")
M_NOT_CAUSAL = Mistake("dsa_selection_not_causal")
M_PADDING = Mistake("dsa_padding_attended")
M_PER_HEAD = Mistake("dsa_selection_per_head")
M_NOT_PADDED = Mistake("dsa_indices_not_padded")
M_SMALLEST = Mistake("dsa_smallest_selected")


def mutants() -> list:
    """Known-wrong variants, most specific first."""
    ok = DsaVariant()
    return [
        mutant(M_NO_RELU, replace(ok, relu=False)),
        mutant(M_SOFTMAX_WEIGHTS, replace(ok, weights="softmax")),
        mutant(M_UNWEIGHTED, replace(ok, weights="ones")),
        mutant(M_NOT_CAUSAL, replace(ok, causal=False)),
        mutant(M_PADDING, replace(ok, padding="first_key")),
        mutant(M_PADDING, replace(ok, padding="last_key")),
        mutant(M_PER_HEAD, replace(ok, shared=False)),
        mutant(M_NOT_PADDED, replace(ok, padded=False)),
        mutant(M_SMALLEST, replace(ok, largest=False), paired=False),  # its first rows select no visible key
        mutant(M_SMALLEST, replace(ok, largest=False, empty_row="zero"), paired=False),
    ]


TEXTS: dict[str, tuple[str, str]] = {
    "mutant.dsa_no_relu": (
        "the index heads' dot products were summed without the ReLU: a head whose query points away from a key "
        "lowers its score; the lightning indexer takes ReLU(q_idx[t, j] . k_idx[s]) per head before weighting",
        "索引头的点积没经过 ReLU 就求和了：查询与某个键方向相反的头会拉低它的分数；闪电索引器对每个头先取 "
        "ReLU(q_idx[t, j] · k_idx[s])，再加权",
    ),
    "mutant.dsa_softmax_over_head_weights": (
        "the head weights went through a softmax over the heads: DeepSeek's indexer uses them as they are, signed "
        "(a head with a negative weight counts against a key); weight the heads by weights[t, j] directly",
        "对头的权重做了 softmax：DeepSeek 的索引器原样使用这些带符号的权重（权重为负的头是在给键投反对票）；"
        "直接用 weights[t, j] 给各头加权",
    ),
    "mutant.dsa_unweighted_heads": (
        "every index head counted the same: the score is the sum over heads of weights[t, j] * ReLU(q_idx[t, j] . "
        "k_idx[s]), each head weighted by the query token's own weight",
        "所有索引头一视同仁地相加了：分数是对各头求和 weights[t, j] · ReLU(q_idx[t, j] · k_idx[s])，每个头要乘上"
        "查询 token 自己给它的权重",
    ),
    "mutant.dsa_selection_not_causal": (
        "the top-k ranked every key, the future included, and the query attended to future keys it selected: hide "
        "the keys after each query (-inf) before topk",
        "取前 k 个时把所有键都拿来排名，包括未来的键，查询还关注了它选中的未来键：在 topk 之前先把每个查询之后的"
        "键遮成 -inf",
    ),
    "mutant.dsa_padding_attended": (
        "a -1 slot was attended: a query that sees fewer than top_k keys fills its other slots with -1, and no one "
        "may attend to them (gathering index -1 reads key 0 after a clamp, or the last key, from the future); mask "
        "the -1 slots out, or build the mask from the valid indices only",
        "关注了 -1 填充位：看得到的键不足 top_k 个的查询，其余位置填 -1，谁都不能关注它们（聚集 -1 时，clamp 之后"
        "读到的是第 0 个键，不 clamp 读到的是最后一个键，也就是未来的键）；把 -1 位遮掉，或只用有效下标构造掩码",
    ),
    "mutant.dsa_selection_per_head": (
        "each head selected its own keys: DSA makes one selection per query, from the weighted sum over the index "
        "heads, and every attention head attends to that same set (one gather serves them all)",
        "每个头各自选了键：DSA 对每个查询只做一次选择，依据是对索引头的加权和，所有注意力头都关注同一组键"
        "（聚集一次供所有头使用）",
    ),
    "mutant.dsa_indices_not_padded": (
        "the indices returned are not the keys attended: a query that sees fewer than top_k keys got future keys in "
        "its other slots (topk keeps some among the -inf scores); the contract fills those slots with -1 (set the "
        "slots whose topk value is -inf to -1)",
        "返回的下标不是实际关注的键：看得到的键不足 top_k 个的查询，其余位置放的是未来的键（topk 会在 -inf 分数"
        "里也挑几个出来）；接口约定这些位置填 -1（把 topk 值为 -inf 的位置设为 -1）",
    ),
    "mutant.dsa_smallest_selected": (
        "the lowest scores were selected: the ranking went in ascending order (argsort or sort without "
        "descending=True), so the first top_k slots held the hidden future keys and the visible keys of lowest "
        "score; rank in descending order, or use topk",
        "选中的是分数最低的键：排序是升序的（argsort 或 sort 没写 descending=True），所以前 top_k 个位置放的是"
        "被遮住的未来键和分数最低的可见键；应按降序排，或者直接用 topk",
    ),
    **case_titles(
        {
            "a prefill of 12 tokens, 4 heads, 4 index heads, top-4, batch 2": "12 个 token 的预填充，4 个头，4 个索引头，取前 4 个，批大小 2",
            "top_k equal to the 7 tokens: causal attention": "top_k 等于 7 个 token：就是因果注意力",
            "a prefill of 10 tokens, 3 heads, 3 index heads, top-3, batch 2": "10 个 token 的预填充，3 个头，3 个索引头，取前 3 个，批大小 2",
        }
    ),
}


EXERCISE = Exercise(
    id="dsa_indexer",
    order=17,
    notebook="17_dsa_indexer",
    points=3,
    kind="function",
    contract="dsa_attention",
    args=("q", "k", "v", "q_idx", "k_idx", "weights", "top_k"),
    cases=cases,
    expected=expected,
    correct=DsaVariant(),
    mutants=mutants,
    read_back=read_back,
)
