"""What an exercise is, for the grader: one ``Exercise`` declared in a module of its own in ``grade/exercises/``.
Everything that differs between exercises is a field here, and how its learner's code is called is its kind's
(``kinds/``, by name); the runner, the verdict, the batch, the source reading and the texts look an exercise up by
its id and never branch on the id itself."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

import torch

from . import kinds
from .messages import Msg, case_title, said_in
from .types import Mutant, new_seed


@dataclass(frozen=True)
class Exercise:
    """One exercise, graded the way its ``kind`` calls learner code (``kinds.get(kind)``: "module", "function",
    "ring", "kernel", "model"). Its texts (its mistakes', its cases' titles) are its module's ``TEXTS``."""

    id: str  # check("<id>", ...), the column in grades.csv, the diagnosis keys' exercise
    order: int  # the column's place in grades.csv
    notebook: str  # solutions/<notebook>.ipynb (and exercises/, and the zh-CN twins)
    points: int  # nbgrader points of its self-check cell
    kind: str
    contract: str  # the class or function the learner defines
    args: tuple[str, ...] = ()  # the constructor's (class) or the call's (function) arguments, in order
    cases: Callable[[Any], list[Any]] | None = None  # its cases, drawn from a generator (a model's: from a seed)
    expected: Callable[[Any, Any], Any] | None = None  # (case, variant) -> its outputs ({output name: tensor or
    # None}; a model's: its answer); raises where the variant crashes
    correct: Any = None  # the correct variant of the reference computation
    mutants: Callable[[], list[Mutant]] | None = None  # most specific first (texts: the module's TEXTS)
    interview: bool = False  # interview mode: no course_utils, no SDPA, other dialects accepted
    square_cases: Callable[[torch.Generator], list[Any]] | None = None  # interview mode: cases for a class in
    # another dialect (d_in = d_out)
    read_back: Callable[[Any, dict[str, Any]], dict[str, Any]] | None = None  # (case, validated outputs) -> the
    # outputs compared: a function's state (its call's ``state``) read as the contract sees it, not byte for byte
    imports: tuple[str, ...] = ()  # the course's modules its submissions may import (course_utils.<name>)
    withheld: dict[str, dict[str, str]] = field(default_factory=dict, compare=False)  # {file within course_utils:
    # {function: what to do instead}}: what its sandbox withholds of what it mounts
    home: str = field(default="", compare=False)  # the module that declares it (set where it is found)

    def __post_init__(self) -> None:
        kinds.get(self.kind)  # a clear error for an unknown kind

    @property
    def how(self) -> kinds.Kind:
        """Its kind: how its learner's code is called, checked and judged."""
        return kinds.get(self.kind)

    def make_cases(self, seed: int | None = None) -> list[Any]:
        """The cases drawn from ``seed`` (a fresh secret one when None)."""
        return self.how.make_cases(self, new_seed() if seed is None else seed)

    def make_square_cases(self, seed: int | None = None) -> list[Any]:
        assert self.square_cases is not None, self.id
        return self.square_cases(torch.Generator().manual_seed(new_seed() if seed is None else seed))

    @property
    def homes(self) -> list[str]:
        """The modules whose texts it says: its own, then those of the grader whose cases or mistakes it uses (the
        author's kit, another exercise whose cases it reuses), in the order its module names them."""
        module = sys.modules[self.home] if self.home else None
        if module is None:
            return []
        found = [self.home]
        for value in vars(module).values():
            home = value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", None)
            if isinstance(home, str) and home.startswith("course_utils.grade.") and home not in found:
                if isinstance(getattr(sys.modules.get(home), "TEXTS", None), dict):
                    found.append(home)
        return found

    def title(self, name: str) -> Msg | str:
        """A case's title in the learner's language (as it is where none is declared)."""
        return case_title(name, self.homes)

    def text(self, key: str, /, **args: Any) -> Msg:
        """Its text ``key`` (its module's)."""
        return said_in(self.home, key, **args)
