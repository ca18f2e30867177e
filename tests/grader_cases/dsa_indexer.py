"""Learner-style code for exercise 17a (dsa_indexer): the reference solution (lines tagged ``#TAG``), alternative
correct implementations in other styles (loops with DeepSeek's padding, sort and SDPA, a keep-mask whose -1 slots are
clamped to key 0, harmless there, the indices returned in key order), a stub, and the misconception mutants as line
edits of the reference (``mutate`` from implementations.py) or whole sources."""

from tests.grader_cases.implementations import HEADER

DSA = (
    HEADER
    + """
def dsa_attention(q, k, v, q_idx, k_idx, weights, top_k):
    B, H, T, d = q.shape
    # 1. the lightning indexer: ReLU of each index head's dot product, weighted by the token's signed head weights
    dots = torch.einsum("bthd,bsd->bths", q_idx, k_idx)  # (B, T, H_I, T)
    dots = torch.relu(dots)  #RELU
    w = weights  #WEIGHTS
    scores = (w.unsqueeze(-1) * dots).sum(dim=2)  # (B, T, T): no softmax over the heads
    # 2. causal top-k: a query ranks only the keys it may see; -1 where it sees fewer than top_k
    future = torch.ones(T, T, dtype=torch.bool).triu(1)  #CAUSAL
    values, indices = scores.masked_fill(future, float("-inf")).topk(min(top_k, T), dim=-1)
    indices = indices.masked_fill(values == float("-inf"), -1)
    if top_k > T:
        indices = torch.cat([indices, indices.new_full((B, T, top_k - T), -1)], dim=-1)
    # 3. attention over the selected keys only, the same selection for every head
    keep = torch.zeros(B, T, T + 1, dtype=torch.bool)  # a spare last column takes the -1 slots
    keep.scatter_(-1, indices.masked_fill(indices < 0, T), True)  #PADDING
    keep = keep[..., :T].unsqueeze(1)  #SHARED
    s = (q @ k.transpose(-2, -1)) / math.sqrt(d)
    out = torch.softmax(s.masked_fill(~keep, float("-inf")), dim=-1) @ v
    return out, indices
"""
)

DSA_REFERENCE = DSA

DSA_ALTERNATIVES = {
    # loops over the batch and the queries, the selection gathered and attended key by key (fla's naive style),
    # DeepSeek's padding: top_k indices among the masked scores, the future ones hidden again by the causal mask
    "loops_deepseek_padding": HEADER
    + """
def dsa_attention(q, k, v, q_idx, k_idx, weights, top_k):
    B, H, T, d = q.shape
    out = torch.zeros_like(q)
    indices = torch.full((B, T, top_k), -1, dtype=torch.long)
    for b in range(B):
        per_head = torch.relu(q_idx[b] @ k_idx[b].T)  # (T, H_I, T)
        scores = torch.einsum("th,ths->ts", weights[b], per_head)
        mask = torch.full((T, T), float("-inf")).triu(1)
        chosen = (scores + mask).topk(min(top_k, T), dim=-1).indices  # may hold future keys in the first rows
        for t in range(T):
            keys = [int(s) for s in chosen[t] if int(s) <= t]  # the causal mask hides the future ones again
            indices[b, t, : len(keys)] = torch.tensor(keys)
            sel = torch.tensor(keys)
            att = torch.softmax(torch.einsum("hd,hkd->hk", q[b, :, t], k[b][:, sel]) / d ** 0.5, dim=-1)
            out[b, :, t] = torch.einsum("hk,hkd->hd", att, v[b][:, sel])
    return out, indices
""",
    # an additive bias instead of a boolean mask, sort instead of topk, F.scaled_dot_product_attention
    "sort_and_sdpa": HEADER
    + """
def dsa_attention(q, k, v, q_idx, k_idx, weights, top_k):
    T = q.shape[2]
    score = (F.relu(torch.einsum("bqhd,bkd->bhqk", q_idx, k_idx)) * weights.permute(0, 2, 1)[..., None]).sum(1)
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    order = score.masked_fill(~causal, float("-inf")).argsort(dim=-1, descending=True)[..., :top_k]
    visible = torch.gather(causal.expand(score.shape[0], T, T), -1, order)
    indices = torch.where(visible, order, torch.full_like(order, -1))
    if indices.shape[-1] < top_k:
        indices = F.pad(indices, (0, top_k - indices.shape[-1]), value=-1)
    allowed = torch.zeros_like(score, dtype=torch.bool).scatter(-1, order, visible)
    bias = torch.zeros_like(score).masked_fill(~allowed, float("-inf"))[:, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias), indices
""",
}

# the -1 slots clamped to key 0 in a keep-mask: harmless, since a row with a -1 slot keeps every key it sees, key 0
# included
DSA_ALTERNATIVES["clamped_mask"] = DSA.replace(
    "keep.scatter_(-1, indices.masked_fill(indices < 0, T), True)  #PADDING",
    "keep.scatter_(-1, indices.clamp(min=0), True)",
)

# the indices returned sorted by key (the -1 slots last) instead of by score: the order of the slots is free
DSA_ALTERNATIVES["slots_by_key"] = DSA.replace(
    "    return out, indices\n", "    return out, indices.sort(dim=-1, descending=True).values\n"
)

DSA_STUB = (
    HEADER
    + """
def dsa_attention(q, k, v, q_idx, k_idx, weights, top_k):
    raise NotImplementedError
"""
)

DSA_MUTANTS = [
    (  # the attention masks the future keys, the indices returned keep topk's picks among the -inf scores
        "dsa_indices_not_padded",
        DSA.replace(
            '    indices = indices.masked_fill(values == float("-inf"), -1)\n',
            '    returned = indices\n    indices = indices.masked_fill(values == float("-inf"), -1)\n',
        ).replace("    return out, indices\n", "    return out, returned\n"),
    ),
    (  # argsort without descending=True: the hidden future keys and the lowest scores first
        "dsa_smallest_selected",
        DSA_ALTERNATIVES["sort_and_sdpa"].replace("argsort(dim=-1, descending=True)", "argsort(dim=-1)"),
    ),
    (  # sort without descending=True, then the first top_k: a first row that sees no key it kept is NaN here
        "dsa_smallest_selected",
        DSA.replace(
            '    values, indices = scores.masked_fill(future, float("-inf")).topk(min(top_k, T), dim=-1)\n',
            '    values, indices = scores.masked_fill(future, float("-inf")).sort(dim=-1)\n'
            "    values, indices = values[..., : min(top_k, T)], indices[..., : min(top_k, T)]\n",
        ),
    ),
    ("dsa_no_relu", {"RELU": "dots = dots"}),
    ("dsa_softmax_over_head_weights", {"WEIGHTS": "w = torch.softmax(weights, dim=-1)"}),
    ("dsa_unweighted_heads", {"WEIGHTS": "w = torch.ones_like(weights)"}),
    ("dsa_selection_not_causal", {"CAUSAL": "future = torch.zeros(T, T, dtype=torch.bool)"}),
    (
        "dsa_padding_attended",
        HEADER
        + """
def dsa_attention(q, k, v, q_idx, k_idx, weights, top_k):
    B, H, T, d = q.shape
    scores = (weights.unsqueeze(-1) * torch.relu(torch.einsum("bthd,bsd->bths", q_idx, k_idx))).sum(dim=2)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    values, indices = scores.masked_fill(future, float("-inf")).topk(min(top_k, T), dim=-1)
    indices = indices.masked_fill(values == float("-inf"), -1)
    slots = indices.clamp(min=0)  # a -1 slot gathers key 0, and is attended like the others
    idx = slots[:, None, :, :, None]  # (B, 1, T, K, 1)
    k_sel = k[:, :, None].expand(B, H, T, T, d).gather(3, idx.expand(B, H, T, -1, d))
    v_sel = v[:, :, None].expand(B, H, T, T, d).gather(3, idx.expand(B, H, T, -1, d))
    att = torch.softmax(torch.einsum("bhtd,bhtkd->bhtk", q, k_sel) / math.sqrt(d), dim=-1)
    return torch.einsum("bhtk,bhtkd->bhtd", att, v_sel), indices
""",
    ),
    (
        "dsa_selection_per_head",
        HEADER
        + """
def dsa_attention(q, k, v, q_idx, k_idx, weights, top_k):
    B, H, T, d = q.shape
    dots = torch.einsum("bthd,bsd->bhts", q_idx, k_idx)  # each head ranks the keys by its own dot products
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    values, indices = dots.masked_fill(future, float("-inf")).topk(min(top_k, T), dim=-1)  # (B, H, T, K)
    indices = indices.masked_fill(values == float("-inf"), -1)
    keep = torch.zeros(B, H, T, T + 1, dtype=torch.bool)
    keep.scatter_(-1, indices.masked_fill(indices < 0, T), True)
    s = (q @ k.transpose(-2, -1)) / math.sqrt(d)
    out = torch.softmax(s.masked_fill(~keep[..., :T], float("-inf")), dim=-1) @ v
    return out, indices
""",
    ),
]


FIXTURES = {
    "dsa_indexer": {
        "reference": DSA_REFERENCE,
        "alternatives": DSA_ALTERNATIVES,
        "stubs": {"stub": DSA_STUB},
        "mutants": DSA_MUTANTS,
    }
}
