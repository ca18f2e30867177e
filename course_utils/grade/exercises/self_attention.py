"""Exercise 1: ``SelfAttention_v2``, the book's self-attention (no mask, no dropout)."""

from __future__ import annotations

from dataclasses import replace

from ..heads import (
    CAUSAL,
    M_KEYS_Q,
    M_NO_SCALE,
    M_NO_SQRT,
    M_SCALE_D_IN,
    M_VALUES_K,
    PLAIN,
    expected_for,
    grad_mutants,
    gradients_case,
    large_scores_case,
    make_case,
)
from ..kinds.module import Case
from ..kit import M_SOFTMAX_BATCH, M_SOFTMAX_QUERIES, Mistake, case_titles, mutant
from ..registry import Exercise

FORM = "single_head"


def cases(g) -> list[Case]:
    """The cases, drawn from ``g`` (seeded by the grader's secret seed)."""
    return [
        make_case(FORM, "d_in=3 > d_out=2, batch 2, 6 tokens", g, (2, 6, 3), d_in=3, d_out=2),
        make_case(FORM, "d_in=4 < d_out=6, qkv_bias, batch 3, 5 tokens", g, (3, 5, 4), d_in=4, d_out=6, qkv_bias=True),
        make_case(FORM, "unbatched (5 tokens, d_in=5) input, d_out=3", g, (5, 5), d_in=5, d_out=3),
        gradients_case(FORM, g, (2, 5, 4), d_in=4, d_out=3),
        large_scores_case(FORM, g, (2, 5, 4), d_in=4, d_out=4),
    ]


M_SOFTMAX_DIM1 = Mistake("softmax_wrong_axis", text="softmax_fixed_dim1")  # one head: keys unbatched, queries batched
M_CAUSAL_SA = Mistake("causal_in_self_attention")


def mutants() -> list:
    return [
        mutant(M_NO_SCALE, replace(PLAIN, scale="none")),
        mutant(M_NO_SQRT, replace(PLAIN, scale="no_sqrt")),
        mutant(M_SCALE_D_IN, replace(PLAIN, scale="d_in")),
        mutant(M_SOFTMAX_QUERIES, replace(PLAIN, softmax_dim=-2)),
        mutant(M_SOFTMAX_DIM1, replace(PLAIN, softmax_dim=1), paired=False),  # right on the unbatched case only
        mutant(M_SOFTMAX_BATCH, replace(PLAIN, softmax_dim=0), paired=False),
        mutant(M_KEYS_Q, replace(PLAIN, keys_from="W_query")),
        mutant(M_VALUES_K, replace(PLAIN, values_from="W_key")),
        mutant(M_CAUSAL_SA, CAUSAL),
    ] + grad_mutants(PLAIN)


TEXTS: dict[str, tuple[str, str]] = {
    "mutant.softmax_fixed_dim1": (
        "softmax over a fixed dim=1: on unbatched (queries, keys) scores that is the keys, "
        "but on batched (batch, queries, keys) scores it is the queries; softmax(dim=-1) "
        "is the keys with or without a batch",
        "softmax 固定做在了 dim=1 上：没有 batch 维的 (queries, keys) 分数上它是键，但有 "
        "batch 维的 (batch, queries, keys) 分数上它是查询；softmax(dim=-1) 有没有 batch "
        "维都是键",
    ),
    "mutant.causal_in_self_attention": (
        "a causal mask is applied, but SelfAttention_v2 is not causal: every token attends to every token",
        "加了因果掩码，但 SelfAttention_v2 不是因果的：每个 token 都要关注所有 token",
    ),
    **case_titles(
        {
            "d_in=3 > d_out=2, batch 2, 6 tokens": "d_in=3 > d_out=2，batch 2，6 个 token",
            "d_in=4 < d_out=6, qkv_bias, batch 3, 5 tokens": "d_in=4 < d_out=6，qkv_bias，batch 3，5 个 token",
            "unbatched (5 tokens, d_in=5) input, d_out=3": "没有 batch 维的输入（5 个 token，d_in=5），d_out=3",
        }
    ),
}


EXERCISE = Exercise(
    id="self_attention",
    order=1,
    notebook="01_self_attention",
    points=2,
    kind="module",
    contract="SelfAttention_v2",
    args=("d_in", "d_out", "qkv_bias"),
    cases=cases,
    expected=expected_for(FORM),
    correct=PLAIN,
    mutants=mutants,
)
