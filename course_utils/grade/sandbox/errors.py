"""A learner's error as plain data: its type, the first line of its message, the learner's line (the deepest
frame in the learner's code), where it happened; and the errors the harness itself raises (a contract broken,
a cell or call that ran too long)."""

from __future__ import annotations

import os
import sysconfig
import traceback

import torch

from .texts import Said, english, said

MAX_MESSAGE = 1600  # long enough that a list of what is accepted is never cut


class CellTimeout(BaseException):
    """Raised by the alarm inside a learner's cell or forward that runs too long."""


class ContractError(Said):
    """The learner's module does not follow the exercise's contract (names, shapes, return values)."""


_NOT_LEARNER = (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    os.path.dirname(torch.__file__),
    os.path.dirname(os.__file__),
    *{sysconfig.get_paths()[lib] for lib in ("purelib", "platlib")},  # installed libraries: triton, numpy...
)


def _learner_frame(exc: BaseException, learner_files):
    """The deepest frame in the learner's code: one of ``learner_files``, or (in-process, where the cells'
    file names are IPython's) any frame outside the grader, torch and the standard library."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if learner_files is not None:
            if frame.filename in learner_files:
                return frame
        elif frame.filename.startswith("<") or not os.path.abspath(frame.filename).startswith(_NOT_LEARNER):
            return frame
    return None


def _stub(exc: BaseException) -> bool:
    """A NotImplementedError, or an error raised because of one (Triton's interpreter wraps what a kernel raises
    in its own InterpreterError)."""
    return isinstance(exc, NotImplementedError) or isinstance(exc.__cause__, NotImplementedError)


def _leaves_autograd(exc: BaseException) -> bool:
    """Whether ``exc`` is the error torch raises when a tensor that requires grad leaves autograd (``.numpy()``):
    compared with that error itself, made here, so that nothing depends on how its message is worded."""
    try:
        torch.zeros(1, requires_grad=True).numpy()
    except Exception as made:  # noqa: BLE001 - the error to compare with
        return type(exc) is type(made) and exc.args == made.args
    return False


def _text(exc: BaseException) -> str:
    """``str(exc)``, or what went wrong making it: a learner's exception whose ``__str__`` raises is still described."""
    try:
        return str(exc)
    except Exception as made:  # noqa: BLE001 - the learner's __str__ (raising, or returning no str)
        return f"(its message could not be made: {type(made).__name__})"


def stopped(exc: BaseException, exercise: str, learner_files=None) -> dict:
    """The said form of an exercise's run stopped by ``exc`` outside any case's own errors: the time budget, or an
    exception no case catches (SystemExit, a BaseException of the learner's). The same in the sandbox and in a
    notebook's kernel."""
    d = describe_exception(exc, learner_files)
    message = d["said"] or (f"{d['type']}: {d['message']}" if d["message"] else d["type"])
    return said("stopped", exercise=exercise, message=message)


def describe_exception(exc: BaseException, learner_files=None, where: str = "forward") -> dict:
    """A learner's exception as plain data: type, first line of the message, the learner's line. The grader
    renders ``said`` and ``line_said`` (the harness's own words as keys, see texts.py) in the learner's language."""
    frame = _learner_frame(exc, learner_files)
    line = line_said = None
    if frame is not None:
        src = (frame.line or "").strip()
        line = f"line {frame.lineno}" + (f": {src}" if src else "")[:MAX_MESSAGE]
        line_said = (
            said("at_line", line=str(frame.lineno), src=src) if src else said("at_line_bare", line=str(frame.lineno))
        )
    message_said = (
        said("timed_out")
        if isinstance(exc, CellTimeout)
        else said("out_of_memory")
        if isinstance(exc, MemoryError)
        else getattr(exc, "said", None)
        if isinstance(exc, Said)
        else None
    )
    if message_said is not None:
        message = english(message_said)
    else:
        text = _text(exc).strip()
        message = text.splitlines()[0] if text else ""
    return {
        "type": type(exc).__name__,
        "message": message[:MAX_MESSAGE],
        "line": line,
        "where": where,
        "not_implemented": _stub(exc),
        "function": None if frame is None else frame.name,  # the learner's function it came from: which one is a stub
        "contract": isinstance(exc, ContractError),
        "leaves_autograd": _leaves_autograd(exc),
        "said": message_said,
        "line_said": line_said,
    }
