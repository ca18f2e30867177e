"""What an exercise is, for the grader: one ``Exercise`` declared in a module of its own in ``grade/exercises/``.
Everything that differs between exercises is a field here; the runner, the verdict, the batch, the source reading
and the messages look an exercise up by its id and never branch on the id itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from .types import Case, Mutant, new_seed

KINDS = ("class", "function", "model")


@dataclass(frozen=True)
class Exercise:
    """One exercise. ``kind``: "class" (the learner's nn.Module runs on the grader's cases), "function" (the
    learner's function is called on them), "model" (the learner's function is called on trained models: the
    capstone, graded by ``model``, a module with make_cases, grade_function, grade_answers and failure)."""

    id: str  # check("<id>", ...), the column in grades.csv, the diagnosis keys' exercise
    order: int  # the column's place in grades.csv
    notebook: str  # solutions/<notebook>.ipynb (and exercises/, and the zh-CN twins)
    points: int  # nbgrader points of its self-check cell
    kind: str
    contract: str  # the class or function the learner defines
    args: tuple[str, ...] = ()  # the constructor's (class) or the call's (function) arguments, in order
    cases: Callable[[torch.Generator], list[Case]] | None = None
    expected: Callable[[Case, Any], dict[str, Any]] | None = None  # {output name: tensor or None}; raises where
    # the variant crashes
    correct: Any = None  # the correct variant of the reference computation
    mutants: Callable[[], list[Mutant]] | None = None  # most specific first (texts: the module's TEXTS)
    interview: bool = False  # interview mode: no course_utils, no SDPA, other dialects accepted
    square_cases: Callable[[torch.Generator], list[Case]] | None = None  # interview mode: cases for a class in
    # another dialect (d_in = d_out)
    model: Any = None  # kind "model": the module that grades it
    read_back: Callable[[Any, dict[str, Any]], dict[str, Any]] | None = None  # (case, validated outputs) -> the
    # outputs compared: a function's state (Call.state) read as the contract sees it, not byte for byte

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"exercise {self.id!r}: kind {self.kind!r} is not one of {KINDS}")

    def make_cases(self, seed: int | None = None) -> list[Any]:
        """The cases drawn from ``seed`` (a fresh secret one when None): Case, or the capstone's ModelCase."""
        if self.kind == "model":
            return list(self.model.make_cases(self.id, seed))
        assert self.cases is not None, self.id
        return self.cases(torch.Generator().manual_seed(new_seed() if seed is None else seed))

    def make_square_cases(self, seed: int | None = None) -> list[Case]:
        assert self.square_cases is not None, self.id
        return self.square_cases(torch.Generator().manual_seed(new_seed() if seed is None else seed))
