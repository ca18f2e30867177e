"""Exercise 10: ``MultiHeadLatentAttention``, DeepSeek's MLA with its latent cache (c_kv, k_rope), explicit and
absorbed."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from ..heads import TRAINING, visible_dropout_case
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
    case_titles,
    causal_hide,
    given_past_module_case,
    linear,
    module_case,
    module_expected,
    mutant,
    random_params,
    rope,
    softmax_axis_mutants,
    split_heads,
)
from ..registry import Exercise

# ---------------------------------------------------------------------------------------------
# the reference computation, its mistakes as flags


@dataclass(frozen=True)
class MlaVariant:
    cache: str = "latent"  # latent | up_projected | only_new
    rope_on: str = "rope"  # rope | latent (rotate c_kv too) | nope (rotate the up-projected parts too) | none
    # | absorbed_query | absorbed_latents | absorbed_all: in absorbed steps only, the
    # absorbed query q_nope @ W_uk rotated (and c_kv for the scores; for the values too)
    positions: str = "ok"  # ok | restart
    absorb_uk: str = "ok"  # ok | transposed (W_uk read as (in, out)) | per_head_in_out | heads_minor
    absorb_uv: str = "ok"  # | t_reshape (see ``_absorbed``), in absorbed steps
    softmax_dim: int = -1  # -1 keys | -2 queries | 1 heads | 0 batch
    scale: str = "head_dim+rope"  # head_dim+rope | head_dim
    mask: str = "ok"  # ok | top_left
    rope_layout: str = "half"  # as RopeVariant.layout, for q_rope and k_rope
    rope_exponent: str = "ok"  # as RopeVariant.exponent
    own_cache: bool = False  # keeps its own cache and ignores the past_key_value it is handed
    absorb: str = "ok"  # ok | ignored (absorb=True runs the explicit path: per-head K/V materialised)

    @property
    def builds_heads_when_absorbed(self) -> bool:
        """Whether an absorbed call of this variant still builds per-head keys/values."""
        return self.absorb == "ignored" or self.cache == "up_projected" or self.rope_on == "nope"


def _absorbed(weight, nh, hd, dc, how="ok"):
    """W_uk or W_uv (nn.Linear's (num_heads * head_dim, kv_latent_dim)) as per-head blocks (nh, hd, dc), or as
    a learner who reshapes it the wrong way gets them."""
    if how == "transposed":  # the weight's numbers read as if it were stored (in, out)
        return weight.view(dc, nh, hd).permute(1, 2, 0)
    if how == "per_head_in_out":  # heads first, but each head's block read as (in, out)
        return weight.view(nh, dc, hd).transpose(1, 2)
    if how == "heads_minor":  # rows taken as (head_dim, num_heads): head h reads every num_heads-th row
        return weight.view(hd, nh, dc).transpose(0, 1)
    if how == "t_reshape":  # transposed, then reshaped: the reshape reorders the numbers
        return weight.t().reshape(nh, hd, dc)
    return weight.view(nh, hd, dc)


def mla_forward(p, x, cfg, v: MlaVariant, past=None, use_cache=False, absorb=False):
    """MLA with a (c_kv, k_rope) cache, explicit or absorbed; returns (out, present)."""
    nh, d_out, dc, r = cfg["num_heads"], cfg["d_out"], cfg["kv_latent_dim"], cfg["rope_dim"]
    hd = d_out // nh
    absorb = absorb and v.absorb != "ignored"
    b, n, _ = x.shape
    q = linear(p, "W_query", x).view(b, n, nh, hd + r).transpose(1, 2)  # (B, nh, n, hd + r)
    q_nope, q_rope = q[..., :hd], q[..., hd:]
    c_kv, k_rope = linear(p, "W_dkv", x), linear(p, "W_kr", x)  # (B, n, dc), (B, n, r)
    past_len = 0 if past is None else past[0].shape[2 if v.cache == "up_projected" else 1]
    start = 0 if v.positions == "restart" else past_len
    pos = torch.arange(start, start + n)
    rot = (
        (lambda t, ps: t)
        if v.rope_on == "none"
        else (lambda t, ps: rope(t, ps, 10000.0, layout=v.rope_layout, exponent=v.rope_exponent))
    )
    q_rope, k_rope = rot(q_rope, pos), rot(k_rope, pos)
    if v.rope_on == "latent":
        c_kv = rot(c_kv, pos)
    if v.rope_on == "nope":
        q_nope = rot(q_nope, pos)
        if v.cache == "up_projected":
            raise ValueError("the up_projected and nope variants are not combined")
    if v.cache == "up_projected":  # the MHA-style cache: per-head full keys [k_nope ; k_rope] and values
        k_new = torch.cat([split_heads(linear(p, "W_uk", c_kv), nh), k_rope[:, None].expand(b, nh, n, r)], dim=-1)
        v_new = split_heads(linear(p, "W_uv", c_kv), nh)
        keys = k_new if past is None else torch.cat([past[0], k_new], dim=2)  # (B, nh, N, hd + r)
        values = v_new if past is None else torch.cat([past[1], v_new], dim=2)  # (B, nh, N, hd)
        present, num_keys = (keys, values), keys.shape[2]
        scores = torch.cat([q_nope, q_rope], dim=-1) @ keys.transpose(-2, -1)
    else:
        c_all = c_kv if past is None else torch.cat([past[0], c_kv], dim=1)
        kr_all = k_rope if past is None else torch.cat([past[1], k_rope], dim=1)
        present = (c_kv, k_rope) if v.cache == "only_new" else (c_all, kr_all)
        num_keys = c_all.shape[1]
        rope_scores = q_rope @ kr_all[:, None].transpose(-2, -1)
        if absorb and v.rope_on != "nope":
            q_latent = q_nope @ _absorbed(p["W_uk.weight"], nh, hd, dc, v.absorb_uk)  # (B, nh, n, dc)
            c_scored = c_all
            if v.rope_on.startswith("absorbed"):  # the rotation moved into the latent space
                q_latent = rot(q_latent, pos)
                if v.rope_on != "absorbed_query":
                    c_scored = rot(c_all, torch.arange(num_keys))
            scores = q_latent @ c_scored[:, None].transpose(-2, -1) + rope_scores
        else:
            k_nope = split_heads(linear(p, "W_uk", c_all), nh)
            if v.rope_on == "nope":
                k_nope = rot(k_nope, torch.arange(num_keys))
            scores = q_nope @ k_nope.transpose(-2, -1) + rope_scores
        values = split_heads(linear(p, "W_uv", c_all), nh)
    scale = math.sqrt(hd + r) if v.scale == "head_dim+rope" else math.sqrt(hd)
    scores = (scores / scale).masked_fill(causal_hide(n, num_keys, v.mask), float("-inf"))
    weights = torch.softmax(scores, dim=v.softmax_dim)
    if absorb and v.cache != "up_projected" and v.rope_on != "nope":
        w_uv = _absorbed(p["W_uv.weight"], nh, hd, dc, v.absorb_uv)
        c_values = c_scored if v.rope_on == "absorbed_all" else c_all
        ctx = (weights @ c_values[:, None]) @ w_uv.transpose(-2, -1)  # (B, nh, n, dc) -> (B, nh, n, hd)
    else:
        ctx = weights @ values
    out = linear(p, "out_proj", ctx.transpose(1, 2).reshape(b, n, d_out))
    return out, (present if use_cache else None)


# ---------------------------------------------------------------------------------------------
# cases


def mla_param_shapes(cfg) -> dict:
    """name -> shape of every parameter of MLA (nn.Linear weights are (out, in))."""
    d_in, d_out = cfg["d_in"], cfg["d_out"]
    nh, dc, r = cfg["num_heads"], cfg["kv_latent_dim"], cfg["rope_dim"]
    return {
        "W_query.weight": (nh * (d_out // nh + r), d_in),
        "W_dkv.weight": (dc, d_in),
        "W_kr.weight": (r, d_in),
        "W_uk.weight": (d_out, dc),
        "W_uv.weight": (d_out, dc),
        "out_proj.weight": (d_out, d_out),
        "out_proj.bias": (d_out,),
    }


def _case(name, g, x_shape, steps, **ctor):
    return module_case(mla_param_shapes, ("c_kv", "k_rope"), name, g, x_shape, steps, **ctor)


def _training_case(g, batch, tokens, **ctor):
    """The shared case "training mode, dropout 0.5" (``heads.visible_dropout_case``), absorbed: token t's input
    is the one-hot e_t, W_dkv keeps it as the latent c_kv = e_t and each head's block of W_uv makes its values e_t,
    so every element of a head's context vector is one attention weight (the keys, through W_uk and W_kr, stay
    random)."""
    ctor = {**ctor, "dropout": 0.5}
    d_in, d_out, nh, dc = ctor["d_in"], ctor["d_out"], ctor["num_heads"], ctor["kv_latent_dim"]
    hd = d_out // nh
    assert tokens <= min(d_in, dc, hd), "one-hot tokens need room in the input, the latent and each head"
    params = random_params(mla_param_shapes(ctor), g)
    params["W_dkv.weight"] = torch.eye(dc, d_in)
    params["W_uv.weight"] = torch.eye(hd, dc).repeat(nh, 1)  # (nh * hd, dc): head h's block is the identity
    x = torch.eye(tokens, d_in).expand(batch, tokens, d_in).clone()
    case = visible_dropout_case(TRAINING, g, ctor, params, x, tokens, use_cache=False, absorb=True)
    case.meta["present_names"] = ("c_kv", "k_rope")
    return case


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
        _training_case(g, 4, 4, d_in=6, d_out=8, context_length=6, num_heads=2, kv_latent_dim=4, rope_dim=2),
    ]


def expected(case: Case, variant: MlaVariant) -> dict:
    return module_expected(mla_forward, case, variant)


M_MLA_UP = Mistake("mla_cache_up_projected")
M_MLA_ROPE_LATENT = Mistake("mla_rope_on_compressed_key")
M_MLA_ROPE_NOPE = Mistake("mla_rope_on_nope")
M_MLA_TRANSPOSE = Mistake("mla_absorb_wrong_transpose")
M_MLA_PER_HEAD_IN_OUT = Mistake("mla_absorb_wrong_transpose", text="mla_absorb_per_head_in_out")
M_MLA_HEADS_MINOR = Mistake("mla_absorb_wrong_transpose", text="mla_absorb_heads_minor")
M_MLA_T_RESHAPE = Mistake("mla_absorb_wrong_transpose", text="mla_absorb_t_reshape")
M_MLA_ROPE_ABSORBED = Mistake("mla_rope_on_absorbed_latents")
M_MLA_SCALE = Mistake("mla_scale_without_rope")
M_MLA_NO_ROPE = Mistake("rope_missing", text="rope_missing_mla")
M_ONLY_NEW_LATENT = Mistake("cache_only_new", text="cache_only_new_mla")
M_MLA_ABSORB_IGNORED = Mistake("mla_absorb_ignored")


def mutants() -> list:
    """Known-wrong variants, most specific first."""
    ok = MlaVariant()
    return (
        [
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
            mutant(M_ONLY_NEW_LATENT, replace(ok, cache="only_new")),
            mutant(M_IGNORES_PAST, replace(ok, own_cache=True), outputs_only=True),
            mutant(M_TOP_LEFT_CHUNK, replace(ok, mask="top_left")),
        ]
        + [  # the absorbed weights split into heads the wrong way, in W_uk, W_uv or both
            mutant(key, replace(ok, absorb_uk=uk, absorb_uv=uv), paired=False)
            for key, how in (
                (M_MLA_PER_HEAD_IN_OUT, "per_head_in_out"),
                (M_MLA_HEADS_MINOR, "heads_minor"),
                (M_MLA_T_RESHAPE, "t_reshape"),
            )
            for uk, uv in ((how, ok.absorb_uv), (ok.absorb_uk, how), (how, how))
        ]
        + [
            mutant(M_MLA_ROPE_ABSORBED, replace(ok, rope_on="absorbed_latents"), paired=False),
            mutant(M_MLA_ROPE_ABSORBED, replace(ok, rope_on="absorbed_all"), paired=False),
            mutant(M_MLA_ROPE_ABSORBED, replace(ok, rope_on="absorbed_query"), paired=False),
            mutant(M_ROPE_EXPONENT, replace(ok, rope_exponent="shifted"), paired=False),
            mutant(M_ROPE_EXPONENT, replace(ok, rope_exponent="odd"), paired=False),
            mutant(M_ROPE_NO_TWO, replace(ok, rope_exponent="no_two"), paired=False),
            mutant(M_ROPE_HALF_ON_PAIRS, replace(ok, rope_layout="half_angles_pairs"), paired=False),
            mutant(M_ROPE_PAIRS_ON_HALF, replace(ok, rope_layout="pair_angles_half"), paired=False),
        ]
        + softmax_axis_mutants(ok)
    )


TEXTS: dict[str, tuple[str, str]] = {
    "mutant.mla_absorb_per_head_in_out": (
        "W_uk/W_uv split into heads as view(num_heads, kv_latent_dim, head_dim): "
        "nn.Linear stores the weight as (out = num_heads * head_dim, in = "
        "kv_latent_dim), so head h's block is weight.view(num_heads, head_dim, "
        "kv_latent_dim)[h]",
        "W_uk/W_uv 按 view(num_heads, kv_latent_dim, head_dim) 拆成了各个头："
        "nn.Linear 把权重存成 (out = num_heads * head_dim, in = kv_latent_dim)，"
        "所以头 h 的那一块是 weight.view(num_heads, head_dim, kv_latent_dim)[h]",
    ),
    "mutant.mla_absorb_heads_minor": (
        "W_uk/W_uv split into heads as view(head_dim, num_heads, kv_latent_dim): head h "
        "owns the head_dim consecutive rows from h * head_dim, so its block is "
        "weight.view(num_heads, head_dim, kv_latent_dim)[h]",
        "W_uk/W_uv 按 view(head_dim, num_heads, kv_latent_dim) 拆成了各个头：头 h 占的是"
        "从第 h * head_dim 行起连续的 head_dim 行，所以它那一块是 weight.view(num_heads, "
        "head_dim, kv_latent_dim)[h]",
    ),
    "mutant.mla_absorb_t_reshape": (
        "W_uk/W_uv transposed, then reshaped (weight.T.reshape(num_heads, head_dim, "
        "kv_latent_dim)): a reshape after a transpose reorders the numbers; split first, "
        "weight.view(num_heads, head_dim, kv_latent_dim), then transpose the last two "
        "axes where you need (kv_latent_dim, head_dim)",
        "W_uk/W_uv 先转置再 reshape（weight.T.reshape(num_heads, head_dim, "
        "kv_latent_dim)）：转置之后再 reshape 会把数的顺序打乱；应当先拆头，"
        "weight.view(num_heads, head_dim, kv_latent_dim)，需要 (kv_latent_dim, head_dim) "
        "时再转置最后两维",
    ),
    "mutant.mla_rope_on_absorbed_latents": (
        "RoPE rotated into the absorbed latents: with absorb=True only q_rope and "
        "k_rope rotate, as without; rotating q_nope @ W_uk (or c_kv) in the "
        "latent space changes the scores, and absorb=True must give the same "
        "output as absorb=False",
        "在矩阵吸收后的潜在空间里也做了 RoPE：absorb=True 时和不吸收时一样，只旋转 "
        "q_rope 和 k_rope；在潜在空间里旋转 q_nope @ W_uk（或 c_kv）会改变注意力"
        "分数，而 absorb=True 的输出必须和 absorb=False 的相同",
    ),
    "mutant.mla_absorb_ignored": (
        "absorb=True runs the explicit path: per-head keys or values of every cached "
        "token are built (W_uk(c_kv) or W_uv(c_kv)); absorbed, the query becomes q_h @ "
        "W_uk_h and attends to c_kv directly, and the weights times c_kv go through W_uv_h "
        "afterwards",
        "absorb=True 时走的仍是显式路径：为每个缓存的 token 构造了每个头的键或值"
        "（W_uk(c_kv) 或 W_uv(c_kv)）；矩阵吸收时，查询变成 q_h @ W_uk_h，直接对 c_kv "
        "做注意力，注意力权重乘 c_kv 之后再经过 W_uv_h",
    ),
    "mutant.mla_cache_up_projected": (
        "the cache holds up-projected per-head keys/values: MLA caches only the latent "
        "c_kv (b, n, kv_latent_dim) and the shared rotated k_rope (b, n, rope_dim)",
        "缓存里存的是上投影后每个头的键/值：MLA 只缓存潜在向量 c_kv (b, n, kv_latent_dim) "
        "和各头共享、已旋转的 k_rope (b, n, rope_dim)",
    ),
    "mutant.mla_rope_on_compressed_key": (
        "RoPE applied to the compressed latent c_kv: rotate only the decoupled "
        "q_rope and k_rope; c_kv stays position-free so that W_uk can be absorbed",
        "对压缩后的潜在向量 c_kv 做了 RoPE：只应旋转解耦出来的 q_rope 和 k_rope；c_kv "
        "不能带位置信息，W_uk 才能被矩阵吸收",
    ),
    "mutant.mla_rope_on_nope": (
        "RoPE applied to the up-projected (nope) queries/keys: only the rope_dim parts rotate",
        "对上投影得到的（nope）查询/键也做了 RoPE：只有 rope_dim 那部分需要旋转",
    ),
    "mutant.mla_absorb_wrong_transpose": (
        "absorbed with the wrong transpose: nn.Linear stores W_uk and W_uv as (out = "
        "num_heads * head_dim, in = kv_latent_dim), so head h's block is "
        "weight.view(num_heads, head_dim, kv_latent_dim)[h], and the absorbed query "
        "is q_h @ W_uk_h",
        "矩阵吸收时转置错了：nn.Linear 把 W_uk 和 W_uv 存成 (out = num_heads * "
        "head_dim, in = kv_latent_dim)，所以头 h 的那一块是 weight.view(num_heads, "
        "head_dim, kv_latent_dim)[h]，吸收后的查询是 q_h @ W_uk_h",
    ),
    "mutant.mla_scale_without_rope": (
        "scores scaled by 1/sqrt(head_dim): a head's query and key have head_dim + "
        "rope_dim features, scale by 1/sqrt(head_dim + rope_dim)",
        "注意力分数乘的是 1/sqrt(head_dim)：每个头的查询和键有 head_dim + rope_dim 个特征，"
        "应当乘以 1/sqrt(head_dim + rope_dim)",
    ),
    "mutant.rope_missing_mla": (
        "no rotation: apply RoPE to q_rope and k_rope",
        "没有做旋转：要对 q_rope 和 k_rope 应用 RoPE",
    ),
    "mutant.cache_only_new_mla": (
        "present holds only the new tokens: return the concatenated past + new c_kv and k_rope",
        "present 里只有新 token 的部分：应当返回过去与新 token 拼接后的 c_kv 和 k_rope",
    ),
    **case_titles(
        {
            "2 heads of 4, d_in=6, latent 6, rope_dim 2: a chunk of 3 explicit, then 2 and 1 absorbed, then all 6 without "
            "the cache": "2 个头，每个宽 4，d_in=6，潜在维度 6，rope_dim 2：先显式计算 3 个 token，再用矩阵吸收依次算 2 个和 "
            "1 个，最后不带缓存算全部 6 个",
            "3 heads of 2, d_in=10 > d_out=6, latent 4, rope_dim 4: a prompt of 2 absorbed, then one token at a time, "
            "explicit then absorbed": "3 个头，每个宽 2，d_in=10 > d_out=6，潜在维度 4，rope_dim 4：先用矩阵吸收算 2 个 token "
            "的提示，再一次一个 token，先显式、后吸收",
            "4 heads of 4, d_in=8, latent 10, rope_dim 2: 5 tokens absorbed, no cache": "4 个头，每个宽 4，d_in=8，潜在维度 10，rope_dim 2：用矩阵吸收算 5 个 token，不带缓存",
            "a past_key_value the module did not produce (5 tokens of another prompt), then 2 new tokens explicit and 1 "
            "absorbed": "一个不是由该模块产生的 past_key_value（另一段提示的 5 个 token），再显式计算 2 个新 token，"
            "然后用矩阵吸收算 1 个",
            "8 heads of 8, latent 4, rope_dim 2: one token at a time absorbed, after a given past of 40 tokens (the "
            "absorbed path builds no per-head keys or values)": "8 个头，每个宽 8，潜在维度 4，rope_dim 2：在给定的 40 个 "
            "token 的 past 之后，用矩阵吸收一次算一个 token（吸收路径"
            "不构造每个头的键或值）",
        }
    ),
}


EXERCISE = Exercise(
    id="mla",
    order=10,
    notebook="10_mla",
    points=3,
    kind="module",
    contract="MultiHeadLatentAttention",
    args=("d_in", "d_out", "context_length", "dropout", "num_heads", "kv_latent_dim", "rope_dim"),
    cases=cases,
    expected=expected,
    correct=MlaVariant(),
    mutants=mutants,
)
