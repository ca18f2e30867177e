"""The self-check cell: ``check("mha", MultiHeadAttention)`` grades the learner's class (or function) in the
notebook's kernel and prints a pass line or a diagnosis naming the mistake; ``grade_class`` returns the Result
without printing."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from . import history
from .child import from_child
from .diagnose import NOT_IMPLEMENTED
from .exercises import get
from .messages import Msg
from .protocol import Graded, chosen, run_in_process
from .registry import Exercise
from .runner import CELL_TIMEOUT, stopped_as
from .sandbox.cells import alarm
from .sandbox.errors import stopped
from .sandbox.texts import english
from .types import Result

# CPU seconds the learner's code may use in the notebook's kernel: the sandbox's budget for an exercise's run, so that
# a loop that never ends gets the same verdict here, before nbgrader's 30 s cell timeout interrupts the kernel
BUDGET = CELL_TIMEOUT

TEXTS = {
    "check.interrupted": (
        "KeyboardInterrupt: grading {exercise} was interrupted (the Stop button, or a time limit such as nbgrader's)",
        "KeyboardInterrupt：{exercise} 的评分被中断了（按了停止按钮，或者到了时间上限，比如 nbgrader 的）",
    ),
}


class Interrupted(KeyboardInterrupt):
    """check() stopped by an interrupt. IPython shows its one line (``_render_traceback_``), not the grader's frames
    and the paths of the course's installation."""

    def __init__(self, line: str):
        super().__init__(line)
        self.line = line

    def _render_traceback_(self) -> list[str]:
        return [self.line]


def grade_class(
    exercise: str | Exercise,
    cls: Any,
    learner_files: set[str] | None = None,
    refusals: list[Any] | None = None,
    seed: int | None = None,
) -> Result:
    """Grade the learner's class (or function) ``cls`` for ``exercise`` in this process; never raises for learner
    bugs. ``cls`` may be a namespace (``globals()``): what to grade is then found in it as the file grader finds it."""
    ex = get(exercise)
    kind = ex.how
    graded = Graded(ex, seed)
    total = kind.total_checks(graded.cases)
    cls, none_fits = chosen(cls, graded)  # check("id", globals()): found as the file grader finds it
    if none_fits is not None:
        return Result(ex.id, False, 0.0, 0, total, "missing", [none_fits])
    if cls is None:  # the learner has not defined it yet (check("id", globals().get("Name")))
        return Result(ex.id, False, 0.0, 0, total, NOT_IMPLEMENTED, [kind.not_defined(ex)])
    unfit = kind.unfit(ex, cls)
    if unfit is not None:
        return Result(ex.id, False, 0.0, 0, total, "contract", [unfit])
    refusals = list(refusals or [])
    reason = kind.delegation(ex, cls)
    if reason is not None:
        refusals.append(reason)
    if refusals:
        return graded.verdict([], refusals)
    try:
        with _cpu_budget(BUDGET):
            records = run_in_process(cls, graded, learner_files)
    except KeyboardInterrupt:  # the learner's Stop, or nbgrader's timeout: the cell stops (check() says so)
        raise
    except BaseException as exc:  # noqa: BLE001 - the budget, or what no case catches: stopped, as in the sandbox
        form = stopped(exc, ex.id, learner_files)
        why = from_child(form, english(form))
        return graded.failure(stopped_as(why) or "crashed", why)
    return graded.verdict(records)


@contextlib.contextmanager
def _cpu_budget(seconds: float) -> Iterator[None]:
    """The sandbox's alarm (``CellTimeout`` after ``seconds`` of CPU) around the learner's code in this process;
    none where signals cannot be set (a thread other than the main one)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGPROF, alarm)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def check(exercise: str, cls: Any, *, quiet: bool = False, lang: str | None = None) -> Result:
    """The self-check cell: prints a pass line or a diagnosis naming the mistake, returns the Result.
    ``lang``: 'en' or 'zh' (default: the course's current language, Chinese in the zh-CN notebooks)."""
    ex = get(exercise)
    try:
        result = grade_class(ex, cls)
    except KeyboardInterrupt:  # the cell stops, as Stop asks, with one line
        raise Interrupted(Msg("check.interrupted", exercise=ex.id).render(lang)) from None
    history.record(result)  # the learner's own progress, on this machine only (make progress)
    if not quiet:
        print(result.report(lang))
    return result
