"""Serving (notebook 13): the paged KV cache against a contiguous cache and SDPA with an explicit mask, on shapes
that expose index bugs (blocks handed out in reverse, lengths that do not fill a block, a block shared by two
sequences); split-K against SDPA and the log-sum-exp for chunks that do not divide the keys.

The mutants in tests/grader_cases/serving.py must each make one of these tests fail (test_serving_mutants.py)."""

import math

import pytest
import torch
import torch.nn.functional as F

from course_utils import (
    OutOfBlocksError,
    PagedKVCache,
    PreallocatedKVCache,
    merge_partials,
    online_softmax_attention,
    paged_attention,
    split_k_attention,
)

KV_HEADS, HEAD_DIM = 2, 8


def new_cache(num_blocks=16, block_size=4, reverse=True, dtype=torch.float64):
    cache = PagedKVCache(num_blocks, block_size, KV_HEADS, HEAD_DIM, dtype=dtype)
    if reverse:  # hand blocks out from the end of the pool: logical order != physical order
        cache.free_blocks.reverse()
    return cache


def kv(n, dtype=torch.float64):
    return torch.randn(KV_HEADS, n, HEAD_DIM, dtype=dtype), torch.randn(KV_HEADS, n, HEAD_DIM, dtype=dtype)


def sdpa_decode(query, keys, values):
    """One query row per sequence against (kv_heads, T, hd) keys, with SDPA's own GQA and no mask needed."""
    out = F.scaled_dot_product_attention(query[:, None, :], keys, values, enable_gqa=True)  # (h, 1, hd)
    return out[:, 0, :]


# --- the paged cache stores what a contiguous cache stores ------------------------------------------------


@pytest.mark.parametrize("block_size", [1, 3, 4, 16])
@pytest.mark.parametrize("chunks", [[11], [1] * 9, [5, 1, 6, 2]])
def test_gather_equals_contiguous_cache(block_size, chunks):
    cache = new_cache(num_blocks=20, block_size=block_size)
    contiguous = PreallocatedKVCache(1, KV_HEADS, 20, HEAD_DIM, dtype=torch.float64)
    cache.add_sequence("a")
    for n in chunks:
        k, v = kv(n)
        cache.append("a", k, v)
        full_k, full_v = contiguous.update(k[None], v[None])
        got_k, got_v = cache.gather("a")
        torch.testing.assert_close(got_k, full_k[0], atol=0, rtol=0)
        torch.testing.assert_close(got_v, full_v[0], atol=0, rtol=0)
    assert len(cache.block_tables["a"]) == math.ceil(sum(chunks) / block_size)


def test_slots_follow_the_block_table():
    cache = new_cache(num_blocks=8, block_size=4)  # blocks handed out 7, 6, 5, ...
    cache.add_sequence("a")
    cache.append("a", *kv(10))
    assert cache.block_tables["a"] == [7, 6, 5]
    expected = [7 * 4 + i for i in range(4)] + [6 * 4 + i for i in range(4)] + [5 * 4, 5 * 4 + 1]
    assert cache.slots("a").tolist() == expected
    k, _ = kv(1)
    cache.append("a", k, k)
    torch.testing.assert_close(cache.key_pool[5, 2], k[:, 0], atol=0, rtol=0)  # position 10: block 2, offset 2


def test_interleaved_sequences_scatter_their_blocks():
    cache = new_cache(num_blocks=12, block_size=3)
    truth = {}
    for name in "abc":
        cache.add_sequence(name)
        truth[name] = ([], [])
    for name, n in [("a", 2), ("b", 4), ("a", 3), ("c", 1), ("b", 1), ("a", 1), ("c", 5)]:
        k, v = kv(n)
        cache.append(name, k, v)
        truth[name][0].append(k)
        truth[name][1].append(v)
    for name, (ks, vs) in truth.items():
        got_k, got_v = cache.gather(name)
        torch.testing.assert_close(got_k, torch.cat(ks, dim=1), atol=0, rtol=0)
        torch.testing.assert_close(got_v, torch.cat(vs, dim=1), atol=0, rtol=0)
    # the blocks of 'a' are not adjacent: other sequences took blocks in between
    assert cache.block_tables["a"] != sorted(cache.block_tables["a"]) or any(
        b - a != 1 for a, b in zip(cache.block_tables["a"], cache.block_tables["a"][1:], strict=True)
    )


# --- prefix sharing and copy-on-write ---------------------------------------------------------------------


@pytest.mark.parametrize("prefix_len", [6, 8])  # 6: the shared last block is half full; 8: it is full
def test_fork_shares_blocks_and_copies_on_write(prefix_len):
    cache = new_cache(num_blocks=10, block_size=4)
    cache.add_sequence("parent")
    prefix = kv(prefix_len)
    cache.append("parent", *prefix)
    cache.fork("parent", "child")
    assert cache.block_tables["child"] == cache.block_tables["parent"]
    assert all(cache.ref_counts[b] == 2 for b in cache.block_tables["parent"])
    used = cache.num_used_blocks
    parent_new, child_new = kv(3), kv(3)
    cache.append("child", *child_new)
    cache.append("parent", *parent_new)
    for name, new in (("parent", parent_new), ("child", child_new)):
        got_k, got_v = cache.gather(name)
        torch.testing.assert_close(got_k, torch.cat([prefix[0], new[0]], dim=1), atol=0, rtol=0)
        torch.testing.assert_close(got_v, torch.cat([prefix[1], new[1]], dim=1), atol=0, rtol=0)
    full_blocks = prefix_len // 4
    # the full prefix blocks stay shared; a half-full one was copied by the first writer only
    assert cache.block_tables["child"][:full_blocks] == cache.block_tables["parent"][:full_blocks]
    assert cache.block_tables["child"][full_blocks] != cache.block_tables["parent"][full_blocks]
    copies = 1 if prefix_len % 4 else 0
    new_blocks = 2 * (math.ceil((prefix_len + 3) / 4) - math.ceil(prefix_len / 4))
    assert cache.num_used_blocks == used + copies + new_blocks


def test_free_returns_blocks_only_when_unreferenced():
    cache = new_cache(num_blocks=6, block_size=4)
    cache.add_sequence("a")
    prefix = kv(8)
    cache.append("a", *prefix)
    cache.fork("a", "b")
    cache.free("a")
    assert cache.num_used_blocks == 2  # b still holds both blocks
    cache.add_sequence("c")
    cache.append("c", *kv(16))  # takes every free block; must not take b's
    got_k, _ = cache.gather("b")
    torch.testing.assert_close(got_k, prefix[0], atol=0, rtol=0)
    cache.free("b")
    cache.free("c")
    assert cache.num_used_blocks == 0 and sorted(cache.free_blocks) == list(range(6))
    assert all(r == 0 for r in cache.ref_counts)


def test_pool_exhaustion_is_a_clear_error_and_changes_nothing():
    cache = new_cache(num_blocks=3, block_size=4)
    cache.add_sequence("a")
    cache.append("a", *kv(10))
    before = (list(cache.block_tables["a"]), cache.seq_lens["a"], list(cache.free_blocks))
    with pytest.raises(OutOfBlocksError, match=r"needs 1 more block.*0 of 3 are free"):
        cache.append("a", *kv(3))
    assert (cache.block_tables["a"], cache.seq_lens["a"], list(cache.free_blocks)) == before
    cache.fork("a", "b")
    with pytest.raises(OutOfBlocksError):  # copy-on-write needs a block too
        cache.append("b", *kv(1))


def test_append_tokens_is_one_append_per_sequence():
    """The batched decode write (one scatter through the step's slot mapping) leaves the books and the pool exactly
    as one append per sequence does: across block boundaries, and with a shared block copied on write."""
    batched, one_by_one = new_cache(num_blocks=16, block_size=3), new_cache(num_blocks=16, block_size=3)
    for cache in (batched, one_by_one):
        torch.manual_seed(0)
        for name, n in (("a", 5), ("b", 3)):
            cache.add_sequence(name)
            cache.append(name, *kv(n))
        cache.fork("a", "c")  # a's half-full block is shared: the first write into it copies
    names = ["a", "b", "c"]
    for _ in range(5):
        k, v = (torch.randn(len(names), KV_HEADS, HEAD_DIM, dtype=torch.float64) for _ in range(2))
        batched.append_tokens(names, k, v)
        for row, name in enumerate(names):
            one_by_one.append(name, k[row, :, None], v[row, :, None])
    assert batched.block_tables == one_by_one.block_tables and batched.seq_lens == one_by_one.seq_lens
    assert batched.ref_counts == one_by_one.ref_counts and list(batched.free_blocks) == list(one_by_one.free_blocks)
    for name in names:
        for got, want in zip(batched.gather(name), one_by_one.gather(name), strict=True):
            torch.testing.assert_close(got, want, atol=0, rtol=0)


def test_append_tokens_is_all_or_nothing_and_names_bad_input():
    cache = new_cache(num_blocks=2, block_size=2)
    for name in ("a", "b"):
        cache.add_sequence(name)
        cache.append(name, *kv(2))  # both blocks full: the next token of each needs a new block
    before = ({s: list(t) for s, t in cache.block_tables.items()}, dict(cache.seq_lens), list(cache.free_blocks))
    one_token = torch.zeros(2, KV_HEADS, HEAD_DIM, dtype=torch.float64)
    with pytest.raises(OutOfBlocksError, match=r"need 2 more block.*0 of 2 are free"):
        cache.append_tokens(["a", "b"], one_token, one_token)
    assert (cache.block_tables, cache.seq_lens, list(cache.free_blocks)) == before
    with pytest.raises(ValueError, match="twice"):
        cache.append_tokens(["a", "a"], one_token, one_token)
    with pytest.raises(ValueError, match="one new token per sequence"):
        cache.append_tokens(["a"], one_token, one_token)
    with pytest.raises(KeyError, match="add_sequence"):
        cache.append_tokens(["a", "nobody"], one_token, one_token)


def test_bad_input_is_named():
    cache = new_cache()
    with pytest.raises(KeyError, match="add_sequence"):
        cache.append("nobody", *kv(1))
    cache.add_sequence("a")
    with pytest.raises(ValueError, match="already"):
        cache.add_sequence("a")
    with pytest.raises(ValueError, match="num_kv_heads=2"):
        cache.append("a", torch.zeros(3, 1, HEAD_DIM), torch.zeros(3, 1, HEAD_DIM))
    with pytest.raises(ValueError, match="block_size"):
        PagedKVCache(4, 0, 2, 8)
    with pytest.raises(ValueError, match="multiple"):
        paged_attention(torch.zeros(1, 3, HEAD_DIM, dtype=torch.float64), cache, ["a"])


# --- decoding through the block tables, with continuous batching -----------------------------------------


def test_paged_attention_equals_sdpa_with_an_explicit_mask():
    """A batch of different lengths, padded into one (B, h, max_len, hd) tensor and masked for SDPA, to 1e-10."""
    cache = new_cache(num_blocks=20, block_size=4)
    lengths, keys, values = [9, 1, 16, 6], [], []
    for i, n in enumerate(lengths):
        cache.add_sequence(i)
        k, v = kv(n)
        cache.append(i, k, v)
        keys.append(F.pad(k, (0, 0, 0, 16 - n)))
        values.append(F.pad(v, (0, 0, 0, 16 - n)))
    query = torch.randn(4, 6, HEAD_DIM, dtype=torch.float64)  # 6 query heads on 2 K/V heads
    allow = (torch.arange(16)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]  # (B, 1, 1, 16)
    expected = F.scaled_dot_product_attention(
        query[:, :, None], torch.stack(keys), torch.stack(values), attn_mask=allow, enable_gqa=True
    )[:, :, 0]
    torch.testing.assert_close(paged_attention(query, cache, [0, 1, 2, 3]), expected, atol=1e-10, rtol=1e-10)


def test_continuous_batching_equals_one_contiguous_cache_per_sequence():
    """Sequences join and leave between steps; every step equals each sequence's own contiguous cache."""
    cache = new_cache(num_blocks=14, block_size=3)
    own = {}  # seq_id -> its own PreallocatedKVCache
    arrivals = {0: {"a": 5, "b": 2}, 2: {"c": 7}, 4: {"d": 1}}  # step -> new sequences and prompt lengths
    leaves = {3: ["b"], 5: ["a"]}
    for step in range(8):
        for name in leaves.get(step, []):
            cache.free(name)
            del own[name]
        for name, prompt_len in arrivals.get(step, {}).items():  # prefill
            cache.add_sequence(name)
            own[name] = PreallocatedKVCache(1, KV_HEADS, 20, HEAD_DIM, dtype=torch.float64)
            k, v = kv(prompt_len)
            cache.append(name, k, v)
            own[name].update(k[None], v[None])
        names = list(own)
        query = torch.randn(len(names), 4, HEAD_DIM, dtype=torch.float64)
        for name in names:  # the new token's key and value go in first, as in a decoder layer
            k, v = kv(1)
            cache.append(name, k, v)
            own[name].update(k[None], v[None])
        got = paged_attention(query, cache, names)
        for row, name in enumerate(names):
            full_k, full_v = own[name].keys[0, :, : own[name].seq_len], own[name].values[0, :, : own[name].seq_len]
            torch.testing.assert_close(got[row], sdpa_decode(query[row], full_k, full_v), atol=1e-10, rtol=1e-10)
    assert set(own) == {"c", "d"}


def test_paged_attention_reads_a_shared_prefix():
    cache = new_cache(num_blocks=10, block_size=4)
    cache.add_sequence("p")
    prefix = kv(6)
    cache.append("p", *prefix)
    cache.fork("p", "q")
    tails = {"p": kv(2), "q": kv(5)}
    for name, tail in tails.items():
        cache.append(name, *tail)
    query = torch.randn(2, 2, HEAD_DIM, dtype=torch.float64)
    got = paged_attention(query, cache, ["p", "q"])
    for row, name in enumerate(["p", "q"]):
        k = torch.cat([prefix[0], tails[name][0]], dim=1)
        v = torch.cat([prefix[1], tails[name][1]], dim=1)
        torch.testing.assert_close(got[row], sdpa_decode(query[row], k, v), atol=1e-10, rtol=1e-10)


def test_wasted_slots_against_a_preallocated_cache():
    cache = new_cache(num_blocks=40, block_size=16, reverse=False)
    lengths = [17, 100, 5]
    for i, n in enumerate(lengths):
        cache.add_sequence(i)
        cache.append(i, *kv(n))
    assert cache.num_used_blocks == 2 + 7 + 1
    assert cache.wasted_slots == (32 - 17) + (112 - 100) + (16 - 5)
    max_len = 128
    assert len(lengths) * max_len - sum(lengths) == 262  # what a preallocated cache of max_len leaves unused
    cache.fork(1, "b")  # sharing stores nothing twice, so it wastes nothing new
    assert cache.wasted_slots == 15 + 12 + 11
    assert cache.bytes_per_slot == 2 * KV_HEADS * HEAD_DIM * 8


# --- split-K ----------------------------------------------------------------------------------------------


def expected_lse(q, k, allow=None):
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if allow is not None:
        scores = scores.masked_fill(~allow, float("-inf"))
    return torch.logsumexp(scores, dim=-1)


@pytest.mark.parametrize("num_splits", [1, 2, 3, 7, 37])  # 3 and 7 do not divide 37 keys
@pytest.mark.parametrize("num_queries", [1, 3])
def test_split_k_equals_sdpa_in_float64(num_splits, num_queries):
    q = torch.randn(2, 3, num_queries, 8, dtype=torch.float64)
    k = torch.randn(2, 3, 37, 8, dtype=torch.float64)
    v = torch.randn(2, 3, 37, 5, dtype=torch.float64)
    out, lse = split_k_attention(q, k, v, num_splits=num_splits)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(lse, expected_lse(q, k), atol=1e-10, rtol=1e-10)


def test_split_k_with_a_mask_and_a_fully_hidden_chunk():
    q = torch.randn(3, 2, 1, 8, dtype=torch.float64)
    k, v = torch.randn(3, 2, 20, 8, dtype=torch.float64), torch.randn(3, 2, 20, 8, dtype=torch.float64)
    lengths = torch.tensor([20, 4, 11])  # sequence 1 has keys in the first of 4 chunks of 5 only
    allow = (torch.arange(20)[None, :] < lengths[:, None])[:, None, None, :]
    out, lse = split_k_attention(q, k, v, num_splits=4, mask=~allow)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=allow), atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(lse, expected_lse(q, k, allow), atol=1e-10, rtol=1e-10)


def test_merge_of_partials_from_uneven_chunks_and_large_scores():
    """Chunks of 5, 1 and 14 keys, scores past 709 (where exp overflows float64 without the max)."""
    q = torch.randn(2, 1, 16, dtype=torch.float64)
    q = 20 * q / q.norm(dim=-1, keepdim=True)  # |q| = 20
    k = torch.randn(2, 20, 16, dtype=torch.float64) * 8
    k[:, 7] = 10 * q[:, 0]  # one key in the last chunk aligned with the query: score 10 * 400 / 4 = 1000
    v = torch.randn(2, 20, 16, dtype=torch.float64)
    assert expected_lse(q, k).min() > 710
    parts = [online_softmax_attention(q, k[:, s:e], v[:, s:e], block_size=4) for s, e in [(0, 5), (5, 6), (6, 20)]]
    out, lse = merge_partials(torch.stack([o for o, _ in parts]), torch.stack([l for _, l in parts]))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(lse, expected_lse(q, k), atol=1e-10, rtol=1e-10)
    # merging is associative: merge (0, 1) first, then with 2
    o01, l01 = merge_partials(torch.stack([parts[0][0], parts[1][0]]), torch.stack([parts[0][1], parts[1][1]]))
    out2, _ = merge_partials(torch.stack([o01, parts[2][0]]), torch.stack([l01, parts[2][1]]))
    torch.testing.assert_close(out2, out, atol=1e-10, rtol=1e-10)


def test_merge_gives_zero_for_rows_hidden_everywhere():
    outs = torch.zeros(3, 2, 4, dtype=torch.float64)
    lses = torch.full((3, 2), float("-inf"), dtype=torch.float64)
    lses[1, 0], outs[1, 0] = 0.5, 1.0
    out, lse = merge_partials(outs, lses)
    assert not torch.isnan(out).any()
    assert (out[1] == 0).all() and lse[1] == float("-inf")
    torch.testing.assert_close(out[0], torch.ones(4, dtype=torch.float64))
    assert lse[0] == 0.5


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_k_in_lower_precision(dtype):
    q = torch.randn(1, 4, 1, 32, dtype=torch.float64)
    k, v = torch.randn(1, 4, 300, 32, dtype=torch.float64), torch.randn(1, 4, 300, 32, dtype=torch.float64)
    truth = F.scaled_dot_product_attention(q, k, v)
    out, lse = split_k_attention(q.to(dtype), k.to(dtype), v.to(dtype), num_splits=7)
    assert out.dtype == dtype and lse.dtype == (torch.float32 if dtype == torch.bfloat16 else dtype)
    sdpa_error = (F.scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype)).double() - truth).abs().max()
    assert (out.double() - truth).abs().max() <= 2 * sdpa_error + 1e-6


def test_split_k_bad_input():
    q, k = torch.randn(1, 1, 4), torch.randn(1, 3, 4)
    with pytest.raises(ValueError, match="more than the 3 keys"):
        split_k_attention(q, k, k, num_splits=4)
    with pytest.raises(ValueError, match="positive int"):
        split_k_attention(q, k, k, num_splits=0)
    with pytest.raises(ValueError, match="must match"):
        merge_partials(torch.zeros(2, 3, 4), torch.zeros(3, 3))


# --- speculative decoding's verify step: several queries per sequence, and the rollback ---------------------


def test_paged_attention_scores_draft_tokens_in_one_pass():
    """3 draft tokens per sequence in one call == SDPA with an explicit bottom-right causal mask, and == 3 steps."""
    cache = new_cache(num_blocks=20, block_size=4)
    lengths = [6, 13, 3]  # including the 3 drafts
    keys, values = [], []
    for i, n in enumerate(lengths):
        cache.add_sequence(i)
        k, v = kv(n)
        cache.append(i, k, v)
        keys.append(F.pad(k, (0, 0, 0, 13 - n)))
        values.append(F.pad(v, (0, 0, 0, 13 - n)))
    query = torch.randn(3, 4, 3, HEAD_DIM, dtype=torch.float64)
    q_pos = torch.tensor(lengths)[:, None] - 3 + torch.arange(3)  # (B, 3) positions of the drafts
    allow = (torch.arange(13)[None, None, :] <= q_pos[:, :, None])[:, None]  # (B, 1, 3, 13)
    expected = F.scaled_dot_product_attention(
        query, torch.stack(keys), torch.stack(values), attn_mask=allow, enable_gqa=True
    )
    got = paged_attention(query, cache, [0, 1, 2])
    torch.testing.assert_close(got, expected, atol=1e-10, rtol=1e-10)
    # the same as three one-token steps on truncated copies
    for j in range(3):
        for i, n in enumerate(lengths):
            cache.fork(i, ("step", i))
            cache.truncate(("step", i), n - 2 + j)
        step = paged_attention(query[:, :, j], cache, [("step", i) for i in range(3)])
        torch.testing.assert_close(step, got[:, :, j], atol=1e-10, rtol=1e-10)
        for i in range(3):
            cache.free(("step", i))


def test_truncate_rolls_back_and_frees_blocks():
    cache = new_cache(num_blocks=6, block_size=4)
    cache.add_sequence("a")
    k, v = kv(7)
    cache.append("a", k, v)
    drafts = kv(4)
    cache.append("a", *drafts)  # 11 tokens: 3 blocks
    assert cache.num_used_blocks == 3
    cache.truncate("a", 8)  # one draft accepted: 8 tokens fill exactly 2 blocks, the third goes back
    assert cache.seq_lens["a"] == 8 and len(cache.block_tables["a"]) == 2 and cache.num_used_blocks == 2
    new = kv(2)
    cache.append("a", *new)
    got_k, got_v = cache.gather("a")
    torch.testing.assert_close(got_k, torch.cat([k, drafts[0][:, :1], new[0]], dim=1), atol=0, rtol=0)
    torch.testing.assert_close(got_v, torch.cat([v, drafts[1][:, :1], new[1]], dim=1), atol=0, rtol=0)
    cache.fork("a", "b")
    cache.truncate("b", 3)  # a shared block stays for a
    assert cache.num_used_blocks == 3 and cache.block_tables["b"] == cache.block_tables["a"][:1]
    with pytest.raises(ValueError, match=r"in \[0, 3\]"):
        cache.truncate("b", 4)
    with pytest.raises(ValueError, match="at least that many"):
        paged_attention(torch.zeros(1, 2, 4, HEAD_DIM, dtype=torch.float64), cache, ["b"])


def test_paged_attention_with_another_scale():
    cache = new_cache(num_blocks=4, block_size=4)
    cache.add_sequence(0)
    k, v = kv(7)
    cache.append(0, k, v)
    query = torch.randn(1, 2, HEAD_DIM, dtype=torch.float64)
    expected = F.scaled_dot_product_attention(query[0, :, None], k, v, scale=0.3)[:, 0]
    torch.testing.assert_close(paged_attention(query, cache, [0], scale=0.3)[0], expected, atol=1e-10, rtol=1e-10)
