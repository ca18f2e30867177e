"""The exercises: contracts, the grader's cases, and one parameterized reference forward with its mutants.

Every known misconception is a ``Variant`` of the same functional forward (one home for the logic);
the grader runs the learner's module and each variant on the same parameters and inputs, and names
the variant whose outputs the learner's reproduce.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F

EXERCISES = ("self_attention", "causal", "wrapper", "mha", "mha_interview", "kv_cache", "gqa")

# the learner-defined class each exercise looks up, and its constructor arguments (in order)
CONTRACT_CLASS = {
    "self_attention": "SelfAttention_v2",
    "causal": "CausalAttention",
    "wrapper": "MultiHeadAttentionWrapper",
    "mha": "MultiHeadAttention",
    "mha_interview": "MultiHeadAttention",
    "kv_cache": "CachedMultiHeadAttention",
    "gqa": "GroupedQueryAttention",
}
CONTRACT_ARGS = {
    "self_attention": ("d_in", "d_out", "qkv_bias"),
    "causal": ("d_in", "d_out", "context_length", "dropout", "qkv_bias"),
    "wrapper": ("d_in", "d_out", "context_length", "dropout", "num_heads", "qkv_bias"),
    "mha": ("d_in", "d_out", "context_length", "dropout", "num_heads", "qkv_bias"),
    "mha_interview": ("d_in", "d_out", "context_length", "dropout", "num_heads", "qkv_bias"),
    "kv_cache": ("d_in", "d_out", "context_length", "dropout", "num_heads", "qkv_bias"),
    "gqa": ("d_in", "d_out", "context_length", "dropout", "num_heads", "num_kv_groups", "qkv_bias"),
}
INTERVIEW = {"mha_interview"}


@dataclass(frozen=True)
class Variant:
    """Flags of the reference forward; the defaults are the correct computation."""
    scale: str = "head_dim"     # head_dim | d_out | d_in | none | no_sqrt
    softmax_dim: int = -1       # -1 keys (right) | -2 queries | 1 heads
    mask: str = "causal"        # causal | none | inverted | zero_fill | after_softmax | diagonal | top_left
                                # | unsliced | square_slice | first_chunk_only
    fill: float = float("-inf")  # value written into hidden scores
    split: str = "ok"           # ok | no_transpose
    merge: str = "ok"           # ok | no_transpose
    out_proj: bool = True
    keys_from: str = "W_key"    # which projection makes the keys
    values_from: str = "W_value"
    kv_layout: str = "interleave"  # interleave | tile | group0
    cache: str = "ok"           # ok | only_new | not_updated | wrong_axis
    wrapper: str = "ok"         # ok | shared | sum | cat_tokens


@dataclass(frozen=True)
class Mutant:
    key: str
    message: str
    variant: Variant


@dataclass
class Case:
    """One configuration: constructor arguments, parameters (by name), input and the calls to make."""
    name: str
    ctor: dict
    params: dict
    x: torch.Tensor
    # kv_cache: list of (start, end, use_cache, pass_past); others: None (one plain call on x)
    steps: list | None = None
    meta: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# the reference forward


def _lin(p, name, x):
    return F.linear(x, p[name + ".weight"], p.get(name + ".bias"))


def _hide_mask(v: Variant, num_q, num_k, context_length, past_len):
    """(num_q, num_k) bool, True = hide, or a full unsliced mask for the 'unsliced' mistake."""
    if v.mask == "unsliced":
        return torch.triu(torch.ones(context_length, context_length, dtype=torch.bool), 1)
    if v.mask == "square_slice":
        return torch.triu(torch.ones(num_q, num_q, dtype=torch.bool), 1)
    if v.mask == "first_chunk_only" and past_len > 0:
        return None
    offset = 0 if v.mask == "top_left" else num_k - num_q  # queries are the last positions
    diag = offset if v.mask == "diagonal" else offset + 1
    hide = torch.triu(torch.ones(num_q, num_k, dtype=torch.bool), diag)
    return ~hide if v.mask == "inverted" else hide


def _core(q, k, val, v: Variant, cfg, past_len):
    """Scaled dot-product attention with the variant's mistakes. q (B, h, Sq, hd), k/val (B, h, Sk, hd)."""
    hd = q.shape[-1]
    scale = {"head_dim": math.sqrt(hd), "d_out": math.sqrt(cfg["d_out"]), "d_in": math.sqrt(cfg["d_in"]),
             "none": 1.0, "no_sqrt": float(hd)}[v.scale]
    scores = q @ k.transpose(-2, -1) / scale  # (B, h, Sq, Sk)
    hide = None if v.mask == "none" else _hide_mask(v, q.shape[-2], k.shape[-2], cfg.get("context_length"), past_len)
    if hide is not None and v.mask != "after_softmax":
        scores = scores.masked_fill(hide, 0.0 if v.mask == "zero_fill" else v.fill)
    w = torch.softmax(scores, dim=v.softmax_dim)
    if hide is not None and v.mask == "after_softmax":
        w = w.masked_fill(hide, 0.0)
    return w @ val


def _split(t, heads, v: Variant):
    b, n, width = t.shape
    if v.split == "no_transpose":
        return t.reshape(b, heads, n, width // heads)
    return t.view(b, n, heads, width // heads).transpose(1, 2)  # (B, heads, T, hd)


def _single_head(p, x, cfg, v: Variant, prefix=""):
    """Single-head attention (self_attention, causal, one wrapper head): (..., T, d_in) -> (..., T, d_out)."""
    q = _lin(p, prefix + "W_query", x)
    k = _lin(p, prefix + v.keys_from, x)
    val = _lin(p, prefix + v.values_from, x)
    return _core(q, k, val, v, cfg, 0)


def reference_forward(exercise, p, x, cfg, v: Variant = Variant(), past=None, use_cache=False):
    """The exercise's computation on parameters ``p`` (name -> tensor); kv_cache returns (out, present)."""
    if exercise in ("self_attention", "causal"):
        return _single_head(p, x, cfg, v)
    if exercise == "wrapper":
        nh = cfg["num_heads"]
        heads = [_single_head(p, x, cfg, v, "heads.0." if v.wrapper == "shared" else f"heads.{i}.")
                 for i in range(nh)]
        if v.wrapper == "sum":
            return torch.stack(heads).sum(0)
        return torch.cat(heads, dim=1 if v.wrapper == "cat_tokens" else -1)
    # mha, mha_interview, kv_cache, gqa
    nh = cfg["num_heads"]
    ng = cfg.get("num_kv_groups", nh)
    b, n, _ = x.shape
    q = _split(_lin(p, "W_query", x), nh, v)  # (B, nh, T, hd)
    k = _split(_lin(p, v.keys_from, x), ng, v)  # (B, ng, T, hd)
    val = _split(_lin(p, v.values_from, x), ng, v)
    present, past_len = None, 0
    if past is not None:
        past_len = past[0].shape[2]
        dim = 1 if v.cache == "wrong_axis" else 2
        k_all, v_all = torch.cat([past[0], k], dim=dim), torch.cat([past[1], val], dim=dim)
    else:
        k_all, v_all = k, val
    if use_cache:
        present = {"ok": (k_all, v_all), "wrong_axis": (k_all, v_all), "only_new": (k, val),
                   "not_updated": past if past is not None else (k, val)}[v.cache]
    group = nh // ng
    if v.kv_layout == "group0":  # every query head reads group 0
        k_all, v_all = k_all[:, :1].expand(-1, nh, -1, -1), v_all[:, :1].expand(-1, nh, -1, -1)
    elif group > 1:
        if v.kv_layout == "interleave":
            k_all, v_all = k_all.repeat_interleave(group, 1), v_all.repeat_interleave(group, 1)
        else:  # tiled
            k_all, v_all = k_all.repeat(1, group, 1, 1), v_all.repeat(1, group, 1, 1)
    ctx = _core(q, k_all, v_all, v, cfg, past_len)  # (B, nh, T, hd)
    ctx = ctx.reshape(b, n, -1) if v.merge == "no_transpose" else ctx.transpose(1, 2).reshape(b, n, -1)
    out = _lin(p, "out_proj", ctx) if v.out_proj else ctx
    return (out, present) if exercise == "kv_cache" else out


def expected_outputs(exercise, case: Case, v: Variant = Variant()):
    """Run the variant the way the learner's module is run; returns {name: tensor or None} or raises."""
    if exercise in _BEYOND:  # hook: exercises 08-10
        return specs_beyond.expected_outputs(exercise, case, v)
    with torch.no_grad():
        if case.steps is None:
            out = reference_forward(exercise, case.params, case.x, case.ctor, v)
            return {"out": out}
        outs, past = {}, None
        for i, (start, end, use_cache, pass_past) in enumerate(case.steps):
            case.meta["step"] = i + 1  # where a crashing variant stops
            out, present = reference_forward(exercise, case.params, case.x[:, start:end], case.ctor, v,
                                             past=past if pass_past else None, use_cache=use_cache)
            outs[f"step{i + 1}.out"] = out
            outs[f"step{i + 1}.keys"] = None if present is None else present[0]
            outs[f"step{i + 1}.values"] = None if present is None else present[1]
            if use_cache:
                past = present
        return outs


# ---------------------------------------------------------------------------------------------
# contracts and cases


def param_shapes(exercise, cfg) -> dict:
    """name -> shape of every parameter the contract needs (nn.Linear weights are (out, in))."""
    d_in, d_out, bias = cfg["d_in"], cfg["d_out"], cfg.get("qkv_bias", False)

    def linear(name, n_in, n_out, with_bias):
        shapes = {name + ".weight": (n_out, n_in)}
        if with_bias:
            shapes[name + ".bias"] = (n_out,)
        return shapes

    if exercise == "wrapper":
        shapes = {}
        for i in range(cfg["num_heads"]):
            for name in ("W_query", "W_key", "W_value"):
                shapes.update(linear(f"heads.{i}.{name}", d_in, d_out, bias))
        return shapes
    kv_width = d_out
    if exercise == "gqa":
        kv_width = cfg["num_kv_groups"] * (d_out // cfg["num_heads"])
    shapes = {**linear("W_query", d_in, d_out, bias), **linear("W_key", d_in, kv_width, bias),
              **linear("W_value", d_in, kv_width, bias)}
    if exercise not in ("self_attention", "causal"):
        shapes.update(linear("out_proj", d_out, d_out, True))
    return shapes


def _case(exercise, name, seed, x_shape, steps=None, **ctor):
    ctor.setdefault("qkv_bias", False)
    g = torch.Generator().manual_seed(seed)
    params = {}
    for pname, shape in param_shapes(exercise, ctor).items():
        fan_in = shape[-1] if len(shape) == 2 else 1
        scale = 1.0 / math.sqrt(fan_in) if len(shape) == 2 else 0.2
        params[pname] = torch.randn(shape, generator=g) * scale * 1.5
    x = torch.randn(x_shape, generator=g)
    return Case(name, ctor, params, x, steps)


_CASES: dict = {}


def make_cases(exercise) -> list[Case]:
    """The exercise's cases (built once; deterministic)."""
    if exercise not in _CASES:
        _CASES[exercise] = _make_cases(exercise)
    return _CASES[exercise]


def cached_outputs(exercise, case: Case, v: Variant):
    """expected_outputs, memoized on the case; an exception is returned (not raised) for crashing variants."""
    memo = case.meta.setdefault("expected", {})
    if v not in memo:
        case.meta["step"] = 1
        try:
            memo[v] = expected_outputs(exercise, case, v)
        except Exception as exc:  # noqa: BLE001 - the mistake makes the reference crash too
            exc.step = case.meta["step"]
            memo[v] = exc
    return memo[v]


def _make_cases(exercise) -> list[Case]:
    """Small cases exposing the usual bugs: several heads, d_in < d_out and d_in > d_out,
    sequences shorter than context_length, batch > 1, dropout > 0 (the module is in eval mode)."""
    if exercise in _BEYOND:  # hook: exercises 08-10
        return specs_beyond.make_cases(exercise)
    if exercise == "self_attention":
        return [
            _case(exercise, "d_in=3 > d_out=2, batch 2, 6 tokens", 1, (2, 6, 3), d_in=3, d_out=2),
            _case(exercise, "d_in=4 < d_out=6, qkv_bias, batch 3, 5 tokens", 2, (3, 5, 4), d_in=4, d_out=6,
                  qkv_bias=True),
            _case(exercise, "unbatched (5 tokens, d_in=5) input, d_out=3", 3, (5, 5), d_in=5, d_out=3),
        ]
    if exercise == "causal":
        return [
            _case(exercise, "d_in=3, d_out=2, 6 tokens = context_length, dropout 0.5", 11, (2, 6, 3),
                  d_in=3, d_out=2, context_length=6, dropout=0.5),
            _case(exercise, "d_in=4 < d_out=6, 5 tokens < context_length=8, batch 3", 12, (3, 5, 4),
                  d_in=4, d_out=6, context_length=8, dropout=0.1),
            _case(exercise, "d_in=6 > d_out=4, qkv_bias, 4 tokens < context_length=7", 13, (2, 4, 6),
                  d_in=6, d_out=4, context_length=7, dropout=0.0, qkv_bias=True),
        ]
    if exercise == "wrapper":
        return [
            _case(exercise, "2 heads, d_in=3, d_out=2, 6 tokens = context_length", 21, (2, 6, 3),
                  d_in=3, d_out=2, context_length=6, dropout=0.5, num_heads=2),
            _case(exercise, "3 heads, d_in=4 < d_out=5, 5 tokens < context_length=8", 22, (2, 5, 4),
                  d_in=4, d_out=5, context_length=8, dropout=0.1, num_heads=3),
            _case(exercise, "2 heads, d_in=6 > d_out=2, qkv_bias, 4 tokens < context_length=5", 23, (3, 4, 6),
                  d_in=6, d_out=2, context_length=5, dropout=0.0, num_heads=2, qkv_bias=True),
        ]
    if exercise in ("mha", "mha_interview"):
        return [
            _case(exercise, "3 heads, d_in=4 < d_out=12, 5 tokens < context_length=8, dropout 0.5", 31, (2, 5, 4),
                  d_in=4, d_out=12, context_length=8, dropout=0.5, num_heads=3),
            _case(exercise, "2 heads, d_in=10 > d_out=6, 6 tokens = context_length, batch 3", 32, (3, 6, 10),
                  d_in=10, d_out=6, context_length=6, dropout=0.1, num_heads=2),
            _case(exercise, "4 heads, d_in=6, d_out=8, qkv_bias, 7 tokens < context_length=9", 33, (2, 7, 6),
                  d_in=6, d_out=8, context_length=9, dropout=0.0, num_heads=4, qkv_bias=True),
        ]
    if exercise == "kv_cache":
        return [
            _case(exercise, "3 heads, d_in=4 < d_out=12: chunks of 3, 2, 1 tokens with the cache, then no cache",
                  41, (2, 7, 4), steps=[(0, 3, True, False), (3, 5, True, True), (5, 6, True, True),
                                        (0, 7, False, False)],
                  d_in=4, d_out=12, context_length=8, dropout=0.5, num_heads=3),
            _case(exercise, "2 heads, d_in=6 > d_out=4, qkv_bias: chunks of 2, 3, 1 tokens with the cache", 42,
                  (1, 6, 6), steps=[(0, 2, True, False), (2, 5, True, True), (5, 6, True, True)],
                  d_in=6, d_out=4, context_length=6, dropout=0.0, num_heads=2, qkv_bias=True),
            _case(exercise, "2 heads, d_in=5, d_out=6: prompt of 2 tokens, then one token at a time", 43,
                  (2, 4, 5), steps=[(0, 2, True, False), (2, 3, True, True), (3, 4, True, True)],
                  d_in=5, d_out=6, context_length=5, dropout=0.1, num_heads=2),
        ]
    if exercise == "gqa":
        return [
            _case(exercise, "4 heads in 2 K/V groups, d_in=6 < d_out=8, 6 tokens < context_length=8", 51,
                  (2, 6, 6), d_in=6, d_out=8, context_length=8, dropout=0.5, num_heads=4, num_kv_groups=2),
            _case(exercise, "6 heads in 3 K/V groups, d_in=14 > d_out=12, 6 tokens = context_length", 52,
                  (3, 6, 14), d_in=14, d_out=12, context_length=6, dropout=0.1, num_heads=6, num_kv_groups=3),
            _case(exercise, "MQA: 4 heads, 1 K/V group, qkv_bias, 5 tokens < context_length=9", 53, (2, 5, 8),
                  d_in=8, d_out=8, context_length=9, dropout=0.0, num_heads=4, num_kv_groups=1, qkv_bias=True),
            _case(exercise, "MHA as GQA: 2 heads, 2 groups, d_in=3, d_out=4", 54, (2, 4, 3),
                  d_in=3, d_out=4, context_length=6, dropout=0.2, num_heads=2, num_kv_groups=2),
        ]
    raise ValueError(f"unknown exercise {exercise!r}; known: {', '.join(EXERCISES)}")


# ---------------------------------------------------------------------------------------------
# the misconception catalogue (learner-facing messages)

_CAUSAL = Variant()
_PLAIN = Variant(mask="none")

M_NO_SCALE = ("no_scale", "scores are not scaled: divide Q·Kᵀ by √head_dim before the softmax")
M_NO_SQRT = ("scale_no_sqrt", "scores divided by head_dim instead of √head_dim")
M_SCALE_D_OUT = ("scale_d_out", "scores scaled by √d_out instead of √head_dim (head_dim = d_out // num_heads)")
M_SCALE_D_IN = ("scale_d_in", "scores scaled by √d_in instead of √head_dim (the keys' width, d_out // num_heads)")
M_SOFTMAX = ("softmax_wrong_axis", "softmax over the wrong axis (dim=-2, the queries): each query's weights must "
             "sum to 1 over the keys, softmax(dim=-1)")
M_SOFTMAX_HEADS = ("softmax_wrong_axis", "softmax over the heads axis (dim=1): each query's weights must sum to 1 "
                   "over the keys, softmax(dim=-1)")
M_INVERTED = ("mask_inverted", "causal mask inverted: tokens see the future but not the past (True = hide and "
              "True = allow mixed up, e.g. masked_fill(mask == 0, ...) on a triu mask)")
M_ZERO_FILL = ("mask_zero_fill", "masked scores filled with 0 instead of -inf: softmax still gives the hidden "
               "(future) keys weight exp(0)")
M_AFTER_SOFTMAX = ("mask_after_softmax", "mask applied after the softmax: the remaining weights no longer sum to 1; "
                   "fill the scores with -inf before the softmax")
M_DIAGONAL = ("diagonal_masked", "diagonal masked too (triu with diagonal=0): a token must attend to itself; use "
              "torch.triu(..., diagonal=1)")
M_NO_MASK = ("no_causal_mask", "no causal mask: tokens attend to later tokens")
M_UNSLICED = ("mask_not_sliced", "mask not sliced to the sequence length: it fails for inputs shorter than "
              "context_length; use self.mask[:num_tokens, :num_tokens]")
M_KEYS_Q = ("keys_from_query", "keys computed with the query weights: use self.W_key(x)")
M_VALUES_K = ("values_from_key", "values computed with the key weights: use self.W_value(x)")
M_SPLIT = ("split_no_transpose", "heads split without transposing: view(b, num_heads, T, head_dim) mixes tokens "
           "into heads; use view(b, T, num_heads, head_dim).transpose(1, 2)")
M_MERGE = ("merge_no_transpose", "heads merged without transposing back: transpose(1, 2) the (b, num_heads, T, "
           "head_dim) context to (b, T, num_heads, head_dim) before .view(b, T, d_out)")
M_NO_OUT = ("no_out_proj", "missing output projection: apply self.out_proj to the merged heads")
M_CAUSAL_SA = ("causal_in_self_attention", "a causal mask is applied, but SelfAttention_v2 is not causal: every "
               "token attends to every token")
M_SHARED = ("wrapper_shared_weights", "every head uses the first head's weights: call each head in self.heads")
M_SUM = ("wrapper_summed", "heads summed instead of concatenated: torch.cat([head(x) for head in self.heads], "
         "dim=-1)")
M_CAT_TOKENS = ("wrapper_cat_wrong_axis", "heads concatenated along the tokens (dim=1) instead of the features "
                "(dim=-1)")
M_TILED = ("kv_tiled", "K/V groups tiled (repeat, or head h reads group h % num_kv_groups) instead of interleaved: "
           "query head h reads group h // (num_heads // num_kv_groups), use repeat_interleave(group_size, dim=1)")
M_GROUP0 = ("kv_one_group", "every query head reads K/V group 0: expand/repeat each of the num_kv_groups groups "
            "for its num_heads // num_kv_groups query heads")
M_TOP_LEFT = ("mask_top_left", "causal mask aligned to the start of the cache (or is_causal=True on a chunk): "
              "the new queries are the LAST positions; hide key j from new query i when "
              "j > n_past + i, e.g. mask[n_past:n_past + n_new, :n_past + n_new]")
M_FIRST_ONLY = ("mask_only_without_cache", "no causal mask once there is a cache: a chunk of several new tokens "
                "still must not see its own later tokens")
M_SQUARE = ("mask_square_slice", "mask sliced [:n_new, :n_new]: with a cache it must cover all n_past + n_new keys, "
            "mask[n_past:n_past + n_new, :n_past + n_new]")
M_ONLY_NEW = ("cache_only_new", "present holds only the new tokens: return the concatenated past + new keys and "
              "values")
M_NOT_UPDATED = ("cache_not_updated", "cache not updated: present returns the old past_key_value instead of past "
                 "+ new keys/values")
M_WRONG_AXIS = ("cache_wrong_axis", "cache concatenated on the wrong axis: keys/values are [b, num_heads, n, "
                "head_dim], concatenate on dim=2 (the tokens)")
DROPOUT_EVAL = ("dropout_in_eval", "dropout active in eval mode: outputs change from call to call after .eval(); "
                "use self.dropout = nn.Dropout(p) (or dropout_p=p if self.training else 0.0)")
NOT_IMPLEMENTED = "not_implemented"


def _m(pair, variant):
    return Mutant(pair[0], pair[1], variant)


def _causal_common(base: Variant):
    """Mask mistakes shared by all causal exercises (each with -inf and -1e9 fills where they differ)."""
    return [
        _m(M_NO_MASK, replace(base, mask="none")),
        _m(M_INVERTED, replace(base, mask="inverted")),
        _m(M_INVERTED, replace(base, mask="inverted", fill=-1e9)),
        _m(M_ZERO_FILL, replace(base, mask="zero_fill")),
        _m(M_AFTER_SOFTMAX, replace(base, mask="after_softmax")),
        _m(M_DIAGONAL, replace(base, mask="diagonal")),
        _m(M_DIAGONAL, replace(base, mask="diagonal", fill=-1e9)),
        _m(M_UNSLICED, replace(base, mask="unsliced")),
    ]


def mutants(exercise) -> list[Mutant]:
    """Known-wrong variants for ``exercise``, most specific first."""
    if exercise in _BEYOND:  # hook: exercises 08-10
        return specs_beyond.mutants(exercise)
    if exercise == "self_attention":
        return [_m(M_NO_SCALE, replace(_PLAIN, scale="none")), _m(M_NO_SQRT, replace(_PLAIN, scale="no_sqrt")),
                _m(M_SCALE_D_IN, replace(_PLAIN, scale="d_in")),
                _m(M_SOFTMAX, replace(_PLAIN, softmax_dim=-2)), _m(M_KEYS_Q, replace(_PLAIN, keys_from="W_query")),
                _m(M_VALUES_K, replace(_PLAIN, values_from="W_key")),
                _m(M_CAUSAL_SA, _CAUSAL)]
    if exercise == "causal":
        return [_m(M_NO_SCALE, replace(_CAUSAL, scale="none")), _m(M_SOFTMAX, replace(_CAUSAL, softmax_dim=-2)),
                _m(M_KEYS_Q, replace(_CAUSAL, keys_from="W_query"))] + _causal_common(_CAUSAL)
    if exercise == "wrapper":
        return [_m(M_SHARED, replace(_CAUSAL, wrapper="shared")), _m(M_SUM, replace(_CAUSAL, wrapper="sum")),
                _m(M_CAT_TOKENS, replace(_CAUSAL, wrapper="cat_tokens")),
                _m(M_NO_SCALE, replace(_CAUSAL, scale="none")),
                _m(M_SOFTMAX, replace(_CAUSAL, softmax_dim=-2))] + _causal_common(_CAUSAL)
    if exercise in ("mha", "mha_interview", "gqa"):
        found = [_m(M_SCALE_D_OUT, replace(_CAUSAL, scale="d_out")), _m(M_SCALE_D_IN, replace(_CAUSAL, scale="d_in")),
                 _m(M_NO_SCALE, replace(_CAUSAL, scale="none")), _m(M_NO_SQRT, replace(_CAUSAL, scale="no_sqrt")),
                 _m(M_SOFTMAX, replace(_CAUSAL, softmax_dim=-2)), _m(M_SOFTMAX_HEADS, replace(_CAUSAL, softmax_dim=1)),
                 _m(M_SPLIT, replace(_CAUSAL, split="no_transpose")),
                 _m(M_MERGE, replace(_CAUSAL, merge="no_transpose")),
                 _m(M_NO_OUT, replace(_CAUSAL, out_proj=False))]
        if exercise == "gqa":
            found = [_m(M_TILED, replace(_CAUSAL, kv_layout="tile")),
                     _m(M_GROUP0, replace(_CAUSAL, kv_layout="group0"))] + found
        else:
            found += [_m(M_KEYS_Q, replace(_CAUSAL, keys_from="W_query")),
                      _m(M_VALUES_K, replace(_CAUSAL, values_from="W_key"))]
        return found + _causal_common(_CAUSAL)
    if exercise == "kv_cache":
        return [_m(M_TOP_LEFT, replace(_CAUSAL, mask="top_left")),
                _m(M_FIRST_ONLY, replace(_CAUSAL, mask="first_chunk_only")),
                _m(M_SQUARE, replace(_CAUSAL, mask="square_slice")),
                _m(M_ONLY_NEW, replace(_CAUSAL, cache="only_new")),
                _m(M_NOT_UPDATED, replace(_CAUSAL, cache="not_updated")),
                _m(M_WRONG_AXIS, replace(_CAUSAL, cache="wrong_axis")),
                _m(M_SCALE_D_OUT, replace(_CAUSAL, scale="d_out")),
                _m(M_SPLIT, replace(_CAUSAL, split="no_transpose")),
                _m(M_MERGE, replace(_CAUSAL, merge="no_transpose")),
                _m(M_NO_OUT, replace(_CAUSAL, out_proj=False))] + _causal_common(_CAUSAL)
    raise ValueError(f"unknown exercise {exercise!r}; known: {', '.join(EXERCISES)}")


def correct_variant(exercise) -> Variant:
    if exercise in _BEYOND:  # hook: exercises 08-10
        return specs_beyond.correct_variant(exercise)
    return _PLAIN if exercise == "self_attention" else _CAUSAL


# ---------------------------------------------------------------------------------------------
# hook: exercises 08-10 (rope, online_softmax, mla) live in specs_beyond; registered here, routed above
from . import specs_beyond  # noqa: E402  (it imports Case and Mutant from this module lazily)

_BEYOND = frozenset(specs_beyond.EXERCISES)
EXERCISES = EXERCISES + specs_beyond.EXERCISES
CONTRACT_CLASS.update(specs_beyond.CONTRACT_CLASS)
CONTRACT_ARGS.update(specs_beyond.CONTRACT_ARGS)
FUNCTION_EXERCISES = frozenset(specs_beyond.FUNCTION_EXERCISES)  # graded as functions, not classes
