"""Input checks shared by the attention modules: clear ValueErrors instead of deep tracebacks."""

from __future__ import annotations

import torch

from ..lang import pick


def check_tokens(x, d_in: int, context_length: int | None = None, name: str = "x") -> None:
    """Raise ValueError unless ``x`` is a (batch, num_tokens, d_in) tensor within context_length."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(
            pick(
                f"{name} must be a torch.Tensor, got {type(x).__name__}",
                f"{name} 必须是 torch.Tensor，收到的是 {type(x).__name__}",
            )
        )
    if x.ndim != 3:
        raise ValueError(
            pick(
                f"{name} must have shape (batch, num_tokens, d_in={d_in}), got a {x.ndim}-D tensor of "
                f"shape {tuple(x.shape)}" + ("; add a batch axis with x.unsqueeze(0)" if x.ndim == 2 else ""),
                f"{name} 的形状必须是 (batch, num_tokens, d_in={d_in})，"
                f"收到的是形状为 {tuple(x.shape)} 的 {x.ndim} 维张量"
                + ("；用 x.unsqueeze(0) 加上 batch 轴" if x.ndim == 2 else ""),
            )
        )
    if x.shape[-1] != d_in:
        raise ValueError(
            pick(
                f"{name} has {x.shape[-1]} features in its last axis, but the module expects d_in={d_in}",
                f"{name} 最后一个轴有 {x.shape[-1]} 个特征，但模块要求 d_in={d_in}",
            )
        )
    if context_length is not None and x.shape[1] > context_length:
        raise ValueError(
            pick(
                f"{name} has {x.shape[1]} tokens, longer than context_length={context_length}",
                f"{name} 有 {x.shape[1]} 个 token，超过了 context_length={context_length}",
            )
        )


def check_divisible(numerator: int, denominator: int, what: str) -> None:
    """Raise ValueError unless ``denominator`` divides ``numerator`` (``what`` names the two)."""
    if denominator <= 0:
        raise ValueError(
            pick(
                f"{what}: the divisor must be positive, got {denominator}",
                f"{what}：除数必须为正，收到的是 {denominator}",
            )
        )
    if numerator % denominator != 0:
        raise ValueError(
            pick(
                f"{what} must divide evenly, got {numerator} % {denominator} = {numerator % denominator}",
                f"{what} 必须能整除，收到的是 {numerator} % {denominator} = {numerator % denominator}",
            )
        )
