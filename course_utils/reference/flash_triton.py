"""FlashAttention's forward as a Triton kernel (notebook 14): one program instance per (query block, batch x head).

Each program loads its block of BLOCK_M queries once, then walks the key/value blocks of its head, BLOCK_N keys at
a time, keeping per query row the running maximum ``m``, the running sum ``l`` and the unnormalised accumulator
``acc`` (notebook 09's online softmax, one tile per loop step). The division by ``l`` waits until the last block;
the log-sum-exp ``lse = m + log(l)`` is stored beside the output so that a backward can recompute the probabilities
``exp(s - lse)`` without the (T, T) matrix. Causal: key blocks entirely above the diagonal are never loaded, and
only the blocks that cross it are masked.

Where no CUDA GPU is present, Triton's interpreter runs the kernel on the CPU (``TRITON_INTERPRET=1``: triton reads
it when each ``@triton.jit`` runs, its own helpers such as ``tl.zeros`` and ``tl.sum`` included, which run when
triton is imported; so this module sets it before importing triton). The interpreter
executes each program instance with NumPy: right in float32 and float16, not a performance figure, and it computes
bfloat16 wrongly, so bfloat16 is refused there. Out-of-bounds reads raise nothing in the interpreter (nor on a GPU):
every load past the sequence's end is masked.

Triton has no wheel for macOS or Windows: there ``TRITON_AVAILABLE`` is False and ``flash_attention_triton``
raises a RuntimeError that says so.
"""

from __future__ import annotations

import math
import os

import torch

if not torch.cuda.is_available():  # before triton.jit runs: it picks the interpreter or the compiler then
    os.environ.setdefault("TRITON_INTERPRET", "1")

try:
    import triton
    import triton.language as tl
except ImportError:  # macOS, Windows, or a Linux install without triton
    triton = tl = None

TRITON_AVAILABLE = triton is not None
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


def _interpreter_complete() -> bool:
    """Whether triton.language's own jit helpers were made for the interpreter (triton imported after the variable
    was set): otherwise calling tl.zeros inside an interpreted kernel fails."""
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.zeros, InterpretedFunction)


MAX_HEAD_DIM = 128
LOG2_E = 1.4426950408889634  # exp(x) = exp2(x * log2(e)): the GPU's exp2 is one instruction
LN_2 = 0.6931471805599453


def block_sizes(head_dim: int, interpreted: bool) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages): compiled, 128 queries x 64 keys per step (8 warps for d = 128,
    whose tiles need the registers of more threads); interpreted, 32 x 32 (fewer, larger NumPy calls)."""
    if interpreted:
        return 32, 32, 1, 1
    return 128, 64, (8 if head_dim > 64 else 4), 3


if TRITON_AVAILABLE:

    @triton.jit
    def _attend_key_block(
        q,
        m_i,
        l_i,
        acc,
        k_base,
        v_base,
        stride_kt,
        stride_kd,
        stride_vt,
        stride_vd,
        start_n,
        offs_m,
        offs_d,
        dim_ok,
        seq_len,
        qk_scale_log2,
        DIAGONAL: tl.constexpr,
        BLOCK_N: tl.constexpr,
    ):
        """One step of the online softmax: BLOCK_N keys and values folded into (m_i, l_i, acc)."""
        offs_n = start_n + tl.arange(0, BLOCK_N)  # (BLOCK_N,) key rows
        col_ok = offs_n < seq_len  # the last key block may run past the sequence
        k = tl.load(
            k_base + offs_n[:, None] * stride_kt + offs_d[None, :] * stride_kd,
            mask=col_ok[:, None] & dim_ok[None, :],
            other=0.0,
        )  # (BLOCK_N, BLOCK_D)
        v = tl.load(
            v_base + offs_n[:, None] * stride_vt + offs_d[None, :] * stride_vd,
            mask=col_ok[:, None] & dim_ok[None, :],
            other=0.0,
        )
        s = tl.dot(q, tl.trans(k)) * qk_scale_log2  # (BLOCK_M, BLOCK_N) scaled scores, times log2(e)
        visible = col_ok[None, :] & (offs_m[:, None] >= 0)  # (BLOCK_M, BLOCK_N)
        if DIAGONAL:  # a block that crosses the diagonal: hide the keys after each query
            visible = visible & (offs_n[None, :] <= offs_m[:, None])
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))  # finite: key 0 is visible to every row in the first block
        alpha = tl.exp2(m_i - m_new)  # rescales what was summed under the old maximum
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        return m_new, l_i, acc

    @triton.jit
    def _flash_forward_kernel(
        Q,
        K,
        V,
        O,
        LSE,
        stride_qb,
        stride_qh,
        stride_qt,
        stride_qd,
        stride_kb,
        stride_kh,
        stride_kt,
        stride_kd,
        stride_vb,
        stride_vh,
        stride_vt,
        stride_vd,
        stride_ob,
        stride_oh,
        stride_ot,
        stride_od,
        num_heads,
        seq_len,
        head_dim,
        qk_scale_log2,
        CAUSAL: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_D: tl.constexpr,
    ):
        block_m = tl.program_id(0)  # which BLOCK_M queries
        batch_head = tl.program_id(1)  # which (batch, head)
        b = batch_head // num_heads
        h = batch_head % num_heads
        offs_m = block_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,) query rows
        offs_d = tl.arange(0, BLOCK_D)  # (BLOCK_D,) features, padded to a power of two
        row_ok = offs_m < seq_len  # the last query block may run past the sequence
        dim_ok = offs_d < head_dim

        q_ptrs = Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qt + offs_d[None, :] * stride_qd
        q = tl.load(q_ptrs, mask=row_ok[:, None] & dim_ok[None, :], other=0.0)  # (BLOCK_M, BLOCK_D), read once
        k_base = K + b * stride_kb + h * stride_kh
        v_base = V + b * stride_vb + h * stride_vh

        m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)  # running max, in log2 units
        l_i = tl.zeros((BLOCK_M,), tl.float32)  # running sum of exp2(s - m_i)
        acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)  # running sum of exp2(s - m_i) v, not yet divided

        # key blocks every query of this block sees whole: all of them, or (causal) those below the diagonal.
        # BLOCK_M is a multiple of BLOCK_N, so the diagonal's first key block starts at block_m * BLOCK_M.
        below = block_m * BLOCK_M if CAUSAL else seq_len
        for start_n in range(0, below, BLOCK_N):
            m_i, l_i, acc = _attend_key_block(
                q,
                m_i,
                l_i,
                acc,
                k_base,
                v_base,
                stride_kt,
                stride_kd,
                stride_vt,
                stride_vd,
                start_n,
                offs_m,
                offs_d,
                dim_ok,
                seq_len,
                qk_scale_log2,
                False,
                BLOCK_N,
            )
        if CAUSAL:  # the blocks that cross the diagonal, masked; those above it are never loaded
            end = tl.minimum((block_m + 1) * BLOCK_M, seq_len)
            for start_n in range(below, end, BLOCK_N):
                m_i, l_i, acc = _attend_key_block(
                    q,
                    m_i,
                    l_i,
                    acc,
                    k_base,
                    v_base,
                    stride_kt,
                    stride_kd,
                    stride_vt,
                    stride_vd,
                    start_n,
                    offs_m,
                    offs_d,
                    dim_ok,
                    seq_len,
                    qk_scale_log2,
                    True,
                    BLOCK_N,
                )

        out = acc / l_i[:, None]  # the one division, after the last block
        o_ptrs = O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_ot + offs_d[None, :] * stride_od
        tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_ok[:, None] & dim_ok[None, :])
        lse = (m_i + tl.log2(l_i)) * 0.6931471805599453  # back to the natural log: lse = m + log(l)
        tl.store(LSE + batch_head * seq_len + offs_m, lse, mask=row_ok)


def _check_inputs(q, k, v) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.ndim != 4:
            raise ValueError(f"{name} must have shape (batch, heads, seq_len, head_dim), got {tuple(t.shape)}")
    if not (q.shape == k.shape == v.shape):
        raise ValueError(
            f"q, k and v must have one shape (batch, heads, seq_len, head_dim), got {tuple(q.shape)}, "
            f"{tuple(k.shape)}, {tuple(v.shape)} (this kernel does self-attention without GQA)"
        )
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k and v must have one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    if q.shape[-2] == 0 or q.shape[0] * q.shape[1] == 0:
        raise ValueError(f"nothing to attend: shape {tuple(q.shape)} has an empty axis")
    if not 1 <= q.shape[-1] <= MAX_HEAD_DIM:
        raise ValueError(f"head_dim must be between 1 and {MAX_HEAD_DIM}, got {q.shape[-1]}")
    interpreted = q.device.type == "cpu"
    allowed = (torch.float32, torch.float16) if interpreted else (torch.float32, torch.float16, torch.bfloat16)
    if q.dtype not in allowed:
        why = (
            " (Triton's interpreter computes bfloat16 wrongly: use float32 or float16 on the CPU)"
            if q.dtype == torch.bfloat16
            else ""
        )
        raise ValueError(f"dtype {q.dtype} is not supported{why}; use one of {', '.join(map(str, allowed))}")
    if interpreted and INTERPRETED and not _interpreter_complete():
        raise RuntimeError(
            "triton was imported before TRITON_INTERPRET=1 was set: restart the kernel and set it "
            "before the first `import triton`"
        )
    if interpreted and not INTERPRETED:
        raise RuntimeError(
            "CPU tensors need Triton's interpreter: set TRITON_INTERPRET=1 before this module is "
            "imported (it is set for you when no CUDA GPU is present)"
        )
    if not interpreted and (q.device.type != "cuda" or INTERPRETED):
        raise RuntimeError(
            f"tensors on {q.device} need a compiled kernel on a CUDA GPU; this process runs "
            f"Triton's interpreter (TRITON_INTERPRET=1), which takes CPU tensors"
        )


def flash_attention_triton(
    q, k, v, causal: bool = False, scale: float | None = None, block_m: int | None = None, block_n: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T * scale [+ causal mask]) v by the Triton kernel above.

    q, k, v (B, H, T, d), any strides, one dtype: float32 or float16 (CPU, interpreted), also bfloat16 (CUDA,
    compiled); 1 <= d <= 128 (padded inside to a power of two of at least 16: d = 80 costs what d = 128 does).
    ``block_m``, ``block_n``: powers of two of at least 16, block_n dividing block_m (default: ``block_sizes``).
    Returns (out (B, H, T, d) in q's dtype, lse (B, H, T) float32: the natural log-sum-exp of each row's
    scaled scores).
    """
    if not TRITON_AVAILABLE:
        raise RuntimeError(
            "triton is not installed: it has wheels for Linux only (x86_64 and aarch64); on macOS "
            "and Windows notebook 14 cannot run its kernels"
        )
    _check_inputs(q, k, v)
    batch, heads, seq_len, head_dim = q.shape
    default_m, default_n, num_warps, num_stages = block_sizes(head_dim, INTERPRETED)
    block_m, block_n = block_m or default_m, block_n or default_n
    for name, size in (("block_m", block_m), ("block_n", block_n)):
        if not (isinstance(size, int) and size >= 16 and size & (size - 1) == 0):
            raise ValueError(f"{name} must be a power of two of at least 16 (tl.dot's smallest tile), got {size!r}")
    if block_m % block_n:
        raise ValueError(
            f"block_n={block_n} must divide block_m={block_m}: the causal loop starts its masked "
            f"blocks at a multiple of block_m"
        )
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty(batch, heads, seq_len, device=q.device, dtype=torch.float32)
    grid = (triton.cdiv(seq_len, block_m), batch * heads)
    extra = {} if INTERPRETED else {"num_warps": num_warps, "num_stages": num_stages}
    _flash_forward_kernel[grid](
        q,
        k,
        v,
        out,
        lse,
        *q.stride(),
        *k.stride(),
        *v.stride(),
        *out.stride(),
        heads,
        seq_len,
        head_dim,
        scale * LOG2_E,
        CAUSAL=bool(causal),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_D=max(16, triton.next_power_of_2(head_dim)),
        **extra,
    )
    return out, lse


def flash_backward_reference(q, k, v, out, lse, grad_out, causal: bool = False, scale: float | None = None):
    """FlashAttention's backward in PyTorch, from what the forward kept: q, k, v, out and lse (no probabilities).

    P = exp(S - lse) is recomputed from the scores, D = rowsum(dO * O) replaces the softmax's Jacobian:
    dV = P^T dO, dP = dO V^T, dS = P * (dP - D), dQ = dS K * scale, dK = dS^T Q * scale. Written over whole
    matrices for clarity; the kernel does the same per tile. Returns (dq, dk, dv), float32.
    """
    q, k, v, out, grad_out = (t.float() for t in (q, k, v, out, grad_out))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ k.transpose(-2, -1) * scale
    if causal:
        seq_len = q.shape[-2]
        s = s.masked_fill(torch.ones(seq_len, seq_len, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    p = torch.exp(s - lse[..., None])  # the softmax, recomputed: no (T, T) matrix was stored
    dv = p.transpose(-2, -1) @ grad_out
    dp = grad_out @ v.transpose(-2, -1)
    delta = (grad_out * out).sum(-1, keepdim=True)  # rowsum(dO * O) = rowsum(P * dP)
    ds = p * (dp - delta)
    return ds @ k * scale, ds.transpose(-2, -1) @ q * scale, dv
