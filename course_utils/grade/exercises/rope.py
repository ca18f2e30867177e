"""Exercise 8: ``RoPEAttention``, rotary positions with a KV cache (keys cached rotated)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from ..heads import training_case
from ..kinds.module import Case
from ..kit import (
    M_IGNORES_PAST,
    M_ROPE_EXPONENT,
    M_ROPE_HALF_ON_PAIRS,
    M_ROPE_NO_TWO,
    M_ROPE_PAIRS_ON_HALF,
    M_ROPE_RESTART,
    M_TOP_LEFT_CHUNK,
    Mistake,
    attend,
    case_titles,
    causal_hide,
    given_past_module_case,
    linear,
    module_case,
    module_expected,
    mutant,
    projection_shapes,
    rope,
    softmax_axis_mutants,
    split_heads,
)
from ..registry import Exercise

# ---------------------------------------------------------------------------------------------
# the reference computation, its mistakes as flags


@dataclass(frozen=True)
class RopeVariant:
    positions: str = "ok"  # ok | restart (every call starts at 0)
    rotate_v: bool = False
    layout: str = "half"  # half | interleaved | half_angles_pairs | pair_angles_half (one layout's angles,
    # the other's pairs)
    exponent: str = "ok"  # ok | shifted (theta_i = base^(-2(i+1)/d)) | odd (base^(-(2i+1)/d))
    # | no_two (base^(-i/d))
    softmax_dim: int = -1  # -1 keys | -2 queries | 1 heads | 0 batch
    freq_dim: str = "head_dim"  # head_dim | d_out
    cache: str = "before"  # before | after_double (rotate the concatenated keys) | after_raw (cache unrotated)
    rope: bool = True
    direction: int = 1  # 1 | -1 (rotated the wrong way)
    mask: str = "ok"  # ok | top_left
    own_cache: bool = False  # keeps its own cache and ignores the past_key_value it is handed


def rope_forward(p, x, cfg, v: RopeVariant, past=None, use_cache=False):
    """RoPE attention with a (keys, values) cache; returns (out, present)."""
    nh, d_out, base = cfg["num_heads"], cfg["d_out"], cfg["rope_base"]
    b, n, _ = x.shape
    q, k, val = (
        split_heads(linear(p, "W_query", x), nh),
        split_heads(linear(p, "W_key", x), nh),
        split_heads(linear(p, "W_value", x), nh),
    )
    past_len = 0 if past is None else past[0].shape[2]
    start = 0 if v.positions == "restart" else past_len
    positions = torch.arange(start, start + n)
    freq_dim = d_out if v.freq_dim == "d_out" else None

    def rotated(t: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return rope(t, pos, base, layout=v.layout, freq_dim=freq_dim, direction=v.direction, exponent=v.exponent)

    rot = rotated if v.rope else (lambda t, pos: t)
    q = rot(q, positions)
    if v.rotate_v:
        val = rot(val, positions)
    if v.cache == "before":
        k = rot(k, positions)
        k_all = k if past is None else torch.cat([past[0], k], dim=2)
        k_used = k_all
    else:  # the cache is appended first, then all keys are rotated to 0 .. n_all - 1
        k_all = k if past is None else torch.cat([past[0], k], dim=2)
        k_used = rot(k_all, torch.arange(k_all.shape[2]))
        if v.cache == "after_double":
            k_all = k_used  # the rotated keys go back into the cache, to be rotated again next call
    v_all = val if past is None else torch.cat([past[1], val], dim=2)
    hide = causal_hide(n, k_all.shape[2], v.mask)
    ctx = attend(q, k_used, v_all, math.sqrt(d_out // nh), hide, v.softmax_dim)
    out = linear(p, "out_proj", ctx.transpose(1, 2).reshape(b, n, d_out))
    return out, ((k_all, v_all) if use_cache else None)


# ---------------------------------------------------------------------------------------------
# cases


def _case(name, g, x_shape, steps, **ctor):
    return module_case(projection_shapes, ("keys", "values"), name, g, x_shape, steps, **ctor)


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
            projection_shapes,
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
        # dropout made visible (heads.train_case): each head's values one-hot, so the weights are read back
        training_case("cached", g, 4, 5, d_in=6, d_out=12, context_length=7, num_heads=2, rope_base=10000.0),
    ]


def expected(case: Case, variant: RopeVariant) -> dict:
    return module_expected(rope_forward, case, variant)


M_ROPE_V = Mistake("rope_on_values")
M_ROPE_PAIRS = Mistake("rope_interleaved_pairs")
M_ROPE_D_MODEL = Mistake("rope_freq_d_model")
M_ROPE_AFTER = Mistake("rope_after_cache")
M_ROPE_MISSING = Mistake("rope_missing")
M_ROPE_DIRECTION = Mistake("rope_wrong_direction")


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
        mutant(M_TOP_LEFT_CHUNK, replace(ok, mask="top_left")),
        mutant(M_ROPE_EXPONENT, replace(ok, exponent="shifted"), paired=False),
        mutant(M_ROPE_EXPONENT, replace(ok, exponent="odd"), paired=False),
        mutant(M_ROPE_NO_TWO, replace(ok, exponent="no_two"), paired=False),
        mutant(M_ROPE_HALF_ON_PAIRS, replace(ok, layout="half_angles_pairs"), paired=False),
        mutant(M_ROPE_PAIRS_ON_HALF, replace(ok, layout="pair_angles_half"), paired=False),
    ] + softmax_axis_mutants(ok)


TEXTS: dict[str, tuple[str, str]] = {
    "mutant.rope_on_values": (
        "values rotated too: RoPE turns only the queries and the keys (positions belong in the "
        "scores); leave V as it is",
        "值也被旋转了：RoPE 只旋转查询和键（位置信息应当体现在注意力分数里）；V 保持不变",
    ),
    "mutant.rope_interleaved_pairs": (
        "features paired as (2i, 2i + 1), the interleaved (GPT-J) layout: the "
        "contract's rotate-half layout pairs feature i with i + head_dim / 2, x * cos + "
        "rotate_half(x) * sin with rotate_half(x) = cat(-x2, x1) and cos/sin = "
        "cat(freqs, freqs)",
        "特征按 (2i, 2i + 1) 两两配对，这是交错（GPT-J）布局：接口约定用的是 rotate-half "
        "布局，把第 i 个特征和第 i + head_dim / 2 个配对，即 x * cos + rotate_half(x) * "
        "sin，其中 rotate_half(x) = cat(-x2, x1)，cos/sin = cat(freqs, freqs)",
    ),
    "mutant.rope_freq_d_model": (
        "RoPE frequencies computed from d_out (d_model) instead of head_dim: theta_i = base "
        "** (-2i / head_dim), since RoPE rotates each head's features",
        "RoPE 的频率是按 d_out（d_model）算的，应当按 head_dim 算：theta_i = base ** "
        "(-2i / head_dim)，因为 RoPE 旋转的是每个头自己的特征",
    ),
    "mutant.rope_after_cache": (
        "RoPE applied after the cache: rotate the new keys at their positions BEFORE "
        "appending them; present holds rotated keys, and cached keys are never rotated again",
        "RoPE 加在了缓存之后：应当先把新的键按各自的位置旋转，再追加进缓存；present 里存的是"
        "旋转过的键，缓存里的键不会再被旋转",
    ),
    "mutant.rope_missing": ("no rotation: apply RoPE to the queries and keys", "没有做旋转：要对查询和键应用 RoPE"),
    "mutant.rope_wrong_direction": (
        "rotated the wrong way: rotate_half(x) = cat(-x2, x1), and the rotation is x * cos + rotate_half(x) * sin",
        "旋转方向反了：rotate_half(x) = cat(-x2, x1)，旋转是 x * cos + rotate_half(x) * sin",
    ),
    **case_titles(
        {
            "3 heads of 4, d_in=4 < d_out=12, base 10000: chunks of 3, 2, 1 tokens with the cache, then the whole sequence "
            "without": "3 个头，每个宽 4，d_in=4 < d_out=12，base 10000：带缓存依次输入 3、2、1 个 token，再不带缓存输入整个序列",
            "2 heads of 4, d_in=10 > d_out=8, qkv_bias, base 100: a prompt of 2, then one token at a time": "2 个头，每个宽 4，d_in=10 > d_out=8，qkv_bias，base 100：先输入 2 个 token 的提示，再一次一个 token",
            "4 heads of 6, d_in=6, d_out=24, base 500000: a prompt of 4, then a chunk of 3": "4 个头，每个宽 6，d_in=6，d_out=24，base 500000：先输入 4 个 token 的提示，再输入一段 3 个 token",
            "a past_key_value the module did not produce (4 tokens of another prompt, keys rotated), then 2 and 1 new "
            "tokens": "一个不是由该模块产生的 past_key_value（另一段提示的 4 个 token，键已旋转），"
            "再依次输入 2 个和 1 个新 token",
        }
    ),
}


EXERCISE = Exercise(
    id="rope",
    order=8,
    notebook="08_rope",
    points=3,
    kind="module",
    contract="RoPEAttention",
    args=("d_in", "d_out", "context_length", "dropout", "num_heads", "qkv_bias", "rope_base"),
    cases=cases,
    expected=expected,
    correct=RopeVariant(),
    mutants=mutants,
)
