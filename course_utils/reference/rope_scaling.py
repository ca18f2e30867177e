"""RoPE scaling: run a model past the context length it was trained on by changing RoPE's frequencies.

Each function returns ``(inv_freq, attention_factor)`` like Hugging Face's rope-init functions
(``transformers.modeling_rope_utils``: ``_compute_linear_scaling_rope_parameters``, ``_compute_yarn_parameters``,
``_compute_llama3_parameters``), from which those formulas are transcribed: ``inv_freq`` (head_dim // 2,) replaces
``rope_inv_freq``'s theta_i, and ``attention_factor`` multiplies the cos and sin tables (so it multiplies every q.k
score by its square). ``factor`` = s = new context / trained context.

* **linear position interpolation** (Chen et al. 2023; ``rope_type="linear"``): every theta_i / s, i.e. position m
  is read as m / s.
* **NTK-aware** (bloc97, 2023; written down in the YaRN paper, §3.1): a larger base,
  ``base * s ** (d / (d - 2))``: the slowest pair is interpolated by exactly s, the fastest pairs barely change; the
  pairs in between are divided by less than s and turn past their trained angles ("out of bound"). Hugging Face has
  no static form of it: its ``rope_type="dynamic"`` (``_compute_dynamic_ntk_parameters``) recomputes the base from
  the current sequence length.
* **YaRN** (Peng et al. 2023; ``rope_type="yarn"``): per frequency, interpolate the pairs that turn less than
  ``beta_slow`` times over the trained context, keep those that turn more than ``beta_fast`` times, and ramp linearly
  in between (over the pair index, as in the paper's reference code); plus an attention temperature t, softmax(q.k /
  (t sqrt(d))) with ``sqrt(1/t) = 0.1 ln(s) + 1``: the attention factor is sqrt(1/t) (gpt-oss calls it the
  "concentration"), and every score is multiplied by 1/t.
* **Llama 3.1** (``rope_type="llama3"``): the same idea with the ramp over wavelengths, no temperature.
"""

from __future__ import annotations

import math

import torch

from ..lang import pick
from .rotary import rope_inv_freq


def _check_factor(factor) -> None:
    if not isinstance(factor, (int, float)) or isinstance(factor, bool) or factor < 1:
        raise ValueError(
            pick(
                f"RoPE scaling factor must be a number >= 1 (new context / trained context), got {factor!r}",
                f"RoPE 缩放系数必须是不小于 1 的数（新上下文长度 / 训练时的上下文长度），收到的是 {factor!r}",
            )
        )


def linear_scaling_inv_freq(
    head_dim: int, base: float = 10000.0, factor: float = 1.0, dtype=torch.float32
) -> tuple[torch.Tensor, float]:
    """Position interpolation: theta_i / factor for every pair (Hugging Face's ``rope_type="linear"``)."""
    _check_factor(factor)
    return rope_inv_freq(head_dim, base, dtype=dtype) / factor, 1.0


def ntk_scaling_inv_freq(
    head_dim: int, base: float = 10000.0, factor: float = 1.0, dtype=torch.float32
) -> tuple[torch.Tensor, float]:
    """NTK-aware scaling: the base becomes ``base * factor ** (head_dim / (head_dim - 2))`` (static; Hugging Face's
    ``"dynamic"`` type computes the same with ``factor`` replaced by ``factor * seq_len / L - (factor - 1)``)."""
    _check_factor(factor)
    if head_dim <= 2:
        raise ValueError(
            pick(
                f"NTK-aware scaling needs head_dim > 2, got {head_dim}",
                f"NTK-aware 缩放需要 head_dim > 2，收到的是 {head_dim}",
            )
        )
    return rope_inv_freq(head_dim, base * factor ** (head_dim / (head_dim - 2)), dtype=dtype), 1.0


def yarn_correction_range(head_dim, base, original_max_position_embeddings, beta_fast=32.0, beta_slow=1.0):
    """(low, high) pair indices where YaRN's ramp runs: the pair that turns ``beta_fast`` times over the trained
    context (floored) and the one that turns ``beta_slow`` times (ceiled), clamped to [0, head_dim - 1]."""

    def pair_turning(num_rotations):  # solve L * theta_i = 2 pi * num_rotations for i
        return (
            head_dim * math.log(original_max_position_embeddings / (num_rotations * 2 * math.pi)) / (2 * math.log(base))
        )

    low, high = math.floor(pair_turning(beta_fast)), math.ceil(pair_turning(beta_slow))
    return max(low, 0), min(high, head_dim - 1)


def yarn_inv_freq(
    head_dim: int,
    base: float = 10000.0,
    factor: float = 1.0,
    *,
    original_max_position_embeddings: int,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    attention_factor: float | None = None,
    dtype=torch.float32,
) -> tuple[torch.Tensor, float]:
    """YaRN's frequencies and attention factor (``rope_type="yarn"``).

    ``ramp_i`` goes from 0 at pair ``low`` to 1 at pair ``high`` (``yarn_correction_range``); pair i keeps
    ``theta_i`` where the ramp is 0 (fast pairs) and gets ``theta_i / factor`` where it is 1 (slow pairs).
    ``attention_factor`` defaults to ``0.1 * ln(factor) + 1``: the paper's sqrt(1/t), where t is the temperature of
    softmax(q.k / (t sqrt(d))) (t = 0.771 at factor 4), so every score is multiplied by ``attention_factor ** 2 = 1/t``.
    Newer Hugging Face versions also read DeepSeek's ``mscale``/``mscale_all_dim`` and a ``truncate=False`` option
    (no floor/ceil of the range); neither is here: this is their default path.
    """
    _check_factor(factor)
    theta = rope_inv_freq(head_dim, base, dtype=dtype)  # (d/2,)
    low, high = yarn_correction_range(head_dim, base, original_max_position_embeddings, beta_fast, beta_slow)
    if low == high:
        high += 0.001  # as the reference code: avoid dividing by zero
    ramp = ((torch.arange(head_dim // 2, dtype=dtype) - low) / (high - low)).clamp(0, 1)
    inv_freq = theta * (1 - ramp) + theta / factor * ramp
    if attention_factor is None:
        attention_factor = 0.1 * math.log(factor) + 1.0
    return inv_freq, attention_factor


def llama3_inv_freq(
    head_dim: int,
    base: float = 500000.0,
    factor: float = 8.0,
    *,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
    original_max_position_embeddings: int = 8192,
    dtype=torch.float32,
) -> tuple[torch.Tensor, float]:
    """Llama 3.1's ``rope_scaling`` (``rope_type="llama3"``; the defaults are Llama 3.1's config).

    Wavelength ``2 pi / theta_i`` below ``L / high_freq_factor`` (2048 tokens): kept. Above ``L / low_freq_factor``
    (8192): divided by ``factor``. In between: ``(1 - a) theta_i / factor + a theta_i`` with
    ``a = (L / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)``.
    """
    _check_factor(factor)
    if high_freq_factor <= low_freq_factor:
        raise ValueError(
            pick(
                f"high_freq_factor ({high_freq_factor}) must be larger than low_freq_factor ({low_freq_factor})",
                f"high_freq_factor（{high_freq_factor}）必须大于 low_freq_factor（{low_freq_factor}）",
            )
        )
    theta = rope_inv_freq(head_dim, base, dtype=dtype)
    wavelength = 2 * math.pi / theta
    L = original_max_position_embeddings
    smooth = ((L / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)).clamp(0, 1)
    inv_freq = torch.where(
        wavelength < L / high_freq_factor,
        theta,
        torch.where(wavelength > L / low_freq_factor, theta / factor, (1 - smooth) * theta / factor + smooth * theta),
    )
    return inv_freq, 1.0


def scaled_rope_cos_sin(
    positions, inv_freq: torch.Tensor, attention_factor: float = 1.0, dtype=torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables ``positions.shape + (2 * len(inv_freq),)`` in the rotate-half layout, times
    ``attention_factor``, for ``course_utils.apply_rope``. Angles in float64 here: positions past 100k times a
    fast frequency lose digits in float32."""
    positions = torch.as_tensor(positions)
    if positions.is_floating_point() or positions.is_complex():
        raise ValueError(
            pick(
                f"positions must be integers, got dtype {positions.dtype}",
                f"positions 必须是整数，收到的 dtype 是 {positions.dtype}",
            )
        )
    angles = positions.double()[..., None] * inv_freq.to(device=positions.device, dtype=torch.float64)
    angles = torch.cat([angles, angles], dim=-1)  # rotate-half layout, as rope_cos_sin
    return (angles.cos() * attention_factor).to(dtype), (angles.sin() * attention_factor).to(dtype)
