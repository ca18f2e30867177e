"""Learner-style code for the grader's tests: a reference solution per exercise (lines tagged ``#TAG``),
alternative correct implementations, stubs, and misconception mutants as line edits of the reference.

``mutate(REFERENCE[ex], {"TAG": "new line"})`` replaces the code of the line tagged ``#TAG``.
"""

import re

from tests.grader_cases.interview_dialects import DIALECTS as _DIALECTS

HEADER = "import math\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n"

SELF_ATTENTION = (
    HEADER
    + """
class SelfAttention_v2(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        q = self.W_query(x)
        k = self.W_key(x)  #KEYS
        v = self.W_value(x)  #VALUES
        scores = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])  #SCALE
        n = x.shape[-2]
        scores = scores  #MASK
        w = torch.softmax(scores, dim=-1)  #SOFTMAX
        return w @ v
"""
)

CAUSAL = (
    HEADER
    + """
class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, n, _ = x.shape
        q = self.W_query(x)
        k = self.W_key(x)  #KEYS
        v = self.W_value(x)
        scores = q @ k.transpose(1, 2) / k.shape[-1] ** 0.5  #SCALE
        hide = self.mask.bool()[:n, :n]  #MASK
        scores = scores.masked_fill(hide, -torch.inf)  #FILL
        w = torch.softmax(scores, dim=-1)  #SOFTMAX
        w = self.dropout(w)  #DROPOUT
        return w @ v
"""
)

WRAPPER = (
    CAUSAL
    + """

class MultiHeadAttentionWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)])

    def forward(self, x):
        outs = [head(x) for head in self.heads]  #HEADS
        return torch.cat(outs, dim=-1)  #CAT
"""
)

MHA = (
    HEADER
    + """
class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0
        self.d_in, self.d_out, self.num_heads, self.head_dim = d_in, d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def split(self, t, b, n):
        return t.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  #SPLIT

    def forward(self, x):
        b, n, _ = x.shape
        q = self.split(self.W_query(x), b, n)  # (B, nh, T, hs)
        k = self.split(self.W_key(x), b, n)  #KEYS
        v = self.split(self.W_value(x), b, n)  #VALUES
        scores = q @ k.transpose(2, 3) / math.sqrt(self.head_dim)  #SCALE
        hide = self.mask.bool()[:n, :n]  #MASK
        scores = scores.masked_fill(hide, -torch.inf)  #FILL
        w = torch.softmax(scores, dim=-1)  #SOFTMAX
        w = self.dropout(w)  #DROPOUT
        ctx = (w @ v).transpose(1, 2).reshape(b, n, self.d_out)  #MERGE
        return self.out_proj(ctx)  #OUT
"""
)

KV_CACHE = (
    HEADER
    + """
class CachedMultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x, past_key_value=None, use_cache=False):
        b, n, _ = x.shape
        q = self.W_query(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.W_key(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.W_value(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        past = 0
        if past_key_value is not None:
            past = past_key_value[0].shape[2]
            k = torch.cat([past_key_value[0], k], dim=2)  #CATK
            v = torch.cat([past_key_value[1], v], dim=2)  #CATV
        present = (k, v) if use_cache else None  #PRESENT
        scores = q @ k.transpose(2, 3) / math.sqrt(self.head_dim)  #SCALE
        hide = self.mask.bool()[past:past + n, :past + n]  #MASK
        scores = scores.masked_fill(hide, -torch.inf)  #FILL
        w = self.dropout(torch.softmax(scores, dim=-1))
        ctx = (w @ v).transpose(1, 2).reshape(b, n, self.d_out)  #MERGE
        return self.out_proj(ctx), present  #OUT
"""
)

GQA = (
    HEADER
    + """
class GroupedQueryAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, num_kv_groups, qkv_bias=False):
        super().__init__()
        self.d_out, self.num_heads, self.num_kv_groups = d_out, num_heads, num_kv_groups
        self.head_dim = d_out // num_heads
        self.group = num_heads // num_kv_groups
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, n, _ = x.shape
        q = self.W_query(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.W_key(x).view(b, n, self.num_kv_groups, self.head_dim).transpose(1, 2)
        v = self.W_value(x).view(b, n, self.num_kv_groups, self.head_dim).transpose(1, 2)
        k = k.repeat_interleave(self.group, dim=1)  #REPK
        v = v.repeat_interleave(self.group, dim=1)  #REPV
        scores = q @ k.transpose(2, 3) / math.sqrt(self.head_dim)  #SCALE
        scores = scores.masked_fill(self.mask.bool()[:n, :n], -torch.inf)  #FILL
        w = self.dropout(torch.softmax(scores, dim=-1))  #SOFTMAX
        ctx = (w @ v).transpose(1, 2).reshape(b, n, self.d_out)  #MERGE
        return self.out_proj(ctx)  #OUT
"""
)

REFERENCE = {
    "self_attention": SELF_ATTENTION,
    "causal": CAUSAL,
    "wrapper": WRAPPER,
    "mha": MHA,
    "mha_interview": MHA,
    "kv_cache": KV_CACHE,
    "gqa": GQA,
}


def mutate(src, edits):
    """Replace the code of each line tagged ``#TAG`` (indentation kept)."""
    for tag, new in edits.items():
        pattern = re.compile(rf"^(\s*)(.*)#{tag}$", re.M)
        assert pattern.search(src), tag
        src = pattern.sub(lambda m: m.group(1) + new, src)
    return src


# --- alternative correct implementations -------------------------------------------------------------


def _mha_like(forward_body, extra_init="", name="MultiHeadAttention"):
    return (
        HEADER
        + f"""
class {name}(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.d_out, self.h, self.hs = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.p = dropout
        self.drop = nn.Dropout(dropout){extra_init}

    def forward(self, x):
{forward_body}
"""
    )


MHA_EINSUM = _mha_like("""        b, t, _ = x.shape
        q = self.W_query(x).reshape(b, t, self.h, self.hs)
        k = self.W_key(x).reshape(b, t, self.h, self.hs)
        v = self.W_value(x).reshape(b, t, self.h, self.hs)
        s = torch.einsum("bqhd,bkhd->bhqk", q, k) / self.hs ** 0.5
        allow = torch.ones(t, t, dtype=torch.bool).tril()
        s = torch.where(allow, s, torch.tensor(-1e9))
        w = self.drop(s.softmax(-1))
        return self.out_proj(torch.einsum("bhqk,bkhd->bqhd", w, v).reshape(b, t, self.d_out))""")

MHA_SDPA = _mha_like("""        b, t, _ = x.shape
        q, k, v = (lin(x).view(b, t, self.h, self.hs).permute(0, 2, 1, 3)
                   for lin in (self.W_query, self.W_key, self.W_value))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.p if self.training else 0.0)
        return self.out_proj(y.permute(0, 2, 1, 3).flatten(2))""")

MHA_LOOP = _mha_like("""        b, t, _ = x.shape
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        future = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)  # additive mask
        heads = []
        for i in range(self.h):
            sl = slice(i * self.hs, (i + 1) * self.hs)
            s = q[..., sl] @ k[..., sl].transpose(-1, -2) / math.sqrt(self.hs) + future
            heads.append(self.drop(torch.softmax(s, dim=-1)) @ v[..., sl])
        return self.out_proj(torch.cat(heads, dim=-1))""")

MHA_BUFFER_NAME = _mha_like(
    """        b, t, _ = x.shape
        q = self.W_query(x).unflatten(-1, (self.h, self.hs)).transpose(1, 2)
        k = self.W_key(x).unflatten(-1, (self.h, self.hs)).transpose(1, 2)
        v = self.W_value(x).unflatten(-1, (self.h, self.hs)).transpose(1, 2)
        s = (q / math.sqrt(self.hs)) @ k.mT
        s = s.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        y = self.drop(F.softmax(s, dim=-1)) @ v
        return self.out_proj(y.transpose(1, 2).contiguous().view(b, t, self.d_out))""",
    extra_init="""
        self.register_buffer("bias", torch.tril(torch.ones(context_length, context_length))
                             .view(1, 1, context_length, context_length))""",
)

ALTERNATIVES = {
    "mha": {"einsum_1e9": MHA_EINSUM, "sdpa": MHA_SDPA, "loop_additive": MHA_LOOP, "nanogpt_buffer": MHA_BUFFER_NAME},
    "mha_interview": {"einsum_1e9": MHA_EINSUM, "loop_additive": MHA_LOOP, "nanogpt_buffer": MHA_BUFFER_NAME},
    "self_attention": {
        "einsum": mutate(
            SELF_ATTENTION, {"SCALE": 'scores = torch.einsum("...qd,...kd->...qk", q, k) / k.shape[-1] ** 0.5'}
        ),
        "sdpa": mutate(SELF_ATTENTION, {"SOFTMAX": "return F.scaled_dot_product_attention(q, k, v)"}),
        "scaled_query": mutate(SELF_ATTENTION, {"SCALE": "scores = (q * k.shape[-1] ** -0.5) @ k.mT"}),
    },
    "causal": {
        "sdpa": mutate(
            CAUSAL,
            {
                "SCALE": "return F.scaled_dot_product_attention(q, k, v, is_causal=True, "
                "dropout_p=self.dropout.p if self.training else 0.0)"
            },
        ),
        "minus_1e9_no_buffer": mutate(
            CAUSAL, {"MASK": "hide = torch.ones(n, n).triu(1) == 1", "FILL": "scores = scores.masked_fill(hide, -1e9)"}
        ),
        "additive": mutate(CAUSAL, {"FILL": "scores = scores + torch.zeros(n, n).masked_fill(hide, float('-inf'))"}),
    },
    "wrapper": {
        "loop": mutate(
            WRAPPER, {"HEADS": "outs = []\n        for head in self.heads:\n            outs.append(head(x))"}
        ),
        "stack": mutate(WRAPPER, {"CAT": "return torch.stack(outs, dim=2).flatten(2)"}),
        "sdpa_heads": mutate(
            WRAPPER,
            {
                "SCALE": "return F.scaled_dot_product_attention(q, k, v, is_causal=True, "
                "dropout_p=self.dropout.p if self.training else 0.0)"
            },
        ),
    },
    "kv_cache": {
        "allow_mask_sdpa": mutate(
            KV_CACHE,
            {
                "SCALE": "allow = torch.ones(n, past + n, dtype=torch.bool).tril(diagonal=past)",
                "MASK": "ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=allow, "
                "dropout_p=self.dropout.p if self.training else 0.0)",
                "FILL": "return self.out_proj(ctx.transpose(1, 2).reshape(b, n, self.d_out)), present",
            },
        ),
        "minus_1e9": mutate(KV_CACHE, {"FILL": "scores = scores.masked_fill(hide, -1e9)"}),
        "arange_mask": mutate(
            KV_CACHE, {"MASK": "hide = torch.arange(past + n)[None, :] > torch.arange(past, past + n)[:, None]"}
        ),
    },
    "gqa": {
        "expand": mutate(
            GQA,
            {
                "REPK": "k = k[:, :, None].expand(b, self.num_kv_groups, self.group, n, self.head_dim).reshape(b, self.num_heads, n, self.head_dim)",
                "REPV": "v = v[:, :, None].expand(b, self.num_kv_groups, self.group, n, self.head_dim).reshape(b, self.num_heads, n, self.head_dim)",
            },
        ),
        "sdpa_enable_gqa": mutate(
            GQA,
            {
                "REPK": "pass",
                "REPV": "pass",
                "SCALE": "ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.group > 1, "
                "dropout_p=self.dropout.p if self.training else 0.0)",
                "FILL": "pass",
                "SOFTMAX": "pass",
                "MERGE": "ctx = ctx.transpose(1, 2).reshape(b, n, self.d_out)",
            },
        ),
        "index_select": mutate(
            GQA,
            {
                "REPK": "idx = torch.arange(self.num_heads) // self.group; k = k[:, idx]",
                "REPV": "v = v[:, idx]",
                "FILL": "scores = scores.masked_fill(self.mask[:n, :n] == 1, -1e9)",
            },
        ),
    },
}

# --- stubs ------------------------------------------------------------------------------------------

STUB_FORWARD = (
    HEADER
    + """
class {name}(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x, *args, **kwargs):
        # YOUR CODE HERE
        raise NotImplementedError()
"""
)
STUB_INIT = (
    HEADER
    + """
class {name}(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        # YOUR CODE HERE
        raise NotImplementedError()
"""
)

# --- misconception mutants: (expected diagnosis key, edits of the reference) --------------------------

_MHA_MUTANTS = [
    ("scale_d_out", {"SCALE": "scores = q @ k.transpose(2, 3) / math.sqrt(self.d_out)"}),
    ("scale_d_in", {"SCALE": "scores = q @ k.transpose(2, 3) / math.sqrt(self.d_in)"}),
    ("no_scale", {"SCALE": "scores = q @ k.transpose(2, 3)"}),
    ("scale_no_sqrt", {"SCALE": "scores = q @ k.transpose(2, 3) / self.head_dim"}),
    ("softmax_wrong_axis", {"SOFTMAX": "w = torch.softmax(scores, dim=-2)"}),
    ("softmax_wrong_axis", {"SOFTMAX": "w = torch.softmax(scores, dim=1)"}),
    ("mask_inverted", {"MASK": "hide = self.mask[:n, :n] == 0"}),
    ("mask_inverted", {"MASK": "hide = self.mask[:n, :n] == 0", "FILL": "scores = scores.masked_fill(hide, -1e9)"}),
    ("mask_zero_fill", {"FILL": "scores = scores.masked_fill(hide, 0)"}),
    ("mask_transposed", {"MASK": "hide = self.mask.bool()[:n, :n].T"}),
    (
        "mask_transposed",
        {
            "MASK": "hide = torch.tril(torch.ones(n, n), diagonal=-1).bool()",
            "FILL": "scores = scores.masked_fill(hide, -1e9)",
        },
    ),
    ("mask_after_softmax", {"FILL": "pass", "DROPOUT": "w = self.dropout(w.masked_fill(hide, 0.0))"}),
    ("diagonal_masked", {"MASK": "hide = torch.triu(torch.ones(n, n), diagonal=0).bool()"}),
    (
        "diagonal_masked",
        {
            "MASK": "hide = torch.triu(torch.ones(n, n), diagonal=0).bool()",
            "FILL": "scores = scores.masked_fill(hide, -1e9)",
        },
    ),
    ("no_causal_mask", {"FILL": "pass"}),
    ("mask_not_sliced", {"MASK": "hide = self.mask.bool()"}),
    ("split_no_transpose", {"SPLIT": "return t.view(b, self.num_heads, n, self.head_dim)"}),
    ("merge_no_transpose", {"MERGE": "ctx = (w @ v).reshape(b, n, self.d_out)"}),
    ("no_out_proj", {"OUT": "return ctx"}),
    ("keys_from_query", {"KEYS": "k = self.split(self.W_query(x), b, n)"}),
    ("values_from_key", {"VALUES": "v = self.split(self.W_key(x), b, n)"}),
    ("dropout_in_eval", {"DROPOUT": "w = F.dropout(w, 0.5, training=True)"}),
    # the deeper checks: training mode, gradients, large scores, two mistakes at once
    ("dropout_ignored", {"DROPOUT": "w = w"}),
    ("dropout_on_scores", {"FILL": "scores = self.dropout(scores).masked_fill(hide, -torch.inf)", "DROPOUT": "w = w"}),
    ("dropout_on_output", {"DROPOUT": "w = w", "OUT": "return self.dropout(self.out_proj(ctx))"}),
    ("dropout_wrong", {"DROPOUT": "w = F.dropout(w, 0.1, training=self.training)"}),
    (
        "grad_detached_kv",
        {
            "KEYS": "k = self.split(self.W_key(x), b, n).detach()",
            "VALUES": "v = self.split(self.W_value(x), b, n).detach()",
        },
    ),
    ("grad_detached_weights", {"SOFTMAX": "w = torch.from_numpy(torch.softmax(scores, dim=-1).detach().numpy())"}),
    ("grad_leaves_autograd", {"SOFTMAX": "w = torch.from_numpy(torch.softmax(scores, dim=-1).numpy())"}),
    ("grad_none", {"OUT": "return self.out_proj(ctx).detach()"}),
    ("softmax_overflow", {"SOFTMAX": "w = scores.exp() / scores.exp().sum(dim=-1, keepdim=True)"}),
    (
        "split_merge_no_transpose",
        {
            "SPLIT": "return t.view(b, self.num_heads, n, self.head_dim)",
            "MERGE": "ctx = (w @ v).reshape(b, n, self.d_out)",
        },
    ),
    (
        "scale_d_out+no_out_proj",
        {"SCALE": "scores = q @ k.transpose(2, 3) / math.sqrt(self.d_out)", "OUT": "return ctx"},
    ),
]

MUTANTS = {
    "mha": _MHA_MUTANTS,
    "mha_interview": _MHA_MUTANTS[:4],
    "self_attention": [
        ("no_scale", {"SCALE": "scores = q @ k.transpose(-2, -1)"}),
        ("softmax_wrong_axis", {"SOFTMAX": "w = torch.softmax(scores, dim=-2)"}),
        ("keys_from_query", {"KEYS": "k = self.W_query(x)"}),
        ("scale_no_sqrt", {"SCALE": "scores = q @ k.transpose(-2, -1) / k.shape[-1]"}),
        (
            "causal_in_self_attention",
            {"MASK": "scores = scores.masked_fill(torch.ones(n, n).triu(1).bool(), -torch.inf)"},
        ),
    ],
    "causal": [
        ("mask_inverted", {"MASK": "hide = self.mask.bool()[:n, :n] == 0"}),
        ("mask_transposed", {"MASK": "hide = torch.ones(n, n, dtype=torch.bool).tril(-1)  # meant: the future"}),
        ("mask_zero_fill", {"FILL": "scores = scores.masked_fill(hide, 0.0)"}),
        ("mask_after_softmax", {"FILL": "pass", "DROPOUT": "w = self.dropout(w * ~hide)"}),
        ("diagonal_masked", {"MASK": "hide = torch.triu(torch.ones(n, n, dtype=torch.bool))"}),
        ("mask_not_sliced", {"MASK": "hide = self.mask.bool()"}),
        ("no_causal_mask", {"FILL": "pass"}),
        ("dropout_in_eval", {"DROPOUT": "w = nn.functional.dropout(w, p=0.3)"}),
        ("no_scale", {"SCALE": "scores = q @ k.transpose(1, 2)"}),
    ],
    "wrapper": [
        ("wrapper_shared_weights", {"HEADS": "outs = [self.heads[0](x) for head in self.heads]"}),
        ("wrapper_summed", {"CAT": "return torch.stack(outs).sum(0)"}),
        ("wrapper_cat_wrong_axis", {"CAT": "return torch.cat(outs, dim=1)"}),
        ("mask_inverted", {"MASK": "hide = self.mask.bool()[:n, :n] == 0"}),
        ("mask_not_sliced", {"MASK": "hide = self.mask.bool()"}),
    ],
    "kv_cache": [
        ("mask_top_left", {"MASK": "hide = self.mask.bool()[:n, :past + n]"}),
        (
            "mask_top_left",
            {
                "SCALE": "pass",
                "MASK": "ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)",
                "FILL": "return self.out_proj(ctx.transpose(1, 2).reshape(b, n, self.d_out)), present",
            },
        ),
        ("mask_only_without_cache", {"FILL": "scores = scores.masked_fill(hide, -torch.inf) if past == 0 else scores"}),
        ("mask_square_slice", {"MASK": "hide = self.mask.bool()[:n, :n]"}),
        (
            "cache_wrong_axis",
            {
                "CATK": "k = torch.cat([past_key_value[0], k], dim=1)",
                "CATV": "v = torch.cat([past_key_value[1], v], dim=1)",
            },
        ),
        ("cache_only_new", {"PRESENT": "present = (k[:, :, past:], v[:, :, past:]) if use_cache else None"}),
        (
            "cache_not_updated",
            {"PRESENT": "present = (past_key_value if past_key_value is not None else (k, v)) if use_cache else None"},
        ),
        ("merge_no_transpose", {"MERGE": "ctx = (w @ v).reshape(b, n, self.d_out)"}),
        (
            "cache_ignores_past",
            {  # keeps its own K/V inside the module and ignores what past_key_value holds
                "CATK": "pass",
                "CATV": "pass",
                "PRESENT": "own = getattr(self, 'own', None) if past_key_value is not None else None; "
                "k, v = (torch.cat([own[0], k], 2), torch.cat([own[1], v], 2)) if own is not None else (k, v); "
                "past = k.shape[2] - n; present = (k, v) if use_cache else None; "
                "self.own = present if use_cache else None",
            },
        ),
    ],
    "gqa": [
        ("kv_tiled", {"REPK": "k = k.repeat(1, self.group, 1, 1)", "REPV": "v = v.repeat(1, self.group, 1, 1)"}),
        (
            "kv_one_group",
            {
                "REPK": "k = k[:, :1].expand(-1, self.num_heads, -1, -1)",
                "REPV": "v = v[:, :1].expand(-1, self.num_heads, -1, -1)",
            },
        ),
        ("scale_d_out", {"SCALE": "scores = q @ k.transpose(2, 3) / math.sqrt(self.d_out)"}),
        ("merge_no_transpose", {"MERGE": "ctx = (w @ v).reshape(b, n, self.d_out)"}),
        ("no_out_proj", {"OUT": "return ctx"}),
        ("mask_inverted", {"FILL": "scores = scores.masked_fill(self.mask[:n, :n] == 0, -torch.inf)"}),
    ],
}


# --- the fixtures of exercises 01-07, in the contract test's one shape (tests/grade/exercises/fixtures.py) -----
# (their stubs are the module kind's: a class whose forward, or whose constructor, raises NotImplementedError)

FIXTURES = {
    ex: {"reference": REFERENCE[ex], "alternatives": ALTERNATIVES[ex], "mutants": MUTANTS[ex], "min_alternatives": 3}
    for ex in REFERENCE
}
# interview mode's learner answers in a candidate's own dialect (tests/exercises/test_as_learner.py)
FIXTURES["mha_interview"]["as_learner"] = _DIALECTS["causal_self_attention"][0]
