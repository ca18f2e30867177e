"""Each exercise's points, as its check cell is worth in nbgrader (the solutions' nbgrader metadata:
tests/test_grader_strangers.py checks that they agree), so that grades.csv counts what nbgrader counts."""
from __future__ import annotations

from .questions import QUESTIONS

POINTS = {"self_attention": 2, "causal": 2, "wrapper": 1, "mha": 3, "kv_cache": 3, "gqa": 3, "mha_interview": 5,
          "rope": 3, "online_softmax": 3, "mla": 3, "induction_head": 3}
QUESTION_POINTS = 3  # interview mode's numbers follow-up: one cell for all its questions


def points(exercise: str) -> float:
    """The points an exercise (or one of interview mode's questions, 'question <id>') is worth."""
    if exercise in POINTS:
        return POINTS[exercise]
    if str(exercise).startswith("question "):
        return QUESTION_POINTS / len(QUESTIONS)
    return 1
