"""Rotary position embedding (RoPE, 旋转位置编码; Su et al. 2021), in the two layouts real checkpoints use.

RoPE rotates each pair of a query's (or key's) features by an angle proportional to the token's position ``m``:
pair ``i`` turns by ``m * theta_i`` with ``theta_i = base ** (-2i / head_dim)``. A dot product of a query rotated
to ``m`` and a key rotated to ``n`` then depends on the positions only through ``m - n``.

Which features form a pair is a layout choice:

* **rotate half** (Hugging Face's Llama, GPT-NeoX): feature ``i`` pairs with ``i + head_dim // 2``;
  the cos/sin tables are ``cat(freqs, freqs)`` and the rotation is ``x * cos + rotate_half(x) * sin``.
* **interleaved** (GPT-J, the paper, Meta's original Llama code): feature ``2i`` pairs with ``2i + 1``;
  the tables are ``repeat_interleave(freqs, 2)`` and the rotation uses ``rotate_every_two``.

The two compute the same function up to a fixed permutation of the features (``interleaved_to_half``), which is
why converting a Meta checkpoint to Hugging Face's layout permutes the rows of ``W_query`` and ``W_key``.
"""

from __future__ import annotations

import torch

from ..lang import pick


def _check_head_dim(head_dim: int) -> None:
    if not isinstance(head_dim, int) or head_dim <= 0 or head_dim % 2:
        raise ValueError(
            pick(
                f"RoPE rotates pairs of features: head_dim must be a positive even int, got {head_dim!r}",
                f"RoPE 成对旋转特征：head_dim 必须是正偶数，收到的是 {head_dim!r}",
            )
        )


def rope_inv_freq(head_dim: int, base: float = 10000.0, device=None, dtype=torch.float32) -> torch.Tensor:
    """(head_dim // 2,): theta_i = base ** (-2i / head_dim), from one radian per token down to slow turns."""
    _check_head_dim(head_dim)
    if base <= 1:
        raise ValueError(
            pick(
                f"RoPE base must be > 1, got {base}",
                f"RoPE 的 base 必须大于 1，收到的是 {base}",
            )
        )
    exponents = torch.arange(0, head_dim, 2, dtype=dtype, device=device) / head_dim
    return 1.0 / (base**exponents)


def rope_positions(start: int, length: int, device=None) -> torch.Tensor:
    """(length,) positions start, start + 1, ...: a chunk that follows ``start`` cached tokens."""
    if start < 0 or length < 0:
        raise ValueError(
            pick(
                f"positions need start >= 0 and length >= 0, got start={start}, length={length}",
                f"positions 需要 start >= 0 且 length >= 0，收到的是 start={start}，length={length}",
            )
        )
    return torch.arange(start, start + length, device=device)


def rope_cos_sin(
    positions, head_dim: int, base: float = 10000.0, *, interleaved: bool = False, dtype=torch.float32, device=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables, each ``positions.shape + (head_dim,)``, for the rotate-half (default) or interleaved layout.

    ``positions``: an int (``arange(positions)``), or an int tensor of any shape, e.g. ``(T,)`` or ``(B, T)``.
    Angles are computed in float32 (float64 for a float64 ``dtype``): position * frequency loses digits in half
    precision. Then cos and sin are cast to ``dtype``.
    """
    if isinstance(positions, int):
        positions = torch.arange(positions, device=device)
    positions = torch.as_tensor(positions, device=device)
    if positions.is_floating_point() or positions.is_complex():
        raise ValueError(
            pick(
                f"positions must be integers, got dtype {positions.dtype}",
                f"positions 必须是整数，收到的 dtype 是 {positions.dtype}",
            )
        )
    angle_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    inv_freq = rope_inv_freq(head_dim, base, device=positions.device, dtype=angle_dtype)
    angles = positions.to(angle_dtype)[..., None] * inv_freq  # (..., head_dim // 2)
    if interleaved:
        angles = angles.repeat_interleave(2, dim=-1)  # theta_0, theta_0, theta_1, theta_1, ...
    else:
        angles = torch.cat([angles, angles], dim=-1)  # theta_0, theta_1, ..., theta_0, theta_1, ...
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last axis: the 90-degree turn of each pair (i, i + d/2)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    """(x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...): the 90-degree turn of each pair (2i, 2i + 1)."""
    pairs = x.unflatten(-1, (-1, 2))
    return torch.stack([-pairs[..., 1], pairs[..., 0]], dim=-1).flatten(-2)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, interleaved: bool = False) -> torch.Tensor:
    """Rotate ``x`` (..., T, head_dim) by the tables from ``rope_cos_sin`` (same layout): x*cos + turn(x)*sin.

    ``cos``/``sin`` may be (T, head_dim), broadcast over batch and heads, or (B, T, head_dim) per sequence, which
    for a 4-D ``x`` (B, heads, T, head_dim) is broadcast over the heads.
    """
    if not isinstance(x, torch.Tensor) or x.ndim < 2:
        raise ValueError(
            pick(
                f"x must be a tensor (..., num_tokens, head_dim), got {getattr(x, 'shape', type(x))}",
                f"x 必须是形状为 (..., num_tokens, head_dim) 的张量，收到的是 {getattr(x, 'shape', type(x))}",
            )
        )
    if cos.shape != sin.shape:
        raise ValueError(
            pick(
                f"cos and sin must have the same shape, got {tuple(cos.shape)} and {tuple(sin.shape)}",
                f"cos 和 sin 的形状必须相同，收到的是 {tuple(cos.shape)} 和 {tuple(sin.shape)}",
            )
        )
    if cos.shape[-1] != x.shape[-1]:
        raise ValueError(
            pick(
                f"RoPE tables are for head_dim={cos.shape[-1]}, but x has head_dim={x.shape[-1]} "
                "(build them with rope_cos_sin(positions, head_dim) of each head, not d_model)",
                f"RoPE 表是为 head_dim={cos.shape[-1]} 建的，但 x 的 head_dim 是 {x.shape[-1]}"
                "（请用每个头的 head_dim 调用 rope_cos_sin(positions, head_dim)，而不是 d_model）",
            )
        )
    if cos.ndim < 2 or cos.shape[-2] != x.shape[-2]:
        raise ValueError(
            pick(
                f"RoPE tables cover {cos.shape[-2] if cos.ndim >= 2 else '?'} positions, but x has "
                f"{x.shape[-2]} tokens; pass one position per token (positions past_len ... for new tokens)",
                f"RoPE 表覆盖 {cos.shape[-2] if cos.ndim >= 2 else '?'} 个位置，但 x 有 {x.shape[-2]} 个 token；"
                "请每个 token 传一个位置（新 token 的位置是 past_len ...）",
            )
        )
    if cos.ndim == 3 and x.ndim == 4:
        cos, sin = cos[:, None], sin[:, None]  # (B, 1, T, hd): the same positions for every head
    turn = rotate_every_two if interleaved else rotate_half
    return x * cos + turn(x) * sin


def rope(x: torch.Tensor, positions=None, base: float = 10000.0, *, interleaved: bool = False) -> torch.Tensor:
    """``apply_rope`` with tables built here: x (..., T, head_dim) at ``positions`` (default 0 .. T - 1)."""
    if positions is None:
        positions = torch.arange(x.shape[-2], device=x.device)
    cos, sin = rope_cos_sin(positions, x.shape[-1], base, interleaved=interleaved, dtype=x.dtype, device=x.device)
    return apply_rope(x, cos, sin, interleaved=interleaved)


def interleaved_to_half(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Reorder axis ``dim`` from pairs (2i, 2i + 1) to halves (i, i + d/2): features 0, 2, 4, ..., 1, 3, 5, ...

    rope(interleaved_to_half(x)) == interleaved_to_half(rope(x, interleaved=True)). For a checkpoint, apply it
    per head to the rows of W_query and W_key: ``interleaved_to_half(w.view(heads, head_dim, d_in), dim=1)``.
    """
    d = x.shape[dim]
    _check_head_dim(d)
    x = x.movedim(dim, -1)
    out = x.unflatten(-1, (d // 2, 2)).transpose(-1, -2).flatten(-2)
    return out.movedim(-1, dim)


def half_to_interleaved(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """The inverse of ``interleaved_to_half``: features 0, d/2, 1, d/2 + 1, ... back into adjacent pairs."""
    d = x.shape[dim]
    _check_head_dim(d)
    x = x.movedim(dim, -1)
    out = x.unflatten(-1, (2, d // 2)).transpose(-1, -2).flatten(-2)
    return out.movedim(-1, dim)
