"""Grade a folder of submissions (one file per learner) in parallel sandboxes; write grades.csv and
feedback/<file>.md. One broken submission never stops the batch."""
from __future__ import annotations

import csv
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .diagnose import failure
from .runner import SubmissionReport, grade_file
from .specs import EXERCISES

SUBMISSION_SUFFIXES = (".py", ".ipynb")


def feedback_markdown(name: str, report) -> str:
    lines = [f"# Feedback for {name}", ""]
    if report.error and not report.results:
        lines += [f"**Not graded:** {report.error}", ""]
    for r in report.results:
        lines.append(f"## {r.exercise}: {'passed' if r.passed else 'not passed'} "
                     f"({r.checks_passed}/{r.checks_total} checks, score {r.score:g})")
        lines += [""] + [f"- {m}" for m in r.messages] + [""]
    if report.notes:
        lines += ["## Problems while running your code", ""] + [f"- {n}" for n in report.notes] + [""]
    return "\n".join(lines)


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
                skipped.append((p.name, "a link to a file outside the submissions folder"))
                continue
        if not p.is_file():
            skipped.append((p.name, "not a file"))
        elif p.suffix not in SUBMISSION_SUFFIXES:
            skipped.append((p.name, "not a submission (.py or .ipynb)"))
        else:
            files.append(p)
    return files, skipped


def grade_folder(submissions, out="grades", workers=None, exercises=None, trusted=False, **limits):
    """Grade every submission in ``submissions``; returns ([(file name, report)], skipped, grader_failed)
    and writes grades.csv, feedback/ and skipped.txt into ``out``."""
    submissions, out = Path(submissions).resolve(), Path(out).resolve()
    if not submissions.is_dir():
        raise ValueError(f"submissions folder {submissions} does not exist")
    if out == submissions or submissions in out.parents:
        raise ValueError("the output folder must not be inside the submissions folder (submissions are read-only)")
    files, skipped = find_submissions(submissions)
    workers = workers or os.cpu_count() or 1
    failed_grader = []

    def one(item):
        slot, path = item
        try:
            return grade_file(path, exercises, sandboxed=not trusted, slot=slot % 1000, **limits)
        except Exception as exc:  # noqa: BLE001 - the grader's own failure: this row says so, the batch goes on
            failed_grader.append(path.name)
            report = SubmissionReport(str(path), error=f"the grader failed on this submission ({type(exc).__name__}: "
                                                        f"{str(exc)[:200]}); please report it")
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
            status = "passed" if rep.passed else (rep.error or "; ".join(
                f"{r.exercise}: {r.diagnosis}" for r in rep.results if not r.passed))
            writer.writerow([name, *row, f"{sum(scores.values()):g}", status])
    for name, rep in graded:  # the whole file name: alice.py and alice.ipynb get their own feedback
        (out / "feedback" / f"{name}.md").write_text(feedback_markdown(name, rep), encoding="utf-8")
    (out / "skipped.txt").write_text("".join(f"{name}: {why}\n" for name, why in skipped), encoding="utf-8")
    return graded, skipped, failed_grader
