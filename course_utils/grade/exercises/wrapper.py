"""Exercise 3: ``MultiHeadAttentionWrapper``, separate causal heads whose outputs are concatenated."""

from __future__ import annotations

from dataclasses import replace

from ..heads import (
    CAUSAL,
    M_NO_SCALE,
    causal_mutants,
    expected_for,
    grad_mutants,
    gradients_case,
    large_scores_case,
    make_case,
    training_case,
)
from ..kinds.module import Case
from ..kit import M_SOFTMAX_BATCH, M_SOFTMAX_QUERIES, Mistake, case_titles, mutant
from ..registry import Exercise

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
        gradients_case(
            FORM,
            g,
            (2, 5, 4),
            d_in=4,
            d_out=3,
            context_length=6,
            dropout=0.0,
            num_heads=2,
        ),
        training_case(FORM, g, 4, 5, d_in=5, d_out=5, context_length=6, dropout=0.5, num_heads=2),
        large_scores_case(
            FORM,
            g,
            (2, 5, 4),
            d_in=4,
            d_out=3,
            context_length=6,
            dropout=0.0,
            num_heads=2,
        ),
    ]


M_SHARED = Mistake("wrapper_shared_weights")
M_SUM = Mistake("wrapper_summed")
M_CAT_TOKENS = Mistake("wrapper_cat_wrong_axis")


def mutants() -> list:
    return (
        [
            mutant(M_SHARED, replace(CAUSAL, wrapper="shared")),
            mutant(M_SUM, replace(CAUSAL, wrapper="sum")),
            mutant(M_CAT_TOKENS, replace(CAUSAL, wrapper="cat_tokens")),
            mutant(M_NO_SCALE, replace(CAUSAL, scale="none")),
            mutant(M_SOFTMAX_QUERIES, replace(CAUSAL, softmax_dim=-2)),
            mutant(M_SOFTMAX_BATCH, replace(CAUSAL, softmax_dim=0), paired=False),  # dim=1 is dim=-2 on batched scores
        ]
        + causal_mutants(CAUSAL)
        + grad_mutants(CAUSAL)
    )


TEXTS: dict[str, tuple[str, str]] = {
    "mutant.wrapper_shared_weights": (
        "every head uses the first head's weights: call each head in self.heads",
        "每个头都用了第一个头的权重：应当分别调用 self.heads 中的每个头",
    ),
    "mutant.wrapper_summed": (
        "heads summed instead of concatenated: torch.cat([head(x) for head in self.heads], dim=-1)",
        "多个头的输出被加在了一起，应当拼接：torch.cat([head(x) for head in self.heads], dim=-1)",
    ),
    "mutant.wrapper_cat_wrong_axis": (
        "heads concatenated along the tokens (dim=1) instead of the features (dim=-1)",
        "多个头沿 token 维（dim=1）拼接了，应当沿特征维（dim=-1）拼接",
    ),
    **case_titles(
        {
            "2 heads, d_in=3, d_out=2, 6 tokens = context_length": "2 个头，d_in=3，d_out=2，6 个 token = context_length",
            "3 heads, d_in=4 < d_out=5, 5 tokens < context_length=8": "3 个头，d_in=4 < d_out=5，5 个 token < context_length=8",
            "2 heads, d_in=6 > d_out=2, qkv_bias, 4 tokens < context_length=5": "2 个头，d_in=6 > d_out=2，qkv_bias，4 个 token < context_length=5",
        }
    ),
}


EXERCISE = Exercise(
    id="wrapper",
    order=3,
    notebook="03_multihead_wrapper",
    points=1,
    kind="module",
    contract="MultiHeadAttentionWrapper",
    args=("d_in", "d_out", "context_length", "dropout", "num_heads", "qkv_bias"),
    cases=cases,
    expected=expected_for(FORM),
    correct=CAUSAL,
    mutants=mutants,
)
