"""Misconception mutants for serving (notebook 13): the classic mistakes in a paged KV cache and in split-K's merge,
each a drop-in replacement for one piece of course_utils.reference.paged_kv_cache / course_utils.reference.split_k.

``MUTANTS[name] = (diagnosis, target, replacement)``: ``target`` is ``"PagedKVCache.<method>"`` or the name of a
module-level function; tests/reference/test_serving_mutants.py patches each in and shows that tests/reference/test_serving.py
fails. An exercise grader can reuse the names and diagnoses for a learner's code that behaves like a mutant.
"""
import torch

from course_utils.reference.paged_kv_cache import PagedKVCache


# --- block tables -----------------------------------------------------------------------------------------

def slots_without_block_size(self, seq_id, start=0, end=None):
    end = self.seq_lens[seq_id] if end is None else end
    table = torch.tensor(self.block_tables[seq_id], dtype=torch.long)
    pos = torch.arange(start, end)
    return table[pos // self.block_size] + pos % self.block_size  # the block number is not a slot number


def slots_ignoring_the_table(self, seq_id, start=0, end=None):
    end = self.seq_lens[seq_id] if end is None else end
    first = min(self.block_tables[seq_id]) * self.block_size
    # as if the sequence's blocks were adjacent in the pool (wrapped round so that it reads, wrongly, in range)
    return (first + torch.arange(start, end)) % (self.num_blocks * self.block_size)


def writable_without_copy(self, seq_id, end):
    table = self.block_tables[seq_id]
    last = (end - 1) // self.block_size
    while len(table) <= last:  # new blocks only: a shared block is written in place
        table.append(self._allocate())


def writable_copy_without_data(self, seq_id, end):
    table, start = self.block_tables[seq_id], self.seq_lens[seq_id]
    first, last = start // self.block_size, (end - 1) // self.block_size
    for j in range(first, min(last + 1, len(table))):
        if self.ref_counts[table[j]] > 1:  # a private block, but the shared tokens are not copied into it
            self.ref_counts[table[j]] -= 1
            table[j] = self._allocate()
    while len(table) <= last:
        table.append(self._allocate())


def free_ignoring_ref_counts(self, seq_id):
    for block in self.block_tables.pop(seq_id):  # back to the pool even while a fork still reads it
        self.ref_counts[block] = 0
        if block not in self.free_blocks:
            self.free_blocks.append(block)
    del self.seq_lens[seq_id]


def truncate_keeping_blocks(self, seq_id, length):
    self.seq_lens[seq_id] = length  # the rejected drafts' blocks stay allocated: a leak per rejection


_batch_tables = PagedKVCache.batch_tables


def batch_tables_length_plus_one(self, seq_ids):
    tables, lens = _batch_tables(self, seq_ids)
    return tables, lens + 1  # reads one slot past each sequence's last token


# --- split-K merge ----------------------------------------------------------------------------------------

def _lse(lses):
    return torch.logsumexp(lses, dim=0)


def merge_mean(outs, lses):
    return outs.mean(dim=0), _lse(lses)  # each chunk's output counts the same, whatever its share of the sum


def merge_sum(outs, lses):
    return outs.sum(dim=0), _lse(lses)


def merge_without_max(outs, lses):
    w = torch.exp(lses)  # overflows to inf once a chunk's lse passes 88 (float32) or 709 (float64)
    return (w[..., None] * outs).sum(dim=0) / w.sum(dim=0)[..., None], torch.log(w.sum(dim=0))


def merge_not_normalised(outs, lses):
    m = lses.amax(dim=0)
    w = torch.exp(lses - m)
    return (w[..., None] * outs).sum(dim=0), m + torch.log(w.sum(dim=0))  # never divided by sum(w)


def merge_lse_of_last_chunk(outs, lses):
    m = lses.amax(dim=0)
    w = torch.exp(lses - m)
    return (w[..., None] * outs).sum(dim=0) / w.sum(dim=0)[..., None], lses[-1]  # a second merge then goes wrong


MUTANTS = {
    "block_table_slot_without_block_size": (
        "slot = block_table[pos // block_size] + pos % block_size: a block number is not a slot; multiply it by "
        "block_size", "PagedKVCache.slots", slots_without_block_size),
    "block_table_ignored": (
        "the sequence's blocks are read as if adjacent in the pool: look each one up in the block table",
        "PagedKVCache.slots", slots_ignoring_the_table),
    "shared_block_written_without_copy": (
        "a block shared after fork() was written in place, changing the other sequence: copy it first "
        "(copy-on-write)", "PagedKVCache._make_writable", writable_without_copy),
    "copy_on_write_without_data": (
        "copy-on-write gave a fresh block but did not copy the shared tokens into it",
        "PagedKVCache._make_writable", writable_copy_without_data),
    "free_ignores_ref_counts": (
        "free() returned blocks that a forked sequence still uses: decrement the reference count, free at zero",
        "PagedKVCache.free", free_ignoring_ref_counts),
    "rollback_leaks_blocks": (
        "truncating rejected draft tokens must release the blocks that no longer hold a token",
        "PagedKVCache.truncate", truncate_keeping_blocks),
    "length_off_by_one": (
        "decoding reads one slot past each sequence's end: the mask hides positions >= seq_len",
        "PagedKVCache.batch_tables", batch_tables_length_plus_one),
    "merge_without_rescaling": (
        "partial outputs averaged: weight each by exp(lse_i - max lse), then divide by the sum of the weights",
        "merge_partials", merge_mean),
    "merge_summed": (
        "partial outputs added: each is already normalised by its own chunk's sum; weight them by exp(lse_i - m)",
        "merge_partials", merge_sum),
    "merge_without_max": (
        "exp(lse_i) without subtracting the largest lse overflows for large scores: use exp(lse_i - max lse)",
        "merge_partials", merge_without_max),
    "merge_not_normalised": (
        "the weighted partial outputs were not divided by the sum of the weights",
        "merge_partials", merge_not_normalised),
    "merge_wrong_lse": (
        "the merged lse must be max + log(sum of weights), else merging the merged result again is wrong",
        "merge_partials", merge_lse_of_last_chunk),
}
