"""Boolean attention masks, one convention: ``True`` = this key is HIDDEN from this query.

That is the book's ``mask.bool()`` + ``masked_fill(mask, -inf)``, and what ``nn.MultiheadAttention``
(``attn_mask``, ``key_padding_mask``) and ``nn.TransformerEncoderLayer(src_key_padding_mask=...)`` read.
Every mask in this package's API (``attend(mask=...)``, ``online_softmax_attention(mask=...)``,
``GroupedQueryAttention.forward(mask=...)``) uses it.

``F.scaled_dot_product_attention(attn_mask=...)`` reads a boolean mask the other way round (True = may
attend). ``to_sdpa_mask`` converts, and is called only where SDPA is called.
"""

from __future__ import annotations

import torch

from ..lang import pick


def causal_mask(num_queries: int, num_keys: int | None = None, device=None) -> torch.Tensor:
    """(num_queries, num_keys) bool, True = hidden: query i may not see keys after its own position.

    The queries are the *last* ``num_queries`` positions of the ``num_keys`` keys (aligned to the
    bottom-right), which is what decoding with a KV cache needs: query i sits at absolute position
    ``num_keys - num_queries + i``. With ``num_queries == num_keys`` this is ``triu(ones, diagonal=1)``.
    """
    num_keys = num_queries if num_keys is None else num_keys
    if num_queries > num_keys:
        raise ValueError(
            pick(
                f"causal mask: {num_queries} queries cannot follow only {num_keys} keys",
                f"因果掩码：{num_queries} 个查询不能只跟在 {num_keys} 个键之后",
            )
        )
    ones = torch.ones(num_queries, num_keys, dtype=torch.bool, device=device)
    return torch.triu(ones, diagonal=num_keys - num_queries + 1)


def padding_mask(lengths, max_len: int | None = None, device=None) -> torch.Tensor:
    """(batch, max_len) bool, True = padding (hidden), as ``key_padding_mask`` expects.

    ``lengths[b]`` real tokens come first in row ``b`` (right padding).
    """
    lengths = torch.as_tensor(lengths, device=device)
    if lengths.ndim != 1:
        raise ValueError(
            pick(
                f"lengths must be 1-D (one length per sequence), got shape {tuple(lengths.shape)}",
                f"lengths 必须是一维的（每个序列一个长度），收到的形状是 {tuple(lengths.shape)}",
            )
        )
    max_len = int(lengths.max()) if max_len is None else max_len
    if bool((lengths > max_len).any()) or bool((lengths < 0).any()):
        raise ValueError(
            pick(
                f"every length must lie in [0, {max_len}], got {lengths.tolist()}",
                f"每个长度都必须在 [0, {max_len}] 之内，收到的是 {lengths.tolist()}",
            )
        )
    return torch.arange(max_len, device=lengths.device) >= lengths[:, None]


def to_sdpa_mask(mask: torch.Tensor) -> torch.Tensor:
    """The same mask in ``F.scaled_dot_product_attention``'s convention (True = may attend): ``~mask``."""
    check_mask(mask)
    return ~mask


def check_mask(mask, name: str = "mask") -> None:
    """Raise a ValueError unless ``mask`` is a bool tensor (True = hidden)."""
    if not isinstance(mask, torch.Tensor):
        raise ValueError(
            pick(
                f"{name} must be a bool torch.Tensor (True = hidden), got {type(mask).__name__}",
                f"{name} 必须是布尔类型的 torch.Tensor（True = 隐藏），收到的是 {type(mask).__name__}",
            )
        )
    if mask.dtype != torch.bool:
        raise ValueError(
            pick(
                f"{name} must be bool (True = hidden), got dtype {mask.dtype}; for a 0/1 mask with 1 = hidden pass "
                "mask.bool(), for a 1 = may-attend mask pass mask == 0, for an additive float mask pass mask != 0",
                f"{name} 必须是布尔类型（True = 隐藏），收到的 dtype 是 {mask.dtype}；"
                "1 = 隐藏的 0/1 掩码请传 mask.bool()，"
                "1 = 可以关注的掩码请传 mask == 0，加性浮点掩码请传 mask != 0",
            )
        )


def expand_mask(mask: torch.Tensor, batch: int, num_queries: int, num_keys: int) -> torch.Tensor:
    """Check a mask (True = hidden) and return it as (batch or 1, 1 or heads, num_queries, num_keys) bool.

    Accepted shapes: (batch, num_keys) padding masks, and (batch, 1, num_queries, num_keys) masks
    as in ``Q @ K^T`` (the 1 broadcasts over heads; a head axis of size ``heads`` is also accepted
    by the caller). A leading axis of 1 broadcasts over the batch.
    """
    check_mask(mask)
    if mask.ndim == 2:
        if mask.shape[0] not in (1, batch) or mask.shape[1] != num_keys:
            raise ValueError(
                pick(
                    f"padding mask of shape {tuple(mask.shape)} does not fit: expected (batch={batch}, "
                    f"num_keys={num_keys})",
                    f"形状为 {tuple(mask.shape)} 的填充掩码对不上：应为 (batch={batch}, num_keys={num_keys})",
                )
            )
        return mask[:, None, None, :]
    if mask.ndim == 4:
        b, _, q, k = mask.shape
        if b not in (1, batch) or q not in (1, num_queries) or k != num_keys:
            raise ValueError(
                pick(
                    f"attention mask of shape {tuple(mask.shape)} does not fit: expected "
                    f"(batch={batch}, 1, num_queries={num_queries}, num_keys={num_keys})",
                    f"形状为 {tuple(mask.shape)} 的注意力掩码对不上："
                    f"应为 (batch={batch}, 1, num_queries={num_queries}, num_keys={num_keys})",
                )
            )
        return mask
    raise ValueError(
        pick(
            f"attention mask must be 2-D (batch, num_keys) or 4-D (batch, 1, num_queries, num_keys), "
            f"got shape {tuple(mask.shape)}",
            "注意力掩码必须是二维 (batch, num_keys) 或四维 (batch, 1, num_queries, num_keys)，"
            f"收到的形状是 {tuple(mask.shape)}",
        )
    )
