"""Grade one submission file: read it here, run it in a sandbox on cases drawn from a secret seed, and
compute the verdict here from the raw outputs that come back."""

from __future__ import annotations

import io
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from . import jail, limits, source
from .child import from_child
from .exercises import get
from .messages import Msg, resolve, text
from .protocol import BadResult, Graded, failure
from .questions import QUESTIONS, grade_answer

# this module's texts, key -> (English, Chinese)
TEXTS: dict[str, tuple[str, str]] = {
    "refusal.imports": ("imports {what}", "导入了 {what}"),
    "refusal.imports_cell": ("imports cell {cell}: {what}", "单元格 {cell} 导入了 {what}"),
    "run.cell_note": ("cell {cell}: {note}", "单元格 {cell}：{note}"),
    "run.interview_detected": (
        "graded as {exercise} (interview mode): no check() call names an exercise, and the "
        "file's classes are no exercise's contract; pass --exercise to choose another",
        "按 {exercise}（面试模式）评分：没有 check() 调用指明练习，文件里的类也不符合任何练习的接口"
        "约定；要按别的练习评分，请加 --exercise",
    ),
    "run.no_exercise": (
        'no exercise found: no check("id", ...) call and no contract class name',
        '没有找到练习：既没有 check("id", ...) 调用，也没有接口约定里的类名',
    ),
    "run.timeout": (
        "grading stopped after {seconds:g} s of computing, or {wall:g} s in all (an infinite loop?)",
        "评分被终止：计算超过了 {seconds:g} 秒，或总共超过了 {wall:g} 秒（是不是有死循环？）",
    ),
    "run.near_memory": (
        "stopped while holding {peak} MiB of its {limit} MiB memory limit: it kept allocating (a huge allocation "
        "in forward?)",
        "被终止时占用了 {peak} MiB 内存（上限 {limit} MiB）：它在不停地分配内存（forward 里有巨大的分配？）",
    ),
    "run.tried_memory": (
        "the submission tried to use more than {limit} MiB of memory (its allocation was refused)",
        "这份提交试图使用超过 {limit} MiB 的内存（分配被拒绝了）",
    ),
    "run.too_large": ("the submission's grading result was too large", "这份提交返回的评分结果太大了"),
    "run.ended": (
        "the submission ended the grading process (exit code {code}) before any result{memory}{tail}",
        "这份提交在给出任何结果之前就结束了评分进程（退出码 {code}）{memory}{tail}",
    ),
    "run.ended_memory": (", out of memory?", "，是不是内存不足？"),
    "run.ended_tail": (": {text}", "：{text}"),
    "run.unreadable": ("unreadable grading result ({type})", "评分结果无法读取（{type}）"),
    "run.malformed": ("malformed grading result: {why}", "评分结果的格式不对：{why}"),
    "run.not_graded": ("{exercise} was not graded", "{exercise} 没有被评分"),
    "run.missing_hint": ("{missing} ({note})", "{missing}（{note}）"),
    "run.over_memory": (
        "the submission used more than {limit} MiB of memory over all its processes (shared memory "
        "and temporary files included) and was stopped",
        "这份提交的所有进程（含共享内存和临时文件）一共用了超过 {limit} MiB 内存，被终止了",
    ),
    "run.over_processes": (
        "the submission started more than {limit} processes or threads and was stopped",
        "这份提交启动了超过 {limit} 个进程或线程，被终止了",
    ),
    "bad.exercises": ("not a mapping of exercises", "不是练习的字典"),
}

CELL_TIMEOUT = 10.0
TOTAL_TIMEOUT = limits.SUBMISSION_BUDGET  # per submission, all its sandbox runs together
MIN_GROUP_BUDGET = 1.0  # CPU seconds a later sandbox of a submission gets however little its budget has left


@dataclass
class SubmissionReport:
    path: str
    results: list = field(default_factory=list)  # Result per exercise
    notes: list = field(default_factory=list)  # cell errors and other remarks
    error: str | None = None  # why nothing could be graded
    peak_memory: int = 0  # bytes, the largest of its sandbox runs (0 where not measured)
    cpu_seconds: float = 0.0  # what its sandbox runs computed together: what it spent of its budget
    seconds: float = 0.0  # wall time, set by the batch
    limit_notes: list = field(default_factory=list, repr=False)  # limits hit by a run that still finished

    @property
    def passed(self) -> bool:
        return self.error is None and bool(self.results) and all(self.results)

    def to_dict(self, lang: str | None = None) -> dict:
        """Plain data, the texts in ``lang`` (default: the course's current language)."""
        lang = resolve(lang)
        return {
            "path": self.path,
            "passed": self.passed,
            "error": text(self.error, lang),
            "notes": [text(n, lang) for n in self.notes],
            "results": [r.to_dict(lang) for r in self.results],
        }


def _strings(value, limit=50) -> list:
    return [str(v)[:400] for v in value[:limit]] if isinstance(value, list) else []


def _notes(data) -> list:
    """The child's notes, as texts in the learner's language where it sent their said forms too."""
    notes, said = _strings(data.get("notes")), data.get("notes_said")
    said = said if isinstance(said, list) and len(said) >= len(notes) else [None] * len(notes)
    return [from_child(tree, note) for note, tree in zip(notes, said, strict=False)]


def _answers(raw) -> list:
    """Results for the numeric follow-ups the submission answered (the last answer to each question)."""
    if not isinstance(raw, list):
        return []
    latest = {}
    for item in raw[:20]:
        if isinstance(item, (list, tuple)) and len(item) == 2 and item[0] in QUESTIONS:
            value = item[1] if type(item[1]) in (int, float, str) else None
            if type(value) is int and not -(1 << 63) <= value < 1 << 63:  # no 9,000-digit str() in the grader
                value = float(value) if abs(value) < 1 << 1000 else float("inf")
            latest[item[0]] = value[:80] if isinstance(value, str) else value
    return [grade_answer(q, v) for q, v in latest.items()]


def _sandbox(
    path: Path,
    plan: dict,
    total_timeout: float,
    slot: int,
    sandboxed: bool,
    group: list,
    report: SubmissionReport,
    wall: float,
) -> tuple[Any, Any]:
    """(data, None) from a run of the harness on ``plan`` (its exercises ``group``: their kinds say what the sandbox
    adds) within ``total_timeout`` CPU seconds and ``wall`` seconds, or (None, (key, message)) when nothing usable
    came back. Adds the CPU time it used to ``report``."""
    buffer = io.BytesIO()
    torch.save(plan, buffer)
    env: dict[str, str] = {}
    mounts: list[str] = []
    withheld: dict[str, dict[str, str]] = {}
    for ex in group:
        env.update(ex.how.env)
        packages, functions = ex.how.mounts(ex)
        mounts += [p for p in packages if p not in mounts]
        withheld.update(functions)
    outcome = jail.run(
        path,
        buffer.getvalue(),
        timeout=total_timeout,
        wall=wall,
        slot=slot,
        sandboxed=sandboxed,
        mounts=tuple(mounts),
        withheld=withheld,
        env=env,
    )
    usage = outcome.usage
    report.peak_memory = max(report.peak_memory, usage.peak)
    report.cpu_seconds += outcome.cpu_seconds
    # memory first: what the accounting (the cgroup's events, the watchdog) saw, whatever the clock said after
    if usage.hit == "memory" and (outcome.timed_out or not outcome.result):
        return None, ("crashed", Msg("run.over_memory", limit=limits.MEMORY_TOTAL >> 20))
    if outcome.timed_out:
        return None, (
            "timeout",
            Msg("run.timeout", seconds=round(total_timeout, 1), wall=round(wall, 1)),
        )
    if outcome.too_big:
        return None, ("crashed", Msg("run.too_large"))
    if not outcome.result and usage.hit == "processes":
        return None, ("crashed", Msg("run.over_processes", limit=limits.MAX_TASKS))
    if not outcome.result:
        tail = outcome.stderr_tail.strip().splitlines()[-1:]
        memory = (tail and "MemoryError" in tail[0]) or outcome.returncode in (-9, 137)
        return None, (
            "crashed",
            Msg(
                "run.ended",
                code=outcome.returncode,
                memory=Msg("run.ended_memory") if memory else "",
                tail=Msg("run.ended_tail", text=tail[0][:200]) if tail else "",
            ),
        )
    try:
        data = torch.load(io.BytesIO(outcome.result), weights_only=True)
        if not isinstance(data, dict) or not isinstance(data.get("exercises"), dict):
            raise BadResult(Msg("bad.exercises"))
    except Exception as exc:  # noqa: BLE001 - a tampered result gets no credit, and no crash here
        return None, ("crashed", Msg("run.unreadable", type=type(exc).__name__))
    if usage.hit:  # it finished, but one of its processes was stopped at the limit
        report.limit_notes.append(
            Msg("run.over_memory", limit=limits.MEMORY_TOTAL >> 20)
            if usage.hit == "memory"
            else Msg("run.over_processes", limit=limits.MAX_TASKS)
        )
    return data, None


def grade_file(
    path,
    exercises=None,
    *,
    cell_timeout=CELL_TIMEOUT,
    total_timeout=TOTAL_TIMEOUT,
    sandboxed: bool = True,
    slot: int = 0,
) -> SubmissionReport:
    """Grade ``path`` (.py or .ipynb) on ``exercises`` (default: those found in it); never raises for a
    broken submission. The submission file is only read. ``sandboxed=False`` runs it in a plain child
    process (trusted submissions, or a machine without bubblewrap). An exercise whose kind mounts more of the course
    (the capstone's: the course's GPT, and so its attention modules) runs in a sandbox of its own."""
    path = Path(path)
    report = SubmissionReport(str(path))
    # the budget covers every sandbox this submission gets: CPU seconds (what each run computed is taken off for the
    # next), and the wall-clock backstop over them all
    backstop = time.monotonic() + total_timeout * limits.WALL_FACTOR
    for ex in exercises or []:
        get(ex)  # a clear error for an unknown exercise
    try:
        cells = source.read_cells(path)
    except source.SubmissionError as exc:
        report.error = exc.args[0]
        report.results = [failure(ex, "unreadable", exc.args[0]) for ex in exercises or []]
        return report
    fallback = [] if exercises else source.detected_interview(cells)
    exercises = list(exercises or source.find_exercises(cells))
    if not exercises:
        report.error = Msg("run.no_exercise")
        return report

    prepared, notes = [], [Msg("run.interview_detected", exercise=ex) for ex in fallback]
    for cell in cells:
        code, note = source.prepare_cell(cell["source"])
        if note:
            notes.append(Msg("run.cell_note", cell=cell["index"], note=note))
        if code.strip():
            prepared.append({"index": cell["index"], "source": code})

    def said(key, c, what):  # "imports cell 3: ..." when the submission has several cells
        return Msg(key + "_cell", cell=c["index"], what=what) if len(cells) > 1 else Msg(key, what=what)

    declared = [get(ex) for ex in exercises]

    found = [(c, imp) for c in prepared for imp in source.course_imports(c["source"])]
    refused = {  # the course's code each exercise's submission imports, and may not (its kind says what it may)
        ex.id: [said("refusal.imports", c, imp) for c, imp in found if not ex.how.allowed_import(ex, imp.args["name"])]
        for ex in declared
    }

    # the exercises a sandbox grades together, then each whose kind mounts more of the course (graded alone, so that
    # what it mounts reaches no other exercise)
    together = [ex for ex in declared if not ex.how.alone]
    groups = ([together] if together else []) + [[ex] for ex in declared if ex.how.alone]
    base = {"cell_timeout": float(cell_timeout), "cells": prepared}
    for group in groups:
        shared = group is together
        if not shared and all(refused[ex.id] for ex in group):  # known from the source alone: nothing to run
            report.results += [Graded(ex).verdict([], refused[ex.id]) for ex in group]
            continue
        graded = {ex.id: Graded(ex) for ex in group}  # a fresh secret seed per submission
        left = max(MIN_GROUP_BUDGET, total_timeout - report.cpu_seconds)
        wall = min(left * limits.WALL_FACTOR, max(MIN_GROUP_BUDGET * limits.WALL_FACTOR, backstop - time.monotonic()))
        plan = {**base, "exercises": {ex.id: graded[ex.id].plan() for ex in group}}
        data, failed = _sandbox(path, plan, left, slot, sandboxed, group, report, wall)
        if failed:
            report.results += [graded[ex.id].failure(*failed) for ex in group]
            if shared:  # the file's own run: nothing of it could be graded
                report.error = failed[1]
            continue
        if shared:
            report.notes = notes + _notes(data) + report.limit_notes
            report.results += _answers(data.get("answers"))
        elif not report.notes:
            report.notes = _notes(data)
        report.results += [
            _result(ex, data, graded[ex.id], refused[ex.id], report.notes, report.peak_memory) for ex in group
        ]
    return report


NEAR_MEMORY = 0.75  # a run stopped for time after holding this share of its memory total is told about its memory


def _result(ex, data, graded, imports, notes, peak: int = 0):
    """The Result of ``ex`` from what the child sent (``data``): the verdict on its records, or why there is none."""
    # interview mode's fused attention is refused by what runs (the records' calls), never by names in the text
    refusals = list(imports)
    if refusals:  # known from the source alone, whatever the child ran or failed to run
        return graded.verdict([], refusals)
    entry = data["exercises"].get(ex.id)
    if not isinstance(entry, dict):
        return graded.failure("missing", Msg("run.not_graded", exercise=ex.id))
    missing = entry.get("missing")
    if missing is not None:
        missing = from_child(entry.get("missing_said"), str(missing)[:300])
        stopped = stopped_as(missing)
        if stopped == "timeout" and peak >= limits.MEMORY_TOTAL * NEAR_MEMORY:  # the time went into allocating
            return graded.failure("crashed", Msg("run.near_memory", peak=peak >> 20, limit=limits.MEMORY_TOTAL >> 20))
        if stopped:  # the class was found and ran, but did not finish: it did not run, it is not missing
            return graded.failure(stopped, missing)
        if any(_allocation_refused(n) for n in notes):  # the cell that defines it ran out of memory
            return graded.failure("crashed", Msg("run.tried_memory", limit=limits.MEMORY_TOTAL >> 20))
        # a cell that failed (a syntax error) is the likelier story than a class never written
        key = "missing_after_error" if any(getattr(n, "key", "").startswith("cell_") for n in notes) else "missing"
        return graded.failure(key, Msg("run.missing_hint", missing=missing, note=notes[0]) if notes else missing)
    try:
        records = graded.resolve(entry.get("records"))
    except BadResult as exc:
        return graded.failure("crashed", Msg("run.malformed", why=exc.args[0] if exc.args else ""))
    return graded.verdict(records)


def stopped_as(missing) -> str | None:
    """'timeout' or 'crashed' when the child's "missing" says the exercise's run was stopped (a loop inside forward,
    an error outside the cases), None when the class or function was really not there."""
    if getattr(missing, "key", None) != "stopped":
        return None
    inner = missing.args.get("message")
    return "timeout" if getattr(inner, "key", None) == "timed_out" else "crashed"


def _allocation_refused(note) -> bool:
    """Whether a cell's note says an allocation was refused (the address-space cap, or the total's)."""
    args = getattr(note, "args", {}) or {}
    message = str(args.get("message", ""))
    return args.get("type") == "MemoryError" or "Cannot allocate memory" in message or "out of memory" in message
