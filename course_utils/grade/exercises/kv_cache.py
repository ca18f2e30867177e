"""Exercise 5 (and interview mode's first follow-up): ``CachedMultiHeadAttention``, MHA with
``past_key_value`` and ``use_cache``."""

from __future__ import annotations

from dataclasses import replace

from ..heads import (
    CAUSAL,
    M_NAIVE_SOFTMAX,
    M_SCALE_D_OUT,
    causal_mutants,
    expected_for,
    given_past_case,
    heads_mutants,
    interleaved_case,
    large_scores_case,
    make_case,
    training_case,
)
from ..kinds.module import Case
from ..kit import M_IGNORES_PAST, M_SOFTMAX_BATCH, M_SOFTMAX_HEADS, M_SOFTMAX_QUERIES, Mistake, case_titles, mutant
from ..registry import Exercise

FORM = "cached"


def cases(g) -> list[Case]:
    """The cases, drawn from ``g`` (seeded by the grader's secret seed)."""
    return [
        make_case(
            FORM,
            "3 heads, d_in=4 < d_out=12: chunks of 3, 2, 1 tokens with the cache, then no cache",
            g,
            (2, 7, 4),
            steps=[(0, 3, True, False), (3, 5, True, True), (5, 6, True, True), (0, 7, False, False)],
            d_in=4,
            d_out=12,
            context_length=8,
            dropout=0.5,
            num_heads=3,
        ),
        make_case(
            FORM,
            "2 heads, d_in=6 > d_out=4, qkv_bias: chunks of 3, 1, 2 tokens with the cache",
            g,
            (1, 6, 6),
            steps=[(0, 3, True, False), (3, 4, True, True), (4, 6, True, True)],
            d_in=6,
            d_out=4,
            context_length=6,
            dropout=0.0,
            num_heads=2,
            qkv_bias=True,
        ),
        make_case(
            FORM,
            "2 heads, d_in=5, d_out=6: prompt of 2 tokens, then one token at a time",
            g,
            (2, 4, 5),
            steps=[(0, 2, True, False), (2, 3, True, True), (3, 4, True, True)],
            d_in=5,
            d_out=6,
            context_length=5,
            dropout=0.1,
            num_heads=2,
        ),
        given_past_case(
            FORM,
            "a past_key_value the module did not produce (3 cached tokens, 2 new)",
            g,
            2,
            3,
            2,
            d_in=5,
            d_out=8,
            context_length=8,
            dropout=0.0,
            num_heads=2,
        ),
        interleaved_case(
            FORM,
            "two sequences decoded in turns, each with its own cache",
            g,
            2,
            d_in=4,
            d_out=6,
            context_length=8,
            dropout=0.0,
            num_heads=2,
        ),
        training_case(FORM, g, 4, 5, d_in=6, d_out=12, context_length=7, dropout=0.5, num_heads=2),
        large_scores_case(
            FORM,
            g,
            (2, 5, 6),
            d_in=6,
            d_out=8,
            context_length=6,
            dropout=0.0,
            num_heads=2,
        ),
    ]


M_TOP_LEFT = Mistake("mask_top_left")
M_FIRST_ONLY = Mistake("mask_only_without_cache")
M_SQUARE = Mistake("mask_square_slice")
M_ONLY_NEW = Mistake("cache_only_new")
M_NOT_UPDATED = Mistake("cache_not_updated")
M_WRONG_AXIS = Mistake("cache_wrong_axis")


def mutants() -> list:
    return (
        [
            mutant(M_TOP_LEFT, replace(CAUSAL, mask="top_left")),
            mutant(M_FIRST_ONLY, replace(CAUSAL, mask="first_chunk_only")),
            mutant(M_SQUARE, replace(CAUSAL, mask="square_slice")),
            mutant(M_ONLY_NEW, replace(CAUSAL, cache="only_new")),
            mutant(M_NOT_UPDATED, replace(CAUSAL, cache="not_updated")),
            mutant(M_WRONG_AXIS, replace(CAUSAL, cache="wrong_axis")),
            mutant(M_IGNORES_PAST, replace(CAUSAL, cache="own_state"), outputs_only=True),
            mutant(M_SCALE_D_OUT, replace(CAUSAL, scale="d_out")),
            mutant(M_SOFTMAX_QUERIES, replace(CAUSAL, softmax_dim=-2), paired=False),
            mutant(M_SOFTMAX_HEADS, replace(CAUSAL, softmax_dim=1), paired=False),
            mutant(M_SOFTMAX_BATCH, replace(CAUSAL, softmax_dim=0), paired=False),
        ]
        + heads_mutants(CAUSAL)
        + causal_mutants(CAUSAL)
        + [mutant(M_NAIVE_SOFTMAX, replace(CAUSAL, softmax="naive"))]
    )


TEXTS: dict[str, tuple[str, str]] = {
    "mutant.mask_top_left": (
        "causal mask aligned to the start of the cache (or is_causal=True on a chunk): the new "
        "queries are the LAST positions; hide key j from new query i when j > n_past + i, e.g. "
        "mask[n_past:n_past + n_new, :n_past + n_new]",
        "因果掩码对齐到了缓存的开头（或对一段输入用了 is_causal=True）：新的查询在序列的最后几个位置；"
        "当 j > n_past + i 时，要对新查询 i 遮住键 j，例如 mask[n_past:n_past + n_new, :n_past + n_new]",
    ),
    "mutant.mask_only_without_cache": (
        "no causal mask once there is a cache: a chunk of several new tokens still must not see its own later tokens",
        "有了缓存就不加因果掩码了：一次输入多个新 token 时，每个 token 仍然不能看到同一段里排在它后面的 token",
    ),
    "mutant.mask_square_slice": (
        "mask sliced [:n_new, :n_new]: with a cache it must cover all n_past + n_new keys, "
        "mask[n_past:n_past + n_new, :n_past + n_new]",
        "掩码切成了 [:n_new, :n_new]：有缓存时它必须覆盖全部 n_past + n_new 个键，即 "
        "mask[n_past:n_past + n_new, :n_past + n_new]",
    ),
    "mutant.cache_only_new": (
        "present holds only the new tokens: return the concatenated past + new keys and values",
        "present 里只有新 token 的键和值：应当返回过去与新 token 拼接后的全部键和值",
    ),
    "mutant.cache_not_updated": (
        "cache not updated: present returns the old past_key_value instead of past + new keys/values",
        "缓存没有更新：present 返回的是旧的 past_key_value，而不是过去加上新 token 的键/值",
    ),
    "mutant.cache_wrong_axis": (
        "cache concatenated on the wrong axis: keys/values are [b, num_heads, n, head_dim], "
        "concatenate on dim=2 (the tokens)",
        "缓存拼接的维度不对：键/值的形状是 [b, num_heads, n, head_dim]，应当在 dim=2（token 维）上拼接",
    ),
    **case_titles(
        {
            "3 heads, d_in=4 < d_out=12: chunks of 3, 2, 1 tokens with the cache, then no cache": "3 个头，d_in=4 < d_out=12：带缓存依次输入 3、2、1 个 token，然后不带缓存",
            "2 heads, d_in=6 > d_out=4, qkv_bias: chunks of 3, 1, 2 tokens with the cache": "2 个头，d_in=6 > d_out=4，qkv_bias：带缓存依次输入 3、1、2 个 token",
            "2 heads, d_in=5, d_out=6: prompt of 2 tokens, then one token at a time": "2 个头，d_in=5，d_out=6：先输入 2 个 token 的提示，再一次一个 token",
            "a past_key_value the module did not produce (3 cached tokens, 2 new)": "不是模块自己产生的 past_key_value（缓存了 3 个 token，新输入 2 个）",
            "two sequences decoded in turns, each with its own cache": "两个序列交替解码，各用各的缓存",
        }
    ),
}


EXERCISE = Exercise(
    id="kv_cache",
    order=6,
    notebook="05_kv_cache",
    points=3,
    kind="module",
    contract="CachedMultiHeadAttention",
    args=("d_in", "d_out", "context_length", "dropout", "num_heads", "qkv_bias"),
    cases=cases,
    expected=expected_for(FORM),
    correct=CAUSAL,
    mutants=mutants,
)
