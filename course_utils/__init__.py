"""Checked reference implementations for the Attention by Hand course.

Every class and function here is tested against PyTorch's built-ins
(``F.scaled_dot_product_attention``, ``nn.MultiheadAttention``) in ``tests/``.
"""

import sys

from .data import BOOK_TOKENS, book_batch, book_inputs
from .device import DEVICE_ENV_VAR, get_device, synchronize
from .lang import pick
from .memory import TensorMemoryTracker, peak_tensor_bytes
from .reference.attention import (
    CausalAttention,
    MultiHeadAttentionWrapper,
    SelfAttention_v1,
    SelfAttention_v2,
    attend,
    simple_self_attention,
)
from .reference.gated_delta import (
    chunk_gated_delta_rule,
    chunk_kda,
    l2norm,
    recurrent_gated_delta_rule,
    recurrent_kda,
)
from .reference.interop import copy_parameters, mha_to_gqa, to_nn_multihead, wrapper_to_mha
from .reference.kv_cache import (
    GrowingKVCache,
    GrowingLatentKVCache,
    KVCache,
    LatentKVCache,
    PreallocatedKVCache,
    PreallocatedLatentKVCache,
)
from .reference.kv_quant import (
    Quantized,
    QuantizedKVCache,
    fake_quantize,
    kivi_bytes_per_token,
    kivi_quantize,
    kivi_split,
    pack_codes,
    quantize,
    unpack_codes,
)
from .reference.masks import causal_mask, expand_mask, padding_mask, to_sdpa_mask
from .reference.mla import MultiHeadLatentAttention
from .reference.multihead import GroupedQueryAttention, MultiHeadAttention, repeat_kv
from .reference.online_softmax import online_softmax_attention
from .reference.paged_kv_cache import OutOfBlocksError, PagedKVCache, paged_attention
from .reference.ring_attention import (
    allgather_attention_simulated,
    attend_chunk,
    chunk_positions,
    comm_bytes_per_rank,
    example_qkv,
    gather_sequence,
    launch_local,
    merge_step,
    ring_attention_rank,
    ring_attention_simulated,
    ring_sources,
    split_sequence,
    ulysses_attention_simulated,
    work_per_step,
)
from .reference.rope_scaling import (
    linear_scaling_inv_freq,
    llama3_inv_freq,
    ntk_scaling_inv_freq,
    scaled_rope_cos_sin,
    yarn_correction_range,
    yarn_inv_freq,
)
from .reference.rotary import (
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
from .reference.sizes import kv_cache_bytes, linear_state_bytes, mla_cache_bytes
from .reference.sliding_window import (
    RingKVCache,
    attend_with_sink_logit,
    layer_windows,
    sliding_window_cache_bytes,
    sliding_window_mask,
    sliding_window_mask_at,
)
from .reference.sparse_attention import (
    LightningIndexer,
    SparseLatentAttention,
    SparseLatentCache,
    dsa_attention,
    indexer_scores,
    indexer_warmup_loss,
    recall,
    selection_mask,
    sparse_attention,
    top_k_indices,
)
from .reference.split_k import merge_partials, split_k_attention

__version__ = "0.1.0"

__all__ = [
    "BOOK_TOKENS",
    "CausalAttention",
    "DEVICE_ENV_VAR",
    "GroupedQueryAttention",
    "GrowingKVCache",
    "KVCache",
    "MultiHeadAttention",
    "MultiHeadAttentionWrapper",
    "PreallocatedKVCache",
    "SelfAttention_v1",
    "SelfAttention_v2",
    "attend",
    "book_batch",
    "book_inputs",
    "causal_mask",
    "copy_parameters",
    "expand_mask",
    "get_device",
    "kv_cache_bytes",
    "mha_to_gqa",
    "padding_mask",
    "pick",
    "repeat_kv",
    "simple_self_attention",
    "synchronize",
    "to_nn_multihead",
    "to_sdpa_mask",
    "wrapper_to_mha",
    # positions, tiles and latents (notebooks 08-10)
    "GrowingLatentKVCache",
    "LatentKVCache",
    "MultiHeadLatentAttention",
    "PreallocatedLatentKVCache",
    "TensorMemoryTracker",
    "apply_rope",
    "half_to_interleaved",
    "interleaved_to_half",
    "mla_cache_bytes",
    "online_softmax_attention",
    "peak_tensor_bytes",
    "rope",
    "rope_cos_sin",
    "rope_inv_freq",
    "rope_positions",
    "rotate_every_two",
    "rotate_half",
    # long context (notebook 12)
    "RingKVCache",
    "attend_with_sink_logit",
    "layer_windows",
    "linear_scaling_inv_freq",
    "llama3_inv_freq",
    "ntk_scaling_inv_freq",
    "scaled_rope_cos_sin",
    "sliding_window_cache_bytes",
    "sliding_window_mask",
    "sliding_window_mask_at",
    "yarn_correction_range",
    "yarn_inv_freq",
    # serving (notebook 13)
    "OutOfBlocksError",
    "PagedKVCache",
    "merge_partials",
    "paged_attention",
    "split_k_attention",
    # attention across devices (notebook 15)
    "allgather_attention_simulated",
    "attend_chunk",
    "chunk_positions",
    "comm_bytes_per_rank",
    "example_qkv",
    "gather_sequence",
    "launch_local",
    "merge_step",
    "ring_attention_rank",
    "ring_attention_simulated",
    "ring_sources",
    "split_sequence",
    "ulysses_attention_simulated",
    "work_per_step",
    # linear attention and the gated delta rule (notebook 16)
    "chunk_gated_delta_rule",
    "chunk_kda",
    "l2norm",
    "linear_state_bytes",
    "recurrent_gated_delta_rule",
    "recurrent_kda",
    # which keys to read: DeepSeek Sparse Attention and a quantised KV cache (notebook 17)
    "LightningIndexer",
    "Quantized",
    "QuantizedKVCache",
    "SparseLatentAttention",
    "SparseLatentCache",
    "dsa_attention",
    "fake_quantize",
    "indexer_scores",
    "indexer_warmup_loss",
    "kivi_bytes_per_token",
    "kivi_quantize",
    "kivi_split",
    "pack_codes",
    "quantize",
    "recall",
    "selection_mask",
    "sparse_attention",
    "top_k_indices",
    "unpack_codes",
]
# course_utils.viz (matplotlib, ipywidgets) is imported on demand by the notebooks, not here.

# the capstone's model and task keep their short names: ``from course_utils.gpt import GPT`` (notebook 11, its
# exercise and submissions) is ``course_utils.capstone.gpt``
from .capstone import gpt, induction  # noqa: E402  (after the reference modules they build on)

sys.modules[f"{__name__}.gpt"], sys.modules[f"{__name__}.induction"] = gpt, induction
