"""The computation of exercises 01-07 (self-attention to GQA and the KV cache): one parameterized attention forward,
whose flags (``Variant``) are the known mistakes, its case builders and the mistakes the seven exercises share.

An exercise of this family declares its ``FORM`` (the shape of its computation: ``FORMS``), ``expected_for(FORM)``
and its cases, built with ``make_case`` and the shared blocks ``gradients_case``, ``training_case`` ("training
mode, dropout 0.5": dropout made visible) and ``large_scores_case`` ("scores in the hundreds").
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from .kinds.module import Call, Case
from .kit import (
    M_SOFTMAX_BATCH,
    M_SOFTMAX_HEADS,
    M_SOFTMAX_QUERIES,
    Mistake,
    case_titles,
    draw_seed,
    linear,
    mutant,
    random_params,
)
from .types import NoGradient

# the shapes of computation the exercises 01-07 declare (grade/exercises/): one head (self-attention, causal), the
# wrapper's separate heads, weight-split heads (MHA, GQA, interview mode), weight-split heads with a KV cache
FORMS = ("single_head", "wrapper", "heads", "cached")


# ---------------------------------------------------------------------------------------------
# the reference forward


@dataclass(frozen=True)
class Variant:
    """Flags of the reference forward; the defaults are the correct computation."""

    scale: str = "head_dim"  # head_dim | d_out | d_in | none | no_sqrt
    softmax_dim: int = -1  # -1 keys (right) | -2 queries | 1 heads (queries for one head) | 0 batch
    softmax: str = "stable"  # stable | naive (exp / sum without subtracting the row max)
    mask: str = "causal"  # causal | none | inverted | transposed (each query sees itself and the later keys) |
    # zero_fill | after_softmax | diagonal | top_left | unsliced | square_slice | first_chunk_only
    fill: float = float("-inf")  # value written into hidden scores
    split: str = "ok"  # ok | no_transpose
    merge: str = "ok"  # ok | no_transpose | d_in (merged into the input's width: fails unless d_in == d_out)
    out_proj: bool = True
    keys_from: str = "W_key"  # which projection makes the keys
    values_from: str = "W_value"
    kv_layout: str = "interleave"  # interleave | tile | group0
    cache: str = "ok"  # ok | only_new | not_updated | wrong_axis | own_state
    wrapper: str = "ok"  # ok | shared | sum | cat_tokens
    grad: str = "ok"  # ok | detach_kv | detach_weights | no_grad


def _hide_mask(v: Variant, num_q, num_k, context_length, past_len):
    """(num_q, num_k) bool, True = hide, or a full unsliced mask for the 'unsliced' mistake."""
    if v.mask == "unsliced":
        return torch.triu(torch.ones(context_length, context_length, dtype=torch.bool), 1)
    if v.mask == "square_slice":
        return torch.triu(torch.ones(num_q, num_q, dtype=torch.bool), 1)
    if v.mask == "first_chunk_only" and past_len > 0:
        return None
    offset = 0 if v.mask == "top_left" else num_k - num_q  # queries are the last positions
    if v.mask == "transposed":  # the causal mask's transpose: the earlier keys hidden, the later ones seen
        return torch.tril(torch.ones(num_q, num_k, dtype=torch.bool), offset - 1)
    diag = offset if v.mask == "diagonal" else offset + 1
    hide = torch.triu(torch.ones(num_q, num_k, dtype=torch.bool), diag)
    return ~hide if v.mask == "inverted" else hide


def _softmax(scores, v: Variant):
    if v.softmax == "naive":
        e = torch.exp(scores)
        return e / e.sum(dim=v.softmax_dim, keepdim=True)
    return torch.softmax(scores, dim=v.softmax_dim)


def _core(q, k, val, v: Variant, cfg, past_len):
    """Scaled dot-product attention with the variant's mistakes. q (B, h, Sq, hd), k/val (B, h, Sk, hd)."""
    hd = q.shape[-1]
    scale = {
        "head_dim": math.sqrt(hd),
        "d_out": math.sqrt(cfg["d_out"]),
        "d_in": math.sqrt(cfg["d_in"]),
        "none": 1.0,
        "no_sqrt": float(hd),
    }[v.scale]
    if v.grad == "detach_kv":
        k, val = k.detach(), val.detach()
    scores = q @ k.transpose(-2, -1) / scale  # (B, h, Sq, Sk)
    hide = None if v.mask == "none" else _hide_mask(v, q.shape[-2], k.shape[-2], cfg.get("context_length"), past_len)
    if hide is not None and v.mask != "after_softmax":
        scores = scores.masked_fill(hide, 0.0 if v.mask == "zero_fill" else v.fill)
    w = _softmax(scores, v)
    if hide is not None and v.mask == "after_softmax":
        w = w.masked_fill(hide, 0.0)
    if v.grad == "detach_weights":
        w = w.detach()
    return w @ val


def _split(t, heads, v: Variant):
    b, n, width = t.shape
    if v.split == "no_transpose":
        return t.reshape(b, heads, n, width // heads)
    return t.view(b, n, heads, width // heads).transpose(1, 2)  # (B, heads, T, hd)


def _single_head(p, x, cfg, v: Variant, prefix=""):
    """Single-head attention (self_attention, causal, one wrapper head): (..., T, d_in) -> (..., T, d_out)."""
    q = linear(p, prefix + "W_query", x)
    k = linear(p, prefix + v.keys_from, x)
    val = linear(p, prefix + v.values_from, x)
    return _core(q, k, val, v, cfg, 0)


def reference_forward(form, p, x, cfg, v: Variant = Variant(), past=None, use_cache=False):
    """The computation of an exercise of ``form`` (its declared shape: ``FORMS``) on parameters ``p``
    (name -> tensor); the "cached" form returns (out, present)."""
    if form == "single_head":
        return _single_head(p, x, cfg, v)
    if form == "wrapper":
        nh = cfg["num_heads"]
        heads = [_single_head(p, x, cfg, v, "heads.0." if v.wrapper == "shared" else f"heads.{i}.") for i in range(nh)]
        if v.wrapper == "sum":
            return torch.stack(heads).sum(0)
        return torch.cat(heads, dim=1 if v.wrapper == "cat_tokens" else -1)
    # mha, mha_interview, kv_cache, gqa
    nh = cfg["num_heads"]
    ng = cfg.get("num_kv_groups", nh)
    b, n, _ = x.shape
    q = _split(linear(p, "W_query", x), nh, v)  # (B, nh, T, hd)
    k = _split(linear(p, v.keys_from, x), ng, v)  # (B, ng, T, hd)
    val = _split(linear(p, v.values_from, x), ng, v)
    present, past_len = None, 0
    if past is not None:
        past_len = past[0].shape[2]
        dim = 1 if v.cache == "wrong_axis" else 2
        k_all, v_all = torch.cat([past[0], k], dim=dim), torch.cat([past[1], val], dim=dim)
    else:
        k_all, v_all = k, val
    if use_cache:
        present = {
            "ok": (k_all, v_all),
            "wrong_axis": (k_all, v_all),
            "own_state": (k_all, v_all),
            "only_new": (k, val),
            "not_updated": past if past is not None else (k, val),
        }[v.cache]
    group = nh // ng
    if v.kv_layout == "group0":  # every query head reads group 0
        k_all, v_all = k_all[:, :1].expand(-1, nh, -1, -1), v_all[:, :1].expand(-1, nh, -1, -1)
    elif group > 1:
        if v.kv_layout == "interleave":
            k_all, v_all = k_all.repeat_interleave(group, 1), v_all.repeat_interleave(group, 1)
        else:  # tiled
            k_all, v_all = k_all.repeat(1, group, 1, 1), v_all.repeat(1, group, 1, 1)
    ctx = _core(q, k_all, v_all, v, cfg, past_len)  # (B, nh, T, hd)
    ctx = (
        ctx.reshape(b, n, -1)
        if v.merge == "no_transpose"
        else ctx.transpose(1, 2).reshape(b, n, x.shape[-1] if v.merge == "d_in" else -1)
    )
    out = linear(p, "out_proj", ctx) if v.out_proj else ctx
    return (out, present) if form == "cached" else out


def _with_grad(form, case: Case, v: Variant, x: torch.Tensor, grad: torch.Tensor, tag: str) -> dict:
    """Outputs of one call on ``x`` with gradients of the input and of every parameter, as the learner's backward
    of (out * grad).sum() computes them."""
    if v.grad == "no_grad":
        raise NoGradient("the output carries no gradient")
    params = {k: t.detach().clone().requires_grad_(True) for k, t in case.params.items()}
    x = x.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        out = reference_forward(form, params, x, case.ctor, v)
        if out.shape != grad.shape:  # the wrong shape is what gets reported, as for the learner
            return {f"{tag}.out": out.detach()}
        (out * grad).sum().backward()
    absent = case.meta.get("absent", ())  # biases the learner's class does not have: no gradient to compare
    grads = {f"{tag}.grad.x": x.grad}
    grads.update(
        {
            f"{tag}.grad.{k}": (t.grad if t.grad is not None else torch.zeros_like(t))
            for k, t in params.items()
            if k not in absent
        }
    )
    return {f"{tag}.out": out.detach(), **grads}


def expected_outputs(form, case: Case, v: Variant = Variant()):
    """Run the variant the way the learner's module is run: {name: tensor or None}; raises where the variant
    crashes (``case.meta['step']`` says at which call). Training-mode calls are checked separately
    (``dropout_problem``) and have no expected value."""
    outs: dict[str, torch.Tensor | None] = {}
    presents: dict[int, tuple[torch.Tensor, torch.Tensor] | None] = {}  # call index -> its (keys, values)
    state = None
    for i, call in enumerate(case.calls):
        tag = f"step{i + 1}"
        case.meta["step"] = i + 1
        if call.train:
            continue
        if call.grad is not None:
            outs.update(_with_grad(form, case, v, call.x, call.grad, tag))
            continue
        with torch.no_grad():
            if call.use_cache is None:
                outs[f"{tag}.out"] = reference_forward(form, case.params, call.x, case.ctor, v)
                continue
            past = (
                presents[call.past] if isinstance(call.past, int) else case.given_past if call.past == "given" else None
            )
            if v.cache == "own_state":  # the module keeps its own K/V and ignores past_key_value
                past = state if call.past is not None else None
            out, present = reference_forward(
                form, case.params, call.x, case.ctor, v, past=past, use_cache=call.use_cache
            )
            if v.cache == "own_state" and call.use_cache:
                state = present
            presents[i] = present
            outs[f"{tag}.out"] = out
            outs[f"{tag}.keys"] = None if present is None else present[0]
            outs[f"{tag}.values"] = None if present is None else present[1]
    return outs


# ---------------------------------------------------------------------------------------------
# contracts and cases


def param_shapes(form, cfg) -> dict:
    """name -> shape of every parameter the contract needs (nn.Linear weights are (out, in))."""
    d_in, d_out, bias = cfg["d_in"], cfg["d_out"], cfg.get("qkv_bias", False)

    def linear(name, n_in, n_out, with_bias):
        shapes = {name + ".weight": (n_out, n_in)}
        if with_bias:
            shapes[name + ".bias"] = (n_out,)
        return shapes

    if form == "wrapper":
        shapes = {}
        for i in range(cfg["num_heads"]):
            for name in ("W_query", "W_key", "W_value"):
                shapes.update(linear(f"heads.{i}.{name}", d_in, d_out, bias))
        return shapes
    kv_width = d_out
    if "num_kv_groups" in cfg:
        kv_width = cfg["num_kv_groups"] * (d_out // cfg["num_heads"])
    shapes = {
        **linear("W_query", d_in, d_out, bias),
        **linear("W_key", d_in, kv_width, bias),
        **linear("W_value", d_in, kv_width, bias),
    }
    if form != "single_head":
        shapes.update(linear("out_proj", d_out, d_out, True))
    return shapes


def _draw_params(form, ctor, g):
    return random_params(param_shapes(form, ctor), g)


def _shift_scores(params, x, g, size=400.0):
    """Make the scores large without making the softmax one-hot: a large key bias b adds q_i · b to every
    score of query i, a shift softmax ignores and exp() does not (it overflows or underflows)."""
    for name in [n for n in params if n.endswith("W_key.bias")]:
        q = F.linear(x, params[name.replace("W_key.bias", "W_query.weight")])
        typical = q.norm(dim=-1).mean().item() + 1e-6
        direction = torch.randn(params[name].shape, generator=g)
        params[name] = direction / direction.norm() * (size / typical) * math.sqrt(params[name].numel())


def make_case(form, name, g, x_shape, steps=None, large=False, **ctor):
    """A case with a fresh draw of parameters and input. ``steps``: kv_cache chunks
    (start, end, use_cache, pass_past) over one sequence. ``large``: scores in the hundreds (see
    ``_shift_scores``), with biases on."""
    ctor.setdefault("qkv_bias", large)
    params = _draw_params(form, ctor, g)
    x = torch.randn(x_shape, generator=g)
    if large:
        _shift_scores(params, x, g)
    if steps is None:
        calls = [Call(x, seed=draw_seed(g), use_cache=False if form == "cached" else None)]
    else:
        calls, last = [], None
        for i, (start, end, use_cache, pass_past) in enumerate(steps):
            past = last if pass_past else None
            calls.append(Call(x[:, start:end], seed=draw_seed(g), past=past, use_cache=use_cache))
            if use_cache:
                last = i
    # float32 scores in the hundreds carry rounding errors of ~1e-5 that fused kernels and matmul orders
    # place differently: the large case compares with a looser tolerance (mistakes differ by far more)
    meta = {"x_full": x, **({"tol": (2e-3, 2e-4)} if large else {})}
    return Case(name, ctor, params, calls, kind="large" if large else "cache" if steps else "plain", meta=meta)


def grad_case(form, name, g, x_shape, **ctor):
    case = make_case(form, name, g, x_shape, **ctor)
    out = reference_forward(form, case.params, case.x, case.ctor)
    out = out[0] if isinstance(out, tuple) else out
    case.calls[0].grad = torch.randn(out.shape, generator=g)
    case.kind = "grad"
    return case


def train_case(form, name, g, batch, tokens, **ctor):
    """Dropout made visible: token t's input is the one-hot e_t and each head's values are the one-hot e_t
    too, so every element of a head's context vector is one attention weight; out_proj is orthogonal.
    The module is called in eval mode, then in training mode on the same input."""
    ctor.setdefault("qkv_bias", False)
    params = _draw_params(form, ctor, g)
    d_in, d_out = ctor["d_in"], ctor["d_out"]
    x = torch.eye(tokens, d_in).expand(batch, tokens, d_in).clone()
    for prefix in [f"heads.{i}." for i in range(ctor["num_heads"])] if form == "wrapper" else [""]:
        w = params[prefix + "W_value.weight"]
        hd = d_out if form in ("single_head", "wrapper") else d_out // ctor["num_heads"]
        w.zero_()
        for head in range(w.shape[0] // hd):
            w[head * hd : head * hd + tokens, :tokens] = torch.eye(tokens)
        if prefix + "W_value.bias" in params:
            params[prefix + "W_value.bias"].zero_()
    return visible_dropout_case(name, g, ctor, params, x, tokens, use_cache=False if form == "cached" else None)


def visible_dropout_case(name, g, ctor, params, x, tokens, use_cache=None, **kwargs) -> Case:
    """A training case on ``params`` whose values are already one-hot (head h's value of token t is e_t, for the
    one-hot input ``x``): out_proj made orthogonal, so that every element of a head's context vector, read back
    from the output, is one attention weight (``kinds.module.dropout_problem``); the module called in eval mode, then
    in training mode on the same input (``kwargs``: the forward's other arguments, the same in both calls)."""
    if "out_proj.weight" in params:
        d_out = params["out_proj.weight"].shape[0]
        params["out_proj.weight"] = torch.linalg.qr(torch.randn(d_out, d_out, generator=g))[0]
        params["out_proj.bias"] = torch.zeros(d_out)
    calls = [
        Call(x, seed=draw_seed(g), use_cache=use_cache, kwargs=dict(kwargs)),
        Call(x, train=True, seed=draw_seed(g), use_cache=use_cache, kwargs=dict(kwargs)),
    ]
    return Case(name, ctor, params, calls, kind="train", meta={"tokens": tokens})


def gradients_case(form, g, x_shape, **ctor):
    """The shared case "gradients of the parameters and the input": the learner's backward of (out * grad).sum()."""
    return grad_case(form, "gradients of the parameters and the input", g, x_shape, **ctor)


TRAINING = "training mode, dropout 0.5"  # the shared training case's title (and its dropout)


def training_case(form, g, batch, tokens, **ctor):
    """The shared case "training mode, dropout 0.5" (``train_case``: dropout made visible)."""
    if ctor.setdefault("dropout", 0.5) != 0.5:
        raise ValueError("the training-mode case is the one with dropout 0.5")
    return train_case(form, TRAINING, g, batch, tokens, **ctor)


def large_scores_case(form, g, x_shape, **ctor):
    """The shared case "scores in the hundreds (a large key bias)": a softmax without its maximum overflows."""
    return make_case(form, "scores in the hundreds (a large key bias)", g, x_shape, large=True, **ctor)


def given_past_case(form, name, g, batch, n_past, n_new, **ctor):
    """A past the module never produced: keys and values of earlier tokens handed in directly."""
    case = make_case(form, name, g, (batch, n_new, ctor["d_in"]), **ctor)
    heads, hd = ctor["num_heads"], ctor["d_out"] // ctor["num_heads"]
    case.given_past = (
        torch.randn(batch, heads, n_past, hd, generator=g),
        torch.randn(batch, heads, n_past, hd, generator=g),
    )
    case.calls = [Call(case.x, seed=draw_seed(g), past="given", use_cache=True)]
    case.kind = "cache"
    return case


def interleaved_case(form, name, g, batch, **ctor):
    """Two sequences decoded in turns with their own caches: A's prompt, B's prompt, A's next chunk, B's."""
    d_in = ctor["d_in"]
    ctor.setdefault("qkv_bias", False)
    params = _draw_params(form, ctor, g)
    a, b = torch.randn(batch, 5, d_in, generator=g), torch.randn(batch, 5, d_in, generator=g)
    calls = [
        Call(a[:, :3], seed=draw_seed(g), use_cache=True),
        Call(b[:, :2], seed=draw_seed(g), use_cache=True),
        Call(a[:, 3:5], seed=draw_seed(g), past=0, use_cache=True),
        Call(b[:, 2:5], seed=draw_seed(g), past=1, use_cache=True),
    ]
    return Case(name, ctor, params, calls, kind="cache")


def expected_for(form: str):
    """An exercise's ``expected(case, variant)`` for the 01-07 computations of ``form``."""
    return functools.partial(expected_outputs, form)


# ---------------------------------------------------------------------------------------------
# the mistakes several exercises of 01-07 make (one exercise's own are in its module)

CAUSAL = Variant()
PLAIN = Variant(mask="none")

M_NO_SCALE = Mistake("no_scale")
M_NO_SQRT = Mistake("scale_no_sqrt")
M_SCALE_D_OUT = Mistake("scale_d_out")
M_SCALE_D_IN = Mistake("scale_d_in")
M_INVERTED = Mistake("mask_inverted")
M_TRANSPOSED = Mistake("mask_transposed")
M_ZERO_FILL = Mistake("mask_zero_fill")
M_AFTER_SOFTMAX = Mistake("mask_after_softmax")
M_DIAGONAL = Mistake("diagonal_masked")
M_NO_MASK = Mistake("no_causal_mask")
M_UNSLICED = Mistake("mask_not_sliced")
M_KEYS_Q = Mistake("keys_from_query")
M_VALUES_K = Mistake("values_from_key")
M_SPLIT = Mistake("split_no_transpose")
M_MERGE = Mistake("merge_no_transpose")
M_SPLIT_MERGE = Mistake("split_merge_no_transpose")
M_NO_OUT = Mistake("no_out_proj")
M_NAIVE_SOFTMAX = Mistake("softmax_overflow")
M_DETACH_KV = Mistake("grad_detached_kv")
M_DETACH_WEIGHTS = Mistake("grad_detached_weights")
M_NO_GRAD = Mistake("grad_none")


def causal_mutants(base: Variant):
    """Mask mistakes shared by all causal exercises (each with -inf and -1e9 fills where they differ)."""
    return [
        mutant(M_NO_MASK, replace(base, mask="none")),
        mutant(M_INVERTED, replace(base, mask="inverted")),
        mutant(M_INVERTED, replace(base, mask="inverted", fill=-1e9)),
        mutant(M_TRANSPOSED, replace(base, mask="transposed")),
        mutant(M_TRANSPOSED, replace(base, mask="transposed", fill=-1e9)),
        mutant(M_ZERO_FILL, replace(base, mask="zero_fill")),
        mutant(M_AFTER_SOFTMAX, replace(base, mask="after_softmax")),
        mutant(M_DIAGONAL, replace(base, mask="diagonal")),
        mutant(M_DIAGONAL, replace(base, mask="diagonal", fill=-1e9)),
        mutant(M_UNSLICED, replace(base, mask="unsliced")),
    ]


def grad_mutants(base: Variant):
    """Mistakes only the gradients (and large scores) show: the eval-mode outputs are right."""
    return [
        mutant(M_NAIVE_SOFTMAX, replace(base, softmax="naive")),
        mutant(M_NO_GRAD, replace(base, grad="no_grad")),
        mutant(M_DETACH_KV, replace(base, grad="detach_kv")),
        mutant(M_DETACH_WEIGHTS, replace(base, grad="detach_weights")),
    ]


def scale_softmax_mutants(base: Variant):
    """The scale and softmax mistakes of weight-split heads (MHA, GQA)."""
    return [
        mutant(M_SCALE_D_OUT, replace(base, scale="d_out")),
        mutant(M_SCALE_D_IN, replace(base, scale="d_in")),
        mutant(M_NO_SCALE, replace(base, scale="none")),
        mutant(M_NO_SQRT, replace(base, scale="no_sqrt")),
        mutant(M_SOFTMAX_QUERIES, replace(base, softmax_dim=-2)),
        mutant(M_SOFTMAX_HEADS, replace(base, softmax_dim=1)),
        mutant(M_SOFTMAX_BATCH, replace(base, softmax_dim=0), paired=False),
    ]


def heads_mutants(base: Variant):
    return [
        mutant(M_SPLIT_MERGE, replace(base, split="no_transpose", merge="no_transpose")),
        mutant(M_SPLIT, replace(base, split="no_transpose")),
        mutant(M_MERGE, replace(base, merge="no_transpose")),
        mutant(M_NO_OUT, replace(base, out_proj=False)),
    ]


TEXTS: dict[str, tuple[str, str]] = {
    "mutant.no_scale": (
        "scores are not scaled: divide Q·Kᵀ by √head_dim before the softmax",
        "注意力分数没有缩放：softmax 之前要把 Q·Kᵀ 除以 √head_dim",
    ),
    "mutant.scale_no_sqrt": (
        "scores divided by head_dim instead of √head_dim",
        "注意力分数除以了 head_dim，应当除以 √head_dim",
    ),
    "mutant.scale_d_out": (
        "scores scaled by √d_out (d_model) instead of √head_dim (head_dim = d_out // num_heads)",
        "注意力分数除以了 √d_out（d_model），应当除以 √head_dim（head_dim = d_out // num_heads）",
    ),
    "mutant.scale_d_in": (
        "scores scaled by √d_in instead of √head_dim (the keys' width, d_out // num_heads)",
        "注意力分数除以了 √d_in，应当除以 √head_dim（键向量的宽度，d_out // num_heads）",
    ),
    "mutant.mask_inverted": (
        "causal mask inverted: tokens see the future but not the past (True = hide and "
        "True = allow mixed up, e.g. masked_fill(mask == 0, ...) on a triu mask)",
        "因果掩码反了：token 能看到未来，却看不到过去（把“True = 遮住”和“True = 允许”弄混了，"
        "例如对 triu 掩码用了 masked_fill(mask == 0, ...)）",
    ),
    "mutant.mask_transposed": (
        "causal mask transposed: each query sees itself and the LATER tokens, not the earlier ones (torch.tril "
        "where torch.triu belongs, a mask's .T, or j >= i for i <= j); hide key j from query i when j > i: "
        "torch.triu(torch.ones(T, T), diagonal=1) as True = hide",
        "因果掩码转置了：每个查询看到的是它自己和它后面的 token，而不是前面的（该用 torch.triu 的地方用了 torch.tril、"
        "对掩码做了 .T，或把 i <= j 写成了 j >= i）；当 j > i 时要对查询 i 遮住键 j："
        "torch.triu(torch.ones(T, T), diagonal=1) 作为 True = 遮住",
    ),
    "mutant.mask_zero_fill": (
        "masked scores filled with 0 instead of -inf: softmax still gives the hidden (future) keys weight exp(0)",
        "被遮住的分数填成了 0 而不是 -inf：softmax 仍会给被遮住的（未来的）键 exp(0) 的权重",
    ),
    "mutant.mask_after_softmax": (
        "mask applied after the softmax: the remaining weights no longer sum to 1; fill the "
        "scores with -inf before the softmax",
        "掩码加在了 softmax 之后：剩下的权重加起来不再等于 1；应当在 softmax 之前把分数填成 -inf",
    ),
    "mutant.diagonal_masked": (
        "diagonal masked too (triu with diagonal=0): a token must attend to itself; use torch.triu(..., diagonal=1)",
        "对角线也被遮住了（triu 用了 diagonal=0）：token 必须能关注它自己；请用 torch.triu(..., diagonal=1)",
    ),
    "mutant.no_causal_mask": (
        "no causal mask: tokens attend to later tokens",
        "没有因果掩码：token 关注到了它后面的 token",
    ),
    "mutant.mask_not_sliced": (
        "mask not sliced to the sequence length: it fails for inputs shorter than "
        "context_length; use self.mask[:num_tokens, :num_tokens]",
        "掩码没有按序列长度切片：输入比 context_length 短时就会出错；请用 self.mask[:num_tokens, :num_tokens]",
    ),
    "mutant.keys_from_query": (
        "keys computed with the query weights: use self.W_key(x)",
        "键是用查询的权重算出来的：应当用 self.W_key(x)",
    ),
    "mutant.values_from_key": (
        "values computed with the key weights: use self.W_value(x)",
        "值是用键的权重算出来的：应当用 self.W_value(x)",
    ),
    "mutant.split_no_transpose": (
        "heads split without transposing: view(b, num_heads, T, head_dim) mixes tokens into "
        "heads; use view(b, T, num_heads, head_dim).transpose(1, 2)",
        "拆分多头时没有转置：view(b, num_heads, T, head_dim) 会把不同 token 的特征混进同一个头；"
        "请用 view(b, T, num_heads, head_dim).transpose(1, 2)",
    ),
    "mutant.merge_no_transpose": (
        "heads merged without transposing back: transpose(1, 2) the (b, num_heads, T, "
        "head_dim) context to (b, T, num_heads, head_dim) before .view(b, T, d_out)",
        "合并多头前忘了把维度转置回来：先用 transpose(1, 2) 把形状为 (b, num_heads, T, "
        "head_dim) 的上下文向量变成 (b, T, num_heads, head_dim)，再 .view(b, T, d_out)",
    ),
    "mutant.no_out_proj": (
        "missing output projection: apply self.out_proj to the merged heads",
        "缺少输出投影：合并多头之后还要经过 self.out_proj",
    ),
    "mutant.split_merge_no_transpose": (
        "heads split with view(b, num_heads, T, head_dim) and merged back with "
        "view(b, T, d_out), without transposes: each 'head' then mixes tokens; use "
        "view(b, T, num_heads, head_dim).transpose(1, 2) and transpose back before "
        "merging",
        "拆分多头用了 view(b, num_heads, T, head_dim)，合并又用了 view(b, T, d_out)，"
        "两处都没有转置：这样每个“头”里混着不同 token 的特征；请用 "
        "view(b, T, num_heads, head_dim).transpose(1, 2)，合并前再转置回来",
    ),
    "mutant.softmax_overflow": (
        "softmax without subtracting the row max: exp() overflows to inf for large scores and "
        "the weights become NaN; use torch.softmax (or subtract scores.amax(-1, keepdim=True))",
        "softmax 没有先减去每行的最大值：分数很大时 exp() 溢出成 inf，权重变成 NaN；请用 "
        "torch.softmax（或先减去 scores.amax(-1, keepdim=True)）",
    ),
    "mutant.grad_detached_kv": (
        "no gradient reaches W_key and W_value: keys/values are .detach()ed (or rebuilt from "
        ".data); keep them in the autograd graph",
        "梯度传不到 W_key 和 W_value：键/值被 .detach() 了（或用 .data 重新构造）；要让它们留在 autograd 的计算图里",
    ),
    "mutant.grad_detached_weights": (
        "no gradient flows through the attention weights to W_query and W_key: they are "
        ".detach()ed or computed outside autograd (.numpy(), .tolist(), "
        "torch.tensor(...))",
        "梯度无法经过注意力权重传到 W_query 和 W_key：权重被 .detach() 了，或是在 autograd "
        "之外算的（.numpy()、.tolist()、torch.tensor(...)）",
    ),
    "mutant.grad_none": (
        "the output carries no gradient: forward runs under torch.no_grad() (or detaches its result), "
        "so the module could never be trained",
        "输出不带梯度：forward 在 torch.no_grad() 下运行（或把结果 detach 了），这样的模块根本没法训练",
    ),
    **case_titles(
        {
            "gradients of the parameters and the input": "参数和输入的梯度",
            "scores in the hundreds (a large key bias)": "分数上百（键的 bias 很大）",
            "training mode, dropout 0.5": "训练模式，dropout 0.5",
        }
    ),
}
