"""Exercises 08-10 (RoPE with a KV cache, the online softmax, MLA): the building blocks of their cases, the
reference computations with their mutants. Each exercise declares its cases, mutants and contract in
``grade/exercises/``. The sandboxed harness calls the submission as each case's calls say (extra keyword arguments
such as ``absorb``, the names of the cache's two parts, or a plain function call).

As in ``specs``, every misconception is a flag of one reference computation (``RopeVariant``, ``OnlineVariant``,
``MlaVariant``), run on the grader's parameters and inputs; the verdict names the variant the learner reproduces.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from .messages import Msg
from .specs import draw_seed, random_params
from .types import Call, Case, Mutant

# ---------------------------------------------------------------------------------------------
# variants: the correct computation and each misconception as flags

@dataclass(frozen=True)
class RopeVariant:
    positions: str = "ok"       # ok | restart (every call starts at 0)
    rotate_v: bool = False
    layout: str = "half"        # half | interleaved | half_angles_pairs | pair_angles_half (one layout's angles,
                                # the other's pairs)
    exponent: str = "ok"        # ok | shifted (theta_i = base^(-2(i+1)/d)) | odd (base^(-(2i+1)/d))
                                # | no_two (base^(-i/d))
    softmax_dim: int = -1       # -1 keys | -2 queries | 1 heads | 0 batch
    freq_dim: str = "head_dim"  # head_dim | d_out
    cache: str = "before"       # before | after_double (rotate the concatenated keys) | after_raw (cache unrotated)
    rope: bool = True
    direction: int = 1          # 1 | -1 (rotated the wrong way)
    mask: str = "ok"            # ok | top_left
    own_cache: bool = False     # keeps its own cache and ignores the past_key_value it is handed


@dataclass(frozen=True)
class OnlineVariant:
    update_max: bool = True     # False: m = m_new forgotten
    lse_from: str = "m"         # m | m_new (with update_max False) | none (lse = log(l))
    subtract_max: bool = True   # False: exp of the raw scores (overflows)
    rescale_out: bool = True
    rescale_sum: bool = True
    divide: str = "end"         # end | tile (divide each tile's p @ v by the running sum) | running (acc /= l)
    causal_skip: str = "ok"     # ok | diagonal (diagonal tile skipped too)
    fully_masked: str = "nan"   # what a row with no key gives in a buggy variant: nan | zero
    diagonal_mask: bool = True  # False: the diagonal tile is computed without its mask
    scale: bool = True
    materialise: bool = False   # the full score matrix is built (outputs right, "tiled" wrong)


@dataclass(frozen=True)
class MlaVariant:
    cache: str = "latent"       # latent | up_projected | only_new
    rope_on: str = "rope"       # rope | latent (rotate c_kv too) | nope (rotate the up-projected parts too) | none
                                # | absorbed_query | absorbed_latents | absorbed_all: in absorbed steps only, the
                                # absorbed query q_nope @ W_uk rotated (and c_kv for the scores; for the values too)
    positions: str = "ok"       # ok | restart
    absorb_uk: str = "ok"       # ok | transposed (W_uk read as (in, out)) | per_head_in_out | heads_minor
    absorb_uv: str = "ok"       # | t_reshape (see ``_absorbed``), in absorbed steps
    softmax_dim: int = -1       # -1 keys | -2 queries | 1 heads | 0 batch
    scale: str = "head_dim+rope"  # head_dim+rope | head_dim
    mask: str = "ok"            # ok | top_left
    rope_layout: str = "half"   # as RopeVariant.layout, for q_rope and k_rope
    rope_exponent: str = "ok"   # as RopeVariant.exponent
    own_cache: bool = False     # keeps its own cache and ignores the past_key_value it is handed
    absorb: str = "ok"          # ok | ignored (absorb=True runs the explicit path: per-head K/V materialised)

    @property
    def builds_heads_when_absorbed(self) -> bool:
        """Whether an absorbed call of this variant still builds per-head keys/values."""
        return self.absorb == "ignored" or self.cache == "up_projected" or self.rope_on == "nope"


# ---------------------------------------------------------------------------------------------
# shared pieces

def _lin(p, name, x):
    return F.linear(x, p[name + ".weight"], p.get(name + ".bias"))


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def _rotate_pairs(x):
    pairs = x.unflatten(-1, (-1, 2))
    return torch.stack([-pairs[..., 1], pairs[..., 0]], dim=-1).flatten(-2)


_EXPONENTS = {"ok": (0, 2), "shifted": (2, 2), "odd": (1, 2), "no_two": (0, 1)}  # torch.arange(start, ..., step)


def _rope(x, positions, base, layout="half", freq_dim=None, direction=1, exponent="ok"):
    """Rotate x (..., T, d) at integer positions (T,); frequencies base^(-2i/freq_dim), freq_dim = d by default.
    ``layout``: which features pair up (half: i with i + d/2; interleaved: 2i with 2i + 1), or a mix of one layout's
    angle table with the other's pairs; ``exponent``: the correct 2i or a miscounted one (``_EXPONENTS``)."""
    d = x.shape[-1]
    denom = d if freq_dim is None else freq_dim
    start, step = _EXPONENTS[exponent]
    inv_freq = 1.0 / base ** (torch.arange(start, start + step * (d // 2), step, dtype=torch.float64) / denom)
    angles = positions.to(torch.float64)[:, None] * inv_freq  # (T, d/2)
    pair_angles, half_angles = angles.repeat_interleave(2, dim=-1), torch.cat([angles, angles], dim=-1)
    angles, turn = {"interleaved": (pair_angles, _rotate_pairs), "half": (half_angles, _rotate_half),
                    "half_angles_pairs": (half_angles, _rotate_pairs),
                    "pair_angles_half": (pair_angles, _rotate_half)}[layout]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    return x * cos + direction * turn(x) * sin


def _causal_hide(num_q, num_k, mask="ok"):
    offset = 0 if mask == "top_left" else num_k - num_q  # the new queries are the last positions
    return torch.triu(torch.ones(num_q, num_k, dtype=torch.bool), offset + 1)


def _attend(q, k, v, scale, hide, softmax_dim=-1):
    scores = (q @ k.transpose(-2, -1)) / scale
    return torch.softmax(scores.masked_fill(hide, float("-inf")), dim=softmax_dim) @ v


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


def _split(t, heads):
    b, n, width = t.shape
    return t.view(b, n, heads, width // heads).transpose(1, 2)  # (B, heads, n, hd)


# ---------------------------------------------------------------------------------------------
# the reference computations

def rope_forward(p, x, cfg, v: RopeVariant, past=None, use_cache=False):
    """RoPE attention with a (keys, values) cache; returns (out, present)."""
    nh, d_out, base = cfg["num_heads"], cfg["d_out"], cfg["rope_base"]
    b, n, _ = x.shape
    q, k, val = _split(_lin(p, "W_query", x), nh), _split(_lin(p, "W_key", x), nh), _split(_lin(p, "W_value", x), nh)
    past_len = 0 if past is None else past[0].shape[2]
    start = 0 if v.positions == "restart" else past_len
    positions = torch.arange(start, start + n)
    kw = dict(layout=v.layout, freq_dim=d_out if v.freq_dim == "d_out" else None, direction=v.direction,
              exponent=v.exponent)
    rot = (lambda t, pos: _rope(t, pos, base, **kw)) if v.rope else (lambda t, pos: t)
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
    hide = _causal_hide(n, k_all.shape[2], v.mask)
    ctx = _attend(q, k_used, v_all, math.sqrt(d_out // nh), hide, v.softmax_dim)
    out = _lin(p, "out_proj", ctx.transpose(1, 2).reshape(b, n, d_out))
    return out, ((k_all, v_all) if use_cache else None)


def online_forward(q, k, v, block_size, causal, var: OnlineVariant):
    """The canonical tiled loop with the variant's mistakes; returns {out, lse}. q (B, h, Sq, d), k/v (B, h, Sk, d)."""
    num_q, num_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(d) if var.scale else 1.0
    offset = num_k - num_q
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:-1], dtype=q.dtype)
    for qs in range(0, num_q, block_size):
        qe = min(qs + block_size, num_q)
        q_blk = q[..., qs:qe, :]
        m = torch.full(q_blk.shape[:-1], float("-inf"), dtype=q.dtype)
        l = torch.zeros_like(m)
        acc = torch.zeros_like(q_blk)
        m_new = m
        stop = num_k
        if causal:
            stop = min(num_k, offset + qe) if var.causal_skip == "ok" else min(num_k, offset + qs)
        for ks in range(0, stop, block_size):
            ke = min(ks + block_size, num_k)
            s = (q_blk @ k[..., ks:ke, :].transpose(-2, -1)) * scale
            if causal and var.diagonal_mask:
                q_pos = torch.arange(offset + qs, offset + qe)[:, None]
                s = s.masked_fill(torch.arange(ks, ke)[None, :] > q_pos, float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))
            m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            if var.subtract_max:
                p, alpha = torch.exp(s - m_safe[..., None]), torch.exp(m - m_safe)
            else:
                p, alpha = torch.exp(s), torch.ones_like(m)
            l = (alpha * l if var.rescale_sum else l) + p.sum(dim=-1)
            pv = p @ v[..., ks:ke, :]
            if var.divide == "tile":
                pv = pv / l[..., None]
            acc = (alpha[..., None] * acc if var.rescale_out else acc) + pv
            if var.divide == "running":
                acc = acc / l[..., None]
            if var.update_max:
                m = m_new
        if var.divide == "end":
            if var.fully_masked == "zero":
                out[..., qs:qe, :] = torch.where(l[..., None] > 0, acc / torch.where(l > 0, l, 1.0)[..., None], 0.0)
            else:
                out[..., qs:qe, :] = acc / l[..., None]
        else:
            out[..., qs:qe, :] = acc
        lse_max = {"m": m, "m_new": m_new, "none": torch.zeros_like(m)}[var.lse_from]
        if not var.subtract_max:
            lse_max = torch.zeros_like(m)
        lse[..., qs:qe] = lse_max + torch.log(l)
    return {"out": out, "lse": lse}


def mla_forward(p, x, cfg, v: MlaVariant, past=None, use_cache=False, absorb=False):
    """MLA with a (c_kv, k_rope) cache, explicit or absorbed; returns (out, present)."""
    nh, d_out, dc, r = cfg["num_heads"], cfg["d_out"], cfg["kv_latent_dim"], cfg["rope_dim"]
    hd = d_out // nh
    absorb = absorb and v.absorb != "ignored"
    b, n, _ = x.shape
    q = _lin(p, "W_query", x).view(b, n, nh, hd + r).transpose(1, 2)  # (B, nh, n, hd + r)
    q_nope, q_rope = q[..., :hd], q[..., hd:]
    c_kv, k_rope = _lin(p, "W_dkv", x), _lin(p, "W_kr", x)  # (B, n, dc), (B, n, r)
    past_len = 0 if past is None else past[0].shape[2 if v.cache == "up_projected" else 1]
    start = 0 if v.positions == "restart" else past_len
    pos = torch.arange(start, start + n)
    rot = ((lambda t, ps: t) if v.rope_on == "none" else
           (lambda t, ps: _rope(t, ps, 10000.0, layout=v.rope_layout, exponent=v.rope_exponent)))
    q_rope, k_rope = rot(q_rope, pos), rot(k_rope, pos)
    if v.rope_on == "latent":
        c_kv = rot(c_kv, pos)
    if v.rope_on == "nope":
        q_nope = rot(q_nope, pos)
        if v.cache == "up_projected":
            raise ValueError("the up_projected and nope variants are not combined")
    if v.cache == "up_projected":  # the MHA-style cache: per-head full keys [k_nope ; k_rope] and values
        k_new = torch.cat([_split(_lin(p, "W_uk", c_kv), nh), k_rope[:, None].expand(b, nh, n, r)], dim=-1)
        v_new = _split(_lin(p, "W_uv", c_kv), nh)
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
            k_nope = _split(_lin(p, "W_uk", c_all), nh)
            if v.rope_on == "nope":
                k_nope = rot(k_nope, torch.arange(num_keys))
            scores = q_nope @ k_nope.transpose(-2, -1) + rope_scores
        values = _split(_lin(p, "W_uv", c_all), nh)
    scale = math.sqrt(hd + r) if v.scale == "head_dim+rope" else math.sqrt(hd)
    scores = (scores / scale).masked_fill(_causal_hide(n, num_keys, v.mask), float("-inf"))
    weights = torch.softmax(scores, dim=v.softmax_dim)
    if absorb and v.cache != "up_projected" and v.rope_on != "nope":
        w_uv = _absorbed(p["W_uv.weight"], nh, hd, dc, v.absorb_uv)
        c_values = c_scored if v.rope_on == "absorbed_all" else c_all
        ctx = (weights @ c_values[:, None]) @ w_uv.transpose(-2, -1)  # (B, nh, n, dc) -> (B, nh, n, hd)
    else:
        ctx = weights @ values
    out = _lin(p, "out_proj", ctx.transpose(1, 2).reshape(b, n, d_out))
    return out, (present if use_cache else None)


# ---------------------------------------------------------------------------------------------
# cases

def rope_param_shapes(cfg) -> dict:
    """name -> shape of every parameter of RoPE attention (nn.Linear weights are (out, in))."""
    d_in, d_out = cfg["d_in"], cfg["d_out"]
    shapes = {"W_query.weight": (d_out, d_in), "W_key.weight": (d_out, d_in), "W_value.weight": (d_out, d_in)}
    if cfg.get("qkv_bias"):
        shapes.update({"W_query.bias": (d_out,), "W_key.bias": (d_out,), "W_value.bias": (d_out,)})
    shapes.update({"out_proj.weight": (d_out, d_out), "out_proj.bias": (d_out,)})
    return shapes


def mla_param_shapes(cfg) -> dict:
    """name -> shape of every parameter of MLA (nn.Linear weights are (out, in))."""
    d_in, d_out = cfg["d_in"], cfg["d_out"]
    nh, dc, r = cfg["num_heads"], cfg["kv_latent_dim"], cfg["rope_dim"]
    return {"W_query.weight": (nh * (d_out // nh + r), d_in), "W_dkv.weight": (dc, d_in),
            "W_kr.weight": (r, d_in), "W_uk.weight": (d_out, dc), "W_uv.weight": (d_out, dc),
            "out_proj.weight": (d_out, d_out), "out_proj.bias": (d_out,)}


def module_case(param_shapes, present, name, g, x_shape, steps, **ctor):
    """Calls over one sequence: (start, end, use_cache, pass_past[, absorb]) per step; ``present``: the names of
    the cache's two parts."""
    params = random_params(param_shapes(ctor), g)
    x = torch.randn(x_shape, generator=g)
    calls, last = [], None
    for i, step in enumerate(steps):
        start, end, use_cache, pass_past = step[:4]
        kwargs = {"absorb": step[4]} if len(step) > 4 else {}
        calls.append(Call(x[:, start:end], seed=draw_seed(g), past=last if pass_past else None, use_cache=use_cache,
                          kwargs=kwargs))
        if use_cache:
            last = i
    return Case(name, ctor, params, calls, kind="cache", meta={"x_full": x, "present_names": present})


def given_past_module_case(forward, param_shapes, present, name, g, batch, n_past, steps, correct, absorbed_bound=False,
                           **ctor):
    """A past_key_value the module never produced, as a real one would be: the grader's reference run with use_cache
    on ``n_past`` tokens of another prompt, on the case's parameters, handed to the first call; ``steps``:
    (number of new tokens, absorb or None) per call, each later call getting the previous call's present.
    ``absorbed_bound``: the absorbed calls also report whether any tensor as large as the per-head keys of all
    the tokens was built (MLA: the absorbed path never materialises per-head K/V)."""
    params = random_params(param_shapes(ctor), g)
    with torch.no_grad():
        _, given = forward(params, torch.randn(batch, n_past, ctor["d_in"], generator=g), ctor, correct, None, True)
    calls, seen = [], n_past
    for i, (n_new, absorb) in enumerate(steps):
        seen += n_new
        kwargs = {} if absorb is None else {"absorb": absorb}
        # per-head keys of every token seen so far: (B, num_heads, seen, head_dim) elements, d_out = heads * head_dim
        bound = batch * seen * ctor["d_out"] - 1 if absorbed_bound and absorb else None
        calls.append(Call(torch.randn(batch, n_new, ctor["d_in"], generator=g), seed=draw_seed(g),
                          past="given" if i == 0 else i - 1, use_cache=True, kwargs=kwargs, tile_bound=bound,
                          bound_label="absorbed"))
    return Case(name, ctor, params, calls, kind="cache", given_past=given, meta={"present_names": present})


def function_case(name, g, shape_q, shape_k, block_size, causal, scale=1.0, check_tiles=True, peak=False):
    q = torch.randn(shape_q, generator=g) * scale
    k = torch.randn(shape_k, generator=g) * scale
    v = torch.randn(shape_k, generator=g)
    b, h, n_q, d = shape_q
    n_k = shape_k[-2]
    # a tile-sized computation never builds a float tensor larger than the inputs/outputs or a (rows, block) tile
    bound = b * h * max(n_q * max(block_size, d), n_k * d)
    tile_bound = bound if check_tiles and b * h * n_q * n_k > bound else None
    # ``peak``: the process's memory may rise by half a (block, n_k) strip of float32 scores (room for copies of
    # the inputs, in float64 too, when block >> head_dim), measured from outside the learner's code: scores built
    # with NumPy or in another thread count too
    peak_bound = b * h * block_size * n_k * 4 // 2 if peak else None
    call = Call(q, seed=draw_seed(g), args=(q, k, v, block_size, causal), tile_bound=tile_bound, peak_bound=peak_bound)
    return Case(name, {"block_size": block_size, "causal": causal}, {}, [call], kind="function",
                meta={"tile_bound": tile_bound, **({"tol": (2e-3, 2e-4)} if scale != 1.0 else {})})


# ---------------------------------------------------------------------------------------------
# expected outputs (the reference and each variant run the way the learner's code is run)

def online_expected(case, v: OnlineVariant) -> dict:
    """{name: tensor}, named as the harness names the learner's outputs (step1.out, step1.lse, step1.tiled)."""
    with torch.no_grad():
        q, k, val, block_size, causal = case.calls[0].args
        found = online_forward(q, k, val, block_size, causal, v)
        outs = {"step1.out": found["out"], "step1.lse": found["lse"]}
        if case.meta.get("tile_bound") is not None:
            outs["step1.tiled"] = torch.tensor(0.0 if v.materialise else 1.0)
        return outs


def module_expected(forward, case, v) -> dict:
    """{name: tensor or None} of a cached module (``rope_forward``, ``mla_forward``) run the way the learner's is:
    step<i>.out and the two parts of its present."""
    with torch.no_grad():
        outs, presents = {}, {}
        names = case.meta["present_names"]
        own = None  # what a module that keeps its own cache holds
        for i, call in enumerate(case.calls):
            case.meta["step"] = i + 1
            tag = f"step{i + 1}"
            given = (presents[call.past] if isinstance(call.past, int) else
                     case.given_past if call.past == "given" else None)
            if v.own_cache:  # the past handed in is ignored: the module attends to what it cached itself
                given = own if call.past is not None else None
            out, present = forward(case.params, call.x, case.ctor, v, given, call.use_cache, **call.kwargs)
            outs[tag + ".out"] = out
            outs[f"{tag}.{names[0]}"], outs[f"{tag}.{names[1]}"] = (None, None) if present is None else present
            if call.tile_bound is not None:  # the absorbed call's largest tensor (MLA): 0 = per-head K/V built
                builds = getattr(v, "builds_heads_when_absorbed", False)
                outs[f"{tag}.{call.bound_label}"] = torch.tensor(0.0 if builds else 1.0)
            presents[i] = present
            if call.use_cache:
                own = present
        return outs


# ---------------------------------------------------------------------------------------------
# the misconception catalogue: diagnosis keys (their learner-facing texts are in messages.py)


def _mistake(key: str, text: str | None = None):
    """(diagnosis key, its text): the text is messages.py's 'mutant.<text or key>', in English and Chinese."""
    return key, Msg("mutant." + (text or key))


M_ROPE_V = _mistake("rope_on_values")
M_ROPE_RESTART = _mistake("rope_positions_restart")
M_ROPE_PAIRS = _mistake("rope_interleaved_pairs")
M_ROPE_D_MODEL = _mistake("rope_freq_d_model")
M_ROPE_AFTER = _mistake("rope_after_cache")
M_ROPE_MISSING = _mistake("rope_missing")
M_ROPE_DIRECTION = _mistake("rope_wrong_direction")
M_ROPE_EXPONENT = _mistake("rope_exponent_off_by_one")
M_ROPE_NO_TWO = _mistake("rope_exponent_off_by_one", "rope_exponent_no_two")
M_ROPE_HALF_ON_PAIRS = _mistake("rope_layouts_mixed", "rope_half_angles_on_pairs")
M_ROPE_PAIRS_ON_HALF = _mistake("rope_layouts_mixed", "rope_pair_angles_on_half")

M_MAX_STALE = _mistake("max_not_updated")
M_NO_MAX = _mistake("no_running_max")
M_OUT_NOT_RESCALED = _mistake("output_not_rescaled")
M_SUM_NOT_RESCALED = _mistake("sum_not_rescaled")
M_DIVIDE_EARLY = _mistake("divided_too_early")
M_SKIP_DIAGONAL = _mistake("causal_blocks_skipped_wrongly")
M_DIAGONAL_UNMASKED = _mistake("causal_tile_not_masked")
M_LSE = _mistake("lse_without_max")
M_NO_SCALE_OS = _mistake("no_scale", "no_scale_online")
M_MATERIALISED = _mistake("scores_materialised")

M_MLA_UP = _mistake("mla_cache_up_projected")
M_MLA_ROPE_LATENT = _mistake("mla_rope_on_compressed_key")
M_MLA_ROPE_NOPE = _mistake("mla_rope_on_nope")
M_MLA_TRANSPOSE = _mistake("mla_absorb_wrong_transpose")
M_MLA_PER_HEAD_IN_OUT = _mistake("mla_absorb_wrong_transpose", "mla_absorb_per_head_in_out")
M_MLA_HEADS_MINOR = _mistake("mla_absorb_wrong_transpose", "mla_absorb_heads_minor")
M_MLA_T_RESHAPE = _mistake("mla_absorb_wrong_transpose", "mla_absorb_t_reshape")
M_MLA_ROPE_ABSORBED = _mistake("mla_rope_on_absorbed_latents")
M_MLA_SCALE = _mistake("mla_scale_without_rope")
M_MLA_NO_ROPE = _mistake("rope_missing", "rope_missing_mla")
M_ONLY_NEW = _mistake("cache_only_new", "cache_only_new_mla")
M_TOP_LEFT = _mistake("mask_top_left", "mask_top_left_chunk")
M_IGNORES_PAST = _mistake("cache_ignores_past")
M_MLA_ABSORB_IGNORED = _mistake("mla_absorb_ignored")

M_SOFTMAX_QUERIES = _mistake("softmax_wrong_axis")
M_SOFTMAX_HEADS = _mistake("softmax_wrong_axis", "softmax_heads_axis")
M_SOFTMAX_BATCH = _mistake("softmax_wrong_axis", "softmax_batch_axis")


def mutant(pair, variant, outputs_only=False, paired=True):
    """``outputs_only``: matched on the outputs alone (a cache kept inside the module returns anything).
    ``paired=False``: named alone, not tried two at a time with the others (rarer mistakes, whose pairs would
    multiply the grader's work)."""
    return Mutant(pair[0], pair[1], variant, outputs_only, paired)


def softmax_axis_mutants(ok):
    """The softmax over another axis of the (batch, heads, queries, keys) scores than the keys."""
    return [mutant(M_SOFTMAX_QUERIES, replace(ok, softmax_dim=-2), paired=False),
            mutant(M_SOFTMAX_HEADS, replace(ok, softmax_dim=1), paired=False),
            mutant(M_SOFTMAX_BATCH, replace(ok, softmax_dim=0), paired=False)]
