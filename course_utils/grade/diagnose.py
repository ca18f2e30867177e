"""The verdict: compare the learner's outputs with the reference, and name the mistake by matching them against the
exercise's mutants run on the same parameters and inputs (and, failing that, pairs of them). Everything here is the
same for every exercise and every kind of exercise; what differs is asked of the exercise (its expected outputs, its
mutants, its case titles) and of its kind (``kinds/``: how its outputs are named, its own checks, how many checks it
counts), passed in as objects. The verdict is decided on keys and data, never on the words of a message.

``judge`` is the verdict of every kind but those with a verdict of their own (the capstone's model kind)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from .messages import Msg, joined
from .types import Case, Mistake, Mutant, Result

RTOL, ATOL = 1e-4, 1e-5
NOT_IMPLEMENTED = "not_implemented"

# the mistakes the verdict names whatever the exercise, key -> (English, Chinese)
TEXTS: dict[str, tuple[str, str]] = {
    "mutant.grad_leaves_autograd": (
        "forward fails when gradients are on: the computation leaves autograd (.numpy() "
        "on a tensor that requires grad); use torch operations throughout",
        "开启梯度时 forward 会出错：计算离开了 autograd（对需要梯度的张量调用了 .numpy()）；请全程使用 torch 运算",
    ),
    "mutant.dropout_in_eval": (
        "dropout active in eval mode: outputs change from call to call after .eval(); use "
        "self.dropout = nn.Dropout(p) (or dropout_p=p if self.training else 0.0)",
        "eval 模式下 dropout 仍在起作用：调用 .eval() 之后每次调用的输出都不一样；请用 "
        "self.dropout = nn.Dropout(p)（或 dropout_p=p if self.training else 0.0）",
    ),
}
NONDETERMINISTIC = Mistake("dropout_in_eval")  # two eval-mode calls on one input differ
M_LEAVES_AUTOGRAD = Mistake("grad_leaves_autograd")  # the error torch raises for .numpy() on a tensor with grad
VERDICT_MISTAKES = (NONDETERMINISTIC, M_LEAVES_AUTOGRAD)


def cached_outputs(expected, case: Case, v):
    """``expected(case, v)`` (an exercise's expected outputs), memoized on the case; an exception is returned
    (not raised) for crashing variants."""
    memo = case.meta.setdefault("expected", {})
    if v not in memo:
        case.meta["step"] = 1
        try:
            memo[v] = expected(case, v)
        except Exception as exc:  # noqa: BLE001 - the mistake makes the reference crash too
            # where it crashed, as a learner's error record says it: attributes of the exception itself (any
            # exception, an IndexError as well as the exercise's own, so none the type checker knows of)
            vars(exc).update(step=case.meta["step"], where=getattr(exc, "where", "forward"))
            memo[v] = exc
    return memo[v]


def mutant_pairs(singles: list, base) -> list[Mutant]:
    """Two known mistakes at once, named together: the combinations of the ``singles`` (an exercise's mutants)
    that change different flags of its correct variant ``base``."""
    seen, pairs = set(), []
    for i, a in enumerate(singles):
        for b in singles[i + 1 :]:
            if a.key == b.key or a.outputs_only or b.outputs_only or not (a.paired and b.paired):
                continue
            fa = {f for f in base.__dataclass_fields__ if getattr(a.variant, f) != getattr(base, f)}
            fb = {f for f in base.__dataclass_fields__ if getattr(b.variant, f) != getattr(base, f)}
            if not fa or not fb or fa & fb:
                continue
            combined = replace(a.variant, **{f: getattr(b.variant, f) for f in fb})
            if combined in seen:
                continue
            seen.add(combined)
            pairs.append(Mutant(f"{a.key}+{b.key}", Msg("two_mistakes", first=a.message, second=b.message), combined))
    return pairs


# ------------------------------------------------------------------------------------------------------
# comparing outputs


class Words:
    """How a verdict names the outputs of one case: ``step<i>.out`` as "the output", another output by its own name
    (lse, c_kv, ...). A kind whose outputs say more (a cache, gradients, a rank's chunks, flags measured in the
    sandbox) names them in a subclass of its own (``Kind.words``)."""

    def __init__(self, exercise: Any = None, case: Case | None = None):
        self.exercise, self.case = exercise, case

    def label(self, name: str, single: bool):
        step, _, rest = name.partition(".")
        if not rest:
            return self.what(step)
        what = self.what(rest)
        return what if single else Msg("label.step", step=step, what=what)

    def what(self, part: str):
        return Msg("label.out") if part == "out" else part

    def absent(self, name: str, label, shape: str) -> Msg:
        """What a missing output is said to be."""
        return Msg("compare.none", label=label, shape=shape)

    def shape_note(self, name: str):
        """What follows a wrong shape (the contract's layout of a cache)."""
        return ""

    def flag(self, name: str) -> Msg | None:
        """For a flag measured in the sandbox (1 = within a bound, or as the contract asks), what a 0 says; None for
        any other output."""
        return None

    def bound(self, name: str) -> bool:
        """Whether the flag ``name`` is a bound that a case may be too small to catch (a mutant that builds too much
        then also matches a learner whose 1 the case could not tell from a 0); other flags are matched exactly."""
        return False

    def lenient_nan(self, name: str) -> bool:
        """Whether NaN where the reference has a number is forgiven (a fully masked row's gradient)."""
        return False


def _close(a, b, lenient_nan=False, tol=(RTOL, ATOL)) -> bool:
    if a.shape != b.shape:
        return False
    a, b = a.double(), b.double()
    if lenient_nan:  # a fully masked row is NaN in one formulation's backward and 0 in another's
        both = ~(torch.isnan(a) | torch.isnan(b))
        a, b = a[both], b[both]
    return torch.allclose(a, b, rtol=tol[0], atol=tol[1], equal_nan=True)


def _shape(t):
    return "(" + ", ".join(str(s) for s in t.shape) + ")"


def compare(
    learner: dict,
    expected: dict,
    single: bool = True,
    only_out: bool = False,
    lenient_nan: bool = False,
    tol=(RTOL, ATOL),
    lenient_flags: bool = False,
    words: Words | None = None,
) -> Msg | None:
    """None when the learner's outputs match, else a one-line reason, said by ``words`` (the kind's). ``lenient_flags``:
    a mutant that builds too much (a flag 0) also matches a learner the case was too small to catch."""
    words = words or Words()
    for name, exp in expected.items():
        if only_out and not name.endswith(".out"):
            continue
        got = learner.get(name)
        label = words.label(name, single)
        if exp is None:
            if got is not None:
                return Msg("compare.not_none", label=label)
            continue
        if got is None:
            return words.absent(name, label, _shape(exp))
        if not isinstance(got, torch.Tensor):
            return Msg("compare.not_tensor", label=label, got=str(got), shape=_shape(exp))
        if got.shape != exp.shape:
            return Msg("compare.shape", label=label, got=_shape(got), need=_shape(exp), extra=words.shape_note(name))
        failed_flag = words.flag(name)
        if failed_flag is not None:  # measured in the sandbox: 1 = within the memory the computation needs, or as
            # the contract asks (a ring's exchanges point to point, keys split, a cache in the contract's layout)
            if not torch.equal(got, exp) and not (lenient_flags and exp.item() == 0 and words.bound(name)):
                return failed_flag
            continue
        if not _close(got, exp, lenient_nan and words.lenient_nan(name), tol):
            if torch.isnan(got).any() and not torch.isnan(exp).any():
                return Msg("compare.nan", label=label)
            return _nonfinite(got, exp, label) or Msg("compare.differs", label=label, diff=_finite_diff(got, exp))
    return None


def _number(x: float) -> str:
    return f"{x:.4g}"  # inf, -inf and nan as Python writes them


def _nonfinite(got, exp, label):
    """Where one side is inf/-inf/NaN and the other is not (or an inf of the other sign): a difference with no
    finite size, said as what each side holds there, else None."""
    g, e = got.double(), exp.double()
    odd = ~(torch.isfinite(g) & torch.isfinite(e)) & (g != e) & ~(torch.isnan(g) & torch.isnan(e))
    if not odd.any():
        return None
    first = tuple(int(i) for i in odd.nonzero()[0])
    return Msg(
        "compare.nonfinite",
        label=label,
        got=_number(g[first].item()),
        need=_number(e[first].item()),
        index=str(first),
        count=int(odd.sum()),
        total=g.numel(),
    )


def _finite_diff(got, exp) -> float:
    g, e = got.double(), exp.double()
    both = torch.isfinite(g) & torch.isfinite(e)
    return (g[both] - e[both]).abs().max().item() if both.any() else 0.0


def _error_matches(err, exp) -> bool:
    return (
        err is not None
        and err["where"] == getattr(exp, "where", "forward")
        and err.get("step", 1) == getattr(exp, "step", 1)
        and err["type"] == getattr(exp, "error_type", err["type"])  # a mutant may name what the learner's run raised
    )


def matches(ex, kind, cases, records, mutant) -> bool:
    """Whether the learner's records are what ``mutant`` computes on every case (a crash where it crashes)."""
    for case, rec in zip(cases, records, strict=False):
        exp = cached_outputs(ex.expected, case, mutant.variant)
        if isinstance(exp, dict) and not exp:  # this mistake expects nothing of this case: whatever it did, crash too
            continue
        if isinstance(exp, Exception):  # a mutant that crashes matches a learner that crashes there
            if not _error_matches(rec["error"], exp):
                return False
            continue
        if rec["error"] is not None:
            return False
        tol = case.meta.get("tol", (RTOL, ATOL))
        words = kind.words(ex, case)
        why = compare(
            rec["outputs"],
            exp,
            only_out=mutant.outputs_only,
            lenient_nan=True,
            tol=tol,
            lenient_flags=True,
            words=words,
        )
        if why is not None:
            return False
    return True


def error_line(err: dict) -> Msg:
    """A learner's error (a validated record's), said on one line."""
    where = Msg("where." + err["where"])  # construct | load | forward | backward
    if err["contract"]:
        return Msg("error.contract", message=err["message"])
    if err["line"]:
        return Msg("error.in_line", type=err["type"], where=where, message=err["message"], line=err["line"])
    return Msg("error.in", type=err["type"], where=where, message=err["message"])


# ------------------------------------------------------------------------------------------------------
# the verdict


def details(ex, reasons, num_cases) -> list:
    """One line per distinct reason: cases that fail the same way (the same text, or the same output differing by
    other amounts) share one line, so that a diagnosis is not followed by a column of near-identical lines."""

    def what(why):  # the output, present keys, a gradient... whichever call it came from
        label = why.args["label"]
        return label.args["what"] if isinstance(label, Msg) and label.key == "label.step" else label

    groups: dict[object, list] = {}  # ("differs", what) or the reason's text -> its (case name, reason)
    for name, why in reasons:
        differs = isinstance(why, Msg) and why.key == "compare.differs"
        groups.setdefault(("differs", str(what(why))) if differs else str(why), []).append((name, why))
    lines = []
    for members in groups.values():
        why = members[0][1]
        if len(members) > 1 and isinstance(why, Msg) and why.key == "compare.differs":
            labels = {str(w.args["label"]) for _, w in members}
            why = Msg(
                "compare.differs_up_to",
                label=why.args["label"] if len(labels) == 1 else what(why),
                diff=max(w.args["diff"] for _, w in members),
            )
        if len(members) == 1:
            lines.append(Msg("detail.case", case=ex.title(members[0][0]), why=why))
        elif len(members) == num_cases:
            lines.append(Msg("detail.every_case", why=why))
        else:
            lines.append(Msg("detail.cases", count=len(members), total=num_cases, why=why))
    return lines


def nondeterministic(records) -> bool:
    """Whether some case's first call and its repeat (the same call, eval mode, another seed) differ."""
    for rec in records:
        a, b = rec["outputs"].get("step1.out"), rec["outputs"].get("repeat.out")
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape:
            if not torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)):
                return True
    return False


def same_text(a, b) -> bool:
    """Whether two texts are the same text (module, key and arguments), whatever their words."""
    if isinstance(a, Msg) and isinstance(b, Msg):
        return (
            (a.home, a.key) == (b.home, b.key)
            and a.args.keys() == b.args.keys()
            and all(same_text(a.args[k], b.args[k]) for k in a.args)
        )
    return not isinstance(a, Msg) and not isinstance(b, Msg) and a == b


def stubs(ex, kind, cases, records) -> list[str]:
    """The contract's functions that raise NotImplementedError (a function exercise may have others, graded on cases
    of their own: exercise 13's merge_partials, exercise 15's ring_exchange): those a stub's error came from, else
    those whose cases raised one, in the contract's order (the others first, as the notebook defines them)."""
    others = [kind.called(ex, case) for case in cases if kind.called(ex, case) != ex.contract]
    functions = list(dict.fromkeys(others + [ex.contract]))
    raised = [(case, rec["error"]) for case, rec in zip(cases, records, strict=False) if rec["error"] is not None]
    raised = [(case, err) for case, err in raised if err["not_implemented"]]
    named = {err.get("function") for _, err in raised}
    by_frame = [f for f in functions if f in named]
    if not by_frame and kind.word == "function":  # a stub inside a function the given code calls (exercise 14's
        # flash_kernel, launched by the given flash_attention): the one the learner writes is named
        by_frame = sorted(n for n in named if isinstance(n, str) and n.isidentifier() and len(n) <= 60)
    by_case = [f for f in functions if any(kind.called(ex, case) == f for case, _ in raised)]
    return by_frame or by_case or [ex.contract]


def judge(ex, kind, records: list, cases: list, refusals: list | None = None, assumed=None) -> Result:
    """The verdict of an exercise graded on outputs: validated ``records`` (one per case) against the reference and
    the exercise's mutants, with the kind's own checks (``kind``: see ``kinds.Kind``)."""
    total = kind.total_checks(cases)
    refusals = kind.refusals(ex, records, refusals)
    if refusals:
        return kind.refused(ex, refusals, total, assumed)

    reasons: list[tuple[str, Any]] = []  # (case name, why it failed: a Msg, or a mistake's text)
    own_check = None  # (key, message) of the kind's own check where the outputs matched (training mode's dropout)
    for case, rec in zip(cases, records, strict=False):
        if rec["error"] is not None:
            reasons.append((case.name, error_line(rec["error"])))
            continue
        why = compare(
            rec["outputs"],
            cached_outputs(ex.expected, case, ex.correct),
            kind.single(case),
            tol=case.meta.get("tol", (RTOL, ATOL)),
            words=kind.words(ex, case),
        )
        if why is None:
            checked, problem = kind.check(case, rec["outputs"])
            if checked:
                own_check = problem
                why = problem[1] if problem else None
        if why is not None:
            reasons.append((case.name, why))
    unsteady = nondeterministic(records)
    ran = any(r["error"] is None for r in records)  # determinism is only a check when something ran
    passed = len(cases) - len(reasons) + (1 if ran and not unsteady else 0)
    if passed == total:
        return Result(ex.id, True, 1.0, total, total, None, [], assumed)
    # the score follows what the exercise teaches: a case may weigh more than one check (its meta's "weight": the
    # ring's runs of exercise 15), the determinism check weighs one
    failed = {name for name, _ in reasons}
    weights = [float(case.meta.get("weight", 1.0)) for case in cases]
    earned = sum(w for case, w in zip(cases, weights, strict=True) if case.name not in failed)
    score = round((earned + (1 if ran and not unsteady else 0)) / (sum(weights) + 1), 3)
    lines = details(ex, reasons, len(cases))

    def result(key, message):
        said_once = len(lines) == 1 and same_text(lines[0].args["why"], message)  # said once is enough
        return Result(ex.id, False, score, passed, total, key, [message] + ([] if said_once else lines), assumed)

    errors = [r["error"] for r in records if r["error"] is not None]
    if any(e["not_implemented"] for e in errors):
        names = stubs(ex, kind, cases, records)
        said = (
            Msg("not_implemented.write", name=names[0])
            if len(names) == 1
            else Msg("not_implemented.write_all", names=joined(names, ","))
        )
        return Result(ex.id, False, score, passed, total, NOT_IMPLEMENTED, [said], assumed)
    if unsteady:
        return result(NONDETERMINISTIC.key, NONDETERMINISTIC.message)
    if own_check and len(reasons) == 1:
        return result(*own_check)
    for mutant in ex.mutants():
        if matches(ex, kind, cases, records, mutant):
            return result(mutant.key, mutant.message)
    if any(e["where"] == "forward" and e.get("leaves_autograd") for e in errors):
        return result(M_LEAVES_AUTOGRAD.key, M_LEAVES_AUTOGRAD.message)
    if errors and errors[0]["contract"]:
        return result("contract", error_line(errors[0]))
    if errors:
        return result("exception", error_line(errors[0]))
    for mutant in mutant_pairs(ex.mutants(), ex.correct):
        if matches(ex, kind, cases, records, mutant):
            return result(mutant.key, mutant.message)
    shapes = [why for _, why in reasons if isinstance(why, Msg) and why.key in SHAPE_REASONS]
    if shapes:
        return result("wrong_shape", Msg("wrong_shape", why=shapes[0]))
    return result("wrong_values", Msg("wrong_values"))


SHAPE_REASONS = ("compare.shape", "compare.none", "compare.not_tensor")  # an output of the wrong shape, or none
