"""The sandboxed child: reads the plan, runs the submission's cells, finds the class (or function) of each
exercise, runs it on the cases the grader sent, and writes back plain tensors (the result).

It computes no verdict and holds no answer: the grader (in the parent process) drew the cases from a secret
seed and compares what comes back with its own reference. Imports only torch, the standard library and the
sandbox's own files, so that it runs inside the sandbox with nothing of the grader importable. Each job is a module
of its own: ``cells`` (running the submission), ``finding`` (which class answers an exercise), ``running`` (the
cases, and the calls recorded by ``tracing`` and ``measuring``), ``answers`` (the numeric follow-ups),
``model_exercise`` (the capstone), ``errors`` (a learner's error as plain data).

Sandboxed use: python harness.py - RESULT_FD [READY_FD] (the plan on stdin). In-process use:
``running.run_exercise`` (the notebooks' check).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

import torch

try:  # in-process: part of the course's grader package
    from .answers import number_answer
    from .cells import alarm, new_namespace, run_cells
    from .errors import describe_exception
    from .finding import class_in, defined_modules
    from .model_exercise import run_on_model
    from .running import run_exercise
    from .texts import english, said
    from .tracing import RefusingFlex
except ImportError:  # sandboxed: the sandbox's files side by side in /grader
    if not TYPE_CHECKING:  # the type checker reads the package's modules, above
        from answers import number_answer
        from cells import alarm, new_namespace, run_cells
        from errors import describe_exception
        from finding import class_in, defined_modules
        from model_exercise import run_on_model
        from running import run_exercise
        from texts import english, said
        from tracing import RefusingFlex


def main(result_fd: int, ready_fd: int | None = None) -> None:
    """Read the plan from stdin, run the submission, write the result to ``result_fd`` (a pipe). Once torch is
    imported and the plan read, one byte on ``ready_fd`` tells the parent that the submission's own time starts."""
    import io

    plan = torch.load(io.BytesIO(sys.stdin.buffer.read()), weights_only=True)
    sys.stdin.close()
    if ready_fd is not None:
        os.write(ready_fd, b"1")
        os.close(ready_fd)
    torch.set_num_threads(1)
    signal.signal(signal.SIGALRM, alarm)
    timeout = float(plan["cell_timeout"])
    import course_utils.grade as learner_grade  # the learner-side check(): it only records requests

    namespace = new_namespace()
    notes, notes_said = [], []

    def note(key, **args):
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

    def missing(entry, key, **args):
        entry["missing_said"] = said(key, **args)
        entry["missing"] = english(entry["missing_said"])

    for ex, spec in plan["exercises"].items():
        entry: dict[str, Any] = {"missing": None, "records": []}
        result["exercises"][ex] = entry
        cls = requested.get(ex, namespace.get(spec["class"]))
        if isinstance(cls, str):  # check("id", "ClassName")
            cls = namespace.get(cls)
        kind = "function" if spec.get("function") else "class"
        searched = cls if isinstance(cls, dict) else namespace  # check("id", globals()): as it was at the call
        if isinstance(cls, dict) or (spec.get("dialects") and not isinstance(cls, type)):
            signal.setitimer(signal.ITIMER_REAL, timeout)  # interview mode: any nn.Module the file defines
            try:
                cls, found = class_in(searched, spec, learner_files)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            if cls is None:
                if found:
                    missing(
                        entry,
                        "no_class_fits" if spec.get("dialects") else "no_class_found",
                        name=spec["class"],
                        found=", ".join(found),
                        exercise=ex,
                    )
                else:
                    missing(
                        entry, "no_module" if spec.get("dialects") else "no_" + kind, name=spec["class"], exercise=ex
                    )
                continue
        if not (callable(cls) if spec.get("function") else isinstance(cls, type)):
            found = defined_modules(namespace)
            if cls is None and found:
                missing(entry, "no_class_found", name=spec["class"], found=", ".join(c.__name__ for c in found))
            else:
                missing(entry, ("no_" if cls is None else "not_") + kind, name=spec["class"])
            continue
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            entry["records"] = run_exercise(cls, spec, learner_files)
        except BaseException as exc:  # noqa: BLE001
            entry["records"] = []
            d = describe_exception(exc, learner_files)
            missing(entry, "stopped", exercise=ex, message=d["said"] or d["message"])
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    for ex, spec in plan.get("models", {}).items():  # the capstone: fn(model) -> (layer, head) on trained GPTs
        fn = requested.get(ex, namespace.get(spec["function"]))
        if isinstance(fn, dict):  # check("id", globals())
            fn = fn.get(spec["function"])
        if not callable(fn):
            result["exercises"][ex] = {"missing": None, "records": []}
            missing(result["exercises"][ex], "no_function", name=spec["function"])
            continue
        result["exercises"][ex] = {
            "missing": None,
            "records": [run_on_model(fn, state, learner_files, timeout) for state in spec["checkpoints"]],
        }
    buffer = io.BytesIO()
    torch.save(result, buffer)
    with os.fdopen(result_fd, "wb") as out:
        out.write(buffer.getvalue())
    os._exit(0)  # no atexit handler or thread of the learner's runs after the result is written


if __name__ == "__main__":
    main(int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else None)
