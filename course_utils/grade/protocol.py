"""The grader's side of running a learner's class: the plan sent to the harness (constructor arguments,
parameters and inputs of cases drawn from a secret seed), and the check of what comes back.

Nothing the learner's process returns is trusted: ``validate`` keeps only plain tensors under the names the
plan asks for, with bounded sizes, and plain strings in error descriptions; the verdict (``diagnose``) then
compares them with the reference computed here.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

import torch
from torch import nn

from .diagnose import cached_outputs
from .escape import one_line, printable
from .exercises import get
from .heads import without_biases
from .messages import Msg, add_texts, joined
from .records import CallRecorder, with_texts
from .registry import Exercise
from .sandbox import dialects, errors, finding, running
from .types import Case

# this module's texts, key -> (English, Chinese): the catalogue's (messages.py) from here on
TEXTS: dict[str, tuple[str, str]] = {
    "delegation.function": ("{name} is course_utils' own ({module})", "{name} 是 course_utils 自带的实现（{module}）"),
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
    "bad.records": ("wrong number of case records", "用例记录的数量不对"),
    "bad.record": ("a case record is not a mapping", "有一条用例记录不是字典"),
    "bad.outputs": ("outputs is not a mapping", "outputs 不是字典"),
    "bad.calls": ("calls is not a list of names", "calls 不是名字列表"),
    "bad.error": ("error is not a mapping", "error 不是字典"),
    "bad.error_field": ("error field {field} has the wrong type", "error 的字段 {field} 类型不对"),
    "bad.error_place": ("unknown error place", "未知的出错位置"),
    "bad.dialect": ("dialect is not a mapping", "dialect 不是字典"),
    "bad.dialect_fields": ("malformed dialect", "dialect 的格式不对"),
    "assumed.placed": (
        "{assumed}; constructor: {mapping}; parameters: {placement}",
        "{assumed}；构造参数：{mapping}；参数位置：{placement}",
    ),
}
add_texts(TEXTS)

MAX_ELEMENTS = 1 << 20  # per returned tensor; the cases' tensors are far smaller


class BadResult(Exception):
    """What the learner's process sent back is not in the plan's schema."""


def plan_case(case: Case) -> dict:
    return {
        "name": case.name,
        "params": case.params,
        "given_past": case.given_past,
        "present_names": list(case.meta.get("present_names", ("keys", "values"))),
        "calls": [
            {
                "x": c.x,
                "train": c.train,
                "seed": c.seed,
                "grad": c.grad,
                "past": c.past,
                "past_scale": c.past_scale,
                "use_cache": c.use_cache,
                "kwargs": c.kwargs,
                "args": c.args,
                "tile_bound": c.tile_bound,
                "bound_label": c.bound_label,
                "peak_bound": c.peak_bound,
                "state": list(c.state),
                "helper": c.helper,
                "ranks": c.ranks,
                "exchange": c.exchange,
                "split_check": c.split_check,
            }
            for c in case.calls
        ],
    }


def probe(exercise: str | Exercise) -> dict:
    """Interview mode's probe: a square case of its own draw (no biases, eval mode) with its expected output first,
    then the outputs of the known mistakes, for the child to place a class's parameters by role and shape (the
    placement under which the module computes the first, else one of the others). It is not graded: the verdict
    comes from the secret cases, compared here."""
    ex = get(exercise)
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


def plan(ex: Exercise, cases: list, square: list | None = None) -> dict:
    """What the harness needs for one exercise, and nothing else: no expected outputs, no seed. Interview
    mode also sends ``square`` cases, for a class written in another dialect than the book's."""
    function = ex.kind == "function"
    out = {
        "class": ex.contract,
        "trace": ex.interview,
        "function": function,
        "ctor_args": [[] if function else [c.ctor[a] for a in ex.args] for c in cases],
        "cases": [plan_case(c) for c in cases],
    }
    if square is not None:
        out.update(
            dialects=True,
            square_cases=[plan_case(c) for c in square],
            square_ctors=[c.ctor for c in square],
            ctors=[c.ctor for c in cases],
            probe=probe(ex),
        )
    return out


class Graded:
    """The cases an exercise was graded on, and what the grader assumed about the learner's class."""

    def __init__(self, exercise: str | Exercise, seed: int | None = None):
        ex = get(exercise)
        self.exercise = ex
        self.cases = ex.make_cases(seed)
        self.square = ex.make_square_cases(seed) if ex.interview else None
        self.assumed: Msg | None = None

    def plan(self) -> dict:
        return plan(self.exercise, self.cases, self.square)

    def resolve(self, raw) -> list:
        """Validated records, with ``cases`` switched to the ones they were run on (and without the biases
        the learner's class does not have)."""
        dialect = raw[0].get("dialect") if isinstance(raw, list) and raw and isinstance(raw[0], dict) else None
        if self.square is not None and dialect is not None:
            if not isinstance(dialect, dict):
                raise BadResult(Msg("bad.dialect"))
            no_bias = dialect.get("no_bias")
            if not isinstance(no_bias, list) or not set(no_bias) <= {"q", "k", "v", "o"}:
                raise BadResult(Msg("bad.dialect_fields"))
            name, mask = _dialect_name(str(dialect.get("name"))[:80]), _mask_convention(str(dialect.get("mask"))[:80])
            square = dialect.get("square", True) is not False  # d_in and d_out by name: the book's cases
            # per case: a class that follows qkv_bias has the biases in some of the book's cases only
            self.cases = [
                without_biases(c, _no_bias(rec, no_bias))
                for c, rec in zip(self.square if square else self.cases, raw + [None] * len(self.cases), strict=False)
            ]
            no_bias = sorted(set(no_bias).intersection(*[_no_bias(rec, no_bias) for rec in raw]))
            self.assumed = (
                Msg("assumed.no_bias", name=name, mask=mask, roles=joined(no_bias, ","))
                if no_bias
                else Msg("assumed", name=name, mask=mask)
            )
            mapping, placement = (_said_by_child(dialect.get(k)) for k in ("ctor", "placement"))
            if mapping and placement:
                self.assumed = Msg("assumed.placed", assumed=self.assumed, mapping=mapping, placement=placement)
        records = validate(raw, self.cases)
        if self.exercise.read_back is not None:  # the state the learner's call left, as the outputs compared
            for case, rec in zip(self.cases, records, strict=True):
                rec["outputs"] = self.exercise.read_back(case, rec["outputs"])
        return records


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


# ------------------------------------------------------------------------------------------------------
# validation of what comes back

_ERROR_FIELDS: dict[str, type | tuple[type, ...]] = {
    "type": str,
    "message": str,
    "line": (str, type(None)),
    "where": str,
}
_WHERES = {"construct", "load", "forward", "backward"}


def _expected_names(case: Case, params: list) -> set:
    names = {"repeat.out"}
    present = case.meta.get("present_names", ("keys", "values"))
    for i, call in enumerate(case.calls, start=1):
        names.add(f"step{i}.out")
        if call.train:  # interview mode: a dropout after the output projection was left out of this call
            names.add(f"step{i}.out_dropout")
        if call.args is not None:
            names |= {f"step{i}.lse", f"step{i}.tiled"}
        if call.tile_bound is not None:
            names.add(f"step{i}.{call.bound_label}")
        names |= {f"step{i}.{name}" for name, _ in call.state}
        if call.split_check:
            names.add(f"step{i}.split")
        ranks = call.ranks or 0  # a ring of processes: each rank's result and the chunks it received
        for r in range(ranks):
            names |= {f"rank{r}.out", f"rank{r}.lse", f"rank{r}.p2p"}
            names |= {f"rank{r}.recv{t}.{kv}" for t in range(1, ranks) for kv in "kv"}
        if call.use_cache is not None:
            names |= {f"step{i}.{present[0]}", f"step{i}.{present[1]}"}
        if call.grad is not None:
            names.add(f"step{i}.grad.x")
            names |= {f"step{i}.grad.{p}" for p in params}
    return names


def _clean_error(err) -> dict | None:
    if err is None:
        return None
    if not isinstance(err, dict):
        raise BadResult(Msg("bad.error"))
    clean = {}
    for key, kind in _ERROR_FIELDS.items():
        value = err.get(key)
        if not isinstance(value, kind):
            raise BadResult(Msg("bad.error_field", field=repr(key)))
        clean[key] = value[: errors.MAX_MESSAGE] if isinstance(value, str) else value
    if clean["where"] not in _WHERES:
        raise BadResult(Msg("bad.error_place"))
    with_texts(clean, err)
    clean["not_implemented"] = err.get("not_implemented") is True
    function = err.get("function")  # untrusted: compared with the contract's function names, or shown (a stub
    # inside a function the given code calls) only as an identifier
    clean["function"] = function[:100] if isinstance(function, str) else None
    clean["contract"] = err.get("contract") is True
    step = err.get("step", 1)
    clean["step"] = step if isinstance(step, int) and not isinstance(step, bool) else 1
    return clean


def validate(records, cases: list) -> list:
    """The learner's records reduced to the schema: one per case, plain float tensors or None under the
    expected names (anything else becomes a description string), bounded sizes. Raises BadResult."""
    if not isinstance(records, list) or len(records) != len(cases):
        raise BadResult(Msg("bad.records"))
    clean = []
    for case, rec in zip(cases, records, strict=False):
        if not isinstance(rec, dict):
            raise BadResult(Msg("bad.record"))
        params = list(case.params)
        allowed = _expected_names(case, params)
        outputs = rec.get("outputs") or {}
        if not isinstance(outputs, dict):
            raise BadResult(Msg("bad.outputs"))
        kept: dict[str, torch.Tensor | str | None] = {}  # a tensor, None, or what came instead described
        for name, value in outputs.items():
            if name not in allowed:
                continue
            if value is None:
                kept[name] = None
            elif type(value) is torch.Tensor and value.is_floating_point() and value.numel() <= MAX_ELEMENTS:
                kept[name] = value.detach().to(torch.float64)
            elif isinstance(value, torch.Tensor):
                kept[name] = f"<tensor of dtype {str(value.dtype).replace('torch.', '')}>"
            else:
                kept[name] = str(value)[:80]
        calls = rec.get("calls") or []
        if not isinstance(calls, list) or not all(isinstance(c, str) for c in calls):
            raise BadResult(Msg("bad.calls"))
        clean.append(
            {
                "case": case.name,
                "error": _clean_error(rec.get("error")),
                "outputs": kept,
                "calls": [c[:80] for c in calls[:20]],
            }
        )
    return clean


# ------------------------------------------------------------------------------------------------------
# in-process (the notebooks' check): the learner's own kernel, nothing to isolate


def run_in_process(cls, graded: Graded, learner_files: set | None = None) -> list:
    """Run the learner's class here (the notebook's kernel) and return validated records. The learner gets copies
    of the plan's tensors, as the sandbox's child does: a module that writes into the cache it is handed (as Hugging
    Face's caches do) must not change the grader's own cases, whose reference is computed afterwards."""
    the_plan = graded.plan()
    records = graded.resolve(running.run_exercise(cls, copy.deepcopy(the_plan), learner_files))
    recorder = CallRecorder()  # one more forward, watched for calls into course_utils' reference code
    first = copy.deepcopy({**the_plan["cases"][0], "calls": the_plan["cases"][0]["calls"][:1]})
    with recorder:
        if the_plan.get("function"):
            running.run_function_case(cls, first)
        else:
            running.run_case(cls, the_plan["ctor_args"][0], first)
    for rec in records:
        rec["calls"] = sorted(set(rec["calls"]) | recorder.calls)
    return records


def chosen_class(cls, graded: Graded):
    """(the class to grade, why none): ``check("id", globals())`` takes from the namespace what the file grader
    takes from the same cells (``finding.class_in``); a class, a function or None is itself."""
    if not isinstance(cls, Mapping):
        return cls, None
    ex = graded.exercise
    chosen, found = finding.class_in(dict(cls), graded.plan())
    if chosen is None and found and ex.interview:
        return None, Msg("no_class_fits", name=ex.contract, found=", ".join(found), exercise=ex.id)
    return chosen, None  # None: not implemented yet (none of the learner's classes answers this exercise)


def class_delegation(cls, exercise: Exercise) -> str | None:
    """Why ``cls`` is course_utils' reference (or, in interview mode, nn.MultiheadAttention), else None."""
    if not isinstance(cls, type):  # a function exercise
        module = getattr(cls, "__module__", "") or ""
        if module.startswith("course_utils") and not module.startswith("course_utils.grade"):
            return Msg("delegation.function", name=getattr(cls, "__name__", "the function"), module=module)
        return None
    for base in cls.__mro__:
        module = getattr(base, "__module__", "") or ""
        if module.startswith("course_utils") and not module.startswith("course_utils.grade"):
            return Msg("delegation.class", cls=cls.__name__, base=base.__name__)
        if base is nn.MultiheadAttention:
            return Msg("delegation.mha", cls=cls.__name__)
    forward = getattr(cls, "forward", None)
    fmod = getattr(forward, "__module__", "") or ""
    if fmod.startswith("course_utils") and not fmod.startswith("course_utils.grade"):
        return Msg("delegation.forward", cls=cls.__name__, module=fmod)
    return None
