"""Checked reference implementations for the Attention by Hand course.

Every class and function here is tested against PyTorch's built-ins
(``F.scaled_dot_product_attention``, ``nn.MultiheadAttention``) in ``tests/``.
"""
from .attention import (
    CausalAttention,
    MultiHeadAttentionWrapper,
    SelfAttention_v1,
    SelfAttention_v2,
    attend,
    simple_self_attention,
)
from .data import BOOK_TOKENS, book_batch, book_inputs
from .device import DEVICE_ENV_VAR, get_device, synchronize
from .interop import copy_parameters, mha_to_gqa, to_nn_multihead, wrapper_to_mha
from .kv_cache import (
    GrowingKVCache,
    GrowingLatentKVCache,
    KVCache,
    LatentKVCache,
    PreallocatedKVCache,
    PreallocatedLatentKVCache,
)
from .memory import TensorMemoryTracker, peak_tensor_bytes
from .mla import MultiHeadLatentAttention
from .sizes import kv_cache_bytes, mla_cache_bytes
from .masks import causal_mask, expand_mask, padding_mask, to_sdpa_mask
from .multihead import GroupedQueryAttention, MultiHeadAttention, repeat_kv
from .online_softmax import online_softmax_attention
from .rotary import (
    apply_rope,
    half_to_interleaved,
    interleaved_to_half,
    rope,
    rope_cos_sin,
    rope_inv_freq,
    rope_positions,
    rotate_every_two,
    rotate_half,
)

__version__ = "0.1.0"

__all__ = [
    "BOOK_TOKENS", "CausalAttention", "DEVICE_ENV_VAR", "GroupedQueryAttention", "GrowingKVCache", "KVCache",
    "MultiHeadAttention", "MultiHeadAttentionWrapper", "PreallocatedKVCache", "SelfAttention_v1",
    "SelfAttention_v2", "attend", "book_batch", "book_inputs", "causal_mask", "copy_parameters", "expand_mask",
    "get_device", "kv_cache_bytes", "mha_to_gqa", "padding_mask", "repeat_kv", "simple_self_attention",
    "synchronize", "to_nn_multihead", "to_sdpa_mask", "wrapper_to_mha",
    # positions, tiles and latents (notebooks 08-10)
    "GrowingLatentKVCache", "LatentKVCache", "MultiHeadLatentAttention", "PreallocatedLatentKVCache", "TensorMemoryTracker", "apply_rope", "half_to_interleaved",
    "interleaved_to_half", "mla_cache_bytes", "online_softmax_attention", "peak_tensor_bytes", "rope", "rope_cos_sin",
    "rope_inv_freq", "rope_positions", "rotate_every_two", "rotate_half",
]
# course_utils.viz (matplotlib, ipywidgets) is imported on demand by the notebooks, not here; so are
# course_utils.gpt (the capstone's model) and course_utils.induction (its task and training).
