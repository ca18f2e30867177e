"""Honest multi-head attention written the way candidates write it, by someone who had not read the grader's name
lists: unusual attribute and argument names, fused q/k/v in both layouts, per-head pieces, weights stored
transposed, projections inside containers. Each computes causal multi-head attention with dropout on the attention
weights; the grader must place its parameters by role and shape and pass it. Then wrong answers in the same styles,
whose mistakes must be named."""

HEADER = "import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"

# a fused projection, split as [q; k; v] rows then heads: (B, T, 3, H, D); argument names hidden/n_heads/block_size/p
FUSED_3HD = (
    HEADER
    + """
class SelfAttn(nn.Module):
    def __init__(self, hidden, n_heads, block_size, p=0.0, bias=False):
        super().__init__()
        self.n_heads = n_heads
        self.to_qkv = nn.Linear(hidden, 3 * hidden, bias=bias)
        self.merge = nn.Linear(hidden, hidden)
        self.drop = nn.Dropout(p)
        self.register_buffer("tri", torch.tril(torch.ones(block_size, block_size, dtype=torch.bool)))

    def forward(self, x):
        B, T, C = x.shape
        qkv = self.to_qkv(x).view(B, T, 3, self.n_heads, C // self.n_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]                       # (B, H, T, D)
        att = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
        att = att.masked_fill(~self.tri[:T, :T], float("-inf"))
        att = self.drop(att.softmax(dim=-1))
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.merge(y)
"""
)

# a fused projection interleaved per head: (B, T, H, 3, D), as Megatron and GPT-NeoX store it
FUSED_H3D = (
    HEADER
    + """
class Attention(nn.Module):
    def __init__(self, emb, heads, max_seq, attn_pdrop=0.0):
        super().__init__()
        self.heads = heads
        self.in_proj = nn.Linear(emb, 3 * emb)
        self.fc_out = nn.Linear(emb, emb)
        self.attn_pdrop = nn.Dropout(attn_pdrop)

    def forward(self, x):
        B, T, E = x.shape
        d = E // self.heads
        q, k, v = self.in_proj(x).view(B, T, self.heads, 3, d).unbind(dim=3)   # each (B, T, H, d)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        s = torch.matmul(q, k.transpose(2, 3)) * d ** -0.5
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        s = s.masked_fill(future, -1e9)
        w = self.attn_pdrop(F.softmax(s, dim=-1))
        o = torch.matmul(w, v).transpose(1, 2).contiguous().view(B, T, E)
        return self.fc_out(o)
"""
)

# one module per head, concatenated (as the "let's build GPT" lecture writes it); constructor by lecture names
PER_HEAD_MODULES = (
    HEADER
    + """
class Head(nn.Module):
    def __init__(self, n_embd, head_size, block_size, dropout):
        super().__init__()
        self.key = nn.Linear(n_embd, head_size, bias=False)
        self.query = nn.Linear(n_embd, head_size, bias=False)
        self.value = nn.Linear(n_embd, head_size, bias=False)
        self.register_buffer("tril", torch.tril(torch.ones(block_size, block_size)))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.shape
        k = self.key(x)
        q = self.query(x)
        wei = q @ k.transpose(-2, -1) * k.shape[-1] ** -0.5
        wei = wei.masked_fill(self.tril[:T, :T] == 0, float("-inf"))
        wei = self.dropout(F.softmax(wei, dim=-1))
        return wei @ self.value(x)


class MultiHead(nn.Module):
    def __init__(self, n_embd, n_head, head_size, block_size, dropout):
        super().__init__()
        self.heads = nn.ModuleList([Head(n_embd, head_size, block_size, dropout) for _ in range(n_head)])
        self.proj = nn.Linear(n_head * head_size, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([h(x) for h in self.heads], dim=-1))
"""
)

# raw matrices stored (d_in, d_out) and used as x @ W, einsum for the heads; argument names dim/heads/dim_head
EINSUM_TRANSPOSED = (
    HEADER
    + """
class MHSA(nn.Module):
    def __init__(self, dim, heads=8, dim_head=64, dropout=0.0):
        super().__init__()
        inner = heads * dim_head
        self.heads = heads
        self.Wq = nn.Parameter(torch.randn(dim, inner) / math.sqrt(dim))
        self.Wk = nn.Parameter(torch.randn(dim, inner) / math.sqrt(dim))
        self.Wv = nn.Parameter(torch.randn(dim, inner) / math.sqrt(dim))
        self.Wo = nn.Parameter(torch.randn(inner, dim) / math.sqrt(inner))
        self.bo = nn.Parameter(torch.zeros(dim))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        b, n, _ = x.shape
        h = self.heads
        q, k, v = (torch.einsum("bnd,de->bne", x, W).view(b, n, h, -1) for W in (self.Wq, self.Wk, self.Wv))
        scores = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(q.shape[-1])
        causal = torch.ones(n, n, device=x.device).tril().bool()
        scores = scores.masked_fill(~causal, float("-inf"))
        attn = self.dropout(scores.softmax(-1))
        out = torch.einsum("bhij,bjhd->bihd", attn, v).reshape(b, n, -1)
        return out @ self.Wo + self.bo
"""
)

# projections kept in an nn.ModuleDict; argument names width/num_attention_heads/max_len/attn_drop
MODULE_DICT = (
    HEADER
    + """
class CausalMHA(nn.Module):
    def __init__(self, width, num_attention_heads, max_len=128, attn_drop=0.1):
        super().__init__()
        self.nh = num_attention_heads
        self.lin = nn.ModuleDict({name: nn.Linear(width, width) for name in ("q", "k", "v", "o")})
        self.attn_drop = nn.Dropout(attn_drop)
        self.register_buffer("causal", torch.triu(torch.full((max_len, max_len), float("-inf")), diagonal=1))

    def split(self, t):
        B, T, W = t.shape
        return t.view(B, T, self.nh, W // self.nh).transpose(1, 2)

    def forward(self, x):
        B, T, W = x.shape
        q, k, v = (self.split(self.lin[n](x)) for n in ("q", "k", "v"))
        a = q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5) + self.causal[:T, :T]
        a = self.attn_drop(torch.softmax(a, dim=-1))
        return self.lin["o"]((a @ v).transpose(1, 2).reshape(B, T, W))
"""
)

# q/k/v in an nn.ModuleList, the output layer inside an nn.Sequential; constructor (d, h, ctx, p)
SEQUENTIAL_OUT = (
    HEADER
    + """
class MultiHeadSelfAttention(nn.Module):
    def __init__(self, d, h, ctx, p):
        super().__init__()
        assert d % h == 0
        self.h = h
        self.qkv = nn.ModuleList([nn.Linear(d, d, bias=False) for _ in range(3)])
        self.out = nn.Sequential(nn.Linear(d, d))
        self.p = p
        self.register_buffer("keep", torch.tril(torch.ones(ctx, ctx)).view(1, 1, ctx, ctx))

    def forward(self, x):
        B, L, D = x.shape
        q, k, v = [lin(x).reshape(B, L, self.h, D // self.h).permute(0, 2, 1, 3) for lin in self.qkv]
        logits = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(D // self.h))
        logits = logits.masked_fill(self.keep[:, :, :L, :L] == 0, float("-inf"))
        probs = F.dropout(F.softmax(logits, dim=-1), p=self.p, training=self.training)
        ctxv = (probs @ v).permute(0, 2, 1, 3).reshape(B, L, D)
        return self.out(ctxv)
"""
)

# per-head parameter tensors (H, d_model, d_head) and (H, d_head, d_model), einsum throughout
PER_HEAD_PARAMETERS = (
    HEADER
    + """
class MultiHeadAttn(nn.Module):
    def __init__(self, d_model, n_head, dropout=0.0):
        super().__init__()
        d_head = d_model // n_head
        self.W_Q = nn.Parameter(torch.randn(n_head, d_model, d_head) * 0.02)
        self.W_K = nn.Parameter(torch.randn(n_head, d_model, d_head) * 0.02)
        self.W_V = nn.Parameter(torch.randn(n_head, d_model, d_head) * 0.02)
        self.W_O = nn.Parameter(torch.randn(n_head, d_head, d_model) * 0.02)
        self.b_O = nn.Parameter(torch.zeros(d_model))
        self.attn_dropout = nn.Dropout(dropout)

    def forward(self, x):
        q = torch.einsum("bpm,hmd->bhpd", x, self.W_Q)
        k = torch.einsum("bpm,hmd->bhpd", x, self.W_K)
        v = torch.einsum("bpm,hmd->bhpd", x, self.W_V)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(self.W_Q.shape[-1])
        n = x.shape[1]
        scores = scores.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool, device=x.device), 1), -1e30)
        pattern = self.attn_dropout(scores.softmax(dim=-1))
        z = torch.einsum("bhqk,bhkd->bhqd", pattern, v)
        return torch.einsum("bhqd,hdm->bqm", z, self.W_O) + self.b_O
"""
)

# projections inside a nested helper module with one-letter names; constructor (emb, heads, ctx, p)
NESTED = (
    HEADER
    + """
class Projections(nn.Module):
    def __init__(self, emb, bias):
        super().__init__()
        self.a = nn.Linear(emb, emb, bias=bias)
        self.b = nn.Linear(emb, emb, bias=bias)
        self.c = nn.Linear(emb, emb, bias=bias)


class Block(nn.Module):
    def __init__(self, emb, heads, ctx, p, use_bias=True):
        super().__init__()
        self.heads = heads
        self.proj = Projections(emb, use_bias)
        self.o = nn.Linear(emb, emb)
        self.dp = nn.Dropout(p)

    def forward(self, x):
        B, T, E = x.shape
        hd = E // self.heads
        q = self.proj.a(x).view(B, T, self.heads, hd).transpose(1, 2)
        k = self.proj.b(x).view(B, T, self.heads, hd).transpose(1, 2)
        v = self.proj.c(x).view(B, T, self.heads, hd).transpose(1, 2)
        w = (q @ k.transpose(-1, -2)) / hd ** 0.5
        w = w + torch.full((T, T), float("-inf"), device=x.device).triu(1)
        w = self.dp(w.softmax(-1))
        return self.o((w @ v).transpose(1, 2).contiguous().view(B, T, E))
"""
)

# separate projections with uncommon names, and the argument names of an attention library (dim, heads, dim_head)
TO_Q_K_V = (
    HEADER
    + """
class Attend(nn.Module):
    def __init__(self, dim, heads=4, dim_head=16, dropout=0.0, block_size=1024):
        super().__init__()
        inner = heads * dim_head
        self.heads = heads
        self.scale = dim_head ** -0.5
        self.toQ = nn.Linear(dim, inner, bias=False)
        self.toK = nn.Linear(dim, inner, bias=False)
        self.toV = nn.Linear(dim, inner, bias=False)
        self.toOut = nn.Linear(inner, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = (f(x).view(b, n, self.heads, -1).transpose(1, 2) for f in (self.toQ, self.toK, self.toV))
        dots = torch.matmul(q, k.transpose(-1, -2)) * self.scale
        mask = torch.ones(n, n, device=x.device, dtype=torch.bool).triu(1)
        dots = dots.masked_fill(mask, -torch.finfo(dots.dtype).max)
        attn = self.dropout(dots.softmax(dim=-1))
        out = torch.matmul(attn, v).transpose(1, 2).reshape(b, n, -1)
        return self.toOut(out)
"""
)

# q, k and v stacked along a leading axis of one raw parameter, each piece used as x @ W[i]
STACKED_XW = (
    HEADER
    + """
class Attn(nn.Module):
    def __init__(self, width, n_heads, p_drop=0.0):
        super().__init__()
        self.nh = n_heads
        self.w_in = nn.Parameter(torch.randn(3, width, width) / width ** 0.5)
        self.w_out = nn.Linear(width, width)
        self.p_drop = p_drop

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (torch.matmul(x, self.w_in[i]).view(B, T, self.nh, -1).transpose(1, 2) for i in range(3))
        s = q @ k.transpose(-2, -1) / math.sqrt(C // self.nh)
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        a = F.dropout(s.softmax(-1), self.p_drop, self.training)
        return self.w_out((a @ v).transpose(1, 2).reshape(B, T, C))
"""
)

# q, k, v and the output projection in one (4, d, d) parameter with a (4, d) bias, applied with F.linear; dropout
# on the attention weights and after the output projection (a to_out of Linear and Dropout, as lucidrains writes)
STACKED_QKVO = (
    HEADER
    + """
class QKVO(nn.Module):
    def __init__(self, d, heads, drop=0.0):
        super().__init__()
        self.heads = heads
        self.W = nn.Parameter(torch.empty(4, d, d).uniform_(-d ** -0.5, d ** -0.5))
        self.b = nn.Parameter(torch.zeros(4, d))
        self.attn_drop = nn.Dropout(drop)
        self.out_drop = nn.Dropout(drop)

    def forward(self, x):
        B, T, D = x.shape
        h = lambda t: t.view(B, T, self.heads, D // self.heads).transpose(1, 2)
        q, k, v = (h(F.linear(x, self.W[i], self.b[i])) for i in range(3))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(D // self.heads)
        att = att.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        y = self.attn_drop(att.softmax(-1)) @ v
        return self.out_drop(F.linear(y.transpose(1, 2).reshape(B, T, D), self.W[3], self.b[3]))
"""
)

# dropout on the attention weights and on the output projection's result, whatever the dropouts are called
TO_OUT_DROPOUT = (
    HEADER
    + """
class Attention(nn.Module):
    def __init__(self, dim, heads=8, dim_head=64, dropout=0.0):
        super().__init__()
        inner = heads * dim_head
        self.heads = heads
        self.to_qkv = nn.Linear(dim, 3 * inner, bias=False)
        self.attend_drop = nn.Dropout(dropout)
        self.to_out = nn.Sequential(nn.Linear(inner, dim), nn.Dropout(dropout))

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = (t.reshape(b, n, self.heads, -1).transpose(1, 2) for t in self.to_qkv(x).chunk(3, dim=-1))
        dots = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
        dots = dots.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        out = (self.attend_drop(dots.softmax(-1)) @ v).transpose(1, 2).reshape(b, n, -1)
        return self.to_out(out)
"""
)

HONEST = {
    "stacked_xw": (STACKED_XW, "Attn"),
    "stacked_qkvo": (STACKED_QKVO, "QKVO"),
    "to_out_dropout": (TO_OUT_DROPOUT, "Attention"),
    "fused_3hd": (FUSED_3HD, "SelfAttn"),
    "fused_h3d": (FUSED_H3D, "Attention"),
    "per_head_modules": (PER_HEAD_MODULES, "MultiHead"),
    "einsum_transposed": (EINSUM_TRANSPOSED, "MHSA"),
    "module_dict": (MODULE_DICT, "CausalMHA"),
    "sequential_out": (SEQUENTIAL_OUT, "MultiHeadSelfAttention"),
    "per_head_parameters": (PER_HEAD_PARAMETERS, "MultiHeadAttn"),
    "nested": (NESTED, "Block"),
    "to_q_k_v": (TO_Q_K_V, "Attend"),
}

# ------------------------------------------------------------------------------------------------- wrong answers
# each is an honest style above with one classic mistake; (source, class, the diagnosis the grader must give)

NO_SCALE = FUSED_3HD.replace(" / math.sqrt(q.size(-1))", "")
SOFTMAX_WRONG_AXIS = PER_HEAD_PARAMETERS.replace("scores.softmax(dim=-1)", "scores.softmax(dim=-2)")
HEADS_MERGED_WRONG = MODULE_DICT.replace("(a @ v).transpose(1, 2).reshape(B, T, W)", "(a @ v).reshape(B, T, W)")
NO_MASK = EINSUM_TRANSPOSED.replace('        scores = scores.masked_fill(~causal, float("-inf"))\n', "")

MASK_TRANSPOSED = STACKED_XW.replace(
    "torch.ones(T, T, dtype=torch.bool).triu(1)", "torch.ones(T, T, dtype=torch.bool).tril(-1)"
)
OUTPUT_DROPOUT_ONLY = TO_OUT_DROPOUT.replace("self.attend_drop(dots.softmax(-1))", "dots.softmax(-1)")

WRONG = {
    "mask_transposed": (MASK_TRANSPOSED, "Attn"),
    "output_dropout_only": (OUTPUT_DROPOUT_ONLY, "Attention"),
    "no_scale": (NO_SCALE, "SelfAttn"),
    "softmax_wrong_axis": (SOFTMAX_WRONG_AXIS, "MultiHeadAttn"),
    "heads_merged_wrong": (HEADS_MERGED_WRONG, "CausalMHA"),
    "no_mask": (NO_MASK, "MHSA"),
}
