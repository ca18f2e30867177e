"""The induction task (归纳任务): random tokens, then the same tokens again.

Each sequence is ``filler | segment | filler | segment``: ``length`` distinct random tokens (the segment) appear
twice, the second copy ending the sequence, among other random tokens. Both the length and the distance between
the copies vary from sequence to sequence, so no fixed position predicts the second copy: a model has to find the
earlier occurrence of the current token and copy the token that followed it. Two-layer attention-only
transformers learn this with a previous-token head (前一词元头) in layer 0 and an induction head (归纳头) in layer 1
(Olsson et al., 2022).

The loss and the accuracy count only the predictable targets: the second copy after its first token.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ..lang import pick
from .gpt import GPT, GPTConfig, pool_kv_heads

CHECKPOINT_DIR = Path(__file__).resolve().parent / "checkpoints"
VOCAB_SIZE, SEQ_LEN, MIN_LENGTH = 64, 32, 4


@dataclass
class InductionBatch:
    """tokens (B, T); first[b], second[b]: where the two copies of the segment start; length[b]: its length."""

    tokens: torch.Tensor
    first: torch.Tensor
    second: torch.Tensor
    length: torch.Tensor

    @property
    def targets_mask(self) -> torch.Tensor:
        """(B, T) bool: True at positions whose next token is predictable (inside the second copy)."""
        pos = torch.arange(self.tokens.shape[1], device=self.tokens.device)
        return (pos >= self.second[:, None]) & (pos < self.tokens.shape[1] - 1)


def make_batch(
    batch_size: int,
    seq_len: int = SEQ_LEN,
    vocab_size: int = VOCAB_SIZE,
    min_length: int = MIN_LENGTH,
    generator: torch.Generator | None = None,
    device=None,
) -> InductionBatch:
    """``batch_size`` sequences ``filler | segment | filler | segment`` of ``seq_len`` tokens. The segment
    lengths are uniform in [min_length, seq_len // 2], the first copy starts anywhere before the second, and
    every token before the second copy is distinct (so each token of the second copy has one earlier match)."""
    max_length = seq_len // 2
    if not 1 <= min_length <= max_length:
        raise ValueError(
            pick(
                f"min_length={min_length} must lie in [1, seq_len // 2 = {max_length}]",
                f"min_length={min_length} 必须在 [1, seq_len // 2 = {max_length}] 之内",
            )
        )
    if vocab_size < seq_len - min_length:
        raise ValueError(
            pick(
                f"vocab_size={vocab_size} is too small for {seq_len - min_length} distinct tokens",
                f"vocab_size={vocab_size} 太小，放不下 {seq_len - min_length} 个不同的 token",
            )
        )
    length = torch.randint(min_length, max_length + 1, (batch_size,), generator=generator)
    second = seq_len - length  # the second copy ends the sequence
    # the first copy starts anywhere before it: the distance between the copies varies too
    first = (torch.rand(batch_size, generator=generator) * (second - length + 1)).long()
    distinct = torch.argsort(torch.rand(batch_size, vocab_size, generator=generator), dim=1)[:, :seq_len]
    pos = torch.arange(seq_len)
    # positions of the second copy read the token of the first copy
    source = torch.where(pos >= second[:, None], pos - (second - first)[:, None], pos)  # (B, T)
    tokens = torch.gather(distinct, 1, source)
    return InductionBatch(*(t.to(device) for t in (tokens, first, second, length)))


def loss_and_accuracy(model: GPT, batch: InductionBatch) -> tuple[torch.Tensor, float]:
    """Cross-entropy and accuracy of next-token prediction on the second copy (after its first token)."""
    logits = model(batch.tokens)[:, :-1]  # (B, T-1, vocab): position t predicts token t+1
    targets = batch.tokens[:, 1:]
    mask = batch.targets_mask[:, :-1]
    loss = F.cross_entropy(logits[mask], targets[mask])
    accuracy = (logits[mask].argmax(-1) == targets[mask]).float().mean().item()
    return loss, accuracy


@torch.no_grad()
def accuracy(model: GPT, batch: InductionBatch) -> float:
    """Fraction of the second copy's tokens (after its first) that the model predicts (greedy)."""
    was_training = model.training
    model.eval()
    try:
        return loss_and_accuracy(model, batch)[1]
    finally:
        model.train(was_training)


@torch.no_grad()
def head_scores(model: GPT, batch: InductionBatch) -> dict[str, torch.Tensor]:
    """Per head (n_layers, n_heads) mean attention weight on the key each pattern predicts:

    previous_token: query t -> key t - 1 (every t >= 1);
    induction:      query second + i (token x_i) -> key first + i + 1 (the token after x_i's first occurrence);
    duplicate:      query second + i -> key first + i (x_i's first occurrence itself).
    """
    was_training = model.training
    model.eval()
    try:
        _, weights = model(batch.tokens, return_weights=True)
    finally:
        model.train(was_training)
    att = torch.stack(weights, dim=1)  # (B, n_layers, n_heads, T, T)
    b, n_layers, n_heads, t, _ = att.shape
    rows = torch.arange(1, t, device=att.device)
    previous = att[:, :, :, rows, rows - 1].mean(dim=(0, 3))
    pos = torch.arange(t, device=att.device)
    in_second = (pos >= batch.second[:, None]).float()  # (B, T): the queries of the second copy
    earlier = (pos - (batch.second - batch.first)[:, None]).clamp(min=0)  # (B, T): the first occurrence

    def mean_on(keys):  # mean weight from each second-copy query to keys[b, query], per sequence, then over B
        index = keys[:, None, None, :, None].expand(b, n_layers, n_heads, t, 1)
        picked = att.gather(-1, index).squeeze(-1)  # (B, layers, heads, T)
        per_sequence = (picked * in_second[:, None, None]).sum(-1) / in_second.sum(-1)[:, None, None]
        return per_sequence.mean(0)

    return {"previous_token": previous, "induction": mean_on(earlier + 1), "duplicate": mean_on(earlier)}


# ---------------------------------------------------------------------------------------------- training

MODEL: dict[str, Any] = dict(  # GPTConfig's keywords
    vocab_size=VOCAB_SIZE, context_length=SEQ_LEN, emb_dim=64, n_heads=4, n_layers=2, mlp_hidden=0
)


@dataclass
class TrainConfig:
    """AdamW with a linear warmup and a cosine decay to 10%, on fresh random batches (no epochs)."""

    steps: int = 600
    batch_size: int = 64
    lr: float = 5e-3
    weight_decay: float = 0.01
    warmup: int = 30
    seed: int = 0
    eval_every: int = 25
    eval_size: int = 256
    head_penalty: float = 0.0  # group lasso on each head's weights: heads compete, one head per job


# the committed checkpoints: the MHA model, then its K/V heads mean-pooled to GQA and MQA and briefly uptrained
MHA_TRAINING = TrainConfig(head_penalty=1e-2)
UPTRAINING = TrainConfig(steps=100, lr=1e-3, warmup=10, eval_every=10, seed=1)
KV_GROUPS = {"mha": 4, "gqa": 2, "mqa": 1}


def checkpoint_path(name: str, folder: Path | str = CHECKPOINT_DIR) -> Path:
    """Where ``make train`` writes the checkpoint ``name`` ("mha", "gqa" or "mqa")."""
    if name not in KV_GROUPS:
        raise ValueError(
            pick(
                f"unknown checkpoint {name!r}; known: {', '.join(KV_GROUPS)}",
                f"未知的 checkpoint {name!r}；可用的是 {', '.join(KV_GROUPS)}",
            )
        )
    return Path(folder) / f"induction_{name}.pt"


def load_model(name: str = "mha", device="cpu") -> GPT:
    """The committed model ``name`` in eval mode; its ``checkpoint_meta`` holds the training history."""
    path = checkpoint_path(name)
    if not path.exists():
        raise ValueError(
            pick(
                f"{path.name} is missing; run `make train` to create it",
                f"缺少 {path.name}；运行 `make train` 生成它",
            )
        )
    checkpoint = torch.load(path, map_location=device, weights_only=True)
    model = GPT.from_checkpoint(checkpoint, map_location=device).eval()
    model.checkpoint_meta = checkpoint["meta"]
    return model


def head_norms(model: GPT) -> torch.Tensor:
    """(n_layers, n_heads): the norm of all of a head's weights (its rows of W_query, W_key, W_value and its
    columns of out_proj); needs one K/V head per query head (MHA)."""
    c = model.config
    if c.n_kv_groups != c.n_heads:
        raise ValueError(
            pick(
                "head_norms needs an MHA model: GQA heads share their K/V weights",
                "head_norms 需要 MHA 模型：GQA 的头共享 K/V 权重",
            )
        )
    hd = c.emb_dim // c.n_heads
    norms = []
    for block in model.layers:
        a = block.attn
        sq = sum(
            w.view(c.n_heads, hd, -1).pow(2).sum(dim=(1, 2))
            for w in (a.W_query.weight, a.W_key.weight, a.W_value.weight)
        ) + a.out_proj.weight.view(c.emb_dim, c.n_heads, hd).pow(2).sum(dim=(0, 2))
        norms.append(sq.sqrt())
    return torch.stack(norms)


def _lr(step, cfg: TrainConfig):
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def _step(model, opt, loss, step: int, cfg: TrainConfig) -> None:
    """One optimiser step on ``loss``: the learning rate of ``step``, gradients clipped to norm 1."""
    for group in opt.param_groups:
        group["lr"] = _lr(step, cfg)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def train(model: GPT, cfg: TrainConfig, progress=None) -> dict:
    """Train ``model`` in place; returns its history (step, loss and accuracy on a fixed evaluation batch).

    ``progress(step, loss, accuracy)`` is called at each evaluation. Seeded: the same model, config and
    thread count give the same weights.
    """
    torch.manual_seed(cfg.seed)
    data = torch.Generator().manual_seed(cfg.seed)
    c = model.config
    eval_batch = make_batch(
        cfg.eval_size, c.context_length, c.vocab_size, generator=torch.Generator().manual_seed(10_000 + cfg.seed)
    )
    params = dict(model.named_parameters())
    decay = [n for n, p in params.items() if p.ndim >= 2 and "emb" not in n]  # matrices, not embeddings
    opt = torch.optim.AdamW(
        [
            {"params": [params[n] for n in decay], "weight_decay": cfg.weight_decay},
            {"params": [p for n, p in params.items() if n not in decay], "weight_decay": 0.0},
        ],
        lr=cfg.lr,
        betas=(0.9, 0.98),
    )
    history: dict[str, list[float]] = {"step": [], "loss": [], "accuracy": []}
    for step in range(cfg.steps + 1):
        if step % cfg.eval_every == 0 or step == cfg.steps:
            model.eval()
            with torch.no_grad():
                loss, acc = loss_and_accuracy(model, eval_batch)
            history["step"].append(step)
            history["loss"].append(round(loss.item(), 5))
            history["accuracy"].append(round(acc, 5))
            if progress is not None:
                progress(step, loss.item(), acc)
        if step == cfg.steps:
            break
        model.train()
        batch = make_batch(cfg.batch_size, c.context_length, c.vocab_size, generator=data)
        loss, _ = loss_and_accuracy(model, batch)
        if cfg.head_penalty:
            loss = loss + cfg.head_penalty * head_norms(model).sum()
        _step(model, opt, loss, step, cfg)
    model.eval()
    return history


WITHOUT_PENALTY_SEEDS = (0, 1, 2)


def without_penalty_path(folder: Path | str = CHECKPOINT_DIR) -> Path:
    """Where ``python -m course_utils.induction --without-penalty`` writes its measurements (JSON)."""
    return Path(folder) / "induction_without_penalty.json"


def without_penalty_study(seeds=WITHOUT_PENALTY_SEEDS, progress=False) -> dict:
    """The MHA run of ``make train`` again with ``head_penalty=0``, once per seed: is the group lasso needed?

    Per seed: the training history, the accuracy on ``make train``'s test batch, the head scores and the
    accuracy with each head zero-ablated (rows: layers). Notebook 11 asserts its prose on these numbers.
    """
    from dataclasses import asdict, replace

    from .gpt import ablate_heads

    cfg = replace(MHA_TRAINING, head_penalty=0.0)
    test = make_batch(1024, generator=torch.Generator().manual_seed(2024))
    runs = []
    for seed in seeds:
        torch.manual_seed(seed)
        model = GPT(GPTConfig(**MODEL, use_sdpa=True))
        bar = ProgressBar(f"s={seed}", cfg.steps) if progress else None
        history = train(model, replace(cfg, seed=seed), bar)
        model.use_sdpa = False
        scores = head_scores(model, test)
        ablated = [
            [
                round(_ablated_accuracy(model, test, ablate_heads, (layer, head)), 5)
                for head in range(model.config.n_heads)
            ]
            for layer in range(model.config.n_layers)
        ]
        runs.append(
            {
                "seed": seed,
                "history": history,
                "test_accuracy": round(accuracy(model, test), 5),
                "scores": {k: [[round(v, 5) for v in row] for row in t.tolist()] for k, t in scores.items()},
                "ablated_accuracy": ablated,
            }
        )
    return {"train": asdict(cfg), "runs": runs}


def _ablated_accuracy(model, batch, ablate_heads, head):
    with ablate_heads(model, [head]):
        return accuracy(model, batch)


class ProgressBar:
    """A plain-text progress bar: redrawn in place on a terminal, a line every 10% otherwise (logs, CI)."""

    def __init__(self, label: str, total: int, stream=None, width: int = 30):
        self.label, self.total, self.width = label, total, width
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.start, self.next_line = time.perf_counter(), 0

    def __call__(self, step, loss, acc):
        done = int(self.width * step / max(1, self.total))
        text = (
            f"{self.label:<5s} [{'#' * done}{'.' * (self.width - done)}] {step:4d}/{self.total} "
            f"loss {loss:.3f}  acc {acc:.3f}  {time.perf_counter() - self.start:5.1f} s"
        )
        if self.tty:
            self.stream.write("\r" + text + ("\n" if step == self.total else ""))
        elif step >= self.next_line or step == self.total:
            self.stream.write(text + "\n")
            self.next_line = step + self.total // 10
        self.stream.flush()


def plot_history(histories: dict, path=None):
    """Loss and accuracy against steps, one line per model; saved to ``path`` when given."""
    import matplotlib

    if path is not None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(9, 3.2))
    offset = 0
    for name, h in histories.items():
        steps = [s + (offset if name != "mha" else 0) for s in h["step"]]
        ax_loss.plot(steps, h["loss"], label=name.upper())
        ax_acc.plot(steps, h["accuracy"], label=name.upper())
        if name == "mha":
            offset = h["step"][-1]
    ax_loss.set_yscale("log")
    for ax, what in ((ax_loss, "loss (second copy)"), (ax_acc, "accuracy (second copy)")):
        ax.set_xlabel("step (GQA/MQA: uptraining after the MHA run)")
        ax.set_ylabel(what)
        ax.legend()
    fig.suptitle("Induction task: MHA training, then GQA/MQA uptraining from mean-pooled K/V heads", fontsize=10)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=90, metadata={"Software": None})
        plt.close(fig)
    return fig


def main(argv=None) -> int:
    """``make train``: train the MHA model, pool and uptrain GQA and MQA, save checkpoints and the figure."""
    parser = argparse.ArgumentParser(prog="python -m course_utils.capstone", description=main.__doc__)
    parser.add_argument("--out", type=Path, default=CHECKPOINT_DIR, help="folder for the checkpoints and figure")
    parser.add_argument("--steps", type=int, default=MHA_TRAINING.steps, help="MHA training steps")
    parser.add_argument(
        "--without-penalty",
        action="store_true",
        help="instead: train the MHA model with head_penalty=0 on seeds 0-2 and write "
        "induction_without_penalty.json (what notebook 11 says about the group lasso)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # one thread: the same weights on every run, and no contention on shared machines
    args.out.mkdir(parents=True, exist_ok=True)
    if args.without_penalty:
        import json

        study = without_penalty_study(progress=True)
        without_penalty_path(args.out).write_text(json.dumps(study, indent=1) + "\n")
        for run in study["runs"]:
            print(
                pick(
                    f"seed {run['seed']}: accuracy {run['test_accuracy']:.3f} without the head penalty",
                    f"种子 {run['seed']}：不加头惩罚时准确率 {run['test_accuracy']:.3f}",
                )
            )
        return 0
    cpu_start, wall_start = time.process_time(), time.perf_counter()

    torch.manual_seed(MHA_TRAINING.seed)
    model = GPT(GPTConfig(**MODEL, use_sdpa=True))  # the fused kernel trains faster; the weights are the same
    mha_cfg = replace(MHA_TRAINING, steps=args.steps)
    histories = {"mha": train(model, mha_cfg, ProgressBar("MHA", mha_cfg.steps))}
    model.use_sdpa = False
    test = make_batch(1024, generator=torch.Generator().manual_seed(2024))
    summary = {}
    for name, groups in KV_GROUPS.items():
        if name == "mha":
            current, history, before = model, histories["mha"], None
            meta_train = asdict(mha_cfg)
        else:
            current = pool_kv_heads(model, groups)
            before = round(accuracy(current, test), 5)
            current.use_sdpa = True
            history = train(current, UPTRAINING, ProgressBar(name.upper(), UPTRAINING.steps))
            current.use_sdpa = False
            histories[name] = history
            meta_train = asdict(UPTRAINING)
        after = round(accuracy(current, test), 5)
        scores = {k: v.tolist() for k, v in head_scores(current, test).items()}
        meta = {"train": meta_train, "history": history, "test_accuracy": after, "scores": scores}
        if before is not None:
            meta["test_accuracy_before_uptraining"] = before
        torch.save(current.checkpoint(**meta), checkpoint_path(name, args.out))
        summary[name] = (before, after, os.path.getsize(checkpoint_path(name, args.out)))
    plot_history(histories, args.out / "induction_training.png")

    for name, (before, after, size) in summary.items():
        pooled = f"after pooling {before:.3f}, " if before is not None else ""
        print(
            pick(
                f"{name.upper():4s}: accuracy on the second copy {pooled}after training {after:.3f}; "
                f"{checkpoint_path(name, args.out).name} {size / 1024:.0f} KiB",
                f"{name.upper():4s}：第二遍上的准确率 {pooled}训练后 {after:.3f}；"
                f"{checkpoint_path(name, args.out).name} {size / 1024:.0f} KiB",
            )
        )
    print(
        pick(
            f"done in {time.perf_counter() - wall_start:.1f} s ({time.process_time() - cpu_start:.1f} s of CPU); "
            f"loss curves in {args.out.name}/induction_training.png",
            f"完成，用时 {time.perf_counter() - wall_start:.1f} 秒"
            f"（CPU 时间 {time.process_time() - cpu_start:.1f} 秒）；损失曲线在 {args.out.name}/induction_training.png",
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
