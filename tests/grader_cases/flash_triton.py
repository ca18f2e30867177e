"""Learner-style code for exercise 14 (flash_triton): the reference solution (lines tagged ``#TAG``), alternative
correct kernels in other styles, a stub, and misconception mutants as line edits of the reference (``mutate``)."""

# what the solution notebook gives before the learner's part (solutions/14_flash_triton.ipynb, cell "setup")
SETUP = """import math
import os

import torch

os.environ["TRITON_INTERPRET"] = "1"  # graded in Triton's interpreter, on the CPU: set before any @triton.jit
import triton
import triton.language as tl
"""

# the launcher, given (cell "launch")
LAUNCH = '''
def flash_attention(q, k, v, causal, block_m, block_n):
    """q, k, v (B, H, T, d), one layout, d a power of two >= 16 -> (out (B, H, T, d), lse (B, H, T) float32)."""
    batch, heads, seq_len, head_dim = q.shape
    assert k.stride() == q.stride() == v.stride(), "q, k and v must share one layout"
    out = torch.empty(batch, heads, seq_len, head_dim, dtype=q.dtype)
    lse = torch.empty(batch, heads, seq_len, dtype=torch.float32)
    grid = (triton.cdiv(seq_len, block_m), batch * heads)
    flash_kernel[grid](q, k, v, out, lse, *q.stride(), *out.stride(), heads, seq_len, 1 / math.sqrt(head_dim),
                       CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, HEAD_DIM=head_dim)
    return out, lse
'''

KERNEL_HEAD = """
@triton.jit
def flash_kernel(Q, K, V, O, LSE, stride_b, stride_h, stride_t, stride_d, o_stride_b, o_stride_h, o_stride_t,
                 o_stride_d, num_heads, seq_len, scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    block_m, batch_head = tl.program_id(0), tl.program_id(1)  # this program: one query block of one head
    base = (batch_head // num_heads) * stride_b + (batch_head % num_heads) * stride_h
    rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,) its queries
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + base + rows[:, None] * stride_t + dims[None, :] * stride_d, mask=rows[:, None] < seq_len,
                other=0.0)  # (BLOCK_M, HEAD_DIM)
    o_ptrs = O + (batch_head // num_heads) * o_stride_b + (batch_head % num_heads) * o_stride_h \\
        + rows[:, None] * o_stride_t + dims[None, :] * o_stride_d
    lse_ptrs = LSE + batch_head * seq_len + rows
"""

# the learner's part (cell "solution", between the nbgrader markers)
BODY = """    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)  #MAX0
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    end = tl.minimum((block_m + 1) * BLOCK_M, seq_len) if CAUSAL else seq_len  #END
    for start in range(0, end, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        kv_offsets = base + cols[:, None] * stride_t + dims[None, :] * stride_d  #KV
        k = tl.load(K + kv_offsets, mask=cols[:, None] < seq_len, other=0.0)  #LOADK
        v = tl.load(V + kv_offsets, mask=cols[:, None] < seq_len, other=0.0)  #LOADV
        s = tl.dot(q, tl.trans(k)) * scale  #SCALE
        visible = (cols[None, :] < seq_len) & (rows[:, None] >= 0)  #TAIL
        if CAUSAL:
            visible = visible & (cols[None, :] <= rows[:, None])  #DIAG
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))  #MAXNEW
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)  #SUM
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)  #ACC
        m_i = m_new
    out = acc / l_i[:, None]  #OUT
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=rows[:, None] < seq_len)  #STORE
    tl.store(lse_ptrs, m_i + tl.log(l_i), mask=rows < seq_len)  #LSE
"""


def kernel(body):
    return SETUP + KERNEL_HEAD + body + LAUNCH


REFERENCE = kernel(BODY)

STUB = kernel("""    # YOUR CODE HERE
    raise NotImplementedError("your code here")
""")

ALTERNATIVES = {
    # exp2 with log2(e) folded into the scale, as the course's kernel does; the lse converted back to natural log
    "exp2_log2_units": kernel("""    LOG2E: tl.constexpr = 1.4426950408889634
    m_i = tl.zeros((BLOCK_M,), tl.float32) - float("inf")
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    hi = seq_len
    if CAUSAL:
        hi = tl.minimum(hi, (block_m + 1) * BLOCK_M)
    for start in range(0, hi, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        in_seq = cols < seq_len
        k = tl.load(K + base + cols[:, None] * stride_t + dims[None, :] * stride_d, mask=in_seq[:, None], other=0.0)
        v = tl.load(V + base + cols[:, None] * stride_t + dims[None, :] * stride_d, mask=in_seq[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * (scale * LOG2E)
        s = tl.where(in_seq[None, :], s, float("-inf"))
        if CAUSAL:
            s = tl.where(cols[None, :] > rows[:, None], float("-inf"), s)
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
        correction = tl.exp2(m_i - m_new)
        acc = acc * correction[:, None]
        acc += tl.dot(p, v)
        l_i = l_i * correction + tl.sum(p, axis=1)
        m_i = m_new
    tl.store(o_ptrs, acc / l_i[:, None], mask=rows[:, None] < seq_len)
    tl.store(lse_ptrs, (m_i + tl.log2(l_i)) / LOG2E, mask=rows < seq_len)
"""),
    # two loops, as FlashAttention-2's kernels do: whole blocks below the diagonal without a mask, then the
    # blocks that cross it with one; the scale applied to q once; the division as a multiply by 1 / l
    "two_loops_scaled_q": kernel("""    q = q * scale
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    below = seq_len
    if CAUSAL:
        below = block_m * BLOCK_M
    for phase in range(2):
        lo = 0 if phase == 0 else below
        hi = below if phase == 0 else (tl.minimum((block_m + 1) * BLOCK_M, seq_len) if CAUSAL else below)
        for start in range(lo, hi, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            ok = cols[None, :] < seq_len
            k_t = tl.load(K + base + cols[None, :] * stride_t + dims[:, None] * stride_d, mask=ok, other=0.0)
            v = tl.load(V + base + cols[:, None] * stride_t + dims[None, :] * stride_d, mask=cols[:, None] < seq_len,
                        other=0.0)
            s = tl.dot(q, k_t)
            if phase == 1:
                ok = ok & (cols[None, :] <= rows[:, None])
            s = tl.where(ok, s, -float("inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(s - m_new[:, None])
            l_i = alpha * l_i + tl.sum(p, 1)
            acc = alpha[:, None] * acc + tl.dot(p, v)
            m_i = m_new
    inv = 1.0 / l_i
    tl.store(o_ptrs, acc * inv[:, None], mask=rows[:, None] < seq_len)
    tl.store(lse_ptrs, m_i - tl.log(inv), mask=rows < seq_len)
"""),
}

# (expected diagnosis key, edits of the reference)
MUTANTS = [
    ("flash_accumulator_not_rescaled", {"ACC": "acc = acc + tl.dot(p.to(v.dtype), v)"}),
    ("flash_sum_not_rescaled", {"SUM": "l_i = l_i + tl.sum(p, 1)"}),
    ("flash_max_started_at_zero", {"MAX0": "m_i = tl.zeros((BLOCK_M,), tl.float32)"}),
    ("flash_tail_read_without_mask", {"LOADK": "k = tl.load(K + kv_offsets)", "LOADV": "v = tl.load(V + kv_offsets)"}),
    (
        "flash_tail_read_without_mask",
        {
            "LOADK": "k = tl.load(K + kv_offsets)",
            "LOADV": "v = tl.load(V + kv_offsets)",
            "TAIL": "visible = (cols[None, :] >= 0) & (rows[:, None] >= 0)",
        },
    ),
    ("flash_tail_scores_not_hidden", {"TAIL": "visible = (cols[None, :] >= 0) & (rows[:, None] >= 0)"}),
    ("flash_diagonal_block_unmasked", {"DIAG": "pass"}),
    ("flash_causal_ignored", {"END": "end = seq_len", "DIAG": "pass"}),
    ("flash_scale_after_softmax", {"SCALE": "s = tl.dot(q, tl.trans(k))", "OUT": "out = acc / l_i[:, None] * scale"}),
    ("flash_no_scale", {"SCALE": "s = tl.dot(q, tl.trans(k))"}),
    ("flash_lse_stored_wrong", {"LSE": "tl.store(lse_ptrs, m_i, mask=rows < seq_len)"}),
    ("flash_lse_stored_wrong", {"LSE": "tl.store(lse_ptrs, tl.log(l_i), mask=rows < seq_len)"}),
    # the maximum of the first key block kept: right unless a later block scores far above it
    ("flash_max_frozen_at_first_block", {"MAXNEW": "m_new = tl.maximum(m_i, tl.max(s, 1)) if start == 0 else m_i"}),
    # K/V rows addressed as if HEAD_DIM apart: right only while the rows are contiguous
    ("flash_rows_assumed_contiguous", {"KV": "kv_offsets = base + cols[:, None] * HEAD_DIM + dims[None, :]"}),
    # the output stored without its mask: past the end of the tensor where the sequence has a tail
    ("flash_store_without_mask", {"STORE": "tl.store(o_ptrs, out.to(O.dtype.element_ty))"}),
    ("flash_store_without_mask", {"LSE": "tl.store(lse_ptrs, m_i + tl.log(l_i))"}),
]


# --- the fixture, in the contract test's one shape (tests/grade/exercises/fixtures.py) -------------------------

FIXTURES = {"flash_triton": {"reference": REFERENCE, "alternatives": ALTERNATIVES, "stubs": {"stub": STUB}, "mutants": MUTANTS}}
