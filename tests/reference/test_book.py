"""The book's printed numbers (LLMs-from-scratch chapter 3), reproduced to 4 decimals.

The course's classes create their parameters in the book's order, so the same ``torch.manual_seed``
gives the same weights and therefore the same printed tensors.
"""

import torch

from course_utils import (
    CausalAttention,
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    SelfAttention_v1,
    SelfAttention_v2,
    attend,
    book_batch,
    book_inputs,
    causal_mask,
    simple_self_attention,
)

ATOL = 5e-5  # the book prints 4 decimals


def check(actual, printed):
    torch.testing.assert_close(actual.detach(), torch.tensor(printed), atol=ATOL, rtol=0)


def test_simple_self_attention_journey():
    context, weights = simple_self_attention(book_inputs())
    check(weights[1], [0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581])
    check(context[1], [0.4419, 0.6515, 0.5683])
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(6))


def test_self_attention_v1_seed_123():
    torch.manual_seed(123)
    sa = SelfAttention_v1(3, 2)
    check(
        sa(book_inputs()),
        [[0.2996, 0.8053], [0.3061, 0.8210], [0.3058, 0.8203], [0.2948, 0.7939], [0.2927, 0.7891], [0.2990, 0.8040]],
    )


def test_self_attention_v2_seed_789():
    torch.manual_seed(789)
    sa = SelfAttention_v2(3, 2)
    x = book_inputs()
    check(
        sa(x),
        [
            [-0.0739, 0.0713],
            [-0.0748, 0.0703],
            [-0.0749, 0.0702],
            [-0.0760, 0.0685],
            [-0.0763, 0.0679],
            [-0.0754, 0.0693],
        ],
    )
    _, weights = attend(sa.W_query(x), sa.W_key(x), sa.W_value(x))
    check(
        weights,
        [
            [0.1921, 0.1646, 0.1652, 0.1550, 0.1721, 0.1510],
            [0.2041, 0.1659, 0.1662, 0.1496, 0.1665, 0.1477],
            [0.2036, 0.1659, 0.1662, 0.1498, 0.1664, 0.1480],
            [0.1869, 0.1667, 0.1668, 0.1571, 0.1661, 0.1564],
            [0.1830, 0.1669, 0.1670, 0.1588, 0.1658, 0.1585],
            [0.1935, 0.1663, 0.1666, 0.1542, 0.1666, 0.1529],
        ],
    )


CAUSAL_HEAD_1 = [
    [-0.4519, 0.2216],
    [-0.5874, 0.0058],
    [-0.6300, -0.0632],
    [-0.5675, -0.0843],
    [-0.5526, -0.0981],
    [-0.5299, -0.1081],
]


def test_causal_attention_seed_123():
    torch.manual_seed(123)
    ca = CausalAttention(3, 2, 6, 0.0)
    batch = book_batch()
    out = ca(batch)
    assert out.shape == (2, 6, 2)
    check(out, [CAUSAL_HEAD_1, CAUSAL_HEAD_1])  # the batch holds the same text twice
    _, weights = attend(ca.W_query(batch), ca.W_key(batch), ca.W_value(batch), causal_mask(6))
    check(
        weights[0],
        [
            [1.0000, 0.0000, 0.0000, 0.0000, 0.0000, 0.0000],
            [0.4833, 0.5167, 0.0000, 0.0000, 0.0000, 0.0000],
            [0.3190, 0.3408, 0.3402, 0.0000, 0.0000, 0.0000],
            [0.2445, 0.2545, 0.2542, 0.2468, 0.0000, 0.0000],
            [0.1994, 0.2060, 0.2058, 0.1935, 0.1953, 0.0000],
            [0.1624, 0.1709, 0.1706, 0.1654, 0.1625, 0.1682],
        ],
    )


def test_multi_head_attention_wrapper_seed_123():
    torch.manual_seed(123)
    wrapper = MultiHeadAttentionWrapper(3, 2, 6, 0.0, num_heads=2)
    out = wrapper(book_batch())
    assert out.shape == (2, 6, 4)
    rows = [
        [-0.4519, 0.2216, 0.4772, 0.1063],
        [-0.5874, 0.0058, 0.5891, 0.3257],
        [-0.6300, -0.0632, 0.6202, 0.3860],
        [-0.5675, -0.0843, 0.5478, 0.3589],
        [-0.5526, -0.0981, 0.5321, 0.3428],
        [-0.5299, -0.1081, 0.5077, 0.3493],
    ]
    check(out, [rows, rows])


def test_multi_head_attention_wrapper_d_out_1_seed_123():
    torch.manual_seed(123)
    out = MultiHeadAttentionWrapper(3, 1, 6, 0.0, num_heads=2)(book_batch())
    rows = [
        [-0.5740, 0.2216],
        [-0.7320, 0.0155],
        [-0.7774, -0.0546],
        [-0.6979, -0.0817],
        [-0.6538, -0.0957],
        [-0.6424, -0.1065],
    ]
    check(out, [rows, rows])


def test_multi_head_attention_seed_123():
    torch.manual_seed(123)
    mha = MultiHeadAttention(3, 2, 6, 0.0, num_heads=2)
    out = mha(book_batch())
    assert out.shape == (2, 6, 2)
    rows = [[0.3190, 0.4858], [0.2943, 0.3897], [0.2856, 0.3593], [0.2693, 0.3873], [0.2639, 0.3928], [0.2575, 0.4028]]
    check(out, [rows, rows])
