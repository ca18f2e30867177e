"""The exercises, one module each. Every module here declares ``EXERCISE`` (a ``registry.Exercise``: its id,
kind, contract, case maker, expected outputs, mutants, points and notebook) and ``TEXTS`` (its mistakes' and case
titles' words in English and Chinese, added to the catalogue here). Adding an exercise = one new module here, its
notebook in ``solutions/`` and its fixture (see ARCHITECTURE.md)."""

from __future__ import annotations

import importlib
import pkgutil

from ..messages import add_texts
from ..registry import Exercise


def _declared() -> dict[str, Exercise]:
    """Every module's ``EXERCISE``, in the order of grades.csv; its ``TEXTS`` join the catalogue on the way."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        add_texts(getattr(module, "TEXTS", {}))
        found.append(module.EXERCISE)
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
