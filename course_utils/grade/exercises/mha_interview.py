"""Interview mode (exercise 7): ``MultiHeadAttention`` from a blank page, on the cases and catalogue of
exercise 4; no course_utils, no SDPA, and other common dialects of the class accepted."""

from __future__ import annotations

from dataclasses import replace

from ..heads import CAUSAL, expected_for, gradients_case, large_scores_case, make_case, training_case
from ..kinds.module import Case
from ..kit import Mistake, case_titles, mutant
from ..registry import Exercise
from . import mha
from .mha import FORM, cases


def square_cases(g) -> list[Case]:
    """Cases for a class in another dialect than the book's: d_in = d_out = d_model, and biases on every
    projection (zeroed for the projections the candidate's class has no bias on)."""
    common = {"qkv_bias": True}
    return [
        make_case(
            FORM,
            "d_model=12, 3 heads, 5 tokens, dropout 0.5",
            g,
            (2, 5, 12),
            d_in=12,
            d_out=12,
            context_length=8,
            dropout=0.5,
            num_heads=3,
            **common,
        ),
        make_case(
            FORM,
            "d_model=8, 2 heads, 6 tokens, batch 3",
            g,
            (3, 6, 8),
            d_in=8,
            d_out=8,
            context_length=6,
            dropout=0.1,
            num_heads=2,
            **common,
        ),
        make_case(
            FORM,
            "d_model=8, 4 heads, 7 tokens",
            g,
            (2, 7, 8),
            d_in=8,
            d_out=8,
            context_length=9,
            dropout=0.0,
            num_heads=4,
            **common,
        ),
        gradients_case(
            FORM,
            g,
            (2, 5, 8),
            d_in=8,
            d_out=8,
            context_length=7,
            dropout=0.0,
            num_heads=2,
            **common,
        ),
        training_case(
            FORM,
            g,
            4,
            5,
            d_in=12,
            d_out=12,
            context_length=7,
            dropout=0.5,
            num_heads=2,
            qkv_bias=True,
        ),
        large_scores_case(
            FORM,
            g,
            (2, 5, 8),
            d_in=8,
            d_out=8,
            context_length=6,
            dropout=0.0,
            num_heads=2,
            **common,
        ),
    ]


M_MERGE_D_IN = Mistake("merge_input_width")


def mutants() -> list:
    """Exercise 4's catalogue, and the merge into the input's width: a class that names d_in and d_out runs on
    the book's cases (d_in != d_out), where view(B, S, D) with the input's D fails (last: it only matches a
    learner that crashes in every case)."""
    return mha.mutants() + [mutant(M_MERGE_D_IN, replace(CAUSAL, merge="d_in"))]


TEXTS: dict[str, tuple[str, str]] = {
    "mutant.merge_input_width": (
        "heads merged into the input's width: view(B, S, D) with D = x.shape[-1] (d_in) "
        "only works when d_in == d_out; merge into d_out: .view(B, S, d_out) or "
        ".reshape(B, S, -1)",
        "合并多头时用了输入的宽度：view(B, S, D) 里的 D = x.shape[-1] 是 d_in，只有 d_in == "
        "d_out 时才对；应当合并成 d_out：.view(B, S, d_out) 或 .reshape(B, S, -1)",
    ),
    **case_titles(
        {
            "d_model=12, 3 heads, 5 tokens, dropout 0.5": "d_model=12，3 个头，5 个 token，dropout 0.5",
            "d_model=8, 2 heads, 6 tokens, batch 3": "d_model=8，2 个头，6 个 token，batch 3",
            "d_model=8, 4 heads, 7 tokens": "d_model=8，4 个头，7 个 token",
        }
    ),
}


EXERCISE = Exercise(
    id="mha_interview",
    order=5,
    notebook="07_interview_mha",
    points=5,
    kind="module",
    contract="MultiHeadAttention",
    args=("d_in", "d_out", "context_length", "dropout", "num_heads", "qkv_bias"),
    cases=cases,
    expected=expected_for(FORM),
    correct=CAUSAL,
    mutants=mutants,
    interview=True,
    square_cases=square_cases,
)
