"""Exercise 1: ``SelfAttention_v2``, the book's self-attention (no mask, no dropout)."""

from __future__ import annotations

from dataclasses import replace

from .. import specs
from ..registry import Exercise
from ..specs import (
    M_CAUSAL_SA,
    M_KEYS_Q,
    M_NO_SCALE,
    M_NO_SQRT,
    M_SCALE_D_IN,
    M_SOFTMAX,
    M_SOFTMAX_BATCH,
    M_SOFTMAX_DIM1,
    M_VALUES_K,
    PLAIN,
    grad_case,
    grad_mutants,
    make_case,
    mutant,
)
from ..types import Case

FORM = "single_head"


def cases(g) -> list[Case]:
    """The cases, drawn from ``g`` (seeded by the grader's secret seed)."""
    return [
        make_case(FORM, "d_in=3 > d_out=2, batch 2, 6 tokens", g, (2, 6, 3), d_in=3, d_out=2),
        make_case(FORM, "d_in=4 < d_out=6, qkv_bias, batch 3, 5 tokens", g, (3, 5, 4), d_in=4, d_out=6, qkv_bias=True),
        make_case(FORM, "unbatched (5 tokens, d_in=5) input, d_out=3", g, (5, 5), d_in=5, d_out=3),
        grad_case(FORM, "gradients of the parameters and the input", g, (2, 5, 4), d_in=4, d_out=3),
        make_case(FORM, "scores in the hundreds (a large key bias)", g, (2, 5, 4), large=True, d_in=4, d_out=4),
    ]



def mutants() -> list:
    return [
        mutant(M_NO_SCALE, replace(PLAIN, scale="none")),
        mutant(M_NO_SQRT, replace(PLAIN, scale="no_sqrt")),
        mutant(M_SCALE_D_IN, replace(PLAIN, scale="d_in")),
        mutant(M_SOFTMAX, replace(PLAIN, softmax_dim=-2)),
        mutant(M_SOFTMAX_DIM1, replace(PLAIN, softmax_dim=1), paired=False),  # right on the unbatched case only
        mutant(M_SOFTMAX_BATCH, replace(PLAIN, softmax_dim=0), paired=False),
        mutant(M_KEYS_Q, replace(PLAIN, keys_from="W_query")),
        mutant(M_VALUES_K, replace(PLAIN, values_from="W_key")),
        mutant(M_CAUSAL_SA, specs.CAUSAL),
    ] + grad_mutants(PLAIN)


EXERCISE = Exercise(
    id="self_attention",
    order=1,
    notebook="01_self_attention",
    points=2,
    kind="class",
    contract="SelfAttention_v2",
    args=("d_in", "d_out", "qkv_bias"),
    cases=cases,
    expected=specs.expected_for(FORM),
    correct=PLAIN,
    mutants=mutants,
)
