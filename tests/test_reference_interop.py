"""copy_parameters: parameters only, by name, and a clear error when the modules do not match."""
import pytest
import torch

import course_utils as cu


def test_copy_parameters_makes_modules_agree_and_leaves_buffers():
    src = cu.MultiHeadAttention(6, 8, 10, 0.0, num_heads=2, qkv_bias=True)
    dst = cu.MultiHeadAttention(6, 8, 12, 0.0, num_heads=2, qkv_bias=True)  # longer context: its own mask
    x = torch.randn(3, 7, 6)
    assert not torch.allclose(src(x), dst(x))
    assert cu.copy_parameters(src, dst) is dst
    torch.testing.assert_close(dst(x), src(x), rtol=0, atol=0)
    assert dst.mask.shape == (12, 12)  # the buffer was not copied


@pytest.mark.parametrize("dst, message", [
    (cu.MultiHeadAttention(5, 8, 10, 0.0, num_heads=2, qkv_bias=True), "W_query.weight: source shape"),
    (cu.MultiHeadAttention(6, 8, 10, 0.0, num_heads=2, qkv_bias=False), "parameter names differ"),
])
def test_copy_parameters_names_the_mismatch(dst, message):
    src = cu.MultiHeadAttention(6, 8, 10, 0.0, num_heads=2, qkv_bias=True)
    with pytest.raises(ValueError, match=message):
        cu.copy_parameters(src, dst)
