"""Exercise 2: ``CausalAttention``, one head with the causal mask and dropout on the attention weights."""

from __future__ import annotations

from dataclasses import replace

from .. import specs
from ..registry import Exercise
from ..specs import (
    CAUSAL,
    M_KEYS_Q,
    M_NO_SCALE,
    M_SOFTMAX,
    M_SOFTMAX_BATCH,
    causal_mutants,
    grad_case,
    grad_mutants,
    make_case,
    mutant,
    train_case,
)
from ..types import Case

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
        grad_case(
            FORM,
            "gradients of the parameters and the input",
            g,
            (2, 5, 4),
            d_in=4,
            d_out=3,
            context_length=6,
            dropout=0.0,
        ),
        train_case(FORM, "training mode, dropout 0.5", g, 4, 5, d_in=6, d_out=6, context_length=7, dropout=0.5),
        make_case(
            FORM,
            "scores in the hundreds (a large key bias)",
            g,
            (2, 5, 4),
            large=True,
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
            mutant(M_SOFTMAX, replace(CAUSAL, softmax_dim=-2)),
            mutant(M_SOFTMAX_BATCH, replace(CAUSAL, softmax_dim=0), paired=False),  # dim=1 is dim=-2 on batched scores
            mutant(M_KEYS_Q, replace(CAUSAL, keys_from="W_query")),
        ]
        + causal_mutants(CAUSAL)
        + grad_mutants(CAUSAL)
    )


EXERCISE = Exercise(
    id="causal",
    order=2,
    notebook="02_causal_attention",
    points=2,
    kind="class",
    contract="CausalAttention",
    args=("d_in", "d_out", "context_length", "dropout", "qkv_bias"),
    cases=cases,
    expected=specs.expected_for(FORM),
    correct=CAUSAL,
    mutants=mutants,
)
