"""Interview mode (exercise 7): ``MultiHeadAttention`` from a blank page, on the cases and catalogue of
exercise 4; no course_utils, no SDPA, and other common dialects of the class accepted."""

from __future__ import annotations

from dataclasses import replace

from .. import specs
from ..registry import Exercise
from ..specs import CAUSAL, M_MERGE_D_IN, grad_case, make_case, mutant, train_case
from ..types import Case
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
        grad_case(
            FORM,
            "gradients of the parameters and the input",
            g,
            (2, 5, 8),
            d_in=8,
            d_out=8,
            context_length=7,
            dropout=0.0,
            num_heads=2,
            **common,
        ),
        train_case(
            FORM,
            "training mode, dropout 0.5",
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
        make_case(
            FORM,
            "scores in the hundreds (a large key bias)",
            g,
            (2, 5, 8),
            large=True,
            d_in=8,
            d_out=8,
            context_length=6,
            dropout=0.0,
            num_heads=2,
            **common,
        ),
    ]


def mutants() -> list:
    """Exercise 4's catalogue, and the merge into the input's width: a class that names d_in and d_out runs on
    the book's cases (d_in != d_out), where view(B, S, D) with the input's D fails (last: it only matches a
    learner that crashes in every case)."""
    return mha.mutants() + [mutant(M_MERGE_D_IN, replace(CAUSAL, merge="d_in"))]


EXERCISE = Exercise(
    id="mha_interview",
    order=5,
    notebook="07_interview_mha",
    points=5,
    kind="class",
    contract="MultiHeadAttention",
    args=("d_in", "d_out", "context_length", "dropout", "num_heads", "qkv_bias"),
    cases=cases,
    expected=specs.expected_for(FORM),
    correct=specs.CAUSAL,
    mutants=mutants,
    interview=True,
    square_cases=square_cases,
)
