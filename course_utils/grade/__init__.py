"""Autograder for the course's exercises: ``check("mha", MultiHeadAttention)`` in a notebook, or
``python -m course_utils.grade`` for files and folders of submissions.

The verdict names the misconception: the grader runs known-wrong variants of the reference (mutants)
on the same parameters and inputs, and reports the one the learner's outputs reproduce.
"""
from __future__ import annotations

from . import specs, specs_capstone
from .diagnose import Result, total_checks, verdict
from .protocol import class_delegation, run_exercise
from .specs import EXERCISES

__all__ = ["EXERCISES", "Result", "check", "grade_class"]


def grade_class(exercise: str, cls, learner_files: set | None = None, refusals: list | None = None) -> Result:
    """Grade the learner's class ``cls`` for ``exercise`` in this process; never raises for learner bugs."""
    if exercise not in EXERCISES:
        raise ValueError(f"unknown exercise {exercise!r}; known: {', '.join(EXERCISES)}")
    if cls is None:  # the learner has not defined the class yet (check("id", globals().get("Name")))
        return Result(exercise, False, 0.0, 0, total_checks(specs.make_cases(exercise)), specs.NOT_IMPLEMENTED,
                      [f"not implemented yet: define class {specs.CONTRACT_CLASS[exercise]}"])
    refusals = list(refusals or [])
    reason = class_delegation(cls, exercise)
    if reason and ("course_utils" in reason or exercise in specs.INTERVIEW):
        refusals.append(reason)
    cases = specs.make_cases(exercise)
    records = [] if refusals else run_exercise(cls, exercise, cases, learner_files)
    return verdict(exercise, records, cases, refusals)


def check(exercise: str, cls, *, quiet: bool = False) -> Result:
    """The self-check cell: prints a pass line or a diagnosis naming the mistake, returns the Result."""
    if exercise in specs_capstone.EXERCISES:  # capstone hook: a function exercise (cls is the function)
        result = specs_capstone.grade_function(exercise, cls)
    else:
        result = grade_class(exercise, cls)
    if not quiet:
        print(result.report())
    return result
