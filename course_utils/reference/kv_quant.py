"""A KV cache in 2, 4 or 8 bits: group-wise integer quantization (量化) and KIVI's split (Liu et al. 2024).

**Asymmetric** (非对称) quantization of a group of numbers to ``b`` bits keeps its minimum ``m`` (the zero point,
零点) and a scale ``s = (max - min) / (2^b - 1)``; a number ``x`` becomes the integer ``round((x - m) / s)`` in
``0 .. 2^b - 1`` and comes back as ``code * s + m``. **Symmetric** (对称) quantization keeps only
``s = max|x| / (2^(b-1) - 1)`` and codes ``round(x / s)`` in ``-(2^(b-1) - 1) .. 2^(b-1) - 1``: no zero point, but a
group that is not centred on 0 wastes part of the range. Each group has its own scale: the finer the groups, the
smaller the error and the more scales to store.

Which numbers share a group is the choice that matters. **Per token** (逐 token): a token's features, in groups of
``group_size`` channels. **Per channel** (逐通道): one channel over ``group_size`` consecutive tokens. KIVI quantises
the keys per channel and the values per token: in the models it measured (Llama-2, Falcon, Mistral) keys have a
few channels of much larger magnitude than the others (outlier channels), which set the range of every per-token
group they sit in; the values have no such fixed channels, and a value's error only mixes into the output it is
weighted into. (The capstone's keys have none: measure before choosing the axis.) The most recent tokens stay in
full precision, a **residual** (残差) window of ``residual`` tokens, as KIVI's code keeps them
(``models/llama_kivi.py``): keys wait in full precision until ``residual`` of them (a multiple of ``group_size``)
can be quantised together, so ``T mod residual`` are full; values are quantised one token at a time as they leave
the window, so ``min(T, residual)`` are.

**A group whose numbers are all equal** (a constant channel over a group of tokens, a padded token) has a range of
0. KIVI's quantisers (``quant/new_pack.py``: ``quant_and_pack_kcache``, ``quant_and_pack_vcache``,
``triton_quantize_and_pack_along_last_dim``) compute ``scale = (mx - mn) / (2^b - 1)`` and divide by it unguarded:
the group's normalised values are ``0 / 0 = NaN``, which KIVI then casts to int32 (an undefined cast: -2^31 on a CPU)
and a simulated quantiser that keeps the float codes (``round((x - mn) / scale) * scale + mn``) returns as NaN.
KIVI's packed codes times the zero scale give ``mn`` back, but on a CPU the -2^31 also sets the top bit of the int32
it is packed into: with groups shorter than the ``32 // bits`` codes of an int32, that bit belongs to a neighbouring
group's code. Here such a group gets a scale of 1, so its codes are 0 and it comes back exactly as ``mn``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..lang import pick
from .kv_cache import KVCache

BITS = (2, 4, 8)  # the widths KIVI packs (32 // bits codes per int32); here 8 // bits per byte


def _check_bits(bits) -> None:
    if bits not in BITS:
        raise ValueError(
            pick(f"bits must be one of {BITS}, got {bits!r}", f"bits 必须是 {BITS} 之一，收到的是 {bits!r}")
        )


def _check_group(size: int, group_size: int, axis_name: str) -> None:
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 1:
        raise ValueError(
            pick(
                f"group_size must be a positive int, got {group_size!r}",
                f"group_size 必须是正整数，收到的是 {group_size!r}",
            )
        )
    if size % group_size:
        raise ValueError(
            pick(
                f"group_size={group_size} must divide axis {axis_name} into whole groups",
                f"group_size={group_size} 必须把第 {axis_name} 轴分成整数个组",
            )
        )


@dataclass
class Quantized:
    """Integer codes and their groups' statistics: ``codes`` (the input's shape; uint8, or int8 when symmetric),
    ``scale`` and ``zero`` (the minimum, None when symmetric) per group, broadcast over the group's axis."""

    codes: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor | None
    bits: int
    along: int  # the axis each group runs along
    group_size: int

    def dequantize(self) -> torch.Tensor:
        """``code * scale + zero`` (asymmetric) or ``code * scale`` (symmetric), in the statistics' dtype."""
        shape = self.codes.shape
        grouped = _grouped(self.codes, self.along, self.group_size).to(self.scale.dtype)
        out = grouped * self.scale + (0 if self.zero is None else self.zero)
        return _ungrouped(out, self.along, shape)


def _grouped(x: torch.Tensor, along: int, group_size: int) -> torch.Tensor:
    """x with axis ``along`` split into (num_groups, group_size), the group's members on the new axis along + 1."""
    along = along % x.ndim
    return x.unflatten(along, (x.shape[along] // group_size, group_size))


def _ungrouped(x: torch.Tensor, along: int, shape) -> torch.Tensor:
    return x.reshape(shape)


def quantize(x: torch.Tensor, bits: int, *, along: int, group_size: int | None = None, symmetric=False) -> Quantized:
    """Quantise ``x`` to ``bits`` in groups of ``group_size`` consecutive entries along axis ``along`` (default: the
    whole axis is one group). Keys per channel: ``along=-2`` (tokens); values per token: ``along=-1`` (channels)."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise ValueError(
            pick(
                f"x must be a floating-point torch.Tensor, got {getattr(x, 'dtype', type(x).__name__)}",
                f"x 必须是浮点 torch.Tensor，收到的是 {getattr(x, 'dtype', type(x).__name__)}",
            )
        )
    _check_bits(bits)
    if not -x.ndim <= along < x.ndim:
        raise ValueError(
            pick(f"along={along} is not an axis of a {x.ndim}-D tensor", f"along={along} 不是 {x.ndim} 维张量的轴")
        )
    group_size = x.shape[along] if group_size is None else group_size
    _check_group(x.shape[along], group_size, f"{along} (length {x.shape[along]})")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(
            pick("x holds inf or NaN: quantisation needs finite numbers", "x 含有 inf 或 NaN：量化需要有限的数")
        )
    groups = _grouped(x, along, group_size)
    axis = (along % x.ndim) + 1  # the members of a group
    if symmetric:
        levels = 2 ** (bits - 1) - 1  # codes -levels .. levels: 0 stays exactly 0
        largest = groups.abs().amax(axis, keepdim=True)
        scale = torch.where(largest > 0, largest / levels, torch.ones_like(largest))
        codes = torch.round(groups / scale).clamp(-levels, levels).to(torch.int8)
        return Quantized(_ungrouped(codes, along, x.shape), scale, None, bits, along, group_size)
    levels = 2**bits - 1  # codes 0 .. levels
    low, high = groups.amin(axis, keepdim=True), groups.amax(axis, keepdim=True)
    spread = high - low
    scale = torch.where(spread > 0, spread / levels, torch.ones_like(spread))  # a constant group: codes 0, back to low
    codes = torch.round((groups - low) / scale).clamp(0, levels).to(torch.uint8)
    return Quantized(_ungrouped(codes, along, x.shape), scale, low, bits, along, group_size)


def fake_quantize(x: torch.Tensor, bits: int, *, along: int, group_size: int | None = None, symmetric=False):
    """``x`` quantised and dequantised at once: what a cache of these codes gives back."""
    return quantize(x, bits, along=along, group_size=group_size, symmetric=symmetric).dequantize().to(x.dtype)


def _check_cache_tensors(keys, values) -> None:
    for name, t in (("keys", keys), ("values", values)):
        if not isinstance(t, torch.Tensor) or t.ndim != 4:
            shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(
                pick(
                    f"{name} must be a (batch, kv_heads, num_tokens, head_dim) tensor, got {shape}",
                    f"{name} 必须是 (batch, kv_heads, num_tokens, head_dim) 的张量，收到的是 {shape}",
                )
            )
    if keys.shape[:3] != values.shape[:3]:
        raise ValueError(
            pick(
                f"keys {tuple(keys.shape)} and values {tuple(values.shape)} must hold the same tokens",
                f"键 {tuple(keys.shape)} 和值 {tuple(values.shape)} 必须对应同样的 token",
            )
        )


def _check_kivi(bits, group_size, residual, head_dim) -> None:
    _check_bits(bits)
    _check_group(head_dim, group_size, f"head_dim (length {head_dim}: values are grouped along their channels)")
    if not isinstance(residual, int) or isinstance(residual, bool) or residual < 1 or residual % group_size:
        raise ValueError(
            pick(
                f"residual must be a positive multiple of group_size={group_size} (keys are quantised residual "
                f"tokens at a time, in whole groups), got {residual!r}",
                f"residual 必须是 group_size={group_size} 的正整数倍（键每攒够 residual 个才成组量化），"
                f"收到的是 {residual!r}",
            )
        )


def kivi_split(num_tokens: int, residual: int) -> tuple[int, int]:
    """(keys quantised, values quantised): how many of the first tokens KIVI holds in low precision after
    ``num_tokens``: keys in whole windows of ``residual`` tokens, values all but the last ``residual``."""
    return num_tokens - num_tokens % residual, max(0, num_tokens - residual)


def kivi_quantize(keys, values, bits: int, group_size: int, residual: int):
    """KIVI's cache after ``T`` tokens, dequantised: (keys, values) as attention reads them.

    keys and values (B, H_kv, T, head_dim). The first ``kivi_split(T, residual)`` tokens are quantised: keys per
    channel in groups of ``group_size`` tokens, values per token in groups of ``group_size`` channels; the rest are
    returned as they are. ``residual`` must be a positive multiple of ``group_size``."""
    _check_cache_tensors(keys, values)
    _check_kivi(bits, group_size, residual, values.shape[-1])
    n_keys, n_values = kivi_split(keys.shape[2], residual)
    k_hat, v_hat = keys.clone(), values.clone()
    if n_keys:
        k_hat[:, :, :n_keys] = fake_quantize(keys[:, :, :n_keys], bits, along=-2, group_size=group_size)
    if n_values:
        v_hat[:, :, :n_values] = fake_quantize(values[:, :, :n_values], bits, along=-1, group_size=group_size)
    return k_hat, v_hat


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """uint8 codes of ``bits`` bits, ``8 // bits`` of them per byte along the last axis: (..., n) -> (..., n bits / 8).
    Code ``i`` of a byte sits in its bits ``bits * i`` onwards, as KIVI packs ``32 // bits`` codes into an int32."""
    _check_bits(bits)
    per_byte = 8 // bits
    if codes.shape[-1] % per_byte:
        raise ValueError(
            pick(
                f"the last axis ({codes.shape[-1]}) must hold whole bytes of {per_byte} codes",
                f"最后一个轴（{codes.shape[-1]}）必须正好装满若干个字节，每字节 {per_byte} 个编码",
            )
        )
    grouped = codes.to(torch.uint8).unflatten(-1, (-1, per_byte))  # (..., n / per_byte, per_byte)
    shifts = torch.arange(0, 8, bits, dtype=torch.uint8, device=codes.device)
    return (grouped << shifts).sum(-1, dtype=torch.uint8)  # the codes' bits do not overlap: the sum is an OR


def unpack_codes(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """The inverse of ``pack_codes``: (..., m) uint8 -> (..., m * 8 / bits) codes."""
    _check_bits(bits)
    shifts = torch.arange(0, 8, bits, dtype=torch.uint8, device=packed.device)
    return ((packed[..., None] >> shifts) & (2**bits - 1)).flatten(-2)


def kivi_bytes_per_token(head_dim: int, bits: int, group_size: int, bytes_per_element: int = 2) -> float:
    """Bytes one quantised token costs per K/V head, keys and values together: ``head_dim * bits / 8`` of codes each,
    plus a scale and a zero point of ``bytes_per_element`` per group (keys: one per channel per ``group_size`` tokens;
    values: ``head_dim / group_size`` per token). The residual window's full-precision tokens are not counted."""
    _check_bits(bits)
    codes = 2 * head_dim * bits / 8
    key_stats = 2 * head_dim * bytes_per_element / group_size  # scale + zero per channel, shared by group_size tokens
    value_stats = 2 * (head_dim // group_size) * bytes_per_element
    return codes + key_stats + value_stats


class QuantizedKVCache(KVCache):
    """KIVI's cache: keys per channel and values per token in ``bits`` bits (packed, ``8 // bits`` codes a byte), a
    scale and a zero point per group, the last tokens in full precision (``kivi_split``).

    ``update(keys, values)`` of n new tokens (B, H_kv, n, head_dim) appends them, quantises what leaves the
    window, and returns the whole cache dequantised, oldest first: exactly ``kivi_quantize`` of every token so far.
    KIVI's decoding step runs in the other order (attention first, then quantisation), so the step that fills a
    window reads its keys exact there; here that step already reads them quantised.
    ``nbytes`` counts what is held: packed codes, statistics and the full-precision tokens.
    """

    def __init__(
        self, batch_size, num_kv_heads, head_dim, bits, group_size, residual, dtype=torch.float32, device=None
    ):
        _check_kivi(bits, group_size, residual, head_dim)
        if (head_dim * bits) % 8:
            raise ValueError(
                pick(
                    f"head_dim={head_dim} codes of {bits} bits do not fill whole bytes",
                    f"head_dim={head_dim} 个 {bits} 比特的编码装不满整数个字节",
                )
            )
        self.shape = (batch_size, num_kv_heads, head_dim)
        self.bits, self.group_size, self.residual = bits, group_size, residual
        self.dtype, self.device = dtype, device
        self.reset()

    def reset(self):
        b, h, d = self.shape
        empty = torch.zeros(b, h, 0, d, dtype=self.dtype, device=self.device)
        self.key_full, self.value_full = empty, empty.clone()  # the full-precision tokens
        self.key_codes = torch.zeros(b, h, 0, d * self.bits // 8, dtype=torch.uint8, device=self.device)
        self.value_codes = self.key_codes.clone()
        g = d // self.group_size
        self.key_scale = torch.zeros(b, h, 0, d, dtype=self.dtype, device=self.device)  # one row per group of tokens
        self.key_zero = self.key_scale.clone()
        self.value_scale = torch.zeros(b, h, 0, g, dtype=self.dtype, device=self.device)  # one row per token
        self.value_zero = self.value_scale.clone()

    @property
    def seq_len(self) -> int:
        return self.key_codes.shape[2] + self.key_full.shape[2]

    def _held(self):
        return (self.key_full, self.value_full, self.key_codes, self.value_codes, self.key_scale, self.key_zero,
                self.value_scale, self.value_zero)  # fmt: skip

    def update(self, keys, values):
        b, h, d = self.shape
        self._check_new(keys, values, (b, h, d))
        self.key_full = torch.cat([self.key_full, keys.to(self.dtype)], dim=2)
        self.value_full = torch.cat([self.value_full, values.to(self.dtype)], dim=2)
        n_keys = kivi_split(self.key_full.shape[2], self.residual)[0]  # of the full-precision tokens
        n_values = kivi_split(self.value_full.shape[2], self.residual)[1]
        if n_keys:  # whole windows of keys: per channel, in groups of group_size tokens
            q = quantize(self.key_full[:, :, :n_keys], self.bits, along=-2, group_size=self.group_size)
            self.key_codes = torch.cat([self.key_codes, pack_codes(q.codes, self.bits)], dim=2)
            self.key_scale = torch.cat([self.key_scale, q.scale.squeeze(3)], dim=2)
            self.key_zero = torch.cat([self.key_zero, q.zero.squeeze(3)], dim=2)
            self.key_full = self.key_full[:, :, n_keys:]
        if n_values:  # the tokens that left the window: per token, in groups of group_size channels
            q = quantize(self.value_full[:, :, :n_values], self.bits, along=-1, group_size=self.group_size)
            self.value_codes = torch.cat([self.value_codes, pack_codes(q.codes, self.bits)], dim=2)
            self.value_scale = torch.cat([self.value_scale, q.scale.squeeze(-1)], dim=2)
            self.value_zero = torch.cat([self.value_zero, q.zero.squeeze(-1)], dim=2)
            self.value_full = self.value_full[:, :, n_values:]
        return self.read()

    def read(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The cache dequantised: keys and values (B, H_kv, T, head_dim), the quantised tokens first."""
        g = self.group_size
        k_codes = unpack_codes(self.key_codes, self.bits).to(self.dtype)  # (B, H, Tq, d)
        k = _grouped(k_codes, -2, g) * self.key_scale[:, :, :, None] + self.key_zero[:, :, :, None]
        v_codes = unpack_codes(self.value_codes, self.bits).to(self.dtype)
        v = _grouped(v_codes, -1, g) * self.value_scale[..., None] + self.value_zero[..., None]
        keys = torch.cat([k.flatten(2, 3), self.key_full], dim=2)
        values = torch.cat([v.flatten(-2), self.value_full], dim=2)
        return keys, values
