"""Exercise 6 (and interview mode's second follow-up): ``GroupedQueryAttention``, K/V heads shared by groups
of query heads."""

from __future__ import annotations

from dataclasses import replace

from ..heads import (
    CAUSAL,
    causal_mutants,
    expected_for,
    grad_mutants,
    gradients_case,
    heads_mutants,
    large_scores_case,
    make_case,
    scale_softmax_mutants,
    training_case,
)
from ..kinds.module import Case
from ..kit import Mistake, case_titles, mutant
from ..registry import Exercise

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
        gradients_case(
            FORM,
            g,
            (2, 5, 6),
            d_in=6,
            d_out=8,
            context_length=7,
            dropout=0.0,
            num_heads=4,
            num_kv_groups=2,
        ),
        training_case(
            FORM,
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
        large_scores_case(
            FORM,
            g,
            (2, 5, 6),
            d_in=6,
            d_out=8,
            context_length=6,
            dropout=0.0,
            num_heads=4,
            num_kv_groups=2,
        ),
    ]


M_TILED = Mistake("kv_tiled")
M_GROUP0 = Mistake("kv_one_group")


def mutants() -> list:
    return (
        [mutant(M_TILED, replace(CAUSAL, kv_layout="tile")), mutant(M_GROUP0, replace(CAUSAL, kv_layout="group0"))]
        + scale_softmax_mutants(CAUSAL)
        + heads_mutants(CAUSAL)
        + causal_mutants(CAUSAL)
        + grad_mutants(CAUSAL)
    )


TEXTS: dict[str, tuple[str, str]] = {
    "mutant.kv_tiled": (
        "K/V groups tiled (repeat, or head h reads group h % num_kv_groups) instead of interleaved: "
        "query head h reads group h // (num_heads // num_kv_groups), use "
        "repeat_interleave(group_size, dim=1)",
        "K/V 分组用了平铺（tile：repeat，或让头 h 读第 h % num_kv_groups 组）而不是交错（interleave）："
        "查询头 h 应当读第 h // (num_heads // num_kv_groups) 组，请用 repeat_interleave(group_size, dim=1)",
    ),
    "mutant.kv_one_group": (
        "every query head reads K/V group 0: expand/repeat each of the num_kv_groups groups for "
        "its num_heads // num_kv_groups query heads",
        "每个查询头读的都是第 0 组 K/V：应当把 num_kv_groups 组中的每一组扩展（expand/repeat）给"
        "它对应的 num_heads // num_kv_groups 个查询头",
    ),
    **case_titles(
        {
            "4 heads in 2 K/V groups, d_in=6 < d_out=8, 6 tokens < context_length=8": "4 个头分成 2 个 K/V 组，d_in=6 < d_out=8，6 个 token < context_length=8",
            "6 heads in 3 K/V groups, d_in=14 > d_out=12, 6 tokens = context_length": "6 个头分成 3 个 K/V 组，d_in=14 > d_out=12，6 个 token = context_length",
            "MQA: 4 heads, 1 K/V group, qkv_bias, 5 tokens < context_length=9": "MQA：4 个头，1 个 K/V 组，qkv_bias，5 个 token < context_length=9",
            "MHA as GQA: 2 heads, 2 groups, d_in=3, d_out=4": "把 MHA 当作 GQA：2 个头，2 个组，d_in=3，d_out=4",
        }
    ),
}


EXERCISE = Exercise(
    id="gqa",
    order=7,
    notebook="06_gqa",
    points=3,
    kind="module",
    contract="GroupedQueryAttention",
    args=("d_in", "d_out", "context_length", "dropout", "num_heads", "num_kv_groups", "qkv_bias"),
    cases=cases,
    expected=expected_for(FORM),
    correct=CAUSAL,
    mutants=mutants,
)
