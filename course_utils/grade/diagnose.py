"""The verdict: compare the learner's outputs with the reference, and name the mistake by matching them
against the catalogue of mutants run on the same parameters and inputs (and, failing that, pairs of them)."""

from __future__ import annotations

from dataclasses import replace

import torch

from .exercises import get
from .kit import Mistake
from .messages import Msg, case_title, joined
from .registry import Exercise
from .types import Case, Mutant, Result

RTOL, ATOL = 1e-4, 1e-5
NOT_IMPLEMENTED = "not_implemented"

# the mistakes the verdict names whatever the exercise (texts: messages' mutant.<key>)
DROPOUT_IGNORED = Mistake("dropout_ignored")
DROPOUT_ON_SCORES = Mistake("dropout_on_scores")
DROPOUT_ON_OUTPUT = Mistake("dropout_on_output")
DROPOUT_ON_VALUES = Mistake("dropout_on_values")
DROPOUT_WRONG = Mistake("dropout_wrong")
DROPOUT_EVAL = Mistake("dropout_in_eval")
M_LEAVES_AUTOGRAD = Mistake("grad_leaves_autograd")
VERDICT_MISTAKES = (
    DROPOUT_EVAL,
    DROPOUT_IGNORED,
    DROPOUT_ON_SCORES,
    DROPOUT_ON_OUTPUT,
    DROPOUT_ON_VALUES,
    DROPOUT_WRONG,
    M_LEAVES_AUTOGRAD,
)


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


_WHAT = {"out": "label.out", "keys": "label.keys", "values": "label.values"}


def _what(name: str):
    return Msg(_WHAT[name]) if name in _WHAT else name  # other outputs (lse, c_kv, ...) go by their own names


def _label(name: str, single: bool):
    step, _, rest = name.partition(".")
    if step.startswith("rank"):  # a ring of processes: rank<r>.out, rank<r>.recv<t>.k
        what, _, kv = rest.partition(".")
        if what.startswith("recv"):
            part = Msg("label.received_" + kv)
            return Msg("label.received", rank=step[4:], step=what[4:], what=part)
        return Msg("label.rank", rank=step[4:], what=_what(what))
    if not rest:
        return _what(step)
    if rest.startswith("grad."):
        what = Msg("label.grad_input") if rest == "grad.x" else Msg("label.grad", param=rest[5:])
    else:
        what = _what(rest)
    return what if single else Msg("label.step", step=step, what=what)


def compare(
    learner: dict,
    expected: dict,
    single: bool = True,
    only_out: bool = False,
    lenient_nan: bool = False,
    tol=(RTOL, ATOL),
    lenient_flags: bool = False,
    layout: str = "compare.cache_layout",
) -> str | None:
    """None when the learner's outputs match, else a one-line reason. ``lenient_flags``: a mutant that builds
    too much (tiled or absorbed 0) also matches a learner the case was too small to catch. ``layout``: the text
    that says the contract's layout of a cache, after its shape (an exercise's case names its own)."""
    for name, exp in expected.items():
        if only_out and not name.endswith(".out"):
            continue
        got = learner.get(name)
        label = _label(name, single)
        if exp is None:
            if got is not None:
                return Msg("compare.not_none", label=label)
            continue
        if got is None:
            if ".grad." in name:
                return Msg("compare.missing", label=label)
            return Msg("compare.none", label=label, shape=_shape(exp))
        if not isinstance(got, torch.Tensor):
            return Msg("compare.not_tensor", label=label, got=str(got), shape=_shape(exp))
        if got.shape != exp.shape:
            extra = Msg(layout) if name.endswith(("keys", "values")) else ""
            return Msg("compare.shape", label=label, got=_shape(got), need=_shape(exp), extra=extra)
        if name.endswith((".tiled", ".absorbed", ".p2p", ".split", ".layout")):  # what the run did besides its
            # outputs, 1 = as the contract asks: within the memory a tiled or absorbed computation needs; a rank's
            # exchanges point to point with its neighbours; partials merged by merge_partials; the ring as laid out
            lenient = lenient_flags and exp.item() == 0 and name.endswith((".tiled", ".absorbed"))  # a case too
            # small to tell
            if not torch.equal(got, exp) and not lenient:
                return Msg("compare.not_" + name.rsplit(".", 1)[1], step=name.partition(".")[0])
            continue
        if not _close(got, exp, lenient_nan and ".grad." in name, tol):
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


def _matches(ex: Exercise, cases, records, mutant) -> bool:
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
        if (
            compare(
                rec["outputs"],
                exp,
                only_out=mutant.outputs_only,
                lenient_nan=True,
                tol=case.meta.get("tol", (RTOL, ATOL)),
                lenient_flags=True,
                layout=case.meta.get("cache_layout", "compare.cache_layout"),
            )
            is not None
        ):
            return False
    return True


def _error_line(err: dict) -> Msg:
    where = Msg("where." + err["where"])  # construct | load | forward | backward
    if err["contract"]:
        return Msg("error.contract", message=err["message"])
    if err["line"]:
        return Msg("error.in_line", type=err["type"], where=where, message=err["message"], line=err["line"])
    return Msg("error.in", type=err["type"], where=where, message=err["message"])


# ------------------------------------------------------------------------------------------------------
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


# ------------------------------------------------------------------------------------------------------
# the verdict


def _details(reasons, num_cases) -> list:
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
            lines.append(Msg("detail.case", case=case_title(members[0][0]), why=why))
        elif len(members) == num_cases:
            lines.append(Msg("detail.every_case", why=why))
        else:
            lines.append(Msg("detail.cases", count=len(members), total=num_cases, why=why))
    return lines


def total_checks(cases) -> int:
    """One check per case, plus one: the module is deterministic in eval mode."""
    return len(cases) + 1


def _nondeterministic(records) -> bool:
    for rec in records:
        a, b = rec["outputs"].get("step1.out"), rec["outputs"].get("repeat.out")
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape:
            if not torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)):
                return True
    return False


def _refusals(ex: Exercise, records, refusals):
    refusals = list(refusals or [])
    interview = ex.interview
    for rec in records:
        for call in rec.get("calls", []):
            if call.startswith("course_utils"):
                refusals.append(Msg("refusal.calls_course", call=call))
            elif interview:  # what the harness saw run: a fused kernel, FlexAttention, or its tracing stopped
                refusals.append(
                    Msg("refusal.profiler_stopped")
                    if call == "profiler:stopped"
                    else Msg("refusal.flex", call=call)
                    if "flex_attention" in call
                    else Msg("refusal.interview_call", call=call)
                )
    return list(dict.fromkeys(refusals))


def _called(case, ex: Exercise) -> str:
    """The function a case calls: its helper (merge_partials), its exchange (a ring's), or the contract's."""
    call = case.calls[0]
    return call.helper or call.exchange or ex.contract


def _stubs(ex: Exercise, cases, records) -> list[str]:
    """The contract's functions that raise NotImplementedError (a function exercise may have a helper, such as
    merge_partials, graded on its own cases): those a stub's error came from, else those whose cases raised one,
    in the contract's order (helpers first, as the notebook defines them)."""
    helpers = [call.helper or call.exchange for case in cases for call in case.calls if call.helper or call.exchange]
    functions = list(dict.fromkeys(helpers + [ex.contract]))
    raised = [(case, rec["error"]) for case, rec in zip(cases, records, strict=False) if rec["error"] is not None]
    raised = [(case, err) for case, err in raised if err["not_implemented"]]
    named = {err.get("function") for _, err in raised}
    by_frame = [f for f in functions if f in named]
    if not by_frame and ex.kind == "function":  # a stub inside a function the given code calls (exercise 14's
        # flash_kernel, launched by the given flash_attention): the one the learner writes is named
        by_frame = sorted(n for n in named if isinstance(n, str) and n.isidentifier() and len(n) <= 60)
    by_case = [f for f in functions if any(_called(case, ex) == f for case, _ in raised)]
    return by_frame or by_case or [ex.contract]


def verdict(exercise: str | Exercise, records: list, cases: list, refusals: list | None = None, assumed=None) -> Result:
    """The verdict of every exercise: validated ``records`` (one per case) graded against the reference and the
    mutant catalogue. The capstone, graded on models (its cases are trained models), is graded by its module, as
    its failures are (``failure``)."""
    ex = get(exercise)
    if ex.kind == "model":
        return ex.model.grade_answers(ex.id, records, cases, refusals)
    assert ex.expected is not None and ex.mutants is not None, ex.id  # a class or function exercise
    exercise = ex.id
    total = total_checks(cases)
    refusals = _refusals(ex, records, refusals)
    if any(name.endswith(".out_dropout") for rec in records for name in rec.get("outputs", {})):
        assumed = Msg("assumed.output_dropout", assumed=assumed) if assumed else Msg("assumed.output_dropout_alone")
    interview = ex.interview
    if refusals:
        key = "forbidden" if interview and not any("course_utils" in r for r in refusals) else "delegates"
        messages = [Msg("refused." + key, first=refusals[0])] + refusals[1:]
        return Result(exercise, False, 0.0, 0, total, key, messages, assumed)

    reasons: list[tuple[str, str]] = []  # (case name, why it failed: a Msg, or a mistake's text)
    dropout = None
    for case, rec in zip(cases, records, strict=False):
        single = len(case.calls) == 1 or case.kind == "train"
        if rec["error"] is not None:
            reasons.append((case.name, _error_line(rec["error"])))
            continue
        why = compare(
            rec["outputs"],
            cached_outputs(ex.expected, case, ex.correct),
            single,
            tol=case.meta.get("tol", (RTOL, ATOL)),
            layout=case.meta.get("cache_layout", "compare.cache_layout"),
        )
        if why is None and case.kind == "train":
            dropout = dropout_problem(case, rec["outputs"])
            why = dropout[1] if dropout else None
        if why is not None:
            reasons.append((case.name, why))
    nondeterministic = _nondeterministic(records)
    ran = any(r["error"] is None for r in records)  # determinism is only a check when something ran
    passed = len(cases) - len(reasons) + (1 if ran and not nondeterministic else 0)
    if passed == total:
        return Result(exercise, True, 1.0, total, total, None, [], assumed)
    # the score follows what the exercise teaches: a case may weigh more than one check (meta "weight", e.g. the
    # ring's runs of exercise 15), the determinism check weighs one
    failed = {name for name, _ in reasons}
    weights = [float(case.meta.get("weight", 1.0)) for case in cases]
    earned = sum(w for case, w in zip(cases, weights, strict=True) if case.name not in failed)
    score = round((earned + (1 if ran and not nondeterministic else 0)) / (sum(weights) + 1), 3)
    details = _details(reasons, len(cases))

    def result(key, message):
        same = len(details) == 1 and details[0].endswith(message)  # said once is enough
        return Result(exercise, False, score, passed, total, key, [message] + ([] if same else details), assumed)

    errors = [r["error"] for r in records if r["error"] is not None]
    if any(e["not_implemented"] for e in errors):
        stubs = _stubs(ex, cases, records)
        said = (
            Msg("not_implemented.write", name=stubs[0])
            if len(stubs) == 1
            else Msg("not_implemented.write_all", names=joined(stubs, ","))
        )
        return Result(exercise, False, score, passed, total, NOT_IMPLEMENTED, [said], assumed)
    if nondeterministic:
        return result(DROPOUT_EVAL.key, DROPOUT_EVAL.message)
    if dropout and len(reasons) == 1:
        return result(*dropout)
    for mutant in ex.mutants():
        if _matches(ex, cases, records, mutant):
            return result(mutant.key, mutant.message)
    if any(e["where"] == "forward" and "numpy" in e["message"] for e in errors):
        return result(M_LEAVES_AUTOGRAD.key, M_LEAVES_AUTOGRAD.message)
    if errors and errors[0]["contract"]:
        return result("contract", _error_line(errors[0]))
    if errors:
        return result("exception", _error_line(errors[0]))
    for mutant in mutant_pairs(ex.mutants(), ex.correct):
        if _matches(ex, cases, records, mutant):
            return result(mutant.key, mutant.message)
    if any("shape" in why for _, why in reasons):
        return result("wrong_shape", Msg("wrong_shape", why=next(w for _, w in reasons if "shape" in w)))
    return result("wrong_values", Msg("wrong_values"))


def failure(exercise: str | Exercise, key: str, message: str) -> Result:
    """A result for a submission that could not be run at all (syntax error, timeout, missing class...)."""
    ex = get(exercise)
    if ex.kind == "model":  # graded on models: it counts its checks itself
        return ex.model.failure(ex.id, key, message)
    return Result(ex.id, False, 0.0, 0, total_checks(ex.make_cases(seed=0)), key, [message])
