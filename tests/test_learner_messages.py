"""What course_utils prints or raises for a learner follows the notebook's language, as the grader's messages do.

Every ``raise SomeError(message, ...)`` and every ``print(...)`` in course_utils outside the grader (whose texts
have their own catalogue, course_utils/grade/) passes its message through ``pick(english, chinese)``
(``course_utils.lang``), so a Chinese notebook's learner reads Chinese. A few are exempt, each named with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import course_utils as cu
from course_utils import lang

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "course_utils"
NOT_FOR_LEARNERS = {
    "grade": "the grader: its texts are in its catalogue (messages.py, each exercise's TEXTS), both languages",
    "figure_check.py": "FigureProblems are for the course's authors, raised under nbval",
    "lang.py": "the error that names the languages themselves ('en' (English) or 'zh' (中文))",
}
# (file, what the first argument is): messages that are not English-only for another reason
EXEMPT = {
    ("viz.py", "NO_CJK_FONT_NOTICE"): "printed only in a Chinese notebook, in Chinese",
    ("capstone/induction.py", "main()"): "SystemExit(main()): an exit code, not a message",
}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in NOT_FOR_LEARNERS or rel.as_posix() in NOT_FOR_LEARNERS:
            continue
        yield rel.as_posix(), path.read_text(encoding="utf-8")


def _messages(source):
    """(line, source of the first argument, whether it is a pick(...) call) of each raise and print."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            call = node.exc
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
            call = node
        else:
            continue
        if not call.args:
            continue
        arg = call.args[0]
        picked = isinstance(arg, ast.Call) and getattr(arg.func, "id", getattr(arg.func, "attr", None)) == "pick"
        yield call.lineno, ast.get_source_segment(source, arg), picked


def test_every_message_of_course_utils_is_in_both_languages():
    english_only = [
        f"course_utils/{rel}:{line}: {text[:90]!r}"
        for rel, source in _modules()
        for line, text, picked in _messages(source)
        if not picked and (rel, text) not in EXEMPT
    ]
    assert not english_only, "messages for learners without pick(english, chinese):\n" + "\n".join(english_only)


def test_the_scan_sees_the_messages():
    found = sum(1 for _, source in _modules() for _ in _messages(source))
    assert found > 100, f"only {found} raises and prints found: has the scan stopped seeing them?"


@pytest.mark.parametrize(
    "call, english, chinese",
    [
        (lambda: cu.causal_mask(5, 3), "queries cannot follow only", "个查询不能只跟在"),
        (lambda: cu.chunk_positions(5, 3, "zigzag"), "cannot be cut into 6", "切不成 6 段"),
        (lambda: cu.MultiHeadAttention(8, 8, 4, 0.0, 3), "must divide evenly", "必须能整除"),
    ],
)
def test_a_chinese_learner_reads_the_error_in_chinese(call, english, chinese):
    try:
        for language, wanted in (("en", english), ("zh", chinese)):
            lang.set_language(language)
            with pytest.raises(ValueError, match=wanted):
                call()
    finally:
        lang.set_language(None)
