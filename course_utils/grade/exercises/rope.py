"""Exercise 8: ``RoPEAttention``, rotary positions with a KV cache (keys cached rotated)."""

from __future__ import annotations

from dataclasses import replace

from ..registry import Exercise
from ..specs_beyond import (
    M_IGNORES_PAST,
    M_ROPE_AFTER,
    M_ROPE_D_MODEL,
    M_ROPE_DIRECTION,
    M_ROPE_EXPONENT,
    M_ROPE_HALF_ON_PAIRS,
    M_ROPE_MISSING,
    M_ROPE_NO_TWO,
    M_ROPE_PAIRS,
    M_ROPE_PAIRS_ON_HALF,
    M_ROPE_RESTART,
    M_ROPE_V,
    M_TOP_LEFT,
    RopeVariant,
    given_past_module_case,
    module_case,
    module_expected,
    mutant,
    rope_forward,
    rope_param_shapes,
    softmax_axis_mutants,
)
from ..types import Case


def _case(name, g, x_shape, steps, **ctor):
    return module_case(rope_param_shapes, ("keys", "values"), name, g, x_shape, steps, **ctor)


def cases(g) -> list[Case]:
    """The cases, drawn from ``g`` (seeded by the grader's secret seed)."""
    return [
        _case(
            "3 heads of 4, d_in=4 < d_out=12, base 10000: chunks of 3, 2, 1 tokens with the "
            "cache, then the whole sequence without",
            g,
            (2, 7, 4),
            [(0, 3, True, False), (3, 5, True, True), (5, 6, True, True), (0, 7, False, False)],
            d_in=4,
            d_out=12,
            context_length=8,
            dropout=0.5,
            num_heads=3,
            qkv_bias=False,
            rope_base=10000.0,
        ),
        _case(
            "2 heads of 4, d_in=10 > d_out=8, qkv_bias, base 100: a prompt of 2, then one token at a time",
            g,
            (3, 5, 10),
            [(0, 2, True, False), (2, 3, True, True), (3, 4, True, True), (4, 5, True, True)],
            d_in=10,
            d_out=8,
            context_length=6,
            dropout=0.0,
            num_heads=2,
            qkv_bias=True,
            rope_base=100.0,
        ),
        _case(
            "4 heads of 6, d_in=6, d_out=24, base 500000: a prompt of 4, then a chunk of 3",
            g,
            (2, 7, 6),
            [(0, 4, True, False), (4, 7, True, True)],
            d_in=6,
            d_out=24,
            context_length=9,
            dropout=0.1,
            num_heads=4,
            qkv_bias=False,
            rope_base=500000.0,
        ),
        given_past_module_case(
            rope_forward,
            rope_param_shapes,
            ("keys", "values"),
            "a past_key_value the module did not produce (4 tokens of another prompt, keys rotated), then 2 and "
            "1 new tokens",
            g,
            2,
            4,
            [(2, None), (1, None)],
            RopeVariant(),
            d_in=6,
            d_out=8,
            context_length=8,
            dropout=0.0,
            num_heads=2,
            qkv_bias=False,
            rope_base=10000.0,
        ),
    ]


def expected(case: Case, variant: RopeVariant) -> dict:
    return module_expected(rope_forward, case, variant)


def mutants() -> list:
    """Known-wrong variants, most specific first."""
    ok = RopeVariant()
    return [
        mutant(M_ROPE_V, replace(ok, rotate_v=True)),
        mutant(M_ROPE_RESTART, replace(ok, positions="restart")),
        mutant(M_ROPE_PAIRS, replace(ok, layout="interleaved")),
        mutant(M_ROPE_D_MODEL, replace(ok, freq_dim="d_out")),
        mutant(M_ROPE_AFTER, replace(ok, cache="after_double")),
        mutant(M_ROPE_AFTER, replace(ok, cache="after_raw")),
        mutant(M_ROPE_MISSING, replace(ok, rope=False)),
        mutant(M_ROPE_DIRECTION, replace(ok, direction=-1)),
        mutant(M_IGNORES_PAST, replace(ok, own_cache=True), outputs_only=True),
        mutant(M_TOP_LEFT, replace(ok, mask="top_left")),
        mutant(M_ROPE_EXPONENT, replace(ok, exponent="shifted"), paired=False),
        mutant(M_ROPE_EXPONENT, replace(ok, exponent="odd"), paired=False),
        mutant(M_ROPE_NO_TWO, replace(ok, exponent="no_two"), paired=False),
        mutant(M_ROPE_HALF_ON_PAIRS, replace(ok, layout="half_angles_pairs"), paired=False),
        mutant(M_ROPE_PAIRS_ON_HALF, replace(ok, layout="pair_angles_half"), paired=False),
    ] + softmax_axis_mutants(ok)


EXERCISE = Exercise(
    id="rope",
    order=8,
    notebook="08_rope",
    points=3,
    kind="class",
    contract="RoPEAttention",
    args=("d_in", "d_out", "context_length", "dropout", "num_heads", "qkv_bias", "rope_base"),
    cases=cases,
    expected=expected,
    correct=RopeVariant(),
    mutants=mutants,
)
