"""python -m course_utils.grade [--exercise ID] [--json] [--lang L] PATH | --batch DIR [--out OUT] [--trust-submissions]

Exit code 0 when every check passes, 1 when something was graded and did not pass, 2 for usage errors
(and for --batch without a sandbox, unless --trust-submissions, or a folder with nothing to grade), 3 when the grader
itself failed. --batch reads a folder of files, or nbgrader's collected layout (a folder per learner).
--lang picks the language of the report, the feedback files and grades.csv's status column (default: the course's
current language: the environment variable ATTN_LANG, else Chinese inside a zh-CN folder, else English).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from ..lang import LANGUAGES, current_language, normalize_language
from . import jail, limits, runner
from .batch import grade_folder
from .escape import one_line, terminal
from .exercises import IDS
from .messages import Msg, text
from .names import shown
from .progress import Progress

# this module's texts, key -> (English, Chinese)
TEXTS: dict[str, tuple[str, str]] = {
    "run.no_sandbox": ("graded without a sandbox ({why})", "没有沙箱，直接运行评分（{why}）"),
    "cli.graded": (
        "graded {count} submissions in {seconds:.0f} s: {passed} passed everything, {failed} did not, "
        "{errors} could not be graded, {skipped} skipped; {out}",
        "{seconds:.0f} 秒评完了 {count} 份提交：{passed} 份全部通过，{failed} 份没有全部通过，{errors} 份无法评分，"
        "跳过 {skipped} 个文件；{out}",
    ),
    "cli.refuse_batch": (
        "error: refusing to grade a folder of submissions without a sandbox: {why}.\nSubmissions are "
        "code from other people; install bubblewrap, or pass --trust-submissions if you trust every "
        "file.",
        "错误：没有沙箱，拒绝评一整个文件夹的提交：{why}。\n提交的是别人写的代码；请安装 bubblewrap，"
        "如果你信任每一个文件，也可以加上 --trust-submissions。",
    ),
    "cli.skipped": ("skipped {name}: {why}", "跳过了 {name}：{why}"),
    "cli.grader_failed_on": ("error: the grader failed on {names}", "错误：评分器在这些提交上出错了：{names}"),
    "cli.need_path": ("give a PATH to grade, or --batch DIR", "请给出要评分的 PATH，或者用 --batch DIR"),
    "cli.grader_failed": ("error: the grader failed: {type}: {error}", "错误：评分器出错了：{type}：{error}"),
    "cli.not_graded": ("❌ not graded: {error}", "❌ 未评分：{error}"),
    "cli.note": ("   note: {note}", "   注：{note}"),
    "cli.nothing_graded": (
        "error: nothing to grade in {folder}: no .py or .ipynb file in it or in its learners' folders",
        "错误：{folder} 里没有可以评分的文件：它和它的学员文件夹里都没有 .py 或 .ipynb 文件",
    ),
}


def _language(value: str) -> str:
    try:
        return normalize_language(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_utils.grade", description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", help="a .py file or an exercise notebook (.ipynb)")
    parser.add_argument("--exercise", choices=IDS, help="grade only this exercise")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--batch", metavar="DIR", help="grade every submission in DIR, each in its own sandbox")
    parser.add_argument("--out", default="grades", help="where --batch writes grades.csv and feedback/")
    parser.add_argument(
        "--trust-submissions",
        action="store_true",
        help="run submissions without a sandbox (only for code you trust: your own, a colleague's)",
    )
    parser.add_argument("--cell-timeout", type=float, default=runner.CELL_TIMEOUT, help="seconds per cell")
    parser.add_argument(
        "--timeout",
        type=float,
        default=runner.TOTAL_TIMEOUT,
        help="seconds of wall time per submission, all its runs together (default: %(default)g)",
    )
    parser.add_argument(
        "--memory",
        type=int,
        default=limits.MEMORY_TOTAL >> 20,
        metavar="MIB",
        help="memory per submission over all its processes, shared memory and temporary files "
        "included (default: %(default)d)",
    )
    parser.add_argument("--workers", type=int, default=None, help="parallel submissions (default: CPU cores)")
    parser.add_argument(
        "--lang",
        type=_language,
        default=None,
        metavar="{" + ",".join(LANGUAGES) + "}",
        help="language of the report and the feedback (default: the course's current language, "
        "ATTN_LANG or the zh-CN folder, else en)",
    )
    args = parser.parse_args(argv)
    lang = args.lang or current_language()
    limits.MEMORY_TOTAL = args.memory << 20
    timeouts = {"cell_timeout": args.cell_timeout, "total_timeout": args.timeout}
    exercises = [args.exercise] if args.exercise else None
    no_sandbox = jail.probe()
    if args.batch:
        if no_sandbox and not args.trust_submissions:
            print(Msg("cli.refuse_batch", why=no_sandbox).render(lang), file=sys.stderr)
            return 2
        started = time.monotonic()
        try:
            graded, skipped, grader_failed = grade_folder(
                args.batch,
                args.out,
                workers=args.workers,
                exercises=exercises,
                trusted=args.trust_submissions,
                lang=lang,
                progress=Progress(lang),
                **timeouts,
            )
        except ValueError as exc:
            parser.error(terminal(text(exc.args[0], lang) if exc.args else str(exc)))
        for name, why in skipped:
            print(terminal(Msg("cli.skipped", name=shown(name), why=why).render(lang)))
        ok = sum(rep.passed for _, rep in graded)
        errors = sum(rep.error is not None for _, rep in graded)
        print(
            terminal(
                Msg(
                    "cli.graded",
                    count=len(graded),
                    passed=ok,
                    failed=len(graded) - ok - errors,
                    errors=errors,
                    skipped=len(skipped),
                    seconds=time.monotonic() - started,
                    out=f"{args.out}/grades.csv",
                ).render(lang)
            )
        )
        if not graded:
            print(terminal(Msg("cli.nothing_graded", folder=shown(args.batch)).render(lang)), file=sys.stderr)
            return 2
        if grader_failed:
            print(
                terminal(Msg("cli.grader_failed_on", names=", ".join(map(shown, grader_failed))).render(lang)),
                file=sys.stderr,
            )
            return 3
        return 0 if ok == len(graded) else 1
    if not args.path:
        parser.error(Msg("cli.need_path").render(lang))
    try:
        report = runner.grade_file(args.path, exercises, sandboxed=no_sandbox is None, **timeouts)
    except ValueError as exc:
        parser.error(text(exc.args[0], lang) if exc.args else str(exc))
    except Exception as exc:  # noqa: BLE001 - the grader's own failure
        print(Msg("cli.grader_failed", type=type(exc).__name__, error=str(exc)).render(lang), file=sys.stderr)
        return 3
    if no_sandbox:
        report.notes.append(Msg("run.no_sandbox", why=no_sandbox))
    if args.json:
        print(json.dumps(report.to_dict(lang), ensure_ascii=False, indent=1))
    else:
        if report.error and not report.results:  # learner text reaches the terminal cleaned (escape.terminal)
            print(terminal(one_line(Msg("cli.not_graded", error=report.error).render(lang))))
        for r in report.results:
            print(terminal(r.report(lang)))
        for note in report.notes:  # learner text (an exception's message): one line, whatever it holds
            print(terminal(one_line(Msg("cli.note", note=note).render(lang))))
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
