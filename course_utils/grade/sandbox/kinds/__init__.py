"""The child's side of each kind of exercise (the grader's side is ``course_utils/grade/kinds/``, under the same
names): how the learner's code is found in the submission and called on the plan's cases. One module per kind, each
declaring ``KIND``; ``get(name)`` finds it by the name the plan gives (``spec["kind"]``), as Hugging Face finds an
attention function by the name a config gives. Torch and the standard library only, like everything mounted."""

from __future__ import annotations

import importlib
import signal
from typing import Any

import torch

from ..errors import stopped
from ..finding import class_in, defined_modules
from ..texts import english, said


class Kind:
    """How the child finds and calls the learner's code of one kind of exercise. ``word``: what the contract names,
    a "class" or a "function" (``no_class``, ``not_function``...)."""

    name = ""
    word = "class"

    def fits(self, target: Any) -> bool:
        """Whether ``target`` is something of this kind to call."""
        return isinstance(target, type)

    def run(self, target: Any, spec: dict, learner_files: set | None = None) -> list[dict]:
        """Records for every case of ``spec`` (one exercise's plan); never raises for a learner's bug."""
        raise NotImplementedError

    def try_first(self, target: Any, spec: dict, learner_files: set | None = None) -> dict | None:
        """The record of ``target`` on the first case of ``spec`` (which of several classes runs), None when this
        kind does not try classes."""
        return None

    def find(self, asked: Any, namespace: dict, spec: dict, learner_files: set, timeout: float) -> tuple[Any, Any]:
        """(what to grade, None), or (None, why not as a said form): ``asked`` is what check("id", ...) named (a
        class, a function, its name, or globals()), else what the contract's name is in ``namespace``."""
        target = asked
        if isinstance(target, str):  # check("id", "ClassName")
            target = namespace.get(target)
        searched = target if isinstance(target, dict) else namespace  # check("id", globals()): as it was then
        if isinstance(target, dict) or (spec.get("dialects") and not isinstance(target, type)):
            signal.setitimer(signal.ITIMER_PROF, timeout)  # interview mode: any nn.Module the file defines
            try:
                target, found = class_in(
                    searched,
                    spec["contract"],
                    lambda cls: self.try_first(cls, spec, learner_files),
                    interview=bool(spec.get("dialects")),
                    function=self.word == "function",
                )
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)
            if target is None:
                interview = bool(spec.get("dialects"))
                if found:
                    key = "no_class_fits" if interview else "no_class_found"
                    return None, said(key, name=spec["contract"], found=", ".join(found), exercise=spec["exercise"])
                key = "no_module" if interview else "no_" + self.word
                return None, said(key, name=spec["contract"], exercise=spec["exercise"])
        if not self.fits(target):
            found = defined_modules(namespace)
            if target is None and found:
                return None, said("no_class_found", name=spec["contract"], found=", ".join(c.__name__ for c in found))
            return None, said(("no_" if target is None else "not_") + self.word, name=spec["contract"])
        return target, None

    def grade(self, asked: Any, namespace: dict, spec: dict, learner_files: set, timeout: float) -> dict:
        """The exercise's entry of the child's result: its records, or what is missing (``missing_said``)."""
        target, why = self.find(asked, namespace, spec, learner_files, timeout)
        if why is not None:
            return missing(why)
        signal.setitimer(signal.ITIMER_PROF, timeout)
        try:
            return {"missing": None, "records": self.run(target, spec, learner_files)}
        except BaseException as exc:  # noqa: BLE001 - the alarm, or anything else that stops the run
            return missing(stopped(exc, spec["exercise"], learner_files))
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)


def missing(why: dict) -> dict:
    """An exercise's entry of the child's result when nothing was run: why, in English and as a said form."""
    return {"missing": english(why), "missing_said": why, "records": []}


def plain(value):
    """A detached CPU tensor (a plain torch.Tensor), or a description of what came back instead."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu").as_subclass(torch.Tensor).clone()
    return f"<{type(value).__name__}>"


def get(name: str) -> Kind:
    """The kind called ``name`` (its module here declares ``KIND``)."""
    if not name.isidentifier():
        raise ValueError(f"no kind {name!r}")
    return importlib.import_module(f"{__name__}.{name}").KIND
