"""Grade a folder of submissions (one file per learner) in parallel sandboxes; write grades.csv and
feedback/<file>.md. One broken submission never stops the batch. The feedback, the status column of grades.csv
and skipped.txt are written in one language (``lang``); the CSV's column names stay the same in every language."""
from __future__ import annotations

import csv
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .diagnose import failure
from .exercises import IDS as EXERCISES
from .messages import Msg, joined, resolve, text
from .runner import SubmissionReport, grade_file

SUBMISSION_SUFFIXES = (".py", ".ipynb")


def feedback_markdown(name: str, report, lang: str | None = None) -> str:
    """One learner's feedback file, in ``lang`` (default: the course's current language)."""
    lang = resolve(lang)
    lines = [Msg("batch.title", name=name).render(lang), ""]
    if report.error and not report.results:
        lines += [Msg("batch.not_graded", error=report.error).render(lang), ""]
    for r in report.results:
        lines.append(Msg("batch.passed" if r.passed else "batch.not_passed", exercise=r.exercise,
                         passed=r.checks_passed, total=r.checks_total, score=r.score).render(lang))
        lines += [""] + [f"- {text(m, lang)}" for m in r.messages] + [""]
    if report.notes:
        lines += [Msg("batch.problems").render(lang), ""] + [f"- {text(n, lang)}" for n in report.notes] + [""]
    return "\n".join(lines)


def status(report, lang: str | None = None) -> str:
    """grades.csv's status column: passed, why nothing was graded, or the diagnosis key of each failed exercise."""
    if report.passed:
        return Msg("batch.status_passed").render(lang)
    if report.error:
        return text(report.error, lang)
    return joined(Msg("batch.status", exercise=r.exercise, diagnosis=r.diagnosis)
                  for r in report.results if not r.passed).render(lang)


def find_submissions(folder: Path) -> tuple[list, list]:
    """(files to grade, [(name, why skipped)]): hidden files, folders, other file types and links that lead
    outside the folder are skipped."""
    files, skipped = [], []
    for p in sorted(folder.iterdir()):
        if p.name.startswith("."):
            continue
        if p.is_symlink():
            target = p.resolve()
            if folder not in target.parents:
                skipped.append((p.name, Msg("batch.link_outside")))
                continue
        if not p.is_file():
            skipped.append((p.name, Msg("batch.not_a_file")))
        elif p.suffix not in SUBMISSION_SUFFIXES:
            skipped.append((p.name, Msg("batch.not_a_submission")))
        else:
            files.append(p)
    return files, skipped


def grade_folder(submissions, out="grades", workers=None, exercises=None, trusted=False, lang=None, **limits):
    """Grade every submission in ``submissions``; returns ([(file name, report)], skipped, grader_failed)
    and writes grades.csv, feedback/ and skipped.txt into ``out``, in ``lang`` (default: the current language)."""
    lang = resolve(lang)
    submissions, out = Path(submissions).resolve(), Path(out).resolve()
    if not submissions.is_dir():
        raise ValueError(Msg("batch.no_folder", folder=str(submissions)))
    if out == submissions or submissions in out.parents:
        raise ValueError(Msg("batch.out_inside"))
    files, skipped = find_submissions(submissions)
    workers = workers or os.cpu_count() or 1
    failed_grader = []

    def one(item):
        slot, path = item
        try:
            return grade_file(path, exercises, sandboxed=not trusted, slot=slot % 1000, **limits)
        except Exception as exc:  # noqa: BLE001 - the grader's own failure: this row says so, the batch goes on
            failed_grader.append(path.name)
            report = SubmissionReport(str(path), error=Msg("batch.grader_failed", type=type(exc).__name__,
                                                           error=str(exc)[:200]))
            report.results = [failure(ex, "grader_error", report.error) for ex in exercises or []]
            return report

    with ThreadPoolExecutor(max_workers=workers) as pool:  # each submission is its own sandboxed process
        reports = list(pool.map(one, enumerate(files)))
    graded = [(p.name, rep) for p, rep in zip(files, reports)]

    seen = [r.exercise for _, rep in graded for r in rep.results]
    columns = [ex for ex in EXERCISES if ex in seen] + sorted({ex for ex in seen if ex not in EXERCISES})
    (out / "feedback").mkdir(parents=True, exist_ok=True)
    with open(out / "grades.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["learner", *columns, "total", "status"])
        for name, rep in graded:
            scores = {r.exercise: r.score for r in rep.results}
            row = [f"{scores[ex]:g}" if ex in scores else "" for ex in columns]
            writer.writerow([name, *row, f"{sum(scores.values()):g}", status(rep, lang)])
    for name, rep in graded:  # the whole file name: alice.py and alice.ipynb get their own feedback
        (out / "feedback" / f"{name}.md").write_text(feedback_markdown(name, rep, lang), encoding="utf-8")
    (out / "skipped.txt").write_text("".join(Msg("cli.skipped_line", name=name, why=why).render(lang) + "\n"
                                             for name, why in skipped), encoding="utf-8")
    return graded, skipped, failed_grader
