"""Exercise 2: ``CausalAttention``, one head with the causal mask and dropout on the attention weights."""

from __future__ import annotations

from dataclasses import replace

from ..heads import (
    CAUSAL,
    M_KEYS_Q,
    M_NO_SCALE,
    causal_mutants,
    expected_for,
    grad_mutants,
    gradients_case,
    large_scores_case,
    make_case,
    training_case,
)
from ..kinds.module import Case
from ..kit import M_SOFTMAX_BATCH, M_SOFTMAX_QUERIES, case_titles, mutant
from ..registry import Exercise

FORM = "single_head"


def cases(g) -> list[Case]:
    """The cases, drawn from ``g`` (seeded by the grader's secret seed)."""
    return [
        make_case(
            FORM,
            "d_in=3, d_out=2, 6 tokens = context_length, dropout 0.5",
            g,
            (2, 6, 3),
            d_in=3,
            d_out=2,
            context_length=6,
            dropout=0.5,
        ),
        make_case(
            FORM,
            "d_in=4 < d_out=6, 5 tokens < context_length=8, batch 3",
            g,
            (3, 5, 4),
            d_in=4,
            d_out=6,
            context_length=8,
            dropout=0.1,
        ),
        make_case(
            FORM,
            "d_in=6 > d_out=4, qkv_bias, 4 tokens < context_length=7",
            g,
            (2, 4, 6),
            d_in=6,
            d_out=4,
            context_length=7,
            dropout=0.0,
            qkv_bias=True,
        ),
        gradients_case(
            FORM,
            g,
            (2, 5, 4),
            d_in=4,
            d_out=3,
            context_length=6,
            dropout=0.0,
        ),
        training_case(FORM, g, 4, 5, d_in=6, d_out=6, context_length=7, dropout=0.5),
        large_scores_case(
            FORM,
            g,
            (2, 5, 4),
            d_in=4,
            d_out=4,
            context_length=6,
            dropout=0.0,
        ),
    ]


def mutants() -> list:
    return (
        [
            mutant(M_NO_SCALE, replace(CAUSAL, scale="none")),
            mutant(M_SOFTMAX_QUERIES, replace(CAUSAL, softmax_dim=-2)),
            mutant(M_SOFTMAX_BATCH, replace(CAUSAL, softmax_dim=0), paired=False),  # dim=1 is dim=-2 on batched scores
            mutant(M_KEYS_Q, replace(CAUSAL, keys_from="W_query")),
        ]
        + causal_mutants(CAUSAL)
        + grad_mutants(CAUSAL)
    )


TEXTS: dict[str, tuple[str, str]] = {
    **case_titles(
        {
            "d_in=3, d_out=2, 6 tokens = context_length, dropout 0.5": "d_in=3，d_out=2，6 个 token = context_length，dropout 0.5",
            "d_in=4 < d_out=6, 5 tokens < context_length=8, batch 3": "d_in=4 < d_out=6，5 个 token < context_length=8，batch 3",
            "d_in=6 > d_out=4, qkv_bias, 4 tokens < context_length=7": "d_in=6 > d_out=4，qkv_bias，4 个 token < context_length=7",
        }
    ),
}


EXERCISE = Exercise(
    id="causal",
    order=2,
    notebook="02_causal_attention",
    points=2,
    kind="module",
    contract="CausalAttention",
    args=("d_in", "d_out", "context_length", "dropout", "qkv_bias"),
    cases=cases,
    expected=expected_for(FORM),
    correct=CAUSAL,
    mutants=mutants,
)
