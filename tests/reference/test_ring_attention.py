"""Ring attention and context parallelism (notebook 15) against F.scaled_dot_product_attention in float64: the ring
simulated over 1-5 ranks, causal or not, contiguous or zigzag, lengths no world size divides, its gradients; the
all-gather and Ulysses variants; the zigzag layout's balance; and one real ring of gloo processes on loopback whose
bytes sent match the formula."""

import math
import multiprocessing

import pytest
import torch
import torch.nn.functional as F

from course_utils import (
    allgather_attention_simulated,
    chunk_positions,
    comm_bytes_per_rank,
    example_qkv,
    gather_sequence,
    launch_local,
    ring_attention_simulated,
    split_sequence,
    ulysses_attention_simulated,
    work_per_step,
)

LENGTHS = [13, 23]  # primes: no world size from 2 to 5 divides them, nor twice it (zigzag's pieces)


def qkv(seq_len, d=6, dv=5, batch=2, heads=3, requires_grad=False):
    g = torch.Generator().manual_seed(seq_len)
    shapes = [(batch, heads, seq_len, d), (batch, heads, seq_len, d), (batch, heads, seq_len, dv)]
    return [torch.randn(s, generator=g, dtype=torch.float64).requires_grad_(requires_grad) for s in shapes]


def reference_lse(q, k, causal):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
    return torch.logsumexp(scores, dim=-1)


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("seq_len", LENGTHS)
def test_simulated_ring_equals_sdpa(seq_len, world_size, causal, layout):
    q, k, v = qkv(seq_len)
    out, lse = ring_attention_simulated(q, k, v, world_size, causal=causal, layout=layout)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    torch.testing.assert_close(lse, reference_lse(q, k, causal))


@pytest.mark.parametrize(
    "world_size,causal,layout",
    [(3, True, "zigzag"), (4, True, "contiguous"), (5, False, "zigzag"), (2, False, "contiguous")],
)
def test_gradients_through_the_simulated_ring(world_size, causal, layout):
    q, k, v = qkv(23, requires_grad=True)
    out, lse = ring_attention_simulated(q, k, v, world_size, causal=causal, layout=layout)
    grad_out, grad_lse = torch.randn_like(out), torch.randn_like(lse)
    got = torch.autograd.grad((out * grad_out).sum() + (lse * grad_lse).sum(), (q, k, v))
    ref_out, ref_lse = F.scaled_dot_product_attention(q, k, v, is_causal=causal), reference_lse(q, k, causal)
    want = torch.autograd.grad((ref_out * grad_out).sum() + (ref_lse * grad_lse).sum(), (q, k, v))
    for g, w in zip(got, want, strict=True):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("world_size", [2, 3, 5])
def test_allgather_equals_sdpa(world_size, causal, layout):
    q, k, v = qkv(23)
    out, _ = allgather_attention_simulated(q, k, v, world_size, causal=causal, layout=layout)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=causal))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_ulysses_equals_sdpa(world_size, causal):
    q, k, v = qkv(13, heads=4)
    out = ulysses_attention_simulated(q, k, v, world_size, causal=causal)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=causal))


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5])
def test_layouts_partition_the_sequence(world_size, layout):
    positions = chunk_positions(23, world_size, layout)
    assert sorted(torch.cat(positions).tolist()) == list(range(23))
    assert max(map(len, positions)) - min(map(len, positions)) <= (2 if layout == "zigzag" else 1)
    x = torch.randn(2, 23, 4)
    torch.testing.assert_close(gather_sequence(split_sequence(x, world_size, layout), layout), x)


def test_zigzag_balances_the_causal_ring():
    contiguous, zigzag = (work_per_step(64, 4, True, layout) for layout in ("contiguous", "zigzag"))
    assert contiguous.sum() == zigzag.sum() == 64 * 65 // 2  # the same work, placed differently
    assert (zigzag.amin(dim=1) == zigzag.amax(dim=1)).all()  # every rank equally busy at every step
    assert contiguous.amax(dim=1).sum() > zigzag.amax(dim=1).sum()  # the ring waits for its busiest rank


def test_byte_formulas():
    kw = dict(seq_len=1024, num_heads=32, num_kv_heads=8, head_dim=128, bytes_per_element=2)
    ring, gather, ulysses = (comm_bytes_per_rank(m, world_size=4, **kw) for m in ("ring", "allgather", "ulysses"))
    assert ring == gather == 3 / 4 * 1024 * 2 * 8 * 128 * 2
    assert ulysses == 3 / 4 * 1024 / 4 * (2 * 32 + 2 * 8) * 128 * 2
    with pytest.raises(ValueError, match="world_size=3 must divide"):
        comm_bytes_per_rank("ulysses", world_size=3, **kw)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: chunk_positions(5, 3, "zigzag"), "cannot be cut into 6"),
        (lambda: chunk_positions(8, 2, "striped"), "layout must be one of"),
        (lambda: ring_attention_simulated(*qkv(8)[:2], torch.randn(1, 8, 5), 2), "same leading axes"),
        (lambda: ulysses_attention_simulated(*qkv(8, heads=3), 2), "H divisible by world_size=2"),
    ],
)
def test_bad_input_is_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_gloo_processes_match_sdpa_and_send_what_the_formula_says():
    world_size, seq_len = 3, 48  # 48 splits evenly into 2 * 3 zigzag pieces: the formula is exact
    out, lse, sent = launch_local(world_size, seq_len, causal=True, layout="zigzag", timeout_s=20)
    q, k, v = example_qkv(seq_len)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-6, rtol=1e-5)
    heads, head_dim = q.shape[1], q.shape[-1]
    want = comm_bytes_per_rank("ring", seq_len, world_size, heads, heads, head_dim, bytes_per_element=4)
    assert sent == [want] * world_size


def _silent_right_neighbour(q, k, v, seq_len, causal, layout, timeout_s):
    """Rank 1 never posts its send or its receive: rank 0's ring is stuck at its first step."""
    import time

    import torch.distributed as dist

    from course_utils.reference import ring_attention

    if dist.get_rank() == 1:
        time.sleep(3 * timeout_s)
        return q, q[..., 0], 0
    return ring_attention.ring_attention_rank(q, k, v, seq_len, causal, layout, timeout_s=timeout_s)


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method")
def test_a_stuck_ring_is_named_by_a_timeout_not_a_hang(monkeypatch):
    from course_utils.reference import ring_attention

    monkeypatch.setitem(ring_attention.RANK_FUNCTIONS, "silent", _silent_right_neighbour)  # forked children see it
    with pytest.raises(Exception, match=r"rank 0: ring step 0 did not complete in 1 s"):
        ring_attention.run_local(2, 16, "silent", timeout_s=1, start_method="fork")


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_gqa_ring_sends_kv_heads_and_expands_them_after_receipt(world_size, layout):
    q, k, v = qkv(23, heads=4)
    k, v = k[:, :2], v[:, :2]  # 2 K/V heads for 4 query heads
    out, lse = ring_attention_simulated(q, k, v, world_size, causal=True, layout=layout)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_a_zigzag_step_computes_half_a_block_and_the_same_result(world_size):
    """After the first step, a zigzag chunk's visible pairs are one half of the block: ring-flash-attention's slices
    (all queries against the first half of the keys, or the second half of the queries against all keys)."""
    from course_utils.reference.ring_attention import attend_chunk, attend_visible, computed_scores

    seq_len = 8 * world_size
    positions = chunk_positions(seq_len, world_size, "zigzag")
    q, k, v = qkv(seq_len)
    for rank in range(world_size):
        for step in range(1, world_size):
            src = (rank - step) % world_size
            q_pos, k_pos = positions[rank], positions[src]
            args = (q[..., q_pos, :], k[..., k_pos, :], v[..., k_pos, :], q_pos, k_pos, True)
            assert computed_scores(q_pos, k_pos, True) == len(q_pos) * len(k_pos) // 2
            for got, want in zip(attend_visible(*args), attend_chunk(*args), strict=True):
                torch.testing.assert_close(got, want)
    computed = work_per_step(seq_len, world_size, True, "zigzag", computed=True)
    assert (computed[1:] == (seq_len // world_size) ** 2 // 2).all()


def test_the_blocking_ring_is_exact_and_the_ranks_report_their_waiting():
    from course_utils.reference.ring_attention import run_local

    seq_len = 48
    q, k, v = example_qkv(seq_len, heads=4, kv_heads=2)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    for method in ("ring", "ring_blocking"):
        out, _, sent, seconds, waited = run_local(
            3, seq_len, method, causal=True, layout="zigzag", heads=4, kv_heads=2, repeats=1, timeout_s=20
        )
        torch.testing.assert_close(out, want, atol=1e-6, rtol=1e-5)
        assert sent == [comm_bytes_per_rank("ring", seq_len, 3, 4, 2, 8, bytes_per_element=4)] * 3
        assert all(len(s) == len(w) == 1 and w[0] >= 0 for s, w in zip(seconds, waited, strict=True))
