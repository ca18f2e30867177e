"""The capstone's exercise, graded on trained models: the learner's function called on each checkpoint's GPT,
its answer [layer, head] as plain ints."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Any

import torch

try:  # in-process: part of the course's grader package
    from .errors import describe_exception
except ImportError:  # sandboxed: the sandbox's files side by side in /grader
    if not TYPE_CHECKING:  # the type checker reads the package's modules, above
        from errors import describe_exception


def layer_head_answer(value):
    """The capstone's answer: [layer, head] as ints, or a description of what came back instead."""
    if isinstance(value, (tuple, list)) and len(value) == 2:
        try:
            return [int(v.__index__()) for v in value]
        except (AttributeError, TypeError, ValueError, RuntimeError):
            pass
    if isinstance(value, torch.Tensor):
        return f"<a tensor of shape {tuple(value.shape)}>"
    return f"<{type(value).__name__}: {str(value)[:40]}>"


def run_on_model(fn, state: dict, learner_files, timeout: float) -> dict:
    from course_utils.gpt import GPT  # mounted only in the sandbox of this exercise

    record: dict[str, Any] = {"error": None, "answer": None, "calls": []}
    signal.setitimer(signal.ITIMER_PROF, timeout)
    try:
        torch.manual_seed(0)
        with torch.no_grad():
            record["answer"] = layer_head_answer(fn(GPT.from_checkpoint(state).eval()))
    except BaseException as exc:  # noqa: BLE001
        record["error"] = describe_exception(exc, learner_files, "call")
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
    return record
