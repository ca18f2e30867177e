"""A paged KV cache (分页 KV 缓存), as in vLLM's PagedAttention: the cache of many sequences in one pool of blocks.

A preallocated cache reserves ``max_len`` token slots for every sequence, whether it ends after 10 tokens or 4000.
A paged cache cuts the memory into fixed-size **blocks** of ``block_size`` token slots (vLLM's default: 16) and
gives a sequence a new block only when its last one is full. Each sequence keeps a **block table** (块表): entry
``j`` is the number of the physical block in the pool that holds its tokens ``j * block_size ...
(j + 1) * block_size - 1``. Token ``pos`` therefore lives in slot

    slot = block_table[pos // block_size] * block_size + pos % block_size

of the pool seen as one long row of slots (vLLM calls the list of these slots the ``slot_mapping``). The blocks of a
sequence may lie anywhere in the pool, in any order; at most ``block_size - 1`` slots per sequence stay unused.

The data moves as real systems move it: the Python side only keeps the books (block tables, free list, reference
counts); the keys go in with **one scatter** through the slot mapping for the whole batch (``append_tokens``, vLLM's
``reshape_and_cache``) and come out with **one gather** (``index_select``) through the same mapping
(``paged_attention``), never a loop over blocks.

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

from ..lang import pick
from .attention import attend


class OutOfBlocksError(RuntimeError):
    """The pool has no free block left for a write: free finished sequences or make a larger pool."""


class PagedKVCache:
    """Keys and values of many sequences in one pool of ``num_blocks`` blocks of ``block_size`` tokens each.

    ``append(seq_id, keys, values)`` takes (num_kv_heads, num_tokens, head_dim) for one sequence;
    ``gather(seq_id)`` returns its keys and values in order, (num_kv_heads, seq_len, head_dim), as a contiguous
    cache would hold them; ``paged_attention`` decodes a batch of sequences straight from the pool.
    """

    def __init__(self, num_blocks, block_size, num_kv_heads, head_dim, dtype=torch.float32, device=None) -> None:
        for name, value in (
            ("num_blocks", num_blocks),
            ("block_size", block_size),
            ("num_kv_heads", num_kv_heads),
            ("head_dim", head_dim),
        ):
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(
                    pick(
                        f"{name} must be a positive int, got {value!r}",
                        f"{name} 必须是正整数，收到的是 {value!r}",
                    )
                )
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
            raise ValueError(
                pick(
                    f"sequence {seq_id!r} is already in the cache; free() it first or pick a new id",
                    f"序列 {seq_id!r} 已经在缓存里了；请先 free() 它，或换一个新 id",
                )
            )
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
            raise ValueError(
                pick(
                    f"truncate: length must be an int in [0, {self.seq_lens[seq_id]}] (the tokens of "
                    f"{seq_id!r}), got {length!r}",
                    f"truncate：length 必须是 [0, {self.seq_lens[seq_id]}] 之间的整数（{seq_id!r} 的 token 数），"
                    f"收到的是 {length!r}",
                )
            )
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
            raise KeyError(
                pick(
                    f"no sequence {seq_id!r} in the paged cache (it holds {known}); add_sequence() it first",
                    f"分页缓存里没有序列 {seq_id!r}（现有的是 {known}）；请先 add_sequence()",
                )
            )

    def _allocate(self) -> int:
        block = self.free_blocks.popleft()
        self.ref_counts[block] = 1
        return block

    def _shared_blocks(self, seq_id, end: int) -> list[int]:
        """Logical blocks of ``seq_id`` that a write of its positions seq_len .. end - 1 touches and that another
        sequence also holds (they need a copy first)."""
        table, start = self.block_tables[seq_id], self.seq_lens[seq_id]
        first, last = start // self.block_size, (end - 1) // self.block_size  # logical blocks written
        return [j for j in range(first, min(last + 1, len(table))) if self.ref_counts[table[j]] > 1]

    def _blocks_needed(self, seq_id, end: int) -> int:
        """Free blocks a write of positions seq_len .. end - 1 takes: new blocks past the table, plus copies."""
        last = (end - 1) // self.block_size
        return max(0, last + 1 - len(self.block_tables[seq_id])) + len(self._shared_blocks(seq_id, end))

    def _make_writable(self, seq_id, end: int) -> None:
        """Give ``seq_id`` private blocks for its positions seq_len .. end - 1: new blocks past its table, and a
        copy of a shared block it is about to write into (copy-on-write)."""
        table, start = self.block_tables[seq_id], self.seq_lens[seq_id]
        last = (end - 1) // self.block_size  # last logical block written
        shared = self._shared_blocks(seq_id, end)
        needed = (last + 1 - len(table)) + len(shared)
        if needed > len(self.free_blocks):
            raise OutOfBlocksError(
                pick(
                    f"paged KV cache is full: sequence {seq_id!r} needs {needed} more block(s) of {self.block_size} "
                    f"tokens to grow from {start} to {end} tokens, but only {len(self.free_blocks)} of "
                    f"{self.num_blocks} are free; free() finished sequences or make a larger pool",
                    f"分页 KV 缓存已满：序列 {seq_id!r} 从 {start} 个 token 增长到 {end} 个，"
                    f"还需要 {needed} 个大小为 {self.block_size} 的块，"
                    f"但 {self.num_blocks} 个块中只有 {len(self.free_blocks)} 个空闲；请 free() 已结束的序列，"
                    "或用更大的块池",
                )
            )
        for j in shared:  # copy-on-write: the other holders keep the old block untouched
            old, new = table[j], self._allocate()
            self.key_pool[new] = self.key_pool[old]
            self.value_pool[new] = self.value_pool[old]
            self.ref_counts[old] -= 1
            table[j] = new
        while len(table) <= last:
            table.append(self._allocate())

    def _has_private_room(self, seq_id) -> bool:
        """Whether the next token of ``seq_id`` goes into a block that it alone holds: true for most decoding steps,
        which then have no books to keep."""
        table, j = self.block_tables[seq_id], self.seq_lens[seq_id] // self.block_size
        return j < len(table) and self.ref_counts[table[j]] == 1

    def _slot(self, seq_id, pos: int) -> int:
        """Pool slot of position ``pos`` of ``seq_id``, from the books alone (a Python int, no tensor)."""
        return self.block_tables[seq_id][pos // self.block_size] * self.block_size + pos % self.block_size

    def slots(self, seq_id, start: int = 0, end: int | None = None) -> torch.Tensor:
        """Pool slots of positions start .. end - 1 of ``seq_id``: block_table[pos // bs] * bs + pos % bs."""
        end = self.seq_lens[seq_id] if end is None else end
        table = torch.tensor([self.block_tables[seq_id] or [0]], dtype=torch.long, device=self.key_pool.device)
        pos = torch.arange(start, end, device=self.key_pool.device)
        return slot_mapping(table, pos[None], self.block_size)[0]

    # --- data ---------------------------------------------------------------------------------------------

    def append(self, seq_id, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Write (num_kv_heads, num_new, head_dim) keys and values after ``seq_id``'s last token."""
        self._check_seq(seq_id)
        expected = (self.num_kv_heads, self.head_dim)
        if keys.ndim != 3 or keys.shape != values.shape or (keys.shape[0], keys.shape[2]) != expected:
            raise ValueError(
                pick(
                    f"paged cache append needs keys and values of shape (num_kv_heads={expected[0]}, "
                    f"num_new, head_dim={expected[1]}), got {tuple(keys.shape)} and {tuple(values.shape)}",
                    f"分页缓存的 append 需要形状为 (num_kv_heads={expected[0]}, num_new, head_dim={expected[1]}) "
                    f"的键和值，收到的是 {tuple(keys.shape)} 和 {tuple(values.shape)}",
                )
            )
        num_new = keys.shape[1]
        if num_new == 0:
            return
        start = self.seq_lens[seq_id]
        self._make_writable(seq_id, start + num_new)
        slots = self.slots(seq_id, start, start + num_new)  # (num_new,)
        for pool, new in ((self.key_pool, keys), (self.value_pool, values)):  # one scatter into the row of slots
            pool.view(-1, *expected).index_copy_(0, slots, new.transpose(0, 1).to(pool.dtype))
        self.seq_lens[seq_id] = start + num_new

    def append_tokens(self, seq_ids, keys: torch.Tensor, values: torch.Tensor) -> None:
        """One decoding step's writes: the new token of each sequence in ``seq_ids``, keys and values
        (B, num_kv_heads, head_dim), in one scatter through their slot mapping (vLLM's ``reshape_and_cache``).

        Equal to ``append(seq_id, keys[b, :, None], values[b, :, None])`` for each b in turn, and like it all or
        nothing: when the pool cannot take every write, OutOfBlocksError is raised before anything changes."""
        seq_ids = list(seq_ids)
        expected = (len(seq_ids), self.num_kv_heads, self.head_dim)
        if keys.shape != expected or values.shape != expected:
            raise ValueError(
                pick(
                    f"append_tokens needs keys and values of shape (batch={expected[0]}, num_kv_heads="
                    f"{expected[1]}, head_dim={expected[2]}), one new token per sequence id, got "
                    f"{tuple(keys.shape)} and {tuple(values.shape)}",
                    f"append_tokens 需要形状为 (batch={expected[0]}, num_kv_heads={expected[1]}, "
                    f"head_dim={expected[2]}) 的键和值，每个序列 id 一个新 token，"
                    f"收到的是 {tuple(keys.shape)} 和 {tuple(values.shape)}",
                )
            )
        if len(set(seq_ids)) != len(seq_ids):
            raise ValueError(
                pick(
                    f"append_tokens writes one token per sequence: {seq_ids} names a sequence twice; "
                    "use append() to write several tokens of one sequence",
                    f"append_tokens 每个序列只写一个 token：{seq_ids} 里有序列出现了两次；"
                    "要给一个序列写多个 token 请用 append()",
                )
            )
        for seq_id in seq_ids:
            self._check_seq(seq_id)
        growing = {s for s in seq_ids if not self._has_private_room(s)}  # at a block boundary, or in a shared block
        needed = sum(self._blocks_needed(s, self.seq_lens[s] + 1) for s in growing)
        if needed > len(self.free_blocks):
            raise OutOfBlocksError(
                pick(
                    f"paged KV cache is full: this step's {len(seq_ids)} new tokens need {needed} more block(s) of "
                    f"{self.block_size} tokens, but only {len(self.free_blocks)} of {self.num_blocks} are free; "
                    "free() finished sequences or make a larger pool",
                    "分页 KV 缓存已满："
                    f"这一步的 {len(seq_ids)} 个新 token 还需要 {needed} 个大小为 {self.block_size} 的块，"
                    f"但 {self.num_blocks} 个块中只有 {len(self.free_blocks)} 个空闲；请 free() 已结束的序列，"
                    "或用更大的块池",
                )
            )
        step_slots = []  # the step's slot mapping, worked out on the host from the books, as vLLM's scheduler does
        for seq_id in seq_ids:  # the books: a new block at a block boundary, a copy of a shared block
            pos = self.seq_lens[seq_id]
            if seq_id in growing:
                self._make_writable(seq_id, pos + 1)
            step_slots.append(self._slot(seq_id, pos))
            self.seq_lens[seq_id] = pos + 1
        slots = torch.tensor(step_slots, dtype=torch.long, device=self.key_pool.device)  # (B,): one host-to-device copy
        for pool, new in ((self.key_pool, keys), (self.value_pool, values)):  # the pool as one row of slots
            pool.view(-1, *expected[1:]).index_copy_(0, slots, new.to(pool.dtype))

    def gather(self, seq_id) -> tuple[torch.Tensor, torch.Tensor]:
        """All of ``seq_id``'s keys and values in position order, (num_kv_heads, seq_len, head_dim) each."""
        self._check_seq(seq_id)
        slots = self.slots(seq_id)
        flat = (-1, self.num_kv_heads, self.head_dim)
        keys, values = (
            pool.view(flat).index_select(0, slots).transpose(0, 1) for pool in (self.key_pool, self.value_pool)
        )
        return keys, values

    def batch_tables(self, seq_ids) -> tuple[torch.Tensor, torch.Tensor]:
        """(block_tables (B, max_blocks) padded with 0, seq_lens (B,)): the two tensors a paged kernel reads."""
        for seq_id in seq_ids:
            self._check_seq(seq_id)
        max_blocks = max(1, max(len(self.block_tables[s]) for s in seq_ids))
        rows = [self.block_tables[s] + [0] * (max_blocks - len(self.block_tables[s])) for s in seq_ids]
        device = self.key_pool.device
        return (
            torch.tensor(rows, dtype=torch.long, device=device),
            torch.tensor([self.seq_lens[s] for s in seq_ids], dtype=torch.long, device=device),
        )

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


def slot_mapping(block_tables: torch.Tensor, positions: torch.Tensor, block_size: int) -> torch.Tensor:
    """Pool slots of token positions: block_tables (B, max_blocks), positions (B, n) -> (B, n) slots,
    ``block_tables[b, pos // block_size] * block_size + pos % block_size``. A position past the table (padding,
    which the caller masks) reads a slot of the table's last column rather than failing."""
    block = block_tables.gather(1, (positions // block_size).clamp(max=block_tables.shape[1] - 1))
    return block * block_size + positions % block_size


def paged_attention(query: torch.Tensor, cache: PagedKVCache, seq_ids, scale=None) -> torch.Tensor:
    """One decoding step for a batch of sequences of different lengths, read through their block tables.

    query (B, num_heads, head_dim): the newest token of each sequence in ``seq_ids`` (its own key and value
    already appended); or (B, num_heads, num_queries, head_dim): the last ``num_queries`` tokens of each sequence,
    each seeing the cache up to its own position (bottom-right causal), as when speculative decoding scores its
    draft tokens in one pass. num_heads may be a multiple of the cache's num_kv_heads (GQA: query head h reads
    K/V head h // (num_heads // num_kv_heads)). Returns the query's shape.

    A CUDA kernel reads each block in place. Here the batch's slot mapping (B, max_len) drives one gather
    (``index_select``) per pool into a padded (B, num_heads, max_len, head_dim) tensor, GQA's repeat of the K/V heads
    included, and the positions past each sequence's length are masked, which gives the same numbers. A contiguous
    cache decoded by eager attention makes the same one copy when it repeats its K/V heads (``repeat_interleave``,
    Hugging Face's ``repeat_kv``), so what paging adds to a decoding step is the books and the index arithmetic
    (benchmarks/serving.py measures the two side by side). The lengths
    come from the books on the host, as a scheduler has them: nothing is read back from the device.
    """
    if query.ndim not in (3, 4) or query.shape[0] != len(seq_ids) or query.shape[-1] != cache.head_dim:
        raise ValueError(
            pick(
                f"query must be (batch={len(seq_ids)}, num_heads, [num_queries,] head_dim={cache.head_dim}), "
                f"one row per sequence id, got {tuple(query.shape)}",
                f"query 必须是 (batch={len(seq_ids)}, num_heads, [num_queries,] head_dim={cache.head_dim})，"
                f"每个序列 id 一行，收到的是 {tuple(query.shape)}",
            )
        )
    one_step = query.ndim == 3
    q = query[:, :, None, :] if one_step else query  # (B, num_heads, num_queries, hd)
    num_heads, num_queries = q.shape[1], q.shape[2]
    if num_heads % cache.num_kv_heads:
        raise ValueError(
            pick(
                f"num_heads={num_heads} must be a multiple of the cache's num_kv_heads={cache.num_kv_heads}",
                f"num_heads={num_heads} 必须是缓存的 num_kv_heads={cache.num_kv_heads} 的整数倍",
            )
        )
    tables, lens = cache.batch_tables(seq_ids)  # (B, max_blocks), (B,)
    host_lens = [cache.seq_lens[s] for s in seq_ids]  # the books are on the host: no read back from the device
    if min(host_lens) < num_queries:
        raise ValueError(
            pick(
                f"{num_queries} queries per sequence need at least that many cached tokens, got lengths "
                f"{host_lens}; append the queries' own keys and values first",
                f"每个序列 {num_queries} 个查询，至少需要同样多的已缓存 token，收到的长度是 {host_lens}；"
                "请先追加这些查询自己的键和值",
            )
        )
    batch, max_len, kv_heads, bs = len(seq_ids), max(host_lens), cache.num_kv_heads, cache.block_size
    # One gather straight into the layout attention reads. The pool is rows of head_dim: K/V head g of slot
    # block * bs + offset is row (block * bs + offset) * kv_heads + g. Query head h reads K/V head h // n_rep, so
    # GQA's repeat is done by the index (as repeat_interleave does it) in the same single copy. The index is the
    # batch's slot mapping, built per block by one broadcast add: no division per position.
    kv_head = torch.arange(num_heads, device=query.device) // (num_heads // kv_heads)  # (num_heads,)
    in_block = kv_head[:, None] + torch.arange(bs, device=query.device) * kv_heads  # (num_heads, bs)
    rows = tables[:, None, :, None] * (bs * kv_heads) + in_block[None, :, None, :]  # (B, num_heads, max_blocks, bs)
    rows = rows.view(batch, num_heads, -1)[:, :, :max_len].reshape(-1)  # positions 0 .. max_len - 1 of each
    keys, values = (
        pool.view(-1, cache.head_dim).index_select(0, rows).view(batch, num_heads, max_len, -1)
        for pool in (cache.key_pool, cache.value_pool)
    )  # (B, num_heads, max_len, hd) each
    # query i of sequence b sits at position lens[b] - num_queries + i and sees keys up to it (True = hidden)
    pos = torch.arange(max_len, device=query.device)
    q_pos = lens[:, None] - num_queries + torch.arange(num_queries, device=query.device)  # (B, num_queries)
    hide = (pos[None, None, :] > q_pos[:, :, None])[:, None]  # (B, 1, num_queries, max_len)
    q = q.to(keys.dtype)  # no copy when the dtypes agree
    if scale is not None:  # attend scales by 1/sqrt(hd): fold a different scale into q
        q = q * (scale * math.sqrt(cache.head_dim))
    out, _ = attend(q, keys, values, mask=hide)
    return (out[:, :, 0, :] if one_step else out).to(query.dtype)
