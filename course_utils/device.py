"""Pick the device the course runs on: CUDA, else MPS, else CPU.

Set the environment variable ``ATTN_DEVICE`` (``cpu``, ``cuda``, ``cuda:1``, ``mps``) to force one.
"""

from __future__ import annotations

import os

import torch

from .lang import pick

DEVICE_ENV_VAR = "ATTN_DEVICE"


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def get_device(prefer: str | None = None) -> torch.device:
    """Return ``prefer``, else ``$ATTN_DEVICE``, else the best available device (cuda > mps > cpu)."""
    name = prefer or os.environ.get(DEVICE_ENV_VAR, "").strip()
    if name:
        try:
            device = torch.device(name)
        except RuntimeError as err:
            raise ValueError(
                pick(
                    f"{DEVICE_ENV_VAR}={name!r} is not a device name (cpu, cuda, cuda:1, mps)",
                    f"{DEVICE_ENV_VAR}={name!r} 不是设备名（cpu、cuda、cuda:1、mps）",
                )
            ) from err
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(
                pick(
                    f"{DEVICE_ENV_VAR}={name!r} asks for CUDA, but torch sees no CUDA device",
                    f"{DEVICE_ENV_VAR}={name!r} 要求使用 CUDA，但 torch 找不到 CUDA 设备",
                )
            )
        if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(
                pick(
                    f"{DEVICE_ENV_VAR}={name!r}: torch sees only {torch.cuda.device_count()} CUDA device(s)",
                    f"{DEVICE_ENV_VAR}={name!r}：torch 只找到 {torch.cuda.device_count()} 个 CUDA 设备",
                )
            )
        if device.type == "mps" and not _mps_available():
            raise ValueError(
                pick(
                    f"{DEVICE_ENV_VAR}={name!r} asks for MPS, but torch sees no MPS device",
                    f"{DEVICE_ENV_VAR}={name!r} 要求使用 MPS，但 torch 找不到 MPS 设备",
                )
            )
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if _mps_available():
        return torch.device("mps")
    return torch.device("cpu")


def synchronize(device: torch.device | str) -> None:
    """Wait for queued kernels on ``device`` (a no-op on CPU), so that timings measure the work."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
