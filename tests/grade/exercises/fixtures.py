"""Every exercise's grader fixture in one shape, for the contract test over every exercise: the reference, the
alternative correct implementations, the stubs, and each mutant as (the diagnosis it must get, its source). The
sources live in tests/grader_cases/ (one module per exercise or family); this module only puts them in one shape."""

from __future__ import annotations

import importlib.util
import linecache
import os
import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch

from course_utils.grade import grade_class
from course_utils.grade.exercises import get
from tests.conftest import load
from tests.grader_cases import beyond, flash_triton, implementations, paged_decode, ring_attention, sliding_window
from tests.grader_cases.implementations import STUB_FORWARD, STUB_INIT, mutate

HAS_TRITON = importlib.util.find_spec("triton") is not None
if HAS_TRITON and not torch.cuda.is_available():  # before triton is imported: its jit helpers are made then
    os.environ.setdefault("TRITON_INTERPRET", "1")


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
    load: Callable | None = None  # (source) -> what the learner defines; default: the contract's name
    skip: Callable[[], str | None] = field(default=lambda: None)  # why this process cannot grade it, or None
    quiet_numpy: bool = False  # NumPy's 0/0 warnings of a mistaken kernel in Triton's interpreter

    def grade(self, src: str):
        learner = self.load(src) if self.load else load(src, get(self.exercise).contract)
        with warnings.catch_warnings():
            if self.quiet_numpy:
                warnings.simplefilter("ignore", RuntimeWarning)
            return grade_class(self.exercise, learner)


def _class_stubs(exercise: str) -> dict[str, str]:
    name = get(exercise).contract
    return {"forward": STUB_FORWARD.format(name=name), "init": STUB_INIT.format(name=name)}


def _sources(reference: str, mutants) -> list[tuple[str, str]]:
    """Mutants written as edits of the reference, or as whole sources."""
    return [(key, edits if isinstance(edits, str) else mutate(reference, edits)) for key, edits in mutants]


def _fixtures() -> dict[str, Fixture]:
    out = {}
    for ex, ref in implementations.REFERENCE.items():  # exercises 01-07
        out[ex] = Fixture(
            ex, ref, implementations.ALTERNATIVES[ex], _class_stubs(ex), _sources(ref, implementations.MUTANTS[ex]), 3
        )
    for ex, ref in beyond.REFERENCE.items():  # exercises 08-10
        stubs = {"function": beyond.STUB_FUNCTION} if get(ex).kind == "function" else _class_stubs(ex)
        out[ex] = Fixture(ex, ref, beyond.ALTERNATIVES[ex], stubs, _sources(ref, beyond.MUTANTS[ex]))
    ref = sliding_window.REFERENCE
    out["sliding_window"] = Fixture(
        "sliding_window",
        ref,
        sliding_window.ALTERNATIVES,
        _class_stubs("sliding_window"),
        _sources(ref, sliding_window.MUTANTS),
        3,
    )
    for ex, module in (("paged_decode", paged_decode), ("ring_attention", ring_attention)):
        out[ex] = Fixture(
            ex, module.REFERENCE, module.ALTERNATIVES, {"stub": module.STUB}, _sources(module.REFERENCE, module.MUTANTS)
        )
    ref = flash_triton.REFERENCE
    out["flash_triton"] = Fixture(
        "flash_triton",
        ref,
        flash_triton.ALTERNATIVES,
        {"stub": flash_triton.STUB},
        _sources(ref, flash_triton.MUTANTS),
        load=load_kernel,
        skip=triton_in_process,
        quiet_numpy=True,
    )
    return out


FIXTURES = _fixtures()
