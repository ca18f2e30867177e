"""A learner's own history of checks: every ``check()`` in a notebook appends one line (the exercise, the verdict,
the mistake the grader named, the time, when the notebook's kernel started) to a file where the notebook's kernel
runs, outside the repository; ``make progress`` (or ``show()`` in a notebook cell) reads it back as a table and a
small figure, in the learner's language.

The file lives where the kernel runs: the learner's own computer; on a JupyterHub, the learner's home on the hub's
server (the instructor's machine); on Binder, the session's container, gone when the session ends. Nothing is sent
anywhere, and nothing is recorded while an instructor grades (the sandbox, ``make grade``, nbgrader's autograde).
The file is ``$ATTN_HISTORY`` when that is set (``off``: record nothing), else ``attention-by-hand/checks.jsonl``
under ``$XDG_DATA_HOME`` (default ``~/.local/share``). Lines that are not a check's record (a hand edit, a write cut
off, another program's) are skipped, never an error; ``make progress-clear``
(``python -m course_utils.grade.history --clear``) deletes the file.

The time an exercise took: from the start of the kernel that checked it (opening the notebook) or from the previous
check in that kernel, to the first pass; pauses longer than ``BREAK_SECONDS`` are left out.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..lang import LANGUAGES, current_language, normalize_language, pick
from .escape import one_line, printable

HISTORY_ENV = "ATTN_HISTORY"
# records written before "named" was: what no named mistake is (the code did not run, was not there, or matched no
# known mistake), for those records only
NOT_MISTAKES = {
    "failed",
    "other",
    "not_implemented",
    "missing",
    "missing_after_error",
    "exception",
    "contract",
    "wrong_shape",
    "wrong_values",
    "wrong_answer",
    "timeout",
    "crashed",
    "unreadable",
    "grader_error",
}
BREAK_SECONDS = 30 * 60  # a pause longer than this between two checks of an exercise is a break, not work


def history_file() -> Path | None:
    """Where checks are recorded, or None when recording is off."""
    chosen = os.environ.get(HISTORY_ENV, "").strip()
    if chosen.lower() in ("off", "0", "no", "false"):
        return None
    if chosen:
        return Path(chosen).expanduser()
    data = os.environ.get("XDG_DATA_HOME", "").strip() or Path.home() / ".local" / "share"
    return Path(data) / "attention-by-hand" / "checks.jsonl"


def _kernel_started() -> float:
    """When this process (the notebook's kernel) started, as a Unix time; where that cannot be read, when this module
    was first imported (the first check cell)."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(
            int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime")
        )
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return _IMPORTED


_IMPORTED = time.time()
SESSION = _kernel_started()


def _instructor_run() -> bool:
    # nbgrader names its own runs (autograde, validate); the grader's batch and sandbox never call check()
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def record(result, now: float | None = None, session: float | None = None) -> bool:
    """Append ``result`` (a grade ``Result``) to the history; whether it was written. Never raises: a history that
    cannot be written must not break the learner's check."""
    path = history_file()
    if path is None or _instructor_run():
        return False
    from .exercises import mistake_said  # the exercises' mistakes (loaded already by check())

    first = result.messages[0] if result.messages and not result.passed else None
    mistake = None if result.passed else (result.diagnosis or "failed")
    entry = {
        "time": time.time() if now is None else now,
        "session": SESSION if session is None else session,
        "exercise": result.exercise,
        "passed": bool(result.passed),
        "checks_passed": result.checks_passed,
        "checks_total": result.checks_total,
        "mistake": mistake,
        # a misconception the grader names, not "not implemented yet", "timed out" or "matches no known mistake"
        "named": mistake is not None and mistake_said(mistake) is not None,
        "mistake_en": None if first is None else _render(first, "en"),
        "mistake_zh": None if first is None else _render(first, "zh"),
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a+b") as fh:
            fh.seek(0, os.SEEK_END)
            if fh.tell():  # a previous write cut off before its newline must not swallow this record
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    fh.write(b"\n")
            fh.write((json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8"))
    except OSError:
        return False
    return True


def _render(message, lang: str) -> str:
    render = getattr(message, "render", None)
    return render(lang) if render else str(message)


def read(path: Path | None = None) -> list:
    """The recorded checks, oldest first; lines that are not ours (a hand edit, a cut-off write) are skipped."""
    path = path or history_file()
    if path is None or not path.is_file():
        return []
    entries = []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if _ours(entry):
            entries.append(entry)
    return sorted(entries, key=lambda e: e["time"])


def _number(value) -> bool:
    return type(value) in (int, float) and value == value and abs(value) < 1e12  # no NaN, no bool, no overflow


def _ours(entry) -> bool:
    """Whether a line is a check's record, every field of the type record() writes (an older record may lack the
    newer fields)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("exercise"), str) or not _number(entry.get("time")):
        return False
    counts = [entry.get("checks_passed", 0), entry.get("checks_total", 0)]
    texts = [entry.get(k) for k in ("mistake", "mistake_en", "mistake_zh")]
    return (
        all(type(c) is int and 0 <= c < 1 << 31 for c in counts)
        and all(t is None or isinstance(t, str) for t in texts)
        and isinstance(entry.get("passed", False), bool)
        and isinstance(entry.get("named", True), bool)
        and (entry.get("session") is None or _number(entry.get("session")))
    )


def clear(path: Path | None = None) -> bool:
    """Delete the history; whether there was one."""
    path = path or history_file()
    if path is None or not path.exists():
        return False
    path.unlink()
    return True


# ---------------------------------------------------------------------------------------------------- the summary


@dataclass
class Progress:
    """One exercise as the learner has worked on it."""

    exercise: str
    checks: int = 0  # times check() ran
    passed: bool = False  # passed at least once
    best: str = ""  # the most checks passed at once, "p/t"
    seconds: float = 0.0  # from opening its notebook to the first pass (or the last check), breaks left out
    mistakes: dict = field(default_factory=dict)  # named mistake key -> (English, Chinese), in the order first made
    fixed: set = field(default_factory=set)  # mistakes followed by a pass


def summarise(entries: list) -> list:
    """Per exercise, in the order first checked."""
    found: dict = {}
    last: dict = {}
    in_session: dict = {}  # kernel start -> the last check made in that kernel
    made_at: dict = {}  # (exercise, mistake) -> when last made
    for entry in entries:
        ex, now, session = entry["exercise"], entry["time"], entry.get("session")
        p = found.setdefault(ex, Progress(ex))
        p.checks += 1
        # the work before this check: since the previous check of this exercise, or, the first time in a kernel,
        # since that kernel started (the notebook opened) or its previous check of another exercise
        since = last.get(ex)
        if session is not None and session <= now and (since is None or since < session):
            since = max(session, in_session.get(session, session))
        if not p.passed and since is not None:
            gap = now - since
            p.seconds += gap if 0 <= gap <= BREAK_SECONDS else 0.0
        last[ex] = now
        if session is not None:
            in_session[session] = now
        got, total = entry.get("checks_passed") or 0, entry.get("checks_total") or 0
        if not p.best or got / max(total, 1) >= _fraction(p.best):
            p.best = f"{got}/{total}"
        if entry.get("passed"):
            p.passed = True
            p.fixed |= {key for (e, key) in made_at if e == ex}
        elif entry.get("mistake") and entry.get("named", entry["mistake"] not in NOT_MISTAKES):
            key = entry["mistake"]
            p.mistakes.setdefault(key, (entry.get("mistake_en") or key, entry.get("mistake_zh") or key))
            made_at[(ex, key)] = now
            p.fixed.discard(key)
    return list(found.values())


def _fraction(best: str) -> float:
    got, _, total = best.partition("/")
    return int(got) / max(int(total or 1), 1)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def table(progress: list, lang: str | None = None) -> str:
    """The progress as a plain-text table in ``lang`` (default: the course's current language)."""
    lang = normalize_language(lang) if lang else current_language()
    if not progress:
        return pick(
            "No check recorded yet: run an exercise's check cell.", "还没有记录：先运行某道练习的检查单元格。", lang
        )
    head = [
        pick("exercise", "练习", lang),
        pick("status", "状态", lang),
        pick("checks", "检查次数", lang),
        pick("best", "最好成绩", lang),
        pick("time", "用时", lang),
    ]
    rows = [
        [
            p.exercise,
            pick("passed", "已通过", lang) if p.passed else pick("not yet", "未通过", lang),
            str(p.checks),
            p.best,
            _minutes(p.seconds),
        ]
        for p in progress
    ]
    rows = [[printable(cell, 60) for cell in row] for row in rows]  # the record is a file anyone could have written
    widths = [max(_width(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(_pad(c, w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [head, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    made = [(p.exercise, texts, key in p.fixed) for p in progress for key, texts in p.mistakes.items()]
    if made:
        lines += ["", pick("Mistakes the grader named:", "评分器指出过的错误：", lang)]
        for ex, (en, zh), fixed in made:
            state = pick("fixed", "已改正", lang) if fixed else pick("still open", "尚未改正", lang)
            ex, en, zh = printable(ex, 60), printable(one_line(en), 300), printable(one_line(zh), 300)
            lines.append(f"- {ex}：{zh}（{state}）" if lang == "zh" else f"- {ex}: {en} ({state})")
    return "\n".join(lines)


def _width(text: str) -> int:
    return sum(2 if ord(c) > 0x2E7F else 1 for c in text)  # a Chinese character takes two columns


def _pad(text: str, width: int) -> str:
    return text + " " * (width - _width(text))


def figure(progress: list, lang: str | None = None):
    """A small figure: checks per exercise, coloured passed / not yet. Returns the matplotlib Figure."""
    import matplotlib.pyplot as plt

    from .. import viz  # the course's figure settings, and its CJK font for a Chinese figure

    lang = normalize_language(lang) if lang else current_language()
    with plt.rc_context({"font.family": ["DejaVu Sans", viz.cjk_font()]} if lang == "zh" and viz.cjk_font() else {}):
        fig, ax = plt.subplots(figsize=(max(3.5, 0.6 * len(progress) + 2), 2.8))
        _draw_checks(ax, progress, lang)
        fig.tight_layout()
    return fig


def _draw_checks(ax, progress: list, lang: str) -> None:
    from matplotlib.patches import Patch

    passed, open_ = "#2e7d32", "#c62828"
    ax.bar(
        [p.exercise for p in progress],
        [p.checks for p in progress],
        color=[passed if p.passed else open_ for p in progress],
    )
    ax.set_title(pick("Your checks per exercise", "每道练习的检查次数", lang))
    ax.set_ylabel(pick("checks run", "检查次数", lang))
    ax.set_xlabel(pick("exercise", "练习", lang))
    ax.legend(
        handles=[
            Patch(color=passed, label=pick("passed", "已通过", lang)),
            Patch(color=open_, label=pick("not yet", "未通过", lang)),
        ],
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        frameon=False,
    )
    ax.tick_params(axis="x", labelrotation=45)
    for label in ax.get_xticklabels():
        label.set_horizontalalignment("right")


def show(lang: str | None = None):
    """In a notebook cell: print the table and show the figure."""
    progress = summarise(read())
    print(table(progress, lang))
    if progress:
        import matplotlib.pyplot as plt

        figure(progress, lang)
        plt.show()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course_utils.grade.history",
        description="Your own progress through the exercises (recorded by check()).",
    )
    parser.add_argument("--clear", action="store_true", help="delete the recorded history")
    parser.add_argument("--figure", metavar="PNG", help="also save the figure to this file")
    parser.add_argument("--lang", choices=LANGUAGES, default=None)
    args = parser.parse_args(argv)
    lang = args.lang or current_language()
    path = history_file()
    if args.clear:
        gone = clear()
        print(
            pick(
                f"history cleared ({path})" if gone else "no history to clear",
                f"已清除记录（{path}）" if gone else "没有可清除的记录",
                lang,
            )
        )
        return 0
    if path is None:
        print(pick(f"recording is off ({HISTORY_ENV}=off)", f"记录已关闭（{HISTORY_ENV}=off）", lang))
        return 0
    progress = summarise(read())
    print(table(progress, lang))
    print()
    print(
        pick(
            f"(recorded in {printable(path)}, where your notebooks' kernels run: your computer; on a JupyterHub, your "
            "home on the hub's server; on Binder, the session, lost when it ends. Time: from opening a notebook to "
            "its exercise's first pass, pauses over 30 minutes left out. make progress-clear deletes the record)",
            f"（记录在 {printable(path)}，也就是运行笔记本内核的地方：你的电脑；在 JupyterHub 上是你在 hub 服务器上的"
            "主目录；在 Binder 上是这次会话，会话结束就没了。用时：从打开笔记本到这道练习第一次通过，超过 30 分钟的"
            "停顿不算。make progress-clear 可清除记录）",
            lang,
        )
    )
    if args.figure and progress:
        import matplotlib

        matplotlib.use("Agg")
        figure(progress, lang).savefig(args.figure, dpi=120)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
