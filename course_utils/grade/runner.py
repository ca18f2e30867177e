"""Grade one submission file in its own process, with a per-cell and a total timeout and a memory cap."""
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import source, specs, specs_capstone
from .diagnose import Result, failure, verdict

MEMORY_CAP = 4 << 30  # address space: torch needs ~1 GiB just to import
CELL_TIMEOUT = 10.0
TOTAL_TIMEOUT = 120.0
_ROOT = str(Path(__file__).resolve().parents[2])


@dataclass
class SubmissionReport:
    path: str
    results: list = field(default_factory=list)  # Result per exercise
    notes: list = field(default_factory=list)    # cell errors and other remarks
    error: str | None = None                     # why nothing could be graded

    @property
    def passed(self) -> bool:
        return self.error is None and bool(self.results) and all(self.results)

    def to_dict(self) -> dict:
        return {"path": self.path, "passed": self.passed, "error": self.error, "notes": self.notes,
                "results": [r.to_dict() for r in self.results]}


def _limit(mem_bytes):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def _fail_all(report, exercises, key, message):
    report.error = message
    report.results = [failure(ex, key, message) for ex in exercises]
    return report


def grade_file(path, exercises=None, *, cell_timeout=CELL_TIMEOUT, total_timeout=TOTAL_TIMEOUT,
               mem_bytes=MEMORY_CAP) -> SubmissionReport:
    """Grade ``path`` (.py or .ipynb) on ``exercises`` (default: those found in it); never raises for
    a broken submission. The submission file is only read."""
    path = Path(path)
    report = SubmissionReport(str(path))
    known = specs.EXERCISES + specs_capstone.EXERCISES
    for ex in exercises or []:
        if ex not in known:
            raise ValueError(f"unknown exercise {ex!r}; known: {', '.join(known)}")
    try:
        cells = source.read_cells(path)
    except SubmissionError as exc:
        return _fail_all(report, exercises or [], "unreadable", str(exc))
    exercises = list(exercises or source.find_exercises(cells))
    if not exercises:
        report.error = "no exercise found: no check(\"id\", ...) call and no contract class name"
        return report
    imports = [f"cell {c['index']}: {imp}" if len(cells) > 1 else imp
               for c in cells for imp in source.course_imports(c["source"])]

    with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
        copy = Path(tmp) / ("submission" + path.suffix)
        shutil.copyfile(path, copy)  # the child never sees the original
        out, job = Path(tmp) / "result.pt", Path(tmp) / "job.json"
        job.write_text(json.dumps({"submission": str(copy), "exercises": exercises, "cell_timeout": cell_timeout,
                                   "out": str(out)}))
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONSTARTUP",)}
        env["PYTHONPATH"] = _ROOT + os.pathsep + env.get("PYTHONPATH", "")
        env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", MPLBACKEND="Agg")
        errlog = Path(tmp) / "stderr.txt"
        try:
            with open(errlog, "wb") as err:
                proc = subprocess.run([sys.executable, "-m", "course_utils.grade.child", str(job)], cwd=tmp,
                                      env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                      timeout=total_timeout, preexec_fn=_limit(mem_bytes))
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            return _fail_all(report, exercises, "timeout",
                             f"grading stopped after {total_timeout:g} s (an infinite loop?)")
        if not out.exists():
            tail = errlog.read_text(errors="replace").strip().splitlines()[-1:] if errlog.exists() else []
            why = f"the submission ended the grading process (exit code {rc}) before any result"
            if tail and "MemoryError" in tail[0] or rc in (-9, 137):
                why += ", out of memory?"
            return _fail_all(report, exercises, "crashed", why + (f": {tail[0][:200]}" if tail else ""))
        try:
            data = torch.load(out, weights_only=True)
        except Exception as exc:  # noqa: BLE001 - a tampered result file gets no credit
            return _fail_all(report, exercises, "crashed", f"unreadable grading result: {type(exc).__name__}")

    report.notes = list(data.get("cells", []))
    by_index = {c["index"]: c["source"] for c in cells}
    for ex in exercises:
        entry = data["exercises"].get(ex)
        if entry is None or entry.get("missing"):
            why = entry["missing"] if entry else f"{ex} was not graded"
            hint = f" ({report.notes[0]})" if report.notes else ""
            report.results.append(failure(ex, "missing", why + hint))
            continue
        if ex in specs_capstone.EXERCISES:  # capstone hook: the learner may use course_utils' model and data
            report.results.append(specs_capstone.verdict(ex, entry["records"]))
            continue
        refusals = [f"imports {imp}" for imp in imports]
        if entry.get("delegation") and ("course_utils" in entry["delegation"] or ex in specs.INTERVIEW):
            refusals.append(entry["delegation"])
        if ex in specs.INTERVIEW and entry.get("origin"):
            cell_index, line = entry["origin"]
            refusals += [f"uses {v}" for v in source.interview_violations(by_index.get(cell_index, ""), line)]
        report.results.append(verdict(ex, entry["records"], refusals=refusals))
    return report


SubmissionError = source.SubmissionError
