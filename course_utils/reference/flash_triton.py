"""FlashAttention's forward as a Triton kernel (notebook 14): one program instance per (query block, batch x head).

Each program loads its block of BLOCK_M queries once, then walks the key/value blocks of its head, BLOCK_N keys at
a time, keeping per query row the running maximum ``m``, the running sum ``l`` and the unnormalised accumulator
``acc`` (notebook 09's online softmax, one tile per loop step). The division by ``l`` waits until the last block;
the log-sum-exp ``lse = m + log(l)`` is stored beside the output so that a backward can recompute the probabilities
``exp(s - lse)`` without the (T, T) matrix. Causal: key blocks entirely above the diagonal are never loaded, and
only the blocks that cross it get the causal mask (every block masks the keys past the sequence's end).

The kernel follows Triton's own fused-attention tutorial (python/tutorials/06-fused-attention.py in Triton's
repository): its grid (query blocks x batch*heads), ``exp2`` with log2(e) folded into the scale, and the causal
case as two loops, the key blocks below the diagonal without a mask ("off-band") and those on it with one
("on-band"), which the compiler schedules apart. Unlike the tutorial it masks the tail, so any length works.

Where no CUDA GPU is present, Triton's interpreter runs the kernel on the CPU (``TRITON_INTERPRET=1``: triton reads
it when each ``@triton.jit`` runs, its own helpers such as ``tl.zeros`` and ``tl.sum`` included, which run when
triton is imported; so this module sets it before importing triton). The interpreter
executes each program instance with NumPy, one after another: right in float32 and float16, not a performance
figure, and it computes bfloat16 wrongly, so bfloat16 is refused there. Triton checks no bounds: a load past a
tensor's end reads whatever lies there in the interpreter (or crashes the process), and on a GPU it is undefined
(other data, or an illegal memory access that fails the launch and is reported by a later CUDA call); so every
load past the sequence's end is masked.

Triton has no wheel for macOS or Windows: there ``TRITON_AVAILABLE`` is False and ``flash_attention_triton``
raises a RuntimeError that says so.
"""

from __future__ import annotations

import math
import os

import torch

from ..lang import pick

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
            raise ValueError(
                pick(
                    f"{name} must be a torch.Tensor, got {type(t).__name__}",
                    f"{name} 必须是 torch.Tensor，收到的是 {type(t).__name__}",
                )
            )
        if t.ndim != 4:
            raise ValueError(
                pick(
                    f"{name} must have shape (batch, heads, seq_len, head_dim), got {tuple(t.shape)}",
                    f"{name} 的形状必须是 (batch, heads, seq_len, head_dim)，收到的是 {tuple(t.shape)}",
                )
            )
    if not (q.shape == k.shape == v.shape):
        raise ValueError(
            pick(
                f"q, k and v must have one shape (batch, heads, seq_len, head_dim), got {tuple(q.shape)}, "
                f"{tuple(k.shape)}, {tuple(v.shape)} (this kernel does self-attention without GQA)",
                f"q、k、v 的形状必须相同 (batch, heads, seq_len, head_dim)，收到的是 {tuple(q.shape)}、"
                f"{tuple(k.shape)}、{tuple(v.shape)}（这个 kernel 只做不带 GQA 的自注意力）",
            )
        )
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(
            pick(
                f"q, k and v must have one dtype, got {q.dtype}, {k.dtype}, {v.dtype}",
                f"q、k、v 的 dtype 必须相同，收到的是 {q.dtype}、{k.dtype}、{v.dtype}",
            )
        )
    if not (q.device == k.device == v.device):
        raise ValueError(
            pick(
                f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}",
                f"q、k、v 必须在同一个设备上，收到的是 {q.device}、{k.device}、{v.device}",
            )
        )
    if q.shape[-2] == 0 or q.shape[0] * q.shape[1] == 0:
        raise ValueError(
            pick(
                f"nothing to attend: shape {tuple(q.shape)} has an empty axis",
                f"没有可计算的内容：形状 {tuple(q.shape)} 有一个轴长度为 0",
            )
        )
    if not 1 <= q.shape[-1] <= MAX_HEAD_DIM:
        raise ValueError(
            pick(
                f"head_dim must be between 1 and {MAX_HEAD_DIM}, got {q.shape[-1]}",
                f"head_dim 必须在 1 到 {MAX_HEAD_DIM} 之间，收到的是 {q.shape[-1]}",
            )
        )
    interpreted = q.device.type == "cpu"
    allowed = (torch.float32, torch.float16) if interpreted else (torch.float32, torch.float16, torch.bfloat16)
    if q.dtype not in allowed:
        names = ", ".join(map(str, allowed))
        if q.dtype == torch.bfloat16:
            raise ValueError(
                pick(
                    f"dtype {q.dtype} is not supported (Triton's interpreter computes bfloat16 wrongly: use float32 "
                    f"or float16 on the CPU); use one of {names}",
                    f"不支持 dtype {q.dtype}（Triton 的解释器算 bfloat16 是错的：在 CPU 上请用 float32 或 float16）；"
                    f"可用的是 {names}",
                )
            )
        raise ValueError(
            pick(f"dtype {q.dtype} is not supported; use one of {names}", f"不支持 dtype {q.dtype}；可用的是 {names}")
        )
    if interpreted and INTERPRETED and not _interpreter_complete():
        raise RuntimeError(
            pick(
                "triton was imported before TRITON_INTERPRET=1 was set: restart the kernel and set it "
                "before the first `import triton`",
                "triton 在设置 TRITON_INTERPRET=1 之前就被导入了：请重启内核，并在第一次 `import triton` 之前设置它",
            )
        )
    if interpreted and not INTERPRETED:
        raise RuntimeError(
            pick(
                "CPU tensors need Triton's interpreter: set TRITON_INTERPRET=1 before this module is "
                "imported (it is set for you when no CUDA GPU is present)",
                "CPU 上的张量需要 Triton 的解释器：请在导入本模块之前设置 TRITON_INTERPRET=1"
                "（没有 CUDA GPU 时会自动设置）",
            )
        )
    if not interpreted and (q.device.type != "cuda" or INTERPRETED):
        raise RuntimeError(
            pick(
                f"tensors on {q.device} need a compiled kernel on a CUDA GPU; this process runs "
                f"Triton's interpreter (TRITON_INTERPRET=1), which takes CPU tensors",
                f"{q.device} 上的张量需要在 CUDA GPU 上编译的 kernel；这个进程运行的是 Triton 的解释器"
                f"（TRITON_INTERPRET=1），它只接受 CPU 张量",
            )
        )


def flash_attention_triton(
    q, k, v, causal: bool = False, scale: float | None = None, block_m: int | None = None, block_n: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T * scale [+ causal mask]) v by the Triton kernel above.

    q, k, v (B, H, T, d), any strides, one dtype: float32 or float16 (CPU, interpreted), also bfloat16 (CUDA,
    compiled; there float32 goes through TF32 in ``tl.dot``, Triton's default); 1 <= d <= 128 (padded inside to a
    power of two of at least 16: d = 80 costs what d = 128 does). ``block_m``, ``block_n``: powers of two of at least
    16, block_n dividing block_m (default: ``block_sizes``). Returns (out (B, H, T, d) in q's dtype, lse (B, H, T)
    float32: the natural log-sum-exp of each row's scaled scores).
    """
    out, lse, _ = _launch(q, k, v, causal, scale, block_m, block_n)
    return out, lse


def _launch(q, k, v, causal, scale, block_m, block_n):
    """Check the inputs, launch the kernel; returns (out, lse, Triton's compiled kernel, or None when interpreted)."""
    if not TRITON_AVAILABLE:
        raise RuntimeError(
            pick(
                "triton is not installed: it has wheels for Linux only (x86_64 and aarch64); on macOS "
                "and Windows notebook 14 cannot run its kernels",
                "没有安装 triton：它只提供 Linux 的 wheel（x86_64 和 aarch64）；在 macOS 和 Windows 上，"
                "笔记本 14 的 kernel 无法运行",
            )
        )
    _check_inputs(q, k, v)
    batch, heads, seq_len, head_dim = q.shape
    default_m, default_n, num_warps, num_stages = block_sizes(head_dim, INTERPRETED)
    block_m, block_n = block_m or default_m, block_n or default_n
    for name, size in (("block_m", block_m), ("block_n", block_n)):
        if not (isinstance(size, int) and size >= 16 and size & (size - 1) == 0):
            raise ValueError(
                pick(
                    f"{name} must be a power of two of at least 16, got {size!r} (tl.arange takes powers of two; "
                    f"P V reduces over block_n keys, and on NVIDIA GPUs tl.dot needs a reduction of at least 16)",
                    f"{name} 必须是不小于 16 的 2 的幂，收到的是 {size!r}（tl.arange 只接受 2 的幂；P V 沿 block_n "
                    f"个键求和，而在 NVIDIA GPU 上 tl.dot 的求和维度至少要 16）",
                )
            )
    if block_m % block_n:
        raise ValueError(
            pick(
                f"block_n={block_n} must divide block_m={block_m}: the causal loop starts its masked "
                f"blocks at a multiple of block_m",
                f"block_n={block_n} 必须整除 block_m={block_m}：因果循环中带掩码的块从 block_m 的整数倍处开始",
            )
        )
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty(batch, heads, seq_len, device=q.device, dtype=torch.float32)
    grid = (triton.cdiv(seq_len, block_m), batch * heads)
    extra = {} if INTERPRETED else {"num_warps": num_warps, "num_stages": num_stages}
    compiled = _flash_forward_kernel[grid](
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
    return out, lse, None if INTERPRETED else compiled


def compiled_resources(head_dim: int = 128, dtype=torch.bfloat16, causal: bool = True) -> dict:
    """What one program of the compiled kernel uses on this CUDA GPU, with ``block_sizes``' launch settings: its
    shared memory (bytes, from the compiled kernel's metadata), its registers per thread and the registers spilled to
    local memory (from the loaded binary), and num_warps, num_stages. A GPU only: the interpreter compiles nothing."""
    if INTERPRETED or not torch.cuda.is_available():
        raise RuntimeError(
            pick(
                "the kernel's resources exist once it is compiled for a CUDA GPU; Triton's interpreter compiles "
                "nothing",
                "只有为 CUDA GPU 编译之后，kernel 才有资源用量可读；Triton 的解释器不做编译",
            )
        )
    q = torch.zeros(1, 1, 256, head_dim, device="cuda", dtype=dtype)
    _, _, kernel = _launch(q, q, q, causal, None, None, None)
    kernel._init_handles()  # loads the binary: registers and spills are known from then on
    return {
        "shared_bytes": int(kernel.metadata.shared),
        "registers": int(kernel.n_regs),
        "spills": int(kernel.n_spills),
        "num_warps": int(kernel.metadata.num_warps),
        "num_stages": int(kernel.metadata.num_stages),
    }


def flash_backward_reference(q, k, v, out, lse, grad_out, causal: bool = False, scale: float | None = None):
    """FlashAttention's backward in PyTorch, from what the forward kept: q, k, v, out and lse (no probabilities).

    P = exp(S - lse) is recomputed from the scores, D = rowsum(dO * O) replaces the softmax's Jacobian:
    dV = P^T dO, dP = dO V^T, dS = P * (dP - D), dQ = dS K * scale, dK = dS^T Q * scale: five matrix products
    against the forward's two (2.5 times its FLOPs). Written over whole matrices for clarity; the course has no
    backward kernel. One in Triton (the fused-attention tutorial's) does the same per tile: a program per key block
    accumulates dK and dV, and dQ, which every key block adds to, takes a second pass (or atomic adds).
    Returns (dq, dk, dv), float32.
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
