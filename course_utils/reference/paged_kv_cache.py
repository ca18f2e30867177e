"""A paged KV cache (分页 KV 缓存), as in vLLM's PagedAttention: the cache of many sequences in one pool of blocks.

A preallocated cache reserves ``max_len`` token slots for every sequence, whether it ends after 10 tokens or 4000.
A paged cache cuts the memory into fixed-size **blocks** of ``block_size`` token slots (vLLM's default: 16) and
gives a sequence a new block only when its last one is full. Each sequence keeps a **block table** (块表): entry
``j`` is the number of the physical block in the pool that holds its tokens ``j * block_size ...
(j + 1) * block_size - 1``. Token ``pos`` therefore lives in slot

    slot = block_table[pos // block_size] * block_size + pos % block_size

of the pool seen as one long row of slots (vLLM calls the list of these slots the ``slot_mapping``). The blocks of a
sequence may lie anywhere in the pool, in any order; at most ``block_size - 1`` slots per sequence stay unused.

Sequences may **share** blocks: ``fork`` gives a new sequence the same block table as its parent (a shared
prompt, parallel sampling) and counts one more reference to each block. A shared block is read-only: before a
sequence writes into a block that another sequence also uses, it copies it (**copy-on-write**, 写时复制).
``free`` drops a sequence's references; a block returns to the pool when nobody references it any more.

The pool layout is ``(num_blocks, block_size, num_kv_heads, head_dim)``, FlashAttention's paged layout
(``flash_attn_with_kvcache``'s ``k_cache`` with a ``block_table``); vLLM's own CUDA kernel splits head_dim
differently for vectorised loads, which changes nothing here.
"""
from __future__ import annotations

import math
from collections import deque

import torch

from .attention import attend
from .multihead import repeat_kv


class OutOfBlocksError(RuntimeError):
    """The pool has no free block left for a write: free finished sequences or make a larger pool."""


class PagedKVCache:
    """Keys and values of many sequences in one pool of ``num_blocks`` blocks of ``block_size`` tokens each.

    ``append(seq_id, keys, values)`` takes (num_kv_heads, num_tokens, head_dim) for one sequence;
    ``gather(seq_id)`` returns its keys and values in order, (num_kv_heads, seq_len, head_dim), as a contiguous
    cache would hold them; ``paged_attention`` decodes a batch of sequences straight from the pool.
    """

    def __init__(self, num_blocks, block_size, num_kv_heads, head_dim, dtype=torch.float32, device=None):
        for name, value in (("num_blocks", num_blocks), ("block_size", block_size),
                            ("num_kv_heads", num_kv_heads), ("head_dim", head_dim)):
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.num_blocks, self.block_size = num_blocks, block_size
        self.num_kv_heads, self.head_dim = num_kv_heads, head_dim
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        self.key_pool = torch.zeros(shape, dtype=dtype, device=device)
        self.value_pool = torch.zeros(shape, dtype=dtype, device=device)
        self.free_blocks = deque(range(num_blocks))  # handed out from the left, returned on the right
        self.ref_counts = [0] * num_blocks  # how many block tables hold each block
        self.block_tables: dict = {}  # seq_id -> [physical block of logical block 0, 1, ...]
        self.seq_lens: dict = {}  # seq_id -> tokens stored

    # --- bookkeeping -------------------------------------------------------------------------------------

    def add_sequence(self, seq_id) -> None:
        """Start an empty sequence (it gets blocks as it writes)."""
        if seq_id in self.block_tables:
            raise ValueError(f"sequence {seq_id!r} is already in the cache; free() it first or pick a new id")
        self.block_tables[seq_id], self.seq_lens[seq_id] = [], 0

    def fork(self, parent_id, child_id) -> None:
        """``child_id`` starts with all of ``parent_id``'s tokens, sharing its blocks (no copy until a write)."""
        self._check_seq(parent_id)
        self.add_sequence(child_id)
        self.block_tables[child_id] = list(self.block_tables[parent_id])
        self.seq_lens[child_id] = self.seq_lens[parent_id]
        for block in self.block_tables[child_id]:
            self.ref_counts[block] += 1

    def free(self, seq_id) -> None:
        """Forget a finished sequence; its blocks that no other sequence holds go back to the pool."""
        self._check_seq(seq_id)
        for block in self.block_tables.pop(seq_id):
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self.free_blocks.append(block)
        del self.seq_lens[seq_id]

    def truncate(self, seq_id, length: int) -> None:
        """Keep only ``seq_id``'s first ``length`` tokens (speculative decoding's rollback of rejected drafts); the
        blocks it no longer needs are released like in ``free``. Slots past ``length`` in its last block are simply
        overwritten by the next append."""
        self._check_seq(seq_id)
        if not (isinstance(length, int) and 0 <= length <= self.seq_lens[seq_id]):
            raise ValueError(f"truncate: length must be an int in [0, {self.seq_lens[seq_id]}] (the tokens of "
                             f"{seq_id!r}), got {length!r}")
        table = self.block_tables[seq_id]
        keep = -(-length // self.block_size)  # blocks that still hold a token
        for block in table[keep:]:
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self.free_blocks.append(block)
        del table[keep:]
        self.seq_lens[seq_id] = length

    def _check_seq(self, seq_id) -> None:
        if seq_id not in self.block_tables:
            known = list(self.block_tables)
            raise KeyError(f"no sequence {seq_id!r} in the paged cache (it holds {known}); add_sequence() it first")

    def _allocate(self) -> int:
        block = self.free_blocks.popleft()
        self.ref_counts[block] = 1
        return block

    def _make_writable(self, seq_id, end: int) -> None:
        """Give ``seq_id`` private blocks for its positions seq_len .. end - 1: new blocks past its table, and a
        copy of a shared block it is about to write into (copy-on-write)."""
        table, start = self.block_tables[seq_id], self.seq_lens[seq_id]
        first, last = start // self.block_size, (end - 1) // self.block_size  # logical blocks written
        shared = [j for j in range(first, min(last + 1, len(table))) if self.ref_counts[table[j]] > 1]
        needed = (last + 1 - len(table)) + len(shared)
        if needed > len(self.free_blocks):
            raise OutOfBlocksError(
                f"paged KV cache is full: sequence {seq_id!r} needs {needed} more block(s) of {self.block_size} "
                f"tokens to grow from {start} to {end} tokens, but only {len(self.free_blocks)} of "
                f"{self.num_blocks} are free; free() finished sequences or make a larger pool")
        for j in shared:  # copy-on-write: the other holders keep the old block untouched
            old, new = table[j], self._allocate()
            self.key_pool[new] = self.key_pool[old]
            self.value_pool[new] = self.value_pool[old]
            self.ref_counts[old] -= 1
            table[j] = new
        while len(table) <= last:
            table.append(self._allocate())

    def slots(self, seq_id, start: int = 0, end: int | None = None) -> torch.Tensor:
        """Pool slots of positions start .. end - 1 of ``seq_id``: block_table[pos // bs] * bs + pos % bs."""
        end = self.seq_lens[seq_id] if end is None else end
        table = torch.tensor(self.block_tables[seq_id], dtype=torch.long, device=self.key_pool.device)
        pos = torch.arange(start, end, device=self.key_pool.device)
        return table[pos // self.block_size] * self.block_size + pos % self.block_size

    # --- data ---------------------------------------------------------------------------------------------

    def append(self, seq_id, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Write (num_kv_heads, num_new, head_dim) keys and values after ``seq_id``'s last token."""
        self._check_seq(seq_id)
        expected = (self.num_kv_heads, self.head_dim)
        if keys.ndim != 3 or keys.shape != values.shape or (keys.shape[0], keys.shape[2]) != expected:
            raise ValueError(f"paged cache append needs keys and values of shape (num_kv_heads={expected[0]}, "
                             f"num_new, head_dim={expected[1]}), got {tuple(keys.shape)} and {tuple(values.shape)}")
        num_new = keys.shape[1]
        if num_new == 0:
            return
        start = self.seq_lens[seq_id]
        self._make_writable(seq_id, start + num_new)
        slots = self.slots(seq_id, start, start + num_new)  # (num_new,)
        # the pool as one row of slots: (num_blocks * block_size, num_kv_heads, head_dim)
        self.key_pool.view(-1, *expected)[slots] = keys.transpose(0, 1).to(self.key_pool.dtype)
        self.value_pool.view(-1, *expected)[slots] = values.transpose(0, 1).to(self.value_pool.dtype)
        self.seq_lens[seq_id] = start + num_new

    def gather(self, seq_id) -> tuple[torch.Tensor, torch.Tensor]:
        """All of ``seq_id``'s keys and values in position order, (num_kv_heads, seq_len, head_dim) each."""
        self._check_seq(seq_id)
        slots = self.slots(seq_id)
        flat = (-1, self.num_kv_heads, self.head_dim)
        keys = self.key_pool.view(flat)[slots].transpose(0, 1)
        values = self.value_pool.view(flat)[slots].transpose(0, 1)
        return keys, values

    def batch_tables(self, seq_ids) -> tuple[torch.Tensor, torch.Tensor]:
        """(block_tables (B, max_blocks) padded with 0, seq_lens (B,)): the two tensors a paged kernel reads."""
        for seq_id in seq_ids:
            self._check_seq(seq_id)
        max_blocks = max(1, max(len(self.block_tables[s]) for s in seq_ids))
        tables = torch.zeros(len(seq_ids), max_blocks, dtype=torch.long)
        for row, seq_id in enumerate(seq_ids):
            tables[row, :len(self.block_tables[seq_id])] = torch.tensor(self.block_tables[seq_id], dtype=torch.long)
        lens = torch.tensor([self.seq_lens[s] for s in seq_ids], dtype=torch.long)
        return tables.to(self.key_pool.device), lens.to(self.key_pool.device)

    # --- memory -------------------------------------------------------------------------------------------

    @property
    def bytes_per_slot(self) -> int:
        """Bytes of one token's keys and values (this layer)."""
        return 2 * self.num_kv_heads * self.head_dim * self.key_pool.element_size()

    @property
    def nbytes(self) -> int:
        """Bytes of the whole pool, used or not."""
        return self.key_pool.numel() * self.key_pool.element_size() * 2

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self.free_blocks)

    @property
    def wasted_slots(self) -> int:
        """Slots in used blocks that hold no token: the unfilled tail of each sequence's last block (a shared
        block counts once, since its tokens are stored once)."""
        stored = set()
        for seq_id, table in self.block_tables.items():
            for j, block in enumerate(table):
                for offset in range(min(self.block_size, self.seq_lens[seq_id] - j * self.block_size)):
                    stored.add((block, offset))
        return self.num_used_blocks * self.block_size - len(stored)


def paged_attention(query: torch.Tensor, cache: PagedKVCache, seq_ids, scale=None) -> torch.Tensor:
    """One decoding step for a batch of sequences of different lengths, read through their block tables.

    query (B, num_heads, head_dim): the newest token of each sequence in ``seq_ids`` (its own key and value
    already appended); or (B, num_heads, num_queries, head_dim): the last ``num_queries`` tokens of each sequence,
    each seeing the cache up to its own position (bottom-right causal), as when speculative decoding scores its
    draft tokens in one pass. num_heads may be a multiple of the cache's num_kv_heads (GQA: query head h reads
    K/V head h // (num_heads // num_kv_heads)). Returns the query's shape.

    A CUDA kernel reads each block in place; here the slots are gathered into a padded (B, kv_heads, max_len,
    head_dim) tensor and the positions past each sequence's length are masked, which gives the same numbers.
    """
    if query.ndim not in (3, 4) or query.shape[0] != len(seq_ids) or query.shape[-1] != cache.head_dim:
        raise ValueError(f"query must be (batch={len(seq_ids)}, num_heads, [num_queries,] head_dim={cache.head_dim}), "
                         f"one row per sequence id, got {tuple(query.shape)}")
    one_step = query.ndim == 3
    q = query[:, :, None, :] if one_step else query  # (B, num_heads, num_queries, hd)
    num_heads, num_queries = q.shape[1], q.shape[2]
    if num_heads % cache.num_kv_heads:
        raise ValueError(f"num_heads={num_heads} must be a multiple of the cache's num_kv_heads={cache.num_kv_heads}")
    tables, lens = cache.batch_tables(seq_ids)  # (B, max_blocks), (B,)
    if int(lens.min()) < num_queries:
        raise ValueError(f"{num_queries} queries per sequence need at least that many cached tokens, got lengths "
                         f"{lens.tolist()}; append the queries' own keys and values first")
    max_len = int(lens.max())
    pos = torch.arange(max_len, device=query.device)  # (max_len,)
    # padded positions read slot 0 of some block: harmless, they are masked below
    block = tables.gather(1, (pos // cache.block_size).clamp(max=tables.shape[1] - 1).expand(len(seq_ids), -1))
    slots = block * cache.block_size + pos % cache.block_size  # (B, max_len)
    flat = (-1, cache.num_kv_heads, cache.head_dim)
    keys = cache.key_pool.view(flat)[slots].permute(0, 2, 1, 3)  # (B, kv_heads, max_len, hd)
    values = cache.value_pool.view(flat)[slots].permute(0, 2, 1, 3)
    n_rep = num_heads // cache.num_kv_heads
    keys, values = repeat_kv(keys, n_rep), repeat_kv(values, n_rep)  # (B, num_heads, max_len, hd)
    # query i of sequence b sits at position lens[b] - num_queries + i and sees keys up to it (True = hidden)
    q_pos = lens[:, None] - num_queries + torch.arange(num_queries, device=query.device)  # (B, num_queries)
    hide = (pos[None, None, :] > q_pos[:, :, None])[:, None]  # (B, 1, num_queries, max_len)
    q = q.to(keys.dtype)
    if scale is not None:  # attend scales by 1/sqrt(hd): fold a different scale into q
        q = q * (scale * math.sqrt(cache.head_dim))
    out, _ = attend(q, keys, values, mask=hide)
    return (out[:, :, 0, :] if one_step else out).to(query.dtype)
