"""Exercise 11 (the capstone): the learner writes a *function*, not a module, and the grader calls it on models it
builds itself (the model kind: ``kinds/model.py``).

``induction_head``: ``find_induction_head(model) -> (layer, head)`` for a ``course_utils.gpt.GPT`` trained on the
induction task. The grader builds each case from the committed checkpoint (``make train``) by transformations that
keep the model's function but move its heads: the heads of every layer are permuted (rows of W_query, W_key,
W_value, columns of out_proj), and an inert layer (out_proj = 0: it adds nothing to the residual stream) may be
inserted in front of, between or after the trained layers. So the answer differs from case to case, is known from
the construction, and a different ``seed`` gives different (secret) cases. After the first case, a silent head of
every trained layer gets the largest weights (``_plant_decoy``), so that the weight norms point elsewhere, as
the checkpoint's recorded scores do once the heads moved: only what the heads do finds the answer.

Its mistakes are answers: each names the (layer, head) a misconception gives on a case (its mutant's variant), and
the verdict names the one whose answers the learner's reproduce on every case. The course's own head scoring is
withheld while a submission is graded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ...capstone.gpt import GPT
from ...capstone.induction import checkpoint_path, head_scores, make_batch
from ..kit import Mistake, case_titles, mutant
from ..registry import Exercise
from ..types import Mutant

DEFAULT_SEED = 0


@dataclass
class ModelCase:
    """One graded model: how it was made, and where its previous-token and induction heads are."""

    name: str
    state: dict  # the GPT checkpoint dict (config + state_dict), never the training metadata
    induction: tuple  # (layer, head)
    previous_token: tuple
    meta: dict = field(default_factory=dict)

    def build(self):
        return GPT.from_checkpoint(self.state).eval()


# ------------------------------------------------------------------------------------ the cases


def _permute_heads(state: dict, layer: int, perm: list, n_heads: int, head_dim: int) -> None:
    """New head j of ``layer`` is old head perm[j] (MHA: K/V heads move with their query heads)."""
    idx = torch.cat([torch.arange(h * head_dim, (h + 1) * head_dim) for h in perm])
    prefix = f"blocks.{layer}.attn."
    for name in ("W_query", "W_key", "W_value"):
        state[prefix + name + ".weight"] = state[prefix + name + ".weight"][idx].clone()
        if prefix + name + ".bias" in state:
            state[prefix + name + ".bias"] = state[prefix + name + ".bias"][idx].clone()
    state[prefix + "out_proj.weight"] = state[prefix + "out_proj.weight"][:, idx].clone()


def _insert_inert_layer(state: dict, config: dict, where: int, generator) -> None:
    """Insert a block at ``where`` whose attention output is exactly zero (random Q/K/V, zero out_proj)."""
    n = config["n_layers"]
    moved = {}
    for key, value in state.items():
        if key.startswith("blocks."):
            _, i, rest = key.split(".", 2)
            i = int(i)
            moved[f"blocks.{i + 1 if i >= where else i}.{rest}"] = value
        else:
            moved[key] = value
    template = {k.split(".", 2)[2]: v for k, v in state.items() if k.startswith("blocks.0.")}
    for rest, value in template.items():
        if rest.startswith("attn.out_proj"):
            new = torch.zeros_like(value)
        elif rest.startswith("ln_"):
            new = torch.ones_like(value) if rest.endswith("weight") else torch.zeros_like(value)
        else:
            new = torch.randn(value.shape, generator=generator, dtype=value.dtype) * 0.02
        moved[f"blocks.{where}.{rest}"] = new
    state.clear()
    state.update(moved)
    config["n_layers"] = n + 1


def _disguise_heads(state: dict, layer: int, n_heads: int, head_dim: int, generator) -> None:
    """Change every head's weights of ``layer`` but not what it computes: its queries and keys turned by one random
    rotation R (q.k = Rq.Rk) and scaled by 2^a and 2^-a (exact in floating point), its values turned by another
    rotation S that out_proj turns back (out_proj_h S^T S W_value_h). The checkpoint's rows are found nowhere, and
    no single matrix keeps its norm."""
    prefix = f"blocks.{layer}.attn."
    weights = {n: state[prefix + n + ".weight"].clone() for n in ("W_query", "W_key", "W_value", "out_proj")}
    for h in range(n_heads):
        rows = slice(h * head_dim, (h + 1) * head_dim)
        turn_qk, turn_v = (
            torch.linalg.qr(torch.randn(head_dim, head_dim, generator=generator, dtype=torch.float64))[0]
            for _ in range(2)
        )
        scale = 2.0 ** int(torch.randint(-2, 3, (1,), generator=generator))
        for name, factor in (("W_query", scale), ("W_key", 1.0 / scale)):
            w = weights[name]
            w[rows] = (turn_qk @ w[rows].double() * factor).to(w.dtype)
        w_v, w_o = weights["W_value"], weights["out_proj"]
        w_v[rows] = (turn_v @ w_v[rows].double()).to(w_v.dtype)
        w_o[:, rows] = (w_o[:, rows].double() @ turn_v.T).to(w_o.dtype)
    for name, w in weights.items():
        state[prefix + name + ".weight"] = w
    for name in ("W_query", "W_key", "W_value"):  # a bias would have to turn too: the course's GPT has none
        if prefix + name + ".bias" in state:
            raise ValueError("the capstone's cases assume a GPT without qkv biases")


def _plant_decoy(state: dict, layer: int, head: int, head_dim: int, generator) -> bool:
    """Give a silent head of ``layer`` the largest weights of the layer without changing what it computes: large
    random W_query, W_key, W_value rows and out_proj columns, W_query's and W_value's nonzero rows on the first half
    of the head's dimensions, W_key's rows and out_proj's columns on the second half, so that its scores
    q_h . k_h and out_proj_h @ W_value_h are exactly zero (it attends uniformly, as a silent head does, and adds
    nothing). Only a head whose contribution is already negligible (the trained heads the head penalty silenced)
    becomes a decoy; False (nothing changed) for any other."""
    prefix, rows = f"blocks.{layer}.attn.", slice(head * head_dim, (head + 1) * head_dim)
    w_v, w_o = state[prefix + "W_value.weight"], state[prefix + "out_proj.weight"]
    if w_o[:, rows].norm() * w_v[rows].norm() > 1e-3 or prefix + "W_value.bias" in state:
        return False
    half = head_dim // 2
    for name in ("W_query", "W_key", "W_value"):
        weight = state[prefix + name + ".weight"].clone()
        weight[rows] = torch.randn(head_dim, weight.shape[1], generator=generator, dtype=weight.dtype)
        if name in ("W_query", "W_value"):
            weight[head * head_dim + half : (head + 1) * head_dim] = 0.0
        else:
            weight[head * head_dim : head * head_dim + half] = 0.0
        state[prefix + name + ".weight"] = weight
    w_o = w_o.clone()
    w_o[:, rows] = 0.0
    w_o[:, head * head_dim + half : (head + 1) * head_dim] = torch.randn(
        w_o.shape[0], head_dim - half, generator=generator, dtype=w_o.dtype
    )
    state[prefix + "out_proj.weight"] = w_o
    return True


def norm_heads(state: dict, config: dict) -> set:
    """The heads that the largest weight norms point to: of W_query, W_key, W_value, out_proj, and all four."""
    n_heads, hd = config["n_heads"], config["emb_dim"] // config["n_heads"]
    norms = torch.zeros(5, config["n_layers"], n_heads)
    for layer in range(config["n_layers"]):
        prefix = f"blocks.{layer}.attn."
        for h in range(n_heads):
            rows = slice(h * hd, (h + 1) * hd)
            parts = [state[prefix + n + ".weight"][rows] for n in ("W_query", "W_key", "W_value")]
            parts.append(state[prefix + "out_proj.weight"][:, rows])
            squares = [float(t.double().pow(2).sum()) for t in parts]
            norms[:, layer, h] = torch.tensor(squares + [sum(squares)])
    return {divmod(int(n.argmax()), n_heads) for n in norms}


# (name, inert layer position or None); the head positions are drawn from the seed
_LAYOUTS = [
    ("heads permuted", None),
    ("heads permuted, an inert layer in front", 0),
    ("heads permuted, an inert layer between the two trained layers", 1),
    ("heads permuted, an inert layer after the trained layers", 2),
    ("heads permuted again", None),
]


def make_cases(seed: int | None = None) -> list[ModelCase]:
    """The graded models for ``seed`` (default ``DEFAULT_SEED``): deterministic for a seed, different across
    seeds. The first case keeps the checkpoint's own head order."""
    seed = DEFAULT_SEED if seed is None else seed
    if seed not in _CASES:
        _CASES[seed] = _make_cases(seed)
    return _CASES[seed]


_CASES: dict = {}


def _make_cases(seed: int) -> list[ModelCase]:
    base = torch.load(checkpoint_path("mha"), map_location="cpu", weights_only=True)
    config = base["config"]
    recorded = torch.tensor(base["meta"]["scores"]["induction"]) if "scores" in base.get("meta", {}) else None
    n_heads, head_dim = config["n_heads"], config["emb_dim"] // config["n_heads"]
    prev0, ind0 = _reference_heads(base)
    g = torch.Generator().manual_seed(10_007 * (seed % 2**40 + 1))
    layouts = [("the trained checkpoint", None)] + _LAYOUTS
    cases = []
    for i, (name, inert) in enumerate(layouts):
        state, cfg = dict(base["state_dict"]), dict(config)
        perms = [
            list(range(n_heads)) if i == 0 else torch.randperm(n_heads, generator=g).tolist()
            for _ in range(config["n_layers"])
        ]
        stays = inert is None or inert > ind0[0]  # the induction head's layer keeps its index
        while i > 0 and stays and n_heads > 1 and perms[ind0[0]].index(ind0[1]) == ind0[1]:
            perms[ind0[0]] = torch.randperm(n_heads, generator=g).tolist()  # never where the checkpoint had it
        for layer, perm in enumerate(perms):
            _permute_heads(state, layer, perm, n_heads, head_dim)
        prev = (prev0[0], perms[prev0[0]].index(prev0[1]))
        ind = (ind0[0], perms[ind0[0]].index(ind0[1]))
        if i > 0:  # heads disguised, and a decoy in every trained layer: the largest weights belong to a head
            for layer in range(config["n_layers"]):  # that does nothing
                _disguise_heads(state, layer, n_heads, head_dim, g)
                silent = [h for h in range(n_heads) if (layer, h) not in (prev, ind)]
                if silent:
                    pick = silent[int(torch.randint(len(silent), (1,), generator=g))]
                    _plant_decoy(state, layer, pick, head_dim, g)
        if inert is not None:
            _insert_inert_layer(state, cfg, inert, g)
            prev = (prev[0] + (prev[0] >= inert), prev[1])
            ind = (ind[0] + (ind[0] >= inert), ind[1])
        meta = {
            "inert": inert,
            "norm_heads": norm_heads(state, cfg),  # the proxies the graded model offers
            "recorded": None if recorded is None else divmod(int(recorded.argmax()), n_heads),
        }
        cases.append(ModelCase(name, {"config": cfg, "state_dict": state}, ind, prev, meta))
    return cases


def _reference_heads(checkpoint: dict) -> tuple[tuple, tuple]:
    """(previous-token head, induction head) of a checkpoint, by the course's scores on fixed sequences."""
    model = GPT.from_checkpoint(checkpoint).eval()
    c = model.config
    scores = head_scores(
        model, make_batch(256, c.context_length, c.vocab_size, generator=torch.Generator().manual_seed(5))
    )
    return tuple(divmod(int(scores["previous_token"].argmax()), c.n_heads)), tuple(
        divmod(int(scores["induction"].argmax()), c.n_heads)
    )


# ------------------------------------------------------------------------------------ the answer and the mistakes


def expected(case: ModelCase, variant: None = None) -> tuple:
    """The answer on ``case``: where its induction head is."""
    return case.induction


def _exactly(answer_of):
    return lambda case, answer: answer == answer_of(case)


def _last_layer(case, answer):
    # the best head of the last layer: the induction head, unless an inert layer comes after it
    n_layers = case.state["config"]["n_layers"]
    if case.induction[0] == n_layers - 1:
        return answer == case.induction
    return answer is not None and answer[0] == n_layers - 1


M_PREVIOUS = Mistake("previous_token_head")
M_LAYER_ONE_BASED = Mistake("layer_one_based")
M_ONE_BASED = Mistake("one_based")
M_UNRAVELLED = Mistake("flat_index_unravelled")
M_LAST_LAYER = Mistake("last_layer_assumed")
M_NORM = Mistake("largest_weight_norm")
M_METADATA = Mistake("checkpoint_metadata")


def _unravelled(c):
    return divmod(c.induction[0] * c.state["config"]["n_heads"] + c.induction[1], c.state["config"]["n_layers"])


def mutants() -> list[Mutant]:
    """Each mistake with the answer it gives on a case (variant(case, answer) -> whether it is that answer)."""
    return [
        mutant(M_PREVIOUS, _exactly(lambda c: c.previous_token)),
        mutant(M_LAYER_ONE_BASED, _exactly(lambda c: (c.induction[0] + 1, c.induction[1]))),
        mutant(M_ONE_BASED, _exactly(lambda c: (c.induction[0] + 1, c.induction[1] + 1))),
        mutant(M_UNRAVELLED, _exactly(_unravelled)),
        mutant(M_LAST_LAYER, _last_layer),
        mutant(M_NORM, lambda case, answer: answer in case.meta["norm_heads"]),
        mutant(M_METADATA, lambda case, answer: answer is not None and answer == case.meta["recorded"]),
    ]


TEXTS: dict[str, tuple[str, str]] = {
    "answer.wrong": ("returned {answer}, which is not the induction head", "返回了 {answer}，这不是归纳头"),
    "answer.unexplained": (
        "not the induction head, and no known mistake explains the answers: score every head of "
        "every layer on repeated random tokens, as the notebook does",
        "找到的不是归纳头，也没有哪种已知的常见错误能解释这些答案：像笔记本里那样，在重复的随机 "
        "token 序列上给每一层的每个头打分",
    ),
    "mutant.previous_token_head": (
        "that is the previous-token head (前一词元头), layer 0's stripe just below the "
        "diagonal: the induction head (归纳头) attends from the second copy to the token "
        "AFTER the earlier occurrence of the current token",
        "这是前一词元头（previous-token head），也就是第 0 层紧贴对角线下方的那条斜线：归纳头"
        "（induction head）在序列的第二遍里关注的是当前 token 上一次出现位置的下一个 token",
    ),
    "mutant.layer_one_based": (
        "the layer is off by one: layers are counted from 0 (model.blocks[0] is the first), so "
        "return the index into model.blocks",
        "层号差了 1：层从 0 开始编号（model.blocks[0] 是第一层），请返回它在 model.blocks 中的下标",
    ),
    "mutant.one_based": (
        "layer and head are both off by one: count from 0, as model.blocks and the head axis of the "
        "attention weights do",
        "层号和头号都差了 1：要从 0 开始数，和 model.blocks 以及注意力权重里头的维度一样",
    ),
    "mutant.flat_index_unravelled": (
        "the (layer, head) pair comes from a flat index unravelled with the wrong size: "
        "for a (n_layers, n_heads) score table use divmod(index, n_heads)",
        "(layer, head) 是用错误的尺寸从一维下标还原出来的：对形状为 (n_layers, n_heads) "
        "的分数表，应当用 divmod(index, n_heads)",
    ),
    "mutant.last_layer_assumed": (
        "the answer assumes the induction head is in the last layer: score every layer (a layer may sit after it)",
        "这个答案默认归纳头在最后一层：要给每一层都打分（它后面可能还有别的层）",
    ),
    "mutant.largest_weight_norm": (
        "the answer is the head with the largest weights: a weight norm says nothing about "
        "what a head does (a silent head can have the largest weights); score what each "
        "head attends to on repeated sequences, or ablate it",
        "这个答案是权重最大的那个头：权重范数说明不了一个头在做什么（一个不起作用的头也可能"
        "权重最大）；请在重复序列上给每个头的注意力模式打分，或者逐个消融",
    ),
    "mutant.checkpoint_metadata": (
        "the answer is the one the checkpoint recorded at training: the graded models' "
        "heads were moved, so only what the heads of the model you are given do finds it",
        "这个答案是训练时检查点里记下的那个头：被评分的模型的头已经被挪动过，只有看你拿到的"
        "这个模型里各个头实际在做什么才能找到它",
    ),
    **case_titles(
        {
            "the trained checkpoint": "训练好的 checkpoint",
            "heads permuted": "打乱各层中头的顺序",
            "heads permuted, an inert layer in front": "打乱头的顺序，并在最前面插入一个不起作用的层",
            "heads permuted, an inert layer between the two trained layers": "打乱头的顺序，并在两个训练好的层之间插入一个不起作用的层",
            "heads permuted, an inert layer after the trained layers": "打乱头的顺序，并在训练好的层后面插入一个不起作用的层",
            "heads permuted again": "再次打乱头的顺序",
        }
    ),
}


EXERCISE = Exercise(
    id="induction_head",
    order=11,
    notebook="11_induction_head",
    points=3,
    kind="model",
    contract="find_induction_head",
    cases=make_cases,
    expected=expected,
    mutants=mutants,
    imports=("gpt", "induction"),  # the course's GPT and its induction task; their scoring is withheld
    withheld={"capstone/induction.py": {"head_scores": "compute the scores yourself"}},
)
