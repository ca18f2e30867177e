"""Exercise 13: ``paged_decode(query, new_keys, new_values, key_pool, value_pool, block_tables, seq_lens,
num_splits)``, one decoding step of a batch through a paged KV cache (notebook 13): write each sequence's new key
and value into its block (a fresh block when the last one is full, a copy when the block is shared), then attend
split-K (FlashDecoding): the keys cut into chunks, each giving (out_i, lse_i), merged by log-sum-exp. A function:
it returns (out, lse), and the pools and tables it was handed, written, are part of its result: they are read back
after the call and compared as each sequence's tokens read through its table (``cached_tokens``), so that a learner
may take any free block.

The reference computation and each misconception are the flags of ``PagedVariant``, run on the grader's pool the
way the learner's function is run (float32, in the inputs' dtype, so that a merge without the maximum overflows
exactly where the learner's does). Free blocks all hold the same stale data, so a learner may take any free block
and a mistake still gives the reference mutant's numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from ..kinds.function import Call
from ..kit import Mistake, case_titles, draw_seed, mutant
from ..registry import Exercise
from ..types import Case
from .online_softmax import M_NO_SCALE


@dataclass(frozen=True)
class PagedVariant:
    slot: str = "ok"  # ok | no_block_size (block + offset) | contiguous (first block * bs + position)
    copy: str = "ok"  # ok | none (a shared block written in place) | empty (a fresh block, nothing copied)
    order: str = "write_all"  # write_all | interleaved (write b, read b): tells only with copy="none" | attend_first
    # (attend on the pool as handed, the new token included, then write: right outputs, the pool as written)
    written: bool = True  # False: the new token attended but never written to the pool
    new_token: bool = True  # False: the new token is written but not attended
    merge: str = "ok"  # ok | mean | sum | no_max | not_normalised | global_max (one max over every row) | first
    # (each row's weights relative to its first chunk's lse) | by_length (each chunk weighted by its number of keys:
    # the mean where the lengths are not known, in merge_partials alone)
    merged_lse: str = "ok"  # ok | max (the largest partial lse, without log(sum of weights))
    scale: bool = True
    split: bool = True  # False: one softmax over all the keys, merge_partials never merging two partials
    write_to: str = "table"  # table (the block the table lists after the step) | old_shared (after copy-on-write,
    # the new token written into the shared block anyway) | old (into the block listed before: the shared one, or
    # block -1 for a new one, the pool's last)
    read: str = "table"  # table | contiguous (the write through the table, the read from the first block onwards)
    decode_merge: str = "merge_partials"  # merge_partials | by_length (paged_decode merges the chunks itself,
    # weighted by their lengths) | by_length_and_lse (by length times exp(lse_i - max))


M_SLOT_NO_BS = Mistake("block_table_slot_without_block_size")
M_SLOT_CONTIGUOUS = Mistake("blocks_read_contiguously")
M_NO_COPY = Mistake("shared_block_written_without_copy")
M_COPY_EMPTY = Mistake("copy_on_write_without_data")
M_NEW_TOKEN = Mistake("new_token_not_attended")
M_NOT_WRITTEN = Mistake("new_token_not_written")
M_MERGE_MEAN = Mistake("merge_without_rescaling")
M_MERGE_SUM = Mistake("merge_summed")
M_MERGE_NO_MAX = Mistake("merge_without_max")
M_MERGE_NOT_NORMALISED = Mistake("merge_not_normalised")
M_MERGE_LSE = Mistake("merge_wrong_lse")
M_MERGE_GLOBAL_MAX = Mistake("merge_max_over_everything")
M_MERGE_FIRST = Mistake("merge_relative_to_first_chunk")
M_MERGE_BY_LENGTH = Mistake("merge_weighted_by_length")
M_NO_SPLIT = Mistake("decode_never_splits")
M_WRITE_OLD = Mistake("written_into_the_old_block")
M_READ_CONTIGUOUS = Mistake("read_contiguously_from_the_first_block")
M_DECODE_BY_LENGTH = Mistake("merge_weighted_by_length", text="decode_merge_weighted_by_length")


# ---------------------------------------------------------------------------------------------
# the reference computation, with the variant's mistakes


def _merge(outs, lses, v: PagedVariant, lengths=None):
    """outs (S, H, d), lses (S, H) -> (out (H, d), lse (H,)); ``lengths``: each chunk's number of keys, where the
    caller knows them."""
    m = {"global_max": lses.amax().expand(lses.shape[1:]), "first": lses[0]}.get(v.merge, lses.amax(dim=0))
    w = torch.exp(lses) if v.merge == "no_max" else torch.exp(lses - m)
    total = w.sum(dim=0)
    weighted = (w[..., None] * outs).sum(dim=0)
    out = {
        "ok": weighted / total[..., None],
        "global_max": weighted / total[..., None],
        "first": weighted / total[..., None],
        "no_max": weighted / total[..., None],
        "mean": outs.mean(dim=0),
        "sum": outs.sum(dim=0),
        "not_normalised": weighted,
        "by_length": outs.mean(dim=0) if lengths is None else _by_length(outs, lengths),
    }[v.merge]
    lse = torch.log(total) if v.merge == "no_max" else m + torch.log(total)
    return out, (m if v.merged_lse == "max" else lse)


def _by_length(outs, lengths):
    """The chunks' outputs weighted by their numbers of keys, as if each chunk's share of the softmax were its
    share of the keys."""
    share = torch.tensor(lengths, dtype=outs.dtype) / sum(lengths)
    return (share[:, None, None] * outs).sum(dim=0)


def paged_forward(args, v: PagedVariant, state: bool = False):
    """One decode step with the variant's mistakes; returns (out (B, H, d), lse (B, H)), and with ``state`` the
    pools and tables it leaves too."""
    query, new_keys, new_values, key_pool, value_pool, block_tables, seq_lens, num_splits = args
    key_pool, value_pool, tables = key_pool.clone(), value_pool.clone(), block_tables.clone()
    num_blocks, bs, heads, d = key_pool.shape
    flat_k, flat_v = key_pool.view(-1, heads, d), value_pool.view(-1, heads, d)  # one row of slots
    lens = [int(n) for n in seq_lens]

    def slot(b, pos):
        if v.slot == "contiguous":
            return int(tables[b, 0]) * bs + pos
        return int(tables[b, pos // bs]) * (1 if v.slot == "no_block_size" else bs) + pos % bs

    def write(b):
        pos = lens[b]
        j = pos // bs
        before = int(tables[b, j])
        if before < 0 or (v.copy != "none" and int((tables == tables[b, j]).sum()) > 1):
            listed = set(tables[tables >= 0].tolist())
            fresh = min(set(range(num_blocks)) - listed)
            if before >= 0 and v.copy == "ok":  # copy-on-write
                key_pool[fresh], value_pool[fresh] = key_pool[before], value_pool[before]
            tables[b, j] = fresh
            if v.write_to == "old" or (v.write_to == "old_shared" and before >= 0):  # the block listed before
                s = before * bs + pos % bs  # block -1: the pool's last (a negative index counts from the end)
                flat_k[s], flat_v[s] = new_keys[b], new_values[b]
                return
        s = slot(b, pos)
        flat_k[s], flat_v[s] = new_keys[b], new_values[b]

    def read(b):
        n = lens[b] + (1 if v.new_token else 0)
        first = int(tables[b, 0]) * bs
        slots = [first + p if v.read == "contiguous" else slot(b, p) for p in range(n)]
        keys, values = flat_k[slots].transpose(0, 1), flat_v[slots].transpose(0, 1)  # (H, n, d)
        scores = (keys @ query[b][:, :, None])[..., 0]  # (H, n)
        if v.scale:
            scores = scores / math.sqrt(d)
        chunk = -(-n // num_splits) if v.split else n
        outs, lses, lengths = [], [], []
        for start in range(0, n, chunk):
            s = scores[:, start : start + chunk]
            m = s.amax(dim=-1)
            p = torch.exp(s - m[:, None])
            total = p.sum(dim=-1)
            outs.append((p[:, None, :] @ values[:, start : start + chunk])[:, 0] / total[:, None])
            lses.append(m + torch.log(total))
            lengths.append(s.shape[-1])
        if v.decode_merge != "merge_partials":  # merged in paged_decode itself, each chunk weighted by its length
            share = torch.tensor(lengths, dtype=scores.dtype)[:, None]
            lse_s = torch.stack(lses)
            if v.decode_merge == "by_length_and_lse":
                share = share * torch.exp(lse_s - lse_s.amax(dim=0))
            merged = (share[..., None] * torch.stack(outs)).sum(dim=0) / share.sum(dim=0)[..., None]
            return merged, torch.logsumexp(lse_s, dim=0)
        return _merge(torch.stack(outs), torch.stack(lses), v, lengths)

    if v.order == "attend_first" or not v.written:  # the right outputs, and the pool as this variant writes it
        out, lse = paged_forward(args, replace(v, order="write_all", copy="ok", written=True))
        for b in range(len(lens) if v.written else 0):
            write(b)
        return (out, lse, (key_pool, value_pool, tables)) if state else (out, lse)
    if v.order == "interleaved":
        results = []
        for b in range(len(lens)):
            write(b)
            results.append(read(b))
    else:
        for b in range(len(lens)):
            write(b)
        results = [read(b) for b in range(len(lens))]
    out, lse = torch.stack([o for o, _ in results]), torch.stack([lse for _, lse in results])
    return (out, lse, (key_pool, value_pool, tables)) if state else (out, lse)


# ---------------------------------------------------------------------------------------------
# the state the step leaves: each sequence's tokens, read through its table

STATE = (("key_pool", 3), ("value_pool", 4), ("block_tables", 5))  # the arguments the step writes into


def cached_tokens(key_pool, value_pool, tables, lens):
    """Keys and values (B, max len, H, d) of each sequence's first ``lens[b]`` tokens read through its table
    (float64), zero past its length, NaN where its table points to no block of the pool: what the next step
    attends to, whichever free blocks the step took."""
    num_blocks, bs, heads, d = key_pool.shape
    keys = torch.zeros(len(lens), max(lens), heads, d, dtype=torch.float64)
    values = torch.zeros_like(keys)
    for b, n in enumerate(lens):
        for pos in range(n):
            j = pos // bs
            block = float(tables[b, j]) if j < tables.shape[1] else -1.0
            if not (math.isfinite(block) and block == int(block) and 0 <= block < num_blocks):
                keys[b, pos] = values[b, pos] = float("nan")
                continue
            keys[b, pos], values[b, pos] = key_pool[int(block), pos % bs], value_pool[int(block), pos % bs]
    return keys, values


def _tokens_after(case: Case, key_pool, value_pool, tables) -> dict:
    """{"step1.cached_keys", "step1.cached_values"}: the tokens after the step (seq_len + 1 each), or None where
    the state that came back is not the arguments' shape."""
    args = case.calls[0].args
    lens = [int(n) + 1 for n in args[6]]
    shapes = [tuple(a.shape) for a in args[3:6]]
    if [tuple(t.shape) if isinstance(t, torch.Tensor) else None for t in (key_pool, value_pool, tables)] != shapes:
        return {"step1.cached_keys": None, "step1.cached_values": None}
    keys, values = cached_tokens(key_pool.double(), value_pool.double(), tables, lens)
    return {"step1.cached_keys": keys, "step1.cached_values": values}


def read_back(case: Case, outputs: dict) -> dict:
    """The learner's outputs with the pools and tables its call left replaced by the tokens they hold."""
    if case.meta.get("merge"):  # merge_partials alone: no state
        return outputs
    kept = {name: value for name, value in outputs.items() if name.split(".", 1)[1] not in dict(STATE)}
    return {**kept, **_tokens_after(case, *(outputs.get(f"step1.{name}") for name, _ in STATE))}


# ---------------------------------------------------------------------------------------------
# cases


def paged_case(name, g, block_size, seqs, num_splits, *, spare=3, heads=2, head_dim=8, high=0.0, reverse=False):
    """``seqs``: (cached tokens, labels of its blocks) per sequence; a label shared by two sequences is one block
    in the pool. The labels get physical blocks at random (or from the top of the used blocks down, ``reverse``); every
    slot of every used block holds random data (past a sequence's length: another sequence's tokens or stale
    ones), every free block the same stale data."""
    labels = list(dict.fromkeys(label for _, seq_labels in seqs for label in seq_labels))
    used = len(labels) + len(seqs) + spare  # room for a new block or a copy per sequence
    # free blocks above every block a table lists: a read running on from a sequence's first block (a mistake)
    # stays inside the pool on every draw, whatever its indexing
    num_blocks = used + -(-max(n + 1 for n, _ in seqs) // block_size)
    order = list(range(used))[::-1] if reverse else torch.randperm(used, generator=g).tolist()
    physical = dict(zip(labels, order[: len(labels)], strict=True))
    width = max(-(-(n + 1) // block_size) for n, _ in seqs)
    tables = torch.full((len(seqs), width), -1, dtype=torch.long)
    for b, (n, seq_labels) in enumerate(seqs):
        assert len(seq_labels) == -(-n // block_size), (name, b)
        tables[b, : len(seq_labels)] = torch.tensor([physical[label] for label in seq_labels])
    shape = (num_blocks, block_size, heads, head_dim)
    key_pool, value_pool = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
    free = [block for block in range(num_blocks) if block not in physical.values()]
    stale_k, stale_v = torch.randn(shape[1:], generator=g), torch.randn(shape[1:], generator=g)
    key_pool[free], value_pool[free] = stale_k, stale_v
    query = torch.randn(len(seqs), heads, head_dim, generator=g)
    new_keys = torch.randn(len(seqs), heads, head_dim, generator=g)
    if high:  # every score ``high`` plus an ordinary one (a shared direction of q and k): exp overflows, while the
        # weights keep the spread of an ordinary case, so that every other mistake shows as it does there
        query[..., 0] = 10.0
        for keys in (key_pool, new_keys):
            keys[..., 0] = high * math.sqrt(head_dim) / 10.0
    new_values = torch.randn(len(seqs), heads, head_dim, generator=g)
    seq_lens = torch.tensor([n for n, _ in seqs], dtype=torch.long)
    args = (query, new_keys, new_values, key_pool, value_pool, tables, seq_lens, num_splits)
    longest = max(n for n, _ in seqs) + 1  # keys of the longest row: a softmax over so many never split them
    call = Call(args, seed=draw_seed(g), state=STATE, split_check=("merge_partials", longest))
    return Case(
        name,
        {"block_size": block_size, "num_splits": num_splits},
        {},
        [call],
        meta={"tol": (2e-3, 2e-4)} if high else {},
    )


def merge_case(name, g, num_chunks=4, rows=3, heads=2, head_dim=8):
    """``merge_partials(outs, lses)`` alone, on (num_chunks, rows, heads) partials: in each row two chunks (never
    the first) within 2 of each other on top, the others 200 to 300 below, and the rows' tops 300 apart, so that a
    merge without each row's own maximum over-/underflows in float32 and one without the weights' sum is off."""
    top = 300.0 * torch.arange(rows, dtype=torch.float32)[:, None] - 300.0  # (rows, 1)
    lses = top - 200.0 - 100.0 * torch.rand(num_chunks, rows, heads, generator=g)
    for r in range(rows):
        for c in (1 + torch.randperm(num_chunks - 1, generator=g)[:2]).tolist():
            lses[c, r] = top[r] + 2.0 * torch.rand(heads, generator=g)
    outs = torch.randn(num_chunks, rows, heads, head_dim, generator=g)
    call = Call((outs, lses), seed=draw_seed(g), helper="merge_partials")
    return Case(name, {"num_chunks": num_chunks}, {}, [call], meta={"merge": True})


def cases(g) -> list[Case]:
    """The cases, drawn from ``g`` (seeded by the grader's secret seed)."""
    return [
        paged_case(
            "3 sequences of 3, 8 and 13 cached tokens, blocks of 4 scattered in reverse, 3 splits",
            g,
            4,
            [(3, "a"), (8, "bc"), (13, "defg")],
            3,
            reverse=True,
        ),
        paged_case(
            "a sequence forked after 6 tokens: parent and child share a half-filled block, 2 splits",
            g,
            4,
            [(6, "ab"), (6, "ab"), (10, "cde")],
            2,
        ),
        paged_case(
            "a sequence rolled back to 5 tokens shares its last block with one of 7 tokens, 2 splits",
            g,
            4,
            [(5, "ab"), (7, "ab")],
            2,
        ),
        paged_case(
            "two sequences share a full prompt of 8 tokens and both need a new block, 4 splits",
            g,
            4,
            [(8, "ab"), (8, "ab"), (2, "c")],
            4,
        ),
        paged_case(
            "scores in the hundreds (exp overflows without the maximum), blocks of 3, 3 splits",
            g,
            3,
            [(7, "abc"), (4, "de")],
            3,
            high=300.0,
        ),
        merge_case("merge_partials alone: 4 chunks whose lses lie hundreds apart, rows 300 apart", g),
    ]


def expected(case: Case, variant: PagedVariant) -> dict:
    """{name: tensor}, named as the harness names the learner's outputs."""
    with torch.no_grad():
        if case.meta.get("merge"):
            outs, lses = case.calls[0].args
            out, lse = _merge(outs, lses, variant)
            return {"step1.out": out, "step1.lse": lse}
        out, lse, state = paged_forward(case.calls[0].args, variant, state=True)
        # the keys split: every case's longest row holds more than one chunk of them
        return {
            "step1.out": out,
            "step1.lse": lse,
            **_tokens_after(case, *state),
            "step1.split": torch.tensor(1.0 if variant.split else 0.0),
        }


def mutants() -> list:
    """Known-wrong variants, most specific first."""
    ok = PagedVariant()
    return [
        mutant(M_SLOT_NO_BS, replace(ok, slot="no_block_size")),
        mutant(M_SLOT_CONTIGUOUS, replace(ok, slot="contiguous")),
        mutant(M_NO_COPY, replace(ok, copy="none")),
        mutant(M_NO_COPY, replace(ok, copy="none", order="interleaved")),
        mutant(M_NO_COPY, replace(ok, copy="none", order="attend_first")),
        mutant(M_NOT_WRITTEN, replace(ok, written=False)),
        mutant(M_COPY_EMPTY, replace(ok, copy="empty")),
        mutant(M_NEW_TOKEN, replace(ok, new_token=False)),
        mutant(M_MERGE_MEAN, replace(ok, merge="mean")),
        mutant(M_MERGE_SUM, replace(ok, merge="sum")),
        mutant(M_MERGE_NO_MAX, replace(ok, merge="no_max")),
        mutant(M_MERGE_NOT_NORMALISED, replace(ok, merge="not_normalised")),
        mutant(M_MERGE_LSE, replace(ok, merged_lse="max")),
        mutant(M_MERGE_GLOBAL_MAX, replace(ok, merge="global_max")),
        mutant(M_MERGE_FIRST, replace(ok, merge="first")),
        mutant(M_MERGE_BY_LENGTH, replace(ok, merge="by_length"), paired=False),
        mutant(M_NO_SCALE, replace(ok, scale=False)),
        mutant(M_WRITE_OLD, replace(ok, write_to="old_shared")),
        mutant(M_WRITE_OLD, replace(ok, write_to="old")),
        mutant(M_READ_CONTIGUOUS, replace(ok, read="contiguous")),
        # merged in paged_decode itself (merge_partials left unused): named by the outputs, whatever the lse beside
        mutant(M_DECODE_BY_LENGTH, replace(ok, decode_merge="by_length"), outputs_only=True),
        mutant(M_DECODE_BY_LENGTH, replace(ok, decode_merge="by_length_and_lse"), outputs_only=True),
        mutant(M_NO_SPLIT, replace(ok, split=False), paired=False),  # last: its outputs are right
    ]


TEXTS: dict[str, tuple[str, str]] = {
    "mutant.block_table_slot_without_block_size": (
        "slot = block_table[pos // block_size] + pos % block_size: a block number is not a slot number; multiply it "
        "by block_size",
        "slot = block_table[pos // block_size] + pos % block_size：块号不是槽位号，要先乘以 block_size",
    ),
    "mutant.blocks_read_contiguously": (
        "only the table's first block was looked up: the tokens after it were read from the blocks that follow it "
        "in the pool (slot = block_tables[b, 0] * block_size + pos), but a sequence's blocks lie anywhere in the "
        "pool; look each position's own block up, block_tables[b, pos // block_size]",
        "只查了块表里的第一个块，之后的 token 是接着从池中紧随其后的块里读的（slot = block_tables[b, 0] * "
        "block_size + pos）；但一条序列的块可以散落在池中任何位置，每个位置都要查它自己的块，"
        "block_tables[b, pos // block_size]",
    ),
    "mutant.shared_block_written_without_copy": (
        "a block another sequence also lists was written in place, changing that sequence's tokens: copy the block "
        "into a free one first and point the table there (copy-on-write)",
        "直接写入了另一条序列也在用的共享块，改掉了那条序列的 token：先把这个块复制到一个空闲块，让块表指向新块，"
        "再写入（写时复制）",
    ),
    "mutant.new_token_not_written": (
        "the new token was never written to the pool: the next step reads the cache, so store new_keys[b] and "
        "new_values[b] at position seq_lens[b] of sequence b's block (a fresh block when its last one is full)",
        "新 token 从没写进池里：下一步解码读的是缓存，所以要把 new_keys[b] 和 new_values[b] 存到序列 b 的块里第 "
        "seq_lens[b] 个位置（最后一块满了就取一个空闲块）",
    ),
    "mutant.copy_on_write_without_data": (
        "copy-on-write took a free block but did not copy the shared block's tokens into it",
        "写时复制拿到了空闲块，但没有把共享块里已有的 token 复制过去",
    ),
    "mutant.new_token_not_attended": (
        "the new token's own key and value are written but not attended: each sequence attends to seq_len + 1 tokens",
        "新 token 的键和值写进去了，却没有参与注意力：每条序列要看 seq_len + 1 个 token",
    ),
    "mutant.merge_without_rescaling": (
        "the chunks' outputs were averaged: weight each out_i by exp(lse_i - max lse), then divide by the sum of "
        "the weights",
        "直接对各块的输出取了平均：要用 exp(lse_i - max lse) 给每个 out_i 加权，再除以权重之和",
    ),
    "mutant.merge_summed": (
        "the chunks' outputs were added: each is already normalised by its own chunk's sum; weight them by "
        "exp(lse_i - max lse) and divide by the sum of the weights",
        "直接把各块的输出相加：每个 out_i 已经按本块自己的和归一化过，要用 exp(lse_i - max lse) 加权，再除以权重之和",
    ),
    "mutant.merge_without_max": (
        "the merge computes exp(lse_i) without subtracting the largest lse, which overflows for large scores: use "
        "exp(lse_i - max lse)",
        "合并时直接算 exp(lse_i)，没有减去最大的 lse，分数大时会溢出：要用 exp(lse_i - max lse)",
    ),
    "mutant.merge_not_normalised": (
        "the weighted chunk outputs were not divided by the sum of the weights",
        "各块输出加权求和之后，没有除以权重之和",
    ),
    "mutant.merge_max_over_everything": (
        "merge_partials subtracted one maximum over every row: rows whose scores lie far below it underflow to 0; "
        "take the maximum over the chunks only, lses.amax(dim=0), one per row",
        "merge_partials 减去的是所有行共同的一个最大值：分数远低于它的行会下溢成 0；最大值只在块之间取，"
        "lses.amax(dim=0)，每行一个",
    ),
    "mutant.merge_relative_to_first_chunk": (
        "merge_partials weighted the chunks by exp(lse_i - lse_0): a chunk far above the first overflows; "
        "subtract the largest lse of the row, lses.amax(dim=0)",
        "merge_partials 用 exp(lse_i - lse_0) 给各块加权：比第一块大很多的块会溢出；要减去这一行最大的 lse，"
        "lses.amax(dim=0)",
    ),
    "mutant.merge_weighted_by_length": (
        "the chunks' outputs were weighted by their lengths (numbers of keys): a chunk's share of the softmax is "
        "the share of the sum of exp(scores) it holds, not its share of the keys; weight each out_i by "
        "exp(lse_i - max lse) and divide by the sum of the weights",
        "各块的输出按块的长度（键的个数）加权了：一个块在 softmax 里所占的份额是它在 exp(分数) 总和中所占的份额，"
        "不是它在键里所占的份额；要用 exp(lse_i - max lse) 给每个 out_i 加权，再除以权重之和",
    ),
    "mutant.decode_never_splits": (
        "the outputs are right, but the keys were not attended split-K: one softmax ran over all the keys of a "
        "row, and merge_partials never merged two partials; cut each sequence's keys into chunks of "
        "ceil(n / num_splits), compute each chunk's (out_i, lse_i) and merge them with merge_partials, as "
        "FlashDecoding does so that the chunks can run in parallel",
        "输出是对的，但没有按 split-K 计算注意力：对一行的全部键做了一次 softmax，merge_partials 也从没合并过两个"
        "部分结果；应当把每条序列的键切成长度为 ceil(n / num_splits) 的块，算出每块的 (out_i, lse_i)，再用 "
        "merge_partials 合并，FlashDecoding 正是这样让各块并行计算的",
    ),
    "mutant.written_into_the_old_block": (
        "the new token was written into the block the table listed before the step: after copy-on-write (or taking "
        "a fresh block) the table points to the new block, so the token must go there; writing the shared block "
        "anyway changes the other sequence's tokens and leaves this one's copy without its new token (recompute the "
        "slot after updating block_tables)",
        "新 token 写进了这一步之前块表里列的那个块：写时复制（或取了空闲块）之后，块表指向的是新块，token 应当写到"
        "新块里；照旧写进共享块，会改掉另一条序列的 token，而本序列的副本里却没有这个新 token（更新 block_tables 之后"
        "要重新算槽位）",
    ),
    "mutant.read_contiguously_from_the_first_block": (
        "the new token was written through the block table, but the keys were read contiguously from the first "
        "block onwards (slot = block_tables[b, 0] * block_size + pos): a sequence's blocks lie anywhere in the pool; "
        "read each position from its own block, block_tables[b, pos // block_size]",
        "新 token 是按块表写的，但读键时却从第一个块开始连续往后读（slot = block_tables[b, 0] * block_size + pos）："
        "一条序列的块可以散落在池中任何位置；每个位置都要从它自己的块读，block_tables[b, pos // block_size]",
    ),
    "mutant.decode_merge_weighted_by_length": (
        "paged_decode merged the chunks itself, weighting them by their lengths (numbers of keys): a chunk's share "
        "of the softmax is the share of the sum of exp(scores) it holds, not its share of the keys; merge the chunks' "
        "(out_i, lse_i) with merge_partials, which weights each by exp(lse_i - max lse)",
        "paged_decode 自己合并了各块，并按块的长度（键的个数）加权：一个块在 softmax 里所占的份额是它在 exp(分数) "
        "总和中所占的份额，不是它在键里所占的份额；应当用 merge_partials 合并各块的 (out_i, lse_i)，它按 "
        "exp(lse_i - max lse) 给每块加权",
    ),
    "mutant.merge_wrong_lse": (
        "the merged lse is the largest lse_i: it is max + log(sum of the weights exp(lse_i - max))",
        "合并后的 lse 取成了最大的 lse_i：应当是 max + log(权重 exp(lse_i - max) 之和)",
    ),
    **case_titles(
        {
            "3 sequences of 3, 8 and 13 cached tokens, blocks of 4 scattered in reverse, 3 splits": "3 条序列，已缓存 3、8、13 个 token，大小为 4 的块在池中倒序分散，切成 3 段",
            "a sequence forked after 6 tokens: parent and child share a half-filled block, 2 splits": "一条序列在第 6 个 token 后 fork：父子序列共享一个半满的块，切成 2 段",
            "a sequence rolled back to 5 tokens shares its last block with one of 7 tokens, 2 splits": "一条回滚到 5 个 token 的序列与一条 7 个 token 的序列共享最后一个块，切成 2 段",
            "two sequences share a full prompt of 8 tokens and both need a new block, 4 splits": "两条序列共享 8 个 token 的完整提示，都需要一个新块，切成 4 段",
            "scores in the hundreds (exp overflows without the maximum), blocks of 3, 3 splits": "分数上百（不减最大值时 exp 会溢出），块大小为 3，切成 3 段",
            "merge_partials alone: 4 chunks whose lses lie hundreds apart, rows 300 apart": "单独检查 merge_partials：4 个块的 lse 相差几百，各行相差 300",
        }
    ),
}


EXERCISE = Exercise(
    id="paged_decode",
    order=13,
    notebook="13_paged_decode",
    points=3,
    kind="function",
    contract="paged_decode",
    args=("query", "new_keys", "new_values", "key_pool", "value_pool", "block_tables", "seq_lens", "num_splits"),
    cases=cases,
    expected=expected,
    correct=PagedVariant(),
    mutants=mutants,
    read_back=read_back,
)
