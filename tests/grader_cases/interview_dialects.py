"""Interview answers that issue 21 found refused although correct: the course's own source notes (copied as
written, comments translated or trimmed), and the dialects candidates bring from books, papers and codebases.
Each class keeps its own name: interview mode grades whichever nn.Module the file defines."""
HEADER = "import math\nimport torch\nimport torch.nn.functional as F\nfrom torch import Tensor, nn\n\n"

# source note 000: (d_in, d_out, n_head, ctx_len, qkv_bias, dropout_rate), Wq..Wo, an additive -inf buffer.
# Its merge is view(B, S, D) with the INPUT width D: correct only when d_in == d_out.
NOTE_000 = HEADER + '''
B, S, D = 10, 20, 256


class MHA(nn.Module):
    def __init__(
        self,
        d_in: int = D,
        d_out: int = D,
        n_head: int = 8,
        ctx_len: int = S,
        qkv_bias: bool = False,
        dropout_rate: float = 0.2,
    ):
        super().__init__()
        if d_out % n_head != 0:
            raise ValueError(f"d_out % n_head = {d_out % n_head} != 0")
        self.n_head = n_head
        self.head_dim = d_out // n_head

        self.Wq = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.Wk = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.Wv = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.Wo = nn.Linear(d_out, d_out)

        self.register_buffer("mask", torch.full((ctx_len, ctx_len), -torch.inf).triu_(1))

        self.qkv_bias = qkv_bias
        self.dropout = nn.Dropout(dropout_rate)

    def forward(self, x: Tensor) -> Tensor:
        B, S, D = x.shape
        q = self.Wq(x)
        k = self.Wk(x)
        v = self.Wv(x)
        q = q.view(B, S, self.n_head, self.head_dim)
        k = k.view(B, S, self.n_head, self.head_dim)
        v = v.view(B, S, self.n_head, self.head_dim)
        q = q.transpose(1, 2)
        k = k.transpose(1, 2)
        v = v.transpose(1, 2)
        attn_scores = q @ k.transpose(2, 3) / k.shape[-1] ** 0.5
        attn_scores += self.mask[:S, :S]
        attn_weight = torch.softmax(attn_scores, -1)
        attn_weight = self.dropout(attn_weight)
        h = attn_weight @ v
        h = h.transpose(1, 2)
        h = h.contiguous().view(B, S, D)
        o = self.Wo(h)
        return o


x = torch.rand(B, S, D)
mha = MHA()
o = mha(x)
'''

# source note 001: (hidden_size, num_heads, p_dropout), w_q/w_k/w_v/w_out, forward(hidden_states, mask=None)
NOTE_001 = HEADER + '''
class MHA(nn.Module):
    def __init__(self, hidden_size, num_heads, p_dropout=0.1):
        super().__init__()
        assert hidden_size % num_heads == 0
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads

        self.w_q = nn.Linear(hidden_size, hidden_size)
        self.w_k   = nn.Linear(hidden_size, hidden_size)
        self.w_v = nn.Linear(hidden_size, hidden_size)
        self.w_out = nn.Linear(hidden_size, hidden_size)
        self.dropout = nn.Dropout(p=p_dropout)

    def forward(self, hidden_states, mask=None):
        batch_size, seq_len, _ = hidden_states.size()
        query = self.w_q(hidden_states).view(batch_size, seq_len, self.num_heads, self.head_dim).transpose(1, 2)
        key = self.w_k(hidden_states).view(batch_size, seq_len, self.num_heads, self.head_dim).transpose(1, 2)
        value = self.w_v(hidden_states).view(batch_size, seq_len, self.num_heads, self.head_dim).transpose(1, 2)
        scores = query @ key.transpose(-1, -2) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        p_attn = scores.softmax(dim=-1)
        p_attn = self.dropout(p_attn)
        x = p_attn @ value
        x = (
            x.transpose(1, 2)
            .contiguous()
            .view(batch_size, -1, self.head_dim * self.num_heads)
        )
        del query, key, value
        return self.w_out(x)
'''

# source note 004, the interview write-up: MultiHeadAttention(d_model, num_heads, dropout), w_q..w_o,
# forward(q, k, v, mask) with mask == 0 hidden
NOTE_004 = HEADER + '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.1):
        super().__init__()
        assert d_model % num_heads == 0, "d_model must be divisible by num_heads"
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor = None
    ) -> torch.Tensor:
        q_proj = self.w_q(q)
        k_proj = self.w_k(k)
        v_proj = self.w_v(v)
        q_split = q_proj.view(q_proj.size(0), -1, self.num_heads, self.d_k).transpose(1, 2)
        k_split = k_proj.view(k_proj.size(0), -1, self.num_heads, self.d_k).transpose(1, 2)
        v_split = v_proj.view(v_proj.size(0), -1, self.num_heads, self.d_k).transpose(1, 2)
        attn_scores = torch.matmul(q_split, k_split.transpose(-2, -1))
        attn_scores = attn_scores / torch.sqrt(torch.tensor(self.d_k, dtype=torch.float32, device=attn_scores.device))
        if mask is not None:
            attn_scores = attn_scores.masked_fill(mask == 0, -1e9)
        attn_weights = F.softmax(attn_scores, dim=-1)
        attn_weights = self.dropout(attn_weights)
        attn_output = torch.matmul(attn_weights, v_split)
        attn_output = attn_output.transpose(1, 2)
        attn_output = attn_output.contiguous().view(attn_output.size(0), -1, self.d_model)
        final_output = self.w_o(attn_output)
        return final_output
'''

# sequence-first tensors (seq, batch, d) unless batch_first=True, like nn.MultiheadAttention's default
SEQ_FIRST = HEADER + '''
class MultiHeadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout=0.0, batch_first=False):
        super().__init__()
        self.num_heads, self.head_dim, self.batch_first = num_heads, embed_dim // num_heads, batch_first
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, attn_mask=None):
        if not self.batch_first:
            x = x.transpose(0, 1)                                  # (T, B, C) -> (B, T, C)
        b, t, c = x.shape
        q, k, v = [p(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj)]
        s = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if attn_mask is not None:
            s = s.masked_fill(attn_mask, float("-inf"))            # True = not allowed, as in PyTorch
        y = (self.dropout(s.softmax(-1)) @ v).transpose(1, 2).reshape(b, t, c)
        y = self.out_proj(y)
        return y if self.batch_first else y.transpose(0, 1)
'''

# the book's signature, returning (context, attention weights)
BOOK_WEIGHTS = HEADER + '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        keys = self.W_key(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        values = self.W_value(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        attn_scores = queries @ keys.transpose(2, 3)
        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]
        attn_scores.masked_fill_(mask_bool, -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)
        context_vec = (attn_weights @ values).transpose(1, 2).contiguous().view(b, num_tokens, self.d_out)
        return self.out_proj(context_vec), attn_weights
'''

# the head's width given instead of the number of heads
HEAD_DIM = HEADER + '''
class MultiHeadAttention(nn.Module):
    def __init__(self, dim, head_dim=64, dropout=0.0):
        super().__init__()
        self.heads, self.head_dim = dim // head_dim, head_dim
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_k = nn.Linear(dim, dim, bias=False)
        self.to_v = nn.Linear(dim, dim, bias=False)
        self.to_out = nn.Linear(dim, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = [t(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
                   for t in (self.to_q, self.to_k, self.to_v)]
        dots = q @ k.transpose(-1, -2) * self.head_dim ** -0.5
        dots = dots.masked_fill(torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        out = self.dropout(dots.softmax(dim=-1)) @ v
        return self.to_out(out.transpose(1, 2).reshape(b, n, -1))
'''

# nanoGPT as written: CausalSelfAttention(config), c_attn/c_proj, a causal "bias" buffer
NANOGPT_CONFIG = HEADER + '''
from dataclasses import dataclass


@dataclass
class GPTConfig:
    block_size: int = 1024
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                                    .view(1, 1, config.block_size, config.block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        y = self.resid_dropout(self.c_proj(y))
        return y
'''

# W_Q..W_O in capitals, forward(x, mask) with True = keep
W_CAPITALS = HEADER + '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.n_heads, self.d_k = n_heads, d_model // n_heads
        self.W_Q = nn.Linear(d_model, d_model)
        self.W_K = nn.Linear(d_model, d_model)
        self.W_V = nn.Linear(d_model, d_model)
        self.W_O = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def split(self, t):
        return t.view(t.size(0), t.size(1), self.n_heads, self.d_k).transpose(1, 2)

    def forward(self, x, mask=None):
        Q, K, V = self.split(self.W_Q(x)), self.split(self.W_K(x)), self.split(self.W_V(x))
        scores = Q @ K.transpose(-1, -2) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        ctx = self.dropout(torch.softmax(scores, dim=-1)) @ V
        return self.W_O(ctx.transpose(1, 2).reshape(x.size(0), x.size(1), -1))
'''

# d2l.ai: (num_hiddens, num_heads, dropout, bias=False), W_q/W_k/W_v/W_o, forward(queries, keys, values, valid_lens)
D2L = HEADER + '''
class MultiHeadAttention(nn.Module):
    def __init__(self, num_hiddens, num_heads, dropout, bias=False, **kwargs):
        super().__init__()
        self.num_heads = num_heads
        self.dropout = nn.Dropout(dropout)
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_k = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_v = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)

    def transpose_qkv(self, X):
        X = X.reshape(X.shape[0], X.shape[1], self.num_heads, -1)
        X = X.permute(0, 2, 1, 3)
        return X.reshape(-1, X.shape[2], X.shape[3])

    def transpose_output(self, X):
        X = X.reshape(-1, self.num_heads, X.shape[1], X.shape[2])
        X = X.permute(0, 2, 1, 3)
        return X.reshape(X.shape[0], X.shape[1], -1)

    def forward(self, queries, keys, values, valid_lens=None):
        queries = self.transpose_qkv(self.W_q(queries))
        keys = self.transpose_qkv(self.W_k(keys))
        values = self.transpose_qkv(self.W_v(values))
        d = queries.shape[-1]
        scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)
        n = scores.shape[-1]
        causal = torch.ones(n, n, dtype=torch.bool, device=scores.device).triu(1)
        scores = scores.masked_fill(causal, -1e6)
        attention_weights = F.softmax(scores, dim=-1)
        output = torch.bmm(self.dropout(attention_weights), values)
        return self.W_o(self.transpose_output(output))
'''

# d2l.ai as printed: lazy layers, shaped by the first forward
D2L_LAZY = D2L.replace("nn.Linear(num_hiddens, num_hiddens, bias=bias)", "nn.LazyLinear(num_hiddens, bias=bias)")

# bare nn.Parameter matrices with the book's signature (x @ W, the book's SelfAttention_v1 style)
BOOK_PARAMETERS = HEADER + '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_out // num_heads
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))
        self.W_out = nn.Parameter(torch.rand(d_out, d_out))
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = [(x @ W).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
                   for W in (self.W_query, self.W_key, self.W_value)]
        scores = (q @ k.transpose(2, 3)).masked_fill(self.mask[:t, :t], -torch.inf)
        w = self.dropout(torch.softmax(scores / self.head_dim ** 0.5, dim=-1))
        return (w @ v).transpose(1, 2).reshape(b, t, -1) @ self.W_out
'''

# class names other than MultiHeadAttention, with no alias line
CAUSAL_SELF_ATTENTION = HEADER + '''
class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, dropout=0.0):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.n_head)
        att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        y = self.drop(att.softmax(-1)) @ v
        return self.proj(y.transpose(1, 2).reshape(B, T, C))
'''

MULTI_HEADED_ATTENTION = HEADER + '''
class MultiHeadedAttention(nn.Module):
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
        scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        p_attn = self.dropout(scores.softmax(dim=-1))
        x = torch.matmul(p_attn, value).transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        return self.linears[-1](x)
'''

# a file with helper modules beside the attention: the one that fits is graded
WITH_HELPERS = HEADER + '''
class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, dim, n_heads, dropout=0.0):
        super().__init__()
        self.n_heads = n_heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = [w(x).view(b, t, self.n_heads, -1).transpose(1, 2) for w in (self.wq, self.wk, self.wv)]
        s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + torch.full((t, t), float("-inf")).triu(1)
        return self.wo((self.dropout(s.softmax(-1)) @ v).transpose(1, 2).reshape(b, t, d))
'''

# name: (source, class to grade). At least twelve pass, in process and in the sandbox.
DIALECTS = {
    "note_000": (NOTE_000, "MHA"),
    "note_001": (NOTE_001, "MHA"),
    "note_004": (NOTE_004, "MultiHeadAttention"),
    "seq_first_batch_first_flag": (SEQ_FIRST, "MultiHeadAttention"),
    "book_returns_weights": (BOOK_WEIGHTS, "MultiHeadAttention"),
    "head_dim": (HEAD_DIM, "MultiHeadAttention"),
    "nanogpt_config": (NANOGPT_CONFIG, "CausalSelfAttention"),
    "w_capitals": (W_CAPITALS, "MultiHeadAttention"),
    "d2l_num_hiddens": (D2L, "MultiHeadAttention"),
    "d2l_lazy_linear": (D2L_LAZY, "MultiHeadAttention"),
    "book_parameters": (BOOK_PARAMETERS, "MultiHeadAttention"),
    "causal_self_attention": (CAUSAL_SELF_ATTENTION, "CausalSelfAttention"),
    "multi_headed_attention": (MULTI_HEADED_ATTENTION, "MultiHeadedAttention"),
    "with_helpers": (WITH_HELPERS, "Attention"),
}
