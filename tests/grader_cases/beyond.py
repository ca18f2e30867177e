"""Learner-style code for exercises 08-10 (rope, online_softmax, mla): a reference solution per exercise (lines
tagged ``#TAG``), alternative correct implementations, and misconception mutants as line edits of the reference
(``mutate`` from implementations.py) or, where one mistake changes several lines, as a whole source."""
from tests.grader_cases.implementations import HEADER, mutate

ROPE = HEADER + '''
class RoPEAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, rope_base=10000.0):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.rope_base = rope_base
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def rope(self, x, positions):
        d = x.shape[-1]
        inv_freq = 1.0 / self.rope_base ** (torch.arange(0, d, 2).float() / d)  #FREQ
        angles = positions.float()[:, None] * inv_freq
        angles = torch.cat([angles, angles], dim=-1)  #TABLE
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        turned = torch.cat([-x2, x1], dim=-1)  #TURN
        return x * angles.cos() + turned * angles.sin()

    def forward(self, x, past_key_value=None, use_cache=False):
        b, n, _ = x.shape
        q = self.W_query(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.W_key(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.W_value(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        past = 0 if past_key_value is None else past_key_value[0].shape[2]
        positions = torch.arange(past, past + n)  #POS
        q = self.rope(q, positions)  #ROTQ
        k = self.rope(k, positions)  #ROTK
        v = v  #ROTV
        if past_key_value is not None:
            k = torch.cat([past_key_value[0], k], dim=2)  #CATK
            v = torch.cat([past_key_value[1], v], dim=2)
        present = (k, v) if use_cache else None  #PRESENT
        scores = q @ k.transpose(2, 3) / math.sqrt(self.head_dim)
        hide = self.mask.bool()[past:past + n, :past + n]  #MASK
        w = self.dropout(torch.softmax(scores.masked_fill(hide, -torch.inf), dim=-1))
        ctx = (w @ v).transpose(1, 2).reshape(b, n, self.d_out)
        return self.out_proj(ctx), present
'''

ONLINE = HEADER + '''
def online_softmax_attention(q, k, v, block_size, causal=False):
    n_q, n_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:-1])
    for qs in range(0, n_q, block_size):
        qe = min(qs + block_size, n_q)
        q_blk = q[..., qs:qe, :] / math.sqrt(d)  #SCALE
        m = torch.full(q_blk.shape[:-1], -torch.inf)
        l = torch.zeros_like(m)
        acc = torch.zeros_like(q_blk)
        stop = min(n_k, qe) if causal else n_k  #SKIP
        for ks in range(0, stop, block_size):
            s = q_blk @ k[..., ks:ks + block_size, :].transpose(-2, -1)  #TILE
            if causal:
                q_pos = torch.arange(qs, qe)[:, None]
                k_pos = torch.arange(ks, ks + s.shape[-1])[None, :]
                s = s.masked_fill(k_pos > q_pos, -torch.inf)  #CAUSALMASK
            m_new = torch.maximum(m, s.amax(dim=-1))
            p = torch.exp(s - m_new[..., None])  #EXP
            alpha = torch.exp(m - m_new)  #ALPHA
            l = alpha * l + p.sum(dim=-1)  #SUM
            acc = alpha[..., None] * acc + p @ v[..., ks:ks + block_size, :]  #ACC
            pass  #INLOOP
            m = m_new  #UPDATE
        out[..., qs:qe, :] = acc / l[..., None]  #DIVIDE
        lse[..., qs:qe] = m + torch.log(l)  #LSE
    return out, lse
'''

MLA = HEADER + '''
class MultiHeadLatentAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, kv_latent_dim, rope_dim):
        super().__init__()
        self.d_out, self.nh, self.hd = d_out, num_heads, d_out // num_heads
        self.dc, self.r = kv_latent_dim, rope_dim
        self.W_query = nn.Linear(d_in, num_heads * (self.hd + rope_dim), bias=False)
        self.W_dkv = nn.Linear(d_in, kv_latent_dim, bias=False)
        self.W_kr = nn.Linear(d_in, rope_dim, bias=False)
        self.W_uk = nn.Linear(kv_latent_dim, d_out, bias=False)
        self.W_uv = nn.Linear(kv_latent_dim, d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def rope(self, x, positions):
        d = x.shape[-1]
        angles = positions.float()[:, None] / 10000.0 ** (torch.arange(0, d, 2).float() / d)
        angles = torch.cat([angles, angles], dim=-1)
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return x * angles.cos() + torch.cat([-x2, x1], dim=-1) * angles.sin()

    def forward(self, x, past_key_value=None, use_cache=False, absorb=False):
        b, n, _ = x.shape
        q = self.W_query(x).view(b, n, self.nh, self.hd + self.r).transpose(1, 2)
        q_nope, q_rope = q[..., :self.hd], q[..., self.hd:]
        c_kv, k_rope = self.W_dkv(x), self.W_kr(x)
        past = 0 if past_key_value is None else past_key_value[0].shape[1]
        positions = torch.arange(past, past + n)  #POS
        q_rope, k_rope = self.rope(q_rope, positions), self.rope(k_rope, positions)
        c_kv = c_kv  #ROTC
        if past_key_value is not None:
            c_kv = torch.cat([past_key_value[0], c_kv], dim=1)
            k_rope = torch.cat([past_key_value[1], k_rope], dim=1)
        present = (c_kv, k_rope) if use_cache else None  #PRESENT
        N = c_kv.shape[1]
        w_uk = self.W_uk.weight.view(self.nh, self.hd, self.dc)  #WUK
        w_uv = self.W_uv.weight.view(self.nh, self.hd, self.dc)  #WUV
        if absorb:
            scores = (q_nope @ w_uk) @ c_kv[:, None].transpose(-2, -1)
        else:
            k_nope = self.W_uk(c_kv).view(b, N, self.nh, self.hd).transpose(1, 2)
            scores = q_nope @ k_nope.transpose(-2, -1)
        scores = scores + q_rope @ k_rope[:, None].transpose(-2, -1)
        scores = scores / math.sqrt(self.hd + self.r)  #SCALE
        hide = self.mask.bool()[past:past + n, :N]
        w = self.dropout(torch.softmax(scores.masked_fill(hide, -torch.inf), dim=-1))
        if absorb:
            ctx = (w @ c_kv[:, None]) @ w_uv.transpose(-2, -1)
        else:
            ctx = w @ self.W_uv(c_kv).view(b, N, self.nh, self.hd).transpose(1, 2)
        return self.out_proj(ctx.transpose(1, 2).reshape(b, n, self.d_out)), present
'''

REFERENCE = {"rope": ROPE, "online_softmax": ONLINE, "mla": MLA}

# --- alternative correct implementations -------------------------------------------------------------

ALTERNATIVES = {
    "rope": {
        # complex multiplication on (i, i + d/2) pairs, as in Meta's code but with the rotate-half pairing
        "complex_polar": mutate(ROPE, {
            "FREQ": "inv_freq = self.rope_base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)",
            "TABLE": "z = torch.complex(x[..., : d // 2].double(), x[..., d // 2:].double()) * torch.polar("
                     "torch.ones(len(positions), d // 2, dtype=torch.float64), positions.double()[:, None] * inv_freq)",
            "TURN": "return torch.cat([z.real, z.imag], dim=-1).float()"}),
        # the cos/sin tables precomputed for every position, sliced [past:past + n]; SDPA with a bottom-right mask
        "table_buffer_sdpa": mutate(ROPE, {
            "POS": "positions = torch.arange(past, past + n)  # checked below",
            "MASK": "allow = torch.ones(n, past + n, dtype=torch.bool).tril(diagonal=past); "
                    "return self.out_proj(F.scaled_dot_product_attention(q, k, v, attn_mask=allow, "
                    "dropout_p=self.dropout.p if self.training else 0.0)"
                    ".transpose(1, 2).reshape(b, n, self.d_out)), present"}),
        # rotate_half through chunk, applied to q and k stacked together
        "chunk_stacked": mutate(ROPE, {
            "TURN": "x1, x2 = x.chunk(2, dim=-1); turned = torch.cat((-x2, x1), dim=-1)",
            "ROTQ": "q, k = self.rope(torch.stack([q, k]), positions).unbind(0)",
            "ROTK": "pass"}),
    },
    "online_softmax": {
        # key tiles only (all queries at once), -1e30 instead of -inf, the scale applied to the scores
        "key_tiles_only": HEADER + '''
def online_softmax_attention(q, k, v, block_size, causal=False):
    n_q, n_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    m = torch.full(q.shape[:-1], -1e30)
    l = torch.zeros_like(m)
    acc = torch.zeros_like(q)
    for ks in range(0, n_k, block_size):
        s = q @ k[..., ks:ks + block_size, :].transpose(-2, -1) * d ** -0.5
        if causal:
            s = s.masked_fill(torch.arange(ks, ks + s.shape[-1])[None, :] > torch.arange(n_q)[:, None], -1e30)
        m_new = torch.maximum(m, s.amax(-1))
        p = torch.exp(s - m_new.unsqueeze(-1))
        scale = torch.exp(m - m_new)
        l = l * scale + p.sum(-1)
        acc = acc * scale.unsqueeze(-1) + p @ v[..., ks:ks + block_size, :]
        m = m_new
    return acc / l.unsqueeze(-1), m + l.log()
''',
        # einsum, query tiles in the outer loop, logaddexp to carry the log-sum-exp instead of (m, l)
        "einsum_logaddexp": HEADER + '''
def online_softmax_attention(q, k, v, block_size, causal=False):
    T_q, T_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    outs, lses = [], []
    for i in range(0, T_q, block_size):
        qi = q[..., i:i + block_size, :]
        lse = torch.full(qi.shape[:-1], float("-inf"))
        o = torch.zeros_like(qi)
        for j in range(0, T_k, block_size):
            if causal and j > i + qi.shape[-2] - 1:
                break
            s = torch.einsum("bhqd,bhkd->bhqk", qi, k[..., j:j + block_size, :]) / math.sqrt(d)
            if causal:
                rows = torch.arange(i, i + qi.shape[-2]).view(-1, 1)
                cols = torch.arange(j, j + s.shape[-1]).view(1, -1)
                s = torch.where(cols <= rows, s, torch.tensor(float("-inf")))
            tile_lse = torch.logsumexp(s, dim=-1)
            new_lse = torch.logaddexp(lse, tile_lse)
            o = o * torch.exp(lse - new_lse)[..., None] + torch.exp(s - new_lse[..., None]) @ v[..., j:j + block_size, :]
            lse = new_lse
        outs.append(o)
        lses.append(lse)
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)
''',
        # the reference with the division by l guarded, and its lse computed from the final m and l in float64
        "guarded_division": mutate(ONLINE, {
            "DIVIDE": "out[..., qs:qe, :] = torch.where(l[..., None] > 0, acc / l.clamp_min(1e-30)[..., None], 0.0)",
            "LSE": "lse[..., qs:qe] = (m.double() + torch.log(l.double())).float()"}),
    },
    "mla": {
        # explicit only through per-head einsum, absorbed form through precomputed absorbed weights
        "einsum_absorbed_weights": mutate(MLA, {
            "WUK": "w_uk = self.W_uk.weight.T.reshape(self.dc, self.nh, self.hd).permute(1, 2, 0)",
            "WUV": "w_uv = self.W_uv.weight.T.reshape(self.dc, self.nh, self.hd).permute(1, 2, 0)",
            "SCALE": "scores = scores * (self.hd + self.r) ** -0.5"}),
        # explicit: full per-head keys [k_nope ; k_rope] built from the cache and one SDPA call; absorbed as usual
        "sdpa_full_keys": mutate(MLA, {
            "SCALE": "scores = scores / math.sqrt(self.hd + self.r)\n        "
                     "if not absorb: k_full = torch.cat([self.W_uk(c_kv).view(b, N, self.nh, self.hd).transpose(1, 2), "
                     "k_rope[:, None].expand(b, self.nh, N, self.r)], dim=-1); "
                     "allow = torch.ones(n, N, dtype=torch.bool).tril(diagonal=past); "
                     "ctx = F.scaled_dot_product_attention(torch.cat([q_nope, q_rope], dim=-1), k_full, "
                     "self.W_uv(c_kv).view(b, N, self.nh, self.hd).transpose(1, 2), attn_mask=allow, "
                     "dropout_p=self.dropout.p if self.training else 0.0); "
                     "return self.out_proj(ctx.transpose(1, 2).reshape(b, n, self.d_out)), present"}),
    },
}

# a whole forward, not an edit: caching per-head keys and values consistently changes several lines
MLA_UP_PROJECTED = MLA[:MLA.index("    def forward")] + '''    def forward(self, x, past_key_value=None, use_cache=False, absorb=False):
        b, n, _ = x.shape
        q = self.W_query(x).view(b, n, self.nh, self.hd + self.r).transpose(1, 2)
        q_nope, q_rope = q[..., :self.hd], q[..., self.hd:]
        c_kv, k_rope = self.W_dkv(x), self.W_kr(x)
        past = 0 if past_key_value is None else past_key_value[0].shape[2]
        positions = torch.arange(past, past + n)
        q_rope, k_rope = self.rope(q_rope, positions), self.rope(k_rope, positions)
        keys = torch.cat([self.W_uk(c_kv).view(b, n, self.nh, self.hd).transpose(1, 2),
                          k_rope[:, None].expand(b, self.nh, n, self.r)], dim=-1)  # (b, nh, n, hd + r)
        values = self.W_uv(c_kv).view(b, n, self.nh, self.hd).transpose(1, 2)
        if past_key_value is not None:
            keys = torch.cat([past_key_value[0], keys], dim=2)
            values = torch.cat([past_key_value[1], values], dim=2)
        present = (keys, values) if use_cache else None
        N = keys.shape[2]
        scores = torch.cat([q_nope, q_rope], dim=-1) @ keys.transpose(-2, -1) / math.sqrt(self.hd + self.r)
        hide = self.mask.bool()[past:past + n, :N]
        w = torch.softmax(scores.masked_fill(hide, -torch.inf), dim=-1)
        return self.out_proj((w @ values).transpose(1, 2).reshape(b, n, self.d_out)), present
'''

# --- stubs ------------------------------------------------------------------------------------------

STUB_FUNCTION = HEADER + '''
def online_softmax_attention(q, k, v, block_size, causal=False):
    # YOUR CODE HERE
    raise NotImplementedError("your code here")
'''

# --- misconception mutants: (expected diagnosis key, edits of the reference) --------------------------

MUTANTS = {
    "rope": [
        ("rope_on_values", {"ROTV": "v = self.rope(v, positions)"}),
        ("rope_positions_restart", {"POS": "positions = torch.arange(n)"}),
        ("rope_interleaved_pairs", {"TABLE": "angles = angles.repeat_interleave(2, dim=-1)",
                                    "TURN": "turned = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)"}),
        ("rope_freq_d_model", {"FREQ": "inv_freq = 1.0 / self.rope_base ** (torch.arange(0, d, 2).float() / self.d_out)"}),
        ("rope_after_cache", {"ROTK": "pass",
                              "CATK": "k = torch.cat([past_key_value[0], k], dim=2)",
                              "PRESENT": "k = self.rope(k, torch.arange(past + n)); present = (k, v) if use_cache else None"}),
        ("rope_after_cache", {"ROTK": "pass",
                              "PRESENT": "present = (k, v) if use_cache else None; k = self.rope(k, torch.arange(past + n))"}),
        ("rope_missing", {"ROTQ": "pass", "ROTK": "pass"}),
        ("rope_wrong_direction", {"TURN": "turned = torch.cat([x2, -x1], dim=-1)"}),
    ],
    "online_softmax": [
        ("max_not_updated", {"UPDATE": "pass"}),
        ("no_running_max", {"EXP": "p = torch.exp(s)", "ALPHA": "alpha = torch.ones_like(m)",
                            "LSE": "lse[..., qs:qe] = torch.log(l)"}),
        ("output_not_rescaled", {"ACC": "acc = acc + p @ v[..., ks:ks + block_size, :]"}),
        ("sum_not_rescaled", {"SUM": "l = l + p.sum(dim=-1)"}),
        ("divided_too_early", {"INLOOP": "acc = acc / l[..., None]", "DIVIDE": "out[..., qs:qe, :] = acc"}),
        ("causal_blocks_skipped_wrongly", {"SKIP": "stop = min(n_k, qs) if causal else n_k"}),
        ("causal_tile_not_masked", {"CAUSALMASK": "pass"}),
        ("lse_without_max", {"LSE": "lse[..., qs:qe] = torch.log(l)"}),
        ("no_scale", {"SCALE": "q_blk = q[..., qs:qe, :]"}),
        ("scores_materialised", {"SKIP": "full = q @ k.transpose(-2, -1); stop = min(n_k, qe) if causal else n_k"}),
    ],
    "mla": [
        ("mla_cache_up_projected", MLA_UP_PROJECTED),
        ("mla_rope_on_compressed_key", {"ROTC": "c_kv = self.rope(c_kv, positions)"}),
        ("mla_absorb_wrong_transpose", {"WUK": "w_uk = self.W_uk.weight.view(self.dc, self.nh, self.hd).permute(1, 2, 0)"}),
        ("mla_absorb_wrong_transpose", {"WUV": "w_uv = self.W_uv.weight.view(self.dc, self.nh, self.hd).permute(1, 2, 0)"}),
        ("mla_scale_without_rope", {"SCALE": "scores = scores / math.sqrt(self.hd)"}),
        ("rope_positions_restart", {"POS": "positions = torch.arange(n)"}),
        ("cache_only_new", {"PRESENT": "present = (c_kv[:, past:], k_rope[:, past:]) if use_cache else None"}),
    ],
}

# --- dropout in training mode: (exercise, expected diagnosis or None for a pass, source) -------------------

_WEIGHTS = "        w = self.dropout(torch.softmax(scores.masked_fill(hide, -torch.inf), dim=-1))\n"
_NO_DROPOUT = "        w = torch.softmax(scores.masked_fill(hide, -torch.inf), dim=-1)\n"


def _dropout_moved(exercise, old, new):
    """The reference with its dropout taken off the attention weights and put where ``new`` puts it."""
    src = REFERENCE[exercise].replace(_WEIGHTS, _NO_DROPOUT)
    assert src.count(old) == 1, old
    return src.replace(old, new)


_ROPE_OUT = "        return self.out_proj(ctx), present"
_MLA_OUT = "        return self.out_proj(ctx.transpose(1, 2).reshape(b, n, self.d_out)), present"
_MLA_ABSORBED = "            ctx = (w @ c_kv[:, None]) @ w_uv.transpose(-2, -1)"
DROPOUT = [
    # honest: F.dropout on the weights, with the module's training flag
    ("rope", None, _dropout_moved("rope", _NO_DROPOUT, _NO_DROPOUT.replace(
        "dim=-1)", "dim=-1)\n        w = F.dropout(w, p=self.dropout.p, training=self.training)"))),
    ("mla", None, _dropout_moved("mla", _NO_DROPOUT, _NO_DROPOUT.replace(
        "dim=-1)", "dim=-1)\n        w = F.dropout(w, self.dropout.p, self.training)"))),
    # on the output, after out_proj
    ("rope", "dropout_on_output", _dropout_moved("rope", _ROPE_OUT, _ROPE_OUT.replace(
        "self.out_proj(ctx)", "self.dropout(self.out_proj(ctx))"))),
    ("mla", "dropout_on_output", _dropout_moved("mla", _MLA_OUT, _MLA_OUT.replace(
        "return self.out_proj(", "return self.dropout(self.out_proj(").replace(", present", "), present"))),
    # on the values (the latents, in MLA's absorbed path): every query drops the same keys
    ("rope", "dropout_on_values", _dropout_moved("rope", "        v = v  #ROTV", "        v = self.dropout(v)")),
    ("mla", "dropout_on_values", _dropout_moved("mla", _MLA_ABSORBED, _MLA_ABSORBED.replace(
        "c_kv[:, None]", "self.dropout(c_kv)[:, None]"))),
    # none at all, and F.dropout without training=self.training (active in eval mode)
    ("rope", "dropout_ignored", REFERENCE["rope"].replace(_WEIGHTS, _NO_DROPOUT)),
    ("mla", "dropout_in_eval", _dropout_moved("mla", _NO_DROPOUT, _NO_DROPOUT.replace(
        "dim=-1)", "dim=-1)\n        w = F.dropout(w, self.dropout.p)"))),
]


# --- the fixtures of exercises 08-10, in the contract test's one shape (tests/grade/exercises/fixtures.py) -----

FIXTURES = {ex: {"reference": REFERENCE[ex], "alternatives": ALTERNATIVES[ex], "mutants": MUTANTS[ex]} for ex in REFERENCE}
FIXTURES["online_softmax"]["stubs"] = {"function": STUB_FUNCTION}
