"""Causality (因果性): changing future tokens never changes earlier outputs."""

import pytest
import torch

from course_utils import CausalAttention, GroupedQueryAttention, MultiHeadAttention, MultiHeadAttentionWrapper

T, CTX, D_IN = 6, 8, 5

MODULES = {
    "causal": lambda: CausalAttention(D_IN, 4, CTX, 0.0, qkv_bias=True),
    "wrapper": lambda: MultiHeadAttentionWrapper(D_IN, 3, CTX, 0.0, num_heads=2),
    "mha": lambda: MultiHeadAttention(D_IN, 8, CTX, 0.0, num_heads=4, qkv_bias=True),
    "mha-sdpa": lambda: MultiHeadAttention(D_IN, 8, CTX, 0.0, num_heads=4, use_sdpa=True),
    "gqa": lambda: GroupedQueryAttention(D_IN, 12, CTX, 0.0, num_heads=6, num_kv_groups=2),
    "mqa-sdpa": lambda: GroupedQueryAttention(D_IN, 8, CTX, 0.0, num_heads=4, num_kv_groups=1, use_sdpa=True),
}


def perturb_after(x, t):
    x = x.clone()
    x[:, t + 1 :] += 3.0 * torch.randn_like(x[:, t + 1 :])
    return x


@pytest.mark.parametrize("name", MODULES)
@pytest.mark.parametrize("t", [0, 2, T - 2])
def test_future_tokens_do_not_change_the_past(name, t, randomize):
    m = randomize(MODULES[name]()).double()
    x = torch.randn(3, T, D_IN, dtype=torch.float64)
    out, out_perturbed = m(x), m(perturb_after(x, t))
    torch.testing.assert_close(out_perturbed[:, : t + 1], out[:, : t + 1], atol=1e-12, rtol=0)
    # the perturbation is real: every later position does change
    assert (out_perturbed[:, t + 1 :] - out[:, t + 1 :]).abs().amax(dim=-1).min() > 1e-6


def test_non_causal_module_sees_the_future(randomize):
    """The check above can fail: without the causal mask, early outputs depend on later tokens."""
    m = randomize(GroupedQueryAttention(D_IN, 8, CTX, 0.0, 4, 2, causal=False)).double()
    x = torch.randn(3, T, D_IN, dtype=torch.float64)
    assert (m(perturb_after(x, 2))[:, :3] - m(x)[:, :3]).abs().max() > 1e-3
