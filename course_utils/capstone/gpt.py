"""A small decoder-only GPT assembled from the course's own parts.

token embedding + positions -> ``n_layers`` x [pre-LayerNorm -> ``GroupedQueryAttention`` (causal, KV cache)
-> pre-LayerNorm -> MLP] -> final LayerNorm -> output head tied to the token embedding.

Positions are a swappable piece: ``POSITIONS[config.positions]`` builds a module that adds position
information to the token embeddings, given the position of the first token (which a KV cache shifts).
``"learned"`` (GPT-2's absolute embeddings) and ``"none"`` exist today; a rotary variant would leave the
input alone and rotate queries and keys inside the attention instead.

``mlp_hidden=0`` drops the MLPs: an attention-only transformer, the model of the induction-head papers.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, fields
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from ..lang import pick
from ..reference._checks import check_divisible
from ..reference.interop import mha_to_gqa
from ..reference.kv_cache import KVCache
from ..reference.multihead import GroupedQueryAttention


@dataclass
class GPTConfig:
    """Sizes of a ``GPT``; the names follow LLMs-from-scratch's ``GPT_CONFIG_124M`` plus GQA's ``n_kv_groups``."""

    vocab_size: int
    context_length: int
    emb_dim: int = 64
    n_heads: int = 4
    n_layers: int = 2
    n_kv_groups: int | None = None  # None: one K/V head per query head (MHA); 1: MQA
    mlp_hidden: int = 0  # 0: attention-only blocks
    drop_rate: float = 0.0
    qkv_bias: bool = False
    positions: str = "learned"  # a key of POSITIONS
    use_sdpa: bool = False  # run the attention through F.scaled_dot_product_attention

    def __post_init__(self):
        for name in ("vocab_size", "context_length", "emb_dim", "n_heads", "n_layers"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) <= 0:
                raise ValueError(
                    pick(
                        f"GPTConfig.{name} must be a positive int, got {getattr(self, name)!r}",
                        f"GPTConfig.{name} 必须是正整数，收到的是 {getattr(self, name)!r}",
                    )
                )
        if self.n_kv_groups is None:
            self.n_kv_groups = self.n_heads
        check_divisible(self.emb_dim, self.n_heads, f"emb_dim ({self.emb_dim}) and n_heads ({self.n_heads})")
        check_divisible(
            self.n_heads, self.n_kv_groups, f"n_heads ({self.n_heads}) and n_kv_groups ({self.n_kv_groups})"
        )
        if self.positions not in POSITIONS:
            raise ValueError(
                pick(
                    f"GPTConfig.positions={self.positions!r}; known: {', '.join(POSITIONS)}",
                    f"GPTConfig.positions={self.positions!r}；可用的是 {', '.join(POSITIONS)}",
                )
            )

    @classmethod
    def from_dict(cls, values: dict) -> "GPTConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                pick(
                    f"unknown GPTConfig fields {unknown}; known: {sorted(known)}",
                    f"未知的 GPTConfig 字段 {unknown}；可用的是 {sorted(known)}",
                )
            )
        return cls(**values)


class LearnedPositions(nn.Module):
    """GPT-2's absolute positions: a learned vector per position, added to the token embeddings."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.emb = nn.Embedding(config.context_length, config.emb_dim)

    def forward(self, x, start: int = 0):  # x: (B, T, C) token embeddings of positions start .. start+T-1
        positions = torch.arange(start, start + x.shape[1], device=x.device)
        return x + self.emb(positions)  # (T, C) broadcast over the batch


class NoPositions(nn.Module):
    """No position information at the input (a causal model can still infer some from the mask)."""

    def __init__(self, config: GPTConfig):
        super().__init__()

    def forward(self, x, start: int = 0):
        return x


POSITIONS = {"learned": LearnedPositions, "none": NoPositions}


class MLP(nn.Module):
    """Position-wise feed-forward: (B, T, C) -> (B, T, C) through ``hidden`` GELU units."""

    def __init__(self, emb_dim: int, hidden: int, drop_rate: float = 0.0):
        super().__init__()
        self.fc = nn.Linear(emb_dim, hidden)
        self.proj = nn.Linear(hidden, emb_dim)
        self.dropout = nn.Dropout(drop_rate)

    def forward(self, x):
        return self.dropout(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln(x)), then x + mlp(ln(x)) unless attention-only."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        c = config
        self.ln_1 = nn.LayerNorm(c.emb_dim)
        self.attn = GroupedQueryAttention(
            c.emb_dim,
            c.emb_dim,
            c.context_length,
            c.drop_rate,
            c.n_heads,
            c.n_kv_groups,
            c.qkv_bias,
            use_sdpa=c.use_sdpa,
        )
        self.mlp = None
        if c.mlp_hidden:
            self.ln_2 = nn.LayerNorm(c.emb_dim)
            self.mlp = MLP(c.emb_dim, c.mlp_hidden, c.drop_rate)
        self.dropout = nn.Dropout(c.drop_rate)  # on the residual branch, as in GPT-2

    def forward(self, x, cache: KVCache | None = None, return_weights: bool = False):
        out = self.attn(self.ln_1(x), cache=cache, return_weights=return_weights)
        out, weights = out if return_weights else (out, None)
        x = x + self.dropout(out)
        if self.mlp is not None:
            x = x + self.mlp(self.ln_2(x))
        return x, weights


class GPT(nn.Module):
    """Decoder-only language model: token ids (B, T) -> next-token logits (B, T, vocab_size).

    forward(idx, caches=None, return_weights=False)
      idx:            (B, T) int64 token ids
      caches:         one ``KVCache`` per layer (``make_caches``); idx holds only the new tokens
      return_weights: also return the attention weights, a list of (B, n_heads, T, T_keys) per layer
                      (needs ``use_sdpa=False``: the fused kernel never forms the weights)
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = c = GPTConfig(**asdict(config))  # a copy: use_sdpa below may change it
        self.tok_emb = nn.Embedding(c.vocab_size, c.emb_dim)
        self.pos = POSITIONS[c.positions](c)
        self.drop_emb = nn.Dropout(c.drop_rate)
        self.blocks = nn.ModuleList([Block(c) for _ in range(c.n_layers)])
        self.final_norm = nn.LayerNorm(c.emb_dim)
        self.out_head = nn.Linear(c.emb_dim, c.vocab_size, bias=False)
        self.out_head.weight = self.tok_emb.weight  # weight tying (GPT-2): one (vocab, C) matrix, two uses
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module):
        # GPT-2's N(0, 0.02): the default nn.Embedding N(0, 1) would make the tied head's logits huge
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    @property
    def layers(self) -> list[Block]:
        """The blocks, typed: ``nn.ModuleList`` hands out plain ``nn.Module``s."""
        return cast("list[Block]", list(self.blocks))

    @property
    def use_sdpa(self) -> bool:
        return all(block.attn.use_sdpa for block in self.layers)

    @use_sdpa.setter
    def use_sdpa(self, value: bool) -> None:
        """Switch every layer between the reference attention (weights visible) and the fused SDPA kernel."""
        self.config.use_sdpa = bool(value)
        for block in self.layers:
            block.attn.use_sdpa = bool(value)

    def make_caches(self, batch_size: int, preallocate: bool = False, max_len: int | None = None) -> list[KVCache]:
        """One KV cache per layer (growing, or preallocated for ``max_len`` tokens)."""
        return [block.attn.make_cache(batch_size, preallocate, max_len) for block in self.layers]

    def _check_idx(self, idx, start):
        if not isinstance(idx, torch.Tensor) or idx.ndim != 2:
            shape = tuple(idx.shape) if isinstance(idx, torch.Tensor) else type(idx).__name__
            raise ValueError(
                pick(
                    f"idx must be a (batch, num_tokens) tensor of token ids, got {shape}"
                    + (
                        "; add a batch axis with idx.unsqueeze(0)"
                        if isinstance(idx, torch.Tensor) and idx.ndim == 1
                        else ""
                    ),
                    f"idx 必须是由 token id 组成的 (batch, num_tokens) 张量，收到的是 {shape}"
                    + (
                        "；用 idx.unsqueeze(0) 加上 batch 轴" if isinstance(idx, torch.Tensor) and idx.ndim == 1 else ""
                    ),
                )
            )
        if idx.dtype not in (torch.int64, torch.int32):
            raise ValueError(
                pick(
                    f"idx must hold integer token ids (int64), got dtype {idx.dtype}",
                    f"idx 必须是整数 token id（int64），收到的 dtype 是 {idx.dtype}",
                )
            )
        if idx.shape[1] == 0:
            raise ValueError(
                pick(
                    "idx has no tokens",
                    "idx 里没有 token",
                )
            )
        if start + idx.shape[1] > self.config.context_length:
            cached = f"{start} cached + " if start else ""
            raise ValueError(
                pick(
                    f"{cached}{idx.shape[1]} tokens exceed context_length={self.config.context_length}",
                    f"{cached}{idx.shape[1]} 个 token 超过了 context_length={self.config.context_length}",
                )
            )
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= self.config.vocab_size):
            raise ValueError(
                pick(
                    f"token ids must lie in [0, {self.config.vocab_size - 1}], "
                    f"got [{int(idx.min())}, {int(idx.max())}]",
                    f"token id 必须在 [0, {self.config.vocab_size - 1}] 之内，"
                    f"收到的范围是 [{int(idx.min())}, {int(idx.max())}]",
                )
            )

    def forward(self, idx, caches: list[KVCache] | None = None, return_weights: bool = False):
        start = 0
        if caches is not None:
            if len(caches) != len(self.blocks):
                raise ValueError(
                    pick(
                        f"got {len(caches)} caches for {len(self.blocks)} layers; use make_caches()",
                        f"{len(self.blocks)} 层却给了 {len(caches)} 个缓存；请用 make_caches()",
                    )
                )
            start = caches[0].seq_len
        self._check_idx(idx, start)
        x = self.drop_emb(self.pos(self.tok_emb(idx), start))  # (B, T, C)
        weights = []
        for i, block in enumerate(self.blocks):
            x, w = block(x, None if caches is None else caches[i], return_weights)
            weights.append(w)
        logits = self.out_head(self.final_norm(x))  # (B, T, vocab)
        return (logits, weights) if return_weights else logits

    @torch.no_grad()
    def generate(
        self,
        idx,
        max_new_tokens: int,
        *,
        temperature: float = 0.0,
        top_k: int | None = None,
        cache: str | None = "growing",
        generator: torch.Generator | None = None,
    ):
        """Continue ``idx`` (B, T) by ``max_new_tokens`` tokens; returns (B, T + max_new_tokens).

        temperature 0 is greedy (argmax); otherwise sample from softmax(logits / temperature), optionally
        among the ``top_k`` most likely tokens. cache: "growing", "preallocated" (for exactly the tokens
        needed) or None (recompute the whole prefix at every step, the baseline the cache must equal).
        """
        self._check_idx(idx, 0)
        if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise ValueError(
                pick(
                    f"max_new_tokens must be a non-negative int, got {max_new_tokens!r}",
                    f"max_new_tokens 必须是非负整数，收到的是 {max_new_tokens!r}",
                )
            )
        total = idx.shape[1] + max_new_tokens
        if total > self.config.context_length:
            raise ValueError(
                pick(
                    f"prompt of {idx.shape[1]} tokens + max_new_tokens={max_new_tokens} = {total} exceed "
                    f"context_length={self.config.context_length} (learned positions cannot go further)",
                    f"提示词 {idx.shape[1]} 个 token + max_new_tokens={max_new_tokens} = {total}，"
                    f"超过了 context_length={self.config.context_length}（学出来的位置编码不能再往后）",
                )
            )
        if temperature < 0:
            raise ValueError(
                pick(
                    f"temperature must be >= 0 (0 = greedy), got {temperature}",
                    f"temperature 必须 >= 0（0 = 贪心），收到的是 {temperature}",
                )
            )
        if top_k is not None and not 1 <= top_k <= self.config.vocab_size:
            raise ValueError(
                pick(
                    f"top_k must lie in [1, vocab_size={self.config.vocab_size}], got {top_k}",
                    f"top_k 必须在 [1, vocab_size={self.config.vocab_size}] 之内，收到的是 {top_k}",
                )
            )
        if cache not in ("growing", "preallocated", None):
            raise ValueError(
                pick(
                    f"cache must be 'growing', 'preallocated' or None, got {cache!r}",
                    f"cache 必须是 'growing'、'preallocated' 或 None，收到的是 {cache!r}",
                )
            )

        caches = None
        if cache is not None:
            caches = self.make_caches(idx.shape[0], preallocate=cache == "preallocated", max_len=total)
        new_input = idx  # the prompt first (prefill), then one token per step
        for _ in range(max_new_tokens):
            logits = self(new_input if caches is not None else idx, caches)[:, -1]  # (B, vocab)
            next_token = self._pick(logits, temperature, top_k, generator)  # (B, 1)
            idx = torch.cat([idx, next_token], dim=1)
            new_input = next_token
        return idx

    @staticmethod
    def _pick(logits, temperature, top_k, generator):
        if temperature == 0:
            return logits.argmax(dim=-1, keepdim=True)
        logits = logits / temperature
        if top_k is not None:
            kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        return torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)

    # ------------------------------------------------------------------ checkpoints

    def checkpoint(self, **meta) -> dict:
        """A dict of plain types and tensors (loads with ``torch.load(weights_only=True)``)."""
        state = {
            k: v.detach().cpu().clone()
            for k, v in self.state_dict().items()
            if not k.endswith("attn.mask") and k != "out_head.weight"
        }  # buffers and tied copy are rebuilt
        return {"config": asdict(self.config), "state_dict": state, "meta": meta}

    @classmethod
    def from_checkpoint(cls, checkpoint, map_location="cpu") -> "GPT":
        """A model from ``checkpoint()``'s dict or a path to a file saved with ``torch.save``."""
        if not isinstance(checkpoint, dict):
            checkpoint = torch.load(checkpoint, map_location=map_location, weights_only=True)
        model = cls(GPTConfig.from_dict(checkpoint["config"]))
        model.to(checkpoint["state_dict"]["tok_emb.weight"].dtype)  # the checkpoint's precision
        missing, unexpected = model.load_state_dict(checkpoint["state_dict"], strict=False)
        missing = [k for k in missing if not k.endswith("attn.mask") and k != "out_head.weight"]
        if missing or unexpected:
            raise ValueError(
                pick(
                    f"checkpoint does not fit the model: missing {missing}, unexpected {unexpected}",
                    f"checkpoint 与模型对不上：缺少 {missing}，多出 {unexpected}",
                )
            )
        return model.to(map_location)


def pool_kv_heads(model: GPT, n_kv_groups: int) -> GPT:
    """A copy of ``model`` whose every layer has ``n_kv_groups`` K/V heads, mean-pooled from its own
    (``mha_to_gqa`` per layer); everything else is copied. MHA -> GQA, or -> MQA with ``n_kv_groups=1``."""
    config = GPTConfig(**{**asdict(model.config), "n_kv_groups": n_kv_groups})
    w = model.tok_emb.weight
    pooled = GPT(config).to(device=w.device, dtype=w.dtype)
    own = {k: v for k, v in model.state_dict().items() if ".attn." not in k}
    pooled.load_state_dict(own, strict=False)
    for src, dst in zip(model.layers, pooled.layers, strict=True):
        dst.attn = mha_to_gqa(src.attn, n_kv_groups)
    return pooled.train(model.training)


def head_outputs(model: GPT, idx) -> list[torch.Tensor]:
    """Each layer's per-head context vectors, as they enter ``out_proj``: a list of (B, T, n_heads, head_dim).

    What ``ablate_heads`` replaces; their mean over a batch is the value of a mean ablation."""
    n_heads = model.config.n_heads
    captured, handles = [], []
    for block in model.layers:
        handles.append(
            block.attn.out_proj.register_forward_pre_hook(
                lambda module, args: captured.append(args[0].unflatten(-1, (n_heads, -1)))
            )
        )
    try:
        with torch.no_grad():
            model(idx)
    finally:
        for handle in handles:
            handle.remove()
    return captured


@contextlib.contextmanager
def ablate_heads(model: GPT, heads, replace_with=None):
    """Within the ``with`` block, the (layer, head) pairs in ``heads`` are ablated: their output is replaced.

    A head's context vector occupies columns ``head * head_dim : (head + 1) * head_dim`` of the merged
    heads that enter ``out_proj``; a forward pre-hook overwrites them. By default with 0 (zero ablation);
    ``replace_with[(layer, head)]``, a tensor that broadcasts to (B, T, head_dim), gives another value, e.g.
    the head's mean output over a batch (mean ablation, from ``head_outputs``).
    """
    heads = list(heads)
    replace_with = dict(replace_with or {})
    n_layers, n_heads = model.config.n_layers, model.config.n_heads
    for layer, head in heads:
        if not (0 <= layer < n_layers and 0 <= head < n_heads):
            raise ValueError(
                pick(
                    f"head ({layer}, {head}) does not exist: layers 0..{n_layers - 1}, heads 0..{n_heads - 1}",
                    f"头 ({layer}, {head}) 不存在：层号 0..{n_layers - 1}，头号 0..{n_heads - 1}",
                )
            )
    unused = set(replace_with) - set(heads)
    if unused:
        raise ValueError(
            pick(
                f"replace_with names heads that are not ablated: {sorted(unused)}",
                f"replace_with 里有没被消融的头：{sorted(unused)}",
            )
        )
    head_dim = model.config.emb_dim // n_heads
    handles = []
    for layer in sorted({layer for layer, _ in heads}):
        cols = [h for l, h in heads if l == layer]

        def replace_heads(module, args, layer=layer, cols=cols):
            (merged,) = args  # (B, T, n_heads * head_dim)
            merged = merged.clone()
            for h in cols:
                merged[..., h * head_dim : (h + 1) * head_dim] = replace_with.get((layer, h), 0.0)
            return (merged,)

        handles.append(model.layers[layer].attn.out_proj.register_forward_pre_hook(replace_heads))
    try:
        yield model
    finally:
        for handle in handles:
            handle.remove()
