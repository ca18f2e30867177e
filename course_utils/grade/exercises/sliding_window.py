"""Exercise 12: ``SlidingWindowAttention``, sliding-window attention with a ring-buffer KV cache of constant memory,
RoPE at absolute positions applied before caching, and StreamingLLM's attention sinks.

The contract fixes the ring's layout, so that the cache itself is checked, not only the outputs: ``present`` is
``(keys, values)``, each ``(b, num_heads, num_sinks + window, head_dim)`` from the first call on; slot ``j <
num_sinks`` holds position ``j``, position ``p >= num_sinks`` lives in slot ``num_sinks + (p - num_sinks) % window``
(Mistral's rolling buffer), slots not written yet are zeros. A full ring always holds the same number of tokens, so
it cannot count them: the caller passes the position of ``x``'s first token, ``start_pos`` (Llama's ``start_pos``,
Hugging Face's ``cache_position``). Every misconception is a flag of one reference computation (``WindowVariant``),
run on the grader's parameters and inputs; the verdict names the variant the learner reproduces.

The ring's layout is the contract's because another party makes the rings a module is handed (the server's cache
manager, another process): a case hands a fresh module a ring the grader made, at a ``start_pos`` the module never saw,
so a module that reads only the layout it writes, or counts positions itself, is caught. The ring a module returns is
read by role and shape (``read_back``): kept in another order of those four axes, or its slots in another order
(Mistral's ``p % window``, oldest first), it holds the same tokens, is read as the contract's layout so that its other
mistakes are still named, and is itself named (``step<i>.layout``, 0 where the ring had to be reordered).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from itertools import permutations

import torch

from ..kinds.module import Call, Case
from ..kit import (
    M_IGNORES_PAST,
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


@dataclass(frozen=True)
class WindowVariant:
    window: str = "ok"  # ok | one_more (keys i - w .. i) | one_less (keys i - w + 2 .. i)
    window_on: str = "every_call"  # every_call | decoding (calls of one token after a cache) | cached_calls: the
    # calls where ``window`` applies; the others see the right window
    sink_writes: str = "every_call"  # every_call | first_call (later calls write every token into the ring)
    read: str = "age"  # age | slot (the ring read slot 0 first, but masked as if oldest first)
    rope_positions: str = "absolute"  # absolute | slot (the position restarts at every wrap-around)
    sinks: str = "kept"  # kept | evicted (the first tokens hidden once they leave the window)
    own_cache: bool = False  # attends to what it cached itself, whatever past it is handed
    cache: str = "ring"  # ring | raw_keys (keys cached before RoPE, rotated when read) | grows (torch.cat) |
    # scaled_keys (keys cached divided by sqrt(head_dim), multiplied back when read: a ring of other numbers)
    positions: str = "caller"  # caller (start_pos) | own_count (the tokens it saw since its last call without a past)
    layout: str = "contract"  # contract | present_other (the present in another order of axes or slots, right
    # otherwise) | own_only (works only with a ring it wrote itself: what it makes of the grader's ring is its own)


def slot_of(position: int, window: int, num_sinks: int) -> int:
    """The ring slot of the token at ``position``: its own slot for a sink, else the rolling buffer's."""
    return position if position < num_sinks else num_sinks + (position - num_sinks) % window


def slot_positions(num_seen: int, window: int, num_sinks: int) -> torch.Tensor:
    """(num_sinks + window,) the position each slot holds after ``num_seen`` tokens, -1 where none was written."""
    held = torch.full((num_sinks + window,), -1)
    for position in range(num_seen):  # later positions overwrite earlier ones, as the writes do
        held[slot_of(position, window, num_sinks)] = position
    return held


def ring_slot(position: int, window: int, num_sinks: int) -> int:
    """The slot of the rolling buffer alone, for every position: where a module that forgets the sinks writes."""
    return num_sinks + (position - num_sinks) % window


def _hidden(query_positions, key_positions, window, num_sinks, reach: str, sinks: str) -> torch.Tensor:
    q, k = query_positions[:, None], key_positions[None, :]  # (n, 1), (1, keys)
    lowest = {"ok": q - window, "one_more": q - window - 1, "one_less": q - window + 1}[reach]
    sink = (k < num_sinks) if sinks == "kept" else torch.zeros_like(k, dtype=torch.bool)
    return ~((k <= q) & ((k > lowest) | sink))


def _reach(v: WindowVariant, n: int, cached: bool) -> str:
    """The window this call sees: the variant's where it applies, else the right one."""
    applies = {"every_call": True, "cached_calls": cached, "decoding": cached and n == 1}[v.window_on]
    return v.window if applies else "ok"


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
        if v.cache == "scaled_keys":
            old_k = old_k * math.sqrt(hd)
        old_positions = held[by_age]  # positions oldest first, whatever order the keys were read in
        if v.cache == "raw_keys":
            old_k = rotated(old_k, old_positions)
        stored = k if v.cache == "raw_keys" else k_rot / math.sqrt(hd) if v.cache == "scaled_keys" else k_rot
        slot = ring_slot if past is not None and v.sink_writes == "first_call" else slot_of
        for i, position in enumerate(new_positions.tolist()):  # in order: later tokens overwrite older ones
            ring_k[:, :, slot(position, window, num_sinks)] = stored[:, :, i]
            ring_v[:, :, slot(position, window, num_sinks)] = val[:, :, i]
        present = (ring_k, ring_v)
    keys, values = torch.cat([old_k, k_rot], dim=2), torch.cat([old_v, val], dim=2)
    reach = _reach(v, n, past is not None)
    hide = _hidden(new_positions, torch.cat([old_positions, new_positions]), window, num_sinks, reach, v.sinks)
    ctx = attend(q, keys, values, math.sqrt(hd), hide)
    out = linear(p, "out_proj", ctx.transpose(1, 2).reshape(b, n, d_out))
    return out, (present if use_cache else None)


# ---------------------------------------------------------------------------------------------
# cases


RING_META = {"present_names": ("keys", "values"), "cache_layout": "compare.ring_layout"}
GIVEN = "a ring the grader made (in the contract's layout) handed to a fresh module"  # the case's title begins so


def _chunked_calls(g, x, chunks, first_past=None, first_pos=0) -> list[Call]:
    """``x`` fed in ``chunks`` through the cache: the first call handed ``first_past`` (None: a new sequence), each
    later one the previous present, each saying where its tokens start (``first_pos`` for the first)."""
    calls, start = [], 0
    for i, size in enumerate(chunks):
        calls.append(
            Call(
                x[:, start : start + size],
                seed=draw_seed(g),
                past=i - 1 if i else first_past,
                use_cache=True,
                kwargs={"start_pos": first_pos + start},
            )
        )
        start += size
    return calls


def _case(name, g, batch, chunks, *, full=True, rescaled=False, **ctor):
    """One sequence fed in ``chunks`` through the cache (each call passes the previous present back and says where
    its tokens start), then, with ``full``, the whole sequence in one call without a cache. ``rescaled``: the last
    call is handed the ring before it with its keys and values multiplied by drawn scales, a past the module did
    not produce (a module that keeps its own state fails), in the layout the module keeps."""
    params = random_params(projection_shapes(ctor), g)
    x = torch.randn(batch, sum(chunks), ctor["d_in"], generator=g)
    calls = _chunked_calls(g, x, chunks)
    if rescaled:
        scales = torch.rand(2, generator=g)
        calls[-1].past_scale = (0.4 + 0.4 * float(scales[0]), -1.0 - float(scales[1]))  # keys, values
    if full:
        calls.append(Call(x, seed=draw_seed(g), use_cache=False, kwargs={"start_pos": 0}))
    return Case(name, ctor, params, calls, kind="cache", meta=dict(RING_META))


def _filling_sinks_case(name, g, **ctor):
    """A first call shorter than the sinks, so that later calls write sinks too, and a later chunk longer than
    the window (it overwrites its own oldest tokens): the sizes drawn from ``g``."""
    num_sinks, window = ctor["num_sinks"], ctor["window"]
    first = int(torch.randint(1, num_sinks, (1,), generator=g))  # 1 .. num_sinks - 1
    longer = int(torch.randint(window + 1, window + 4, (1,), generator=g))  # window + 1 .. window + 3
    return _case(name, g, 2, [first, 1, longer, 1, 1], **ctor)


def _given_ring_case(name, g, n_past, chunks, **ctor):
    """A fresh module handed, on its first call, the ring the grader's reference made of ``n_past`` tokens of another
    prompt, at ``start_pos = n_past``; then ``chunks`` more tokens, each call passing the previous present back."""
    params = random_params(projection_shapes(ctor), g)
    prompt = torch.randn(2, n_past, ctor["d_in"], generator=g)
    with torch.no_grad():
        _, given = window_forward(params, prompt, ctor, WindowVariant(), None, True, start_pos=0)
    x = torch.randn(2, sum(chunks), ctor["d_in"], generator=g)
    calls = _chunked_calls(g, x, chunks, first_past="given", first_pos=n_past)
    return Case(name, ctor, params, calls, kind="cache", given_past=given, meta={**RING_META, "given_x": prompt})


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
        _filling_sinks_case(
            "window 3, 3 sinks, 2 heads of 4: a first call shorter than the sinks (they fill over later calls), one "
            "token, a chunk longer than the window, then one token at a time (the sizes drawn from the secret seed)",
            g,
            d_in=5,
            d_out=8,
            num_heads=2,
            window=3,
            num_sinks=3,
            rope_base=10000.0,
        ),
        _given_ring_case(
            GIVEN + ": 11 tokens of another prompt (window 4, 2 sinks, the ring wrapped around), start_pos 11, then "
            "2 and 1 new tokens",
            g,
            11,
            [2, 1],
            d_in=6,
            d_out=8,
            num_heads=2,
            window=4,
            num_sinks=2,
            rope_base=10000.0,
        ),
        _case(
            "a ring the module did not produce: its own after 13 tokens (window 4, 2 sinks) with its keys and values "
            "rescaled, then 2 new tokens",
            g,
            2,
            [13, 2],
            full=False,
            rescaled=True,
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
    if (variant.layout == "own_only" or variant.own_cache) and case.given_past is not None:
        return {}  # what a module in its own layout (or keeping its own ring) makes of the grader's ring is its own
    with torch.no_grad():
        outs: dict[str, torch.Tensor | None] = {}
        presents: dict[int, tuple[torch.Tensor, ...] | None] = {}  # call index -> the cache it returned
        seen = 0  # the tokens a module counting positions itself has seen (since its last call without a past)
        for i, call in enumerate(case.calls):
            case.meta["step"] = i + 1
            past = (
                presents[call.past] if isinstance(call.past, int) else case.given_past if call.past == "given" else None
            )
            if past is not None and call.past_scale is not None and not variant.own_cache:
                past = tuple(part * scale for part, scale in zip(past, call.past_scale, strict=True))
            kwargs = dict(call.kwargs)
            if variant.positions == "own_count":
                seen = 0 if past is None else seen
                kwargs["start_pos"] = seen
                seen += call.x.shape[1]
            out, present = window_forward(case.params, call.x, case.ctor, variant, past, call.use_cache, **kwargs)
            outs[f"step{i + 1}.out"] = out
            outs[f"step{i + 1}.keys"], outs[f"step{i + 1}.values"] = (None, None) if present is None else present
            if call.use_cache and variant.layout == "contract":  # a mistaken layout's flags: whatever they are
                outs[f"step{i + 1}.layout"] = torch.tensor(1.0)
            presents[i] = present
        return outs


# ---------------------------------------------------------------------------------------------
# the misconception catalogue (texts: TEXTS' mutant.<key>)

M_SLOT_ORDER = Mistake("ring_read_in_slot_order")
M_ROPE_WRAP = Mistake("rope_positions_reset_at_wrap")
M_SINKS_EVICTED = Mistake("sinks_evicted")
M_WINDOW_OFF_BY_ONE = Mistake("window_off_by_one")
M_WINDOW_DECODING = Mistake("window_off_by_one_decoding")
M_SINKS_FIRST_CALL = Mistake("sinks_written_on_first_call_only")
M_RAW_KEYS = Mistake("ring_keys_cached_before_rope")
M_GROWS = Mistake("ring_cache_grows")
M_UNREADABLE = Mistake("ring_layout_unreadable")
M_PRESENT_LAYOUT = Mistake("ring_present_in_other_layout")
M_ONLY_OWN = Mistake("ring_read_only_its_own")
M_OWN_COUNT = Mistake("positions_counted_by_module")


def mutants() -> list:
    """Known-wrong variants, most specific first."""
    ok = WindowVariant()
    return [
        mutant(M_SLOT_ORDER, replace(ok, read="slot")),
        mutant(M_ROPE_WRAP, replace(ok, rope_positions="slot")),
        mutant(M_SINKS_EVICTED, replace(ok, sinks="evicted")),
        mutant(M_WINDOW_OFF_BY_ONE, replace(ok, window="one_more")),
        mutant(M_WINDOW_OFF_BY_ONE, replace(ok, window="one_less")),
        *(
            mutant(M_WINDOW_DECODING, replace(ok, window=reach, window_on=calls))
            for calls in ("decoding", "cached_calls")
            for reach in ("one_more", "one_less")
        ),
        mutant(M_SINKS_FIRST_CALL, replace(ok, sink_writes="first_call")),
        mutant(M_RAW_KEYS, replace(ok, cache="raw_keys")),
        mutant(M_GROWS, replace(ok, cache="grows")),
        mutant(M_OWN_COUNT, replace(ok, positions="own_count")),
        mutant(M_IGNORES_PAST, replace(ok, own_cache=True), outputs_only=True),
        # what a module returning its ring in another layout, or reading only its own, is named by: everything
        # right on its own rings, the layout flags whatever they are (the cases where it is named list them)
        mutant(M_PRESENT_LAYOUT, replace(ok, layout="present_other"), paired=False),
        mutant(M_ONLY_OWN, replace(ok, layout="own_only"), paired=False),
        # last: the outputs are right, the ring holds other numbers (or is in no layout read by role and shape)
        mutant(M_UNREADABLE, replace(ok, cache="scaled_keys"), outputs_only=True),
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
    "mutant.window_off_by_one_decoding": (
        "the window is off by one only on the calls after the cache (decoding); the prefill is right: on every "
        "call a query at position i sees the keys i - window + 1 .. i and the sinks. A full ring holds the window "
        "tokens before the new one, and the oldest of them is already out of the new token's window",
        "只有在带缓存的调用（解码）里窗口差了一位，预填充是对的：每一次调用里，位置 i 的查询都看到键 "
        "i - window + 1 .. i 和汇聚点。满的环形缓冲区里存的是新 token 之前的 window 个 token，其中最旧的那个"
        "已经在新 token 的窗口之外了",
    ),
    "mutant.sinks_written_on_first_call_only": (
        "the sinks are written only on the first call: when it is shorter than num_sinks, the sinks fill over the "
        "later calls. A token at position p < num_sinks goes into its own slot p whichever call brings it, never "
        "into the ring",
        "汇聚点只在第一次调用时写入：第一次调用比 num_sinks 短时，汇聚点要在后面几次调用里才填满。位置 "
        "p < num_sinks 的 token 不管由哪一次调用带来，都写进它自己的槽 p，而不是环形部分",
    ),
    "mutant.ring_layout_unreadable": (
        "the outputs are right, but present is not a ring the grader can read: keys and values must each be one "
        "tensor of (b, num_heads, num_sinks + window, head_dim) (its axes in any order), one token per slot (the "
        "slots in any order): the sinks and the last window tokens, keys after RoPE, the slots not written yet zero",
        "输出是对的，但 present 不是评分器能读懂的环形缓冲区：键和值应当各是一个形状为 "
        "(b, num_heads, num_sinks + window, head_dim) 的张量（各维顺序不限），每个槽放一个 token（槽的顺序不限）："
        "汇聚点和最近的 window 个 token，键是旋转之后的，还没写过的槽为零",
    ),
    "mutant.ring_present_in_other_layout": (
        "the present holds the right tokens, but not in the contract's layout (its axes, or which slot holds which "
        "position): whoever is handed this ring (the next call, the server's cache manager, another process) reads "
        "it as the contract lays it out: (b, num_heads, num_sinks + window, head_dim), position p < num_sinks in "
        "slot p, a later one in slot num_sinks + (p - num_sinks) % window",
        "present 里的 token 是对的，但布局不是接口约定的（维度顺序，或哪个槽放哪个位置）：拿到这个环形缓冲区的一方"
        "（下一次调用、推理服务的缓存管理器、另一个进程）会按约定的布局去读：(b, num_heads, num_sinks + window, "
        "head_dim)，位置 p < num_sinks 放在槽 p，之后的放在槽 num_sinks + (p - num_sinks) % window",
    ),
    "mutant.ring_read_only_its_own": (
        "the module works only with a ring it wrote itself: handed a ring the grader filled in the contract's layout, "
        "at a start_pos it never saw, it computes something else. A ring is also made by others (the server's cache "
        "manager, another process): read it as the contract lays it out, (b, num_heads, num_sinks + window, "
        "head_dim), position p < num_sinks in slot p, a later one in slot num_sinks + (p - num_sinks) % window, and "
        "take the positions from start_pos",
        "模块只能处理它自己写的环形缓冲区：交给它一个评分器按接口约定布局填好的环形缓冲区、一个它没见过的 start_pos，"
        "它就算出了别的结果。环形缓冲区也会由别人（推理服务的缓存管理器、另一个进程）做好再交给模块：要按约定的布局"
        "读它，(b, num_heads, num_sinks + window, head_dim)，位置 p < num_sinks 放在槽 p，之后的放在槽 "
        "num_sinks + (p - num_sinks) % window，位置则取自 start_pos",
    ),
    "mutant.positions_counted_by_module": (
        "the module counts the positions itself (a counter of the tokens it saw) instead of taking start_pos: handed "
        "a ring it did not fill, at a start_pos it never saw, it rotates and masks the new tokens at the wrong "
        "positions; the caller's start_pos is the position of x's first token",
        "模块自己数位置（记下见过多少个 token），而不是用 start_pos：交给它一个不是它填的环形缓冲区、一个它没见过的 "
        "start_pos 时，它就按错误的位置去旋转和遮挡新 token；调用者给的 start_pos 就是 x 第一个 token 的位置",
    ),
    "compare.not_layout": (
        "{step}: present is not in the contract's layout (the grader had to reorder its axes or slots to read it)",
        "{step}：present 的布局不是接口约定的（评分器要重排它的维度或槽位才读得懂）",
    ),
    "compare.ring_layout": (
        " (the ring: b, num_heads, num_sinks + window, head_dim)",
        "（环形缓冲区：b, num_heads, num_sinks + window, head_dim）",
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
            "window 3, 3 sinks, 2 heads of 4: a first call shorter than the sinks (they fill over later calls), one "
            "token, a chunk longer than the window, then one token at a time (the sizes drawn from the secret "
            "seed)": "窗口 3，3 个汇聚点，2 个头，每个宽 4：第一次调用比汇聚点还短（汇聚点要在后面几次调用里才填满），"
            "再输入 1 个 token，再输入一段比窗口还长的 token，然后一次一个（各段长度由秘密种子抽取）",
            "a ring the module did not produce: its own after 13 tokens (window 4, 2 sinks) with its keys and values "
            "rescaled, then 2 new tokens": "一个不是由该模块产生的环形缓冲区：它自己见过 13 个 token 之后的缓存"
            "（窗口 4，2 个汇聚点），键和值各乘上一个系数，再输入 2 个新 token",
            GIVEN + ": 11 tokens of another prompt (window 4, 2 sinks, the ring wrapped around), start_pos 11, then "
            "2 and 1 new tokens": "评分器做好的环形缓冲区（接口约定的布局）交给一个新建的模块：另一段提示的 11 个 "
            "token（窗口 4，2 个汇聚点，环形缓冲区已绕回），start_pos 为 11，再输入 2 个和 1 个新 token",
        }
    ),
}


# ---------------------------------------------------------------------------------------------
# the ring read by role and shape

_RTOL, _ATOL = 1e-4, 1e-5  # the verdict's


def _same(got, need) -> bool:
    if need is None:
        return got is None
    ok = isinstance(got, torch.Tensor) and got.shape == need.shape
    return ok and bool(torch.allclose(got.double(), need.double(), rtol=_RTOL, atol=_ATOL, equal_nan=True))


def _axis_orders(case: Case, parts: list) -> list[tuple[int, ...]]:
    """The orders of the axes that turn every part of the learner's ring into (b, num_heads, num_sinks + window,
    head_dim), the contract's first: axes placed by their sizes (two of one size: both ways)."""
    c = case.ctor
    ring = (case.x.shape[0], c["num_heads"], c["num_sinks"] + c["window"], c["d_out"] // c["num_heads"])
    if not parts or not all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in parts):
        return []
    return [axes for axes in permutations(range(4)) if all(t.permute(axes).shape == ring for t in parts)]


def _slot_order(keys, values, need_keys, need_values) -> list[int] | None:
    """For each slot of the reference's ring, the learner's slot that holds its key and value in every row and
    head, each slot used once; None when one has no match (the ring holds other tokens, or other numbers)."""
    if not isinstance(need_keys, torch.Tensor) or not keys.shape == values.shape == need_keys.shape:
        return None

    def close(got, need):  # (B, H, learner's slots, reference's slots): the whole vector alike
        return torch.isclose(got[:, :, :, None].double(), need[:, :, None].double(), rtol=_RTOL, atol=_ATOL).all(-1)

    match = close(keys, need_keys) & close(values, need_values)
    match = match.all(1).all(0)  # (learner's slots, reference's slots)
    free, order = list(range(match.shape[0])), []
    for slot in range(match.shape[1]):
        found = next((k for k in free if match[k, slot]), None)
        if found is None:
            return None
        free.remove(found)
        order.append(found)
    return order


def _read(outputs: dict, steps: list[str], axes, need: dict | None) -> dict | None:
    """``outputs`` with each step's ring in the contract's layout: its axes in order, its slots in the order of
    ``need``'s ring (as they are without ``need``); None when a slot of ``need`` is found nowhere. Each step's
    ``layout`` says whether its ring was already in that layout (1) or had to be reordered (0)."""
    read = dict(outputs)
    for step in steps:
        keys, values = (outputs[f"{step}.{part}"].permute(axes) for part in ("keys", "values"))
        moved = axes != tuple(range(4))
        if need is not None:
            order = _slot_order(keys, values, need[f"{step}.keys"], need[f"{step}.values"])
            if order is None:
                return None
            moved = moved or order != _slot_order(
                need[f"{step}.keys"], need[f"{step}.values"], need[f"{step}.keys"], need[f"{step}.values"]
            )
            keys, values = keys[:, :, order], values[:, :, order]
        read[f"{step}.keys"], read[f"{step}.values"] = keys.contiguous(), values.contiguous()
        read[f"{step}.layout"] = torch.tensor(0.0 if moved else 1.0)
    return read


def _expected_of(case: Case, v) -> dict | None:
    """``expected(case, v)``, kept where the verdict keeps it (it asks for the same ones)."""
    memo = case.meta.setdefault("expected", {})
    if v not in memo:
        try:
            memo[v] = expected(case, v)
        except Exception:  # noqa: BLE001 - the verdict records how the variant fails
            return None
    return memo[v] if isinstance(memo[v], dict) else None


def read_back(case: Case, outputs: dict) -> dict:
    """The learner's outputs with its ring read by role and shape: in an order of axes and slots under which it
    holds the reference's tokens, put in the contract's slots. A ring in the contract's shape that holds other
    tokens stays as it is (the verdict names the mistake); one in another order of axes, under which a known
    mistake's case holds, is read as that mistake's; one no order of axes gives the contract's shape stays as it is
    (the verdict says its shape)."""
    steps = [f"step{i + 1}" for i, call in enumerate(case.calls) if call.use_cache]
    outputs = {**outputs, **{f"{step}.layout": torch.tensor(1.0) for step in steps}}  # unless reordered below
    orders = _axis_orders(case, [outputs.get(f"{step}.{part}") for step in steps for part in ("keys", "values")])
    right = _expected_of(case, EXERCISE.correct)
    for axes in orders:
        read = _read(outputs, steps, axes, right)
        if read is not None:
            return read
    if not orders or orders[0] == (0, 1, 2, 3):
        return outputs
    for v in [m.variant for m in mutants() if not m.outputs_only]:  # its axes in another order, and a mistake
        need = _expected_of(case, v)
        if not need:
            continue
        for axes in orders:
            read = _read(outputs, steps, axes, need)
            if read is not None and all(_same(read.get(name), t) for name, t in need.items()):
                return read
    as_they_are = _read(outputs, steps, orders[0], None)
    assert as_they_are is not None  # with no ring to match, no slot is missing
    return as_they_are


EXERCISE = Exercise(
    id="sliding_window",
    order=12,
    notebook="12_sliding_window",
    points=3,
    kind="module",
    contract="SlidingWindowAttention",
    args=("d_in", "d_out", "num_heads", "window", "num_sinks", "rope_base"),
    cases=cases,
    expected=expected,
    correct=WindowVariant(),
    mutants=mutants,
    read_back=read_back,
)
