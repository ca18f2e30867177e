"""The model kind: the learner's function called on trained models the exercise builds (checkpoints of the course's
GPT), answering which head does something: ``fn(model) -> (layer, head)``. One check per model: the answer is the
exercise's ``expected(case, correct)``; a wrong answer is named when it is what one of the exercise's mutants answers
(a mutant's variant here: ``variant(case, answer) -> bool``) on every model. Its sandbox mounts the course's model
code (``reference/``, ``capstone/``), so it grades one exercise alone, with what the exercise withholds (the course's
own scoring) replaced by a refusal; in the notebook's kernel, calls into what is withheld are recorded and refused.

The capstone (exercise 11) is of this kind, its cases a ``ModelCase`` of its own (``name``, ``state``)."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

from ..diagnose import NOT_IMPLEMENTED
from ..messages import Msg
from ..records import BadResult, CallRecorder, with_texts
from ..sandbox.kinds import model as child
from ..types import Result
from . import Kind

# its texts, key -> (English, Chinese)
TEXTS: dict[str, tuple[str, str]] = {
    "model.not_a_pair": (
        "returned {answer}; the contract is a tuple (layer, head) of ints",
        "返回了 {answer}；接口约定要求返回由整数组成的元组 (layer, head)",
    ),
    "model.contract": (
        "contract: return a tuple (layer, head) of ints",
        "接口约定：返回由整数组成的元组 (layer, head)",
    ),
    "model.not_a_function": (
        "contract: {name} must be a function, got {type}",
        "接口约定：{name} 必须是函数，你给的是 {type}",
    ),
    "bad.model_records": ("wrong number of model records", "模型记录的数量不对"),
    "bad.model_record": ("a model record is not a mapping", "有一条模型记录不是字典"),
    "refusal.course_scoring": ("calls {call}, the course's own scoring", "调用了课程自带的打分函数 {call}"),
    "refused.capstone": (
        "no credit: compute the head scores yourself: {first}",
        "不得分：各个头的分数要你自己算：{first}",
    ),
}


class _Withheld(CallRecorder):
    """Records calls into what an exercise withholds (``{file within course_utils: {function: ...}}``) while the
    learner's function runs in the notebook's kernel."""

    def __init__(self, withheld: dict[str, dict[str, str]]):
        super().__init__()
        self.codes = {}
        for name, functions in withheld.items():
            module = importlib.import_module("course_utils." + name[: -len(".py")].replace("/", "."))
            for function in functions:
                # unwrap: @torch.no_grad() wraps a function in a generic decorator whose code every wrapped one shares
                code = inspect.unwrap(getattr(module, function)).__code__
                self.codes[code] = f"course_utils.{Path(name).stem}.{function}"

    def _profile(self, frame, event, arg):
        if event == "call" and frame.f_code in self.codes:
            self.calls.add(self.codes[frame.f_code])


def _pair(answer):
    return None if answer is None or isinstance(answer, str) else tuple(answer)


class Model(Kind):
    name = "model"
    word = "function"
    alone = True

    def make_cases(self, ex, seed):
        return ex.cases(seed)

    def plan(self, graded):
        ex = graded.exercise
        return {
            "kind": self.name,
            "exercise": ex.id,
            "contract": ex.contract,
            "checkpoints": [c.state for c in graded.cases],
        }

    def mounts(self, ex):
        return ("reference", "capstone"), dict(ex.withheld)

    def allowed_import(self, ex, name):
        parts = set(name.split("."))
        withheld = {function for functions in ex.withheld.values() for function in functions}
        return bool(parts & set(ex.imports)) and not parts & withheld

    def resolve(self, graded, raw):
        """Per model an answer ([layer, head] or a description) and an error; raises BadResult."""
        if not isinstance(raw, list) or len(raw) != len(graded.cases):
            raise BadResult(Msg("bad.model_records"))
        records = []
        for case, rec in zip(graded.cases, raw, strict=True):
            if not isinstance(rec, dict):
                raise BadResult(Msg("bad.model_record"))
            answer = rec.get("answer")
            if isinstance(answer, list) and len(answer) == 2 and all(type(v) is int for v in answer):
                answer = list(answer)
            elif answer is not None:
                answer = str(answer)[:80]
            err = rec.get("error")
            if err is not None:
                if not isinstance(err, dict):
                    raise BadResult(Msg("bad.error"))
                err = with_texts(
                    {
                        "type": str(err.get("type"))[:80],
                        "message": str(err.get("message"))[:1200],
                        "line": None if err.get("line") is None else str(err.get("line"))[:300],
                        "not_implemented": err.get("not_implemented") is True,
                        "where": "call",
                    },
                    err,
                )
            records.append({"case": case.name, "error": err, "answer": answer, "calls": []})
        return records

    def run_in_process(self, target: Any, graded: Any, learner_files: set | None = None) -> list[dict]:
        records = []
        for case in graded.cases:
            recorder = _Withheld(graded.exercise.withheld)
            with recorder:
                record: dict[str, Any] = child.run_on_model(target, case.state, learner_files, 0.0)
            if record["error"] is not None:
                record["error"] = with_texts(record["error"], record["error"])
            records.append({**record, "case": case.name, "calls": sorted(recorder.calls)})
        return records

    def total_checks(self, cases):
        return len(cases)

    def refusal(self, ex, call):
        return Msg("refusal.course_scoring", call=call)

    def refused(self, ex, refusals, total, assumed=None):
        messages = [Msg("refused.capstone", first=refusals[0])] + refusals[1:]
        return Result(ex.id, False, 0.0, 0, total, "delegates", messages)

    def verdict(self, ex, records, cases, refusals=None, assumed=None):
        """One check per model: the learner's (layer, head) is the exercise's answer for it. A wrong answer is named
        when it is a known mistake's on every model."""
        total = len(cases)
        refusals = self.refusals(ex, records, refusals)
        if refusals:
            return self.refused(ex, refusals, total)
        errors = [r["error"] for r in records if r["error"] is not None]
        if any(e["not_implemented"] for e in errors):
            return Result(
                ex.id, False, 0.0, 0, total, NOT_IMPLEMENTED, [Msg("not_implemented.write", name=ex.contract)]
            )
        reasons = []
        for case, rec in zip(cases, records, strict=False):
            if rec["error"] is not None:
                e = rec["error"]
                line = e["line"]
                reasons.append(
                    (
                        case.name,
                        Msg("error.plain_line", type=e["type"], message=e["message"], line=line)
                        if line
                        else Msg("error.plain", type=e["type"], message=e["message"]),
                    )
                )
            elif isinstance(rec["answer"], str):
                reasons.append((case.name, Msg("model.not_a_pair", answer=rec["answer"])))
            elif _pair(rec["answer"]) != ex.expected(case, ex.correct):
                reasons.append((case.name, ex.text("answer.wrong", answer=str(_pair(rec["answer"])))))
        passed = total - len(reasons)
        if not reasons:
            return Result(ex.id, True, 1.0, total, total, None, [])
        score = round(passed / total, 3)
        details = [Msg("detail.case", case=ex.title(name), why=why) for name, why in reasons]
        answers = [_pair(r["answer"]) if r["error"] is None else None for r in records]
        for mutant in ex.mutants():
            if all(mutant.variant(c, a) for a, c in zip(answers, cases, strict=False)):
                return Result(ex.id, False, score, passed, total, mutant.key, [mutant.message] + details)
        if errors:
            return Result(ex.id, False, score, passed, total, "exception", [details[0]] + details[1:])
        if any(isinstance(r["answer"], str) for r in records):
            return Result(ex.id, False, score, passed, total, "contract", [Msg("model.contract")] + details)
        return Result(ex.id, False, score, passed, total, "wrong_head", [ex.text("answer.unexplained")] + details)

    def find(self, namespace, graded):
        return namespace.get(graded.exercise.contract), None

    def unfit(self, ex, target):
        if callable(target):
            return None
        return Msg("model.not_a_function", name=ex.contract, type=type(target).__name__)

    def delegation(self, ex, target):
        return None  # what it calls of the course is recorded while it runs


KIND = Model()
