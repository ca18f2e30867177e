"""The module kind: the learner's ``nn.Module`` class, built with the case's constructor arguments, loaded with the
grader's parameters by name (in interview mode, by role and shape in any dialect: ``sandbox/dialects.py``), called
in each mode with its seed, a cache passed from call to call (``past_key_value``, ``use_cache``), gradients of
(out * grad).sum(). Its own checks: training mode (dropout made visible: ``dropout_problem``), the cache its calls
return, and in interview mode what the class runs (no fused attention) and how it was read (``assumed``).

Exercises 01-08, 10 and 12 are of this kind, their cases built with ``Call`` and ``Case`` below (and the blocks of
``kit`` and ``heads``)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn

from .. import diagnose
from ..diagnose import ATOL, RTOL, cached_outputs
from ..escape import one_line, printable
from ..messages import Msg, joined, table
from ..records import BadResult
from ..sandbox import dialects
from ..types import Case as BaseCase
from ..types import Mistake, Result
from . import Kind

# ---------------------------------------------------------------------------------------------
# a call and a case of this kind


@dataclass
class Call:
    """One call of the learner's module. ``past``: None, the index of an earlier call whose ``present`` is
    passed back, or "given" (the case's own past, which the module never produced)."""

    x: torch.Tensor
    train: bool = False
    seed: int = 0
    grad: torch.Tensor | None = None  # cotangent: the learner's backward of (out * grad).sum()
    past: int | str | None = None
    past_scale: tuple[float, float] | None = None  # the past handed back with its two parts multiplied by these: a
    # cache the module did not produce, yet in whatever layout the module keeps its own
    use_cache: bool | None = None  # None: forward(x); a bool: forward(x, past_key_value=..., use_cache=...)
    kwargs: dict[str, Any] = field(default_factory=dict)  # more keyword arguments of forward (MLA's absorb)
    tile_bound: int | None = None  # the largest float tensor the call may make (MLA absorbed)
    bound_label: str = "absorbed"  # the output that reports it: step<i>.<bound_label>, 1 = within the bound


@dataclass
class Case(BaseCase):
    """A case of a module: ``kind`` says what it checks (plain | grad | train | large | cache); ``given_past``: the
    cache a call with ``past="given"`` is handed."""

    kind: str = "plain"
    given_past: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def x(self) -> torch.Tensor:
        return self.calls[0].x


# ---------------------------------------------------------------------------------------------
# its texts and the mistakes its own checks name

TEXTS: dict[str, tuple[str, str]] = {
    "label.keys": ("present keys", "present 中的键"),
    "label.values": ("present values", "present 中的值"),
    "label.grad_input": ("the gradient of the input", "输入的梯度"),
    "label.grad": ("the gradient of {param}", "{param} 的梯度"),
    "compare.cache_layout": (
        " ([b, num_heads, n_past + n_new, head_dim])",
        "（[b, num_heads, n_past + n_new, head_dim]）",
    ),
    "compare.not_absorbed": (
        "{step}: absorb=True built per-head keys or values of every cached token",
        "{step}：absorb=True 时为每个缓存的 token 构造了每个头的键或值",
    ),
    "refusal.interview_call": (
        "runs {call}, fused attention, which interview mode does not allow",
        "运行了 {call}（融合注意力），面试模式不允许这样做",
    ),
    "refusal.flex": (
        "runs FlexAttention ({call}), fused attention, which interview mode does not allow",
        "运行了 FlexAttention（{call}），这是融合注意力，面试模式不允许这样做",
    ),
    "refusal.profiler_stopped": (
        "stops the grader's record of the operators it runs (the profiler), so what it computes cannot be checked",
        "关掉了评分器记录所运行算子的 profiler，无法确认它算的是什么",
    ),
    "refused.forbidden": (
        "no credit: interview mode (手撕MHA) asks for the computation by hand, without F.scaled_dot_product_attentio"
        "n, FlexAttention, nn.MultiheadAttention or course_utils: {first}",
        "不得分：面试模式（手撕MHA）要求亲手写出计算过程，不能用 F.scaled_dot_product_attention、FlexAttention、"
        "nn.MultiheadAttention 或 course_utils：{first}",
    ),
    "not_implemented.define_class": ("not implemented yet: define class {name}", "还没有实现：请定义类 {name}"),
    "not_implemented.define_module": (
        "not implemented yet: define your attention class (an nn.Module, named {name} or anything else)",
        "还没有实现：请定义你的注意力类（一个 nn.Module，叫 {name} 或别的名字都可以）",
    ),
    "dropout_wrong_scale": (
        "{base}; the kept weights are scaled by {ratio:.3g}, as for dropout p={p_seen:.2g}, but the constructor's "
        "dropout is {p:g}",
        "{base}；保留下来的权重被放大了 {ratio:.3g} 倍，相当于 dropout p={p_seen:.2g}，但构造函数给的 dropout 是 {p:g}",
    ),
    "mutant.dropout_ignored": (
        "dropout has no effect in training mode: apply self.dropout(p) to the attention weights",
        "训练模式下 dropout 没有起作用：要对注意力权重应用 self.dropout(p)",
    ),
    "mutant.dropout_on_scores": (
        "dropout applied to the scores before the softmax: it must act on the attention weights after the softmax "
        "(dropped weights are 0, the others scaled by 1/(1-p))",
        "dropout 作用在了 softmax 之前的分数上：它应当作用在 softmax 之后的注意力权重上（被丢弃的权重为 0，"
        "其余的乘以 1/(1-p)）",
    ),
    "mutant.dropout_on_output": (
        "dropout applied to the output instead of the attention weights (a dropout after the output projection "
        "may come in addition, not instead)",
        "dropout 作用在了输出上，应当作用在注意力权重上（输出投影之后可以再加一个 dropout，但不能代替它）",
    ),
    "mutant.dropout_on_values": (
        "dropout applied to the values: every query then loses the same keys; dropout acts on the attention "
        "weights, one random mask per weight (dropped weights are 0, the others scaled by 1/(1-p))",
        "dropout 作用在了值上：这样每个查询丢掉的都是同样的键；dropout 应当作用在注意力权重上，"
        "每个权重各自随机（被丢弃的权重为 0，其余的乘以 1/(1-p)）",
    ),
    "mutant.dropout_wrong": (
        "in training mode the output is not attention with dropout on the weights: each weight must be either 0 or "
        "weight/(1-p), with dropout p",
        "训练模式下的输出不是“对注意力权重做 dropout”的结果：每个权重要么是 0，要么是 weight/(1-p)（p 是 dropout 概"
        "率）",
    ),
    "delegation.class": (
        "{cls} is (or subclasses) course_utils' {base}",
        "{cls} 就是 course_utils 的 {base}（或它的子类）",
    ),
    "delegation.mha": ("{cls} subclasses nn.MultiheadAttention", "{cls} 继承了 nn.MultiheadAttention"),
    "delegation.forward": ("{cls}.forward comes from {module}", "{cls}.forward 来自 {module}"),
    "assumed": ("graded as the {name} dialect; mask convention: {mask}", "按照{name}的写法评分；掩码约定：{mask}"),
    "assumed.no_bias": (
        "graded as the {name} dialect; mask convention: {mask}; no bias on {roles}",
        "按照{name}的写法评分；掩码约定：{mask}；{roles} 没有 bias",
    ),
    "dialect.book": ("book", "书中"),
    "dialect.annotated": ("annotated transformer", "annotated transformer 教程"),
    "dialect.signature": ("{signature}", "构造参数为 {signature}"),
    "mask.built_in": ("built in", "内置（模块自己加因果掩码）"),
    "mask.keep": ("True = keep (mask == 0 hidden)", "True = 保留（mask == 0 处被遮住）"),
    "mask.hidden": ("True = hidden", "True = 遮住"),
    "mask.additive": ("additive (0 / -inf)", "加性掩码（0 / -inf）"),
    "mask.not_causal": ("{mask} (no convention made it causal)", "{mask}（没有哪种约定能让它满足因果性）"),
    "assumed.placed": (
        "{assumed}; constructor: {mapping}; parameters: {placement}",
        "{assumed}；构造参数：{mapping}；参数位置：{placement}",
    ),
    "assumed.output_dropout": (
        "{assumed}; the dropout after the output projection (as nanoGPT's resid_dropout) was left out of the "
        "training-mode check: it is a legitimate place for one, and the check is about the dropout on the attention "
        "weights",
        "{assumed}；输出投影之后的 dropout（如 nanoGPT 的 resid_dropout）没有计入训练模式的检查：那里放 dropout "
        "是合理的，这项检查看的是注意力权重上的 dropout",
    ),
    "assumed.output_dropout_alone": (
        "the dropout after the output projection (as nanoGPT's resid_dropout) was left out of the training-mode "
        "check: it is a legitimate place for one, and the check is about the dropout on the attention weights",
        "输出投影之后的 dropout（如 nanoGPT 的 resid_dropout）没有计入训练模式的检查：那里放 dropout 是合理的，"
        "这项检查看的是注意力权重上的 dropout",
    ),
    "bad.dialect": ("dialect is not a mapping", "dialect 不是字典"),
    "bad.dialect_fields": ("malformed dialect", "dialect 的格式不对"),
}
FLAGS = {"absorbed": "compare.not_absorbed"}  # a call's bound_label -> what a 0 says
DROPOUT_IGNORED = Mistake("dropout_ignored")
DROPOUT_ON_SCORES = Mistake("dropout_on_scores")
DROPOUT_ON_OUTPUT = Mistake("dropout_on_output")
DROPOUT_ON_VALUES = Mistake("dropout_on_values")
DROPOUT_WRONG = Mistake("dropout_wrong")
TRAINING_MISTAKES = (DROPOUT_IGNORED, DROPOUT_ON_SCORES, DROPOUT_ON_OUTPUT, DROPOUT_ON_VALUES, DROPOUT_WRONG)
FUSED = ("refusal.interview_call", "refusal.flex", "refusal.profiler_stopped", "delegation.mha")  # interview mode's
# refusals that are not the course's code


# ---------------------------------------------------------------------------------------------
# dropout in training mode


def dropout_problem(case: Case, outputs: dict):
    """None when the training-mode call applied dropout to the attention weights, else (key, message).

    In a training case each element of a head's context vector is one attention weight (one-hot inputs and
    values, orthogonal out_proj), so with dropout p on the weights every element is either 0 or its eval-mode
    value / (1 - p). It is checked against the learner's own eval-mode output, so that the learner's other
    mistakes do not hide or fake this one, and any order of drawing the random mask is fine.
    """
    ev, tr = outputs.get("step1.out"), outputs.get("step2.out")
    if not isinstance(ev, torch.Tensor) or not isinstance(tr, torch.Tensor) or ev.shape != tr.shape:
        return None  # the output check reports this
    p = float(case.ctor["dropout"])
    if torch.allclose(tr, ev, rtol=RTOL, atol=ATOL):
        # the only dropout the module had was the one after its output projection (left out in interview mode)
        left_out = isinstance(outputs.get("step2.out_dropout"), torch.Tensor)
        mistake = DROPOUT_ON_OUTPUT if left_out else DROPOUT_IGNORED
        return mistake.key, mistake.message

    def dropped_weights(e, t):
        kept_value = (t - e / (1 - p)).abs() <= 1e-4 + 1e-3 * e.abs()
        zero = t.abs() <= 1e-6
        live = e.abs() > 1e-6
        if not bool((kept_value | zero).all()):
            return False
        share = (zero & live).sum().item() / max(1, live.sum().item())
        return 0.1 <= share <= 0.9

    w = case.params.get("out_proj.weight")
    to_ctx = (lambda out: out.double() @ w.double()) if w is not None else (lambda out: out.double())
    ctx_e, ctx_t = to_ctx(ev), to_ctx(tr)
    if dropped_weights(ctx_e, ctx_t):
        if _one_mask_per_key(ctx_e, ctx_t, case):
            return DROPOUT_ON_VALUES.key, DROPOUT_ON_VALUES.message
        return None
    if w is not None and dropped_weights(ev.double(), tr.double()):
        return DROPOUT_ON_OUTPUT.key, DROPOUT_ON_OUTPUT.message
    # softmax after dropout on the scores: the weights of each query still sum to 1
    tokens = case.meta["tokens"]
    head_width = ctx_t.shape[-1] // (case.ctor.get("num_heads", 1))
    rows = ctx_t.unflatten(-1, (-1, head_width))[..., :tokens].sum(-1)
    if torch.allclose(rows, torch.ones_like(rows), atol=1e-4):
        return DROPOUT_ON_SCORES.key, DROPOUT_ON_SCORES.message
    nonzero = ctx_t.abs() > 1e-6
    if nonzero.any():
        ratio = (ctx_t[nonzero] / ctx_e[nonzero]).median().item()
        if 1 < ratio < float("inf") and abs(ratio - 1 / (1 - p)) > 1e-3:  # a finite scale, or none is said
            return DROPOUT_WRONG.key, Msg(
                "dropout_wrong_scale", base=DROPOUT_WRONG.message, ratio=ratio, p_seen=1 - 1 / ratio, p=p
            )
    return DROPOUT_WRONG.key, DROPOUT_WRONG.message


def _one_mask_per_key(ctx_e, ctx_t, case: Case) -> bool:
    """Whether every query of a head dropped the same keys: dropout on the values (one mask per key's value)
    rather than on the weights (one mask per weight), where a key seen by several queries is dropped for some and
    kept for others. With independent masks at p = 0.5 on the training case's keys, agreement everywhere has a
    chance below 2^-60."""
    tokens, heads = case.meta["tokens"], case.ctor.get("num_heads", 1)
    e = ctx_e.unflatten(-1, (heads, -1))[..., :tokens].transpose(1, 2)  # (B, heads, queries, keys)
    t = ctx_t.unflatten(-1, (heads, -1))[..., :tokens].transpose(1, 2)
    live, dropped = e.abs() > 1e-6, t.abs() <= 1e-6
    seen = live.sum(dim=2)  # (B, heads, keys): the queries that see each key
    some = (dropped & live).sum(dim=2)
    shared = (some == 0) | (some == seen)
    return bool((seen >= 2).any()) and bool(shared[seen >= 2].all())


# ---------------------------------------------------------------------------------------------
# interview mode: the candidate's own dialect


def without_biases(case: Case, roles) -> Case:
    """``case`` with the biases of the given projections (q, k, v, o) set to zero: what a candidate's class
    without those biases computes."""
    names = {"q": "W_query.bias", "k": "W_key.bias", "v": "W_value.bias", "o": "out_proj.bias"}
    absent = {names[r] for r in roles}
    params = {k: (torch.zeros_like(t) if k in absent else t) for k, t in case.params.items()}
    meta = {k: v for k, v in case.meta.items() if k != "expected"}
    return replace(case, params=params, meta={**meta, "absent": absent})


def probe(ex) -> dict:
    """Interview mode's probe: a square case of its own draw (no biases, eval mode) with its expected output first,
    then the outputs of the known mistakes, for the child to place a class's parameters by role and shape (the
    placement under which the module computes the first, else one of the others). It is not graded: the verdict
    comes from the secret cases, compared here."""
    assert ex.mutants is not None, ex.id  # interview mode: a class exercise
    case = without_biases(ex.make_square_cases()[0], "qkvo")
    correct = cached_outputs(ex.expected, case, ex.correct)["step1.out"]
    targets = [correct]
    for m in ex.mutants():
        out = cached_outputs(ex.expected, case, m.variant)
        t = None if isinstance(out, Exception) else out.get("step1.out")
        if (
            isinstance(t, torch.Tensor)
            and t.shape == correct.shape
            and not any(torch.allclose(t, u, atol=1e-6) for u in targets)
        ):
            targets.append(t)
    return {"ctor": case.ctor, "params": case.params, "x": case.calls[0].x, "targets": targets}


def _said_by_child(value) -> str:
    """A name list the child wrote (the candidate's own argument and parameter names): plain text on one line."""
    return printable(one_line(value), 240) if isinstance(value, str) else ""


def _no_bias(record, default: list) -> list:
    """The roles a record's module had no bias for (the first record's, where it does not say)."""
    dialect = record.get("dialect") if isinstance(record, dict) else None
    no_bias = dialect.get("no_bias") if isinstance(dialect, dict) else None
    if isinstance(no_bias, list) and set(no_bias) <= {"q", "k", "v", "o"}:
        return no_bias
    return default


def _dialect_name(name: str):
    """The name of the dialect the child reported (dialects.build), as a text of the catalogue."""
    if name == dialects.BOOK:
        return Msg("dialect.book")
    if name == dialects.ANNOTATED:
        return Msg("dialect.annotated")
    return Msg("dialect.signature", signature=name)


_MASK_KEYS = dict(zip(dialects.MASKS, ("mask.built_in", "mask.keep", "mask.hidden", "mask.additive"), strict=False))


def _mask_convention(mask: str):
    """The mask convention the child settled on (dialects.Caller.settle), as a text of the catalogue."""
    base = mask[: -len(dialects.NOT_CAUSAL)] if mask.endswith(dialects.NOT_CAUSAL) else mask
    if base not in _MASK_KEYS:
        return mask
    return Msg("mask.not_causal", mask=Msg(_MASK_KEYS[base])) if base != mask else Msg(_MASK_KEYS[base])


def _read_dialect(graded, raw) -> None:
    """Interview mode: the cases switched to the ones the child ran (the book's or the square ones), without the
    biases the candidate's class has none of, and what the grader assumed of the class (``graded.assumed``)."""
    dialect = raw[0].get("dialect") if isinstance(raw, list) and raw and isinstance(raw[0], dict) else None
    if dialect is None:
        return
    if not isinstance(dialect, dict):
        raise BadResult(Msg("bad.dialect"))
    no_bias = dialect.get("no_bias")
    if not isinstance(no_bias, list) or not set(no_bias) <= {"q", "k", "v", "o"}:
        raise BadResult(Msg("bad.dialect_fields"))
    name, mask = _dialect_name(str(dialect.get("name"))[:80]), _mask_convention(str(dialect.get("mask"))[:80])
    square = dialect.get("square", True) is not False  # d_in and d_out by name: the book's cases
    # per case: a class that follows qkv_bias has the biases in some of the book's cases only
    ran = graded.extra["square"] if square else graded.cases
    padded = raw + [None] * len(graded.cases)
    graded.cases = [without_biases(c, _no_bias(rec, no_bias)) for c, rec in zip(ran, padded, strict=False)]
    no_bias = sorted(set(no_bias).intersection(*[_no_bias(rec, no_bias) for rec in raw]))
    graded.assumed = (
        Msg("assumed.no_bias", name=name, mask=mask, roles=joined(no_bias, ","))
        if no_bias
        else Msg("assumed", name=name, mask=mask)
    )
    mapping, placement = (_said_by_child(dialect.get(k)) for k in ("ctor", "placement"))
    if mapping and placement:
        graded.assumed = Msg("assumed.placed", assumed=graded.assumed, mapping=mapping, placement=placement)


# ---------------------------------------------------------------------------------------------
# the kind


class Words(diagnose.Words):
    """A module's outputs: its cache's two parts, the gradients of its input and parameters, its flags."""

    def what(self, part: str):
        if part.startswith("grad."):
            return Msg("label.grad_input") if part == "grad.x" else Msg("label.grad", param=part[5:])
        return Msg("label." + part) if part in ("keys", "values") else super().what(part)

    def absent(self, name: str, label, shape: str) -> Msg:
        return Msg("compare.missing", label=label) if ".grad." in name else super().absent(name, label, shape)

    def shape_note(self, name: str):
        if not name.endswith(("keys", "values")):
            return ""
        layout = self.case.meta.get("cache_layout") if self.case is not None else None
        return self.exercise.text(layout) if layout else Msg("compare.cache_layout")

    def flag(self, name: str) -> Msg | None:
        step, _, label = name.partition(".")
        if label in FLAGS:
            return Msg(FLAGS[label], step=step)
        own = "compare.not_" + label  # a flag the exercise's read_back adds (exercise 12's layout): its own words
        if self.exercise is not None and self.exercise.home and own in table(self.exercise.home):
            return self.exercise.text(own, step=step)
        return None

    def bound(self, name: str) -> bool:
        return name.partition(".")[2] in FLAGS

    def lenient_nan(self, name: str) -> bool:
        return ".grad." in name


class Module(Kind):
    name = "module"
    Words = Words
    mistakes = TRAINING_MISTAKES

    def prepare(self, graded, seed):
        if graded.exercise.interview:  # a class in another dialect than the book's gets square cases
            graded.extra["square"] = graded.exercise.make_square_cases(seed)

    def plan(self, graded):
        ex = graded.exercise
        out = {
            **super().plan(graded),
            "trace": ex.interview,
            "ctor_args": [[c.ctor[a] for a in ex.args] for c in graded.cases],
        }
        square = graded.extra.get("square")
        if square is not None:
            out.update(
                dialects=True,
                square_cases=[self.plan_case(c) for c in square],
                square_ctors=[c.ctor for c in square],
                ctors=[c.ctor for c in graded.cases],
                probe=probe(ex),
            )
        return out

    def plan_case(self, case):
        present = list(case.meta.get("present_names", ("keys", "values")))
        return {**super().plan_case(case), "given_past": case.given_past, "present_names": present}

    def expected_names(self, case):
        names = {"repeat.out"}
        present = case.meta.get("present_names", ("keys", "values"))
        for i, call in enumerate(case.calls, start=1):
            names.add(f"step{i}.out")
            if call.tile_bound is not None:
                names.add(f"step{i}.{call.bound_label}")
            if call.use_cache is not None:
                names |= {f"step{i}.{present[0]}", f"step{i}.{present[1]}"}
            if call.train:  # interview mode: a dropout after the output projection was left out of this call
                names.add(f"step{i}.out_dropout")
            if call.grad is not None:
                names.add(f"step{i}.grad.x")
                names |= {f"step{i}.grad.{p}" for p in case.params}
        return names

    def resolve(self, graded, raw):
        if graded.extra.get("square") is not None:
            _read_dialect(graded, raw)
        return super().resolve(graded, raw)

    def watched(self, plan):
        return {**super().watched(plan), "ctor_args": plan["ctor_args"][:1], "trace": False, "dialects": False}

    def single(self, case):
        return len(case.calls) == 1 or case.kind == "train"

    def check(self, case, outputs):
        if case.kind != "train":
            return False, None
        return True, dropout_problem(case, outputs)

    def verdict(self, ex, records, cases, refusals=None, assumed=None):
        if any(name.endswith(".out_dropout") for rec in records for name in rec.get("outputs", {})):
            assumed = Msg("assumed.output_dropout", assumed=assumed) if assumed else Msg("assumed.output_dropout_alone")
        return super().verdict(ex, records, cases, refusals, assumed)

    def refusal(self, ex, call):
        own = super().refusal(ex, call)
        if own is not None or not ex.interview:
            return own
        # interview mode: what the harness saw run, a fused kernel, FlexAttention, or its tracing stopped
        if call == "profiler:stopped":
            return Msg("refusal.profiler_stopped")
        return Msg("refusal.flex", call=call) if "flex_attention" in call else Msg("refusal.interview_call", call=call)

    def refused(self, ex, refusals, total, assumed=None):
        if not (ex.interview and all(isinstance(r, Msg) and r.key in FUSED for r in refusals)):
            return super().refused(ex, refusals, total, assumed)
        messages = [Msg("refused.forbidden", first=refusals[0])] + refusals[1:]
        return Result(ex.id, False, 0.0, 0, total, "forbidden", messages, assumed)

    def not_defined(self, ex):
        key = "not_implemented.define_module" if ex.interview else "not_implemented.define_class"
        return Msg(key, name=ex.contract)

    def delegation(self, ex, cls):
        """Why ``cls`` is course_utils' reference (or, in interview mode, nn.MultiheadAttention), else None."""
        if not isinstance(cls, type):
            return super().delegation(ex, cls)

        for base in cls.__mro__:
            module = getattr(base, "__module__", "") or ""
            if module.startswith("course_utils") and not module.startswith("course_utils.grade"):
                return Msg("delegation.class", cls=cls.__name__, base=base.__name__)
            if base is nn.MultiheadAttention:
                return Msg("delegation.mha", cls=cls.__name__) if ex.interview else None
        forward = getattr(cls, "forward", None)
        fmod = getattr(forward, "__module__", "") or ""
        if fmod.startswith("course_utils") and not fmod.startswith("course_utils.grade"):
            return Msg("delegation.forward", cls=cls.__name__, module=fmod)
        return None


KIND = Module()
