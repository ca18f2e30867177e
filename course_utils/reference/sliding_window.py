"""Sliding-window attention (滑动窗口注意力), a ring-buffer KV cache of constant memory, and attention sinks.

**The window's convention** (the one of Hugging Face's ``sliding_window``: ``transformers.masking_utils.
sliding_window_overlay`` keeps key ``j`` for query ``i`` when ``j > i - sliding_window``): with window ``w`` a
query at position ``i`` sees the ``w`` keys ``i - w + 1, ..., i``, itself included. ``w = 1`` is "only itself";
``w >= T`` is plain causal attention. Masks here are True = hidden, like ``course_utils.causal_mask``.

**Attention sinks** (注意力汇聚点) come in two kinds:

* StreamingLLM (Xiao et al. 2023) keeps the first ``num_sinks`` tokens visible to every query, next to the window:
  softmax dumps weight on them, and evicting them breaks the model.
* gpt-oss learns one sink *logit* per head instead: it joins every row of scores as an extra column, takes its share
  of the softmax and is dropped (``attend_with_sink_logit``), so a row may give little weight to every real key.
"""
from __future__ import annotations

import math

import torch

from .kv_cache import KVCache
from .sizes import kv_cache_bytes


def _check_window(window, num_sinks=0) -> None:
    if window is not None and (not isinstance(window, int) or isinstance(window, bool) or window < 1):
        raise ValueError(f"window must be a positive int (a query sees itself and window - 1 keys before it) "
                         f"or None for full causal attention, got {window!r}")
    if not isinstance(num_sinks, int) or num_sinks < 0:
        raise ValueError(f"num_sinks must be an int >= 0, got {num_sinks!r}")


def sliding_window_mask_at(query_positions, key_positions, *, window: int | None, num_sinks: int = 0) -> torch.Tensor:
    """(num_queries, num_keys) bool, True = hidden, from the tokens' absolute positions.

    Key ``j`` is visible to query ``i`` when ``j <= i`` and (``j > i - window`` or ``j < num_sinks``).
    ``window=None``: causal only. Positions need not be sorted: a ring buffer returns its keys in any order.
    """
    _check_window(window, num_sinks)
    q = torch.as_tensor(query_positions)[:, None]  # (Sq, 1)
    k = torch.as_tensor(key_positions, device=q.device)[None, :]  # (1, Sk)
    visible = k <= q
    if window is not None:
        visible &= (k > q - window) | (k < num_sinks)
    return ~visible


def sliding_window_mask(num_queries: int, num_keys: int | None = None, *, window: int | None, num_sinks: int = 0,
                        device=None) -> torch.Tensor:
    """(num_queries, num_keys) bool, True = hidden: causal, plus keys ``window`` or more positions back hidden.

    Aligned like ``causal_mask``: the queries are the *last* ``num_queries`` of ``num_keys`` consecutive
    positions. ``num_sinks``: the first keys stay visible to every query (StreamingLLM).
    """
    num_keys = num_queries if num_keys is None else num_keys
    if num_queries > num_keys:
        raise ValueError(f"sliding-window mask: {num_queries} queries cannot follow only {num_keys} keys")
    keys = torch.arange(num_keys, device=device)
    return sliding_window_mask_at(keys[num_keys - num_queries:], keys, window=window, num_sinks=num_sinks)


def attend_with_sink_logit(queries, keys, values, sink_logits, mask=None):
    """gpt-oss's attention with a learned sink: softmax over [scores, sink] per row, the sink's column dropped.

    queries (B, H, Sq, hd), keys and values (B, H, Sk, hd), sink_logits (H,): one logit per head, broadcast to every
    row. Returns (context (B, H, Sq, hd), weights (B, H, Sq, Sk)); a row's weights sum to ``1 - sink share`` < 1.
    """
    if sink_logits.ndim != 1 or sink_logits.shape[0] != queries.shape[1]:
        raise ValueError(f"sink_logits must hold one logit per head: shape ({queries.shape[1]},), "
                         f"got {tuple(sink_logits.shape)}")
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])  # (B, H, Sq, Sk)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    sink = sink_logits.to(scores.dtype)[None, :, None, None].expand(*scores.shape[:-1], 1)  # (B, H, Sq, 1)
    weights = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]  # the sink's share dropped
    return weights @ values, weights


class RingKVCache(KVCache):
    """A sliding-window KV cache of constant memory: ``num_sinks`` first tokens plus a ring of ``window`` slots.

    The token at position ``p >= num_sinks`` lives in ring slot ``(p - num_sinks) % window`` (Mistral's rolling
    buffer, with ``num_sinks=0``); positions below ``num_sinks`` have slots of their own and are never evicted.
    Apply RoPE *before* ``update``, at ``next_positions(n)``: the absolute positions, which keep counting after the
    ring wraps around, so that a key's rotation says how old it is wherever its slot is.

    ``update(keys, values)`` of n new tokens returns the cached keys **oldest first** followed by the n new ones,
    and sets ``key_positions`` to their positions; mask with
    ``sliding_window_mask_at(new_positions, cache.key_positions, window=window, num_sinks=num_sinks)``.
    A prefill longer than the window works the same way: all its keys are returned once, only the last ``window``
    are kept. (Keeping ``window`` slots is one more than a decoding step needs, ``window - 1`` old keys plus the
    new one; the mask hides that extra oldest key.)
    """

    def __init__(self, batch_size, num_kv_heads, window, head_dim, num_sinks=0, dtype=torch.float32, device=None):
        _check_window(window, num_sinks)
        if window is None:
            raise ValueError("a ring buffer needs a window size; use PreallocatedKVCache for full attention")
        self.window, self.num_sinks = window, num_sinks
        self.sink_keys = torch.zeros(batch_size, num_kv_heads, num_sinks, head_dim, dtype=dtype, device=device)
        self.sink_values = torch.zeros_like(self.sink_keys)
        self.ring_keys = torch.zeros(batch_size, num_kv_heads, window, head_dim, dtype=dtype, device=device)
        self.ring_values = torch.zeros_like(self.ring_keys)
        self.seen = 0  # tokens ever written: the next token's absolute position
        self.key_positions = torch.zeros(0, dtype=torch.long, device=device)

    @property
    def seq_len(self) -> int:
        """Tokens held now (at most num_sinks + window)."""
        first, end = self._ring_span()
        return self._num_sinks_held() + end - first

    def next_positions(self, num_tokens: int) -> torch.Tensor:
        """(num_tokens,) absolute positions of the next tokens, for RoPE: they do not restart at the wrap."""
        return torch.arange(self.seen, self.seen + num_tokens, device=self.ring_keys.device)

    def _num_sinks_held(self) -> int:
        return min(self.seen, self.num_sinks)

    def _ring_span(self) -> tuple[int, int]:
        """(first, end): the ring holds positions first .. end - 1, at most ``window`` of them."""
        first = min(max(self.num_sinks, self.seen - self.window), self.seen)  # empty while only sinks are seen
        return first, self.seen

    def cached_positions(self) -> torch.Tensor:
        """Positions held now, oldest first: the sinks, then the ring's last ``window`` positions."""
        first, end = self._ring_span()
        device = self.ring_keys.device
        return torch.cat([torch.arange(self._num_sinks_held(), device=device), torch.arange(first, end, device=device)])

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
            return torch.cat([sinks[:, :, :n_sinks], ring[:, :, start:start + count], ring[:, :, :wrapped]], dim=2)

        return oldest_first(self.sink_keys, self.ring_keys), oldest_first(self.sink_values, self.ring_values)

    def _write(self, keys, values) -> None:
        """Store n new tokens (positions seen .. seen + n - 1): sinks into their own slots, then only the last
        ``window`` of the rest into the ring (older ones would be overwritten anyway), in at most two slices."""
        n = keys.shape[2]
        n_new_sinks = max(0, min(self.num_sinks, self.seen + n) - self.seen)
        self.sink_keys[:, :, self.seen:self.seen + n_new_sinks] = keys[:, :, :n_new_sinks]
        self.sink_values[:, :, self.seen:self.seen + n_new_sinks] = values[:, :, :n_new_sinks]
        i0 = max(n_new_sinks, n - self.window)  # the first new token the ring keeps
        slot = (self.seen + i0 - self.num_sinks) % self.window
        head = min(n - i0, self.window - slot)  # up to the ring's end, the rest from slot 0
        for ring, new in ((self.ring_keys, keys), (self.ring_values, values)):
            ring[:, :, slot:slot + head] = new[:, :, i0:i0 + head]
            ring[:, :, :n - i0 - head] = new[:, :, i0 + head:]

    def update(self, keys, values):
        b, h, _, d = self.ring_keys.shape
        self._check_new(keys, values, (b, h, d))
        n = keys.shape[2]
        old_keys, old_values = self._read()
        self.key_positions = torch.cat([self.cached_positions(), self.next_positions(n)])
        all_keys, all_values = torch.cat([old_keys, keys], dim=2), torch.cat([old_values, values], dim=2)
        self._write(keys, values)
        self.seen += n
        return all_keys, all_values

    def reset(self):
        self.seen = 0
        self.key_positions = self.key_positions[:0]

    @property
    def nbytes(self):
        return sum(t.numel() * t.element_size()
                   for t in (self.sink_keys, self.sink_values, self.ring_keys, self.ring_values))


def layer_windows(num_layers: int, window: int, local_per_global: int) -> list[int | None]:
    """Per layer, its window (local layer) or None (global layer): ``local_per_global`` local layers, then one
    global, repeated (Gemma 3: 5 local : 1 global; gpt-oss and Gemma 2 alternate, 1 : 1)."""
    _check_window(window)
    if not isinstance(local_per_global, int) or local_per_global < 0:
        raise ValueError(f"local_per_global must be an int >= 0, got {local_per_global!r}")
    period = local_per_global + 1
    return [None if (layer + 1) % period == 0 else window for layer in range(num_layers)]


def sliding_window_cache_bytes(windows, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_element=2) -> int:
    """KV-cache bytes after ``seq_len`` tokens when layer ``l`` keeps ``min(seq_len, windows[l])`` tokens
    (``None`` = a global layer: all ``seq_len``). For one layer it is ``kv_cache_bytes`` with fewer tokens."""
    tokens = sum(seq_len if w is None else min(seq_len, w) for w in windows)
    return kv_cache_bytes(1, num_kv_heads, head_dim, tokens, batch_size, bytes_per_element)
