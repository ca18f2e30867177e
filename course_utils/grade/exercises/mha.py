"""Exercise 4: ``MultiHeadAttention`` with weight splits, the book's contract."""

from __future__ import annotations

from dataclasses import replace

from ..heads import (
    CAUSAL,
    M_KEYS_Q,
    M_VALUES_K,
    causal_mutants,
    expected_for,
    grad_mutants,
    gradients_case,
    heads_mutants,
    large_scores_case,
    make_case,
    scale_softmax_mutants,
    training_case,
)
from ..kinds.module import Case
from ..kit import case_titles, mutant
from ..registry import Exercise

FORM = "heads"


def cases(g) -> list[Case]:
    """The cases, drawn from ``g`` (seeded by the grader's secret seed)."""
    return [
        make_case(
            FORM,
            "3 heads, d_in=4 < d_out=12, 5 tokens < context_length=8, dropout 0.5",
            g,
            (2, 5, 4),
            d_in=4,
            d_out=12,
            context_length=8,
            dropout=0.5,
            num_heads=3,
        ),
        make_case(
            FORM,
            "2 heads, d_in=10 > d_out=6, 6 tokens = context_length, batch 3",
            g,
            (3, 6, 10),
            d_in=10,
            d_out=6,
            context_length=6,
            dropout=0.1,
            num_heads=2,
        ),
        make_case(
            FORM,
            "4 heads, d_in=6, d_out=8, qkv_bias, 7 tokens < context_length=9",
            g,
            (2, 7, 6),
            d_in=6,
            d_out=8,
            context_length=9,
            dropout=0.0,
            num_heads=4,
            qkv_bias=True,
        ),
        gradients_case(
            FORM,
            g,
            (2, 5, 6),
            d_in=6,
            d_out=8,
            context_length=7,
            dropout=0.0,
            num_heads=2,
            qkv_bias=True,
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


def mutants() -> list:
    return (
        scale_softmax_mutants(CAUSAL)
        + heads_mutants(CAUSAL)
        + [
            mutant(M_KEYS_Q, replace(CAUSAL, keys_from="W_query")),
            mutant(M_VALUES_K, replace(CAUSAL, values_from="W_key")),
        ]
        + causal_mutants(CAUSAL)
        + grad_mutants(CAUSAL)
    )


TEXTS: dict[str, tuple[str, str]] = {
    **case_titles(
        {
            "3 heads, d_in=4 < d_out=12, 5 tokens < context_length=8, dropout 0.5": "3 个头，d_in=4 < d_out=12，5 个 token < context_length=8，dropout 0.5",
            "2 heads, d_in=10 > d_out=6, 6 tokens = context_length, batch 3": "2 个头，d_in=10 > d_out=6，6 个 token = context_length，batch 3",
            "4 heads, d_in=6, d_out=8, qkv_bias, 7 tokens < context_length=9": "4 个头，d_in=6，d_out=8，qkv_bias，7 个 token < context_length=9",
        }
    ),
}


EXERCISE = Exercise(
    id="mha",
    order=4,
    notebook="04_multihead_attention",
    points=3,
    kind="module",
    contract="MultiHeadAttention",
    args=("d_in", "d_out", "context_length", "dropout", "num_heads", "qkv_bias"),
    cases=cases,
    expected=expected_for(FORM),
    correct=CAUSAL,
    mutants=mutants,
)
