"""Sliding-window attention (滑动窗口注意力), a ring-buffer KV cache of constant memory, and attention sinks.

**The window's convention** (the one of Hugging Face's ``sliding_window``: ``transformers.masking_utils.
sliding_window_overlay`` keeps key ``j`` for query ``i`` when ``j > i - sliding_window``): with window ``w`` a
query at position ``i`` sees the ``w`` keys ``i - w + 1, ..., i``, itself included. ``w = 1`` is "only itself";
``w >= T`` is plain causal attention. Masks here are True = hidden, like ``course_utils.causal_mask``.

**Attention sinks** (注意力汇聚点): trained heads park weight on the first tokens, the only ones every query sees in
training; evicting them breaks the model. Two answers:

* StreamingLLM (Xiao et al. 2023), at inference time, for a model trained without a window: keep the first
  ``num_sinks`` tokens visible to every query, next to the window. (StreamingLLM itself gives RoPE the positions
  within the cache, so it caches keys before RoPE and rotates them again at every step; ``RingKVCache`` keeps
  absolute positions, as a model trained with a window expects, and rotates each key once.)
* gpt-oss trains one sink *logit* per head with the model: it joins every row of scores as an extra column, takes
  its share of the softmax and is dropped (``attend_with_sink_logit``), so a row may give little weight to every
  real key.
"""

from __future__ import annotations

import math

import torch

from ..lang import pick
from .kv_cache import KVCache
from .sizes import kv_cache_bytes


def _check_window(window, num_sinks=0) -> None:
    if window is not None and (not isinstance(window, int) or isinstance(window, bool) or window < 1):
        raise ValueError(
            pick(
                f"window must be a positive int (a query sees itself and window - 1 keys before it) "
                f"or None for full causal attention, got {window!r}",
                "window 必须是正整数（一个查询看到它自己和之前的 window - 1 个键），完整的因果注意力则用 None，"
                f"收到的是 {window!r}",
            )
        )
    if not isinstance(num_sinks, int) or num_sinks < 0:
        raise ValueError(
            pick(
                f"num_sinks must be an int >= 0, got {num_sinks!r}",
                f"num_sinks 必须是不小于 0 的整数，收到的是 {num_sinks!r}",
            )
        )


def sliding_window_mask_at(query_positions, key_positions, *, window: int | None, num_sinks: int = 0) -> torch.Tensor:
    """(num_queries, num_keys) bool, True = hidden, from the tokens' absolute positions.

    Key ``j`` is visible to query ``i`` when ``j <= i`` and (``j > i - window`` or ``j < num_sinks``).
    ``window=None``: causal only. Positions need not be sorted: a ring buffer returns its keys in any order.
    """
    _check_window(window, num_sinks)
    q = torch.as_tensor(query_positions)  # (Sq,)
    k = torch.as_tensor(key_positions, device=q.device)  # (Sk,)
    distance = q[:, None] - k  # (Sq, Sk): how many positions back each key is
    hidden = distance < 0  # the future
    if window is not None:
        outside = distance >= window
        if num_sinks:
            outside &= k >= num_sinks  # the sinks stay visible (causally)
        hidden |= outside
    return hidden


def sliding_window_mask(
    num_queries: int, num_keys: int | None = None, *, window: int | None, num_sinks: int = 0, device=None
) -> torch.Tensor:
    """(num_queries, num_keys) bool, True = hidden: causal, plus keys ``window`` or more positions back hidden.

    Aligned like ``causal_mask``: the queries are the *last* ``num_queries`` of ``num_keys`` consecutive
    positions. ``num_sinks``: the first keys stay visible to every query (StreamingLLM).
    """
    num_keys = num_queries if num_keys is None else num_keys
    if num_queries > num_keys:
        raise ValueError(
            pick(
                f"sliding-window mask: {num_queries} queries cannot follow only {num_keys} keys",
                f"滑动窗口掩码：{num_queries} 个查询不能只跟在 {num_keys} 个键之后",
            )
        )
    keys = torch.arange(num_keys, device=device)
    return sliding_window_mask_at(keys[num_keys - num_queries :], keys, window=window, num_sinks=num_sinks)


def attend_with_sink_logit(queries, keys, values, sink_logits, mask=None):
    """gpt-oss's attention with a learned sink: softmax over [scores, sink] per row, the sink's column dropped.

    queries (B, H, Sq, hd), keys and values (B, H, Sk, hd), sink_logits (H,): one logit per head, broadcast to every
    row. Returns (context (B, H, Sq, hd), weights (B, H, Sq, Sk)); a row's weights sum to ``1 - sink share`` < 1.
    """
    if sink_logits.ndim != 1 or sink_logits.shape[0] != queries.shape[1]:
        raise ValueError(
            pick(
                f"sink_logits must hold one logit per head: shape ({queries.shape[1]},), "
                f"got {tuple(sink_logits.shape)}",
                f"sink_logits 必须每个头一个 logit：形状为 ({queries.shape[1]},)，收到的是 {tuple(sink_logits.shape)}",
            )
        )
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])  # (B, H, Sq, Sk)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    sink = sink_logits.to(scores.dtype)[None, :, None, None].expand(*scores.shape[:-1], 1)  # (B, H, Sq, 1)
    weights = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]  # the sink's share dropped
    return weights @ values, weights


class RingKVCache(KVCache):
    """A sliding-window KV cache of constant memory: ``num_sinks`` first tokens plus a ring of ``window`` slots.

    One buffer of ``num_sinks + window`` slots (``keys``, ``values``; ``sink_keys`` and ``ring_keys`` are views of its
    two parts). The token at position ``p`` goes to slot ``p`` if ``p < num_sinks`` (never evicted), else to slot
    ``num_sinks + (p - num_sinks) % window`` (the Mistral 7B paper's rolling buffer, with ``num_sinks=0``). Apply RoPE
    *before* ``update``, at ``next_positions(n)``: the absolute positions, which keep counting after the ring wraps
    around, so that a key's rotation says how old it is wherever its slot is.

    ``update(keys, values)`` of n new tokens returns the keys and values the new queries may need and sets
    ``key_positions`` to their positions; mask with
    ``sliding_window_mask_at(new_positions, cache.key_positions, window=window, num_sinks=num_sinks)``.

    * A decoding step (n = 1) writes first, then attends, as Mistral's reference code does: the new key overwrites
      the one ``window`` positions older, and the held slots are returned as they are, in slot order (views: no
      copy). They are exactly the sinks and the window, so the mask hides none of them, and a softmax over keys does
      not care about their order: each key carries its position in its rotation, and ``key_positions`` names it.
    * A chunk (n > 1: a prefill, or several tokens at once) reads first, then writes: its first queries need keys
      that its last tokens will overwrite. The held keys are returned oldest first, then the n new ones; of a chunk
      longer than the window only the last ``window`` tokens are kept.

    vLLM keeps the same window differently: paged blocks at absolute positions, a whole block freed once all its
    tokens have left the window (notebook 12).
    """

    def __init__(self, batch_size, num_kv_heads, window, head_dim, num_sinks=0, dtype=torch.float32, device=None):
        _check_window(window, num_sinks)
        if window is None:
            raise ValueError(
                pick(
                    "a ring buffer needs a window size; use PreallocatedKVCache for full attention",
                    "环形缓冲区需要窗口大小；完整注意力请用 PreallocatedKVCache",
                )
            )
        self.window, self.num_sinks = window, num_sinks
        shape = (batch_size, num_kv_heads, num_sinks + window, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)  # slots 0 .. num_sinks - 1: the sinks
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.sink_keys, self.ring_keys = self.keys[:, :, :num_sinks], self.keys[:, :, num_sinks:]
        self.sink_values, self.ring_values = self.values[:, :, :num_sinks], self.values[:, :, num_sinks:]
        self.seen = 0  # tokens ever written: the next token's absolute position
        self._last_read = None  # what the last update returned: ("slots", seen) or ("chunk", seen before, n)

    @property
    def seq_len(self) -> int:
        """Tokens held now (at most num_sinks + window)."""
        first, end = self._ring_span()
        return self._num_sinks_held() + end - first

    def next_positions(self, num_tokens: int) -> torch.Tensor:
        """(num_tokens,) absolute positions of the next tokens, for RoPE: they do not restart at the wrap."""
        return torch.arange(self.seen, self.seen + num_tokens, device=self.keys.device)

    def _num_sinks_held(self, seen: int | None = None) -> int:
        return min(self.seen if seen is None else seen, self.num_sinks)

    def _ring_span(self, seen: int | None = None) -> tuple[int, int]:
        """(first, end): after ``seen`` tokens (default: now) the ring holds positions first .. end - 1, at most
        ``window`` of them."""
        seen = self.seen if seen is None else seen
        first = min(max(self.num_sinks, seen - self.window), seen)  # empty while only sinks are seen
        return first, seen

    def _slot(self, position: int) -> int:
        return position if position < self.num_sinks else self.num_sinks + (position - self.num_sinks) % self.window

    def cached_positions(self, seen: int | None = None) -> torch.Tensor:
        """Positions held after ``seen`` tokens (default: now), oldest first: the sinks, then the ring's last
        ``window`` positions."""
        first, end = self._ring_span(seen)
        device = self.keys.device
        return torch.cat(
            [torch.arange(self._num_sinks_held(seen), device=device), torch.arange(first, end, device=device)]
        )

    @property
    def key_positions(self) -> torch.Tensor:
        """(num_keys,) positions of the keys the last ``update`` returned, in the order it returned them.

        Built when asked, from the token count alone: a decoding step that needs no mask builds no index tensor."""
        if self._last_read is None:
            return torch.zeros(0, dtype=torch.long, device=self.keys.device)
        if self._last_read[0] == "chunk":
            _, seen, n = self._last_read
            return torch.cat([self.cached_positions(seen), torch.arange(seen, seen + n, device=self.keys.device)])
        return self._slot_order_positions(self._last_read[1])

    def _held_slots(self) -> tuple[int, int]:
        """(lo, hi): the held tokens fill slots lo .. hi - 1 (the sinks' slots, then the ring's used ones)."""
        first, end = self._ring_span()
        n_sinks, count = self._num_sinks_held(), end - first
        return (self.num_sinks - n_sinks, self.num_sinks + count) if count else (0, n_sinks)

    def _slot_order_positions(self, seen: int) -> torch.Tensor:
        """Positions of the held slots, in slot order, after ``seen`` tokens.

        After the wrap-around ring slot j holds the latest position p with (p - num_sinks) % window == j, i.e. the
        ring's positions oldest first, rolled by the oldest token's slot."""
        first, end = self._ring_span(seen)
        n_sinks = self._num_sinks_held(seen)
        start = (first - self.num_sinks) % self.window  # the oldest token's slot
        device = self.keys.device
        positions = torch.arange(first, end, device=device)
        if start:  # slots start .. window - 1 hold the oldest, slots 0 .. start - 1 the newest
            positions = positions.roll(start)
        if n_sinks:
            positions = torch.cat([torch.arange(n_sinks, device=device), positions])
        return positions

    def _read(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Cached keys and values oldest first: the sinks, then the ring rotated to start at its oldest slot.

        Before the first wrap-around that is slots 0 .. count - 1; after it, slots start .. window - 1 followed by
        0 .. start - 1. Plain slices, no index tensors: nothing waits for the GPU.
        """
        first, end = self._ring_span()
        n_sinks, count = self._num_sinks_held(), end - first
        start = (first - self.num_sinks) % self.window  # the oldest token's slot
        wrapped = max(0, start + count - self.window)  # how many of the newest sit at slots 0 .. wrapped - 1

        def oldest_first(sinks, ring):
            return torch.cat([sinks[:, :, :n_sinks], ring[:, :, start : start + count], ring[:, :, :wrapped]], dim=2)

        return oldest_first(self.sink_keys, self.ring_keys), oldest_first(self.sink_values, self.ring_values)

    def _write(self, keys, values) -> None:
        """Store n new tokens (positions seen .. seen + n - 1) through their slot indices, in one ``index_copy_``
        per tensor: the sinks into their own slots, and of the rest only the last ``window`` (older ones would be
        overwritten in the same write)."""
        n = keys.shape[2]
        n_new_sinks = max(0, min(self.num_sinks, self.seen + n) - self.seen)
        kept = list(range(n_new_sinks)) + list(range(max(n_new_sinks, n - self.window), n))  # indices into the new
        if n == 1:  # a decoding step: one slot, no index tensor
            slot = self._slot(self.seen)
            self.keys.narrow(2, slot, 1).copy_(keys)
            self.values.narrow(2, slot, 1).copy_(values)
            return
        device = self.keys.device
        slots = torch.tensor([self._slot(self.seen + i) for i in kept], device=device)
        taken = torch.tensor(kept, device=device)
        self.keys.index_copy_(2, slots, keys.index_select(2, taken))
        self.values.index_copy_(2, slots, values.index_select(2, taken))

    def update(self, keys, values):
        b, h, _, d = self.keys.shape
        self._check_new(keys, values, (b, h, d))
        n = keys.shape[2]
        if n == 1:  # write, then read the held slots in place: views, no copy
            self._write(keys, values)
            self.seen += 1
            self._last_read = ("slots", self.seen)
            lo, hi = self._held_slots()
            return self.keys.narrow(2, lo, hi - lo), self.values.narrow(2, lo, hi - lo)
        old_keys, old_values = self._read()  # read, then write: the chunk's first queries need the oldest keys
        self._last_read = ("chunk", self.seen, n)
        all_keys, all_values = torch.cat([old_keys, keys], dim=2), torch.cat([old_values, values], dim=2)
        self._write(keys, values)
        self.seen += n
        return all_keys, all_values

    def reset(self):
        self.seen = 0
        self._last_read = None

    def _held(self):
        return self.keys, self.values


def layer_windows(num_layers: int, window: int, local_per_global: int) -> list[int | None]:
    """Per layer, its window (local layer) or None (global layer): ``local_per_global`` local layers, then one
    global, repeated (Gemma 3: 5 local : 1 global; gpt-oss and Gemma 2 alternate, 1 : 1)."""
    _check_window(window)
    if not isinstance(local_per_global, int) or local_per_global < 0:
        raise ValueError(
            pick(
                f"local_per_global must be an int >= 0, got {local_per_global!r}",
                f"local_per_global 必须是不小于 0 的整数，收到的是 {local_per_global!r}",
            )
        )
    period = local_per_global + 1
    return [None if (layer + 1) % period == 0 else window for layer in range(num_layers)]


def sliding_window_cache_bytes(windows, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_element=2) -> int:
    """KV-cache bytes after ``seq_len`` tokens when layer ``l`` keeps ``min(seq_len, windows[l])`` tokens
    (``None`` = a global layer: all ``seq_len``). For one layer it is ``kv_cache_bytes`` with fewer tokens."""
    tokens = sum(seq_len if w is None else min(seq_len, w) for w in windows)
    return kv_cache_bytes(1, num_kv_heads, head_dim, tokens, batch_size, bytes_per_element)
