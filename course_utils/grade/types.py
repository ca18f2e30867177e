"""The grader's shared types: a case and its calls, a mutant, a result. They import nothing of the grader but
its texts, so that every layer above can use them (see ARCHITECTURE.md)."""

from __future__ import annotations

import secrets
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from .escape import one_line
from .messages import Msg, resolve, text


def new_seed() -> int:
    """A fresh secret seed: the learner's code cannot know the cases in advance."""
    return secrets.randbits(62)


@dataclass(frozen=True)
class Mutant:
    key: str
    message: str
    variant: object  # the flags of one reference computation (heads.Variant, an exercise's own *Variant)
    outputs_only: bool = False  # match on the outputs alone (a cache kept inside the module returns anything)
    paired: bool = True  # also tried two at a time with the others (diagnose.mutant_pairs)


@dataclass
class Call:
    """One call of the learner's module. ``past``: None, the index of an earlier call whose ``present`` is
    passed back, or "given" (the case's own past, which the module never produced)."""

    x: torch.Tensor
    train: bool = False
    seed: int = 0
    grad: torch.Tensor | None = None  # cotangent: the learner's backward of (out * grad).sum()
    past: int | str | None = None
    past_scale: tuple[float, float] | None = None  # the past handed back with its two parts multiplied by these: a
    # cache the module did not produce, yet in whatever layout the module keeps its own
    use_cache: bool | None = None  # None: forward(x); a bool: forward(x, past_key_value=..., use_cache=...)
    kwargs: dict[str, Any] = field(default_factory=dict)  # more keyword arguments of forward (MLA's absorb)
    args: tuple[Any, ...] | None = None  # a function exercise: fn(*args) instead of a module's forward
    tile_bound: int | None = None  # the largest float tensor the call may make (a tiled function, MLA absorbed)
    bound_label: str = "tiled"  # the output that reports it: step<i>.<bound_label>, 1 = within the bound
    peak_bound: int | None = None  # a tiled function: how far (bytes) the process's peak memory may rise
    helper: str | None = None  # a function exercise: the contract's other function called instead, found beside
    # the graded one (exercise 13's merge_partials)
    ranks: int | None = None  # a function exercise run on a ring of this many processes (exercise 15): args are
    # (q, k, v chunks per rank, seq_len, layout, causal); each rank steps the graded function and passes K/V on with
    # the contract's function ``exchange``; outputs rank<r>.out, rank<r>.lse, rank<r>.recv<t>.k/.v
    exchange: str | None = None
    state: tuple[tuple[str, int], ...] = ()  # a function's arguments it writes into: (name, index in args), each
    # read back after the call from the copy the learner's function was handed, as the output step<i>.<name>
    split_check: tuple[str, int] | None = None  # a function exercise that splits its keys (exercise 13): (the
    # contract's merge, found beside the graded function; the keys of the longest row). step<i>.split = 0 when the
    # call never had the merge combine two partials and ran a softmax (or logsumexp) over that many keys at once

    @property
    def fn_args(self) -> tuple[Any, ...]:
        """The arguments of a function exercise's call (``args``), which its cases always give."""
        assert self.args is not None, "a call of a function exercise carries the function's arguments"
        return self.args

    @property
    def ring_size(self) -> int:
        """The number of ranks of a ring's call (``ranks``), which a ring exercise's cases always give."""
        assert self.ranks is not None, "a call of a ring exercise says how many ranks it runs on"
        return self.ranks


@dataclass
class Case:
    """One configuration: constructor arguments, parameters (by name) and the calls to make."""

    name: str
    ctor: dict[str, Any]
    params: dict[str, torch.Tensor]
    calls: list[Call]
    kind: str = "plain"  # plain | grad | train | large | cache
    given_past: tuple[torch.Tensor, torch.Tensor] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def x(self) -> torch.Tensor:
        return self.calls[0].x


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
