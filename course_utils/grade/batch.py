"""Grade a folder of submissions in parallel sandboxes; write grades.csv and feedback/<file>.md. A submission is
a file of the folder (its name the learner's), or the files inside one of its folders (the folder's name the
learner's: nbgrader's collected layout, ``submitted/<learner>/<assignment>/<notebook>.ipynb``). One broken
submission never stops the batch. The feedback, the status column of grades.csv
and skipped.txt are written in one language (``lang``); the CSV's column names stay the same in every language."""

from __future__ import annotations

import csv
import os
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from . import class_report, jail, names
from .escape import csv_cell, markdown, printable
from .exercises import IDS as EXERCISES
from .exercises import mistake_said
from .messages import Msg, joined, resolve, text
from .names import feedback_name, shown
from .points import points
from .protocol import failure
from .runner import SubmissionReport, grade_file

# this module's texts, key -> (English, Chinese)
TEXTS: dict[str, tuple[str, str]] = {
    "batch.title": ("# Feedback for {name}", "# {name} 的评分反馈"),
    "batch.not_graded": ("**Not graded:** {error}", "**未评分：**{error}"),
    "batch.passed": (
        "## {exercise}: passed ({passed}/{total} checks, {points:g} of {max:g} points)",
        "## {exercise}：通过（{total} 项检查通过了 {passed} 项，得 {points:g} 分，满分 {max:g}）",
    ),
    "batch.not_passed": (
        "## {exercise}: not passed ({passed}/{total} checks, {points:g} of {max:g} points)",
        "## {exercise}：未通过（{total} 项检查通过了 {passed} 项，得 {points:g} 分，满分 {max:g}）",
    ),
    "batch.problems": ("## Problems while running your code", "## 运行你的代码时出现的问题"),
    "batch.status_passed": ("passed", "通过"),
    "batch.status": ("{exercise}: {diagnosis}", "{exercise}：{diagnosis}"),
    "batch.grader_failed": (
        "the grader failed on this submission ({type}: {error}); please report it",
        "评分器在这份提交上出错了（{type}：{error}）；请报告这个问题",
    ),
    "batch.link_broken": (
        "a link that leads nowhere (a loop, or a missing file)",
        "无效的链接（循环链接，或者目标不存在）",
    ),
    "status.not_implemented": ("not implemented yet", "还没有实现"),
    "status.missing": ("not found in the file", "文件里没有找到"),
    "status.missing_after_error": (
        "not found: a cell failed before it (see the feedback)",
        "没有找到：在它之前有单元格出错（见反馈）",
    ),
    "status.exception": ("raised an error", "运行出错"),
    "status.contract": ("breaks the contract", "不符合接口约定"),
    "status.wrong_shape": ("wrong output shape", "输出形状不对"),
    "status.wrong_values": ("wrong values", "输出数值不对"),
    "status.wrong_answer": ("wrong answer", "答案不对"),
    "status.timeout": ("stopped: too slow", "超时，被终止"),
    "status.crashed": ("the run crashed", "运行崩溃"),
    "status.unreadable": ("the file cannot be read", "文件无法读取"),
    "status.grader_error": ("the grader failed", "评分器出错"),
    "status.forbidden": ("no credit: uses a built-in attention", "不得分：用了内置的注意力实现"),
    "status.delegates": ("no credit: uses the course's reference code", "不得分：用了课程的参考实现"),
    "status.other": ("not passed", "未通过"),
    "batch.link_outside": ("a link to a file outside the submissions folder", "指向提交文件夹之外的链接"),
    "batch.not_a_file": ("not a file", "不是文件"),
    "batch.empty_folder": (
        "a folder with no submission (.py or .ipynb) inside",
        "文件夹里没有提交文件（.py 或 .ipynb）",
    ),
    "batch.not_a_submission": ("not a submission (.py or .ipynb)", "不是提交文件（.py 或 .ipynb）"),
    "batch.no_folder": ("submissions folder {folder} does not exist", "提交文件夹 {folder} 不存在"),
    "batch.out_inside": (
        "the output folder must not be inside the submissions folder (submissions are read-only)",
        "输出文件夹不能放在提交文件夹里面（提交的文件只读）",
    ),
    "cli.skipped_line": ("{name}: {why}", "{name}：{why}"),
}

SUBMISSION_SUFFIXES = (".py", ".ipynb")


def _heading(line: str) -> str:
    """A rendered line with its Markdown heading marks kept and the rest escaped."""
    marks, _, rest = line.partition(" ") if line.startswith("#") else ("", "", line)
    return (marks + " " if marks else "") + markdown(rest)


def feedback_markdown(name: str, report, lang: str | None = None) -> str:
    """One learner's feedback file, in ``lang`` (default: the course's current language). Everything that comes
    from the submission (its name, its errors) is escaped: no HTML and no heading of its own."""
    lang = resolve(lang)
    lines = [_heading(Msg("batch.title", name=shown(name)).render(lang)), ""]
    if report.error and not report.results:
        lines += [Msg("batch.not_graded", error="").render(lang) + markdown(text(report.error, lang)), ""]
    for r in report.results:
        worth = points(r.exercise)
        lines.append(
            _heading(
                Msg(
                    "batch.passed" if r.passed else "batch.not_passed",
                    exercise=text(r.exercise, lang),
                    passed=r.checks_passed,
                    total=r.checks_total,
                    points=round(r.score * worth, 2),
                    max=worth,
                ).render(lang)
            )
        )
        lines += [""] + [f"- {markdown(text(m, lang))}" for m in r.messages] + [""]
    if report.notes:
        lines += [Msg("batch.problems").render(lang), ""] + [f"- {markdown(text(n, lang))}" for n in report.notes]
        lines += [""]
    return "\n".join(lines)


def _words(r) -> Msg:
    """A failed exercise's status in words: the mistake it makes, or what kind of failure it is."""
    key = r.diagnosis or "other"
    said = mistake_said(key)
    if said is not None:
        return said
    return Msg("status." + key) if "status." + key in TEXTS else Msg("status.other")


def status(report, lang: str | None = None) -> str:
    """grades.csv's status column, in words: passed, why nothing was graded, or what each failed exercise did."""
    if report.passed:
        return Msg("batch.status_passed").render(lang)
    if report.error:
        return text(report.error, lang)
    return joined(
        Msg("batch.status", exercise=r.exercise, diagnosis=_words(r)) for r in report.results if not r.passed
    ).render(lang)


def status_key(report) -> str:
    """grades.csv's key column: the same verdict as machine keys (``mha:scale_no_sqrt``, ``source.empty``)."""
    if report.passed:
        return "passed"
    if report.error and not report.results:
        return getattr(report.error, "key", "error")
    return ";".join(f"{r.exercise}:{r.diagnosis or 'failed'}" for r in report.results if not r.passed)


def named_mistake(key: str | None) -> bool:
    """Whether a diagnosis names a mistake (a mutant of the catalogue) rather than says the code did not run, was
    not there, or computed something no known mistake explains."""
    return bool(key) and mistake_said(str(key)) is not None


def class_rows(graded, lang: str) -> list:
    """The graded folder as the class report's rows: points, and each failed exercise's mistake in words."""
    rows = []
    learners = Counter(learner_of(name) for name, _ in graded)
    for name, rep in graded:
        outcomes = {
            r.exercise: class_report.Outcome(
                r.score * points(r.exercise),
                points(r.exercise),
                r.passed,
                None if r.passed else (r.diagnosis or "other"),
                None if r.passed else _words(r).render(lang),
                named=not r.passed and named_mistake(r.diagnosis),
            )
            for r in rep.results
        }
        # not graded exactly where the terminal says so (cli.graded's count): the report's numbers are the same
        error = text(rep.error, lang) if rep.error is not None else None
        shown_name = shown(learner_of(name))
        if learners[learner_of(name)] > 1:  # several submissions in one learner's folder: which one
            shown_name += f" ({shown(name.split('/', 1)[1])})"
        rows.append(class_report.Learner(shown_name, rep.seconds, outcomes, error, key=names.key(name)))
    return rows


def _link_ok(root: Path, entry: os.DirEntry, skipped: list, name: str) -> bool:
    """Whether ``entry`` may be followed: a link must lead to an existing file inside ``root``."""
    try:
        if entry.is_symlink():
            target = (Path(entry.path)).resolve(strict=True)
            if root not in target.parents:
                skipped.append((name, Msg("batch.link_outside")))
                return False
        entry.is_file()
        return True
    except (OSError, RuntimeError):  # ELOOP, a dangling link, a name the filesystem refuses to stat
        skipped.append((name, Msg("batch.link_broken")))
        return False


def _inside(root: Path, folder: Path, prefix: str, skipped: list, files: list, depth: int = 0) -> None:
    """The submissions inside a learner's folder (nbgrader's ``<learner>/<assignment>/<notebook>.ipynb``): files
    with a submission's suffix, hidden entries and other files (timestamp.txt) left out, links never followed out."""
    try:
        with os.scandir(folder) as entries:
            listed = sorted(entries, key=lambda e: os.fsencode(e.name))
    except OSError:
        return
    for entry in listed:
        name = f"{prefix}/{entry.name}"
        if entry.name.startswith(".") or not _link_ok(root, entry, skipped, name):
            continue
        if entry.is_dir(follow_symlinks=False) and depth < 3:
            _inside(root, folder / entry.name, name, skipped, files, depth + 1)
        elif entry.is_file() and Path(entry.name).suffix in SUBMISSION_SUFFIXES:
            files.append(folder / entry.name)


def find_submissions(folder: Path) -> tuple[list, list]:
    """(files to grade, [(name, why skipped)]): the files of ``folder``, and the submissions inside each of its
    folders (a learner's, as nbgrader collects them); hidden entries, other file types, links that lead outside the
    folder or nowhere (loops) are skipped. Names are as the filesystem has them (bytes that are not UTF-8 as
    surrogates), so that every file can be opened; ``names.shown`` is for display."""
    files: list = []
    skipped: list = []
    with os.scandir(folder) as entries:
        listed = sorted(entries, key=lambda e: os.fsencode(e.name))
    for entry in listed:
        p = folder / entry.name
        if entry.name.startswith(".") or not _link_ok(folder, entry, skipped, entry.name):
            continue
        if entry.is_dir(follow_symlinks=False):
            before = len(files)
            _inside(folder, p, entry.name, skipped, files)
            if len(files) == before:
                skipped.append((entry.name, Msg("batch.empty_folder")))
        elif not entry.is_file():
            skipped.append((entry.name, Msg("batch.not_a_file")))
        elif p.suffix not in SUBMISSION_SUFFIXES:
            skipped.append((entry.name, Msg("batch.not_a_submission")))
        else:
            files.append(p)
    return files, skipped


def learner_of(name: str) -> str:
    """Whose a submission is, from its name in the batch: a file's own name, or its learner folder's."""
    return name.split("/", 1)[0]


def grade_folder(
    submissions: str | os.PathLike[str],
    out: str | os.PathLike[str] = "grades",
    workers: int | None = None,
    exercises: list[str] | None = None,
    trusted: bool = False,
    lang: str | None = None,
    progress: Callable[[int, int, str, SubmissionReport], object] | None = None,
    **limits,
) -> tuple[list[tuple[str, SubmissionReport]], list[tuple[str, Msg]], list[str]]:
    """Grade every submission in ``submissions``; returns ([(file name, report)], skipped, grader_failed)
    and writes grades.csv, feedback/ and skipped.txt into ``out``, in ``lang`` (default: the current language).
    ``progress(done, count, name, report)`` is called as each submission finishes (``report.seconds`` it took)."""
    lang = resolve(lang)
    submissions, out = Path(submissions).resolve(), Path(out).resolve()
    if not submissions.is_dir():
        raise ValueError(Msg("batch.no_folder", folder=shown(str(submissions))))
    if out == submissions or submissions in out.parents:
        raise ValueError(Msg("batch.out_inside"))
    files, skipped = find_submissions(submissions)
    workers = workers or os.cpu_count() or 1
    failed_grader = []

    def one(item):
        slot, path = item
        started = time.monotonic()
        try:
            try:
                report = grade_file(path, exercises, sandboxed=not trusted, slot=slot % 1000, **limits)
            except Exception:  # noqa: BLE001 - the grader's own failure (the host's, never the file's): once more
                report = grade_file(path, exercises, sandboxed=not trusted, slot=slot % 1000, **limits)
        except Exception as exc:  # noqa: BLE001 - failed twice: this row says so, the batch goes on
            failed_grader.append(path.name)
            report = SubmissionReport(
                str(path), error=Msg("batch.grader_failed", type=type(exc).__name__, error=printable(exc, 200))
            )
            report.results = [failure(ex, "grader_error", report.error) for ex in exercises or []]
        report.seconds = time.monotonic() - started
        return report

    reports: list = [None] * len(files)
    # each submission is its own sandboxed process: a fork server's child (one server per worker), or its own sandbox
    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(one, item): item[0] for item in enumerate(files)}
            for done, future in enumerate(as_completed(futures), start=1):
                i = futures[future]
                reports[i] = future.result()
                if progress is not None:
                    progress(done, len(files), os.fsdecode(files[i].relative_to(submissions)), reports[i])
    finally:
        jail.close_servers()
    # each submission by its path in the folder ("alice/workshop/04.ipynb", or "alice.py"): unique in the batch
    graded = [(os.fsdecode(p.relative_to(submissions)), rep) for p, rep in zip(files, reports, strict=False)]

    seen = [r.exercise for _, rep in graded for r in rep.results]
    columns = [ex for ex in EXERCISES if ex in seen] + sorted({ex for ex in seen if ex not in EXERCISES})
    (out / "feedback").mkdir(parents=True, exist_ok=True)
    taken: set = set()
    feedback_files = [feedback_name(name, taken) for name, _ in graded]
    with open(out / "grades.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        # the learner as shown (cut when very long) and its key (whole, one per submission), points as nbgrader
        # counts them (a check cell's points times the share of checks passed), the fraction of the points, the
        # status in words, the same as machine keys, and the feedback file
        header = ["learner", "learner_key", *columns, "total", "max", "fraction", "status", "key", "feedback"]
        writer.writerow(header)
        for (name, rep), feedback in zip(graded, feedback_files, strict=False):
            got = {r.exercise: r.score * points(r.exercise) for r in rep.results}
            worth = sum(points(r.exercise) for r in rep.results)
            row = [f"{round(got[ex], 2):g}" if ex in got else "" for ex in columns]
            total = round(sum(got.values()), 2)
            writer.writerow(
                [
                    csv_cell(shown(learner_of(name))),
                    names.key(name),
                    *row,
                    f"{total:g}",
                    f"{worth:g}",
                    f"{total / worth:.3f}" if worth else "0",
                    csv_cell(status(rep, lang)),
                    csv_cell(status_key(rep)),
                    csv_cell("feedback/" + feedback),
                ]
            )
    for (name, rep), feedback in zip(graded, feedback_files, strict=False):
        (out / "feedback" / feedback).write_text(feedback_markdown(name, rep, lang), encoding="utf-8")
    class_report.write(class_rows(graded, lang), columns, out, lang)
    (out / "skipped.txt").write_text(
        "".join(Msg("cli.skipped_line", name=shown(name), why=why).render(lang) + "\n" for name, why in skipped),
        encoding="utf-8",
    )
    return graded, skipped, failed_grader
