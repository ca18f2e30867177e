"""Learner-style code for exercise 15 (ring_attention): the reference solution (lines tagged ``#TAG``), two
alternative correct implementations in other styles (of the step and of the exchange), a stub, and misconception
mutants as line edits of the reference (``mutate`` from implementations.py), or as whole exchanges (the deadlocks)."""

from tests.grader_cases.implementations import HEADER

HEADER = HEADER.rstrip("\n") + "\nimport torch.distributed as dist\n\n"

# the solution notebook's code (solutions/15_ring_attention.ipynb), tagged for the mutants
RING_STEP = (
    HEADER
    + '''
def chunk_positions(seq_len, world_size, layout):
    """Every rank's token positions: contiguous runs, or zigzag pieces r and 2W - 1 - r of 2W."""
    seq = torch.arange(seq_len)
    if layout == "contiguous":
        return list(seq.tensor_split(world_size))
    pieces = seq.tensor_split(2 * world_size)
    return [torch.cat([pieces[r], pieces[2 * world_size - 1 - r]]) for r in range(world_size)]  #ZIGZAG


def ring_step(q, k_chunk, v_chunk, out, lse, rank, source, world_size, seq_len, layout, causal):
    positions = chunk_positions(seq_len, world_size, layout)
    q_pos, k_pos = positions[rank], positions[source]  #POSITIONS
    scores = q @ k_chunk.transpose(-2, -1) / math.sqrt(q.shape[-1])  #SCALE
    if causal:
        hidden = k_pos[None, :] > q_pos[:, None]  #MASK
        if hidden.all():  # the whole chunk comes after this rank's queries: nothing to add
            return out, lse  #EARLY
        scores = scores.masked_fill(hidden, float("-inf"))
    # this chunk's partial result; a row that sees none of its keys gets lse_i = -inf, so weight 0 below
    lse_i = torch.logsumexp(scores, dim=-1)
    out_i = torch.nan_to_num(torch.softmax(scores, dim=-1)) @ v_chunk
    # the merge: each side weighted by its share of the row's softmax sum
    m = torch.maximum(lse, lse_i)  #MAX
    w, w_i = torch.exp(lse - m), torch.exp(lse_i - m)
    new_out = (w[..., None] * out + w_i[..., None] * out_i) / (w + w_i)[..., None]  #MERGE
    new_lse = m + torch.log(w + w_i)  #LSE
    return new_out, new_lse
'''
)

# its exchange: both sends and both receives posted at once, then waited on
RING_EXCHANGE = '''

def ring_exchange(k, v, rank, world_size):
    """Send this rank's K/V chunk to rank + 1 while receiving rank - 1's."""
    nxt, prev = (rank + 1) % world_size, (rank - 1) % world_size  #NEIGHBOURS
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)  # every rank's chunk has this shape
    sends = [dist.P2POp(dist.isend, t, nxt) for t in (k, v)]
    receives = [dist.P2POp(dist.irecv, t, prev) for t in (k_next, v_next)]
    for work in dist.batch_isend_irecv(sends + receives):
        work.wait()
    return k_next, v_next
'''

REFERENCE = RING_STEP + RING_EXCHANGE

ALTERNATIVES = {
    # positions by arithmetic on the pieces' bounds, an additive mask, and the merge by logaddexp: each side
    # rescaled by exp(its lse - the new lse), no special case for a chunk wholly hidden
    "bounds_and_logaddexp": HEADER
    + '''
def bounds(n, parts):
    """Start and end of each of ``parts`` runs of n tokens, the longer runs first (as tensor_split)."""
    base, extra = divmod(n, parts)
    starts = [i * base + min(i, extra) for i in range(parts + 1)]
    return list(zip(starts[:-1], starts[1:]))


def where_tokens_are(rank, seq_len, world_size, layout):
    if layout == "contiguous":
        start, end = bounds(seq_len, world_size)[rank]
        return torch.arange(start, end)
    runs = bounds(seq_len, 2 * world_size)
    early, late = runs[rank], runs[2 * world_size - 1 - rank]
    return torch.cat([torch.arange(*early), torch.arange(*late)])


def ring_step(q, k_chunk, v_chunk, out, lse, rank, source, world_size, seq_len, layout, causal):
    d = q.shape[-1]
    bias = torch.zeros(q.shape[-2], k_chunk.shape[-2])
    if causal:
        qp = where_tokens_are(rank, seq_len, world_size, layout)
        kp = where_tokens_are(source, seq_len, world_size, layout)
        bias = torch.where(kp.view(1, -1) <= qp.view(-1, 1), 0.0, float("-inf"))
    s = torch.einsum("bhqd,bhkd->bhqk", q, k_chunk) / d ** 0.5 + bias
    lse_i = s.logsumexp(-1)
    p = torch.exp(s - torch.where(lse_i.isinf(), 0.0, lse_i).unsqueeze(-1))  # 0 on rows that see nothing
    out_i = torch.einsum("bhqk,bhkd->bhqd", p, v_chunk)
    new_lse = torch.logaddexp(lse, lse_i)
    new_out = out * torch.exp(lse - new_lse).unsqueeze(-1) + out_i * torch.exp(lse_i - new_lse).unsqueeze(-1)
    return new_out, new_lse


def ring_exchange(k, v, rank, world_size):
    """K and V as one message: an isend and an irecv, each waited on."""
    kv = torch.cat([k, v], dim=-1)
    incoming = torch.empty_like(kv)
    sending = dist.isend(kv, dst=(rank + 1) % world_size)
    receiving = dist.irecv(incoming, src=(rank - 1) % world_size)
    sending.wait()
    receiving.wait()
    return incoming[..., : k.shape[-1]], incoming[..., k.shape[-1] :]
''',
    # the step as split-K with two partials: stack the running result and the chunk's, softmax over their lses
    "stacked_partials": HEADER
    + '''
def my_positions(seq_len, world_size, layout):
    if layout == "zigzag":
        pieces = torch.arange(seq_len).tensor_split(2 * world_size)
        return {r: torch.cat((pieces[r], pieces[-1 - r])) for r in range(world_size)}
    return dict(enumerate(torch.arange(seq_len).tensor_split(world_size)))


def ring_step(q, k_chunk, v_chunk, out, lse, rank, source, world_size, seq_len, layout, causal):
    pos = my_positions(seq_len, world_size, layout)
    scores = torch.matmul(q, k_chunk.mT) * q.shape[-1] ** -0.5
    if causal:
        allowed = pos[source].unsqueeze(0) <= pos[rank].unsqueeze(1)
        scores = scores.masked_fill(~allowed, -math.inf)
    chunk_lse = torch.logsumexp(scores, -1)
    chunk_out = F.softmax(scores, -1).nan_to_num(0.0) @ v_chunk
    lses = torch.stack([lse, chunk_lse])  # (2, ...)
    weights = torch.softmax(lses, dim=0)  # each partial's share of the row's sum
    merged = (weights.unsqueeze(-1) * torch.stack([out, chunk_out])).sum(0)
    return merged, torch.logsumexp(lses, dim=0)


def ring_exchange(k, v, rank, world_size):
    """Blocking send and recv, ordered by parity so that every send meets a posted receive."""
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    got_k, got_v = torch.empty_like(k), torch.empty_like(v)
    if rank % 2 == 0:
        dist.send(k, right)
        dist.send(v, right)
        dist.recv(got_k, left)
        dist.recv(got_v, left)
    else:
        dist.recv(got_k, left)
        dist.recv(got_v, left)
        dist.send(k, right)
        dist.send(v, right)
    return got_k, got_v
''',
}

STUB = (
    HEADER
    + """
def ring_step(q, k_chunk, v_chunk, out, lse, rank, source, world_size, seq_len, layout, causal):
    # YOUR CODE HERE
    raise NotImplementedError("your code here")


def ring_exchange(k, v, rank, world_size):
    # YOUR CODE HERE
    raise NotImplementedError("your code here")
"""
)

# (expected diagnosis key, edits of the reference)
MUTANTS = [
    ("ring_zigzag_as_contiguous", {"ZIGZAG": "return list(seq.tensor_split(world_size))"}),
    (
        "ring_zigzag_second_piece",
        {"ZIGZAG": "return [torch.cat([pieces[r], pieces[r + world_size]]) for r in range(world_size)]"},
    ),
    ("ring_causal_mask_local", {"MASK": "hidden = torch.ones(len(q_pos), len(k_pos), dtype=torch.bool).triu(1)"}),
    ("ring_later_chunk_attended", {"MASK": "hidden = (k_pos[None, :] > q_pos[:, None]) & (source == rank)"}),
    ("ring_earlier_chunk_skipped", {"MASK": "hidden = (k_pos[None, :] > q_pos[:, None]) | (source != rank)"}),
    ("ring_merge_without_rescaling", {"MERGE": "new_out = (out + out_i) / 2"}),
    # the merge named by what it does, whatever the control flow around it: no early return for a hidden chunk, the
    # lse by logaddexp, the first chunk kept and the later ones averaged
    (
        "ring_merge_without_rescaling",
        {"MERGE": "new_out = (out + out_i) / 2", "LSE": "new_lse = torch.logaddexp(lse, lse_i)", "EARLY": "pass"},
    ),
    ("ring_merge_without_rescaling", {"MERGE": "new_out = out_i if torch.isinf(lse).all() else (out + out_i) / 2"}),
    ("ring_merge_summed", {"MERGE": "new_out = out + out_i"}),
    ("ring_merge_summed", {"MERGE": "new_out = out + out_i", "EARLY": "pass"}),
    (
        "ring_merge_relative_to_running",
        {  # the chunk weighted against the running lse: overflows on a later chunk
            "MAX": "m = torch.where(torch.isinf(lse), lse_i, lse)",
            "MERGE": "r = torch.exp(lse_i - m)[..., None]; new_out = torch.where(torch.isinf(lse)[..., None], out_i, "
            "(out + r * out_i) / (1 + r))",
        },
    ),
    (
        "ring_pieces_by_chunk",
        {
            "ZIGZAG": "pieces = list(seq.chunk(2 * world_size)); "
            "return [torch.cat([pieces[r], pieces[2 * world_size - 1 - r]]) "
            "for r in range(world_size)]"
        },
    ),
    (
        "ring_offsets_from_chunk_length",
        {
            "POSITIONS": "q_pos, k_pos = positions[rank], positions[source]; "
            "q_pos, k_pos = (rank * len(q_pos) + torch.arange(len(q_pos)), "
            "source * len(k_pos) + torch.arange(len(k_pos))) if layout == 'contiguous' "
            "else (q_pos, k_pos)"
        },
    ),
    ("ring_merge_without_max", {"MAX": "m = torch.zeros_like(lse)"}),
    ("ring_lse_not_updated", {"LSE": "new_lse = lse"}),
    ("no_scale", {"SCALE": "scores = q @ k_chunk.transpose(-2, -1)"}),
    ("ring_passed_backwards", {"NEIGHBOURS": "nxt, prev = (rank - 1) % world_size, (rank + 1) % world_size"}),
]

# an exchange through a collective: every rank gathers every chunk (the received ones are right, the ring is not)
ALL_GATHER = (
    RING_STEP
    + """

def ring_exchange(k, v, rank, world_size):
    ks, vs = [torch.empty_like(k) for _ in range(world_size)], [torch.empty_like(v) for _ in range(world_size)]
    dist.all_gather(ks, k)
    dist.all_gather(vs, v)
    return ks[(rank - 1) % world_size], vs[(rank - 1) % world_size]
"""
)
MUTANTS.append(("ring_exchange_collective", ALL_GATHER))

# the exchanges that deadlock: (expected diagnosis key, the reference's step with this exchange)
DEADLOCKS = {
    "send_first": RING_STEP
    + """

def ring_exchange(k, v, rank, world_size):
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)
    dist.send(k, (rank + 1) % world_size)  # every rank sends first: no receive is ever posted
    dist.send(v, (rank + 1) % world_size)
    dist.recv(k_next, (rank - 1) % world_size)
    dist.recv(v_next, (rank - 1) % world_size)
    return k_next, v_next
""",
    "recv_first": RING_STEP
    + """

def ring_exchange(k, v, rank, world_size):
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)
    dist.recv(k_next, (rank - 1) % world_size)  # every rank receives first: nothing is ever sent
    dist.recv(v_next, (rank - 1) % world_size)
    dist.send(k, (rank + 1) % world_size)
    dist.send(v, (rank + 1) % world_size)
    return k_next, v_next
""",
}


# --- the fixture, in the contract test's one shape (tests/grade/exercises/fixtures.py) -------------------------

FIXTURES = {"ring_attention": {"reference": REFERENCE, "alternatives": ALTERNATIVES, "stubs": {"stub": STUB}, "mutants": MUTANTS}}
