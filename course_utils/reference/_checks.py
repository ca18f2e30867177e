"""Input checks shared by the attention modules: clear ValueErrors instead of deep tracebacks."""

from __future__ import annotations

import torch


def check_tokens(x, d_in: int, context_length: int | None = None, name: str = "x") -> None:
    """Raise ValueError unless ``x`` is a (batch, num_tokens, d_in) tensor within context_length."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.ndim != 3:
        raise ValueError(
            f"{name} must have shape (batch, num_tokens, d_in={d_in}), got a {x.ndim}-D tensor of "
            f"shape {tuple(x.shape)}" + ("; add a batch axis with x.unsqueeze(0)" if x.ndim == 2 else "")
        )
    if x.shape[-1] != d_in:
        raise ValueError(f"{name} has {x.shape[-1]} features in its last axis, but the module expects d_in={d_in}")
    if context_length is not None and x.shape[1] > context_length:
        raise ValueError(f"{name} has {x.shape[1]} tokens, longer than context_length={context_length}")


def check_divisible(numerator: int, denominator: int, what: str) -> None:
    """Raise ValueError unless ``denominator`` divides ``numerator`` (``what`` names the two)."""
    if denominator <= 0:
        raise ValueError(f"{what}: the divisor must be positive, got {denominator}")
    if numerator % denominator != 0:
        raise ValueError(f"{what} must divide evenly, got {numerator} % {denominator} = {numerator % denominator}")
