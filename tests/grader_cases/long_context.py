"""Classic long-context mistakes (notebook 12), each a drop-in replacement for one piece of
``course_utils.reference.sliding_window``: ``MUTANTS[name] = (diagnosis, attribute path, replacement)``.

tests/reference/test_long_context_mutants.py patches each one in and checks that the reference tests fail; a grader
for exercise 12 can reuse the same mistakes (and their one-line diagnoses) as its mutants.
"""
import torch


def window_off_by_one(query_positions, key_positions, *, window, num_sinks=0):
    q = torch.as_tensor(query_positions)[:, None]
    k = torch.as_tensor(key_positions, device=q.device)[None, :]
    visible = k <= q
    if window is not None:
        visible &= (k >= q - window) | (k < num_sinks)  # w + 1 keys: i - w .. i
    return ~visible


def read_in_slot_order(self):
    first, end = self._ring_span()
    n_sinks, count = self._num_sinks_held(), end - first
    keys = torch.cat([self.sink_keys[:, :, :n_sinks], self.ring_keys[:, :, :count]], dim=2)  # slot 0 first
    values = torch.cat([self.sink_values[:, :, :n_sinks], self.ring_values[:, :, :count]], dim=2)
    return keys, values


def positions_reset_at_wrap(self, num_tokens):
    positions = torch.arange(self.seen, self.seen + num_tokens, device=self.ring_keys.device)
    ring = positions >= self.num_sinks
    return torch.where(ring, (positions - self.num_sinks) % self.window + self.num_sinks, positions)  # the slot


def sinks_evicted(self, seen=None):
    return 0  # the first tokens are no longer held: only the ring is read


MUTANTS = {
    "window_off_by_one": (
        "the window lets a query see w + 1 keys (i - w .. i) instead of w (i - w + 1 .. i)",
        "sliding_window_mask_at", window_off_by_one),
    "slot_order": (
        "after the wrap-around the ring buffer is read in slot order, not oldest first: keys and positions disagree",
        "RingKVCache._read", read_in_slot_order),
    "rope_reset_at_wrap": (
        "RoPE positions restart at the wrap-around (the slot index, not the absolute position)",
        "RingKVCache.next_positions", positions_reset_at_wrap),
    "sinks_evicted": (
        "the sink tokens are evicted with the rest of the window: queries no longer see the first tokens",
        "RingKVCache._num_sinks_held", sinks_evicted),
}
