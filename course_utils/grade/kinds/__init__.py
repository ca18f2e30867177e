"""The kinds of exercise: the ways the grader calls a learner's code, one module per kind, each declaring ``KIND``
and found by its name (``get("ring")``), as Hugging Face finds an attention function by the name a config gives.

A kind owns everything about its way of calling: the type of its calls (``Call``), planning a case for the child,
which outputs come back and how a verdict names them, its own checks (a module's training mode, a function's state
read back, a ring's ranks), what its sandbox needs (an environment, a model's code), and the child's side of it,
``sandbox/kinds/<name>.py``. An exercise declares its kind by name; the rest of the grader (types, protocol,
diagnose, running, the jail) asks the kind and never names one.

``Kind`` below is the base every kind builds on: an exercise graded on outputs compared with a reference computation,
the verdict ``diagnose.judge``. Adding a kind: a module here with ``KIND = YourKind()``, its child's side in
``sandbox/kinds/`` under the same name, and their tests (ARCHITECTURE.md)."""

from __future__ import annotations

import copy
import importlib
import pkgutil
from dataclasses import fields
from typing import Any

import torch

from .. import diagnose
from ..messages import Msg, said_in
from ..records import CallRecorder, validate
from ..sandbox import kinds as child_kinds
from ..sandbox import running
from ..sandbox import texts as child_texts
from ..sandbox.finding import class_in
from ..types import Case, Result

# what every kind says, key -> (English, Chinese)
TEXTS: dict[str, tuple[str, str]] = {
    "delegation.function": ("{name} is course_utils' own ({module})", "{name} 是 course_utils 自带的实现（{module}）"),
}


def plan_call(call: Any) -> dict[str, Any]:
    """A call as the child reads it: its fields, by name (a kind's ``Call`` is a dataclass)."""
    return {f.name: getattr(call, f.name) for f in fields(call)}


class Kind:
    """A way of calling the learner's code. ``word``: what the contract names, a "class" or a "function"; ``env``: what
    its sandbox's environment adds; ``alone``: graded in a sandbox of its own (what it mounts reaches no other
    exercise); ``mistakes``: the mistakes its own checks name."""

    name = ""
    word = "class"
    env: dict[str, str] = {}
    alone = False
    mistakes: tuple = ()
    Words = diagnose.Words

    # ---------------------------------------------------------------------------------- the cases and the plan

    def make_cases(self, ex, seed: int) -> list:
        """The exercise's cases drawn from ``seed``."""
        return ex.cases(torch.Generator().manual_seed(seed))

    def prepare(self, graded, seed: int | None) -> None:
        """Anything else this kind draws for a grading (``graded``: protocol.Graded): interview mode's square cases."""

    def plan(self, graded) -> dict[str, Any]:
        """What the child needs for one exercise, and nothing else: no expected outputs, no seed."""
        ex = graded.exercise
        return {
            "kind": self.name,
            "exercise": ex.id,
            "contract": ex.contract,
            "cases": [self.plan_case(case) for case in graded.cases],
        }

    def plan_case(self, case: Case) -> dict[str, Any]:
        return {"name": case.name, "params": case.params, "calls": [plan_call(call) for call in case.calls]}

    def mounts(self, ex) -> tuple[tuple[str, ...], dict[str, dict[str, str]]]:
        """(the course's subpackages its sandbox mounts, their functions withheld): none."""
        return (), {}

    # ---------------------------------------------------------------------------------- what comes back

    def expected_names(self, case: Case) -> set[str]:
        """The outputs the child may send for ``case``: each call's ``step<i>.out`` and the eval-mode repeat."""
        return {"repeat.out"} | {f"step{i}.out" for i in range(1, len(case.calls) + 1)}

    def resolve(self, graded, raw) -> list[dict]:
        """The child's records for ``graded``, validated (raises records.BadResult), with the state the learner's
        call left read as the contract sees it (the exercise's ``read_back``)."""
        records = validate(raw, graded.cases, self.expected_names)
        if graded.exercise.read_back is not None:
            for case, rec in zip(graded.cases, records, strict=True):
                rec["outputs"] = graded.exercise.read_back(case, rec["outputs"])
        return records

    def child(self) -> child_kinds.Kind:
        """This kind's side in the child (``sandbox/kinds/``)."""
        return child_kinds.get(self.name)

    def run_in_process(self, target: Any, graded, learner_files: set | None = None) -> list[dict]:
        """Run the learner's code here (the notebook's kernel) and return validated records. The learner gets copies
        of the plan's tensors, as the sandbox's child does: code that writes into what it is handed (a cache, a block
        pool) must not change the grader's own cases, whose reference is computed afterwards. One more call, watched
        for calls into course_utils' reference code, adds what it called."""
        plan = graded.plan()
        records = graded.resolve(running.run_exercise(target, copy.deepcopy(plan), learner_files))
        recorder = CallRecorder()
        watched = copy.deepcopy(self.watched(plan))
        with recorder:
            running.run_exercise(target, watched, None)
        for rec in records:
            rec["calls"] = sorted(set(rec["calls"]) | recorder.calls)
        return records

    def watched(self, plan: dict) -> dict:
        """The plan of the call ``run_in_process`` watches: the first case's first call."""
        first = plan["cases"][0]
        return {**plan, "cases": [{**first, "calls": first["calls"][:1]}]}

    # ---------------------------------------------------------------------------------- the verdict

    def words(self, ex, case: Case) -> diagnose.Words:
        """How the verdict names ``case``'s outputs."""
        return self.Words(ex, case)

    def single(self, case: Case) -> bool:
        """Whether ``case``'s outputs are named without their call (one call)."""
        return len(case.calls) == 1

    def check(self, case: Case, outputs: dict) -> tuple[bool, tuple[str, Any] | None]:
        """This kind's own check of outputs that matched the reference: (whether ``case`` has one, (key, message) of
        the problem it found or None)."""
        return False, None

    def called(self, ex, case: Case) -> str:
        """The function of the contract ``case`` calls."""
        return ex.contract

    def total_checks(self, cases: list) -> int:
        """One check per case, plus one: the learner's code is deterministic in eval mode."""
        return len(cases) + 1

    def refusals(self, ex, records: list, given: list | None) -> list:
        """Why no credit: ``given`` (the source's imports, a class that is the course's), and calls the records say
        the learner's code made into course_utils' reference."""
        refusals = list(given or [])
        for rec in records:
            refusals += [self.refusal(ex, call) for call in rec.get("calls", [])]
        return list(dict.fromkeys(r for r in refusals if r is not None))

    def refusal(self, ex, call: str) -> Msg | None:
        """Why ``call`` (a record's) gets no credit, or None."""
        return Msg("refusal.calls_course", call=call) if call.startswith("course_utils") else None

    def refused(self, ex, refusals: list, total: int, assumed=None) -> Result:
        messages = [Msg("refused.delegates", first=refusals[0])] + refusals[1:]
        return Result(ex.id, False, 0.0, 0, total, "delegates", messages, assumed)

    def verdict(self, ex, records: list, cases: list, refusals: list | None = None, assumed=None) -> Result:
        return diagnose.judge(ex, self, records, cases, refusals, assumed)

    def failure(self, ex, key: str, message, cases: list | None = None) -> Result:
        """A result for a submission that could not be run at all (syntax error, timeout, missing class...)."""
        total = self.total_checks(self.make_cases(ex, 0) if cases is None else cases)
        return Result(ex.id, False, 0.0, 0, total, key, [message])

    # ---------------------------------------------------------------------------------- in the notebook's kernel

    def find(self, namespace: dict, graded) -> tuple[Any, Msg | None]:
        """(what ``check("id", globals())`` grades, why none fits): found as the file grader finds it."""
        ex = graded.exercise
        child = self.child()
        chosen, found = class_in(
            namespace,
            ex.contract,
            lambda cls: child.try_first(cls, graded.plan()),
            interview=ex.interview,
            function=self.word == "function",
        )
        if chosen is None and found and ex.interview:
            why = said_in(
                child_texts.__name__, "no_class_fits", name=ex.contract, found=", ".join(found), exercise=ex.id
            )
            return None, why
        return chosen, None  # None: not implemented yet (none of the learner's classes answers this exercise)

    def unfit(self, ex, target: Any) -> Msg | None:
        """Why ``target`` cannot be called at all the way this kind calls (checked before any case), else None."""
        return None

    def not_defined(self, ex) -> Msg:
        """What a learner who has not defined the contract yet is told."""
        return Msg("not_implemented.define_function", name=ex.contract)

    def delegation(self, ex, target: Any) -> Msg | None:
        """Why ``target`` is no answer of the learner's own (it is the course's reference), else None."""
        module = getattr(target, "__module__", "") or ""
        if module.startswith("course_utils") and not module.startswith("course_utils.grade"):
            return Msg("delegation.function", name=getattr(target, "__name__", "the function"), module=module)
        return None

    def allowed_import(self, ex, name: str) -> bool:
        """Whether a submission may import ``name`` of course_utils (its source's imports are refused otherwise)."""
        return False


def _declared() -> dict[str, Kind]:
    found = {}
    for info in pkgutil.iter_modules(__path__):
        kind = importlib.import_module(f"{__name__}.{info.name}").KIND
        found[kind.name] = kind
    return found


KINDS: dict[str, Kind] = _declared()


def get(name: str) -> Kind:
    """The kind called ``name``; a clear error for an unknown one."""
    if name not in KINDS:
        raise ValueError(f"unknown kind {name!r}; known: {', '.join(KINDS)}")
    return KINDS[name]
