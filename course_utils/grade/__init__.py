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

from . import history
from .diagnose import total_checks, verdict
from .exercises import EXERCISES, get
from .messages import Msg
from .protocol import Graded, class_delegation, run_in_process
from .questions import answer, check_answers
from .specs import NOT_IMPLEMENTED
from .types import Result, new_seed

__all__ = ["EXERCISES", "Result", "answer", "check", "check_answers", "grade_class"]


def grade_class(exercise: str, cls, learner_files: set | None = None, refusals: list | None = None,
                seed: int | None = None) -> Result:
    """Grade the learner's class ``cls`` for ``exercise`` in this process; never raises for learner bugs."""
    ex = get(exercise)
    graded = Graded(exercise, seed)
    if cls is None:  # the learner has not defined the class yet (check("id", globals().get("Name")))
        return Result(exercise, False, 0.0, 0, total_checks(graded.cases), NOT_IMPLEMENTED,
                      [Msg("not_implemented.define_" + ex.kind, name=ex.contract)])
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
        result = ex.model.grade_function(exercise, cls, seed=new_seed())
    else:
        result = grade_class(exercise, cls)
    history.record(result)  # the learner's own progress, on this machine only (make progress)
    if not quiet:
        print(result.report(lang))
    return result
