"""Sizes by formula: arithmetic that implements no part of any exercise (submissions may use it)."""
from __future__ import annotations


def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_element=2) -> int:
    """Theoretical KV-cache size: 2 (K and V) * layers * kv_heads * head_dim * tokens * batch * bytes."""
    return 2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_element
