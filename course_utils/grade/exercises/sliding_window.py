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

from ..registry import Exercise
from ..specs import draw_seed, random_params
from ..specs_beyond import _attend, _lin, _mistake, _rope, _split, mutant, rope_param_shapes
from ..types import Call, Case


@dataclass(frozen=True)
class WindowVariant:
    window: str = "ok"          # ok | one_more (keys i - w .. i) | one_less (keys i - w + 2 .. i)
    read: str = "age"           # age | slot (the ring read slot 0 first, but masked as if oldest first)
    rope_positions: str = "absolute"  # absolute | slot (the position restarts at every wrap-around)
    sinks: str = "kept"         # kept | evicted (the first tokens hidden once they leave the window)
    cache: str = "ring"         # ring | raw_keys (keys cached before RoPE, rotated when read) | grows (torch.cat)


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
    nh, d_out, window, num_sinks, base = (cfg["num_heads"], cfg["d_out"], cfg["window"], cfg["num_sinks"],
                                          cfg["rope_base"])
    b, n, _ = x.shape
    hd = d_out // nh
    q, k, val = _split(_lin(p, "W_query", x), nh), _split(_lin(p, "W_key", x), nh), _split(_lin(p, "W_value", x), nh)
    new_positions = torch.arange(start_pos, start_pos + n)

    def rotated(t, positions):
        if v.rope_positions == "slot":  # the slot index instead of the position: restarts at the wrap-around
            positions = torch.tensor([slot_of(int(i), window, num_sinks) for i in positions], dtype=torch.long)
        return _rope(t, positions, base)

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
    ctx = _attend(q, keys, values, math.sqrt(hd), hide)
    out = _lin(p, "out_proj", ctx.transpose(1, 2).reshape(b, n, d_out))
    return out, (present if use_cache else None)


# ---------------------------------------------------------------------------------------------
# cases


def _case(name, g, batch, chunks, *, full=True, **ctor):
    """One sequence fed in ``chunks`` through the cache (each call passes the previous present back and says where
    its tokens start), then, with ``full``, the whole sequence in one call without a cache."""
    params = random_params(rope_param_shapes(ctor), g)
    x = torch.randn(batch, sum(chunks), ctor["d_in"], generator=g)
    calls, start = [], 0
    for i, size in enumerate(chunks):
        calls.append(Call(x[:, start:start + size], seed=draw_seed(g), past=i - 1 if i else None, use_cache=True,
                          kwargs={"start_pos": start}))
        start += size
    if full:
        calls.append(Call(x, seed=draw_seed(g), use_cache=False, kwargs={"start_pos": 0}))
    return Case(name, ctor, params, calls, kind="cache", meta={"present_names": ("keys", "values")})


def _given_case(name, g, batch, start_pos, num_new, **ctor):
    """A full ring the module never produced, its oldest token in a middle slot, and ``num_new`` tokens after it."""
    params = random_params(rope_param_shapes(ctor), g)
    hd, size = ctor["d_out"] // ctor["num_heads"], ctor["num_sinks"] + ctor["window"]
    x = torch.randn(batch, num_new, ctor["d_in"], generator=g)
    case = Case(name, ctor, params, [Call(x, seed=draw_seed(g), past="given", use_cache=True,
                                          kwargs={"start_pos": start_pos})],
                kind="cache", meta={"present_names": ("keys", "values")})
    case.given_past = (torch.randn(batch, ctor["num_heads"], size, hd, generator=g),
                       torch.randn(batch, ctor["num_heads"], size, hd, generator=g))
    return case


def cases(g) -> list[Case]:
    """The cases, drawn from ``g`` (seeded by the grader's secret seed)."""
    return [
        _case("window 4, no sinks, 2 heads of 4, base 10000: a prefill of 6 (longer than the window), then 1, 1, 2, 1, "
              "1 tokens (the ring wraps around), then the whole sequence without the cache",
              g, 2, [6, 1, 1, 2, 1, 1], d_in=6, d_out=8, num_heads=2, window=4, num_sinks=0, rope_base=10000.0),
        _case("window 3, 2 sinks, 3 heads of 2, base 100: a prompt of 3, then one token at a time up to 11",
              g, 1, [3] + [1] * 8, d_in=4, d_out=6, num_heads=3, window=3, num_sinks=2, rope_base=100.0),
        _case("window 5, 1 sink, 2 heads of 6, base 500000: a prefill of 9, then chunks of 3 and 1",
              g, 2, [9, 3, 1], d_in=5, d_out=12, num_heads=2, window=5, num_sinks=1, rope_base=500000.0),
        _case("window 1 (only itself), 1 sink, 2 heads of 4: a prompt of 2, then 1, 1, 1",
              g, 1, [2, 1, 1, 1], d_in=4, d_out=8, num_heads=2, window=1, num_sinks=1, rope_base=10000.0),
        _case("window 16, longer than the sequence (plain causal attention), 2 heads of 4: chunks of 3 and 4",
              g, 2, [3, 4], d_in=4, d_out=8, num_heads=2, window=16, num_sinks=0, rope_base=10000.0),
        _given_case("a full ring the module did not produce (window 4, 2 sinks, 13 tokens seen), 2 new tokens",
                    g, 2, 13, 2, d_in=6, d_out=8, num_heads=2, window=4, num_sinks=2, rope_base=10000.0),
    ]


def expected(case: Case, variant: WindowVariant) -> dict:
    """{name: tensor or None}, named as the harness names the learner's outputs: step<i>.out, .keys, .values."""
    with torch.no_grad():
        outs, presents = {}, {}
        for i, call in enumerate(case.calls):
            case.meta["step"] = i + 1
            past = (presents[call.past] if isinstance(call.past, int) else
                    case.given_past if call.past == "given" else None)
            out, present = window_forward(case.params, call.x, case.ctor, variant, past, call.use_cache,
                                          **call.kwargs)
            outs[f"step{i + 1}.out"] = out
            outs[f"step{i + 1}.keys"], outs[f"step{i + 1}.values"] = (None, None) if present is None else present
            presents[i] = present
        return outs


# ---------------------------------------------------------------------------------------------
# the misconception catalogue (texts: messages.py's mutant.<key>)

M_SLOT_ORDER = _mistake("ring_read_in_slot_order")
M_ROPE_WRAP = _mistake("rope_positions_reset_at_wrap")
M_SINKS_EVICTED = _mistake("sinks_evicted")
M_WINDOW_OFF_BY_ONE = _mistake("window_off_by_one")
M_RAW_KEYS = _mistake("ring_keys_cached_before_rope")
M_GROWS = _mistake("ring_cache_grows")


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
