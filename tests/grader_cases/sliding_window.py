"""Learner-style code for exercise 12 (sliding_window): the solution notebook's class (lines tagged ``#TAG``), two
alternative correct implementations in other styles, and the misconception mutants as line edits of the reference
(``mutate``) or, where one mistake changes several lines, as a whole source.

The mistakes are the ones ``long_context.MUTANTS`` patches into ``course_utils.reference.sliding_window``, written
the way a learner writes them: ``LONG_CONTEXT_KEYS`` maps each of those to the grader's diagnosis."""

from tests.grader_cases.implementations import HEADER, mutate

REFERENCE = (
    HEADER
    + """
def rope_angles(positions, head_dim, base):
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = positions.float()[:, None] * inv_freq
    return torch.cat([angles, angles], dim=-1)


def apply_rope(x, angles):
    x1, x2 = x.chunk(2, dim=-1)
    return x * angles.cos() + torch.cat([-x2, x1], dim=-1) * angles.sin()


class SlidingWindowAttention(nn.Module):
    def __init__(self, d_in, d_out, num_heads, window, num_sinks=0, rope_base=10000.0):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.window, self.num_sinks, self.rope_base = window, num_sinks, rope_base
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)

    def slot(self, position):
        if position < self.num_sinks:
            return position
        return self.num_sinks + (position - self.num_sinks) % self.window  #SLOT

    def forward(self, x, past_key_value=None, use_cache=False, start_pos=0):
        b, n, _ = x.shape
        split = lambda t: t.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        queries, keys, values = split(self.W_query(x)), split(self.W_key(x)), split(self.W_value(x))
        positions = list(range(start_pos, start_pos + n))
        angles = rope_angles(torch.tensor(positions), self.head_dim, self.rope_base)  #ANGLES
        queries, keys = apply_rope(queries, angles), apply_rope(keys, angles)  #ROTATE
        size = self.num_sinks + self.window
        if past_key_value is None:
            cache_k = keys.new_zeros(b, self.num_heads, size, self.head_dim)  #NEW_K
            cache_v = values.new_zeros(b, self.num_heads, size, self.head_dim)  #NEW_V
        else:
            cache_k, cache_v = past_key_value[0].clone(), past_key_value[1].clone()
        held = (list(range(min(self.num_sinks, start_pos)))
                + list(range(max(self.num_sinks, start_pos - self.window), start_pos)))
        slots = [self.slot(p) for p in held]  #READ
        all_k = torch.cat([cache_k[:, :, slots], keys], dim=2)  #ALL_K
        all_v = torch.cat([cache_v[:, :, slots], values], dim=2)  #ALL_V
        q_pos = torch.tensor(positions)[:, None]
        k_pos = torch.tensor(held + positions)[None, :]
        too_old = (k_pos <= q_pos - self.window) & (k_pos >= self.num_sinks)  #WINDOW
        hide = (k_pos > q_pos) | too_old
        scores = queries @ all_k.transpose(2, 3) / math.sqrt(self.head_dim)
        weights = torch.softmax(scores.masked_fill(hide, -torch.inf), dim=-1)
        context = (weights @ all_v).transpose(1, 2).reshape(b, n, self.d_out)
        for i, p in enumerate(positions):
            cache_k[:, :, self.slot(p)] = keys[:, :, i]  #WRITE_K
            cache_v[:, :, self.slot(p)] = values[:, :, i]  #WRITE_V
        present = (cache_k, cache_v) if use_cache else None  #PRESENT
        return self.out_proj(context), present
"""
)

# --- alternative correct implementations --------------------------------------------------------------

# Every slot read in slot order, each with the position it holds (computed, not reordered); vectorised writes of
# only the last `window` new tokens with index_copy_; the window as a band of position differences.
BY_SLOT_POSITIONS = (
    HEADER
    + """
class SlidingWindowAttention(nn.Module):
    def __init__(self, d_in, d_out, num_heads, window, num_sinks=0, rope_base=10000.0):
        super().__init__()
        self.h, self.hd, self.w, self.s = num_heads, d_out // num_heads, window, num_sinks
        inv = rope_base ** (-torch.arange(0, self.hd, 2, dtype=torch.float64) / self.hd)
        self.register_buffer("inv_freq", inv, persistent=False)
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)

    def rope(self, x, pos):
        ang = pos.double()[:, None] * self.inv_freq
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        a, b = x[..., : self.hd // 2], x[..., self.hd // 2:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)

    def slot_positions(self, seen):
        sinks = torch.arange(self.s)
        r = torch.arange(self.w)
        ring = seen - 1 - (seen - 1 - self.s - r) % self.w  # the newest position that went into ring slot r
        pos = torch.cat([sinks, ring])
        ok = torch.cat([sinks < seen, (ring >= self.s) & (ring < seen)])
        return torch.where(ok, pos, torch.full_like(pos, -10**9))

    def forward(self, x, past_key_value=None, use_cache=False, start_pos=0):
        B, T, _ = x.shape
        heads = lambda t: t.reshape(B, T, self.h, self.hd).permute(0, 2, 1, 3)
        pos = torch.arange(start_pos, start_pos + T)
        q = self.rope(heads(self.W_query(x)), pos)
        k = self.rope(heads(self.W_key(x)), pos)
        v = heads(self.W_value(x))
        if past_key_value is None:
            ck = torch.zeros(B, self.h, self.s + self.w, self.hd)
            cv = torch.zeros_like(ck)
        else:
            ck, cv = past_key_value
        kpos = torch.cat([self.slot_positions(start_pos), pos])
        dist = pos[:, None] - kpos[None, :]
        visible = (dist >= 0) & ((dist < self.w) | ((kpos[None, :] >= 0) & (kpos[None, :] < self.s)))
        visible &= kpos[None, :] >= 0
        att = torch.einsum("bhqd,bhkd->bhqk", q, torch.cat([ck, k], 2)) * self.hd ** -0.5
        att = att.masked_fill(~visible, float("-inf")).softmax(-1)
        y = torch.einsum("bhqk,bhkd->bhqd", att, torch.cat([cv, v], 2))
        out = self.out_proj(y.permute(0, 2, 1, 3).reshape(B, T, -1))
        if not use_cache:
            return out, None
        keep = pos < self.s  # sinks: their own slots
        keep |= pos >= max(self.s, start_pos + T - self.w)  # the ring keeps only the last `window` tokens
        slots = torch.where(pos < self.s, pos, self.s + (pos - self.s) % self.w)[keep]
        ck = ck.clone().index_copy_(2, slots, k[:, :, keep])
        cv = cv.clone().index_copy_(2, slots, v[:, :, keep])
        return out, (ck, cv)
"""
)

# One token at a time, write first, then attend to every slot written so far: a ring of `window` slots then holds
# exactly the window i - window + 1 .. i, so no position mask is needed, only "written yet?".
TOKEN_BY_TOKEN = (
    HEADER
    + """
class SlidingWindowAttention(nn.Module):
    def __init__(self, d_in, d_out, num_heads, window, num_sinks=0, rope_base=10000.0):
        super().__init__()
        self.num_heads, self.window, self.num_sinks, self.base = num_heads, window, num_sinks, rope_base
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)

    def rotate(self, x, p):  # x (..., hd) at one position p
        hd = x.shape[-1]
        theta = p * self.base ** (-torch.arange(0, hd, 2).float() / hd)
        c, s = torch.cos(theta).repeat(2), torch.sin(theta).repeat(2)
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return x * c + torch.cat((-x2, x1), -1) * s

    def forward(self, x, past_key_value=None, use_cache=False, start_pos=0):
        b, n, d = x.shape
        nh = self.num_heads
        hd = self.W_query.out_features // nh
        Q = self.W_query(x).view(b, n, nh, hd)
        K = self.W_key(x).view(b, n, nh, hd)
        V = self.W_value(x).view(b, n, nh, hd)
        size = self.num_sinks + self.window
        if past_key_value is None:
            keys, vals = x.new_zeros(b, nh, size, hd), x.new_zeros(b, nh, size, hd)
        else:
            keys, vals = (t.clone() for t in past_key_value)
        outs = []
        for t in range(n):
            p = start_pos + t
            s = p if p < self.num_sinks else self.num_sinks + (p - self.num_sinks) % self.window
            keys[:, :, s] = self.rotate(K[:, t], p)
            vals[:, :, s] = V[:, t]
            written = torch.zeros(size, dtype=torch.bool)
            written[: min(self.num_sinks, p + 1)] = True
            written[self.num_sinks: self.num_sinks + min(self.window, max(0, p + 1 - self.num_sinks))] = True
            q = self.rotate(Q[:, t], p)  # (b, nh, hd)
            w = torch.einsum("bhd,bhkd->bhk", q, keys) / math.sqrt(hd)
            w = torch.softmax(w.masked_fill(~written, float("-inf")), dim=-1)
            outs.append(torch.einsum("bhk,bhkd->bhd", w, vals).reshape(b, nh * hd))
        return self.out_proj(torch.stack(outs, dim=1)), ((keys, vals) if use_cache else None)
"""
)

# --- rings in another layout than the contract's: they work with the rings they write themselves, and with no
# other (a ring another party made, in the contract's layout): named, no longer passed

# Mistral's layout: the cache (b, num_sinks + window, num_heads, head_dim), tokens before heads as x is, and the
# ring's slot num_sinks + p % window (Mistral's cache_pos = positions % sliding_window) after the sinks.
TOKENS_BEFORE_HEADS = (
    HEADER
    + """
class SlidingWindowAttention(nn.Module):
    def __init__(self, d_in, d_out, num_heads, window, num_sinks=0, rope_base=10000.0):
        super().__init__()
        self.nh, self.hd, self.window, self.sinks = num_heads, d_out // num_heads, window, num_sinks
        self.base = rope_base
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)

    def rope(self, x, pos):  # x (b, n, nh, hd)
        inv = 1.0 / self.base ** (torch.arange(0, self.hd, 2).float() / self.hd)
        ang = pos.float()[:, None] * inv
        ang = torch.cat([ang, ang], -1)[None, :, None, :]
        x1, x2 = x.chunk(2, -1)
        return x * ang.cos() + torch.cat([-x2, x1], -1) * ang.sin()

    def slot(self, p):
        return p if p < self.sinks else self.sinks + p % self.window

    def forward(self, x, past_key_value=None, use_cache=False, start_pos=0):
        b, n, _ = x.shape
        pos = torch.arange(start_pos, start_pos + n)
        q = self.rope(self.W_query(x).view(b, n, self.nh, self.hd), pos)
        k = self.rope(self.W_key(x).view(b, n, self.nh, self.hd), pos)
        v = self.W_value(x).view(b, n, self.nh, self.hd)
        if past_key_value is None:
            ck = x.new_zeros(b, self.sinks + self.window, self.nh, self.hd)
            cv = torch.zeros_like(ck)
        else:
            ck, cv = (t.clone() for t in past_key_value)
        held = [p for p in range(start_pos) if p < self.sinks or p >= start_pos - self.window]
        kk = torch.cat([ck[:, [self.slot(p) for p in held]], k], 1)
        vv = torch.cat([cv[:, [self.slot(p) for p in held]], v], 1)
        kpos = torch.tensor(held + pos.tolist())[None, :]
        qpos = pos[:, None]
        visible = (kpos <= qpos) & ((kpos > qpos - self.window) | (kpos < self.sinks))
        att = torch.einsum("bqhd,bkhd->bhqk", q, kk) / math.sqrt(self.hd)
        att = att.masked_fill(~visible, float("-inf")).softmax(-1)
        y = torch.einsum("bhqk,bkhd->bqhd", att, vv).reshape(b, n, -1)
        for i, p in enumerate(pos.tolist()):
            ck[:, self.slot(p)], cv[:, self.slot(p)] = k[:, i], v[:, i]
        return self.out_proj(y), ((ck, cv) if use_cache else None)
"""
)

# The window kept oldest first (Hugging Face's former SlidingWindowCache): filled from the front, then rolled left
# by one for each new token; the sinks in front of it.
ROLLED = (
    HEADER
    + """
def rotate(x, positions, base):
    hd = x.shape[-1]
    ang = positions.float()[:, None] / base ** (torch.arange(0, hd, 2).float() / hd)
    ang = torch.cat([ang, ang], -1)
    return x * ang.cos() + torch.cat([-x[..., hd // 2:], x[..., : hd // 2]], -1) * ang.sin()


class SlidingWindowAttention(nn.Module):
    def __init__(self, d_in, d_out, num_heads, window, num_sinks=0, rope_base=10000.0):
        super().__init__()
        self.h, self.w, self.s, self.base = num_heads, window, num_sinks, rope_base
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)

    def forward(self, x, past_key_value=None, use_cache=False, start_pos=0):
        b, n, d = x.shape
        heads = lambda t: t.view(b, n, self.h, -1).transpose(1, 2)
        pos = torch.arange(start_pos, start_pos + n)
        q = rotate(heads(self.W_query(x)), pos, self.base)
        k = rotate(heads(self.W_key(x)), pos, self.base)
        v = heads(self.W_value(x))
        if past_key_value is None:
            cache = [torch.zeros(b, self.h, self.s + self.w, k.shape[-1]) for _ in range(2)]
        else:
            cache = [t.clone() for t in past_key_value]
        n_sinks, n_ring = min(self.s, start_pos), min(self.w, max(0, start_pos - self.s))
        kpos = torch.tensor(list(range(n_sinks)) + list(range(start_pos - n_ring, start_pos)) + pos.tolist())
        old = lambda t: torch.cat([t[:, :, :n_sinks], t[:, :, self.s : self.s + n_ring]], 2)
        keys, values = torch.cat([old(cache[0]), k], 2), torch.cat([old(cache[1]), v], 2)
        hide = (kpos[None] > pos[:, None]) | ((kpos[None] <= pos[:, None] - self.w) & (kpos[None] >= self.s))
        scores = (q @ keys.transpose(-1, -2)) / math.sqrt(k.shape[-1])
        y = torch.softmax(scores.masked_fill(hide, float("-inf")), -1) @ values
        filled = n_ring
        for i, p in enumerate(pos.tolist()):
            for t, new in zip(cache, (k, v)):
                if p < self.s:
                    t[:, :, p] = new[:, :, i]
                elif filled < self.w:
                    t[:, :, self.s + filled] = new[:, :, i]
                else:
                    t[:, :, self.s:] = torch.roll(t[:, :, self.s:], -1, dims=2)
                    t[:, :, -1] = new[:, :, i]
            filled += p >= self.s and filled < self.w
        return self.out_proj(y.transpose(1, 2).reshape(b, n, -1)), (tuple(cache) if use_cache else None)
"""
)

# The contract's ring written with one scatter of the slots a call keeps and read with one gather, the slots of a
# position computed as a tensor; the window and the sinks as one "visible" mask.
SCATTER_GATHER = (
    HEADER
    + """
class SlidingWindowAttention(nn.Module):
    def __init__(self, d_in, d_out, num_heads, window, num_sinks=0, rope_base=10000.0):
        super().__init__()
        self.nh, self.hd, self.win, self.ns, self.base = num_heads, d_out // num_heads, window, num_sinks, rope_base
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)

    def slots(self, p):
        return torch.where(p < self.ns, p, self.ns + (p - self.ns) % self.win)

    def rope(self, x, p):
        inv = self.base ** (-torch.arange(0, self.hd, 2).float() / self.hd)
        a = torch.cat([p.float()[:, None] * inv] * 2, -1)
        h = self.hd // 2
        return x * a.cos() + torch.cat([-x[..., h:], x[..., :h]], -1) * a.sin()

    def forward(self, x, past_key_value=None, use_cache=False, start_pos=0):
        b, n, _ = x.shape
        p = torch.arange(start_pos, start_pos + n)
        sh = lambda t: t.view(b, n, self.nh, self.hd).transpose(1, 2)
        q, k, v = self.rope(sh(self.W_query(x)), p), self.rope(sh(self.W_key(x)), p), sh(self.W_value(x))
        ring = [torch.zeros(b, self.nh, self.ns + self.win, self.hd) for _ in range(2)]
        if past_key_value is not None:
            ring = [t.clone() for t in past_key_value]
        held = torch.arange(start_pos)
        held = held[(held < self.ns) | (held >= start_pos - self.win)]
        keys = torch.cat([ring[0].index_select(2, self.slots(held)), k], 2)
        vals = torch.cat([ring[1].index_select(2, self.slots(held)), v], 2)
        kp = torch.cat([held, p])
        visible = (kp[None] <= p[:, None]) & ((p[:, None] - kp[None] < self.win) | (kp[None] < self.ns))
        w = torch.softmax((q @ keys.mT / self.hd ** 0.5).masked_fill(~visible, float("-inf")), -1)
        y = self.out_proj((w @ vals).transpose(1, 2).reshape(b, n, -1))
        kept = (p < self.ns) | (p >= max(self.ns, start_pos + n - self.win))
        for t, new in zip(ring, (k, v)):
            t.index_copy_(2, self.slots(p[kept]), new[:, :, kept])
        return y, (tuple(ring) if use_cache else None)
"""
)

ALTERNATIVES = {
    "by_slot_positions": BY_SLOT_POSITIONS,
    "token_by_token": TOKEN_BY_TOKEN,
    "scatter_gather": SCATTER_GATHER,
}

# --- misconception mutants: (expected diagnosis key, edits of the reference or a whole source) ----------------

_SLOT_ORDER = {"READ": "slots = sorted(self.slot(p) for p in held)  # slot 0 first, not the oldest"}

MUTANTS = [
    ("window_off_by_one", {"WINDOW": "too_old = (k_pos < q_pos - self.window) & (k_pos >= self.num_sinks)"}),
    ("window_off_by_one", {"WINDOW": "too_old = (k_pos <= q_pos - self.window + 1) & (k_pos >= self.num_sinks)"}),
    ("ring_read_in_slot_order", _SLOT_ORDER),
    (
        "rope_positions_reset_at_wrap",
        {
            "ANGLES": "angles = rope_angles(torch.tensor([self.slot(p) for p in positions]), self.head_dim, "
            "self.rope_base)"
        },
    ),
    ("sinks_evicted", {"WINDOW": "too_old = k_pos <= q_pos - self.window"}),
    (
        "ring_keys_cached_before_rope",
        {
            "ROTATE": "queries, keys, raw_keys = apply_rope(queries, angles), apply_rope(keys, angles), keys",
            "ALL_K": "all_k = torch.cat([apply_rope(cache_k[:, :, slots], rope_angles(torch.tensor(held), self.head_dim, "
            "self.rope_base)), keys], dim=2)",
            "WRITE_K": "cache_k[:, :, self.slot(p)] = raw_keys[:, :, i]",
        },
    ),
]

MUTANTS += [
    (
        "window_off_by_one_decoding",
        {
            "WINDOW": "too_old = (k_pos <= q_pos - (self.window + 1 if n == 1 and past_key_value is not None "
            "else self.window)) & (k_pos >= self.num_sinks)  # decoding: the whole ring and the new token"
        },
    ),
    (
        "window_off_by_one_decoding",
        {
            "WINDOW": "too_old = (k_pos <= q_pos - (self.window - 1 if past_key_value is not None else self.window)) "
            "& (k_pos >= self.num_sinks)"
        },
    ),
    (
        "sinks_written_on_first_call_only",
        {  # the prompt brings the sinks; later tokens go into the ring
            "WRITE_K": "cache_k[:, :, self.slot(p) if past_key_value is None else "
            "self.num_sinks + (p - self.num_sinks) % self.window] = keys[:, :, i]",
            "WRITE_V": "cache_v[:, :, self.slot(p) if past_key_value is None else "
            "self.num_sinks + (p - self.num_sinks) % self.window] = values[:, :, i]",
        },
    ),
    # right outputs, but the ring holds the keys already divided by sqrt(head_dim): not the contract's keys
    (
        "ring_layout_unreadable",
        {
            "ROTATE": "queries, keys = apply_rope(queries, angles), apply_rope(keys, angles) / math.sqrt(self.head_dim)",
            "ALL_K": "all_k = torch.cat([cache_k[:, :, slots], keys], dim=2) * math.sqrt(self.head_dim)",
        },
    ),
]

# the cache grows: nothing evicted, positions counted back from start_pos
GROWS = REFERENCE.replace(
    """        size = self.num_sinks + self.window
        if past_key_value is None:
            cache_k = keys.new_zeros(b, self.num_heads, size, self.head_dim)  #NEW_K
            cache_v = values.new_zeros(b, self.num_heads, size, self.head_dim)  #NEW_V
        else:
            cache_k, cache_v = past_key_value[0].clone(), past_key_value[1].clone()
        held = (list(range(min(self.num_sinks, start_pos)))
                + list(range(max(self.num_sinks, start_pos - self.window), start_pos)))
        slots = [self.slot(p) for p in held]  #READ
        all_k = torch.cat([cache_k[:, :, slots], keys], dim=2)  #ALL_K
        all_v = torch.cat([cache_v[:, :, slots], values], dim=2)  #ALL_V
""",
    """        all_k, all_v = keys, values
        if past_key_value is not None:
            all_k = torch.cat([past_key_value[0], keys], dim=2)
            all_v = torch.cat([past_key_value[1], values], dim=2)
        held = list(range(start_pos - (all_k.shape[2] - n), start_pos))
""",
).replace(
    """        for i, p in enumerate(positions):
            cache_k[:, :, self.slot(p)] = keys[:, :, i]  #WRITE_K
            cache_v[:, :, self.slot(p)] = values[:, :, i]  #WRITE_V
        present = (cache_k, cache_v) if use_cache else None  #PRESENT
""",
    """        present = (all_k, all_v) if use_cache else None
""",
)
assert GROWS != REFERENCE and "cache_k" not in GROWS
MUTANTS.append(("ring_cache_grows", GROWS))

# the module keeps its own ring and ignores the one it is handed: the ring it did not produce tells
OWN_STATE = mutate(
    REFERENCE.replace(
        "cache_k, cache_v = past_key_value[0].clone(), past_key_value[1].clone()",
        "cache_k, cache_v = self.own[0].clone(), self.own[1].clone()  # its own, not the one handed in",
    ),
    {"PRESENT": "present = self.own = (cache_k, cache_v) if use_cache else None"},
)
assert "self.own[0]" in OWN_STATE
MUTANTS.append(("cache_ignores_past", OWN_STATE))

# rings in another layout: they read only the rings they write themselves
MUTANTS += [("ring_read_only_its_own", TOKENS_BEFORE_HEADS), ("ring_read_only_its_own", ROLLED)]

# positions counted by the module (reset by a call without a past) instead of taken from start_pos
OWN_COUNT = REFERENCE.replace(
    "        self.out_proj = nn.Linear(d_out, d_out)\n",
    "        self.out_proj = nn.Linear(d_out, d_out)\n        self.seen = 0\n",
).replace(
    "        b, n, _ = x.shape\n        split",
    "        b, n, _ = x.shape\n        self.seen = 0 if past_key_value is None else self.seen\n"
    "        start_pos, self.seen = self.seen, self.seen + n  # its own count: start_pos not needed\n        split",
)
assert "start_pos, self.seen = " in OWN_COUNT and "        self.seen = 0\n" in OWN_COUNT
MUTANTS.append(("positions_counted_by_module", OWN_COUNT))

# tests/grader_cases/long_context.MUTANTS (the reference's mistakes) -> the grader's diagnosis of the same mistake
LONG_CONTEXT_KEYS = {
    "window_off_by_one": "window_off_by_one",
    "slot_order": "ring_read_in_slot_order",
    "rope_reset_at_wrap": "rope_positions_reset_at_wrap",
    "sinks_evicted": "sinks_evicted",
}


def mutant_source(edits) -> str:
    return edits if isinstance(edits, str) else mutate(REFERENCE, edits)


# --- the fixture, in the contract test's one shape (tests/grade/exercises/fixtures.py) -------------------------

FIXTURES = {"sliding_window": {"reference": REFERENCE, "alternatives": ALTERNATIVES, "mutants": MUTANTS,
                               "min_alternatives": 3}}
