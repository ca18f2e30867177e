"""python -m course_utils.grade [--exercise ID] [--json] PATH | --batch DIR [--out OUT] [--trust-submissions]

Exit code 0 when every check passes, 1 when something was graded and did not pass, 2 for usage errors
(and for --batch without a sandbox, unless --trust-submissions), 3 when the grader itself failed.
"""
from __future__ import annotations

import argparse
import json
import sys

from . import runner
from .sandbox import jail
from .specs import EXERCISES
from .specs_capstone import EXERCISES as MODEL_EXERCISES  # the capstone


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_utils.grade", description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", help="a .py file or an exercise notebook (.ipynb)")
    parser.add_argument("--exercise", choices=EXERCISES + MODEL_EXERCISES, help="grade only this exercise")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--batch", metavar="DIR", help="grade every submission in DIR, each in its own sandbox")
    parser.add_argument("--out", default="grades", help="where --batch writes grades.csv and feedback/")
    parser.add_argument("--trust-submissions", action="store_true",
                        help="run submissions without a sandbox (only for code you trust: your own, a colleague's)")
    parser.add_argument("--cell-timeout", type=float, default=runner.CELL_TIMEOUT, help="seconds per cell")
    parser.add_argument("--timeout", type=float, default=runner.TOTAL_TIMEOUT, help="seconds per submission")
    parser.add_argument("--workers", type=int, default=None, help="parallel submissions (default: CPU cores)")
    args = parser.parse_args(argv)
    limits = {"cell_timeout": args.cell_timeout, "total_timeout": args.timeout}
    exercises = [args.exercise] if args.exercise else None
    no_sandbox = jail.probe()
    if args.batch:
        if no_sandbox and not args.trust_submissions:
            print(f"error: refusing to grade a folder of submissions without a sandbox: {no_sandbox}.\n"
                  "Submissions are code from other people; install bubblewrap, or pass --trust-submissions "
                  "if you trust every file.", file=sys.stderr)
            return 2
        from .batch import grade_folder
        try:
            graded, skipped, grader_failed = grade_folder(args.batch, args.out, workers=args.workers,
                                                          exercises=exercises,
                                                          trusted=args.trust_submissions, **limits)
        except ValueError as exc:
            parser.error(str(exc))
        for name, why in skipped:
            print(f"skipped {name}: {why}")
        ok = sum(rep.passed for _, rep in graded)
        print(f"graded {len(graded)} submissions ({ok} passed everything): {args.out}/grades.csv")
        if grader_failed:
            print(f"error: the grader failed on {', '.join(grader_failed)}", file=sys.stderr)
            return 3
        return 0 if ok == len(graded) else 1
    if not args.path:
        parser.error("give a PATH to grade, or --batch DIR")
    try:
        report = runner.grade_file(args.path, exercises, sandboxed=no_sandbox is None, **limits)
    except ValueError as exc:
        parser.error(str(exc))
    except Exception as exc:  # noqa: BLE001 - the grader's own failure
        print(f"error: the grader failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    if no_sandbox:
        report.notes.append(f"graded without a sandbox ({no_sandbox})")
    if args.json:
        print(json.dumps(report.to_dict(), ensure_ascii=False, indent=1))
    else:
        if report.error and not report.results:
            print(f"❌ {report.error}")
        for r in report.results:
            print(r.report())
        for note in report.notes:
            print(f"   note: {note}")
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
