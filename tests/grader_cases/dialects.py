"""Interview answers in the dialects candidates really write, each as the candidate would (not derived from the
grader's code), with lines tagged ``#TAG`` for the mistakes: ``mutate(DIALECTS[name], {"TAG": "new line"})``."""
HEADER = "import math\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n"

HUGGING_FACE = HEADER + '''
class MultiHeadAttention(nn.Module):
    """q_proj/k_proj/v_proj/o_proj, forward(x, mask=None) with mask == 0 hidden."""
    def __init__(self, d_model, num_heads, dropout=0.0):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_model // num_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)
        self.attn_dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        bsz, seq, d_model = x.shape
        q = self.q_proj(x).view(bsz, seq, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(bsz, seq, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(bsz, seq, self.num_heads, self.head_dim).transpose(1, 2)
        attn = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)  #SCALE
        if mask is not None:
            attn = attn.masked_fill(mask == 0, float("-inf"))
        attn = self.attn_dropout(F.softmax(attn, dim=-1))
        out = torch.matmul(attn, v).transpose(1, 2).contiguous().view(bsz, seq, d_model)  #MERGE
        return self.o_proj(out)
'''

NANOGPT = HEADER + '''
class CausalSelfAttention(nn.Module):
    """One fused c_attn (q, k, v as rows), a causal buffer, forward(x)."""
    def __init__(self, n_embd, n_head, dropout=0.0, block_size=32):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(dropout)
        self.n_head, self.n_embd = n_head, n_embd
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))  #MASK
        att = F.softmax(att, dim=-1)  #SOFTMAX
        att = self.attn_dropout(att)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)

MultiHeadAttention = CausalSelfAttention
'''

ANNOTATED = HEADER + '''
def attention(query, key, value, mask=None, dropout=None):
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)  #FILL
    p_attn = scores.softmax(dim=-1)
    if dropout is not None:
        p_attn = dropout(p_attn)
    return torch.matmul(p_attn, value), p_attn


class MultiHeadedAttention(nn.Module):
    """The annotated transformer's: (h, d_model, dropout), linears[0..3], forward(query, key, value, mask)."""
    def __init__(self, h, d_model, dropout=0.1):
        super().__init__()
        self.d_k, self.h = d_model // h, h
        self.linears = nn.ModuleList([nn.Linear(d_model, d_model) for _ in range(4)])
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, query, key, value, mask=None):
        if mask is not None:
            mask = mask.unsqueeze(1)
        nbatches = query.size(0)
        query, key, value = [lin(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
                             for lin, x in zip(self.linears, (query, key, value))]
        x, self.attn = attention(query, key, value, mask=mask, dropout=self.dropout)
        x = x.transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        return self.linears[-1](x)  #OUT

MultiHeadAttention = MultiHeadedAttention
'''

W_QKVO = HEADER + '''
class MultiHeadAttention(nn.Module):
    """W_q/W_k/W_v/W_o, forward(x, attn_mask=None) with True = hidden."""
    def __init__(self, embed_dim, num_heads, dropout=0.0):
        super().__init__()
        self.h, self.dk = num_heads, embed_dim // num_heads
        self.W_q = nn.Linear(embed_dim, embed_dim, bias=False)
        self.W_k = nn.Linear(embed_dim, embed_dim, bias=False)
        self.W_v = nn.Linear(embed_dim, embed_dim, bias=False)
        self.W_o = nn.Linear(embed_dim, embed_dim)
        self.drop = nn.Dropout(dropout)

    def heads(self, t):
        b, n, _ = t.shape
        return t.reshape(b, n, self.h, self.dk).permute(0, 2, 1, 3)

    def forward(self, x, attn_mask=None):
        q, k, v = self.heads(self.W_q(x)), self.heads(self.W_k(x)), self.heads(self.W_v(x))
        s = q @ k.mT / self.dk ** 0.5  #SCALE
        if attn_mask is not None:
            s = s.masked_fill(attn_mask, float("-inf"))  #MASK
        o = self.drop(s.softmax(-1)) @ v  #ATTN
        return self.W_o(o.permute(0, 2, 1, 3).flatten(2))
'''

LLAMA = HEADER + '''
class Attention(nn.Module):
    """wq/wk/wv/wo without biases, (dim, n_heads), an additive causal mask built in forward."""
    def __init__(self, dim, n_heads, dropout=0.0):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, dim // n_heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim).transpose(1, 2)  #SPLIT
        xk = self.wk(x).view(bsz, seqlen, self.n_heads, self.head_dim).transpose(1, 2)  #SPLITK
        xv = self.wv(x).view(bsz, seqlen, self.n_heads, self.head_dim).transpose(1, 2)  #SPLITV
        mask = torch.full((seqlen, seqlen), float("-inf")).triu(1)  #MASK
        scores = xq @ xk.transpose(2, 3) / math.sqrt(self.head_dim) + mask
        scores = self.dropout(F.softmax(scores.float(), dim=-1).type_as(xq))
        out = (scores @ xv).transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(out)

MultiHeadAttention = Attention
'''

FUSED_ADDITIVE = HEADER + '''
class SelfAttention(nn.Module):
    """One fused in_proj, forward(hidden_states, attention_mask=None) with an additive 0 / -inf mask."""
    def __init__(self, hidden_size, num_attention_heads, attention_probs_dropout_prob=0.0):
        super().__init__()
        self.nh, self.hd = num_attention_heads, hidden_size // num_attention_heads
        self.in_proj = nn.Linear(hidden_size, 3 * hidden_size)
        self.out = nn.Linear(hidden_size, hidden_size)
        self.dropout = nn.Dropout(attention_probs_dropout_prob)

    def forward(self, hidden_states, attention_mask=None):
        b, t, c = hidden_states.shape
        qkv = self.in_proj(hidden_states).view(b, t, 3, self.nh, self.hd).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  #QKV
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(self.hd)
        if attention_mask is not None:
            scores = scores + attention_mask  #MASK
        probs = self.dropout(scores.softmax(-1))
        return self.out(torch.einsum("bhqk,bhkd->bqhd", probs, v).reshape(b, t, c))

MultiHeadAttention = SelfAttention
'''

BARE_MATRICES = HEADER + '''
class MultiHeadAttention(nn.Module):
    """nn.Parameter matrices used as x @ W (like the book's SelfAttention_v1), forward(x), causal built in."""
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.W_q = nn.Parameter(torch.randn(d_model, d_model) * 0.02)
        self.W_k = nn.Parameter(torch.randn(d_model, d_model) * 0.02)
        self.W_v = nn.Parameter(torch.randn(d_model, d_model) * 0.02)
        self.W_o = nn.Parameter(torch.randn(d_model, d_model) * 0.02)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = [(x @ W).view(b, n, self.n_heads, self.d_head).transpose(1, 2) for W in (self.W_q, self.W_k, self.W_v)]
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)  #SCALE
        future = torch.ones(n, n, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(future, float("-inf"))  #MASK
        w = self.dropout(torch.softmax(scores, dim=-1))
        return (w @ v).transpose(1, 2).reshape(b, n, d) @ self.W_o
'''

DIALECTS = {"hugging_face": HUGGING_FACE, "nanogpt_fused": NANOGPT, "annotated_transformer": ANNOTATED,
            "w_qkvo_true_hidden": W_QKVO, "llama_no_bias": LLAMA, "fused_additive_mask": FUSED_ADDITIVE,
            "bare_matrices": BARE_MATRICES}

# (dialect, expected diagnosis, edits): at least two named mistakes per dialect
MISTAKES = [
    ("hugging_face", "scale_d_out", {"SCALE": "attn = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(d_model)"}),
    ("hugging_face", "merge_no_transpose", {"MERGE": "out = torch.matmul(attn, v).reshape(bsz, seq, d_model)"}),
    ("nanogpt_fused", "no_causal_mask", {"MASK": "pass"}),
    ("nanogpt_fused", "softmax_wrong_axis", {"SOFTMAX": "att = F.softmax(att, dim=-2)"}),
    ("annotated_transformer", "mask_zero_fill", {"FILL": "scores = scores.masked_fill(mask == 0, 0.0)"}),
    ("annotated_transformer", "no_out_proj", {"OUT": "return x + 0 * self.linears[-1](x)"}),
    ("w_qkvo_true_hidden", "no_scale", {"SCALE": "s = q @ k.mT"}),
    ("w_qkvo_true_hidden", "mask_after_softmax", {
        "MASK": "pass", "ATTN": "o = self.drop(s.softmax(-1).masked_fill(attn_mask, 0.0) if attn_mask is not None "
                                "else s.softmax(-1)) @ v"}),
    ("llama_no_bias", "diagonal_masked", {"MASK": 'mask = torch.full((seqlen, seqlen), float("-inf")).triu(0)'}),
    ("llama_no_bias", "split_no_transpose", {"SPLIT": "xq = self.wq(x).view(bsz, self.n_heads, seqlen, self.head_dim)",
                                             "SPLITK": "xk = self.wk(x).view(bsz, self.n_heads, seqlen, self.head_dim)",
                                             "SPLITV": "xv = self.wv(x).view(bsz, self.n_heads, seqlen, self.head_dim)"}),
    ("fused_additive_mask", "keys_from_query", {"QKV": "q, k, v = qkv[0], qkv[0], qkv[2]"}),
    ("fused_additive_mask", "values_from_key", {"QKV": "q, k, v = qkv[0], qkv[1], qkv[1]"}),
    ("bare_matrices", "scale_no_sqrt", {"SCALE": "scores = q @ k.transpose(-2, -1) / self.d_head"}),
    ("bare_matrices", "mask_inverted", {"MASK": "scores = scores.masked_fill(~future, float('-inf'))"}),
]
