"""Exercise 9: ``online_softmax_attention(q, k, v, block_size, causal)``, FlashAttention's tiled loop with
its running max and sum (a function: it returns the output and the log-sum-exp)."""

from __future__ import annotations

from dataclasses import replace

from ..registry import Exercise
from ..specs_beyond import (
    M_DIAGONAL_UNMASKED,
    M_DIVIDE_EARLY,
    M_LSE,
    M_MATERIALISED,
    M_MAX_STALE,
    M_NO_MAX,
    M_NO_SCALE_OS,
    M_OUT_NOT_RESCALED,
    M_SKIP_DIAGONAL,
    M_SUM_NOT_RESCALED,
    OnlineVariant,
    function_case,
    mutant,
    online_expected,
)
from ..types import Case


def cases(g) -> list[Case]:
    """The cases, drawn from ``g`` (seeded by the grader's secret seed)."""
    return [
        function_case(
            "not causal, 5 queries x 11 keys, 2 heads, batch 2, block 4 (does not divide 11)",
            g,
            (2, 2, 5, 8),
            (2, 2, 11, 8),
            4,
            False,
        ),
        function_case("causal, 13 tokens, 3 heads, batch 2, block 4", g, (2, 3, 13, 8), (2, 3, 13, 8), 4, True),
        function_case(
            "causal, 24 tokens, 2 heads, block 5, scores in the hundreds (exp overflows without the running max)",
            g,
            (1, 2, 24, 8),
            (1, 2, 24, 8),
            5,
            True,
            scale=10.0,
        ),
        function_case(
            "not causal, 16 queries x 16 keys, one block of 32",
            g,
            (1, 2, 16, 4),
            (1, 2, 16, 4),
            32,
            False,
            check_tiles=False,
        ),
        # last, when the code it runs is loaded: 256 x 32768 float32 scores are 32 MiB, a (128, 32768) strip 16 MiB,
        # a tile 64 KiB, the inputs 2 MiB; the process's peak memory may rise by 8 MiB at most (see function_case)
        function_case(
            "not causal, 256 queries x 32768 keys, head_dim 8, block 128 (the process's peak memory is measured)",
            g,
            (1, 1, 256, 8),
            (1, 1, 32768, 8),
            128,
            False,
            peak=True,
        ),
    ]


def expected(case: Case, variant: OnlineVariant) -> dict:
    return online_expected(case, variant)


def mutants() -> list:
    """Known-wrong variants, most specific first."""
    ok = OnlineVariant()
    return [
        mutant(M_MATERIALISED, replace(ok, materialise=True)),
        mutant(M_MAX_STALE, replace(ok, update_max=False)),
        mutant(M_MAX_STALE, replace(ok, update_max=False, lse_from="m_new")),
        mutant(M_NO_MAX, replace(ok, subtract_max=False)),
        mutant(M_OUT_NOT_RESCALED, replace(ok, rescale_out=False)),
        mutant(M_SUM_NOT_RESCALED, replace(ok, rescale_sum=False)),
        mutant(M_DIVIDE_EARLY, replace(ok, divide="tile")),
        mutant(M_DIVIDE_EARLY, replace(ok, divide="running")),
        mutant(M_SKIP_DIAGONAL, replace(ok, causal_skip="diagonal")),
        mutant(M_SKIP_DIAGONAL, replace(ok, causal_skip="diagonal", fully_masked="zero")),
        mutant(M_DIAGONAL_UNMASKED, replace(ok, diagonal_mask=False)),
        mutant(M_LSE, replace(ok, lse_from="none")),
        mutant(M_NO_SCALE_OS, replace(ok, scale=False)),
    ]


EXERCISE = Exercise(
    id="online_softmax",
    order=9,
    notebook="09_online_softmax",
    points=3,
    kind="function",
    contract="online_softmax_attention",
    args=("q", "k", "v", "block_size", "causal"),
    cases=cases,
    expected=expected,
    correct=OnlineVariant(),
    mutants=mutants,
)
