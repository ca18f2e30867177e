"""KV caches for incremental decoding: keep each layer's past keys and values instead of recomputing them.

All tensors are (batch, num_kv_heads, num_tokens, head_dim). For grouped-query attention the cache
stores only the ``num_kv_groups`` K/V heads, not one per query head.
"""
from __future__ import annotations

import torch


class KVCache:
    """What every cache offers: ``update`` appends new keys/values and returns all of them so far."""

    seq_len: int = 0

    def update(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def reset(self) -> None:
        raise NotImplementedError

    @property
    def nbytes(self) -> int:
        """Bytes held by the cache's key and value tensors."""
        raise NotImplementedError

    @staticmethod
    def _check_new(keys, values, expected=None) -> None:
        if keys.ndim != 4 or keys.shape != values.shape:
            raise ValueError(
                "KV cache update needs keys and values of the same shape (batch, num_kv_heads, "
                f"num_tokens, head_dim), got {tuple(keys.shape)} and {tuple(values.shape)}"
            )
        if expected is not None:
            b, h, d = expected
            if (keys.shape[0], keys.shape[1], keys.shape[3]) != (b, h, d):
                raise ValueError(
                    f"KV cache holds (batch={b}, num_kv_heads={h}, head_dim={d}), got new keys of shape "
                    f"{tuple(keys.shape)}"
                )


class GrowingKVCache(KVCache):
    """A cache that grows with ``torch.cat`` at every step (the ``past_key_value`` style).

    Simple, but each step copies the whole cache: O(T) work per token and O(T^2) over a generation.
    """

    def __init__(self):
        self.keys: torch.Tensor | None = None  # (B, n_kv, T, hd)
        self.values: torch.Tensor | None = None

    @property
    def seq_len(self) -> int:
        return 0 if self.keys is None else self.keys.shape[2]

    def update(self, keys, values):
        if self.keys is None:
            self._check_new(keys, values)
            self.keys, self.values = keys, values
        else:
            self._check_new(keys, values, (self.keys.shape[0], self.keys.shape[1], self.keys.shape[3]))
            self.keys = torch.cat([self.keys, keys], dim=2)
            self.values = torch.cat([self.values, values], dim=2)
        return self.keys, self.values

    def reset(self):
        self.keys = self.values = None

    @property
    def nbytes(self):
        if self.keys is None:
            return 0
        return self.keys.numel() * self.keys.element_size() + self.values.numel() * self.values.element_size()


class PreallocatedKVCache(KVCache):
    """A cache allocated once for ``max_len`` tokens, written in place at a moving position.

    No copies of the past per step; writing past ``max_len`` raises a ValueError.
    """

    def __init__(self, batch_size, num_kv_heads, max_len, head_dim, dtype=torch.float32, device=None):
        shape = (batch_size, num_kv_heads, max_len, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.max_len = max_len
        self.seq_len = 0  # the write position

    def update(self, keys, values):
        b, h, _, d = self.keys.shape
        self._check_new(keys, values, (b, h, d))
        start, end = self.seq_len, self.seq_len + keys.shape[2]
        if end > self.max_len:
            raise ValueError(
                f"KV cache overflow: it holds {self.max_len} tokens, {start} are cached and "
                f"{keys.shape[2]} more would need {end}; make a larger cache or reset() it"
            )
        self.keys[:, :, start:end] = keys
        self.values[:, :, start:end] = values
        self.seq_len = end
        return self.keys[:, :, :end], self.values[:, :, :end]

    def reset(self):
        self.seq_len = 0

    @property
    def nbytes(self):
        return self.keys.numel() * self.keys.element_size() + self.values.numel() * self.values.element_size()

