"""Autograder for the course's exercises: ``check("mha", MultiHeadAttention)`` in a notebook, or
``python -m course_utils.grade`` for files and folders of submissions.

Each run draws its cases from a fresh secret seed. The learner's class runs on them (in the notebook's kernel
for ``check``, in a sandboxed process for files), and only its raw outputs come back; the verdict is computed
here: the reference on the same parameters and inputs, and known-wrong variants of it (mutants) to name the
misconception whose outputs the learner's reproduce.

The verdict speaks English or Chinese (``lang="zh"``, ``--lang zh``; by default the course's current language,
which is Chinese in the notebooks of the ``zh-CN`` folders: see ``course_utils.lang``); the texts are in
``messages`` and in each exercise's module.

This file only re-exports, lazily: importing one module of the package (``course_utils.grade.limits``) does not
load the others.
"""

from __future__ import annotations

import importlib

# public name -> the module that defines it
_HOMES = {
    "check": "notebook",
    "grade_class": "notebook",
    "answer": "questions",
    "check_answers": "questions",
    "EXERCISES": "exercises",
    "Result": "types",
}
__all__ = ["EXERCISES", "Result", "answer", "check", "check_answers", "grade_class"]


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
