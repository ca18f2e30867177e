"""Exercise 5 (and interview mode's first follow-up): ``CachedMultiHeadAttention``, MHA with
``past_key_value`` and ``use_cache``."""

from __future__ import annotations

from dataclasses import replace

from .. import specs
from ..registry import Exercise
from ..specs import (
    CAUSAL,
    M_FIRST_ONLY,
    M_IGNORES_PAST,
    M_NAIVE_SOFTMAX,
    M_NOT_UPDATED,
    M_ONLY_NEW,
    M_SCALE_D_OUT,
    M_SOFTMAX,
    M_SOFTMAX_BATCH,
    M_SOFTMAX_HEADS,
    M_SQUARE,
    M_TOP_LEFT,
    M_WRONG_AXIS,
    causal_mutants,
    given_past_case,
    heads_mutants,
    interleaved_case,
    make_case,
    mutant,
    train_case,
)
from ..types import Case

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
        train_case(
            FORM, "training mode, dropout 0.5", g, 4, 5, d_in=6, d_out=12, context_length=7, dropout=0.5, num_heads=2
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
            num_heads=2,
        ),
    ]



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
            mutant(M_SOFTMAX, replace(CAUSAL, softmax_dim=-2), paired=False),
            mutant(M_SOFTMAX_HEADS, replace(CAUSAL, softmax_dim=1), paired=False),
            mutant(M_SOFTMAX_BATCH, replace(CAUSAL, softmax_dim=0), paired=False),
        ]
        + heads_mutants(CAUSAL)
        + causal_mutants(CAUSAL)
        + [mutant(M_NAIVE_SOFTMAX, replace(CAUSAL, softmax="naive"))]
    )


EXERCISE = Exercise(
    id="kv_cache",
    order=6,
    notebook="05_kv_cache",
    points=3,
    kind="class",
    contract="CachedMultiHeadAttention",
    args=("d_in", "d_out", "context_length", "dropout", "num_heads", "qkv_bias"),
    cases=cases,
    expected=specs.expected_for(FORM),
    correct=CAUSAL,
    mutants=mutants,
)
