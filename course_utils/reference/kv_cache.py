"""KV caches for incremental decoding: keep each layer's past keys and values instead of recomputing them.

One family, one protocol (``KVCache``: ``update`` appends the new tokens' two tensors and returns all of them so
far, ``reset``, ``seq_len``, ``nbytes``), each kind in two forms: growing (``torch.cat`` per step) and
preallocated (allocated once for ``max_len`` tokens, written in place).

* K/V caches (MHA, GQA, MQA): keys and values (batch, num_kv_heads, num_tokens, head_dim). For grouped-query
  attention the cache stores only the ``num_kv_groups`` K/V heads, not one per query head.
* latent caches (MLA, ``course_utils.mla``): the latents ``c_kv`` (batch, num_tokens, kv_latent_dim) and the
  rotated shared keys ``k_rope`` (batch, num_tokens, rope_dim).

The sizes by formula are in ``course_utils.sizes``.
"""

from __future__ import annotations

import torch

from ..lang import pick


class KVCache:
    """What every cache offers: ``update`` appends new keys/values and returns all of them so far."""

    @property
    def seq_len(self) -> int:
        """Tokens held now."""
        raise NotImplementedError

    def update(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def reset(self) -> None:
        raise NotImplementedError

    @property
    def nbytes(self) -> int:
        """Bytes held by the cache's two tensors (all that is allocated, for a preallocated cache)."""
        return sum(t.numel() * t.element_size() for t in self._held() if t is not None)

    def _held(self) -> tuple:
        raise NotImplementedError

    @staticmethod
    def _check_new(keys, values, expected=None) -> None:
        if keys.ndim != 4 or keys.shape != values.shape:
            raise ValueError(
                pick(
                    "KV cache update needs keys and values of the same shape (batch, num_kv_heads, "
                    f"num_tokens, head_dim), got {tuple(keys.shape)} and {tuple(values.shape)}",
                    "更新 KV 缓存需要形状相同的 keys 和 values (batch, num_kv_heads, num_tokens, head_dim)，"
                    f"收到的是 {tuple(keys.shape)} 和 {tuple(values.shape)}",
                )
            )
        if expected is not None:
            b, h, d = expected
            if (keys.shape[0], keys.shape[1], keys.shape[3]) != (b, h, d):
                raise ValueError(
                    pick(
                        f"KV cache holds (batch={b}, num_kv_heads={h}, head_dim={d}), got new keys of shape "
                        f"{tuple(keys.shape)}",
                        f"KV 缓存存的是 (batch={b}, num_kv_heads={h}, head_dim={d})，"
                        f"收到的新 keys 形状为 {tuple(keys.shape)}",
                    )
                )


class GrowingKVCache(KVCache):
    """A cache that grows with ``torch.cat`` at every step (the ``past_key_value`` style).

    Simple, but each step copies the whole cache: O(T) work per token and O(T^2) over a generation.
    """

    def __init__(self) -> None:
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

    def _held(self):
        return self.keys, self.values


class PreallocatedKVCache(KVCache):
    """A cache allocated once for ``max_len`` tokens, written in place at a moving position.

    No copies of the past per step; writing past ``max_len`` raises a ValueError.
    """

    seq_len: int = 0  # here a plain attribute that ``update`` moves, not the base class's read-only property

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
                pick(
                    f"KV cache overflow: it holds {self.max_len} tokens, {start} are cached and "
                    f"{keys.shape[2]} more would need {end}; make a larger cache or reset() it",
                    f"KV 缓存溢出：它能存 {self.max_len} 个 token，已缓存 {start} 个，"
                    f"再加 {keys.shape[2]} 个就需要 {end} 个；"
                    "请用更大的缓存或先 reset()",
                )
            )
        self.keys[:, :, start:end] = keys
        self.values[:, :, start:end] = values
        self.seq_len = end
        return self.keys[:, :, :end], self.values[:, :, :end]

    def reset(self):
        self.seq_len = 0

    def _held(self):
        return self.keys, self.values


class LatentKVCache(KVCache):
    """MLA's cache: ``update(c_kv, k_rope)`` appends the new tokens' latents (B, n, kv_latent_dim) and rotated
    shared keys (B, n, rope_dim) and returns all of them so far. Keys and values are both up-projections of
    ``c_kv``, so there is no second per-head tensor."""

    @staticmethod
    def _check_new(c_kv, k_rope, expected=None) -> None:
        if c_kv.ndim != 3 or k_rope.ndim != 3 or c_kv.shape[:2] != k_rope.shape[:2]:
            raise ValueError(
                pick(
                    f"LatentKVCache.update needs c_kv (batch, n, kv_latent_dim) and k_rope (batch, n, "
                    f"rope_dim) for the same tokens, got {tuple(c_kv.shape)} and {tuple(k_rope.shape)}",
                    "LatentKVCache.update 需要同一批 token 的 c_kv (batch, n, kv_latent_dim) 和 k_rope (batch, n, "
                    f"rope_dim)，收到的是 {tuple(c_kv.shape)} 和 {tuple(k_rope.shape)}",
                )
            )
        if expected is not None and (c_kv.shape[0], c_kv.shape[2], k_rope.shape[2]) != expected:
            b, dc, r = expected
            raise ValueError(
                pick(
                    f"LatentKVCache holds (batch={b}, kv_latent_dim={dc}, rope_dim={r}), got new c_kv "
                    f"{tuple(c_kv.shape)} and k_rope {tuple(k_rope.shape)}",
                    f"LatentKVCache 存的是 (batch={b}, kv_latent_dim={dc}, rope_dim={r})，"
                    f"收到的新 c_kv 为 {tuple(c_kv.shape)}，k_rope 为 {tuple(k_rope.shape)}",
                )
            )


class GrowingLatentKVCache(LatentKVCache):
    """A latent cache that grows with ``torch.cat`` at every step."""

    def __init__(self) -> None:
        self.c_kv: torch.Tensor | None = None  # (B, T, dc)
        self.k_rope: torch.Tensor | None = None  # (B, T, r)

    @property
    def seq_len(self) -> int:
        return 0 if self.c_kv is None else self.c_kv.shape[1]

    def update(self, c_kv, k_rope):
        if self.c_kv is None:
            self._check_new(c_kv, k_rope)
            self.c_kv, self.k_rope = c_kv, k_rope
        else:
            self._check_new(c_kv, k_rope, (self.c_kv.shape[0], self.c_kv.shape[2], self.k_rope.shape[2]))
            self.c_kv = torch.cat([self.c_kv, c_kv], dim=1)
            self.k_rope = torch.cat([self.k_rope, k_rope], dim=1)
        return self.c_kv, self.k_rope

    def reset(self):
        self.c_kv = self.k_rope = None

    def _held(self):
        return self.c_kv, self.k_rope


class PreallocatedLatentKVCache(LatentKVCache):
    """A latent cache allocated once for ``max_len`` tokens, written in place; writing past ``max_len`` raises."""

    seq_len: int = 0  # here a plain attribute that ``update`` moves, not the base class's read-only property

    def __init__(self, batch_size, max_len, kv_latent_dim, rope_dim, dtype=torch.float32, device=None):
        self.c_kv = torch.zeros(batch_size, max_len, kv_latent_dim, dtype=dtype, device=device)
        self.k_rope = torch.zeros(batch_size, max_len, rope_dim, dtype=dtype, device=device)
        self.max_len = max_len
        self.seq_len = 0  # the write position

    def update(self, c_kv, k_rope):
        self._check_new(c_kv, k_rope, (self.c_kv.shape[0], self.c_kv.shape[2], self.k_rope.shape[2]))
        start, end = self.seq_len, self.seq_len + c_kv.shape[1]
        if end > self.max_len:
            raise ValueError(
                pick(
                    f"latent cache overflow: it holds {self.max_len} tokens, {start} are cached and "
                    f"{c_kv.shape[1]} more would need {end}; make a larger cache or reset() it",
                    f"潜向量缓存溢出：它能存 {self.max_len} 个 token，已缓存 {start} 个，"
                    f"再加 {c_kv.shape[1]} 个就需要 {end} 个；"
                    "请用更大的缓存或先 reset()",
                )
            )
        self.c_kv[:, start:end] = c_kv
        self.k_rope[:, start:end] = k_rope
        self.seq_len = end
        return self.c_kv[:, :end], self.k_rope[:, :end]

    def reset(self):
        self.seq_len = 0

    def _held(self):
        return self.c_kv, self.k_rope
