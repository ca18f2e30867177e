"""python -m course_utils.grade [--exercise ID] [--json] PATH | --batch DIR [--out OUT]

Exit code 0 when every check passes, 1 otherwise (2 for usage errors).
"""
from __future__ import annotations

import argparse
import json
import sys

from . import runner
from .specs import EXERCISES
from .specs_capstone import EXERCISES as FUNCTION_EXERCISES  # capstone hook


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_utils.grade", description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", help="a .py file or an exercise notebook (.ipynb)")
    parser.add_argument("--exercise", choices=EXERCISES + FUNCTION_EXERCISES, help="grade only this exercise")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--batch", metavar="DIR", help="grade every submission in DIR")
    parser.add_argument("--out", default="grades", help="where --batch writes grades.csv and feedback/")
    parser.add_argument("--cell-timeout", type=float, default=runner.CELL_TIMEOUT, help="seconds per cell")
    parser.add_argument("--timeout", type=float, default=runner.TOTAL_TIMEOUT, help="seconds per submission")
    parser.add_argument("--workers", type=int, default=None, help="parallel submissions (default: CPU cores)")
    args = parser.parse_args(argv)
    limits = {"cell_timeout": args.cell_timeout, "total_timeout": args.timeout}
    if args.batch:
        from .batch import grade_folder
        try:
            graded = grade_folder(args.batch, args.out, workers=args.workers, **limits)
        except ValueError as exc:
            parser.error(str(exc))
        ok = sum(rep.passed for _, rep in graded)
        print(f"graded {len(graded)} submissions ({ok} passed everything): {args.out}/grades.csv")
        return 0 if ok == len(graded) else 1
    if not args.path:
        parser.error("give a PATH to grade, or --batch DIR")
    report = runner.grade_file(args.path, [args.exercise] if args.exercise else None, **limits)
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
