"""RoPE attention, the online softmax and MLA on a CUDA device (skipped without CUDA): the same equivalences as on
the CPU, and half precision as close to a float64 ground truth as PyTorch's own kernels."""

import pytest
import torch
import torch.nn.functional as F

from course_utils import GroupedQueryAttention, MultiHeadLatentAttention, online_softmax_attention

DEVICE = "cuda"
pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() False)"),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_online_softmax_on_cuda(dtype, causal):
    q, k, v = (torch.randn(2, 4, 300, 64, device=DEVICE, dtype=torch.float64) for _ in range(3))
    truth = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    out, lse = online_softmax_attention(q.to(dtype), k.to(dtype), v.to(dtype), block_size=128, causal=causal)
    assert out.device.type == "cuda" and out.dtype == dtype and not torch.isnan(out).any()
    sdpa = F.scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype), is_causal=causal)
    ours_error = (out.double() - truth).abs().max().item()
    sdpa_error = (sdpa.double() - truth).abs().max().item()
    assert ours_error <= 2 * sdpa_error + 1e-5


def test_rope_cache_on_cuda(randomize):
    m = randomize(GroupedQueryAttention(16, 64, 32, 0.0, 8, 2, rope=True)).to(DEVICE).eval()
    x = torch.randn(2, 20, 16, device=DEVICE)
    cache = m.make_cache(2, preallocate=True)
    with torch.no_grad():
        full = m(x)
        stepped = torch.cat([m(x[:, :12], cache=cache)] + [m(x[:, t : t + 1], cache=cache) for t in range(12, 20)], 1)
    torch.testing.assert_close(stepped, full, atol=1e-4, rtol=1e-4)


def test_mla_absorbed_and_cached_on_cuda(randomize):
    m = randomize(MultiHeadLatentAttention(16, 64, 32, 0.0, 8, 24, 8)).to(DEVICE).eval()
    x = torch.randn(2, 20, 16, device=DEVICE)
    cache = m.make_cache(2, preallocate=True)
    with torch.no_grad():
        full = m(x)
        torch.testing.assert_close(m(x, absorb=True), full, atol=1e-4, rtol=1e-4)
        stepped = torch.cat(
            [m(x[:, :12], cache=cache, absorb=True)]
            + [m(x[:, t : t + 1], cache=cache, absorb=True) for t in range(12, 20)],
            1,
        )
    torch.testing.assert_close(stepped, full, atol=1e-4, rtol=1e-4)
    assert cache.c_kv.device.type == "cuda"
