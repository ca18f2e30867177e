"""The exercise author's kit: everything an exercise module (``grade/exercises/<id>.py``) builds on.

- **Mistakes**: ``Mistake(key)`` names a misconception, said by the ``TEXTS`` of the module that declares it
  (``mutant.<key>``, both languages); ``mutant(mistake, variant)`` pairs it with the flags of the reference
  computation that makes it. An exercise that makes another's mistake imports that ``Mistake``.
- **Small computations** every exercise's reference uses: ``linear``, ``split_heads``, ``rope``, ``causal_hide``,
  ``attend``.
- **Cases**: parameters drawn for a case (``random_params``, ``draw_seed``), and the case shapes of a module with a
  KV cache (``module_case``, ``given_past_module_case``, ``module_expected``). The computation of exercises 01-07
  and its case blocks ("training mode, dropout 0.5", "scores in the hundreds") are ``heads``'s.
- **Texts**: ``case_titles({English: Chinese})`` for an exercise's ``TEXTS``; mistakes shared by several exercises
  (the softmax axes, RoPE's miscounted exponents and mixed layouts, a cache that ignores the past) are here.

An exercise declares ``TEXTS: dict[str, tuple[str, str]]`` (key -> (English, Chinese)): its mistakes' texts under
``mutant.<key>``, its case titles under ``case:<English title>``: data of its module, read where they are said (a
``Mistake``'s message, a case's title), never gathered into a catalogue.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from .kinds.module import Call, Case
from .types import Mistake as Mistake  # the author's kit: exercises take these from here
from .types import Mutant
from .types import mutant as mutant

# ---------------------------------------------------------------------------------------------
# mistakes and mutants


def case_titles(titles: dict[str, str]) -> dict[str, tuple[str, str]]:
    """{English case title: Chinese} as entries of an exercise's ``TEXTS`` (``case:<English>``)."""
    return {"case:" + en: (en, zh) for en, zh in titles.items()}


# ---------------------------------------------------------------------------------------------
# small computations


def linear(p: dict[str, Tensor], name: str, x: Tensor) -> Tensor:
    """nn.Linear ``name`` of the parameters ``p`` (name -> tensor) applied to ``x``; the bias is optional."""
    return F.linear(x, p[name + ".weight"], p.get(name + ".bias"))


def split_heads(t: Tensor, heads: int) -> Tensor:
    """(B, T, heads * hd) -> (B, heads, T, hd)."""
    b, n, width = t.shape
    return t.view(b, n, heads, width // heads).transpose(1, 2)


def _rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def _rotate_pairs(x: Tensor) -> Tensor:
    pairs = x.reshape(*x.shape[:-1], -1, 2)  # (..., d/2, 2)
    return torch.stack([-pairs[..., 1], pairs[..., 0]], dim=-1).flatten(-2)


_EXPONENTS = {"ok": (0, 2), "shifted": (2, 2), "odd": (1, 2), "no_two": (0, 1)}  # torch.arange(start, ..., step)


def rope(
    x: Tensor,
    positions: Tensor,
    base: float,
    layout: str = "half",
    freq_dim: int | None = None,
    direction: int = 1,
    exponent: str = "ok",
) -> Tensor:
    """Rotate x (..., T, d) at integer positions (T,); frequencies base^(-2i/freq_dim), freq_dim = d by default.
    ``layout``: which features pair up (half: i with i + d/2; interleaved: 2i with 2i + 1), or a mix of one layout's
    angle table with the other's pairs; ``exponent``: the correct 2i or a miscounted one (``_EXPONENTS``)."""
    d = x.shape[-1]
    denom = d if freq_dim is None else freq_dim
    start, step = _EXPONENTS[exponent]
    inv_freq = 1.0 / base ** (torch.arange(start, start + step * (d // 2), step, dtype=torch.float64) / denom)
    angles = positions.to(torch.float64)[:, None] * inv_freq  # (T, d/2)
    pair_angles, half_angles = angles.repeat_interleave(2, dim=-1), torch.cat([angles, angles], dim=-1)
    angles, turn = {
        "interleaved": (pair_angles, _rotate_pairs),
        "half": (half_angles, _rotate_half),
        "half_angles_pairs": (half_angles, _rotate_pairs),
        "pair_angles_half": (pair_angles, _rotate_half),
    }[layout]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    return x * cos + direction * turn(x) * sin


def causal_hide(num_q: int, num_k: int, mask: str = "ok") -> Tensor:
    """(num_q, num_k) bool, True = hidden: the new queries are the last positions (``mask="top_left"``: the first,
    the mistake of a chunk after a cache)."""
    offset = 0 if mask == "top_left" else num_k - num_q
    return torch.triu(torch.ones(num_q, num_k, dtype=torch.bool), offset + 1)


def attend(q: Tensor, k: Tensor, v: Tensor, scale: float, hide: Tensor, softmax_dim: int = -1) -> Tensor:
    """softmax(q kᵀ / scale, hidden scores -inf) v over the keys (or, a mistake, another ``softmax_dim``)."""
    scores = (q @ k.transpose(-2, -1)) / scale
    return torch.softmax(scores.masked_fill(hide, float("-inf")), dim=softmax_dim) @ v


# ---------------------------------------------------------------------------------------------
# parameters and the cases of a module with a KV cache


def random_params(shapes: dict[str, tuple[int, ...]], g: torch.Generator) -> dict[str, Tensor]:
    """Parameters drawn for a case: weights N(0, (1.5 / sqrt(fan_in))^2), biases N(0, 0.2^2), so that the
    scores are far from uniform and a wrong scale or mask changes the output a lot."""
    return {
        name: torch.randn(shape, generator=g) * (1.5 / math.sqrt(shape[-1]) if len(shape) == 2 else 0.2)
        for name, shape in shapes.items()
    }


def draw_seed(g: torch.Generator) -> int:
    """A seed for one call's dropout, drawn from the case's generator."""
    return int(torch.randint(0, 2**31 - 1, (1,), generator=g))


def projection_shapes(cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """name -> shape of W_query, W_key, W_value (d_in -> d_out, biases with qkv_bias) and out_proj (with its bias),
    as nn.Linear stores them ((out, in))."""
    d_in, d_out = cfg["d_in"], cfg["d_out"]
    shapes: dict[str, tuple[int, ...]] = {
        "W_query.weight": (d_out, d_in),
        "W_key.weight": (d_out, d_in),
        "W_value.weight": (d_out, d_in),
    }
    if cfg.get("qkv_bias"):
        shapes.update({"W_query.bias": (d_out,), "W_key.bias": (d_out,), "W_value.bias": (d_out,)})
    shapes.update({"out_proj.weight": (d_out, d_out), "out_proj.bias": (d_out,)})
    return shapes


ShapesOf = Callable[[dict[str, Any]], dict[str, tuple[int, ...]]]  # constructor arguments -> parameter shapes
Forward = Callable[..., tuple[Tensor, Any]]  # (params, x, cfg, variant, past, use_cache, **kwargs) -> (out, present)


def module_case(
    param_shapes: ShapesOf,
    present: tuple[str, str],
    name: str,
    g: torch.Generator,
    x_shape: tuple[int, ...],
    steps: list[tuple[Any, ...]],
    **ctor: Any,
) -> Case:
    """Calls over one sequence: (start, end, use_cache, pass_past[, absorb]) per step; ``present``: the names of
    the cache's two parts."""
    params = random_params(param_shapes(ctor), g)
    x = torch.randn(x_shape, generator=g)
    calls: list[Call] = []
    last = None
    for i, step in enumerate(steps):
        start, end, use_cache, pass_past = step[:4]
        kwargs = {"absorb": step[4]} if len(step) > 4 else {}
        calls.append(
            Call(
                x[:, start:end], seed=draw_seed(g), past=last if pass_past else None, use_cache=use_cache, kwargs=kwargs
            )
        )
        if use_cache:
            last = i
    return Case(name, ctor, params, calls, kind="cache", meta={"x_full": x, "present_names": present})


def given_past_module_case(
    forward: Forward,
    param_shapes: ShapesOf,
    present: tuple[str, str],
    name: str,
    g: torch.Generator,
    batch: int,
    n_past: int,
    steps: list[tuple[int, bool | None]],
    correct: Any,
    absorbed_bound: bool = False,
    **ctor: Any,
) -> Case:
    """A past_key_value the module never produced, as a real one would be: the grader's reference run with use_cache
    on ``n_past`` tokens of another prompt, on the case's parameters, handed to the first call; ``steps``:
    (number of new tokens, absorb or None) per call, each later call getting the previous call's present.
    ``absorbed_bound``: the absorbed calls also report whether any tensor as large as the per-head keys of all
    the tokens was built (MLA: the absorbed path never materialises per-head K/V)."""
    params = random_params(param_shapes(ctor), g)
    with torch.no_grad():
        _, given = forward(params, torch.randn(batch, n_past, ctor["d_in"], generator=g), ctor, correct, None, True)
    calls: list[Call] = []
    seen = n_past
    for i, (n_new, absorb) in enumerate(steps):
        seen += n_new
        kwargs = {} if absorb is None else {"absorb": absorb}
        # per-head keys of every token seen so far: (B, num_heads, seen, head_dim) elements, d_out = heads * head_dim
        bound = batch * seen * ctor["d_out"] - 1 if absorbed_bound and absorb else None
        calls.append(
            Call(
                torch.randn(batch, n_new, ctor["d_in"], generator=g),
                seed=draw_seed(g),
                past="given" if i == 0 else i - 1,
                use_cache=True,
                kwargs=kwargs,
                tile_bound=bound,
                bound_label="absorbed",
            )
        )
    return Case(name, ctor, params, calls, kind="cache", given_past=given, meta={"present_names": present})


def module_expected(forward: Forward, case: Case, v: Any) -> dict[str, Tensor | None]:
    """{name: tensor or None} of a cached module (``forward(params, x, cfg, variant, past, use_cache, **kwargs)`` ->
    (out, present)) run the way the learner's is: step<i>.out and the two parts of its present. A variant with
    ``own_cache`` attends to what it cached itself, whatever past it is handed. A training-mode call has no
    expected value."""
    with torch.no_grad():
        outs: dict[str, Tensor | None] = {}
        presents: dict[int, Any] = {}
        names = case.meta.get("present_names", ("keys", "values"))  # as the harness names them
        own = None  # what a module that keeps its own cache holds
        for i, call in enumerate(case.calls):
            case.meta["step"] = i + 1
            tag = f"step{i + 1}"
            if call.train:  # checked by kinds.module.dropout_problem against the learner's own eval-mode call
                continue
            given = (
                presents[call.past] if isinstance(call.past, int) else case.given_past if call.past == "given" else None
            )
            if getattr(v, "own_cache", False):  # the past handed in is ignored
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
# mistakes shared by several exercises

M_SOFTMAX_QUERIES = Mistake("softmax_wrong_axis")
M_SOFTMAX_HEADS = Mistake("softmax_wrong_axis", text="softmax_heads_axis")
M_SOFTMAX_BATCH = Mistake("softmax_wrong_axis", text="softmax_batch_axis")  # a fixed dim=0, as on 1-D scores
M_IGNORES_PAST = Mistake("cache_ignores_past")
M_TOP_LEFT_CHUNK = Mistake("mask_top_left", text="mask_top_left_chunk")
M_ROPE_RESTART = Mistake("rope_positions_restart")
M_ROPE_EXPONENT = Mistake("rope_exponent_off_by_one")
M_ROPE_NO_TWO = Mistake("rope_exponent_off_by_one", text="rope_exponent_no_two")
M_ROPE_HALF_ON_PAIRS = Mistake("rope_layouts_mixed", text="rope_half_angles_on_pairs")
M_ROPE_PAIRS_ON_HALF = Mistake("rope_layouts_mixed", text="rope_pair_angles_on_half")


def softmax_axis_mutants(ok: Any) -> list[Mutant]:
    """The softmax over another axis of the (batch, heads, queries, keys) scores than the keys."""
    return [
        mutant(M_SOFTMAX_QUERIES, replace(ok, softmax_dim=-2), paired=False),
        mutant(M_SOFTMAX_HEADS, replace(ok, softmax_dim=1), paired=False),
        mutant(M_SOFTMAX_BATCH, replace(ok, softmax_dim=0), paired=False),
    ]


# the texts of the mistakes several exercises share, key -> (English, Chinese)
TEXTS: dict[str, tuple[str, str]] = {
    "mutant.softmax_wrong_axis": (
        "softmax over the wrong axis (dim=-2, the queries): each query's weights must sum "
        "to 1 over the keys, softmax(dim=-1)",
        "softmax 的维度不对（dim=-2，沿查询归一化了）：每个查询的注意力权重应当在所有键上"
        "加起来等于 1，即 softmax(dim=-1)",
    ),
    "mutant.softmax_heads_axis": (
        "softmax over the heads axis (dim=1): each query's weights must sum to 1 over the keys, softmax(dim=-1)",
        "softmax 做在了头的维度上（dim=1）：每个查询的注意力权重应当在所有键上加起来等于 1，即 softmax(dim=-1)",
    ),
    "mutant.softmax_batch_axis": (
        "softmax over a fixed dim=0: on notebook 01's 1-D scores of one query that is the "
        "keys, but here the scores are (batch, ..., queries, keys) and dim=0 is the batch; "
        "softmax(dim=-1) is the keys whatever the rank",
        "softmax 固定做在了 dim=0 上：在笔记本 01 里只有一个查询的一维分数上，dim=0 就是键；"
        "但这里的分数是 (batch, ..., queries, keys)，dim=0 是 batch 维；softmax(dim=-1) "
        "不管几维都是键",
    ),
    "mutant.cache_ignores_past": (
        "the module ignores past_key_value: it keeps its own cache (or recomputes from "
        "stored inputs), so a past it did not produce, or two sequences decoded in turns, "
        "give wrong outputs; attend to the past_key_value you are given",
        "模块忽略了传入的 past_key_value：它自己保存缓存（或用存下来的输入重新计算），所以遇到"
        "不是它自己产生的 past，或两个序列交替解码时，输出就错了；请对传入的 past_key_value "
        "做注意力",
    ),
    "mutant.rope_positions_restart": (
        "positions restart at 0 after the cache: the new tokens sit at positions n_past, "
        "n_past + 1, ... with n_past = past_key_value[0].shape[2] (the same offset as "
        "the mask's rows)",
        "有缓存时位置又从 0 开始了：新 token 的位置应当是 n_past, n_past + 1, ...，其中 "
        "n_past = past_key_value[0].shape[2]（和掩码行的偏移相同）",
    ),
    "mutant.rope_exponent_off_by_one": (
        "RoPE's frequencies counted from the wrong index: theta_i = base ** (-2i / "
        "d) for i = 0 .. d/2 - 1, with d the rotated width (head_dim; rope_dim in "
        "MLA), i.e. torch.arange(0, d, 2) / d, so the first pair turns by one radian "
        "per position",
        "RoPE 频率的下标数错了：theta_i = base ** (-2i / d)，i = 0 .. d/2 - 1，d 是被"
        "旋转的宽度（head_dim；MLA 里是 rope_dim），即 torch.arange(0, d, 2) / d，"
        "第一对特征每个位置正好转 1 弧度",
    ),
    "mutant.rope_exponent_no_two": (
        "RoPE's exponent lacks its factor 2: theta_i = base ** (-2i / d), with d the "
        "rotated width (head_dim; rope_dim in MLA), i.e. torch.arange(0, d, 2) / d, not "
        "torch.arange(d // 2) / d (the slowest pair must turn by about 1 / base per "
        "position)",
        "RoPE 的指数少了因子 2：theta_i = base ** (-2i / d)，d 是被旋转的宽度（head_dim；"
        "MLA 里是 rope_dim），即 torch.arange(0, d, 2) / d，而不是 torch.arange(d // 2) / d"
        "（转得最慢的那一对每个位置应当只转约 1 / base 弧度）",
    ),
    "mutant.rope_half_angles_on_pairs": (
        "the rotate-half layout's angles (cos/sin = cat(freqs, freqs)) on interleaved "
        "pairs (2i, 2i + 1): in the contract's rotate-half layout feature i pairs "
        "with i + head_dim / 2, rotate_half(x) = cat(-x2, x1), and the two features "
        "of a pair share one angle",
        "用了 rotate-half 布局的角度表（cos/sin = cat(freqs, freqs)），却按交错方式 "
        "(2i, 2i + 1) 配对：接口约定的 rotate-half 布局把第 i 个特征和第 i + "
        "head_dim / 2 个配对，rotate_half(x) = cat(-x2, x1)，同一对的两个特征共用一个"
        "角度",
    ),
    "mutant.rope_pair_angles_on_half": (
        "the interleaved layout's angles (freqs.repeat_interleave(2)) with "
        "rotate_half: features i and i + head_dim / 2 are one pair and share one "
        "angle, so cos/sin = cat(freqs, freqs)",
        "用了交错布局的角度表（freqs.repeat_interleave(2)），却配上了 rotate_half："
        "第 i 个和第 i + head_dim / 2 个特征是一对，共用一个角度，所以 cos/sin = "
        "cat(freqs, freqs)",
    ),
    "mutant.mask_top_left_chunk": (
        "causal mask aligned to the start of the cache: the new queries are the LAST "
        "positions; hide key j from new query i when j > n_past + i",
        "因果掩码对齐到了缓存的开头：新的查询在序列的最后几个位置；当 j > n_past + i 时，要对新查询 i 遮住键 j",
    ),
}
