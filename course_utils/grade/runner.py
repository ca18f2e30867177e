"""Grade one submission file: read it here, run it in a sandbox on cases drawn from a secret seed, and
compute the verdict here from the raw outputs that come back."""
from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import protocol, source, specs
from .diagnose import failure, verdict
from .questions import QUESTIONS, grade_answer
from .sandbox import jail

CELL_TIMEOUT = 10.0
TOTAL_TIMEOUT = 120.0


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


def _fail_all(report, exercises, key, message):
    report.error = message
    report.results = [failure(ex, key, message) for ex in exercises]
    return report


def _strings(value, limit=50) -> list:
    return [str(v)[:400] for v in value[:limit]] if isinstance(value, list) else []


def _answers(raw) -> list:
    """Results for the numeric follow-ups the submission answered (the last answer to each question)."""
    if not isinstance(raw, list):
        return []
    latest = {}
    for item in raw[:20]:
        if isinstance(item, (list, tuple)) and len(item) == 2 and item[0] in QUESTIONS:
            value = item[1] if isinstance(item[1], (int, float, str)) else None
            latest[item[0]] = str(value)[:80] if isinstance(value, str) else value
    return [grade_answer(q, v) for q, v in latest.items()]


def grade_file(path, exercises=None, *, cell_timeout=CELL_TIMEOUT, total_timeout=TOTAL_TIMEOUT,
               sandboxed: bool = True, slot: int = 0) -> SubmissionReport:
    """Grade ``path`` (.py or .ipynb) on ``exercises`` (default: those found in it); never raises for a
    broken submission. The submission file is only read. ``sandboxed=False`` runs it in a plain child
    process (trusted submissions, or a machine without bubblewrap)."""
    path = Path(path)
    report = SubmissionReport(str(path))
    for ex in exercises or []:
        if ex not in specs.EXERCISES:
            raise ValueError(f"unknown exercise {ex!r}; known: {', '.join(specs.EXERCISES)}")
    try:
        cells = source.read_cells(path)
    except source.SubmissionError as exc:
        return _fail_all(report, exercises or [], "unreadable", str(exc))
    exercises = list(exercises or source.find_exercises(cells))
    if not exercises:
        report.error = "no exercise found: no check(\"id\", ...) call and no contract class name"
        return report

    prepared, notes = [], []
    for cell in cells:
        code, note = source.prepare_cell(cell["source"])
        if note:
            notes.append(f"cell {cell['index']}: {note}")
        if code.strip():
            prepared.append({"index": cell["index"], "source": code})
    where = (lambda c: f"cell {c['index']}: ") if len(cells) > 1 else (lambda c: "")
    imports = [f"imports {where(c)}{imp}" for c in prepared for imp in source.course_imports(c["source"])]
    forbidden = [f"uses {where(c)}{v}" for c in prepared for v in source.interview_violations(c["source"])]

    graded = {ex: protocol.Graded(ex) for ex in exercises}  # a fresh secret seed per submission
    plan = {"cell_timeout": float(cell_timeout), "cells": prepared,
            "exercises": {ex: graded[ex].plan() for ex in exercises}}
    buffer = io.BytesIO()
    torch.save(plan, buffer)
    outcome = jail.run(path, buffer.getvalue(), timeout=total_timeout, slot=slot, sandboxed=sandboxed)
    if outcome.timed_out:
        return _fail_all(report, exercises, "timeout", f"grading stopped after {total_timeout:g} s (an infinite loop?)")
    if outcome.too_big:
        return _fail_all(report, exercises, "crashed", "the submission's grading result was too large")
    if not outcome.result:
        tail = outcome.stderr_tail.strip().splitlines()[-1:]
        why = f"the submission ended the grading process (exit code {outcome.returncode}) before any result"
        if (tail and "MemoryError" in tail[0]) or outcome.returncode in (-9, 137):
            why += ", out of memory?"
        return _fail_all(report, exercises, "crashed", why + (f": {tail[0][:200]}" if tail else ""))
    try:
        data = torch.load(io.BytesIO(outcome.result), weights_only=True)
        if not isinstance(data, dict) or not isinstance(data.get("exercises"), dict):
            raise protocol.BadResult("not a mapping of exercises")
    except Exception as exc:  # noqa: BLE001 - a tampered result gets no credit, and no crash here
        return _fail_all(report, exercises, "crashed", f"unreadable grading result ({type(exc).__name__})")

    report.notes = notes + _strings(data.get("notes"))
    report.results += _answers(data.get("answers"))
    for ex in exercises:
        refusals = list(imports) + (list(forbidden) if ex in specs.INTERVIEW else [])
        if refusals:  # known from the source alone, whatever the child ran or failed to run
            report.results.append(verdict(ex, [], graded[ex].cases, refusals=refusals))
            continue
        entry = data["exercises"].get(ex)
        if not isinstance(entry, dict):
            report.results.append(failure(ex, "missing", f"{ex} was not graded"))
            continue
        missing = entry.get("missing")
        if missing is not None:
            hint = f" ({report.notes[0]})" if report.notes else ""
            report.results.append(failure(ex, "missing", str(missing)[:300] + hint))
            continue
        try:
            records = graded[ex].resolve(entry.get("records"))
        except protocol.BadResult as exc:
            report.results.append(failure(ex, "crashed", f"malformed grading result: {exc}"))
            continue
        report.results.append(verdict(ex, records, graded[ex].cases, assumed=graded[ex].assumed))
    return report
