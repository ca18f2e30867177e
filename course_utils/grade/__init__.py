"""Autograder for the course's exercises: ``check("mha", MultiHeadAttention)`` in a notebook, or
``python -m course_utils.grade`` for files and folders of submissions.

Each run draws its cases from a fresh secret seed. The learner's class runs on them (in the notebook's kernel
for ``check``, in a sandboxed process for files), and only its raw outputs come back; the verdict is computed
here: the reference on the same parameters and inputs, and known-wrong variants of it (mutants) to name the
misconception whose outputs the learner's reproduce.

The verdict speaks English or Chinese (``lang="zh"``, ``--lang zh``; by default the course's current language,
which is Chinese in the notebooks of the ``zh-CN`` folders: see ``course_utils.lang``); the texts are in
``messages``.
"""
from __future__ import annotations

from .diagnose import total_checks, verdict
from .exercises import EXERCISES, get
from .messages import Msg
from .protocol import Graded, chosen_class, class_delegation, run_in_process
from .questions import answer, check_answers
from .specs import NOT_IMPLEMENTED
from .types import Result, new_seed

__all__ = ["EXERCISES", "Result", "answer", "check", "check_answers", "grade_class"]


def grade_class(exercise: str, cls, learner_files: set | None = None, refusals: list | None = None,
                seed: int | None = None) -> Result:
    """Grade the learner's class ``cls`` for ``exercise`` in this process; never raises for learner bugs.
    ``cls`` may be a namespace (``globals()``): the class is then found in it as the file grader finds it."""
    ex = get(exercise)
    graded = Graded(exercise, seed)
    cls, none_fits = chosen_class(cls, graded)  # check("id", globals()): the class found as the file grader finds it
    if none_fits is not None:
        return Result(exercise, False, 0.0, 0, total_checks(graded.cases), "missing", [none_fits])
    if cls is None:  # the learner has not defined the class yet (check("id", globals().get("Name")))
        return Result(exercise, False, 0.0, 0, total_checks(graded.cases), NOT_IMPLEMENTED,
                      [Msg("not_implemented.define_" + ("module" if ex.interview else ex.kind), name=ex.contract)])
    refusals = list(refusals or [])
    reason = class_delegation(cls, exercise)
    if reason and ("course_utils" in reason or ex.interview):
        refusals.append(reason)
    records = [] if refusals else run_in_process(cls, graded, learner_files)
    return verdict(exercise, records, graded.cases, refusals, assumed=graded.assumed)


def check(exercise: str, cls, *, quiet: bool = False, lang: str | None = None) -> Result:
    """The self-check cell: prints a pass line or a diagnosis naming the mistake, returns the Result.
    ``lang``: 'en' or 'zh' (default: the course's current language, Chinese in the zh-CN notebooks)."""
    ex = get(exercise)
    if ex.kind == "model":  # the capstone: a function graded on trained models (cls is the function)
        function = cls.get(ex.contract) if isinstance(cls, dict) else cls  # check("id", globals())
        result = ex.model.grade_function(exercise, function, seed=new_seed())
    else:
        result = grade_class(exercise, cls)
    if not quiet:
        print(result.report(lang))
    return result
