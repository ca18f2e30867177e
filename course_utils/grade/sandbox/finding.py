"""Which of the submission's classes (or functions) answers an exercise: the exercise's own name first, else
(interview mode, or a follow-up under another name) the one class that runs, or is named like attention."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

try:  # in-process: part of the course's grader package
    from .running import run_exercise
except ImportError:  # sandboxed: the sandbox's files side by side in /grader
    if not TYPE_CHECKING:  # the type checker reads the package's modules, above
        from running import run_exercise


def defined_modules(namespace: dict) -> list:
    """The nn.Module subclasses the submission defined (not imported), each once, in the order defined."""
    seen = {}
    for value in list(namespace.values()):
        if (
            isinstance(value, type)
            and issubclass(value, nn.Module)
            and value.__module__ == "__main__"
            and id(value) not in seen
        ):
            seen[id(value)] = value
    return list(seen.values())


_ATTENTION_NAMES = ("attention", "attn", "mha")


def _first_error(cls, spec: dict, learner_files=None):
    """Where ``cls`` fails on the first case of ``spec`` ("construct", "load", "forward", ...), "" when it runs,
    None when it cannot even be tried."""
    try:
        record = run_exercise(
            cls,
            {
                **spec,
                "cases": spec["cases"][:1],
                "ctor_args": spec["ctor_args"][:1],
                "ctors": spec.get("ctors", [None])[:1],
                "square_cases": spec.get("square_cases", [])[:1],
                "square_ctors": spec.get("square_ctors", [])[:1],
                "trace": False,
            },
            learner_files,
        )[0]
    except Exception:  # noqa: BLE001 - a class that cannot even be tried does not fit
        return None
    error = record.get("error")
    return "" if error is None else str(error.get("where"))


def _one_of(group: list, base_first: bool):
    """The one class of ``group``, or the one named like attention; with ``base_first``, a class that extends
    another of the group is left out (a follow-up built on the answer is not the answer)."""
    if base_first:
        group = [c for c in group if not any(o is not c and issubclass(c, o) for o in group)]
    named = [c for c in group if any(n in c.__name__.lower() for n in _ATTENTION_NAMES)]
    for candidates in (group, named):
        if len(candidates) == 1:
            return candidates[0]
    return None


def class_in(namespace: dict, spec: dict, learner_files=None):
    """(the class to grade in ``namespace``, the names of the classes found): what ``check("id", globals())``
    grades, in the notebook's kernel and in the sandbox alike. The exercise's own name first (a function
    exercise: that name only). Else, in interview mode, any nn.Module: one defined, that one; several, the one that
    runs the first case, else the one that at least constructs and loads (its error is the candidate's to see).
    Otherwise (a follow-up under another name) only a class that runs the first case: the learner's other classes
    (the MHA a follow-up builds on) are no answer to it. Of several, the one named like attention; else None, and
    the names are listed to the learner."""
    named = namespace.get(spec["class"])
    if isinstance(named, type) or (spec.get("function") and callable(named)):
        return named, [named.__name__]
    interview = bool(spec.get("dialects"))
    found = [] if spec.get("function") else defined_modules(namespace)
    if interview and len(found) == 1:
        return found[0], [found[0].__name__]
    where = {cls: _first_error(cls, spec, learner_files) for cls in found}
    runs = [c for c in found if where[c] == ""]
    constructs = [c for c in found if where[c] is not None and where[c] not in ("construct", "load")]
    for group in (runs, constructs) if interview else (runs,):
        chosen = _one_of(group, base_first=interview)
        if chosen is not None:
            return chosen, [c.__name__ for c in found]
    return None, [c.__name__ for c in found]
