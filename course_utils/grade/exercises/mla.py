"""Exercise 10: ``MultiHeadLatentAttention``, DeepSeek's MLA with its latent cache (c_kv, k_rope), explicit and
absorbed."""

from __future__ import annotations

from dataclasses import replace

from ..registry import Exercise
from ..specs_beyond import (
    M_IGNORES_PAST,
    M_MLA_ABSORB_IGNORED,
    M_MLA_HEADS_MINOR,
    M_MLA_NO_ROPE,
    M_MLA_PER_HEAD_IN_OUT,
    M_MLA_ROPE_ABSORBED,
    M_MLA_ROPE_LATENT,
    M_MLA_ROPE_NOPE,
    M_MLA_SCALE,
    M_MLA_T_RESHAPE,
    M_MLA_TRANSPOSE,
    M_MLA_UP,
    M_ONLY_NEW,
    M_ROPE_EXPONENT,
    M_ROPE_HALF_ON_PAIRS,
    M_ROPE_NO_TWO,
    M_ROPE_PAIRS_ON_HALF,
    M_ROPE_RESTART,
    M_TOP_LEFT,
    MlaVariant,
    given_past_module_case,
    mla_forward,
    mla_param_shapes,
    module_case,
    module_expected,
    mutant,
    softmax_axis_mutants,
)
from ..types import Case


def _case(name, g, x_shape, steps, **ctor):
    return module_case(mla_param_shapes, ("c_kv", "k_rope"), name, g, x_shape, steps, **ctor)


def cases(g) -> list[Case]:
    """The cases, drawn from ``g`` (seeded by the grader's secret seed)."""
    return [
        _case(
            "2 heads of 4, d_in=6, latent 6, rope_dim 2: a chunk of 3 explicit, then 2 and 1 "
            "absorbed, then all 6 without the cache",
            g,
            (2, 6, 6),
            [
                (0, 3, True, False, False),
                (3, 5, True, True, True),
                (5, 6, True, True, True),
                (0, 6, False, False, False),
            ],
            d_in=6,
            d_out=8,
            context_length=8,
            dropout=0.5,
            num_heads=2,
            kv_latent_dim=6,
            rope_dim=2,
        ),
        _case(
            "3 heads of 2, d_in=10 > d_out=6, latent 4, rope_dim 4: a prompt of 2 absorbed, "
            "then one token at a time, explicit then absorbed",
            g,
            (3, 4, 10),
            [(0, 2, True, False, True), (2, 3, True, True, False), (3, 4, True, True, True)],
            d_in=10,
            d_out=6,
            context_length=5,
            dropout=0.0,
            num_heads=3,
            kv_latent_dim=4,
            rope_dim=4,
        ),
        _case(
            "4 heads of 4, d_in=8, latent 10, rope_dim 2: 5 tokens absorbed, no cache",
            g,
            (2, 5, 8),
            [(0, 5, False, False, True)],
            d_in=8,
            d_out=16,
            context_length=7,
            dropout=0.1,
            num_heads=4,
            kv_latent_dim=10,
            rope_dim=2,
        ),
        given_past_module_case(
            mla_forward,
            mla_param_shapes,
            ("c_kv", "k_rope"),
            "a past_key_value the module did not produce (5 tokens of another prompt), then 2 new tokens "
            "explicit and 1 absorbed",
            g,
            2,
            5,
            [(2, False), (1, True)],
            MlaVariant(),
            d_in=6,
            d_out=8,
            context_length=9,
            dropout=0.0,
            num_heads=2,
            kv_latent_dim=4,
            rope_dim=2,
        ),
        # per-head keys of all 41-42 tokens (3 x 42 x 64 elements) outweigh every tensor the absorbed path needs
        # (the latents, the scores, out_proj's 64 x 64 weight): building them is the explicit path
        given_past_module_case(
            mla_forward,
            mla_param_shapes,
            ("c_kv", "k_rope"),
            "8 heads of 8, latent 4, rope_dim 2: one token at a time absorbed, after a given past of 40 tokens "
            "(the absorbed path builds no per-head keys or values)",
            g,
            3,
            40,
            [(1, True), (1, True)],
            MlaVariant(),
            absorbed_bound=True,
            d_in=8,
            d_out=64,
            context_length=48,
            dropout=0.0,
            num_heads=8,
            kv_latent_dim=4,
            rope_dim=2,
        ),
    ]


def expected(case: Case, variant: MlaVariant) -> dict:
    return module_expected(mla_forward, case, variant)


def mutants() -> list:
    """Known-wrong variants, most specific first."""
    ok = MlaVariant()
    return [
        mutant(M_MLA_ABSORB_IGNORED, replace(ok, absorb="ignored")),
        mutant(M_MLA_UP, replace(ok, cache="up_projected")),
        mutant(M_MLA_ROPE_LATENT, replace(ok, rope_on="latent")),
        mutant(M_MLA_ROPE_NOPE, replace(ok, rope_on="nope")),
        mutant(M_MLA_TRANSPOSE, replace(ok, absorb_uk="transposed")),
        mutant(M_MLA_TRANSPOSE, replace(ok, absorb_uv="transposed")),
        mutant(M_MLA_TRANSPOSE, replace(ok, absorb_uk="transposed", absorb_uv="transposed")),
        mutant(M_MLA_SCALE, replace(ok, scale="head_dim")),
        mutant(M_MLA_NO_ROPE, replace(ok, rope_on="none")),
        mutant(M_ROPE_RESTART, replace(ok, positions="restart")),
        mutant(M_ONLY_NEW, replace(ok, cache="only_new")),
        mutant(M_IGNORES_PAST, replace(ok, own_cache=True), outputs_only=True),
        mutant(M_TOP_LEFT, replace(ok, mask="top_left")),
    ] + [  # the absorbed weights split into heads the wrong way, in W_uk, W_uv or both
        mutant(key, replace(ok, **{w: how for w in which}), paired=False)
        for key, how in ((M_MLA_PER_HEAD_IN_OUT, "per_head_in_out"), (M_MLA_HEADS_MINOR, "heads_minor"),
                         (M_MLA_T_RESHAPE, "t_reshape"))
        for which in (("absorb_uk",), ("absorb_uv",), ("absorb_uk", "absorb_uv"))
    ] + [
        mutant(M_MLA_ROPE_ABSORBED, replace(ok, rope_on="absorbed_latents"), paired=False),
        mutant(M_MLA_ROPE_ABSORBED, replace(ok, rope_on="absorbed_all"), paired=False),
        mutant(M_MLA_ROPE_ABSORBED, replace(ok, rope_on="absorbed_query"), paired=False),
        mutant(M_ROPE_EXPONENT, replace(ok, rope_exponent="shifted"), paired=False),
        mutant(M_ROPE_EXPONENT, replace(ok, rope_exponent="odd"), paired=False),
        mutant(M_ROPE_NO_TWO, replace(ok, rope_exponent="no_two"), paired=False),
        mutant(M_ROPE_HALF_ON_PAIRS, replace(ok, rope_layout="half_angles_pairs"), paired=False),
        mutant(M_ROPE_PAIRS_ON_HALF, replace(ok, rope_layout="pair_angles_half"), paired=False),
    ] + softmax_axis_mutants(ok)


EXERCISE = Exercise(
    id="mla",
    order=10,
    notebook="10_mla",
    points=3,
    kind="class",
    contract="MultiHeadLatentAttention",
    args=("d_in", "d_out", "context_length", "dropout", "num_heads", "kv_latent_dim", "rope_dim"),
    cases=cases,
    expected=expected,
    correct=MlaVariant(),
    mutants=mutants,
)
