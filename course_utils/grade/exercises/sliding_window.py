"""Exercise 12: ``SlidingWindowAttention``, sliding-window attention with a ring-buffer KV cache of constant memory,
RoPE at absolute positions applied before caching, and StreamingLLM's attention sinks.

The contract fixes the ring's layout, so that the cache itself is checked, not only the outputs: ``present`` is
``(keys, values)``, each ``(b, num_heads, num_sinks + window, head_dim)`` from the first call on; slot ``j <
num_sinks`` holds position ``j``, position ``p >= num_sinks`` lives in slot ``num_sinks + (p - num_sinks) % window``
(Mistral's rolling buffer), slots not written yet are zeros. A full ring always holds the same number of tokens, so
it cannot count them: the caller passes the position of ``x``'s first token, ``start_pos`` (Llama's ``start_pos``,
Hugging Face's ``cache_position``). Every misconception is a flag of one reference computation (``WindowVariant``),
run on the grader's parameters and inputs; the verdict names the variant the learner reproduces.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from ..kit import (
    Mistake,
    attend,
    case_titles,
    draw_seed,
    linear,
    mutant,
    projection_shapes,
    random_params,
    rope,
    split_heads,
)
from ..registry import Exercise
from ..types import Call, Case


@dataclass(frozen=True)
class WindowVariant:
    window: str = "ok"  # ok | one_more (keys i - w .. i) | one_less (keys i - w + 2 .. i)
    read: str = "age"  # age | slot (the ring read slot 0 first, but masked as if oldest first)
    rope_positions: str = "absolute"  # absolute | slot (the position restarts at every wrap-around)
    sinks: str = "kept"  # kept | evicted (the first tokens hidden once they leave the window)
    cache: str = "ring"  # ring | raw_keys (keys cached before RoPE, rotated when read) | grows (torch.cat)


def slot_of(position: int, window: int, num_sinks: int) -> int:
    """The ring slot of the token at ``position``: its own slot for a sink, else the rolling buffer's."""
    return position if position < num_sinks else num_sinks + (position - num_sinks) % window


def slot_positions(num_seen: int, window: int, num_sinks: int) -> torch.Tensor:
    """(num_sinks + window,) the position each slot holds after ``num_seen`` tokens, -1 where none was written."""
    held = torch.full((num_sinks + window,), -1)
    for position in range(num_seen):  # later positions overwrite earlier ones, as the writes do
        held[slot_of(position, window, num_sinks)] = position
    return held


def _hidden(query_positions, key_positions, window, num_sinks, v: WindowVariant) -> torch.Tensor:
    q, k = query_positions[:, None], key_positions[None, :]  # (n, 1), (1, keys)
    lowest = {"ok": q - window, "one_more": q - window - 1, "one_less": q - window + 1}[v.window]
    sink = (k < num_sinks) if v.sinks == "kept" else torch.zeros_like(k, dtype=torch.bool)
    return ~((k <= q) & ((k > lowest) | sink))


def window_forward(p, x, cfg, v: WindowVariant, past=None, use_cache=False, start_pos=0):
    """Sliding-window attention through a ring-buffer cache; returns (out, present)."""
    nh, d_out, window, num_sinks, base = (
        cfg["num_heads"],
        cfg["d_out"],
        cfg["window"],
        cfg["num_sinks"],
        cfg["rope_base"],
    )
    b, n, _ = x.shape
    hd = d_out // nh
    q, k, val = (
        split_heads(linear(p, "W_query", x), nh),
        split_heads(linear(p, "W_key", x), nh),
        split_heads(linear(p, "W_value", x), nh),
    )
    new_positions = torch.arange(start_pos, start_pos + n)

    def rotated(t, positions):
        if v.rope_positions == "slot":  # the slot index instead of the position: restarts at the wrap-around
            positions = torch.tensor([slot_of(int(i), window, num_sinks) for i in positions], dtype=torch.long)
        return rope(t, positions, base)

    q, k_rot = rotated(q, new_positions), rotated(k, new_positions)
    if v.cache == "grows":  # nothing evicted: the cache is everything seen, oldest first
        old_k = torch.zeros(b, nh, 0, hd) if past is None else past[0]
        old_v = torch.zeros(b, nh, 0, hd) if past is None else past[1]
        old_positions = torch.arange(start_pos - old_k.shape[2], start_pos)
        present = (torch.cat([old_k, k_rot], dim=2), torch.cat([old_v, val], dim=2))
    else:
        ring_k = torch.zeros(b, nh, num_sinks + window, hd) if past is None else past[0].clone()
        ring_v = torch.zeros(b, nh, num_sinks + window, hd) if past is None else past[1].clone()
        held = slot_positions(start_pos, window, num_sinks)
        by_age = [int(s) for s in torch.argsort(torch.where(held >= 0, held, held.max() + 1)) if held[s] >= 0]
        read = sorted(by_age) if v.read == "slot" else by_age
        old_k, old_v = ring_k[:, :, read], ring_v[:, :, read]
        old_positions = held[by_age]  # positions oldest first, whatever order the keys were read in
        if v.cache == "raw_keys":
            old_k = rotated(old_k, old_positions)
        stored = k if v.cache == "raw_keys" else k_rot
        for i, position in enumerate(new_positions.tolist()):  # in order: later tokens overwrite older ones
            ring_k[:, :, slot_of(position, window, num_sinks)] = stored[:, :, i]
            ring_v[:, :, slot_of(position, window, num_sinks)] = val[:, :, i]
        present = (ring_k, ring_v)
    keys, values = torch.cat([old_k, k_rot], dim=2), torch.cat([old_v, val], dim=2)
    hide = _hidden(new_positions, torch.cat([old_positions, new_positions]), window, num_sinks, v)
    ctx = attend(q, keys, values, math.sqrt(hd), hide)
    out = linear(p, "out_proj", ctx.transpose(1, 2).reshape(b, n, d_out))
    return out, (present if use_cache else None)


# ---------------------------------------------------------------------------------------------
# cases


def _case(name, g, batch, chunks, *, full=True, **ctor):
    """One sequence fed in ``chunks`` through the cache (each call passes the previous present back and says where
    its tokens start), then, with ``full``, the whole sequence in one call without a cache."""
    params = random_params(projection_shapes(ctor), g)
    x = torch.randn(batch, sum(chunks), ctor["d_in"], generator=g)
    calls, start = [], 0
    for i, size in enumerate(chunks):
        calls.append(
            Call(
                x[:, start : start + size],
                seed=draw_seed(g),
                past=i - 1 if i else None,
                use_cache=True,
                kwargs={"start_pos": start},
            )
        )
        start += size
    if full:
        calls.append(Call(x, seed=draw_seed(g), use_cache=False, kwargs={"start_pos": 0}))
    return Case(name, ctor, params, calls, kind="cache", meta={"present_names": ("keys", "values")})


def _given_case(name, g, batch, start_pos, num_new, **ctor):
    """A full ring the module never produced, its oldest token in a middle slot, and ``num_new`` tokens after it."""
    params = random_params(projection_shapes(ctor), g)
    hd, size = ctor["d_out"] // ctor["num_heads"], ctor["num_sinks"] + ctor["window"]
    x = torch.randn(batch, num_new, ctor["d_in"], generator=g)
    case = Case(
        name,
        ctor,
        params,
        [Call(x, seed=draw_seed(g), past="given", use_cache=True, kwargs={"start_pos": start_pos})],
        kind="cache",
        meta={"present_names": ("keys", "values")},
    )
    case.given_past = (
        torch.randn(batch, ctor["num_heads"], size, hd, generator=g),
        torch.randn(batch, ctor["num_heads"], size, hd, generator=g),
    )
    return case


def cases(g) -> list[Case]:
    """The cases, drawn from ``g`` (seeded by the grader's secret seed)."""
    return [
        _case(
            "window 4, no sinks, 2 heads of 4, base 10000: a prefill of 6 (longer than the window), then 1, 1, 2, 1, "
            "1 tokens (the ring wraps around), then the whole sequence without the cache",
            g,
            2,
            [6, 1, 1, 2, 1, 1],
            d_in=6,
            d_out=8,
            num_heads=2,
            window=4,
            num_sinks=0,
            rope_base=10000.0,
        ),
        _case(
            "window 3, 2 sinks, 3 heads of 2, base 100: a prompt of 3, then one token at a time up to 11",
            g,
            1,
            [3] + [1] * 8,
            d_in=4,
            d_out=6,
            num_heads=3,
            window=3,
            num_sinks=2,
            rope_base=100.0,
        ),
        _case(
            "window 5, 1 sink, 2 heads of 6, base 500000: a prefill of 9, then chunks of 3 and 1",
            g,
            2,
            [9, 3, 1],
            d_in=5,
            d_out=12,
            num_heads=2,
            window=5,
            num_sinks=1,
            rope_base=500000.0,
        ),
        _case(
            "window 1 (only itself), 1 sink, 2 heads of 4: a prompt of 2, then 1, 1, 1",
            g,
            1,
            [2, 1, 1, 1],
            d_in=4,
            d_out=8,
            num_heads=2,
            window=1,
            num_sinks=1,
            rope_base=10000.0,
        ),
        _case(
            "window 16, longer than the sequence (plain causal attention), 2 heads of 4: chunks of 3 and 4",
            g,
            2,
            [3, 4],
            d_in=4,
            d_out=8,
            num_heads=2,
            window=16,
            num_sinks=0,
            rope_base=10000.0,
        ),
        _given_case(
            "a full ring the module did not produce (window 4, 2 sinks, 13 tokens seen), 2 new tokens",
            g,
            2,
            13,
            2,
            d_in=6,
            d_out=8,
            num_heads=2,
            window=4,
            num_sinks=2,
            rope_base=10000.0,
        ),
    ]


def expected(case: Case, variant: WindowVariant) -> dict:
    """{name: tensor or None}, named as the harness names the learner's outputs: step<i>.out, .keys, .values."""
    with torch.no_grad():
        outs, presents = {}, {}
        for i, call in enumerate(case.calls):
            case.meta["step"] = i + 1
            past = (
                presents[call.past] if isinstance(call.past, int) else case.given_past if call.past == "given" else None
            )
            out, present = window_forward(case.params, call.x, case.ctor, variant, past, call.use_cache, **call.kwargs)
            outs[f"step{i + 1}.out"] = out
            outs[f"step{i + 1}.keys"], outs[f"step{i + 1}.values"] = (None, None) if present is None else present
            presents[i] = present
        return outs


# ---------------------------------------------------------------------------------------------
# the misconception catalogue (texts: TEXTS' mutant.<key>)

M_SLOT_ORDER = Mistake("ring_read_in_slot_order")
M_ROPE_WRAP = Mistake("rope_positions_reset_at_wrap")
M_SINKS_EVICTED = Mistake("sinks_evicted")
M_WINDOW_OFF_BY_ONE = Mistake("window_off_by_one")
M_RAW_KEYS = Mistake("ring_keys_cached_before_rope")
M_GROWS = Mistake("ring_cache_grows")


def mutants() -> list:
    """Known-wrong variants, most specific first."""
    ok = WindowVariant()
    return [
        mutant(M_SLOT_ORDER, replace(ok, read="slot")),
        mutant(M_ROPE_WRAP, replace(ok, rope_positions="slot")),
        mutant(M_SINKS_EVICTED, replace(ok, sinks="evicted")),
        mutant(M_WINDOW_OFF_BY_ONE, replace(ok, window="one_more")),
        mutant(M_WINDOW_OFF_BY_ONE, replace(ok, window="one_less")),
        mutant(M_RAW_KEYS, replace(ok, cache="raw_keys")),
        mutant(M_GROWS, replace(ok, cache="grows")),
    ]


TEXTS: dict[str, tuple[str, str]] = {
    "mutant.ring_read_in_slot_order": (
        "after the wrap-around the ring is read in slot order (slot 0 first) but "
        "masked as if oldest first: keys and positions disagree. Read from the oldest "
        "slot, num_sinks + (start_pos - num_sinks) % window, round to the newest (or "
        "give each slot the position it holds and mask by that)",
        "环形缓冲区绕回之后是按槽位顺序（从槽 0 开始）读的，掩码却按“从旧到新”来算：键和"
        "位置对不上了。应当从最旧的槽 num_sinks + (start_pos - num_sinks) % window "
        "开始，绕一圈读到最新的（或者给每个槽标上它存的位置，再按位置做掩码）",
    ),
    "mutant.rope_positions_reset_at_wrap": (
        "RoPE positions restart at the wrap-around (the slot index, not the "
        "position): rotate queries and keys at the absolute positions start_pos, "
        "start_pos + 1, ..., which keep counting after the ring wraps",
        "RoPE 的位置在环形缓冲区绕回时又从头开始了（用的是槽位编号而不是位置）："
        "查询和键要按绝对位置 start_pos, start_pos + 1, ... 旋转，绕回之后位置"
        "仍然继续往上数",
    ),
    "mutant.sinks_evicted": (
        "the sinks are evicted with the window: the first num_sinks tokens stay visible to every "
        "query (key j is visible when j <= i and (j > i - window or j < num_sinks))",
        "注意力汇聚点随窗口一起被逐出了：前 num_sinks 个 token 应当对每个查询都可见（当 j <= i "
        "且 (j > i - window 或 j < num_sinks) 时键 j 可见）",
    ),
    "mutant.window_off_by_one": (
        "the window is off by one: a query at position i sees the window keys i - window + "
        "1 .. i, itself included (Hugging Face's sliding_window: j > i - window)",
        "窗口差了一位：位置 i 的查询看到的是 i - window + 1 .. i 这 window 个键，包括它自己"
        "（和 Hugging Face 的 sliding_window 一致：j > i - window）",
    ),
    "mutant.ring_keys_cached_before_rope": (
        "the ring holds the keys before RoPE: rotate the new keys at their "
        "absolute positions BEFORE writing them into their slots; present holds "
        "rotated keys, and a cached key is never rotated again",
        "环形缓冲区里存的是旋转之前的键：应当先把新的键按各自的绝对位置旋转，再写进"
        "对应的槽；present 里存的是旋转过的键，缓存里的键不会再被旋转",
    ),
    "mutant.ring_cache_grows": (
        "the cache grows with the sequence (torch.cat, nothing evicted): its memory must stay "
        "constant, keys and values of shape (b, num_heads, num_sinks + window, head_dim) from "
        "the first call on, position p written into slot num_sinks + (p - num_sinks) % window",
        "缓存随序列一起变长（torch.cat，什么都没有逐出）：它的内存应当保持不变，从第一次调用起"
        "键和值的形状就是 (b, num_heads, num_sinks + window, head_dim)，位置 p 写进槽 "
        "num_sinks + (p - num_sinks) % window",
    ),
    **case_titles(
        {
            "window 4, no sinks, 2 heads of 4, base 10000: a prefill of 6 (longer than the window), then 1, 1, 2, 1, 1 "
            "tokens (the ring wraps around), then the whole sequence without the cache": "窗口 4，没有汇聚点，2 个头，每个宽 4，base 10000：先预填充 6 个 token（比窗口长），再依次输入 1、1、2、1、1 个"
            "（环形缓冲区会绕回），最后不带缓存输入整个序列",
            "window 3, 2 sinks, 3 heads of 2, base 100: a prompt of 3, then one token at a time up to 11": "窗口 3，2 个汇聚点，3 个头，每个宽 2，base 100：先输入 3 个 token 的提示，再一次一个 token，直到 11 个",
            "window 5, 1 sink, 2 heads of 6, base 500000: a prefill of 9, then chunks of 3 and 1": "窗口 5，1 个汇聚点，2 个头，每个宽 6，base 500000：先预填充 9 个 token，再依次输入 3 个和 1 个",
            "window 1 (only itself), 1 sink, 2 heads of 4: a prompt of 2, then 1, 1, 1": "窗口 1（只看自己），1 个汇聚点，2 个头，每个宽 4：先输入 2 个 token 的提示，再依次输入 1、1、1 个",
            "window 16, longer than the sequence (plain causal attention), 2 heads of 4: chunks of 3 and 4": "窗口 16，比序列还长（就是普通的因果注意力），2 个头，每个宽 4：依次输入 3 个和 4 个 token",
            "a full ring the module did not produce (window 4, 2 sinks, 13 tokens seen), 2 new tokens": "一个不是由该模块产生的满环形缓冲区（窗口 4，2 个汇聚点，已经见过 13 个 token），再输入 2 个新 token",
        }
    ),
}


EXERCISE = Exercise(
    id="sliding_window",
    order=12,
    notebook="12_sliding_window",
    points=3,
    kind="class",
    contract="SlidingWindowAttention",
    args=("d_in", "d_out", "num_heads", "window", "num_sinks", "rope_base"),
    cases=cases,
    expected=expected,
    correct=WindowVariant(),
    mutants=mutants,
)
