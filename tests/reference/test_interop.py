"""copy_parameters: parameters only, by name, and a clear error when the modules do not match; mha_to_gqa keeps
every constructor option."""

import inspect

import pytest
import torch

import course_utils as cu
from course_utils import GroupedQueryAttention, mha_to_gqa
from course_utils.reference.interop import constructor_options


def test_copy_parameters_makes_modules_agree_and_leaves_buffers():
    src = cu.MultiHeadAttention(6, 8, 10, 0.0, num_heads=2, qkv_bias=True)
    dst = cu.MultiHeadAttention(6, 8, 12, 0.0, num_heads=2, qkv_bias=True)  # longer context: its own mask
    x = torch.randn(3, 7, 6)
    assert not torch.allclose(src(x), dst(x))
    assert cu.copy_parameters(src, dst) is dst
    torch.testing.assert_close(dst(x), src(x), rtol=0, atol=0)
    assert dst.mask.shape == (12, 12)  # the buffer was not copied


@pytest.mark.parametrize(
    "dst, message",
    [
        (cu.MultiHeadAttention(5, 8, 10, 0.0, num_heads=2, qkv_bias=True), "W_query.weight: source shape"),
        (cu.MultiHeadAttention(6, 8, 10, 0.0, num_heads=2, qkv_bias=False), "parameter names differ"),
    ],
)
def test_copy_parameters_names_the_mismatch(dst, message):
    src = cu.MultiHeadAttention(6, 8, 10, 0.0, num_heads=2, qkv_bias=True)
    with pytest.raises(ValueError, match=message):
        cu.copy_parameters(src, dst)


# ---------------------------------------------------------------- mha_to_gqa keeps every constructor option

# one non-default value per constructor option of GroupedQueryAttention (with the options it needs to matter)
BASE = dict(d_in=8, d_out=8, context_length=6, dropout=0.0, num_heads=4, num_kv_groups=2)
OPTION_VALUES = {
    "d_in": {"d_in": 6},
    "d_out": {"d_out": 16},
    "context_length": {"context_length": 9},
    "dropout": {"dropout": 0.25},
    "num_heads": {"num_heads": 2},
    "num_kv_groups": {"num_kv_groups": 4},
    "qkv_bias": {"qkv_bias": True},
    "causal": {"causal": False},
    "d_context": {"causal": False, "d_context": 5},
    "use_sdpa": {"use_sdpa": True},
    "rope": {"rope": True},
    "rope_base": {"rope": True, "rope_base": 500.0},
}


def test_every_constructor_option_has_a_case():
    """A new option of GroupedQueryAttention fails here until it has a value above, so the test below checks it."""
    options = [n for n in inspect.signature(GroupedQueryAttention.__init__).parameters if n != "self"]
    assert sorted(options) == sorted(OPTION_VALUES)


@pytest.mark.parametrize("option", sorted(OPTION_VALUES))
def test_mha_to_gqa_with_the_same_groups_is_an_exact_copy(option, randomize):
    kwargs = BASE | OPTION_VALUES[option]
    attn = randomize(GroupedQueryAttention(**kwargs)).double().eval()
    copy = mha_to_gqa(attn, attn.num_kv_groups)
    assert constructor_options(copy) == constructor_options(attn)
    assert constructor_options(attn)[option] == kwargs[option]
    x = torch.randn(2, 5, attn.d_in, dtype=torch.float64)
    context = None if option != "d_context" else torch.randn(2, 4, 5, dtype=torch.float64)
    torch.testing.assert_close(copy(x, context), attn(x, context), atol=0, rtol=0)


def test_constructor_options_refuses_an_option_it_cannot_read_back():
    attn = GroupedQueryAttention(**BASE)
    del attn.rope_base
    with pytest.raises(ValueError, match=r"does not store the constructor option\(s\) \['rope_base'\]"):
        constructor_options(attn)
