"""The self-check cell: ``check("mha", MultiHeadAttention)`` grades the learner's class (or function) in the
notebook's kernel and prints a pass line or a diagnosis naming the mistake; ``grade_class`` returns the Result
without printing."""

from __future__ import annotations

from typing import Any

from . import history
from .diagnose import NOT_IMPLEMENTED
from .exercises import get
from .protocol import Graded, chosen, run_in_process
from .registry import Exercise
from .types import Result


def grade_class(
    exercise: str | Exercise,
    cls: Any,
    learner_files: set[str] | None = None,
    refusals: list[Any] | None = None,
    seed: int | None = None,
) -> Result:
    """Grade the learner's class (or function) ``cls`` for ``exercise`` in this process; never raises for learner
    bugs. ``cls`` may be a namespace (``globals()``): what to grade is then found in it as the file grader finds it."""
    ex = get(exercise)
    kind = ex.how
    graded = Graded(ex, seed)
    total = kind.total_checks(graded.cases)
    cls, none_fits = chosen(cls, graded)  # check("id", globals()): found as the file grader finds it
    if none_fits is not None:
        return Result(ex.id, False, 0.0, 0, total, "missing", [none_fits])
    if cls is None:  # the learner has not defined it yet (check("id", globals().get("Name")))
        return Result(ex.id, False, 0.0, 0, total, NOT_IMPLEMENTED, [kind.not_defined(ex)])
    unfit = kind.unfit(ex, cls)
    if unfit is not None:
        return Result(ex.id, False, 0.0, 0, total, "contract", [unfit])
    refusals = list(refusals or [])
    reason = kind.delegation(ex, cls)
    if reason is not None:
        refusals.append(reason)
    records = [] if refusals else run_in_process(cls, graded, learner_files)
    return graded.verdict(records, refusals)


def check(exercise: str, cls: Any, *, quiet: bool = False, lang: str | None = None) -> Result:
    """The self-check cell: prints a pass line or a diagnosis naming the mistake, returns the Result.
    ``lang``: 'en' or 'zh' (default: the course's current language, Chinese in the zh-CN notebooks)."""
    result = grade_class(get(exercise), cls)
    history.record(result)  # the learner's own progress, on this machine only (make progress)
    if not quiet:
        print(result.report(lang))
    return result
