"""The sandboxed child: runs ONE submission's code cells, then runs its classes on the grader's cases and
saves plain tensors with torch.save. It computes no verdict (the parent does, from these tensors).

Usage (by the runner only): python -m course_utils.grade.child JOB.json
"""
from __future__ import annotations

import json
import linecache
import signal
import sys


class CellTimeout(BaseException):
    """Raised by the alarm inside a learner's cell or forward that runs too long."""


def _alarm(signum, frame):
    raise CellTimeout()


def _one_line(exc: BaseException) -> str:
    from .protocol import describe_exception
    if isinstance(exc, CellTimeout):
        return "timed out (an infinite loop?)"
    if isinstance(exc, SystemExit):
        return "called sys.exit(); the rest of the cell was skipped"
    if isinstance(exc, MemoryError) or "allocate" in str(exc):
        return f"ran out of memory (a huge allocation?): {type(exc).__name__}"
    d = describe_exception(exc)
    return f"{d['type']}: {d['message']}" + (f" ({d['line']})" if d["line"] else "")


def main(job_path: str) -> None:
    job = json.loads(open(job_path, encoding="utf-8").read())
    import torch

    from . import protocol, source, specs, specs_capstone
    torch.set_num_threads(1)  # submissions run in parallel, one per core
    signal.signal(signal.SIGALRM, _alarm)
    timeout = float(job["cell_timeout"])
    result = {"cells": [], "exercises": {}, "found": []}
    cells = source.read_cells(job["submission"])
    requested = job.get("exercises")
    found = requested or source.find_exercises(cells)
    result["found"] = list(found)

    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    bound, origin_files = {}, {}
    for cell in cells:
        code_src = source.strip_magics(cell["source"])
        filename = f"<cell {cell['index']}>"
        if source.is_check_cell(code_src):
            # the grader computes the verdict itself; remember which object each check(...) names here
            for ex, name in source.check_calls(code_src):
                if name and name in namespace:
                    bound[ex] = namespace[name]
            # its results (e.g. `result = check(...)`) exist only in the learner's kernel: None here, so
            # later cells guarded by `if result:` skip quietly instead of failing with a NameError
            for assigned in source.assigned_names(code_src):
                namespace.setdefault(assigned, None)
            continue
        linecache.cache[filename] = (len(code_src), None, code_src.splitlines(True), filename)
        origin_files[filename] = cell["index"]
        try:
            code = compile(code_src, filename, "exec")
        except SyntaxError as exc:
            result["cells"].append(f"cell {cell['index']}: SyntaxError: {exc.msg} (line {exc.lineno})")
            continue
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            exec(code, namespace)
        except BaseException as exc:  # noqa: BLE001 - SystemExit, timeouts and learner errors are all reported
            signal.setitimer(signal.ITIMER_REAL, 0)
            result["cells"].append(f"cell {cell['index']}: {_one_line(exc)}")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    for ex in found:
        entry = {"records": [], "missing": None, "delegation": None, "origin": None}
        result["exercises"][ex] = entry
        if ex in specs_capstone.EXERCISES:  # capstone hook: call the learner's function on the grader's models
            name = specs_capstone.CONTRACT_FUNCTION[ex]
            fn = bound.get(ex, namespace.get(name))
            if not callable(fn):
                entry["missing"] = f"no function {name} found" if fn is None else f"{name} is not a function"
                continue
            signal.setitimer(signal.ITIMER_REAL, timeout)
            try:
                entry["records"] = specs_capstone.run_function(ex, fn, set(origin_files))
            except BaseException as exc:  # noqa: BLE001
                entry["missing"] = f"grading {ex} stopped: {_one_line(exc)}"
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            continue
        cls = bound.get(ex, namespace.get(specs.CONTRACT_CLASS.get(ex, ""), None))
        if not isinstance(cls, type):
            entry["missing"] = (f"no class {specs.CONTRACT_CLASS[ex]} found" if cls is None
                                else f"{specs.CONTRACT_CLASS[ex]} is not a class")
            continue
        entry["delegation"] = protocol.class_delegation(cls, ex)
        code = getattr(getattr(cls, "forward", None), "__code__", None)
        if code is not None and code.co_filename in origin_files:
            entry["origin"] = [origin_files[code.co_filename], code.co_firstlineno]
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            entry["records"] = protocol.run_exercise(cls, ex, specs.make_cases(ex), set(origin_files))
        except BaseException as exc:  # noqa: BLE001
            entry["records"] = []
            entry["missing"] = f"grading {ex} stopped: {_one_line(exc)}"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    torch.save(result, job["out"])


if __name__ == "__main__":
    main(sys.argv[1])
