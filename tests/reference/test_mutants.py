"""The equivalence tests can fail: each classic bug, injected into course_utils, makes them fail.

Each test patches one deliberate mistake into ``course_utils.multihead`` (undone after the test) and runs
the real test functions from the other files, which must then raise AssertionError.
"""

import math

import pytest
import torch

import course_utils.reference.multihead as multihead
from course_utils import attend
from tests.reference import test_causal as causal_tests
from tests.reference import test_errors as error_tests
from tests.reference import test_kv_cache as cache_tests
from tests.reference import test_sdpa as sdpa_tests

GQA_ARGS = (2, 7, 9, 12, 12, 6, 3, False)  # batch, tokens, context_length, d_in, d_out, heads, kv groups, bias
MHA_ARGS = (2, 5, 8, 3, 8, 4, False)


def attend_scaled_by_sqrt_d_out(q, k, v, mask=None, dropout=None):
    return attend(q / math.sqrt(q.shape[1]), k, v, mask, dropout)  # total sqrt(head_dim * num_heads)


def attend_merging_without_transpose(q, k, v, mask=None, dropout=None):
    context, weights = attend(q, k, v, mask, dropout)
    return context.transpose(1, 2), weights  # forward's own transpose then cancels out


def attend_top_left_causal(q, k, v, mask=None, dropout=None):
    sq, sk = q.shape[-2], k.shape[-2]
    return attend(q, k, v, torch.ones(sq, sk, dtype=torch.bool).triu(1), dropout)  # is_causal=True's alignment


def attend_minus_1e9(q, k, v, mask=None, dropout=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, -1e9)  # the seed notes' mask: fully hidden rows average all values
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def split_heads_without_transpose(self, x, num_heads):
    b, t, _ = x.shape
    return x.view(b, num_heads, t, self.head_dim)


def fails(test, *args, **kwargs):
    with pytest.raises(AssertionError):
        test(*args, **kwargs)


def test_wrong_scale_is_caught(monkeypatch, close, randomize, sdpa_ref):
    monkeypatch.setattr(multihead, "attend", attend_scaled_by_sqrt_d_out)
    fails(sdpa_tests.test_gqa_equals_sdpa_enable_gqa, *GQA_ARGS, torch.float64, close, randomize, sdpa_ref)
    fails(sdpa_tests.test_mha_equals_sdpa_and_nn_multihead, *MHA_ARGS, torch.float32, close, randomize, sdpa_ref)


def test_merging_heads_without_transpose_is_caught(monkeypatch, close, randomize, sdpa_ref):
    monkeypatch.setattr(multihead, "attend", attend_merging_without_transpose)
    fails(sdpa_tests.test_gqa_equals_sdpa_enable_gqa, *GQA_ARGS, torch.float64, close, randomize, sdpa_ref)
    fails(sdpa_tests.test_mha_equals_sdpa_and_nn_multihead, *MHA_ARGS, torch.bfloat16, close, randomize, sdpa_ref)


def test_splitting_heads_without_transpose_is_caught(monkeypatch, close, randomize, sdpa_ref):
    monkeypatch.setattr(multihead.GroupedQueryAttention, "_split_heads", split_heads_without_transpose)
    fails(sdpa_tests.test_gqa_equals_sdpa_enable_gqa, *GQA_ARGS, torch.float64, close, randomize, sdpa_ref)
    fails(causal_tests.test_future_tokens_do_not_change_the_past, "mha", 2, randomize)


def test_tiled_kv_groups_are_caught(monkeypatch, close, randomize, sdpa_ref):
    monkeypatch.setattr(multihead, "repeat_kv", lambda x, n_rep: x.repeat(1, n_rep, 1, 1))
    fails(sdpa_tests.test_gqa_equals_sdpa_enable_gqa, *GQA_ARGS, torch.float64, close, randomize, sdpa_ref)
    fails(sdpa_tests.test_query_head_reads_its_kv_group, 6, 2, False)


def test_top_left_causal_mask_in_cache_is_caught(monkeypatch, randomize, close):
    monkeypatch.setattr(multihead, "attend", attend_top_left_causal)
    for chunks in ([1] * cache_tests.T, [3, 1, 2, 2]):
        fails(cache_tests.test_cached_decoding_equals_full_forward, 6, 2, chunks, False, False, randomize, close)


def test_swapped_mask_convention_is_caught(monkeypatch, close, randomize, sdpa_ref):
    real = multihead.expand_mask
    monkeypatch.setattr(multihead, "expand_mask", lambda *args: ~real(*args))  # SDPA's may-attend read as hidden
    fails(sdpa_tests.test_padding_masks_2d_and_4d_equal_sdpa, *GQA_ARGS, False, close, randomize, sdpa_ref)


def test_minus_1e9_mask_is_caught(monkeypatch):
    monkeypatch.setattr(multihead, "attend", attend_minus_1e9)
    fails(error_tests.test_left_padding_with_causal_mask_has_no_nan, False)
