"""The recall task of notebook 16 (联想回忆): what a fixed-size state forgets and one attention layer does not.

A sequence holds ``num_pairs`` key-value pairs, one pair per position (its key's and its value's embeddings side by
side), then every key again, in a shuffled order, as queries; the answer at a query is the value stored with that
key. Keys are distinct, values random: nothing but the pairs predicts an answer. This is the multi-query
associative recall of Arora et al. (2023, "Zoology"), with each pair in one position so that no layer has to move a
key onto its value first.

Two models of two layers each, the same sizes: ``linear`` stacks two Gated DeltaNet layers, ``hybrid`` replaces the
second by the course's causal multi-head attention (``course_utils.MultiHeadAttention``), as Qwen3-Next and Kimi
Linear keep about one layer in four as full attention. A Gated DeltaNet layer keeps, per head, a (K, V) state however
many pairs it has read; the attention layer keeps every pair's key and value.
``python -m course_utils.capstone.recall`` (run by ``make train``) trains both on one CPU thread and writes
``checkpoints/recall_<name>.pt``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..lang import pick
from ..reference.gated_delta import chunk_gated_delta_rule, recurrent_gated_delta_rule
from ..reference.multihead import MultiHeadAttention
from .induction import CHECKPOINT_DIR, ProgressBar, TrainConfig, _step

NUM_KEYS, NUM_VALUES = 64, 64
MIN_PAIRS, MAX_PAIRS = 4, 64
EVAL_PAIRS = (4, 8, 16, 24, 32, 48, 64)
KINDS = {"linear": ("gated_deltanet", "gated_deltanet"), "hybrid": ("gated_deltanet", "attention")}


@dataclass
class RecallBatch:
    """keys, values (B, N): the pairs in order; queries (B, N): the same keys shuffled; answers (B, N): their values."""

    keys: torch.Tensor
    values: torch.Tensor
    queries: torch.Tensor
    answers: torch.Tensor


def make_batch(batch_size: int, num_pairs: int, generator: torch.Generator | None = None) -> RecallBatch:
    """``batch_size`` sequences of ``num_pairs`` pairs (distinct keys out of NUM_KEYS) and ``num_pairs`` queries."""
    if not 1 <= num_pairs <= NUM_KEYS:
        raise ValueError(
            pick(
                f"num_pairs={num_pairs} must lie in [1, {NUM_KEYS}]: the keys of a sequence are distinct",
                f"num_pairs={num_pairs} 必须在 [1, {NUM_KEYS}] 之内：一条序列里的键互不相同",
            )
        )
    keys = torch.argsort(torch.rand(batch_size, NUM_KEYS, generator=generator), dim=1)[:, :num_pairs]
    values = torch.randint(0, NUM_VALUES, (batch_size, num_pairs), generator=generator)
    order = torch.argsort(torch.rand(batch_size, num_pairs, generator=generator), dim=1)
    return RecallBatch(keys, values, keys.gather(1, order), values.gather(1, order))


# -------------------------------------------------------------------------------------------------------- the model


@dataclass
class RecallConfig:
    layers: tuple[str, ...] = KINDS["hybrid"]
    emb_dim: int = 64
    num_heads: int = 2
    head_dim: int = 8  # the Gated DeltaNet layer's key and value width per head: its state is (8, 8) per head
    chunk_size: int = 64


class GatedDeltaNetLayer(nn.Module):
    """A Gated DeltaNet layer as Qwen3-Next builds it, less its short convolution (each position here already holds
    its whole pair) and its gated output norm (RMSNorm times SiLU of another projection): q, k, v projections,
    beta = sigmoid(b x), the decay's log g = -exp(A_log) * softplus(a x + dt_bias) (Mamba-2's parametrisation), q and
    k L2-normalised."""

    def __init__(self, emb_dim: int, num_heads: int, head_dim: int, chunk_size: int):
        super().__init__()
        self.num_heads, self.head_dim, self.chunk_size = num_heads, head_dim, chunk_size
        self.qkv = nn.Linear(emb_dim, 3 * num_heads * head_dim, bias=False)
        self.gates = nn.Linear(emb_dim, 2 * num_heads)  # a and b, one each per head
        self.A_log = nn.Parameter(torch.log(torch.empty(num_heads).uniform_(1, 16)))
        dt = torch.exp(torch.empty(num_heads).uniform_(math.log(1e-3), math.log(0.1)))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus(dt_bias) = dt at the start
        self.out_proj = nn.Linear(num_heads * head_dim, emb_dim, bias=False)

    def forward(self, x, state=None, return_state=False):
        """x (B, T, emb_dim) -> (B, T, emb_dim), from ``state`` (B, H, d, d) if given, and the state after the last
        token if ``return_state``: one token with a state is a decoding step (the recurrence, as Hugging Face's
        layer decodes), anything else runs in chunks."""
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.num_heads, self.head_dim).unbind(2)  # each (B, T, H, d)
        a, beta = self.gates(x).chunk(2, dim=-1)  # (B, T, H) each
        g = -self.A_log.exp() * F.softplus(a + self.dt_bias)
        if t == 1 and state is not None:
            out, state = recurrent_gated_delta_rule(
                q, k, v, g, beta.sigmoid(), initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True
            )
        else:
            out, state = chunk_gated_delta_rule(
                q, k, v, g, beta.sigmoid(), chunk_size=self.chunk_size, initial_state=state,
                output_final_state=return_state, use_qk_l2norm_in_kernel=True,
            )  # fmt: skip
        out = self.out_proj(out.reshape(b, t, -1))
        return (out, state) if return_state else out

    def state_bytes(self, batch_size: int = 1) -> int:
        """What this layer keeps per sequence, whatever the length: one (head_dim, head_dim) state per head."""
        return batch_size * self.num_heads * self.head_dim * self.head_dim * self.A_log.element_size()


class RecallModel(nn.Module):
    """Pairs and queries -> two layers (pre-LayerNorm, residual, each followed by an MLP) -> a value per query."""

    def __init__(self, config: RecallConfig):
        super().__init__()
        self.config = c = config
        half = c.emb_dim // 2
        self.key_emb = nn.Embedding(NUM_KEYS, half)
        self.value_emb = nn.Embedding(NUM_VALUES + 1, half)  # the last row marks a query: "value unknown"
        context = 2 * MAX_PAIRS
        self.mixers = nn.ModuleList(
            GatedDeltaNetLayer(c.emb_dim, c.num_heads, c.head_dim, c.chunk_size)
            if kind == "gated_deltanet"
            else MultiHeadAttention(c.emb_dim, c.emb_dim, context, 0.0, c.num_heads, use_sdpa=True)
            for kind in c.layers
        )
        self.norms = nn.ModuleList(nn.LayerNorm(c.emb_dim) for _ in c.layers)
        self.mlps = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(c.emb_dim), nn.Linear(c.emb_dim, 2 * c.emb_dim), nn.GELU(),
                          nn.Linear(2 * c.emb_dim, c.emb_dim))
            for _ in c.layers
        )  # fmt: skip
        self.head = nn.Sequential(nn.LayerNorm(c.emb_dim), nn.Linear(c.emb_dim, NUM_VALUES))

    def forward(self, batch: RecallBatch) -> torch.Tensor:
        """Logits (B, N, NUM_VALUES) at the N query positions."""
        unknown = self.value_emb.weight[NUM_VALUES].expand(*batch.queries.shape, -1)
        pairs = torch.cat([self.key_emb(batch.keys), self.value_emb(batch.values)], dim=-1)  # (B, N, emb_dim)
        asked = torch.cat([self.key_emb(batch.queries), unknown], dim=-1)
        x = torch.cat([pairs, asked], dim=1)  # (B, 2N, emb_dim)
        for mixer, norm, mlp in zip(self.mixers, self.norms, self.mlps, strict=True):
            x = x + mixer(norm(x))
            x = x + mlp(x)
        return self.head(x[:, batch.keys.shape[1] :])


def loss_and_accuracy(model: RecallModel, batch: RecallBatch) -> tuple[torch.Tensor, float]:
    logits = model(batch)
    loss = F.cross_entropy(logits.reshape(-1, NUM_VALUES), batch.answers.reshape(-1))
    return loss, (logits.argmax(-1) == batch.answers).float().mean().item()


@torch.no_grad()
def accuracy(model: RecallModel, batch: RecallBatch) -> float:
    """Fraction of the queries answered with the value stored under their key (greedy)."""
    return loss_and_accuracy(model.eval(), batch)[1]


# ----------------------------------------------------------------------------------------------------------- training


# induction's schedule and step (a linear warmup, a cosine decay to 10%, clipping, fresh batches) with its own numbers,
# on plain AdamW (default betas, weight decay on every parameter); the number of pairs is drawn per step.
# head_penalty stays 0: the group lasso is the capstone's.
TRAINING = TrainConfig(steps=600, batch_size=64, lr=3e-3, warmup=50, eval_every=50)


def eval_batches(size: int, seed: int = 10_000) -> dict[int, RecallBatch]:
    """One fixed batch per number of pairs in EVAL_PAIRS."""
    gen = torch.Generator().manual_seed(seed)
    return {n: make_batch(size, n, generator=gen) for n in EVAL_PAIRS}


def train(model: RecallModel, cfg: TrainConfig, progress=None) -> dict:
    """Train ``model`` in place; returns its history: per evaluation step, the accuracy at each of EVAL_PAIRS."""
    torch.manual_seed(cfg.seed)
    data = torch.Generator().manual_seed(cfg.seed)
    evals = eval_batches(cfg.eval_size)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    history: dict[str, list] = {"step": [], "accuracy": []}
    loss = torch.tensor(float("nan"))
    for step in range(cfg.steps + 1):
        if step % cfg.eval_every == 0 or step == cfg.steps:
            accs = [round(accuracy(model, batch), 5) for batch in evals.values()]
            history["step"].append(step)
            history["accuracy"].append(accs)
            if progress is not None:
                progress(step, loss.item(), accs[-1])  # the last training loss; accuracy at the most pairs
        if step == cfg.steps:
            break
        model.train()
        num_pairs = int(torch.randint(MIN_PAIRS, MAX_PAIRS + 1, (1,), generator=data))
        loss, _ = loss_and_accuracy(model, make_batch(cfg.batch_size, num_pairs, generator=data))
        _step(model, opt, loss, step, cfg)
    model.eval()
    return history


def checkpoint_path(name: str, folder: Path | str = CHECKPOINT_DIR) -> Path:
    if name not in KINDS:
        known = ", ".join(KINDS)
        raise ValueError(
            pick(f"unknown recall model {name!r}; known: {known}", f"没有叫 {name!r} 的回忆模型；已有：{known}")
        )
    return Path(folder) / f"recall_{name}.pt"


def load_model(name: str, device="cpu") -> RecallModel:
    """The committed model ``name`` ("linear" or "hybrid") in eval mode; ``checkpoint_meta`` holds its history."""
    path = checkpoint_path(name)
    if not path.exists():
        raise ValueError(
            pick(
                f"{path.name} is missing; run `make train` to create it", f"缺少 {path.name}；运行 `make train` 生成它"
            )
        )
    checkpoint = torch.load(path, map_location=device, weights_only=True)
    config = checkpoint["config"]
    model = RecallModel(RecallConfig(**{**config, "layers": tuple(config["layers"])})).to(device)
    model.load_state_dict(checkpoint["state_dict"])
    model.checkpoint_meta = checkpoint["meta"]
    return model.eval()


def main(argv=None) -> int:
    """``make train``: train the linear and the hybrid model, save their checkpoints."""
    parser = argparse.ArgumentParser(prog="python -m course_utils.capstone.recall", description=main.__doc__)
    parser.add_argument("--out", type=Path, default=CHECKPOINT_DIR, help="folder for the checkpoints")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # one thread: the same weights on every run
    args.out.mkdir(parents=True, exist_ok=True)
    test = eval_batches(1024, seed=2024)
    for name, layers in KINDS.items():
        cpu_start = time.process_time()
        torch.manual_seed(TRAINING.seed)
        config = RecallConfig(layers=layers)
        model = RecallModel(config)
        history = train(model, TRAINING, ProgressBar(name[:5], TRAINING.steps))
        accs = {n: round(accuracy(model, batch), 5) for n, batch in test.items()}
        meta = {"train": asdict(TRAINING), "history": history, "test_accuracy": accs}
        config_dict = {**asdict(config), "layers": list(config.layers)}
        torch.save(
            {"config": config_dict, "state_dict": model.state_dict(), "meta": meta}, checkpoint_path(name, args.out)
        )
        seconds = time.process_time() - cpu_start
        print(
            pick(
                f"{name}: accuracy by number of pairs {accs}, {seconds:.1f} s of CPU",
                f"{name}：按键值对数的准确率 {accs}，CPU 时间 {seconds:.1f} 秒",
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
