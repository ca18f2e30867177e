"""The exercises: contracts, the grader's cases, and one parameterized reference forward with its mutants.

Every known misconception is a ``Variant`` of the same functional forward (one home for the logic);
the grader runs the learner's module and each variant on the same parameters and inputs, and names
the variant whose outputs the learner's reproduce.
"""
from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F

from .messages import Msg

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
    softmax: str = "stable"     # stable | naive (exp / sum without subtracting the row max)
    mask: str = "causal"        # causal | none | inverted | zero_fill | after_softmax | diagonal | top_left
                                # | unsliced | square_slice | first_chunk_only
    fill: float = float("-inf")  # value written into hidden scores
    split: str = "ok"           # ok | no_transpose
    merge: str = "ok"           # ok | no_transpose
    out_proj: bool = True
    keys_from: str = "W_key"    # which projection makes the keys
    values_from: str = "W_value"
    kv_layout: str = "interleave"  # interleave | tile | group0
    cache: str = "ok"           # ok | only_new | not_updated | wrong_axis | own_state
    wrapper: str = "ok"         # ok | shared | sum | cat_tokens
    grad: str = "ok"            # ok | detach_kv | detach_weights | no_grad


@dataclass(frozen=True)
class Mutant:
    key: str
    message: str
    variant: Variant
    outputs_only: bool = False  # match on the outputs alone (a cache kept inside the module returns anything)


@dataclass
class Call:
    """One call of the learner's module. ``past``: None, the index of an earlier call whose ``present`` is
    passed back, or "given" (the case's own past, which the module never produced)."""
    x: torch.Tensor
    train: bool = False
    seed: int = 0
    grad: torch.Tensor | None = None  # cotangent: the learner's backward of (out * grad).sum()
    past: int | str | None = None
    use_cache: bool | None = None     # None: forward(x); a bool: forward(x, past_key_value=..., use_cache=...)
    kwargs: dict = field(default_factory=dict)  # more keyword arguments of forward (MLA's absorb)
    args: tuple | None = None         # a function exercise: fn(*args) instead of a module's forward
    tile_bound: int | None = None     # a function exercise: the largest float tensor a tiled computation makes


@dataclass
class Case:
    """One configuration: constructor arguments, parameters (by name) and the calls to make."""
    name: str
    ctor: dict
    params: dict
    calls: list
    kind: str = "plain"          # plain | grad | train | large | cache
    given_past: tuple | None = None
    meta: dict = field(default_factory=dict)

    @property
    def x(self):
        return self.calls[0].x


class NoGradient(Exception):
    """The reference variant's output carries no gradient (the learner's forward ran under no_grad)."""
    where = "backward"


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


def _softmax(scores, v: Variant):
    if v.softmax == "naive":
        e = torch.exp(scores)
        return e / e.sum(dim=v.softmax_dim, keepdim=True)
    return torch.softmax(scores, dim=v.softmax_dim)


def _core(q, k, val, v: Variant, cfg, past_len):
    """Scaled dot-product attention with the variant's mistakes. q (B, h, Sq, hd), k/val (B, h, Sk, hd)."""
    hd = q.shape[-1]
    scale = {"head_dim": math.sqrt(hd), "d_out": math.sqrt(cfg["d_out"]), "d_in": math.sqrt(cfg["d_in"]),
             "none": 1.0, "no_sqrt": float(hd)}[v.scale]
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
        present = {"ok": (k_all, v_all), "wrong_axis": (k_all, v_all), "own_state": (k_all, v_all),
                   "only_new": (k, val), "not_updated": past if past is not None else (k, val)}[v.cache]
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


def _with_grad(exercise, case: Case, v: Variant, call: Call, tag: str) -> dict:
    """Outputs of one call with gradients of the input and of every parameter, as the learner's backward
    of (out * call.grad).sum() computes them."""
    if v.grad == "no_grad":
        raise NoGradient("the output carries no gradient")
    params = {k: t.detach().clone().requires_grad_(True) for k, t in case.params.items()}
    x = call.x.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        out = reference_forward(exercise, params, x, case.ctor, v)
        if out.shape != call.grad.shape:  # the wrong shape is what gets reported, as for the learner
            return {f"{tag}.out": out.detach()}
        (out * call.grad).sum().backward()
    absent = case.meta.get("absent", ())  # biases the learner's class does not have: no gradient to compare
    grads = {f"{tag}.grad.x": x.grad}
    grads.update({f"{tag}.grad.{k}": (t.grad if t.grad is not None else torch.zeros_like(t))
                  for k, t in params.items() if k not in absent})
    return {f"{tag}.out": out.detach(), **grads}


def expected_outputs(exercise, case: Case, v: Variant = Variant()):
    """Run the variant the way the learner's module is run: {name: tensor or None}; raises where the variant
    crashes (``case.meta['step']`` says at which call). Training-mode calls are checked separately
    (``dropout_problem``) and have no expected value."""
    if exercise in _BEYOND:
        return specs_beyond.expected_outputs(exercise, case, v)
    outs, presents, state = {}, {}, None
    for i, call in enumerate(case.calls):
        tag = f"step{i + 1}"
        case.meta["step"] = i + 1
        if call.train:
            continue
        if call.grad is not None:
            outs.update(_with_grad(exercise, case, v, call, tag))
            continue
        with torch.no_grad():
            if call.use_cache is None:
                outs[f"{tag}.out"] = reference_forward(exercise, case.params, call.x, case.ctor, v)
                continue
            past = (presents[call.past] if isinstance(call.past, int) else
                    case.given_past if call.past == "given" else None)
            if v.cache == "own_state":  # the module keeps its own K/V and ignores past_key_value
                past = state if call.past is not None else None
            out, present = reference_forward(exercise, case.params, call.x, case.ctor, v, past=past,
                                             use_cache=call.use_cache)
            if v.cache == "own_state" and call.use_cache:
                state = present
            presents[i] = present
            outs[f"{tag}.out"] = out
            outs[f"{tag}.keys"] = None if present is None else present[0]
            outs[f"{tag}.values"] = None if present is None else present[1]
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


def random_params(shapes: dict, g) -> dict:
    """Parameters drawn for a case: weights N(0, (1.5 / sqrt(fan_in))^2), biases N(0, 0.2^2), so that the
    scores are far from uniform and a wrong scale or mask changes the output a lot."""
    return {name: torch.randn(shape, generator=g) * (1.5 / math.sqrt(shape[-1]) if len(shape) == 2 else 0.2)
            for name, shape in shapes.items()}


def _draw_params(exercise, ctor, g):
    return random_params(param_shapes(exercise, ctor), g)


def _seed(g) -> int:
    return int(torch.randint(0, 2 ** 31 - 1, (1,), generator=g))


def _shift_scores(params, x, g, size=400.0):
    """Make the scores large without making the softmax one-hot: a large key bias b adds q_i · b to every
    score of query i, a shift softmax ignores and exp() does not (it overflows or underflows)."""
    for name in [n for n in params if n.endswith("W_key.bias")]:
        q = F.linear(x, params[name.replace("W_key.bias", "W_query.weight")])
        typical = q.norm(dim=-1).mean().item() + 1e-6
        direction = torch.randn(params[name].shape, generator=g)
        params[name] = direction / direction.norm() * (size / typical) * math.sqrt(params[name].numel())


def _case(exercise, name, g, x_shape, steps=None, large=False, **ctor):
    """A case with a fresh draw of parameters and input. ``steps``: kv_cache chunks
    (start, end, use_cache, pass_past) over one sequence. ``large``: scores in the hundreds (see
    ``_shift_scores``), with biases on."""
    ctor.setdefault("qkv_bias", large)
    params = _draw_params(exercise, ctor, g)
    x = torch.randn(x_shape, generator=g)
    if large:
        _shift_scores(params, x, g)
    if steps is None:
        calls = [Call(x, seed=_seed(g), use_cache=False if exercise == "kv_cache" else None)]
    else:
        calls, last = [], None
        for i, (start, end, use_cache, pass_past) in enumerate(steps):
            calls.append(Call(x[:, start:end], seed=_seed(g), past=last if pass_past else None, use_cache=use_cache))
            if use_cache:
                last = i
    # float32 scores in the hundreds carry rounding errors of ~1e-5 that fused kernels and matmul orders
    # place differently: the large case compares with a looser tolerance (mistakes differ by far more)
    meta = {"x_full": x, **({"tol": (2e-3, 2e-4)} if large else {})}
    return Case(name, ctor, params, calls, kind="large" if large else "cache" if steps else "plain", meta=meta)


def _grad_case(exercise, name, g, x_shape, **ctor):
    case = _case(exercise, name, g, x_shape, **ctor)
    out = reference_forward(exercise, case.params, case.x, case.ctor)
    out = out[0] if isinstance(out, tuple) else out
    case.calls[0].grad = torch.randn(out.shape, generator=g)
    case.kind = "grad"
    return case


def _train_case(exercise, name, g, batch, tokens, **ctor):
    """Dropout made visible: token t's input is the one-hot e_t and each head's values are the one-hot e_t
    too, so every element of a head's context vector is one attention weight; out_proj is orthogonal.
    The module is called in eval mode, then in training mode on the same input."""
    ctor.setdefault("qkv_bias", False)
    params = _draw_params(exercise, ctor, g)
    d_in, d_out = ctor["d_in"], ctor["d_out"]
    x = torch.eye(tokens, d_in).expand(batch, tokens, d_in).clone()
    for prefix in ([f"heads.{i}." for i in range(ctor["num_heads"])] if exercise == "wrapper" else [""]):
        w = params[prefix + "W_value.weight"]
        hd = d_out if exercise in ("causal", "wrapper") else d_out // ctor["num_heads"]
        w.zero_()
        for head in range(w.shape[0] // hd):
            w[head * hd:head * hd + tokens, :tokens] = torch.eye(tokens)
        if prefix + "W_value.bias" in params:
            params[prefix + "W_value.bias"].zero_()
    if "out_proj.weight" in params:
        params["out_proj.weight"] = torch.linalg.qr(torch.randn(d_out, d_out, generator=g))[0]
        params["out_proj.bias"] = torch.zeros(d_out)
    use_cache = False if exercise == "kv_cache" else None
    calls = [Call(x, seed=_seed(g), use_cache=use_cache), Call(x, train=True, seed=_seed(g), use_cache=use_cache)]
    return Case(name, ctor, params, calls, kind="train", meta={"tokens": tokens})


def _given_past_case(exercise, name, g, batch, n_past, n_new, **ctor):
    """A past the module never produced: keys and values of earlier tokens handed in directly."""
    case = _case(exercise, name, g, (batch, n_new, ctor["d_in"]), **ctor)
    heads, hd = ctor["num_heads"], ctor["d_out"] // ctor["num_heads"]
    case.given_past = (torch.randn(batch, heads, n_past, hd, generator=g),
                       torch.randn(batch, heads, n_past, hd, generator=g))
    case.calls = [Call(case.x, seed=_seed(g), past="given", use_cache=True)]
    case.kind = "cache"
    return case


def _interleaved_case(exercise, name, g, batch, **ctor):
    """Two sequences decoded in turns with their own caches: A's prompt, B's prompt, A's next chunk, B's."""
    d_in = ctor["d_in"]
    ctor.setdefault("qkv_bias", False)
    params = _draw_params(exercise, ctor, g)
    a, b = torch.randn(batch, 5, d_in, generator=g), torch.randn(batch, 5, d_in, generator=g)
    calls = [Call(a[:, :3], seed=_seed(g), use_cache=True), Call(b[:, :2], seed=_seed(g), use_cache=True),
             Call(a[:, 3:5], seed=_seed(g), past=0, use_cache=True), Call(b[:, 2:5], seed=_seed(g), past=1,
                                                                          use_cache=True)]
    return Case(name, ctor, params, calls, kind="cache")


def new_seed() -> int:
    """A fresh secret seed: the learner's code cannot know the cases in advance."""
    return secrets.randbits(62)


def make_cases(exercise, seed: int | None = None) -> list[Case]:
    """The exercise's cases, drawn from ``seed`` (a fresh secret one when None). The shapes are fixed and
    chosen to expose the usual bugs: several heads, d_in < d_out and d_in > d_out, sequences shorter than
    context_length, batch > 1, dropout > 0 in eval mode; the values are new every time."""
    if exercise not in EXERCISES:
        raise ValueError(f"unknown exercise {exercise!r}; known: {', '.join(EXERCISES)}")
    g = torch.Generator().manual_seed(new_seed() if seed is None else seed)
    ex = exercise
    if ex in _BEYOND:
        return specs_beyond.make_cases(ex, g)
    if ex == "self_attention":
        return [
            _case(ex, "d_in=3 > d_out=2, batch 2, 6 tokens", g, (2, 6, 3), d_in=3, d_out=2),
            _case(ex, "d_in=4 < d_out=6, qkv_bias, batch 3, 5 tokens", g, (3, 5, 4), d_in=4, d_out=6, qkv_bias=True),
            _case(ex, "unbatched (5 tokens, d_in=5) input, d_out=3", g, (5, 5), d_in=5, d_out=3),
            _grad_case(ex, "gradients of the parameters and the input", g, (2, 5, 4), d_in=4, d_out=3),
            _case(ex, "scores in the hundreds (a large key bias)", g, (2, 5, 4), large=True, d_in=4, d_out=4),
        ]
    if ex == "causal":
        return [
            _case(ex, "d_in=3, d_out=2, 6 tokens = context_length, dropout 0.5", g, (2, 6, 3),
                  d_in=3, d_out=2, context_length=6, dropout=0.5),
            _case(ex, "d_in=4 < d_out=6, 5 tokens < context_length=8, batch 3", g, (3, 5, 4),
                  d_in=4, d_out=6, context_length=8, dropout=0.1),
            _case(ex, "d_in=6 > d_out=4, qkv_bias, 4 tokens < context_length=7", g, (2, 4, 6),
                  d_in=6, d_out=4, context_length=7, dropout=0.0, qkv_bias=True),
            _grad_case(ex, "gradients of the parameters and the input", g, (2, 5, 4),
                       d_in=4, d_out=3, context_length=6, dropout=0.0),
            _train_case(ex, "training mode, dropout 0.5", g, 4, 5, d_in=6, d_out=6, context_length=7, dropout=0.5),
            _case(ex, "scores in the hundreds (a large key bias)", g, (2, 5, 4), large=True,
                  d_in=4, d_out=4, context_length=6, dropout=0.0),
        ]
    if ex == "wrapper":
        return [
            _case(ex, "2 heads, d_in=3, d_out=2, 6 tokens = context_length", g, (2, 6, 3),
                  d_in=3, d_out=2, context_length=6, dropout=0.5, num_heads=2),
            _case(ex, "3 heads, d_in=4 < d_out=5, 5 tokens < context_length=8", g, (2, 5, 4),
                  d_in=4, d_out=5, context_length=8, dropout=0.1, num_heads=3),
            _case(ex, "2 heads, d_in=6 > d_out=2, qkv_bias, 4 tokens < context_length=5", g, (3, 4, 6),
                  d_in=6, d_out=2, context_length=5, dropout=0.0, num_heads=2, qkv_bias=True),
            _grad_case(ex, "gradients of the parameters and the input", g, (2, 5, 4),
                       d_in=4, d_out=3, context_length=6, dropout=0.0, num_heads=2),
            _train_case(ex, "training mode, dropout 0.5", g, 4, 5, d_in=5, d_out=5, context_length=6, dropout=0.5,
                        num_heads=2),
            _case(ex, "scores in the hundreds (a large key bias)", g, (2, 5, 4), large=True,
                  d_in=4, d_out=3, context_length=6, dropout=0.0, num_heads=2),
        ]
    if ex in ("mha", "mha_interview"):
        return [
            _case(ex, "3 heads, d_in=4 < d_out=12, 5 tokens < context_length=8, dropout 0.5", g, (2, 5, 4),
                  d_in=4, d_out=12, context_length=8, dropout=0.5, num_heads=3),
            _case(ex, "2 heads, d_in=10 > d_out=6, 6 tokens = context_length, batch 3", g, (3, 6, 10),
                  d_in=10, d_out=6, context_length=6, dropout=0.1, num_heads=2),
            _case(ex, "4 heads, d_in=6, d_out=8, qkv_bias, 7 tokens < context_length=9", g, (2, 7, 6),
                  d_in=6, d_out=8, context_length=9, dropout=0.0, num_heads=4, qkv_bias=True),
            _grad_case(ex, "gradients of the parameters and the input", g, (2, 5, 6),
                       d_in=6, d_out=8, context_length=7, dropout=0.0, num_heads=2, qkv_bias=True),
            _train_case(ex, "training mode, dropout 0.5", g, 4, 5, d_in=6, d_out=12, context_length=7, dropout=0.5,
                        num_heads=2),
            _case(ex, "scores in the hundreds (a large key bias)", g, (2, 5, 6), large=True,
                  d_in=6, d_out=8, context_length=6, dropout=0.0, num_heads=2),
        ]
    if ex == "kv_cache":
        return [
            _case(ex, "3 heads, d_in=4 < d_out=12: chunks of 3, 2, 1 tokens with the cache, then no cache", g,
                  (2, 7, 4), steps=[(0, 3, True, False), (3, 5, True, True), (5, 6, True, True),
                                    (0, 7, False, False)],
                  d_in=4, d_out=12, context_length=8, dropout=0.5, num_heads=3),
            _case(ex, "2 heads, d_in=6 > d_out=4, qkv_bias: chunks of 3, 1, 2 tokens with the cache", g,
                  (1, 6, 6), steps=[(0, 3, True, False), (3, 4, True, True), (4, 6, True, True)],
                  d_in=6, d_out=4, context_length=6, dropout=0.0, num_heads=2, qkv_bias=True),
            _case(ex, "2 heads, d_in=5, d_out=6: prompt of 2 tokens, then one token at a time", g,
                  (2, 4, 5), steps=[(0, 2, True, False), (2, 3, True, True), (3, 4, True, True)],
                  d_in=5, d_out=6, context_length=5, dropout=0.1, num_heads=2),
            _given_past_case(ex, "a past_key_value the module did not produce (3 cached tokens, 2 new)", g, 2, 3, 2,
                             d_in=5, d_out=8, context_length=8, dropout=0.0, num_heads=2),
            _interleaved_case(ex, "two sequences decoded in turns, each with its own cache", g, 2,
                              d_in=4, d_out=6, context_length=8, dropout=0.0, num_heads=2),
            _train_case(ex, "training mode, dropout 0.5", g, 4, 5, d_in=6, d_out=12, context_length=7, dropout=0.5,
                        num_heads=2),
            _case(ex, "scores in the hundreds (a large key bias)", g, (2, 5, 6), large=True,
                  d_in=6, d_out=8, context_length=6, dropout=0.0, num_heads=2),
        ]
    if ex == "gqa":
        return [
            _case(ex, "4 heads in 2 K/V groups, d_in=6 < d_out=8, 6 tokens < context_length=8", g,
                  (2, 6, 6), d_in=6, d_out=8, context_length=8, dropout=0.5, num_heads=4, num_kv_groups=2),
            _case(ex, "6 heads in 3 K/V groups, d_in=14 > d_out=12, 6 tokens = context_length", g,
                  (3, 6, 14), d_in=14, d_out=12, context_length=6, dropout=0.1, num_heads=6, num_kv_groups=3),
            _case(ex, "MQA: 4 heads, 1 K/V group, qkv_bias, 5 tokens < context_length=9", g, (2, 5, 8),
                  d_in=8, d_out=8, context_length=9, dropout=0.0, num_heads=4, num_kv_groups=1, qkv_bias=True),
            _case(ex, "MHA as GQA: 2 heads, 2 groups, d_in=3, d_out=4", g, (2, 4, 3),
                  d_in=3, d_out=4, context_length=6, dropout=0.2, num_heads=2, num_kv_groups=2),
            _grad_case(ex, "gradients of the parameters and the input", g, (2, 5, 6),
                       d_in=6, d_out=8, context_length=7, dropout=0.0, num_heads=4, num_kv_groups=2),
            _train_case(ex, "training mode, dropout 0.5", g, 4, 5, d_in=6, d_out=20, context_length=7, dropout=0.5,
                        num_heads=4, num_kv_groups=2),
            _case(ex, "scores in the hundreds (a large key bias)", g, (2, 5, 6), large=True,
                  d_in=6, d_out=8, context_length=6, dropout=0.0, num_heads=4, num_kv_groups=2),
        ]
    raise ValueError(f"unknown exercise {exercise!r}")


def make_square_cases(exercise, seed: int | None = None) -> list[Case]:
    """Interview mode's cases for a class in another dialect than the book's: d_in = d_out = d_model, and
    biases on every projection (zeroed for the projections the candidate's class has no bias on)."""
    g = torch.Generator().manual_seed(new_seed() if seed is None else seed)
    ex, common = exercise, {"qkv_bias": True}
    return [
        _case(ex, "d_model=12, 3 heads, 5 tokens, dropout 0.5", g, (2, 5, 12), d_in=12, d_out=12,
              context_length=8, dropout=0.5, num_heads=3, **common),
        _case(ex, "d_model=8, 2 heads, 6 tokens, batch 3", g, (3, 6, 8), d_in=8, d_out=8, context_length=6,
              dropout=0.1, num_heads=2, **common),
        _case(ex, "d_model=8, 4 heads, 7 tokens", g, (2, 7, 8), d_in=8, d_out=8, context_length=9, dropout=0.0,
              num_heads=4, **common),
        _grad_case(ex, "gradients of the parameters and the input", g, (2, 5, 8), d_in=8, d_out=8,
                   context_length=7, dropout=0.0, num_heads=2, **common),
        _train_case(ex, "training mode, dropout 0.5", g, 4, 5, d_in=12, d_out=12, context_length=7, dropout=0.5,
                    num_heads=2, qkv_bias=True),
        _case(ex, "scores in the hundreds (a large key bias)", g, (2, 5, 8), large=True, d_in=8, d_out=8,
              context_length=6, dropout=0.0, num_heads=2, **common),
    ]


def without_biases(case: Case, roles) -> Case:
    """``case`` with the biases of the given projections (q, k, v, o) set to zero: what a candidate's class
    without those biases computes."""
    names = {"q": "W_query.bias", "k": "W_key.bias", "v": "W_value.bias", "o": "out_proj.bias"}
    absent = {names[r] for r in roles}
    params = {k: (torch.zeros_like(t) if k in absent else t) for k, t in case.params.items()}
    meta = {k: v for k, v in case.meta.items() if k != "expected"}
    return replace(case, params=params, meta={**meta, "absent": absent})


def cached_outputs(exercise, case: Case, v: Variant):
    """expected_outputs, memoized on the case; an exception is returned (not raised) for crashing variants."""
    memo = case.meta.setdefault("expected", {})
    if v not in memo:
        case.meta["step"] = 1
        try:
            memo[v] = expected_outputs(exercise, case, v)
        except Exception as exc:  # noqa: BLE001 - the mistake makes the reference crash too
            exc.step = case.meta["step"]
            exc.where = getattr(exc, "where", "forward")
            memo[v] = exc
    return memo[v]


# ---------------------------------------------------------------------------------------------
# the misconception catalogue: diagnosis keys (their learner-facing texts are in messages.py)

_CAUSAL = Variant()
_PLAIN = Variant(mask="none")


def _mistake(key: str, text: str | None = None):
    """(diagnosis key, its text): the text is messages.py's 'mutant.<text or key>', in English and Chinese."""
    return key, Msg("mutant." + (text or key))


M_NO_SCALE = _mistake("no_scale")
M_NO_SQRT = _mistake("scale_no_sqrt")
M_SCALE_D_OUT = _mistake("scale_d_out")
M_SCALE_D_IN = _mistake("scale_d_in")
M_SOFTMAX = _mistake("softmax_wrong_axis")
M_SOFTMAX_HEADS = _mistake("softmax_wrong_axis", "softmax_heads_axis")
M_INVERTED = _mistake("mask_inverted")
M_ZERO_FILL = _mistake("mask_zero_fill")
M_AFTER_SOFTMAX = _mistake("mask_after_softmax")
M_DIAGONAL = _mistake("diagonal_masked")
M_NO_MASK = _mistake("no_causal_mask")
M_UNSLICED = _mistake("mask_not_sliced")
M_KEYS_Q = _mistake("keys_from_query")
M_VALUES_K = _mistake("values_from_key")
M_SPLIT = _mistake("split_no_transpose")
M_MERGE = _mistake("merge_no_transpose")
M_NO_OUT = _mistake("no_out_proj")
M_CAUSAL_SA = _mistake("causal_in_self_attention")
M_SHARED = _mistake("wrapper_shared_weights")
M_SUM = _mistake("wrapper_summed")
M_CAT_TOKENS = _mistake("wrapper_cat_wrong_axis")
M_TILED = _mistake("kv_tiled")
M_GROUP0 = _mistake("kv_one_group")
M_TOP_LEFT = _mistake("mask_top_left")
M_FIRST_ONLY = _mistake("mask_only_without_cache")
M_SQUARE = _mistake("mask_square_slice")
M_ONLY_NEW = _mistake("cache_only_new")
M_NOT_UPDATED = _mistake("cache_not_updated")
M_WRONG_AXIS = _mistake("cache_wrong_axis")
M_NAIVE_SOFTMAX = _mistake("softmax_overflow")
M_DETACH_KV = _mistake("grad_detached_kv")
M_DETACH_WEIGHTS = _mistake("grad_detached_weights")
M_NO_GRAD = _mistake("grad_none")
M_LEAVES_AUTOGRAD = _mistake("grad_leaves_autograd")
M_SPLIT_MERGE = _mistake("split_merge_no_transpose")
M_IGNORES_PAST = _mistake("cache_ignores_past")
DROPOUT_IGNORED = _mistake("dropout_ignored")
DROPOUT_ON_SCORES = _mistake("dropout_on_scores")
DROPOUT_ON_OUTPUT = _mistake("dropout_on_output")
DROPOUT_WRONG = _mistake("dropout_wrong")
DROPOUT_EVAL = _mistake("dropout_in_eval")
NOT_IMPLEMENTED = "not_implemented"


def _m(pair, variant, outputs_only=False):
    return Mutant(pair[0], pair[1], variant, outputs_only)


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


def _grad_mutants(base: Variant):
    """Mistakes only the gradients (and large scores) show: the eval-mode outputs are right."""
    return [_m(M_NAIVE_SOFTMAX, replace(base, softmax="naive")),
            _m(M_NO_GRAD, replace(base, grad="no_grad")),
            _m(M_DETACH_KV, replace(base, grad="detach_kv")),
            _m(M_DETACH_WEIGHTS, replace(base, grad="detach_weights"))]


def _heads_mutants(base: Variant):
    return [_m(M_SPLIT_MERGE, replace(base, split="no_transpose", merge="no_transpose")),
            _m(M_SPLIT, replace(base, split="no_transpose")),
            _m(M_MERGE, replace(base, merge="no_transpose")),
            _m(M_NO_OUT, replace(base, out_proj=False))]


def mutants(exercise) -> list[Mutant]:
    """Known-wrong variants for ``exercise``, most specific first."""
    if exercise in _BEYOND:
        return specs_beyond.mutants(exercise)
    if exercise == "self_attention":
        return [_m(M_NO_SCALE, replace(_PLAIN, scale="none")), _m(M_NO_SQRT, replace(_PLAIN, scale="no_sqrt")),
                _m(M_SCALE_D_IN, replace(_PLAIN, scale="d_in")),
                _m(M_SOFTMAX, replace(_PLAIN, softmax_dim=-2)), _m(M_KEYS_Q, replace(_PLAIN, keys_from="W_query")),
                _m(M_VALUES_K, replace(_PLAIN, values_from="W_key")),
                _m(M_CAUSAL_SA, _CAUSAL)] + _grad_mutants(_PLAIN)
    if exercise == "causal":
        return [_m(M_NO_SCALE, replace(_CAUSAL, scale="none")), _m(M_SOFTMAX, replace(_CAUSAL, softmax_dim=-2)),
                _m(M_KEYS_Q, replace(_CAUSAL, keys_from="W_query"))] + _causal_common(_CAUSAL) + \
            _grad_mutants(_CAUSAL)
    if exercise == "wrapper":
        return [_m(M_SHARED, replace(_CAUSAL, wrapper="shared")), _m(M_SUM, replace(_CAUSAL, wrapper="sum")),
                _m(M_CAT_TOKENS, replace(_CAUSAL, wrapper="cat_tokens")),
                _m(M_NO_SCALE, replace(_CAUSAL, scale="none")),
                _m(M_SOFTMAX, replace(_CAUSAL, softmax_dim=-2))] + _causal_common(_CAUSAL) + _grad_mutants(_CAUSAL)
    if exercise in ("mha", "mha_interview", "gqa"):
        found = [_m(M_SCALE_D_OUT, replace(_CAUSAL, scale="d_out")), _m(M_SCALE_D_IN, replace(_CAUSAL, scale="d_in")),
                 _m(M_NO_SCALE, replace(_CAUSAL, scale="none")), _m(M_NO_SQRT, replace(_CAUSAL, scale="no_sqrt")),
                 _m(M_SOFTMAX, replace(_CAUSAL, softmax_dim=-2)), _m(M_SOFTMAX_HEADS, replace(_CAUSAL, softmax_dim=1))]
        found += _heads_mutants(_CAUSAL)
        if exercise == "gqa":
            found = [_m(M_TILED, replace(_CAUSAL, kv_layout="tile")),
                     _m(M_GROUP0, replace(_CAUSAL, kv_layout="group0"))] + found
        else:
            found += [_m(M_KEYS_Q, replace(_CAUSAL, keys_from="W_query")),
                      _m(M_VALUES_K, replace(_CAUSAL, values_from="W_key"))]
        return found + _causal_common(_CAUSAL) + _grad_mutants(_CAUSAL)
    if exercise == "kv_cache":
        return [_m(M_TOP_LEFT, replace(_CAUSAL, mask="top_left")),
                _m(M_FIRST_ONLY, replace(_CAUSAL, mask="first_chunk_only")),
                _m(M_SQUARE, replace(_CAUSAL, mask="square_slice")),
                _m(M_ONLY_NEW, replace(_CAUSAL, cache="only_new")),
                _m(M_NOT_UPDATED, replace(_CAUSAL, cache="not_updated")),
                _m(M_WRONG_AXIS, replace(_CAUSAL, cache="wrong_axis")),
                _m(M_IGNORES_PAST, replace(_CAUSAL, cache="own_state"), outputs_only=True),
                _m(M_SCALE_D_OUT, replace(_CAUSAL, scale="d_out"))] + _heads_mutants(_CAUSAL) + \
            _causal_common(_CAUSAL) + [_m(M_NAIVE_SOFTMAX, replace(_CAUSAL, softmax="naive"))]
    raise ValueError(f"unknown exercise {exercise!r}; known: {', '.join(EXERCISES)}")


def mutant_pairs(exercise) -> list[Mutant]:
    """Two known mistakes at once, named together: the combinations of mutants that change different flags."""
    singles, seen, pairs = mutants(exercise), set(), []
    base = correct_variant(exercise)
    for i, a in enumerate(singles):
        for b in singles[i + 1:]:
            if a.key == b.key or a.outputs_only or b.outputs_only:
                continue
            fa = {f for f in base.__dataclass_fields__ if getattr(a.variant, f) != getattr(base, f)}
            fb = {f for f in base.__dataclass_fields__ if getattr(b.variant, f) != getattr(base, f)}
            if not fa or not fb or fa & fb:
                continue
            combined = replace(a.variant, **{f: getattr(b.variant, f) for f in fb})
            if combined in seen:
                continue
            seen.add(combined)
            pairs.append(Mutant(f"{a.key}+{b.key}", Msg("two_mistakes", first=a.message, second=b.message), combined))
    return pairs


def correct_variant(exercise) -> Variant:
    if exercise in _BEYOND:
        return specs_beyond.correct_variant(exercise)
    return _PLAIN if exercise == "self_attention" else _CAUSAL


# ---------------------------------------------------------------------------------------------
# exercises 08-10 (rope, online_softmax, mla) live in specs_beyond; registered here, routed above
from . import specs_beyond  # noqa: E402  (it needs Call, Case and Mutant from this module)

_BEYOND = frozenset(specs_beyond.EXERCISES)
EXERCISES = EXERCISES + specs_beyond.EXERCISES
CONTRACT_CLASS.update(specs_beyond.CONTRACT_CLASS)
CONTRACT_ARGS.update(specs_beyond.CONTRACT_ARGS)
FUNCTION_EXERCISES = frozenset(specs_beyond.FUNCTION_EXERCISES)  # graded as functions, not classes
