"""The exercises, one module each. Every module here declares ``EXERCISE`` (a ``registry.Exercise``: its id,
kind, contract, case maker, expected outputs, mutants, points and notebook) and ``TEXTS`` (its mistakes' and case
titles' words in English and Chinese, key -> (English, Chinese): the module's own data, read where they are said).
Adding an exercise = one new module here, its notebook in ``solutions/`` and its fixture (see CONTRIBUTING.md)."""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import replace
from functools import cache

from ..diagnose import VERDICT_MISTAKES
from ..messages import Msg
from ..registry import Exercise


def _declared() -> dict[str, Exercise]:
    """Every module's ``EXERCISE``, in the order of grades.csv, each knowing its module (where its texts are)."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        found.append(replace(module.EXERCISE, home=module.__name__))
    return {ex.id: ex for ex in sorted(found, key=lambda ex: ex.order)}


EXERCISES: dict[str, Exercise] = _declared()
IDS = tuple(EXERCISES)


def get(exercise: str | Exercise) -> Exercise:
    """The declaration of ``exercise`` (an id, or the declaration itself); a clear error for an unknown id."""
    if isinstance(exercise, Exercise):
        return exercise
    if exercise not in EXERCISES:
        raise ValueError(f"unknown exercise {exercise!r}; known: {', '.join(EXERCISES)}")
    return EXERCISES[exercise]


@cache
def mistake_said(key: str) -> Msg | None:
    """The words of the mistake ``key`` (its text ``mutant.<key>``, as the exercise, its kind or the verdict that
    names it says it), or None when no exercise names such a mistake."""
    for ex in EXERCISES.values():
        mutants = ex.mutants() if ex.mutants is not None else []
        for said in [m.message for m in mutants] + [m.message for m in ex.how.mistakes + VERDICT_MISTAKES]:
            if isinstance(said, Msg) and said.key == "mutant." + key:
                return said
    return None
