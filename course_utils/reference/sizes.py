"""Cache sizes by formula, for every cache in ``course_utils.kv_cache``: arithmetic that implements no part of any
exercise (submissions may use it)."""

from __future__ import annotations


def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_element=2) -> int:
    """Theoretical KV-cache size: 2 (K and V) * layers * kv_heads * head_dim * tokens * batch * bytes."""
    return 2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_element


def mla_cache_bytes(num_layers, kv_latent_dim, rope_dim, seq_len, batch_size=1, bytes_per_element=2) -> int:
    """Theoretical MLA cache size: layers * (kv_latent_dim + rope_dim) * tokens * batch * bytes (no factor 2:
    keys and values share the latent)."""
    return num_layers * (kv_latent_dim + rope_dim) * seq_len * batch_size * bytes_per_element
