"""The grader's shared types: a case, a mistake and its mutant, a result. They import nothing of the grader but its
texts, so that every layer above can use them (see ARCHITECTURE.md); what a call holds is its kind's (``kinds/``)."""

from __future__ import annotations

import secrets
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from .escape import one_line
from .messages import Msg, resolve, said_in, text


def new_seed() -> int:
    """A fresh secret seed: the learner's code cannot know the cases in advance."""
    return secrets.randbits(62)


@dataclass(frozen=True)
class Mutant:
    key: str
    message: str
    variant: object  # the flags of one reference computation (heads.Variant, an exercise's own *Variant), or what the
    # exercise's kind compares instead (the capstone's: which (layer, head) the mistake answers)
    outputs_only: bool = False  # match on the outputs alone (a cache kept inside the module returns anything)
    paired: bool = True  # also tried two at a time with the others (diagnose.mutant_pairs)


def _declaring_module() -> str:
    """The module whose code declares a Mistake (the frame above the dataclass's __init__): its TEXTS say it."""
    return str(sys._getframe(2).f_globals["__name__"])


@dataclass(frozen=True)
class Mistake:
    """A misconception: its diagnosis ``key`` (what grades.csv and the tests name) and its text, ``mutant.<text or
    key>`` in the ``TEXTS`` of the module that declares it (``home``); ``text`` tells two wordings of one diagnosis
    apart. Another exercise that makes the same mistake imports this one, and so says it in the same words."""

    key: str
    text: str | None = None
    home: str = field(default_factory=_declaring_module, compare=False)

    @property
    def text_key(self) -> str:
        return "mutant." + (self.text or self.key)

    @property
    def message(self) -> Msg:
        return said_in(self.home, self.text_key)


def mutant(mistake: Mistake, variant: object, outputs_only: bool = False, paired: bool = True) -> Mutant:
    """The ``mistake`` made by the reference computation with flags ``variant``. ``outputs_only``: matched on the
    outputs alone (a cache kept inside the module returns anything). ``paired=False``: named alone, not tried two at
    a time with the others (rarer mistakes, whose pairs would multiply the grader's work)."""
    return Mutant(mistake.key, mistake.message, variant, outputs_only, paired)


@dataclass
class Case:
    """One configuration of an exercise: its settings (a module's constructor arguments, a function's sizes), its
    parameters by name (a module's), and the calls to make, each of its kind's own type (``kinds/``)."""

    name: str
    ctor: dict[str, Any]
    params: dict[str, torch.Tensor]
    calls: list[Any]
    meta: dict[str, Any] = field(default_factory=dict)


class NoGradient(Exception):
    """The reference variant's output carries no gradient (the learner's forward ran under no_grad)."""

    where = "backward"


@dataclass
class Result:
    """A grading result; truthy when every check passed."""

    exercise: str
    passed: bool
    score: float
    checks_passed: int
    checks_total: int
    diagnosis: str | None = None  # a key such as 'scale_d_out', 'not_implemented', 'exception', ...
    messages: list[Any] = field(default_factory=list)  # texts (messages.Msg): English as str, render(lang) for others
    assumed: str | None = None  # interview mode: the dialect and mask convention the grader assumed

    def __bool__(self) -> bool:
        return self.passed

    @property
    def summary(self) -> str:
        """The first line of the report, in the course's current language (``headline(lang)`` for another)."""
        return self.headline()

    def headline(self, lang: str | None = None) -> str:
        """One line, always: learner text inside the first message (an exception's class) cannot break it."""
        if self.passed:
            return Msg("result.passed", exercise=self.exercise, total=self.checks_total).render(lang)
        first = self.messages[0] if self.messages else Msg("result.no_reason")
        return one_line(
            Msg(
                "result.failed", exercise=self.exercise, passed=self.checks_passed, total=self.checks_total, first=first
            ).render(lang)
        )

    def report(self, lang: str | None = None) -> str:
        """The pass line, or the diagnosis and its details: in ``lang`` ('en' or 'zh'; default: the course's
        current language, see course_utils.lang)."""
        lang = resolve(lang)
        lines = [self.headline(lang)] + [f"   {one_line(text(m, lang))}" for m in self.messages[1:]]
        if self.assumed:
            lines.append("   " + one_line(Msg("result.assumed", assumed=self.assumed).render(lang)))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.report()

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython shows the summary, not a dataclass dump
        p.text(self.report())

    def to_dict(self, lang: str | None = None) -> dict[str, Any]:
        """The fields as plain data, the texts in ``lang`` (default: the course's current language); the exercise
        and the diagnosis stay identifiers, the same in every language."""
        lang = resolve(lang)
        out = asdict(self)
        out.update(
            exercise=str(self.exercise),
            messages=[text(m, lang) for m in self.messages],
            assumed=text(self.assumed, lang),
        )
        return out
