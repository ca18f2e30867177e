"""What a new learner reads first says what is true: how long the course takes (the path table's times, summed),
how many notebooks there are, what the first `make setup` downloads, and a verdict that reads without an emoji font
(✅ and ❌ render as boxes there: the words around them must carry the verdict)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from course_utils.grade import __main__ as _cli  # noqa: F401  (the CLI's texts, its ❌ among them, join the catalogue)
from course_utils.grade.messages import TEXTS
from tests.course.test_learner_path import EN, ZH

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
FRACTIONS = {"": 0.0, "¼": 0.25, "½": 0.5, "¾": 0.75}
_HOURS = r"(\d+)([¼½¾]?)"
TOTALS = {  # how each README states the total: all, notebooks, exercises (hours)
    "README.md": re.compile(rf"about {_HOURS} hours, {_HOURS} of notebooks and {_HOURS} of exercises"),
    "README.zh-CN.md": re.compile(rf"大约 {_HOURS} 小时，\s*其中笔记本 {_HOURS} 小时，练习 {_HOURS} 小时"),
}


def _minutes(rows) -> tuple[int, int]:
    notebooks = exercises = 0
    for row in rows:
        notebook, exercise = map(int, re.findall(r"\d+", row[2]))
        notebooks, exercises = notebooks + notebook, exercises + exercise
    return notebooks, exercises


@pytest.mark.parametrize(("readme", "rows"), [("README.md", EN), ("README.zh-CN.md", ZH)])
def test_the_stated_total_time_is_the_tables_sum(readme, rows):
    stated = TOTALS[readme].search((ROOT / readme).read_text(encoding="utf-8"))
    assert stated, f"{readme} does not say how long the whole course takes"
    hours = [int(stated.group(i)) + FRACTIONS[stated.group(i + 1)] for i in (1, 3, 5)]
    notebooks, exercises = _minutes(rows)
    summed = [(notebooks + exercises) / 60, notebooks / 60, exercises / 60]
    said = [_quarters(h) for h in summed]
    sentence = (
        f"大约 {said[0]} 小时，其中笔记本 {said[1]} 小时，练习 {said[2]} 小时"
        if "zh-CN" in readme
        else f"about {said[0]} hours, {said[1]} of notebooks and {said[2]} of exercises"
    )
    assert all(abs(h - s) <= 0.125 for h, s in zip(hours, summed, strict=True)), (
        f"{readme}: the path table's times add up to {sentence!r}; it says {stated.group(0)!r}: write the sums"
    )


def _quarters(hours: float) -> str:
    """Hours to the nearest quarter, as the READMEs write them ("18½")."""
    whole, quarter = divmod(round(hours * 4), 4)
    return f"{whole}{['', '¼', '½', '¾'][quarter]}"


def test_the_prerequisites_are_stated():
    assert "**Before you start:**" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert "**开始之前：**" in (ROOT / "README.zh-CN.md").read_text(encoding="utf-8")


_COUNT = re.compile(r"(?:本课程|全部|共)\s*(\d+)\s*个笔记本|(?:the course's|all|the)\s+(\d+)\s+notebooks", re.I)


@pytest.mark.parametrize("page", ["README.md", "README.zh-CN.md", "notebooks/README.md", "notebooks/zh-CN/README.md"])
def test_a_stated_number_of_notebooks_is_the_number_there_are(page):
    for match in _COUNT.finditer((ROOT / page).read_text(encoding="utf-8")):
        said = int(match.group(1) or match.group(2))
        assert said == len(NOTEBOOKS), f"{page} says {match.group(0)!r}; there are {len(NOTEBOOKS)} notebooks"


def test_make_setup_says_what_it_downloads_and_shows_pips_progress():
    """The first `make setup` runs for minutes with pip: each download step is announced with its size, and the
    installer (pip, or uv through the recipe's `install`) is not silenced (-q) while it downloads."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for stamp in ("$(COURSE_STAMP):", "$(STAMP):"):
        recipe = makefile[makefile.index("\n" + stamp) :].split("\n\n")[0]
        installs = [
            line
            for line in recipe.splitlines()
            if re.search(r"pip install|\binstall (-r|--index-url)", line) and "echo" not in line
        ]
        assert installs, stamp
        for line in installs:
            if "--no-deps -e ." in line:  # the course's own folder: nothing to download
                continue
            assert " -q" not in line, f"{stamp} silences pip: {line.strip()}"
            before = recipe[: recipe.index(line)]
            announced = [e for e in re.findall(r'echo "(== [^"]*)"', before)]
            assert announced and re.search(r"\d+ [MG]B", announced[-1]), f"no size said before: {line.strip()}"


VERDICT_WORDS = {"en": re.compile(r"\b(passed|failed|not graded)\b"), "zh": re.compile(r"通过|未评分")}


@pytest.mark.parametrize("key", [k for k, (en, _) in TEXTS.items() if "✅" in en or "❌" in en])
def test_the_words_carry_the_verdict_without_the_emoji(key):
    for lang, template in zip(("en", "zh"), TEXTS[key], strict=True):
        words = template.replace("✅", "").replace("❌", "")
        assert VERDICT_WORDS[lang].search(words), f"{key} ({lang}) says its verdict only by an emoji: {template!r}"
        if "❌" in template:
            assert not re.search(r"\ball\b.*\bpassed\b|全部通过", words), (key, lang, template)
