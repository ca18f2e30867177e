"""Every exercise's grader fixture in one shape, found from the registry: each exercise the registry declares has one
fixture, an entry of a ``FIXTURES`` dict in a module of tests/grader_cases/ (a new exercise: its own module there,
tests/grader_cases/<id>.py). An entry is {"reference": its source, "alternatives": {name: source} (correct in other
styles), "mutants": [(the diagnosis it must get, a source or edits of the reference's #TAG lines)], and, optionally,
"stubs": {name: source} (default: the module kind's, a class whose forward or whose constructor raises
NotImplementedError), "min_alternatives" (default 2), "as_learner" (the correct answer a learner's notebook is tried
with, tests/exercises/test_as_learner.py; default: the first alternative)}. How each is loaded and whether this process
can grade it follows from the exercise's kind."""

from __future__ import annotations

import importlib
import importlib.util
import linecache
import os
import pkgutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

import tests.grader_cases as grader_cases
from course_utils.grade import grade_class
from course_utils.grade.exercises import EXERCISES, get
from tests.conftest import load
from tests.grader_cases.implementations import STUB_FORWARD, STUB_INIT, mutate

HAS_TRITON = importlib.util.find_spec("triton") is not None
if HAS_TRITON and not torch.cuda.is_available():  # before triton is imported: its jit helpers are made then
    os.environ.setdefault("TRITON_INTERPRET", "1")

KEYS = {"reference", "alternatives", "mutants", "stubs", "min_alternatives", "as_learner"}


def load_kernel(src: str, name: str = "flash_attention"):
    """A Triton kernel's source run as the notebook's kernel would: one linecache entry per source, since triton
    reads a kernel's source through linecache."""
    ns = {"__name__": "learner"}
    filename = f"<learner-{abs(hash(src))}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    exec(compile(src, filename, "exec"), ns)
    return ns[name]


def triton_in_process() -> str | None:
    """None when this process grades Triton kernels in the interpreter, else why the in-process tests skip."""
    if not HAS_TRITON:
        return "triton is not installed (it has wheels for Linux only)"
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(tl.zeros, InterpretedFunction):
        return "triton runs compiled in this process (a CUDA GPU): the sandbox test grades"
    return None


@dataclass(frozen=True)
class Fixture:
    exercise: str
    reference: str
    alternatives: dict[str, str]
    stubs: dict[str, str]
    mutants: list[tuple[str, str]]
    min_alternatives: int = 2
    as_learner: str = ""  # the alternative a learner's notebook is tried with
    kernel: bool = False  # a Triton kernel: loaded through linecache, graded in the interpreter
    skip: Callable[[], str | None] = field(default=lambda: None)  # why this process cannot grade it, or None

    def load(self, src: str):
        """What the learner defines, as the notebook's kernel would have it."""
        return load_kernel(src, get(self.exercise).contract) if self.kernel else load(src, get(self.exercise).contract)

    def grade(self, src: str):
        learner = self.load(src)
        with warnings.catch_warnings():
            if self.kernel:  # NumPy's 0/0 warnings of a mistaken kernel in Triton's interpreter
                warnings.simplefilter("ignore", RuntimeWarning)
            return grade_class(self.exercise, learner)

    def graded_in_the_sandbox(self, folder: Path, alternative: str) -> None:
        """The reference, the alternative ``alternative`` and every mutant as submission files in ``folder``, each
        graded through the sandboxed runner: the first two pass, each mutant gets its diagnosis (the same verdicts as
        in the notebook's kernel)."""
        from course_utils.grade import runner  # here: only the sandbox tests need the runner

        contract = get(self.exercise).contract
        subs = {"ref": self.reference, "alt": self.alternatives[alternative], **dict(self.mutants)}
        for name, src in subs.items():
            path = folder / f"{name}.py"
            call = f'check("{self.exercise}", {contract})'
            path.write_text(f"{src}\nfrom course_utils.grade import check\nresult = {call}\n")
            result = runner.grade_file(path, sandboxed=True).results[0]
            assert (result.diagnosis or "passed") == ("passed" if name in ("ref", "alt") else name), result.report()


def _module_stubs(exercise: str) -> dict[str, str]:
    name = get(exercise).contract
    return {"forward": STUB_FORWARD.format(name=name), "init": STUB_INIT.format(name=name)}


def _sources(reference: str, mutants) -> list[tuple[str, str]]:
    """Mutants written as edits of the reference, or as whole sources."""
    return [(key, edits if isinstance(edits, str) else mutate(reference, edits)) for key, edits in mutants]


def declared() -> dict[str, tuple[str, dict]]:
    """Every fixture of tests/grader_cases/: {exercise: (the module that declares it, its entry)}."""
    found: dict[str, tuple[str, dict]] = {}
    for info in pkgutil.iter_modules(grader_cases.__path__):
        module = importlib.import_module(f"{grader_cases.__name__}.{info.name}")
        for exercise, entry in getattr(module, "FIXTURES", {}).items():
            assert exercise not in found, f"two fixtures of {exercise}: {found[exercise][0]} and {module.__name__}"
            found[exercise] = (module.__name__, entry)
    return found


def _fixture(exercise: str, entry: dict) -> Fixture:
    unknown = set(entry) - KEYS
    assert not unknown, f"{exercise}'s fixture has unknown keys {sorted(unknown)}; a fixture's keys are {sorted(KEYS)}"
    kind = get(exercise).kind
    stubs = entry.get("stubs") or (_module_stubs(exercise) if kind == "module" else None)
    assert stubs, f"{exercise}'s fixture needs its stubs: a kind {kind!r} exercise has none by default"
    alternatives = entry["alternatives"]
    return Fixture(
        exercise,
        entry["reference"],
        alternatives,
        stubs,
        _sources(entry["reference"], entry["mutants"]),
        entry.get("min_alternatives", 2),
        entry.get("as_learner") or next(iter(alternatives.values()), ""),
        kernel=kind == "kernel",
        skip=triton_in_process if kind == "kernel" else lambda: None,
    )


def _fixtures() -> dict[str, Fixture]:
    found = declared()
    missing = [ex for ex in EXERCISES if ex not in found]
    assert not missing, (
        f"no grader fixture for {missing}: add tests/grader_cases/<id>.py with FIXTURES = {{'<id>': {{'reference': "
        "..., 'alternatives': {...}, 'mutants': [...]}}}} (tests/grade/exercises/fixtures.py says what each holds)"
    )
    extra = [ex for ex in found if ex not in EXERCISES]
    assert not extra, f"fixtures of exercises the registry does not declare: {extra} ({[found[e][0] for e in extra]})"
    return {ex: _fixture(ex, found[ex][1]) for ex in EXERCISES}


FIXTURES = _fixtures()
