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


def linear_state_bytes(
    num_layers,
    num_heads,
    k_head_dim,
    v_head_dim,
    batch_size=1,
    bytes_per_element=4,
    conv_dim=0,
    conv_kernel=0,
    conv_bytes_per_element=2,
) -> int:
    """What a linear-attention layer keeps per sequence, whatever the context length: its recurrent state, one
    (k_head_dim, v_head_dim) matrix per head (float32 by default, as Hugging Face keeps it), plus the window of its
    short causal convolution (the last ``conv_kernel - 1`` inputs of ``conv_dim`` channels) where it has one."""
    state = num_heads * k_head_dim * v_head_dim * bytes_per_element
    conv = conv_dim * max(conv_kernel - 1, 0) * conv_bytes_per_element
    return num_layers * batch_size * (state + conv)
