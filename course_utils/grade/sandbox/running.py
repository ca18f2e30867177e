"""Runs one exercise's plan on the learner's code, the way the plan's kind calls it (``kinds/``): the same in the
sandboxed child (``harness``) and in the notebook's kernel (the grader's ``protocol.run_in_process``)."""

from __future__ import annotations

from typing import Any

from . import kinds


def run_exercise(target: Any, plan: dict, learner_files: set | None = None) -> list[dict]:
    """Records for every case of one exercise's ``plan``, run by its kind; never raises for a learner's bug."""
    return kinds.get(plan["kind"]).run(target, plan, learner_files)
