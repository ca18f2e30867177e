"""Exercise 13: ``paged_decode(query, new_keys, new_values, key_pool, value_pool, block_tables, seq_lens,
num_splits)``, one decoding step of a batch through a paged KV cache (notebook 13): write each sequence's new key
and value into its block (a fresh block when the last one is full, a copy when the block is shared), then attend
split-K (FlashDecoding): the keys cut into chunks, each giving (out_i, lse_i), merged by log-sum-exp. A function:
it returns (out, lse).

The reference computation and each misconception are the flags of ``PagedVariant``, run on the grader's pool the
way the learner's function is run (float32, in the inputs' dtype, so that a merge without the maximum overflows
exactly where the learner's does). Free blocks all hold the same stale data, so a learner may take any free block
and a mistake still gives the reference mutant's numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from ..messages import Msg
from ..registry import Exercise
from ..specs import draw_seed
from ..specs_beyond import M_NO_SCALE_OS, mutant
from ..types import Call, Case


@dataclass(frozen=True)
class PagedVariant:
    slot: str = "ok"          # ok | no_block_size (block + offset) | contiguous (first block * bs + position)
    copy: str = "ok"          # ok | none (a shared block written in place) | empty (a fresh block, nothing copied)
    order: str = "write_all"  # write_all | interleaved (write b, read b): tells only with copy="none"
    new_token: bool = True    # False: the new token is written but not attended
    merge: str = "ok"         # ok | mean | sum | no_max | not_normalised
    merged_lse: str = "ok"    # ok | max (the largest partial lse, without log(sum of weights))
    scale: bool = True


def _mistake(key: str):
    """(diagnosis key, its text): messages.py's 'mutant.<key>', in English and Chinese."""
    return key, Msg("mutant." + key)


M_SLOT_NO_BS = _mistake("block_table_slot_without_block_size")
M_SLOT_CONTIGUOUS = _mistake("block_table_ignored")
M_NO_COPY = _mistake("shared_block_written_without_copy")
M_COPY_EMPTY = _mistake("copy_on_write_without_data")
M_NEW_TOKEN = _mistake("new_token_not_attended")
M_MERGE_MEAN = _mistake("merge_without_rescaling")
M_MERGE_SUM = _mistake("merge_summed")
M_MERGE_NO_MAX = _mistake("merge_without_max")
M_MERGE_NOT_NORMALISED = _mistake("merge_not_normalised")
M_MERGE_LSE = _mistake("merge_wrong_lse")


# ---------------------------------------------------------------------------------------------
# the reference computation, with the variant's mistakes

def _merge(outs, lses, v: PagedVariant):
    """outs (S, H, d), lses (S, H) -> (out (H, d), lse (H,))."""
    m = lses.amax(dim=0)
    w = torch.exp(lses) if v.merge == "no_max" else torch.exp(lses - m)
    total = w.sum(dim=0)
    weighted = (w[..., None] * outs).sum(dim=0)
    out = {"ok": weighted / total[..., None], "no_max": weighted / total[..., None], "mean": outs.mean(dim=0),
           "sum": outs.sum(dim=0), "not_normalised": weighted}[v.merge]
    lse = torch.log(total) if v.merge == "no_max" else m + torch.log(total)
    return out, (m if v.merged_lse == "max" else lse)


def paged_forward(args, v: PagedVariant):
    """One decode step with the variant's mistakes; returns (out (B, H, d), lse (B, H))."""
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
        if int(tables[b, j]) < 0 or (v.copy != "none" and int((tables == tables[b, j]).sum()) > 1):
            listed = set(tables[tables >= 0].tolist())
            fresh = min(set(range(num_blocks)) - listed)
            if int(tables[b, j]) >= 0 and v.copy == "ok":  # copy-on-write
                key_pool[fresh], value_pool[fresh] = key_pool[int(tables[b, j])], value_pool[int(tables[b, j])]
            tables[b, j] = fresh
        s = slot(b, pos)
        flat_k[s], flat_v[s] = new_keys[b], new_values[b]

    def read(b):
        n = lens[b] + (1 if v.new_token else 0)
        slots = [slot(b, p) for p in range(n)]
        keys, values = flat_k[slots].transpose(0, 1), flat_v[slots].transpose(0, 1)  # (H, n, d)
        scores = (keys @ query[b][:, :, None])[..., 0]  # (H, n)
        if v.scale:
            scores = scores / math.sqrt(d)
        chunk = -(-n // num_splits)
        outs, lses = [], []
        for start in range(0, n, chunk):
            s = scores[:, start:start + chunk]
            m = s.amax(dim=-1)
            p = torch.exp(s - m[:, None])
            total = p.sum(dim=-1)
            outs.append((p[:, None, :] @ values[:, start:start + chunk])[:, 0] / total[:, None])
            lses.append(m + torch.log(total))
        return _merge(torch.stack(outs), torch.stack(lses), v)

    results = [None] * len(lens)
    if v.order == "interleaved":
        for b in range(len(lens)):
            write(b)
            results[b] = read(b)
    else:
        for b in range(len(lens)):
            write(b)
        results = [read(b) for b in range(len(lens))]
    return torch.stack([o for o, _ in results]), torch.stack([lse for _, lse in results])


# ---------------------------------------------------------------------------------------------
# cases

def paged_case(name, g, block_size, seqs, num_splits, *, spare=3, heads=2, head_dim=8, scale=1.0,
               reverse=False):
    """``seqs``: (cached tokens, labels of its blocks) per sequence; a label shared by two sequences is one block
    in the pool. The labels get physical blocks at random (or from the top of the pool down, ``reverse``); every
    slot of every used block holds random data (past a sequence's length: another sequence's tokens or stale
    ones), every free block the same stale data."""
    labels = list(dict.fromkeys(label for _, seq_labels in seqs for label in seq_labels))
    num_blocks = len(labels) + len(seqs) + spare  # room for a new block or a copy per sequence
    order = list(range(num_blocks))[::-1] if reverse else torch.randperm(num_blocks, generator=g).tolist()
    physical = dict(zip(labels, order[:len(labels)], strict=True))
    width = max(-(-(n + 1) // block_size) for n, _ in seqs)
    tables = torch.full((len(seqs), width), -1, dtype=torch.long)
    for b, (n, seq_labels) in enumerate(seqs):
        assert len(seq_labels) == -(-n // block_size), (name, b)
        tables[b, :len(seq_labels)] = torch.tensor([physical[label] for label in seq_labels])
    shape = (num_blocks, block_size, heads, head_dim)
    key_pool, value_pool = torch.randn(shape, generator=g) * scale, torch.randn(shape, generator=g)
    free = [block for block in range(num_blocks) if block not in physical.values()]
    stale_k, stale_v = torch.randn(shape[1:], generator=g) * scale, torch.randn(shape[1:], generator=g)
    key_pool[free], value_pool[free] = stale_k, stale_v
    query = torch.randn(len(seqs), heads, head_dim, generator=g) * scale
    new_keys = torch.randn(len(seqs), heads, head_dim, generator=g) * scale
    new_values = torch.randn(len(seqs), heads, head_dim, generator=g)
    seq_lens = torch.tensor([n for n, _ in seqs], dtype=torch.long)
    args = (query, new_keys, new_values, key_pool, value_pool, tables, seq_lens, num_splits)
    call = Call(query, seed=draw_seed(g), args=args)
    return Case(name, {"block_size": block_size, "num_splits": num_splits}, {}, [call], kind="function",
                meta={"tol": (2e-3, 2e-4)} if scale != 1.0 else {})


def cases(g) -> list[Case]:
    """The cases, drawn from ``g`` (seeded by the grader's secret seed)."""
    return [
        paged_case("3 sequences of 3, 8 and 13 cached tokens, blocks of 4 scattered in reverse, 3 splits",
                   g, 4, [(3, "a"), (8, "bc"), (13, "defg")], 3, reverse=True),
        paged_case("a sequence forked after 6 tokens: parent and child share a half-filled block, 2 splits",
                   g, 4, [(6, "ab"), (6, "ab"), (10, "cde")], 2),
        paged_case("a sequence rolled back to 5 tokens shares its last block with one of 7 tokens, 2 splits",
                   g, 4, [(5, "ab"), (7, "ab")], 2),
        paged_case("two sequences share a full prompt of 8 tokens and both need a new block, 4 splits",
                   g, 4, [(8, "ab"), (8, "ab"), (2, "c")], 4),
        paged_case("scores in the hundreds (exp overflows without the maximum), blocks of 3, 3 splits",
                   g, 3, [(7, "abc"), (4, "de")], 3, scale=10.0),
    ]


def expected(case: Case, variant: PagedVariant) -> dict:
    """{name: tensor}, named as the harness names the learner's outputs."""
    with torch.no_grad():
        out, lse = paged_forward(case.calls[0].args, variant)
        return {"step1.out": out, "step1.lse": lse}


def mutants() -> list:
    """Known-wrong variants, most specific first."""
    ok = PagedVariant()
    return [
        mutant(M_SLOT_NO_BS, replace(ok, slot="no_block_size")),
        mutant(M_SLOT_CONTIGUOUS, replace(ok, slot="contiguous")),
        mutant(M_NO_COPY, replace(ok, copy="none")),
        mutant(M_NO_COPY, replace(ok, copy="none", order="interleaved")),
        mutant(M_COPY_EMPTY, replace(ok, copy="empty")),
        mutant(M_NEW_TOKEN, replace(ok, new_token=False)),
        mutant(M_MERGE_MEAN, replace(ok, merge="mean")),
        mutant(M_MERGE_SUM, replace(ok, merge="sum")),
        mutant(M_MERGE_NO_MAX, replace(ok, merge="no_max")),
        mutant(M_MERGE_NOT_NORMALISED, replace(ok, merge="not_normalised")),
        mutant(M_MERGE_LSE, replace(ok, merged_lse="max")),
        mutant(M_NO_SCALE_OS, replace(ok, scale=False)),
    ]


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
)
