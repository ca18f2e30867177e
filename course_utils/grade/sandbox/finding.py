"""Which of the submission's classes (or functions) answers an exercise: the exercise's own name first, else
(interview mode, or a follow-up under another name) the one class that runs, or is named like attention."""

from __future__ import annotations

from typing import Any, Callable

from torch import nn

Tries = Callable[[Any], "dict | None"]  # a class -> its record on the exercise's first case (None: it cannot be tried)


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


def _first_error(cls, try_first: Tries):
    """Where ``cls`` fails on the exercise's first case ("construct", "load", "forward", ...), "" when it runs,
    None when it cannot even be tried."""
    try:
        record = try_first(cls)
    except Exception:  # noqa: BLE001 - a class that cannot even be tried does not fit
        return None
    if record is None:
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


def class_in(namespace: dict, contract: str, try_first: Tries, *, interview: bool = False, function: bool = False):
    """(the class to grade in ``namespace``, the names of the classes found): what ``check("id", globals())``
    grades, in the notebook's kernel and in the sandbox alike. The exercise's own name first (a function
    exercise: that name only). Else, in interview mode, any nn.Module: one defined, that one; several, the one that
    runs the first case, else the one that at least constructs and loads (its error is the candidate's to see).
    Otherwise (a follow-up under another name) only a class that runs the first case: the learner's other classes
    (the MHA a follow-up builds on) are no answer to it. Of several, the one named like attention; else None, and
    the names are listed to the learner. ``try_first``: the exercise's kind's run of a class on its first case."""
    named = namespace.get(contract)
    if isinstance(named, type) or (function and callable(named)):
        return named, [named.__name__]
    found = [] if function else defined_modules(namespace)
    if interview and len(found) == 1:
        return found[0], [found[0].__name__]
    where = {cls: _first_error(cls, try_first) for cls in found}
    runs = [c for c in found if where[c] == ""]
    constructs = [c for c in found if where[c] is not None and where[c] not in ("construct", "load")]
    for group in (runs, constructs) if interview else (runs,):
        chosen = _one_of(group, base_first=interview)
        if chosen is not None:
            return chosen, [c.__name__ for c in found]
    return None, [c.__name__ for c in found]
