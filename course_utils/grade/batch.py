"""Grade a folder of submissions (one file per learner) in parallel; write grades.csv and feedback/*.md."""
from __future__ import annotations

import csv
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .runner import grade_file
from .specs import EXERCISES
from .specs_capstone import EXERCISES as FUNCTION_EXERCISES  # capstone hook


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


def grade_folder(submissions, out="grades", workers=None, **limits) -> list:
    """Grade every .py/.ipynb file in ``submissions``; returns [(learner, report)] and writes into ``out``."""
    submissions, out = Path(submissions).resolve(), Path(out).resolve()
    if not submissions.is_dir():
        raise ValueError(f"submissions folder {submissions} does not exist")
    if out == submissions or submissions in out.parents:
        raise ValueError("the output folder must not be inside the submissions folder (submissions are read-only)")
    files = sorted(p for p in submissions.iterdir() if p.is_file() and not p.name.startswith("."))
    workers = workers or os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=workers) as pool:  # each submission is its own process
        reports = list(pool.map(lambda p: grade_file(p, **limits), files))
    graded = [(p.name, rep) for p, rep in zip(files, reports)]

    columns = [ex for ex in EXERCISES + FUNCTION_EXERCISES
               if any(r.exercise == ex for _, rep in graded for r in rep.results)]
    (out / "feedback").mkdir(parents=True, exist_ok=True)
    with open(out / "grades.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["learner", *columns, "total", "status"])
        for name, rep in graded:
            scores = {r.exercise: r.score for r in rep.results}
            row = [f"{scores[ex]:g}" if ex in scores else "" for ex in columns]
            total = sum(scores.values())
            status = "passed" if rep.passed else (rep.error or "; ".join(
                f"{r.exercise}: {r.diagnosis}" for r in rep.results if not r.passed))
            writer.writerow([name, *row, f"{total:g}", status])
    for name, rep in graded:
        (out / "feedback" / f"{Path(name).stem}.md").write_text(feedback_markdown(name, rep), encoding="utf-8")
    return graded
