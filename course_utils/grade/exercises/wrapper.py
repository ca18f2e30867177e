"""Exercise 3: ``MultiHeadAttentionWrapper``, separate causal heads whose outputs are concatenated."""

from __future__ import annotations

from dataclasses import replace

from .. import specs
from ..registry import Exercise
from ..specs import (
    CAUSAL,
    M_CAT_TOKENS,
    M_NO_SCALE,
    M_SHARED,
    M_SOFTMAX,
    M_SOFTMAX_BATCH,
    M_SUM,
    causal_mutants,
    grad_case,
    grad_mutants,
    make_case,
    mutant,
    train_case,
)
from ..types import Case

FORM = "wrapper"


def cases(g) -> list[Case]:
    """The cases, drawn from ``g`` (seeded by the grader's secret seed)."""
    return [
        make_case(
            FORM,
            "2 heads, d_in=3, d_out=2, 6 tokens = context_length",
            g,
            (2, 6, 3),
            d_in=3,
            d_out=2,
            context_length=6,
            dropout=0.5,
            num_heads=2,
        ),
        make_case(
            FORM,
            "3 heads, d_in=4 < d_out=5, 5 tokens < context_length=8",
            g,
            (2, 5, 4),
            d_in=4,
            d_out=5,
            context_length=8,
            dropout=0.1,
            num_heads=3,
        ),
        make_case(
            FORM,
            "2 heads, d_in=6 > d_out=2, qkv_bias, 4 tokens < context_length=5",
            g,
            (3, 4, 6),
            d_in=6,
            d_out=2,
            context_length=5,
            dropout=0.0,
            num_heads=2,
            qkv_bias=True,
        ),
        grad_case(
            FORM,
            "gradients of the parameters and the input",
            g,
            (2, 5, 4),
            d_in=4,
            d_out=3,
            context_length=6,
            dropout=0.0,
            num_heads=2,
        ),
        train_case(
            FORM, "training mode, dropout 0.5", g, 4, 5, d_in=5, d_out=5, context_length=6, dropout=0.5, num_heads=2
        ),
        make_case(
            FORM,
            "scores in the hundreds (a large key bias)",
            g,
            (2, 5, 4),
            large=True,
            d_in=4,
            d_out=3,
            context_length=6,
            dropout=0.0,
            num_heads=2,
        ),
    ]



def mutants() -> list:
    return (
        [
            mutant(M_SHARED, replace(CAUSAL, wrapper="shared")),
            mutant(M_SUM, replace(CAUSAL, wrapper="sum")),
            mutant(M_CAT_TOKENS, replace(CAUSAL, wrapper="cat_tokens")),
            mutant(M_NO_SCALE, replace(CAUSAL, scale="none")),
            mutant(M_SOFTMAX, replace(CAUSAL, softmax_dim=-2)),
            mutant(M_SOFTMAX_BATCH, replace(CAUSAL, softmax_dim=0), paired=False),  # dim=1 is dim=-2 on batched scores
        ]
        + causal_mutants(CAUSAL)
        + grad_mutants(CAUSAL)
    )


EXERCISE = Exercise(
    id="wrapper",
    order=3,
    notebook="03_multihead_wrapper",
    points=1,
    kind="class",
    contract="MultiHeadAttentionWrapper",
    args=("d_in", "d_out", "context_length", "dropout", "num_heads", "qkv_bias"),
    cases=cases,
    expected=specs.expected_for(FORM),
    correct=CAUSAL,
    mutants=mutants,
)
