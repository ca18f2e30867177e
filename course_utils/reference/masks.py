"""Boolean attention masks, named by what ``True`` means.

PyTorch uses both conventions, which is the source of many silent bugs:

* **hide** masks: ``True`` = this key is hidden from this query. ``Tensor.masked_fill(mask, -inf)``,
  ``nn.MultiheadAttention(attn_mask=..., key_padding_mask=...)`` and
  ``nn.TransformerEncoderLayer(src_key_padding_mask=...)`` read masks this way.
* **allow** masks: ``True`` = this query may attend to this key.
  ``F.scaled_dot_product_attention(attn_mask=...)`` reads boolean masks this way, and so do the
  ``mask == 0 -> hide`` masks of many interview answers.

Every function here says its convention in its name; ``hide_to_allow`` / ``allow_to_hide`` convert.
"""
from __future__ import annotations

import torch


def causal_hide_mask(num_queries: int, num_keys: int | None = None, device=None) -> torch.Tensor:
    """(num_queries, num_keys) bool, True = hide: query i may not see keys after its own position.

    The queries are the *last* ``num_queries`` positions of the ``num_keys`` keys (aligned to the
    bottom-right), which is what decoding with a KV cache needs: query i sits at absolute position
    ``num_keys - num_queries + i``. With ``num_queries == num_keys`` this is ``triu(ones, diagonal=1)``.
    """
    num_keys = num_queries if num_keys is None else num_keys
    if num_queries > num_keys:
        raise ValueError(f"causal mask: {num_queries} queries cannot follow only {num_keys} keys")
    ones = torch.ones(num_queries, num_keys, dtype=torch.bool, device=device)
    return torch.triu(ones, diagonal=num_keys - num_queries + 1)


def causal_allow_mask(num_queries: int, num_keys: int | None = None, device=None) -> torch.Tensor:
    """(num_queries, num_keys) bool, True = may attend; the complement of ``causal_hide_mask``."""
    return ~causal_hide_mask(num_queries, num_keys, device=device)


def hide_to_allow(hide_mask: torch.Tensor) -> torch.Tensor:
    """Convert a True = hide mask into a True = may attend mask (logical not)."""
    return ~hide_mask.bool()


def allow_to_hide(allow_mask: torch.Tensor) -> torch.Tensor:
    """Convert a True = may attend mask into a True = hide mask (logical not)."""
    return ~allow_mask.bool()


def padding_allow_mask(lengths, max_len: int | None = None, device=None) -> torch.Tensor:
    """(batch, max_len) bool, True = a real token that may be attended to, False = padding.

    ``lengths[b]`` real tokens come first in row ``b`` (right padding).
    """
    lengths = torch.as_tensor(lengths, device=device)
    if lengths.ndim != 1:
        raise ValueError(f"lengths must be 1-D (one length per sequence), got shape {tuple(lengths.shape)}")
    max_len = int(lengths.max()) if max_len is None else max_len
    if bool((lengths > max_len).any()) or bool((lengths < 0).any()):
        raise ValueError(f"every length must lie in [0, {max_len}], got {lengths.tolist()}")
    return torch.arange(max_len, device=lengths.device) < lengths[:, None]


def padding_hide_mask(lengths, max_len: int | None = None, device=None) -> torch.Tensor:
    """(batch, max_len) bool, True = padding (hidden), as ``key_padding_mask`` expects."""
    return ~padding_allow_mask(lengths, max_len, device=device)


def expand_allow_mask(allow_mask: torch.Tensor, batch: int, num_queries: int, num_keys: int) -> torch.Tensor:
    """Check an allow mask and return it as (batch or 1, 1 or heads, num_queries, num_keys) bool.

    Accepted shapes: (batch, num_keys) padding masks, and (batch, 1, num_queries, num_keys) masks
    as in ``Q @ K^T`` (the 1 broadcasts over heads; a head axis of size ``heads`` is also accepted
    by the caller). A leading axis of 1 broadcasts over the batch.
    """
    if not isinstance(allow_mask, torch.Tensor):
        raise ValueError(f"allow_mask must be a torch.Tensor, got {type(allow_mask).__name__}")
    if allow_mask.dtype != torch.bool:
        raise ValueError(
            f"allow_mask must be bool (True = may attend), got dtype {allow_mask.dtype}; "
            "for a 0/1 mask pass mask.bool(), for an additive float mask use mask == 0"
        )
    if allow_mask.ndim == 2:
        if allow_mask.shape[0] not in (1, batch) or allow_mask.shape[1] != num_keys:
            raise ValueError(
                f"padding mask of shape {tuple(allow_mask.shape)} does not fit: expected "
                f"(batch={batch}, num_keys={num_keys})"
            )
        return allow_mask[:, None, None, :]
    if allow_mask.ndim == 4:
        b, _, q, k = allow_mask.shape
        if b not in (1, batch) or q not in (1, num_queries) or k != num_keys:
            raise ValueError(
                f"attention mask of shape {tuple(allow_mask.shape)} does not fit: expected "
                f"(batch={batch}, 1, num_queries={num_queries}, num_keys={num_keys})"
            )
        return allow_mask
    raise ValueError(
        f"attention mask must be 2-D (batch, num_keys) or 4-D (batch, 1, num_queries, num_keys), "
        f"got shape {tuple(allow_mask.shape)}"
    )
