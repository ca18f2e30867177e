"""A small GPT-style decoder built from course_utils attention, and greedy decoding three ways.

Random weights are enough: decoding speed does not depend on what the weights say, and greedy decoding
is deterministic, so the three decoders must produce the same tokens.

  none          no cache: every step runs the whole prefix again (O(T) work per token, O(T^2) in all)
  growing       GrowingKVCache: each step computes one token and torch.cat's it onto the cache
  preallocated  PreallocatedKVCache: each step computes one token and writes it in place
"""

from __future__ import annotations

import time

import torch
from torch import nn

from course_utils import GroupedQueryAttention, PreallocatedKVCache, kv_cache_bytes, synchronize

CACHE_MODES = ("none", "growing", "preallocated")


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, d_model, context_length, num_heads, num_kv_groups):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = GroupedQueryAttention(
            d_model, d_model, context_length, 0.0, num_heads, num_kv_groups, use_sdpa=True
        )
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            # GPT-2's tanh GELU; the exact erf GELU is also far slower on some CPUs for one-token inputs
            nn.Linear(d_model, 4 * d_model),
            nn.GELU(approximate="tanh"),
            nn.Linear(4 * d_model, d_model),
        )

    def forward(self, x, cache=None):
        x = x + self.attn(self.ln1(x), cache=cache)
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """Token + position embeddings, ``num_layers`` blocks, final LayerNorm, unembedding to the vocabulary."""

    def __init__(self, vocab_size, d_model, num_layers, num_heads, num_kv_groups, context_length):
        super().__init__()
        self.context_length = context_length
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(context_length, d_model)
        self.blocks = nn.ModuleList(
            [Block(d_model, context_length, num_heads, num_kv_groups) for _ in range(num_layers)]
        )
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

    def make_caches(self, batch_size, preallocate, max_len=None):
        return [block.attn.make_cache(batch_size, preallocate=preallocate, max_len=max_len) for block in self.blocks]

    def forward(self, idx, caches=None):
        """idx (B, T) token ids; with caches they are the newest T tokens after the cached ones -> (B, T, vocab)."""
        past = 0 if caches is None else caches[0].seq_len
        pos = torch.arange(past, past + idx.shape[1], device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)  # (B, T, d)
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        return self.lm_head(self.ln_f(x))


def build_model(cfg, num_kv_groups, device, dtype, seed=0):
    torch.manual_seed(seed)
    model = TinyGPT(
        cfg["vocab_size"], cfg["d_model"], cfg["num_layers"], cfg["num_heads"], num_kv_groups, cfg["context_length"]
    )
    return model.to(device=device, dtype=dtype).eval()


@torch.no_grad()
def generate(model, prompt, new_tokens, mode):
    """Greedy decoding of ``new_tokens`` tokens after ``prompt`` (B, T0).

    Returns (tokens (B, new_tokens), per-step seconds, caches). Each step is synchronised and timed,
    as a real decoder must look at each token (to stop at end-of-text) before it computes the next.
    """
    if mode not in CACHE_MODES:
        raise ValueError(f"mode must be one of {CACHE_MODES}, got {mode!r}")
    device = prompt.device
    max_len = prompt.shape[1] + new_tokens - 1  # the last new token is never fed back
    if max_len > model.context_length:
        raise ValueError(
            f"prompt ({prompt.shape[1]}) + {new_tokens} new tokens exceed context_length={model.context_length}"
        )
    caches = None if mode == "none" else model.make_caches(prompt.shape[0], mode == "preallocated", max_len)
    idx, feed, step_times = prompt, prompt, []
    for _ in range(new_tokens):
        start = time.perf_counter()
        logits = model(idx if caches is None else feed, caches)  # (B, T, vocab)
        feed = logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
        idx = torch.cat([idx, feed], dim=1)
        synchronize(device)
        step_times.append(time.perf_counter() - start)
    return idx[:, prompt.shape[1] :], step_times, caches


def cache_bytes(model, caches, batch_size, bytes_per_element):
    """Measured (sum of cache.nbytes) and theoretical (course_utils.kv_cache_bytes) KV-cache bytes."""
    attn = model.blocks[0].attn
    # a preallocated cache holds max_len slots whatever is written; a growing one holds seq_len tokens
    seq_len = caches[0].max_len if isinstance(caches[0], PreallocatedKVCache) else caches[0].seq_len
    measured = sum(c.nbytes for c in caches)
    theory = kv_cache_bytes(
        len(model.blocks), attn.num_kv_groups, attn.head_dim, seq_len, batch_size, bytes_per_element
    )
    return measured, theory
