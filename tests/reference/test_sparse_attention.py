"""DeepSeek Sparse Attention (DSA): the lightning indexer against a loop over heads, the top-k selection against a
sort in Python (compared as sets), sparse attention against SDPA (causal when top_k >= T, with the selection as its
mask otherwise), the MLA layer against the course's MLA, and the warm-up loss against F.kl_div."""

import math
import re

import pytest
import torch
import torch.nn.functional as F

from course_utils import (
    MultiHeadLatentAttention,
    SparseLatentAttention,
    dsa_attention,
    indexer_scores,
    indexer_warmup_loss,
    recall,
    selection_mask,
    sparse_attention,
    top_k_indices,
)

D = torch.float64


def index_inputs(b=2, tq=7, tk=7, h=3, d=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(b, tq, h, d, generator=g, dtype=D),
        torch.randn(b, tk, d, generator=g, dtype=D),
        torch.randn(b, tq, h, generator=g, dtype=D),  # signed weights
    )


def scores_by_loop(q_idx, k_idx, weights):
    b, tq, h, _ = q_idx.shape
    out = torch.zeros(b, tq, k_idx.shape[1], dtype=q_idx.dtype)
    for i in range(b):
        for t in range(tq):
            for s in range(k_idx.shape[1]):
                out[i, t, s] = sum(weights[i, t, j] * max(0.0, float(q_idx[i, t, j] @ k_idx[i, s])) for j in range(h))
    return out


def selection_by_sort(scores, top_k):
    """Per query, the set of its top_k visible keys, by a plain sort in Python."""
    b, tq, tk = scores.shape
    sets = []
    for i in range(b):
        for t in range(tq):
            visible = range(tk - tq + t + 1)
            ranked = sorted(visible, key=lambda s: -float(scores[i, t, s]))
            sets.append(set(ranked[:top_k]))
    return sets


def as_sets(indices):
    return [{int(j) for j in row if j >= 0} for row in indices.reshape(-1, indices.shape[-1])]


def test_indexer_scores_match_a_loop_over_heads():
    q_idx, k_idx, w = index_inputs(tq=4, tk=6)
    torch.testing.assert_close(indexer_scores(q_idx, k_idx, w), scores_by_loop(q_idx, k_idx, w), atol=1e-12, rtol=0)


def test_the_weights_are_signed_and_not_normalised():
    q_idx, k_idx, w = index_inputs()
    doubled = indexer_scores(q_idx, k_idx, 2 * w)  # linear in the weights: a softmax over heads would undo this
    torch.testing.assert_close(doubled, 2 * indexer_scores(q_idx, k_idx, w))
    flipped = indexer_scores(q_idx, k_idx, -w)
    torch.testing.assert_close(flipped, -indexer_scores(q_idx, k_idx, w))


@pytest.mark.parametrize("tq,tk,top_k", [(9, 9, 4), (1, 13, 5), (3, 11, 20), (6, 6, 6), (5, 8, 1)])
def test_top_k_selection_is_the_sorted_top_k_of_the_visible_keys(tq, tk, top_k):
    scores = torch.randn(2, tq, tk, dtype=D)  # continuous: no ties
    indices = top_k_indices(scores, top_k)
    assert indices.shape == (2, tq, top_k) and indices.dtype == torch.long
    assert as_sets(indices) == selection_by_sort(scores, top_k)
    visible_per_row = [tk - tq + t + 1 for _ in range(2) for t in range(tq)]
    for row, visible in zip(indices.reshape(-1, top_k), visible_per_row, strict=True):
        assert int((row == -1).sum()) == max(0, top_k - visible)  # the first rows are padded with -1
        assert bool((row[row >= 0] < visible).all())  # causal


def test_selection_mask_hides_all_but_the_selection():
    indices = torch.tensor([[[0, -1, -1], [1, 0, -1], [2, 0, 1]]])
    hidden = selection_mask(indices, 3)
    assert torch.equal(hidden, torch.tensor([[[False, True, True], [False, False, True], [False, False, False]]]))


@pytest.mark.parametrize("h,h_kv,tq,tk", [(4, 4, 9, 9), (6, 2, 9, 9), (4, 1, 3, 10), (6, 3, 1, 12)])
def test_sparse_attention_with_top_k_at_least_t_is_causal_attention(h, h_kv, tq, tk):
    q = torch.randn(2, h, tq, 8, dtype=D)
    k, v = torch.randn(2, h_kv, tk, 8, dtype=D), torch.randn(2, h_kv, tk, 6, dtype=D)
    q_idx, k_idx, w = index_inputs(tq=tq, tk=tk)
    out, indices = dsa_attention(q, k, v, q_idx, k_idx, w, top_k=tk)
    allow = torch.ones(tq, tk, dtype=torch.bool).tril(tk - tq)  # bottom-right aligned, built here
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=allow, enable_gqa=True)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-12)
    assert as_sets(indices) == [set(range(tk - tq + t + 1)) for _ in range(2) for t in range(tq)]


@pytest.mark.parametrize("h,h_kv,tq,tk,top_k", [(4, 2, 10, 10, 3), (3, 1, 1, 15, 4), (2, 2, 5, 9, 2)])
def test_sparse_attention_equals_sdpa_masked_to_the_selection(h, h_kv, tq, tk, top_k):
    q = torch.randn(2, h, tq, 8, dtype=D)
    k, v = torch.randn(2, h_kv, tk, 8, dtype=D), torch.randn(2, h_kv, tk, 8, dtype=D)
    q_idx, k_idx, w = index_inputs(tq=tq, tk=tk, seed=3)
    out, indices = dsa_attention(q, k, v, q_idx, k_idx, w, top_k=top_k)
    allow = torch.zeros(2, 1, tq, tk, dtype=torch.bool)
    for b in range(2):
        for t in range(tq):
            for s in indices[b, t].tolist():
                if s >= 0:  # -1: an unused slot
                    allow[b, 0, t, s] = True  # the same selection for every head
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=allow, enable_gqa=True)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(out, sparse_attention(q, k, v, indices, scale=1 / math.sqrt(8)))


def test_the_selection_ignores_the_score_of_a_future_key():
    q_idx, k_idx, w = index_inputs(tq=6, tk=6)
    before = top_k_indices(indexer_scores(q_idx, k_idx, w), 3)
    k_idx[:, -1] *= 100  # the last key becomes the best for every query that sees it: only the last one does
    after = top_k_indices(indexer_scores(q_idx, k_idx, w), 3)
    assert as_sets(before[:, :-1]) == as_sets(after[:, :-1])


# ---------------------------------------------------------------- the MLA layer

ARGS = dict(d_in=12, d_out=16, context_length=16, dropout=0.0, num_heads=4, kv_latent_dim=8, rope_dim=4)


def dsa_layer(top_k, seed=0, **kw):
    torch.manual_seed(seed)
    m = SparseLatentAttention(**ARGS, index_heads=3, index_dim=6, index_rope_dim=2, top_k=top_k, **kw)
    return m.double().eval()


@pytest.mark.parametrize("q_latent_dim", [None, 7])
def test_dsa_layer_with_top_k_at_least_t_is_mla(q_latent_dim):
    m = dsa_layer(16, q_latent_dim=q_latent_dim)
    mla = MultiHeadLatentAttention(**ARGS, q_latent_dim=q_latent_dim).double().eval()
    mla.load_state_dict({k: v for k, v in m.state_dict().items() if not k.startswith("indexer.")})
    x = torch.randn(2, 11, 12, dtype=D)
    with torch.no_grad():
        torch.testing.assert_close(m(x), mla(x), atol=1e-12, rtol=1e-12)
        torch.testing.assert_close(m(x, absorb=True), mla(x), atol=1e-12, rtol=1e-12)


def test_dsa_layer_gathered_decoding_equals_the_masked_prefill():
    m = dsa_layer(3, seed=1)
    x = torch.randn(2, 12, 12, dtype=D)
    with torch.no_grad():
        full, indices = m(x, return_indices=True)  # explicit: dense scores, unselected keys hidden
        torch.testing.assert_close(m(x, absorb=True), full, atol=1e-12, rtol=1e-12)  # gathered, all at once
        cache = m.make_cache(2)
        steps = [m(x[:, t : t + 1], cache=cache, absorb=True, return_indices=True) for t in range(12)]
    assert as_sets(torch.cat([i for _, i in steps], dim=1)) == as_sets(indices)  # this seed has no ties
    torch.testing.assert_close(torch.cat([o for o, _ in steps], dim=1), full, atol=1e-12, rtol=1e-12)
    assert cache.index_keys.shape == (2, 12, 6) and cache.seq_len == 12
    assert cache.nbytes == 2 * 12 * (8 + 4 + 6) * 8  # latents, rotated keys and index keys, float64


def test_the_selection_is_shared_by_the_heads():
    m = dsa_layer(2, seed=2)
    x = torch.randn(1, 9, 12, dtype=D)
    with torch.no_grad():
        _, indices = m(x, return_indices=True)
    assert indices.shape == (1, 9, 2)  # one selection per query, not one per head


# ---------------------------------------------------------------- the warm-up loss and recall


def test_warmup_loss_is_the_kl_to_the_summed_normalised_attention():
    scores = torch.randn(2, 5, 5, dtype=D)
    weights = torch.softmax(torch.randn(2, 3, 5, 5, dtype=D).masked_fill(torch.ones(5, 5).triu(1).bool(), -1e9), -1)
    target = weights.sum(1) / weights.sum((1, 3))[..., None]
    log_q = torch.log_softmax(scores.masked_fill(torch.ones(5, 5).triu(1).bool(), float("-inf")), -1)
    expected = sum(
        F.kl_div(log_q[b, t, : t + 1], target[b, t, : t + 1], reduction="sum") for b in range(2) for t in range(5)
    )
    torch.testing.assert_close(indexer_warmup_loss(scores, weights), expected / 2)


def test_recall_counts_shared_indices():
    ref = torch.tensor([[[0, 1, -1], [2, 0, 1]]])
    assert recall(torch.tensor([[[1, 0, -1], [2, 5, 6]]]), ref) == 3 / 5


# ---------------------------------------------------------------- bad input


def test_bad_input_gets_a_clear_error():
    q_idx, k_idx, w = index_inputs()
    with pytest.raises(ValueError, match=re.escape("q_idx must have shape (batch, num_queries, index_heads")):
        indexer_scores(q_idx[0], k_idx, w)
    with pytest.raises(ValueError, match="weights must have shape"):
        indexer_scores(q_idx, k_idx, w[..., :2])
    with pytest.raises(ValueError, match="top_k must be a positive int"):
        top_k_indices(torch.randn(1, 3, 3), 0)
    with pytest.raises(ValueError, match="3 queries cannot follow only 2 keys"):
        top_k_indices(torch.randn(1, 3, 2), 1)
    q, k = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    with pytest.raises(ValueError, match=re.escape("indices must lie in [0, 2]")):
        sparse_attention(q, k, k, torch.tensor([[[0], [1], [3]]]))
    with pytest.raises(ValueError, match="a query has no selected key"):
        sparse_attention(q, k, k, torch.tensor([[[0], [-1], [1]]]))
    with pytest.raises(ValueError, match="needs its own cache"):
        dsa_layer(2)(torch.randn(1, 2, 12, dtype=D), cache=MultiHeadLatentAttention(**ARGS).make_cache(1))
