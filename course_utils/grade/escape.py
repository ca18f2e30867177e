"""Learner text on its way out: to the instructor's terminal, into feedback Markdown, into grades.csv. Whatever a
submission names (its file name, an exception's class and message) is text to show, never markup or control:
no terminal escapes, no HTML or headings of its own in the feedback, no spreadsheet formulas."""

from __future__ import annotations

import re

# C0 and C1 controls, DEL, and the bidirectional overrides that reorder what a line seems to say
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# what str.splitlines, a terminal or a Markdown renderer may take for the end of a line
_LINE_BREAK = re.compile("\r\n|[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
_SURROGATE = re.compile("[\udc80-\udcff]")  # a byte of a file name that is not UTF-8 (os.fsdecode)
_OTHER_SURROGATE = re.compile("[\ud800-\udfff]")
# what could make learner text markup in a line of the feedback: raw HTML (as entities), code spans, links and
# images, and '#' (after the grader's "- " a leading '#' would open a heading); newlines are joined, so no block
# of its own (heading, quote, table, setext underline) can start. Emphasis with * or _ is left alone: harmless,
# and identifiers (head_dim) stay readable in the raw file
_MARKDOWN = re.compile(r"([\\`\[\]#])")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}  # entities: literal in every Markdown renderer
_BLOCK_START = tuple("-+*=|>")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def printable(text, limit: int | None = None) -> str:
    """``text`` (any object) with control characters shown as \\xNN, on one line; cut to ``limit`` characters."""
    text = str(text)
    text = _SURROGATE.sub(lambda m: f"\\x{ord(m.group()) - 0xDC00:02x}", text)
    text = _OTHER_SURROGATE.sub("\ufffd", text)
    text = _CONTROL.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text
    )
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def one_line(text) -> str:
    """``text`` (any object) on one line: each line break shown as ⏎, so that learner text inside a verdict (an
    exception's class or message) can never start a line of its own, such as a forged pass line."""
    return _LINE_BREAK.sub(" ⏎ ", str(text))


def terminal(text) -> str:
    """A line for the instructor's terminal or a log: no escape sequence, no carriage return, no bidi override;
    newlines kept only between lines (each line cleaned)."""
    return "\n".join(printable(line) for line in str(text).split("\n"))


def _grader_places() -> list:
    """The grader's own folders, longest first: the Python environments and the course package it runs from."""
    import os
    import sys

    course = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    places = {sys.prefix, sys.base_prefix, os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix), course}
    return sorted((p for p in places if len(p) > 1), key=len, reverse=True)


def without_grader_paths(text) -> str:
    """``text`` with the grader's folders (the instructor's environment, the course package) written as ``<python>``
    and ``<course_utils>``: a learner's feedback says where in torch an error arose, not where the instructor keeps
    things."""
    import os

    text = str(text)
    course = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for place in _grader_places():
        text = text.replace(place, "<course_utils>" if place == course else "<python>")
    return text


def markdown(text) -> str:
    """Learner text inside a line of the feedback's Markdown: shown as it is, never interpreted, and without the
    grader's own paths."""
    text = printable(one_line(without_grader_paths(text))).strip()
    text = _MARKDOWN.sub(r"\\\1", re.sub("[&<>]", lambda m: _HTML[m.group()], text))
    return "\\" + text if text.startswith(_BLOCK_START) else text


def csv_cell(value) -> str:
    """A grades.csv cell that a spreadsheet shows as text: no control characters, and a cell that would start a
    formula gets a leading apostrophe (OWASP's advice for CSV injection)."""
    text = printable(value)
    if text[:1] in FORMULA_START or text.lstrip()[:1] in FORMULA_START:
        text = "'" + text
    return text
