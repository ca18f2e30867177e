"""The sandboxed child: reads the plan, runs the submission's cells, and for each exercise lets its kind find the
learner's class (or function) and call it on the cases the grader sent; writes back plain tensors (the result).

It computes no verdict and holds no answer: the grader (in the parent process) drew the cases from a secret
seed and compares what comes back with its own reference. Imports only torch, the standard library and this
package, so that it runs inside the sandbox with nothing of the grader importable. Each job is a module of its own:
``cells`` (running the submission), ``kinds`` (finding and calling the learner's code, one module per kind),
``finding`` (which class answers), ``tracing`` and ``measuring`` (what a call runs and builds), ``answers`` (the
numeric follow-ups), ``errors`` (a learner's error as plain data).

``grade(plan) -> result`` is the child's whole job, plan in, result out. The jail runs it as ``main``: the plan on
stdin, the result written to a pipe (``python -c`` with this package's folder on sys.path, see ``jail.command``).
In-process use: ``running.run_exercise`` (the notebooks' check).
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
from typing import Any

import torch

from . import kinds
from .answers import number_answer
from .cells import alarm, new_namespace, run_cells
from .texts import english, said
from .tracing import RefusingFlex


def grade(plan: dict) -> dict:
    """Run the plan's cells, then grade each of its exercises: the result the grader validates."""
    torch.set_num_threads(1)
    signal.signal(signal.SIGPROF, alarm)  # the CPU time the learner's code uses, not the wall clock
    timeout = float(plan["cell_timeout"])
    import course_utils.grade as learner_grade  # the learner-side check(): it only records requests

    namespace = new_namespace()
    notes, notes_said = [], []

    def note(key: str, **args: Any) -> None:
        notes_said.append(said(key, **args))
        notes.append(english(notes_said[-1]))

    interview = any(spec.get("trace") for spec in plan["exercises"].values())
    refusing = RefusingFlex() if interview else contextlib.nullcontext()
    refusing.__enter__()  # for the cells and every exercise: the process ends after the result is written
    learner_files = run_cells(plan["cells"], namespace, timeout, note)

    requested = {ex: obj for ex, obj in learner_grade.REQUESTS}
    answers = [
        (str(q)[:80], None if v is None else number_answer(v))  # None: not answered (yet)
        for q, v in learner_grade.ANSWERS[:20]
    ]
    result: dict[str, Any] = {"notes": notes[:50], "notes_said": notes_said[:50], "exercises": {}, "answers": answers}
    for ex, spec in plan["exercises"].items():
        kind = kinds.get(spec["kind"])
        asked = requested.get(ex, namespace.get(spec["contract"]))  # check("id", ...)'s, else the contract's name
        result["exercises"][ex] = kind.grade(asked, namespace, spec, learner_files, timeout)
    return result


def main(result_fd: int) -> None:
    """Read the plan from stdin, grade, write the result to ``result_fd`` (a pipe), and end at once."""
    plan = torch.load(io.BytesIO(sys.stdin.buffer.read()), weights_only=True)
    sys.stdin.close()
    buffer = io.BytesIO()
    torch.save(grade(plan), buffer)
    with os.fdopen(result_fd, "wb") as out:
        out.write(buffer.getvalue())
    os._exit(0)  # no atexit handler or thread of the learner's runs after the result is written
