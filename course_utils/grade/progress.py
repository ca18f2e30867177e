"""What the instructor sees while a class grades: on a terminal, one bar redrawn in place with the count and the
time left; in a log (not a terminal), one line per file as it finishes. Names are escaped (``escape``)."""

from __future__ import annotations

import sys
import time

from .batch import status  # the status in words, as grades.csv has it
from .escape import one_line, terminal
from .messages import Msg
from .names import shown

# this module's texts, key -> (English, Chinese)
TEXTS: dict[str, tuple[str, str]] = {
    "batch.progress_line": (
        "[{done}/{count}] {name}: {status} ({seconds:.1f} s)",
        "[{done}/{count}] {name}：{status}（{seconds:.1f} 秒）",
    ),
    "batch.progress_bar": (
        "{bar} {done}/{count}, about {left:.0f} s left",
        "{bar} {done}/{count}，大约还要 {left:.0f} 秒",
    ),
}

BAR_WIDTH = 30


class Progress:
    def __init__(self, lang: str, stream=None, tty: bool | None = None):
        self.lang, self.stream = lang, stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.started = time.monotonic()

    def __call__(self, done: int, count: int, name: str, report):
        if self.tty:
            elapsed = time.monotonic() - self.started
            left = elapsed / done * (count - done)
            filled = BAR_WIDTH * done // max(count, 1)
            bar = "[" + "#" * filled + "." * (BAR_WIDTH - filled) + "]"
            line = Msg("batch.progress_bar", bar=bar, done=done, count=count, left=left).render(self.lang)
            self.stream.write("\r\x1b[K" + terminal(line) + ("\n" if done == count else ""))
        else:
            line = Msg(
                "batch.progress_line",
                done=done,
                count=count,
                name=shown(name),
                status=status(report, self.lang),
                seconds=report.seconds,
            ).render(self.lang)
            self.stream.write(terminal(one_line(line)) + "\n")
        self.stream.flush()
