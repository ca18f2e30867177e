"""The exercises, one module each. Every module here declares ``EXERCISE`` (a ``registry.Exercise``): its id,
kind, contract, case maker, expected outputs, mutants (whose diagnosis keys name their texts in ``messages``),
points and notebook. Adding an exercise = one new module here, its texts in ``messages``, and its notebook in
``solutions/`` (see ARCHITECTURE.md)."""

from __future__ import annotations

import importlib
import pkgutil

from ..registry import Exercise


def _declared() -> dict[str, Exercise]:
    found = [importlib.import_module(f"{__name__}.{info.name}").EXERCISE for info in pkgutil.iter_modules(__path__)]
    return {ex.id: ex for ex in sorted(found, key=lambda ex: ex.order)}


EXERCISES: dict[str, Exercise] = _declared()
IDS = tuple(EXERCISES)


def get(exercise: str) -> Exercise:
    """The declaration of ``exercise``; a clear error for an unknown id."""
    if exercise not in EXERCISES:
        raise ValueError(f"unknown exercise {exercise!r}; known: {', '.join(EXERCISES)}")
    return EXERCISES[exercise]
