"""Each exercise's points, as its check cell is worth in nbgrader (declared once, in the exercise's registry module;
tests/grade/test_limits_per_submission.py checks them against the solutions' nbgrader metadata), so that
grades.csv counts what nbgrader counts."""

from __future__ import annotations

from .exercises import EXERCISES
from .questions import QUESTIONS

QUESTION_POINTS = 3  # interview mode's numbers follow-up: one cell for all its questions


def points(exercise: str) -> float:
    """The points an exercise (or one of interview mode's questions, 'question <id>') is worth."""
    if exercise in EXERCISES:
        return EXERCISES[exercise].points
    if str(exercise).startswith("question "):
        return QUESTION_POINTS / len(QUESTIONS)
    return 1
