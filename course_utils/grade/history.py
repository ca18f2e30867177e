"""A learner's own history of checks: every ``check()`` in a notebook appends one line (the exercise, the verdict,
the mistake the grader named, the time) to a file on the learner's machine, outside the repository; ``make progress``
(or ``show()`` in a notebook cell) reads it back as a table and a small figure, in the learner's language.

Nothing leaves the machine and nothing is recorded while an instructor grades (the sandbox, ``make grade``,
nbgrader's autograde). The file is ``$ATTN_HISTORY`` when that is set (``off``: record nothing), else
``attention-by-hand/checks.jsonl`` under ``$XDG_DATA_HOME`` (default ``~/.local/share``). ``make progress-clear``
(``python -m course_utils.grade.history --clear``) deletes it.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..lang import LANGUAGES, current_language, normalize_language, pick

HISTORY_ENV = "ATTN_HISTORY"
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


def _instructor_run() -> bool:
    # nbgrader names its own runs (autograde, validate); the grader's batch and sandbox never call check()
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def record(result, now: float | None = None) -> bool:
    """Append ``result`` (a grade ``Result``) to the history; whether it was written. Never raises: a history that
    cannot be written must not break the learner's check."""
    path = history_file()
    if path is None or _instructor_run():
        return False
    first = result.messages[0] if result.messages and not result.passed else None
    entry = {
        "time": time.time() if now is None else now,
        "exercise": result.exercise,
        "passed": bool(result.passed),
        "checks_passed": result.checks_passed,
        "checks_total": result.checks_total,
        "mistake": None if result.passed else (result.diagnosis or "failed"),
        "mistake_en": None if first is None else _render(first, "en"),
        "mistake_zh": None if first is None else _render(first, "zh"),
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry, ensure_ascii=False) + "\n")
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
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(entry, dict)
            and isinstance(entry.get("exercise"), str)
            and isinstance(entry.get("time"), (int, float))
        ):
            entries.append(entry)
    return sorted(entries, key=lambda e: e["time"])


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
    seconds: float = 0.0  # from the first check to the first pass (or the last check), breaks left out
    mistakes: dict = field(default_factory=dict)  # mistake key -> (English, Chinese) text, in the order first made
    fixed: set = field(default_factory=set)  # mistakes followed by a pass


def summarise(entries: list) -> list:
    """Per exercise, in the order first checked."""
    found: dict = {}
    last: dict = {}
    made_at: dict = {}  # (exercise, mistake) -> when last made
    for entry in entries:
        ex, now = entry["exercise"], entry["time"]
        p = found.setdefault(ex, Progress(ex))
        p.checks += 1
        if not p.passed and ex in last:
            gap = now - last[ex]
            p.seconds += gap if gap <= BREAK_SECONDS else 0.0
        last[ex] = now
        got, total = entry.get("checks_passed") or 0, entry.get("checks_total") or 0
        if not p.best or got / max(total, 1) >= _fraction(p.best):
            p.best = f"{got}/{total}"
        if entry.get("passed"):
            p.passed = True
            p.fixed |= {key for (e, key) in made_at if e == ex}
        elif entry.get("mistake"):
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
    widths = [max(_width(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(_pad(c, w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [head, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    made = [(p.exercise, texts, key in p.fixed) for p in progress for key, texts in p.mistakes.items()]
    if made:
        lines += ["", pick("Mistakes the grader named:", "评分器指出过的错误：", lang)]
        for ex, (en, zh), fixed in made:
            state = pick("fixed", "已改正", lang) if fixed else pick("still open", "尚未改正", lang)
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
            f"(recorded on this machine only, in {path}; make progress-clear deletes it)",
            f"（只记录在本机：{path}；make progress-clear 可清除）",
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
