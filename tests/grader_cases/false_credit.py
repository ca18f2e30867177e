"""Learner-style code that earned false credit before issue 21 (exercises 08-11), and honest alternatives that
must keep passing: each dodge with the diagnosis the grader must now give."""
from tests.grader_cases.beyond import MLA, ONLINE, ROPE
from tests.grader_cases.implementations import HEADER, mutate

# --- a cache of its own: the past_key_value handed in is only looked at to decide "is there a past" -------------

_OWN = "        own = self.own if past_key_value is not None else None  # what it cached itself\n"

ROPE_OWN_CACHE = mutate(ROPE, {
    "CATK": "k, v = torch.cat([own[0], k], dim=2), torch.cat([own[1], v], dim=2)",
    "PRESENT": "present = (k, v) if use_cache else None; self.own = present or self.own",
}).replace("            v = torch.cat([past_key_value[1], v], dim=2)\n", "").replace(
    "        past = 0 if past_key_value is None else past_key_value[0].shape[2]\n",
    _OWN + "        past = 0 if own is None else own[0].shape[2]\n").replace(
    "if past_key_value is not None:\n            k, v", "if own is not None:\n            k, v").replace(
    "        self.rope_base = rope_base\n", "        self.rope_base = rope_base\n        self.own = None\n")

MLA_OWN_CACHE = mutate(MLA, {
    "PRESENT": "present = (c_kv, k_rope) if use_cache else None; self.own = present or self.own",
}).replace("        past = 0 if past_key_value is None else past_key_value[0].shape[1]\n",
           _OWN + "        past = 0 if own is None else own[0].shape[1]\n").replace(
    "        if past_key_value is not None:\n"
    "            c_kv = torch.cat([past_key_value[0], c_kv], dim=1)\n"
    "            k_rope = torch.cat([past_key_value[1], k_rope], dim=1)\n",
    "        if own is not None:\n"
    "            c_kv, k_rope = torch.cat([own[0], c_kv], dim=1), torch.cat([own[1], k_rope], dim=1)\n").replace(
    "        self.dc, self.r = kv_latent_dim, rope_dim\n", "        self.dc, self.r = kv_latent_dim, rope_dim\n"
    "        self.own = None\n")

# --- MLA whose absorb flag changes nothing: the explicit path (per-head K/V) in both modes --------------------

MLA_ABSORB_IGNORED = MLA.replace("def forward(self, x, past_key_value=None, use_cache=False, absorb=False):\n",
                                 "def forward(self, x, past_key_value=None, use_cache=False, absorb=False):\n"
                                 "        absorb = False  # the same outputs either way\n")

MLA_ABSORB_IGNORED_SDPA = mutate(MLA, {
    "SCALE": "k_full = torch.cat([self.W_uk(c_kv).view(b, N, self.nh, self.hd).transpose(1, 2), "
             "k_rope[:, None].expand(b, self.nh, N, self.r)], dim=-1); "
             "allow = torch.ones(n, N, dtype=torch.bool).tril(diagonal=past); "
             "ctx = F.scaled_dot_product_attention(torch.cat([q_nope, q_rope], dim=-1), k_full, "
             "self.W_uv(c_kv).view(b, N, self.nh, self.hd).transpose(1, 2), attn_mask=allow); "
             "return self.out_proj(ctx.transpose(1, 2).reshape(b, n, self.d_out)), present"})

# absorbs W_uk for the scores but builds the per-head values W_uv(c_kv) of every token
MLA_VALUES_NOT_ABSORBED = MLA.replace(
    "            ctx = (w @ c_kv[:, None]) @ w_uv.transpose(-2, -1)\n",
    "            ctx = w @ self.W_uv(c_kv).view(b, N, self.nh, self.hd).transpose(1, 2)\n")

# honest: absorbed through einsum, the absorbed query computed from precomputed (d_in -> latent) weights
MLA_EINSUM_ABSORBED = MLA.replace(
    "            scores = (q_nope @ w_uk) @ c_kv[:, None].transpose(-2, -1)\n",
    "            q_lat = torch.einsum('bhnd,hdc->bhnc', q_nope, w_uk)  # (b, nh, n, dc)\n"
    "            scores = torch.einsum('bhnc,bmc->bhnm', q_lat, c_kv)\n").replace(
    "            ctx = (w @ c_kv[:, None]) @ w_uv.transpose(-2, -1)\n",
    "            ctx = torch.einsum('bhnc,hdc->bhnd', torch.einsum('bhnm,bmc->bhnc', w, c_kv), w_uv)\n")

# --- the online softmax without tiles: query strips with a plain softmax, the full matrix elsewhere ------------

ONLINE_STRIPS = HEADER + '''
def online_softmax_attention(q, k, v, block_size, causal=False):
    n_q, n_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    outs, lses = [], []
    for qs in range(0, n_q, block_size):  # one strip of queries against every key: a plain softmax
        s = q[..., qs:qs + block_size, :] @ k.transpose(-2, -1) / math.sqrt(d)
        if causal:
            rows = torch.arange(qs, qs + s.shape[-2])[:, None] + (n_k - n_q)
            s = s.masked_fill(torch.arange(n_k)[None, :] > rows, -torch.inf)
        outs.append(torch.softmax(s, dim=-1) @ v)
        lses.append(torch.logsumexp(s, dim=-1))
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)
'''

ONLINE_NUMPY_FULL = HEADER + '''
import numpy as np


def online_softmax_attention(q, k, v, block_size, causal=False):
    qn, kn, vn = q.numpy().astype(np.float64), k.numpy().astype(np.float64), v.numpy().astype(np.float64)
    n_q, n_k, d = qn.shape[-2], kn.shape[-2], qn.shape[-1]
    s = qn @ np.swapaxes(kn, -1, -2) / np.sqrt(d)  # the whole (n_q, n_k) matrix, out of torch's sight
    if causal:
        s = np.where(np.arange(n_k)[None, :] > np.arange(n_q)[:, None] + (n_k - n_q), -np.inf, s)
    m = s.max(-1, keepdims=True)
    p = np.exp(s - m)
    l = p.sum(-1, keepdims=True)
    out = (p / l) @ vn
    lse = (m + np.log(l))[..., 0]
    return torch.from_numpy(out).to(q.dtype), torch.from_numpy(lse).to(q.dtype)
'''

ONLINE_THREAD_FULL = HEADER + '''
import threading


def online_softmax_attention(q, k, v, block_size, causal=False):
    box = {}

    def work():  # another thread: torch functions there are not traced by the grader's mode
        n_q, n_k = q.shape[-2], k.shape[-2]
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.arange(n_k)[None, :] > torch.arange(n_q)[:, None] + (n_k - n_q), -torch.inf)
        box["out"], box["lse"] = torch.softmax(s, dim=-1) @ v, torch.logsumexp(s, dim=-1)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    return box["out"], box["lse"]
'''

# honest: the tiled loop in NumPy (float64 tiles), converted back
ONLINE_NUMPY_TILES = HEADER + '''
import numpy as np


def online_softmax_attention(q, k, v, block_size, causal=False):
    qn, kn, vn = (t.numpy().astype(np.float64) for t in (q, k, v))
    n_q, n_k, d = qn.shape[-2], kn.shape[-2], qn.shape[-1]
    out, lse = np.empty_like(qn), np.empty(qn.shape[:-1])
    for qs in range(0, n_q, block_size):
        qb = qn[..., qs:qs + block_size, :] / np.sqrt(d)
        rows = np.arange(qs, qs + qb.shape[-2])[:, None] + (n_k - n_q)
        m = np.full(qb.shape[:-1], -np.inf)
        l = np.zeros_like(m)
        acc = np.zeros_like(qb)
        for ks in range(0, n_k, block_size):
            s = qb @ np.swapaxes(kn[..., ks:ks + block_size, :], -1, -2)
            if causal:
                s = np.where(np.arange(ks, ks + s.shape[-1])[None, :] > rows, -np.inf, s)
            m_new = np.maximum(m, s.max(-1))
            safe = np.where(np.isinf(m_new), 0.0, m_new)
            p, alpha = np.exp(s - safe[..., None]), np.exp(m - safe)
            l = alpha * l + p.sum(-1)
            acc = alpha[..., None] * acc + p @ vn[..., ks:ks + block_size, :]
            m = m_new
        out[..., qs:qs + block_size, :] = acc / l[..., None]
        lse[..., qs:qs + block_size] = m + np.log(l)
    return torch.from_numpy(out).to(q.dtype), torch.from_numpy(lse).to(q.dtype)
'''

# (source, contract, diagnosis): each dodge and the mistake it must be named as
DODGES = {
    "rope_own_cache": ("rope", ROPE_OWN_CACHE, "cache_ignores_past"),
    "mla_own_cache": ("mla", MLA_OWN_CACHE, "cache_ignores_past"),
    "mla_absorb_ignored": ("mla", MLA_ABSORB_IGNORED, "mla_absorb_ignored"),
    "mla_absorb_ignored_sdpa": ("mla", MLA_ABSORB_IGNORED_SDPA, "mla_absorb_ignored"),
    "mla_values_not_absorbed": ("mla", MLA_VALUES_NOT_ABSORBED, "mla_absorb_ignored"),
    "online_strips": ("online_softmax", ONLINE_STRIPS, "scores_materialised"),
    "online_numpy_full": ("online_softmax", ONLINE_NUMPY_FULL, "scores_materialised"),
    "online_thread_full": ("online_softmax", ONLINE_THREAD_FULL, "scores_materialised"),
}

HONEST = {
    "rope_reference": ("rope", ROPE),
    "mla_reference": ("mla", MLA),
    "mla_einsum_absorbed": ("mla", MLA_EINSUM_ABSORBED),
    "online_reference": ("online_softmax", ONLINE),
    "online_numpy_tiles": ("online_softmax", ONLINE_NUMPY_TILES),
}

# --- the induction head found by a proxy instead of by what the heads do -------------------------------------

INDUCTION_LARGEST_NORM = '''
def find_induction_head(model):
    best, answer = -1.0, None
    for layer, block in enumerate(model.blocks):
        attn, hd = block.attn, model.config.emb_dim // model.config.n_heads
        for head in range(model.config.n_heads):
            rows = slice(head * hd, (head + 1) * hd)
            norm = sum(float(w[rows].norm()) for w in (attn.W_query.weight, attn.W_key.weight, attn.W_value.weight))
            norm += float(attn.out_proj.weight[:, rows].norm())
            if norm > best:
                best, answer = norm, (layer, head)
    return answer
'''

INDUCTION_QUERY_NORM = '''
def find_induction_head(model):
    hd = model.config.emb_dim // model.config.n_heads
    norms = [[float(b.attn.W_query.weight[h * hd:(h + 1) * hd].norm()) for h in range(model.config.n_heads)]
             for b in model.blocks]
    layer = max(range(len(norms)), key=lambda i: max(norms[i]))
    return layer, max(range(len(norms[layer])), key=lambda h: norms[layer][h])
'''

INDUCTION_METADATA = '''
import torch
from course_utils.induction import checkpoint_path


def find_induction_head(model):
    recorded = torch.tensor(torch.load(checkpoint_path("mha"), weights_only=True)["meta"]["scores"]["induction"])
    return divmod(int(recorded.argmax()), recorded.shape[1])
'''

# the recorded head, looked for in the graded model by its query weights (most similar block)
INDUCTION_METADATA_MATCHED = '''
import torch
from course_utils.induction import checkpoint_path


def find_induction_head(model):
    saved = torch.load(checkpoint_path("mha"), weights_only=True)
    recorded = torch.tensor(saved["meta"]["scores"]["induction"])
    layer, head = divmod(int(recorded.argmax()), recorded.shape[1])
    hd = model.config.emb_dim // model.config.n_heads
    target = saved["state_dict"][f"blocks.{layer}.attn.W_query.weight"][head * hd:(head + 1) * hd].flatten()
    best, answer = -2.0, None
    for i, block in enumerate(model.blocks):
        for h in range(model.config.n_heads):
            block_q = block.attn.W_query.weight[h * hd:(h + 1) * hd].flatten()
            similarity = float(torch.nn.functional.cosine_similarity(block_q, target, dim=0))
            if similarity > best:
                best, answer = similarity, (i, h)
    return answer
'''

# (source, diagnosis or None where a wrong answer is all there is to say)
INDUCTION_DODGES = {
    "largest_norm": (INDUCTION_LARGEST_NORM, "largest_weight_norm"),
    "query_norm": (INDUCTION_QUERY_NORM, "largest_weight_norm"),
    "metadata": (INDUCTION_METADATA, "checkpoint_metadata"),
    "metadata_matched": (INDUCTION_METADATA_MATCHED, None),
}
