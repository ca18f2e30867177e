"""An independent RoPE for the tests: pairs of features as complex numbers, rotated by multiplying with e^(i m theta).

It shares no code with course_utils.rotary: the frequencies come from Python floats, the rotation from torch's
complex multiplication, and the pairing is explicit (adjacent for interleaved, i with i + d/2 for rotate half).
"""

import torch


def frequencies(head_dim, base):
    return torch.tensor([base ** (-2.0 * i / head_dim) for i in range(head_dim // 2)], dtype=torch.float64)


def complex_rope(x, positions, base=10000.0, interleaved=False):
    """Rotate x (..., T, d) at positions (T,) or (B, T) (then x is (B, T, d) or (B, H, T, d))."""
    d = x.shape[-1]
    positions = torch.as_tensor(positions, dtype=torch.float64)
    angles = positions[..., None] * frequencies(d, base)  # (..., T, d/2)
    if positions.ndim == 2 and x.ndim == 4:
        angles = angles[:, None]  # the same positions for every head
    turn = torch.polar(torch.ones_like(angles), angles)  # e^(i m theta)
    xd = x.double()
    if interleaved:
        pairs = torch.complex(xd[..., 0::2], xd[..., 1::2])
        rotated = pairs * turn
        out = torch.stack([rotated.real, rotated.imag], dim=-1).flatten(-2)
    else:
        pairs = torch.complex(xd[..., : d // 2], xd[..., d // 2 :])
        rotated = pairs * turn
        out = torch.cat([rotated.real, rotated.imag], dim=-1)
    return out.to(x.dtype)
