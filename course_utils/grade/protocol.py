"""The grader's side of running a learner's code: the cases an exercise is graded on (drawn from a secret seed), the
plan sent to the child for them, the check of what comes back, and the verdict on it, each the exercise's kind's
(``kinds/``): nothing here names a kind or what its calls hold.

Nothing the learner's process returns is trusted: the kind's ``resolve`` keeps only what the plan's schema allows
(``records.validate``); the verdict then compares it with the reference computed here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .exercises import get
from .messages import Msg
from .records import BadResult as BadResult  # what a result outside the plan's schema raises
from .registry import Exercise
from .types import Result


class Graded:
    """The cases an exercise was graded on (``seed``: a fresh secret one when None), anything else its kind drew for
    them (``extra``), and what the grader assumed about the learner's code (``assumed``)."""

    def __init__(self, exercise: str | Exercise, seed: int | None = None):
        ex = get(exercise)
        self.exercise = ex
        self.kind = ex.how
        self.cases = ex.make_cases(seed)
        self.extra: dict[str, Any] = {}
        self.assumed: Msg | None = None
        self.kind.prepare(self, seed)

    def plan(self) -> dict:
        """What the child needs for this exercise (its kind's plan), and nothing else: no expected outputs, no seed."""
        return self.kind.plan(self)

    def resolve(self, raw) -> list:
        """The child's records, validated (raises BadResult), with ``cases`` switched to the ones they were run on."""
        return self.kind.resolve(self, raw)

    def verdict(self, records: list, refusals: list | None = None) -> Result:
        return self.kind.verdict(self.exercise, records, self.cases, refusals, self.assumed)

    def failure(self, key: str, message) -> Result:
        return self.kind.failure(self.exercise, key, message, self.cases)


def verdict(exercise: str | Exercise, records: list, cases: list, refusals: list | None = None, assumed=None) -> Result:
    """The verdict of ``exercise`` on validated ``records`` (one per case), its kind's."""
    ex = get(exercise)
    return ex.how.verdict(ex, records, cases, refusals, assumed)


def failure(exercise: str | Exercise, key: str, message, cases: list | None = None) -> Result:
    """A result for a submission that could not be run at all (syntax error, timeout, missing class...)."""
    ex = get(exercise)
    return ex.how.failure(ex, key, message, cases)


def run_in_process(target: Any, graded: Graded, learner_files: set | None = None) -> list:
    """Run the learner's code here (the notebook's kernel) as its kind runs it; validated records."""
    return graded.kind.run_in_process(target, graded, learner_files)


def chosen(target: Any, graded: Graded) -> tuple[Any, Msg | None]:
    """(what to grade, why none): ``check("id", globals())`` takes from the namespace what the file grader takes from
    the same cells (the kind's ``find``); a class, a function or None is itself."""
    if not isinstance(target, Mapping):
        return target, None
    return graded.kind.find(dict(target), graded)
