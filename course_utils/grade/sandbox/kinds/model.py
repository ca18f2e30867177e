"""The child's side of the model kind: the learner's function called on each of the grader's trained models (a
checkpoint of the course's GPT, built here), its answer [layer, head] as plain ints. The models' code is mounted only
in the sandbox of an exercise of this kind, graded alone."""

from __future__ import annotations

import signal
from typing import Any

import torch

from ..errors import describe_exception
from ..texts import said
from . import Kind, missing


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
    """The record of ``fn`` called on the model of the checkpoint ``state``, stopped after ``timeout`` seconds (0: the
    budget already running, a notebook's check's)."""
    from course_utils.gpt import GPT  # mounted only in the sandbox of this exercise

    record: dict[str, Any] = {"error": None, "answer": None, "calls": []}
    if timeout:
        signal.setitimer(signal.ITIMER_PROF, timeout)
    try:
        torch.manual_seed(0)
        with torch.no_grad():
            record["answer"] = layer_head_answer(fn(GPT.from_checkpoint(state).eval()))
    except BaseException as exc:  # noqa: BLE001
        record["error"] = describe_exception(exc, learner_files, "call")
    finally:
        if timeout:
            signal.setitimer(signal.ITIMER_PROF, 0)
    return record


class Model(Kind):
    """A function called on trained models: each model gets the cell timeout of its own."""

    name = "model"
    word = "function"

    def grade(self, asked, namespace, spec, learner_files, timeout):
        fn = asked
        if isinstance(fn, dict):  # check("id", globals())
            fn = fn.get(spec["contract"])
        if not callable(fn):
            return missing(said("no_function", name=spec["contract"]))
        return {"missing": None, "records": self.run(fn, spec, learner_files, timeout)}

    def run(self, target, spec, learner_files=None, timeout: float = 0.0):
        return [run_on_model(target, state, learner_files, timeout) for state in spec["checkpoints"]]


KIND = Model()
