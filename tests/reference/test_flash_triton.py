"""The Triton FlashAttention forward (course_utils/reference/flash_triton.py) against SDPA and torch.logsumexp.

On the CPU the kernel runs in Triton's interpreter (small shapes: each program instance is NumPy code); with CUDA a
second set runs the compiled kernel in float16 and bfloat16. Without triton (macOS, Windows) everything skips.
"""

import math

import pytest
import torch
import torch.nn.functional as F

flash_triton = pytest.importorskip("course_utils.reference.flash_triton")
pytestmark = pytest.mark.skipif(
    not flash_triton.TRITON_AVAILABLE, reason="triton is not installed (it has wheels for Linux only)"
)
flash = flash_triton.flash_attention_triton


def qkv(shape, dtype=torch.float32, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g).to(device=device, dtype=dtype) for _ in range(3)]


def expected(q, k, v, causal, scale=None):
    """SDPA's output and the log-sum-exp of the scaled, masked scores, in float64."""
    q, k, v = (t.double() for t in (q, k, v))
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    s = q @ k.transpose(-2, -1) * scale
    if causal:
        seq_len = q.shape[-2]
        s = s.masked_fill(torch.ones(seq_len, seq_len, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return out, torch.logsumexp(s, -1)


interpreted = pytest.mark.skipif(not flash_triton.INTERPRETED, reason="a CUDA GPU is present: the compiled tests run")


@interpreted
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(
    "shape, blocks",
    [
        ((2, 3, 64, 16), (32, 32)),  # whole blocks
        ((1, 2, 37, 32), (32, 16)),  # a tail in both the query and the key blocks; two key blocks per query block
        ((1, 1, 5, 64), (16, 16)),  # shorter than one block
        ((1, 2, 19, 80), (16, 16)),  # a head dim that is no power of two (padded to 128 inside)
        ((1, 1, 17, 128), (16, 16)),
    ],
)
def test_matches_sdpa_and_logsumexp_in_float32(shape, blocks, causal):
    q, k, v = qkv(shape)
    out, lse = flash(q, k, v, causal=causal, block_m=blocks[0], block_n=blocks[1])
    want_out, want_lse = expected(q, k, v, causal)
    assert out.dtype == torch.float32 and lse.dtype == torch.float32 and lse.shape == shape[:3]
    torch.testing.assert_close(out.double(), want_out, atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(lse.double(), want_lse, atol=2e-6, rtol=1e-6)


@interpreted
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_float16_in_the_interpreter(causal):
    q, k, v = qkv((1, 2, 40, 32), torch.float16)
    out, lse = flash(q, k, v, causal=causal, block_m=16, block_n=16)
    want_out, want_lse = expected(q, k, v, causal)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.double(), want_out, atol=2e-3, rtol=2e-3)  # p is rounded to float16 for P V
    torch.testing.assert_close(lse.double(), want_lse, atol=1e-5, rtol=1e-5)  # scores summed in float32


@interpreted
def test_strided_inputs_and_a_scale():
    # views of a larger buffer (a (B, T, H, d) layout transposed): the kernel follows the strides, reads no pad
    g = torch.Generator().manual_seed(1)
    buffers = [torch.randn(1, 30, 2, 16, generator=g) for _ in range(3)]
    q, k, v = (b[:, :23].transpose(1, 2) for b in buffers)  # (1, 2, 23, 16), not contiguous
    for b in buffers:
        b[:, 23:] = float("nan")  # what an unmasked read would bring in
    out, lse = flash(q, k, v, causal=True, scale=0.3, block_m=16, block_n=16)
    want_out, want_lse = expected(q, k, v, True, scale=0.3)
    torch.testing.assert_close(out.double(), want_out, atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(lse.double(), want_lse, atol=2e-6, rtol=1e-6)


@interpreted
def test_backward_from_lse_matches_autograd():
    q, k, v = qkv((1, 2, 21, 16), seed=3)
    grad_out = torch.randn(1, 2, 21, 16, generator=torch.Generator().manual_seed(4))
    out, lse = flash(q, k, v, causal=True, block_m=16, block_n=16)
    grads = flash_triton.flash_backward_reference(q, k, v, out, lse, grad_out, causal=True)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    F.scaled_dot_product_attention(*leaves, is_causal=True).backward(grad_out)
    for got, leaf in zip(grads, leaves, strict=True):
        torch.testing.assert_close(got, leaf.grad, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda q, k, v: (q[0], k[0], v[0]), "shape"),
        (lambda q, k, v: (q, k[:, :, :3], v), "one shape"),
        (lambda q, k, v: (q, k.double(), v), "one dtype"),
        (lambda q, k, v: (q.double(), k.double(), v.double()), "not supported"),
        (lambda q, k, v: (torch.randn(1, 1, 4, 256),) * 3, "head_dim"),
        (lambda q, k, v: ("q", k, v), "torch.Tensor"),
    ],
)
def test_bad_input_gets_a_clear_error(change, message):
    q, k, v = qkv((1, 1, 4, 16))
    with pytest.raises(ValueError, match=message):
        flash(*change(q, k, v))


@interpreted
def test_bfloat16_is_refused_by_the_interpreter():
    q, k, v = qkv((1, 1, 4, 16), torch.bfloat16)
    with pytest.raises(ValueError, match="interpreter computes bfloat16 wrongly"):
        flash(q, k, v)


@pytest.mark.parametrize("blocks", [(32, 8), (24, 16), (16, 32)])
def test_bad_block_sizes_get_a_clear_error(blocks):
    q, k, v = qkv((1, 1, 4, 16))
    with pytest.raises(ValueError, match="block_"):
        flash(q, k, v, block_m=blocks[0], block_n=blocks[1])


# --- compiled, on a CUDA GPU --------------------------------------------------------------------------------

cuda = pytest.mark.skipif(
    not torch.cuda.is_available() or flash_triton.INTERPRETED,
    reason="needs a CUDA GPU (the compiled kernel); the interpreter's tests run instead",
)


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", [(2, 4, 1000, 64), (1, 2, 333, 128), (1, 2, 129, 16), (1, 1, 77, 96)])
def test_compiled_matches_sdpa(shape, causal, dtype):
    q, k, v = qkv(shape, dtype, "cuda")
    out, lse = flash(q, k, v, causal=causal)
    want_out, want_lse = expected(q, k, v, causal)
    # P is rounded to the input dtype before P V (as FlashAttention does); float32 goes through TF32 in tl.dot
    # (10 mantissa bits, like float16), so its tolerance is float16's, not float32's
    tol = {torch.float16: 2e-3, torch.bfloat16: 2e-2, torch.float32: 2e-3}[dtype]
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), want_out, atol=tol, rtol=tol)
    torch.testing.assert_close(lse.double(), want_lse, atol=tol, rtol=tol)
    # and about as close to the float64 truth as SDPA's own kernel
    sdpa_err = (F.scaled_dot_product_attention(q, k, v, is_causal=causal).double() - want_out).abs().max()
    assert (out.double() - want_out).abs().max() <= 4 * sdpa_err + 1e-3
