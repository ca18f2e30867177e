"""Exercise 6 (and interview mode's second follow-up): ``GroupedQueryAttention``, K/V heads shared by groups
of query heads."""

from __future__ import annotations

from dataclasses import replace

from .. import specs
from ..registry import Exercise
from ..specs import (
    CAUSAL,
    M_GROUP0,
    M_TILED,
    causal_mutants,
    grad_case,
    grad_mutants,
    heads_mutants,
    make_case,
    mutant,
    scale_softmax_mutants,
    train_case,
)
from ..types import Case

FORM = "heads"


def cases(g) -> list[Case]:
    """The cases, drawn from ``g`` (seeded by the grader's secret seed)."""
    return [
        make_case(
            FORM,
            "4 heads in 2 K/V groups, d_in=6 < d_out=8, 6 tokens < context_length=8",
            g,
            (2, 6, 6),
            d_in=6,
            d_out=8,
            context_length=8,
            dropout=0.5,
            num_heads=4,
            num_kv_groups=2,
        ),
        make_case(
            FORM,
            "6 heads in 3 K/V groups, d_in=14 > d_out=12, 6 tokens = context_length",
            g,
            (3, 6, 14),
            d_in=14,
            d_out=12,
            context_length=6,
            dropout=0.1,
            num_heads=6,
            num_kv_groups=3,
        ),
        make_case(
            FORM,
            "MQA: 4 heads, 1 K/V group, qkv_bias, 5 tokens < context_length=9",
            g,
            (2, 5, 8),
            d_in=8,
            d_out=8,
            context_length=9,
            dropout=0.0,
            num_heads=4,
            num_kv_groups=1,
            qkv_bias=True,
        ),
        make_case(
            FORM,
            "MHA as GQA: 2 heads, 2 groups, d_in=3, d_out=4",
            g,
            (2, 4, 3),
            d_in=3,
            d_out=4,
            context_length=6,
            dropout=0.2,
            num_heads=2,
            num_kv_groups=2,
        ),
        grad_case(
            FORM,
            "gradients of the parameters and the input",
            g,
            (2, 5, 6),
            d_in=6,
            d_out=8,
            context_length=7,
            dropout=0.0,
            num_heads=4,
            num_kv_groups=2,
        ),
        train_case(
            FORM,
            "training mode, dropout 0.5",
            g,
            4,
            5,
            d_in=6,
            d_out=20,
            context_length=7,
            dropout=0.5,
            num_heads=4,
            num_kv_groups=2,
        ),
        make_case(
            FORM,
            "scores in the hundreds (a large key bias)",
            g,
            (2, 5, 6),
            large=True,
            d_in=6,
            d_out=8,
            context_length=6,
            dropout=0.0,
            num_heads=4,
            num_kv_groups=2,
        ),
    ]



def mutants() -> list:
    return (
        [mutant(M_TILED, replace(CAUSAL, kv_layout="tile")), mutant(M_GROUP0, replace(CAUSAL, kv_layout="group0"))]
        + scale_softmax_mutants(CAUSAL)
        + heads_mutants(CAUSAL)
        + causal_mutants(CAUSAL)
        + grad_mutants(CAUSAL)
    )


EXERCISE = Exercise(
    id="gqa",
    order=7,
    notebook="06_gqa",
    points=3,
    kind="class",
    contract="GroupedQueryAttention",
    args=("d_in", "d_out", "context_length", "dropout", "num_heads", "num_kv_groups", "qkv_bias"),
    cases=cases,
    expected=specs.expected_for(FORM),
    correct=CAUSAL,
    mutants=mutants,
)
