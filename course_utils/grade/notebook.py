"""The self-check cell: ``check("mha", MultiHeadAttention)`` grades the learner's class (or function) in the
notebook's kernel and prints a pass line or a diagnosis naming the mistake; ``grade_class`` returns the Result
without printing."""

from __future__ import annotations

from typing import Any

from . import history
from .diagnose import NOT_IMPLEMENTED, total_checks, verdict
from .exercises import get
from .messages import Msg
from .protocol import Graded, chosen_class, class_delegation, run_in_process
from .registry import Exercise
from .types import Result, new_seed


def grade_class(
    exercise: str | Exercise,
    cls: Any,
    learner_files: set[str] | None = None,
    refusals: list[Any] | None = None,
    seed: int | None = None,
) -> Result:
    """Grade the learner's class ``cls`` for ``exercise`` in this process; never raises for learner bugs.
    ``cls`` may be a namespace (``globals()``): the class is then found in it as the file grader finds it."""
    ex = get(exercise)
    graded = Graded(ex, seed)
    cls, none_fits = chosen_class(cls, graded)  # check("id", globals()): the class found as the file grader finds it
    if none_fits is not None:
        return Result(ex.id, False, 0.0, 0, total_checks(graded.cases), "missing", [none_fits])
    if cls is None:  # the learner has not defined the class yet (check("id", globals().get("Name")))
        kind = "module" if ex.interview else ex.kind
        return Result(
            ex.id,
            False,
            0.0,
            0,
            total_checks(graded.cases),
            NOT_IMPLEMENTED,
            [Msg("not_implemented.define_" + kind, name=ex.contract)],
        )
    refusals = list(refusals or [])
    reason = class_delegation(cls, ex)
    if reason and ("course_utils" in reason or ex.interview):
        refusals.append(reason)
    records = [] if refusals else run_in_process(cls, graded, learner_files)
    return verdict(ex, records, graded.cases, refusals, assumed=graded.assumed)


def check(exercise: str, cls: Any, *, quiet: bool = False, lang: str | None = None) -> Result:
    """The self-check cell: prints a pass line or a diagnosis naming the mistake, returns the Result.
    ``lang``: 'en' or 'zh' (default: the course's current language, Chinese in the zh-CN notebooks)."""
    ex = get(exercise)
    if ex.kind == "model":  # the capstone: a function graded on trained models (cls is the function)
        function = cls.get(ex.contract) if isinstance(cls, dict) else cls  # check("id", globals())
        result: Result = ex.model.grade_function(ex.id, function, seed=new_seed())
    else:
        result = grade_class(ex, cls)
    history.record(result)  # the learner's own progress, on this machine only (make progress)
    if not quiet:
        print(result.report(lang))
    return result
