"""Learner-style code for exercise 13 (paged_decode): the reference solution (lines tagged ``#TAG``), alternative
correct implementations in other styles, a stub, and misconception mutants as line edits of the reference
(``mutate`` from implementations.py). The diagnosis keys are those of the reference's own mutants in
tests/grader_cases/serving.py where the mistake is the same."""

from tests.grader_cases.implementations import HEADER, mutate

# the solution notebook's code (solutions/13_paged_decode.ipynb), tagged for the mutants
PAGED_DECODE = (
    HEADER
    + '''
def merge_partials(outs, lses):
    """outs (S, ..., d): each chunk's normalised output; lses (S, ...): each chunk's log-sum-exp."""
    m = lses.amax(dim=0)  #MAX
    w = torch.exp(lses - m)  # (S, ...): each chunk's share of the row's sum, at most 1
    total = w.sum(dim=0)
    out = (w[..., None] * outs).sum(dim=0) / total[..., None]  #MERGE
    return out, m + torch.log(total)  #LSE


def paged_decode(query, new_keys, new_values, key_pool, value_pool, block_tables, seq_lens, num_splits):
    num_blocks, block_size, heads, d = key_pool.shape
    key_slots = key_pool.view(-1, heads, d)  # the pool as one row of slots
    value_slots = value_pool.view(-1, heads, d)

    def slot(b, pos):
        return int(block_tables[b, pos // block_size]) * block_size + pos % block_size  #SLOT

    # 1. write each sequence's new token: a fresh block when its last one is full, a copy when it is shared
    for b in range(len(seq_lens)):
        pos = int(seq_lens[b])
        j = pos // block_size
        block = int(block_tables[b, j])
        if block < 0 or (block_tables == block).sum() > 1:  #SHARED
            free = [i for i in range(num_blocks) if not (block_tables == i).any()]
            if block >= 0:  # copy-on-write
                key_pool[free[0]] = key_pool[block]  #COPYK
                value_pool[free[0]] = value_pool[block]  #COPYV
            block_tables[b, j] = free[0]
        key_slots[slot(b, pos)] = new_keys[b]
        value_slots[slot(b, pos)] = new_values[b]

    # 2. attend: the keys cut into num_splits chunks, each giving (out_i, lse_i), merged
    outs, lses = [], []
    for b in range(len(seq_lens)):
        n = int(seq_lens[b]) + 1  #LEN
        idx = torch.tensor([slot(b, p) for p in range(n)])
        keys, values = key_slots[idx].transpose(0, 1), value_slots[idx].transpose(0, 1)  # (H, n, d)
        scores = (keys @ query[b].unsqueeze(-1)).squeeze(-1) / math.sqrt(d)  #SCALE
        chunk = math.ceil(n / num_splits)
        part_outs, part_lses = [], []
        for start in range(0, n, chunk):
            s = scores[:, start:start + chunk]  # (H, chunk)
            part_lses.append(torch.logsumexp(s, dim=-1))
            part_outs.append((torch.softmax(s, dim=-1).unsqueeze(1) @ values[:, start:start + chunk]).squeeze(1))
        out, lse = merge_partials(torch.stack(part_outs), torch.stack(part_lses))
        outs.append(out)
        lses.append(lse)
    return torch.stack(outs), torch.stack(lses)
'''
)

REFERENCE = PAGED_DECODE

ALTERNATIVES = {
    # vectorised: every slot gathered at once through the block tables, a padded batch with its tail hidden,
    # the splits as one more axis, and the merge as a softmax over the chunks' lses; reference counts from a
    # Counter, blocks taken from the top of the pool
    "vectorised_softmax_merge": HEADER
    + """
from collections import Counter


def merge_partials(outs, lses):
    weights = torch.softmax(lses, dim=0)  # exp(lse_i - logsumexp(lse)): the max is inside softmax
    return (weights[..., None] * outs).sum(dim=0), torch.logsumexp(lses, dim=0)


def paged_decode(query, new_keys, new_values, key_pool, value_pool, block_tables, seq_lens, num_splits):
    num_blocks, bs, H, d = key_pool.shape
    tables = block_tables.clone()
    refs = Counter(tables[tables >= 0].tolist())
    for b, n in enumerate(seq_lens.tolist()):
        j = n // bs
        old = tables[b, j].item()
        if old < 0 or refs[old] > 1:
            new = max(i for i in range(num_blocks) if refs[i] == 0)
            if old >= 0:
                key_pool[new].copy_(key_pool[old])
                value_pool[new].copy_(value_pool[old])
                refs[old] -= 1
            tables[b, j] = new
            refs[new] += 1
        key_pool[tables[b, j], n % bs] = new_keys[b]
        value_pool[tables[b, j], n % bs] = new_values[b]
    block_tables.copy_(tables)  # the caller's tables point to the blocks taken
    lens = seq_lens + 1
    L = int(lens.max())
    chunk = -(-L // num_splits)
    pos = torch.arange(num_splits * chunk)
    blocks = tables.gather(1, (pos // bs).clamp(max=tables.shape[1] - 1).expand(len(lens), -1)).clamp(min=0)
    slots = blocks * bs + pos % bs  # (B, S * chunk)
    k = key_pool.flatten(0, 1)[slots]  # (B, P, H, d)
    v = value_pool.flatten(0, 1)[slots]
    s = torch.einsum("bhd,bphd->bhp", query, k) * d ** -0.5
    s = s.masked_fill(pos >= lens[:, None, None], float("-inf")).unflatten(-1, (num_splits, chunk))
    part_lse = torch.logsumexp(s, dim=-1)  # (B, H, S); -inf for a chunk past the end
    part_out = torch.einsum("bhsc,bschd->bhsd", torch.softmax(s, dim=-1).nan_to_num(),
                            v.unflatten(1, (num_splits, chunk)))
    weights = torch.softmax(part_lse, dim=-1)  # exp(lse_i - logsumexp(lse)): the max is inside softmax
    return (weights[..., None] * part_out).sum(dim=2), torch.logsumexp(part_lse, dim=-1)
""",
    # lists instead of tensors, each sequence written then read at once (its new block is private, so nothing
    # it reads changes afterwards), chunks from torch.split, and a running pairwise merge with logaddexp
    "interleaved_running_merge": HEADER
    + """
def merge_partials(outs, lses):
    out, lse = outs[0], lses[0]
    for out_c, lse_c in zip(outs[1:], lses[1:]):
        new_lse = torch.logaddexp(lse, lse_c)
        out = out * torch.exp(lse - new_lse)[..., None] + out_c * torch.exp(lse_c - new_lse)[..., None]
        lse = new_lse
    return out, lse


def paged_decode(query, new_keys, new_values, key_pool, value_pool, block_tables, seq_lens, num_splits):
    block_size = key_pool.shape[1]
    tables = [[blk for blk in row if blk >= 0] for row in block_tables.tolist()]
    outs, lses = [], []
    for b, length in enumerate(seq_lens.tolist()):
        table = tables[b]
        if length % block_size == 0:  # the last block is full (or there is none): take a free one
            in_use = {blk for t in tables for blk in t}
            table.append(next(i for i in range(key_pool.shape[0]) if i not in in_use))
        elif sum(t.count(table[-1]) for t in tables) > 1:  # shared: copy before writing
            in_use = {blk for t in tables for blk in t}
            fresh = next(i for i in range(key_pool.shape[0]) if i not in in_use)
            key_pool[fresh], value_pool[fresh] = key_pool[table[-1]].clone(), value_pool[table[-1]].clone()
            table[-1] = fresh
        key_pool[table[-1], length % block_size] = new_keys[b]
        value_pool[table[-1], length % block_size] = new_values[b]
        n = length + 1
        keys = torch.cat([key_pool[blk] for blk in table])[:n]  # (n, H, d) in position order
        values = torch.cat([value_pool[blk] for blk in table])[:n]
        chunk = -(-n // num_splits)
        acc_out, acc_lse = None, None
        for k_c, v_c in zip(keys.split(chunk), values.split(chunk)):
            s = torch.einsum("hd,chd->hc", query[b], k_c) / math.sqrt(query.shape[-1])
            lse_c = torch.logsumexp(s, dim=-1)
            out_c = torch.einsum("hc,chd->hd", torch.exp(s - lse_c[:, None]), v_c)
            if acc_out is None:
                acc_out, acc_lse = out_c, lse_c
                continue
            new_lse = torch.logaddexp(acc_lse, lse_c)
            acc_out = acc_out * torch.exp(acc_lse - new_lse)[:, None] + out_c * torch.exp(lse_c - new_lse)[:, None]
            acc_lse = new_lse
        outs.append(acc_out)
        lses.append(acc_lse)
    for b, table in enumerate(tables):  # the caller's tables point to the blocks taken
        block_tables[b, :len(table)] = torch.tensor(table)
    return torch.stack(outs), torch.stack(lses)
""",
}

STUB = (
    HEADER
    + """
def paged_decode(query, new_keys, new_values, key_pool, value_pool, block_tables, seq_lens, num_splits):
    # YOUR CODE HERE
    raise NotImplementedError("your code here")
"""
)

# (expected diagnosis key, edits of the reference)
MUTANTS = [
    (
        "block_table_slot_without_block_size",
        {"SLOT": "return int(block_tables[b, pos // block_size]) + pos % block_size"},
    ),
    ("blocks_read_contiguously", {"SLOT": "return int(block_tables[b, 0]) * block_size + pos"}),
    ("shared_block_written_without_copy", {"SHARED": "if block < 0:"}),
    ("copy_on_write_without_data", {"COPYK": "pass", "COPYV": "pass"}),
    ("new_token_not_attended", {"LEN": "n = int(seq_lens[b])"}),
    ("merge_without_rescaling", {"MERGE": "out = outs.mean(dim=0)"}),
    ("merge_summed", {"MERGE": "out = outs.sum(dim=0)"}),
    ("merge_without_max", {"MAX": "m = torch.zeros_like(lses[0])"}),
    ("merge_not_normalised", {"MERGE": "out = (w[..., None] * outs).sum(dim=0)"}),
    ("merge_wrong_lse", {"LSE": "return out, m"}),
    ("no_scale", {"SCALE": "scores = (keys @ query[b].unsqueeze(-1)).squeeze(-1)"}),
    # merge_partials' mistakes that pass on partials whose lses lie close together
    ("merge_max_over_everything", {"MAX": "m = lses.amax()"}),
    ("merge_relative_to_first_chunk", {"MAX": "m = lses[0]"}),
]


# attend first, on each sequence's cached tokens read through its table plus its new key and value, then write:
# the same outputs and, with copy-on-write, the same pool as the contract's order
ATTEND_FIRST = (
    HEADER
    + """
def merge_partials(outs, lses):
    lse = torch.logsumexp(lses, dim=0)
    return (torch.exp(lses - lse)[..., None] * outs).sum(dim=0), lse


def paged_decode(query, new_keys, new_values, key_pool, value_pool, block_tables, seq_lens, num_splits):
    num_blocks, bs, H, d = key_pool.shape
    outs, lses = [], []
    for b, n in enumerate(seq_lens.tolist()):
        pos = torch.arange(n)
        blocks = block_tables[b, pos // bs]
        keys = torch.cat([key_pool[blocks, pos % bs], new_keys[b][None]])  # (n + 1, H, d)
        values = torch.cat([value_pool[blocks, pos % bs], new_values[b][None]])
        scores = torch.einsum("hd,nhd->hn", query[b], keys) / math.sqrt(d)
        chunk = -(-(n + 1) // num_splits)
        parts = [(torch.einsum("hc,chd->hd", torch.softmax(s, dim=-1), v), torch.logsumexp(s, dim=-1))
                 for s, v in zip(scores.split(chunk, dim=-1), values.split(chunk))]
        out, lse = merge_partials(torch.stack([o for o, _ in parts]), torch.stack([lse_i for _, lse_i in parts]))
        outs.append(out)
        lses.append(lse)
    for b, n in enumerate(seq_lens.tolist()):  # then write each new token
        j = n // bs
        block = int(block_tables[b, j])
        if block < 0 or (block_tables == block).sum() > 1:  #SHARED
            fresh = next(i for i in range(num_blocks) if not (block_tables == i).any())
            if block >= 0:
                key_pool[fresh], value_pool[fresh] = key_pool[block], value_pool[block]
            block_tables[b, j] = fresh
        key_pool[block_tables[b, j], n % bs] = new_keys[b]
        value_pool[block_tables[b, j], n % bs] = new_values[b]
    return torch.stack(outs), torch.stack(lses)
"""
)
ALTERNATIVES["attend_first_then_write"] = ATTEND_FIRST

# false credit before the pool and tables were read back: the right (out, lse) with the wrong state
STATE_MUTANTS = [
    # the step works on private copies of the pool and the tables: the new token is attended but never stored
    (
        "new_token_not_written",
        REFERENCE.replace(
            "    num_blocks, block_size, heads, d = key_pool.shape\n",
            "    key_pool, value_pool, block_tables = key_pool.clone(), value_pool.clone(), block_tables.clone()\n"
            "    num_blocks, block_size, heads, d = key_pool.shape\n",
        ),
    ),
    # attend first (so the outputs are right), then write into a shared block in place
    ("shared_block_written_without_copy", mutate(ATTEND_FIRST, {"SHARED": "if block < 0:"})),
]

# each chunk's output weighted by its number of keys (a mean of means), the lengths handed to merge_partials by
# paged_decode; merge_partials alone, without them, takes the plain mean
BY_LENGTH = (
    REFERENCE.replace(
        "def merge_partials(outs, lses):",
        "def merge_partials(outs, lses, lengths=None):",
    )
    .replace(
        "    out = (w[..., None] * outs).sum(dim=0) / total[..., None]  #MERGE",
        "    share = torch.ones(len(outs)) if lengths is None else torch.tensor(lengths, dtype=outs.dtype)\n"
        "    out = (share.view(-1, *[1] * (outs.dim() - 1)) * outs).sum(dim=0) / share.sum()",
    )
    .replace(
        "        out, lse = merge_partials(torch.stack(part_outs), torch.stack(part_lses))",
        "        lengths = [min(chunk, n - start) for start in range(0, n, chunk)]\n"
        "        out, lse = merge_partials(torch.stack(part_outs), torch.stack(part_lses), lengths)",
    )
)
assert BY_LENGTH.count("lengths") == 5
MUTANTS.append(("merge_weighted_by_length", BY_LENGTH))

# the keys never split: one chunk of all of them, merge_partials merging one partial (the outputs are right)
NEVER_SPLITS = REFERENCE.replace("chunk = math.ceil(n / num_splits)", "chunk = n  # one softmax over all the keys")
assert NEVER_SPLITS != REFERENCE
MUTANTS.append(("decode_never_splits", NEVER_SPLITS))

# copy-on-write (or a fresh block) done, but the new token written where the table pointed before
WRITTEN_OLD = REFERENCE.replace(
    "        block = int(block_tables[b, j])\n",
    "        block = int(block_tables[b, j])\n        old = slot(b, pos)  # the slot, before the block is replaced\n",
).replace(
    "        key_slots[slot(b, pos)] = new_keys[b]\n        value_slots[slot(b, pos)] = new_values[b]\n",
    "        key_slots[old] = new_keys[b]\n        value_slots[old] = new_values[b]\n",
)
assert WRITTEN_OLD.count("[old]") == 2
MUTANTS.append(("written_into_the_old_block", WRITTEN_OLD))

# the write through the table, the read contiguously from the sequence's first block
READ_CONTIGUOUS = REFERENCE.replace(
    "idx = torch.tensor([slot(b, p) for p in range(n)])",
    "idx = int(block_tables[b, 0]) * block_size + torch.arange(n)  # the tokens follow the first block",
)
assert READ_CONTIGUOUS != REFERENCE
MUTANTS.append(("read_contiguously_from_the_first_block", READ_CONTIGUOUS))

# the chunks merged in paged_decode itself, weighted by their lengths (merge_partials left unused)
MERGED_BY_LENGTH_INLINE = REFERENCE.replace(
    "        out, lse = merge_partials(torch.stack(part_outs), torch.stack(part_lses))\n",
    "        sizes = torch.tensor([min(chunk, n - start) for start in range(0, n, chunk)], dtype=torch.float32)\n"
    "        out = (sizes[:, None, None] * torch.stack(part_outs)).sum(0) / sizes.sum()\n"
    "        lse = torch.logsumexp(torch.stack(part_lses), 0)\n",
)
assert MERGED_BY_LENGTH_INLINE != REFERENCE
MUTANTS.append(("merge_weighted_by_length", MERGED_BY_LENGTH_INLINE))

# --- the fixture, in the contract test's one shape (tests/grade/exercises/fixtures.py) -------------------------

FIXTURES = {"paged_decode": {"reference": REFERENCE, "alternatives": ALTERNATIVES, "stubs": {"stub": STUB}, "mutants": MUTANTS}}
