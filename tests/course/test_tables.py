"""What the READMEs and the notebooks say of every exercise follows from the exercise's declaration (the registry,
grade/exercises/<id>.py) and its notebooks: each of the four tables of the course (both READMEs' path tables, both
notebooks' indexes) has its row, both READMEs' points sentence adds up the check cells nbgrader grades, and the
notebook before it points to it. A table's prose (a title, times, what a learner writes) is written by hand: a check
that fails says the row or the sentence to write, the links and the numbers filled in."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from course_utils.grade.exercises import EXERCISES
from tests.course.test_learner_path import questions_asked

ROOT = Path(__file__).resolve().parents[2]
FOLLOW_UPS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}
FOLLOW_UPS_ZH = {1: "一", 2: "两", 3: "三", 4: "四", 5: "五"}


def in_course_order() -> list:
    """The exercises in the order of their notebooks (the registry's is grades.csv's)."""
    return sorted(EXERCISES.values(), key=lambda ex: ex.notebook)


def number(ex) -> str:
    """The exercise's number as the course writes it: its notebook's prefix ("07"), with a letter where a notebook
    has several exercises ("17a", "17b", in the order of their notebooks)."""
    prefix = ex.notebook.split("_", 1)[0]
    siblings = [other for other in in_course_order() if other.notebook.split("_", 1)[0] == prefix]
    return prefix + ("abcdefgh"[siblings.index(ex)] if len(siblings) > 1 else "")


def numbers(exercises: list, lang: str) -> str:
    """The exercises' numbers as a sentence names them: runs of whole numbers as a range ("8-15"), the others one by
    one ("17a and 17b")."""
    parts: list[str] = []
    run: list[int] = []
    for label in [number(ex).lstrip("0") for ex in exercises] + [""]:
        if label.isdigit() and (not run or int(label) == run[-1] + 1):
            run.append(int(label))
            continue
        if run:
            parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}{'–' if lang == 'zh' else '-'}{run[-1]}")
        run = [int(label)] if label.isdigit() else []
        if label and not label.isdigit():
            parts.append(label)
    if lang == "zh":
        return "、".join(parts[:-1]) + " 和 " + parts[-1] if len(parts) > 1 else parts[0]
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]


def course_notebook(ex, lang: str = "en") -> Path:
    """The course's notebook the exercise practises (the one of the same number)."""
    folder = ROOT / "notebooks" / ("zh-CN" if lang == "zh" else "")
    prefix = ex.notebook.split("_", 1)[0]
    found = sorted(folder.glob(f"{prefix}_*.ipynb"))
    assert found, f"exercise {ex.id}: no notebook {folder.relative_to(ROOT)}/{prefix}_*.ipynb to practise"
    return found[0]


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _title(path: Path) -> str:
    heading = next(c for c in _cells(path) if c["cell_type"] == "markdown")
    return re.sub(r"^#+\s*(\d+\w*\s*[·.:-]\s*)?", "", "".join(heading["source"]).splitlines()[0]).strip()


# the four tables: file, the folders an exercise's row links into, the row to write for a new exercise
TABLES = {
    "README.md": (
        ("exercises/", "solutions/"),
        "| {n} | [{title}](notebooks/{course}) | [exercise {n}](exercises/{nb}.ipynb) ([solution](solutions/"
        "{nb}.ipynb)) | `{contract}` (what the learner writes) | <reading> + <exercise> min | {questions} |",
    ),
    "README.zh-CN.md": (
        ("exercises/zh-CN/", "solutions/zh-CN/"),
        "| {n} | [{title}](notebooks/zh-CN/{course}) | [练习 {n}](exercises/zh-CN/{nb}.ipynb)（[答案](solutions/zh-CN/"
        "{nb}.ipynb)） | `{contract}`（要写什么） | <阅读> + <练习> 分钟 | {questions} |",
    ),
    "notebooks/README.md": (
        ("../exercises/", "../solutions/"),
        "| {n} | [{title}]({course}) | [exercise {n}](../exercises/{nb}.ipynb) ([solution](../solutions/{nb}.ipynb))"
        " | <what you learn> | <key terms> |",
    ),
    "notebooks/zh-CN/README.md": (
        ("../../exercises/zh-CN/", "../../solutions/zh-CN/"),
        "| {n} | [{title}]({course}) | [练习 {n}](../../exercises/zh-CN/{nb}.ipynb)（[参考答案](../../solutions/zh-CN/"
        "{nb}.ipynb)） | <你会学到> | <关键术语> |",
    ),
}


@pytest.mark.parametrize("table", TABLES)
def test_every_exercise_has_its_row_in_every_table(table):
    text = (ROOT / table).read_text(encoding="utf-8")
    folders, row = TABLES[table]
    missing = []
    for ex in in_course_order():
        lang = "zh" if "zh-CN" in table else "en"
        for folder in ("exercises", "solutions"):
            assert (ROOT / folder / ("zh-CN" if lang == "zh" else "") / f"{ex.notebook}.ipynb").is_file(), (
                f"exercise {ex.id}: {folder}/{ex.notebook}.ipynb is missing ({'make twins, ' if lang == 'zh' else ''}"
                "make exercises)"
            )
        if not all(f"]({folder}{ex.notebook}.ipynb)" in text for folder in folders):
            course = course_notebook(ex, lang)
            filled = dict(n=number(ex), nb=ex.notebook, contract=ex.contract, course=course.name)
            missing.append(row.format(**filled, title=_title(course), questions=questions_asked(course)))
    assert not missing, f"{table}: add the row of each exercise below to its table, in course order:\n" + "\n".join(
        missing
    )


# ------------------------------------------------------------------------------------------------ the kinds


def kind_exercises(kind: str, lang: str) -> str:
    """The numbers of a kind's exercises as the map and the walk-through write them: "01-08, 10, 12" (runs of three
    or more as a range), "01–08、10、12" in Chinese."""
    labels = [number(ex) for ex in in_course_order() if ex.kind == kind]
    parts: list[str] = []
    i = 0
    while i < len(labels):
        j = i
        while j + 1 < len(labels) and labels[j + 1].isdigit() and labels[j].isdigit():
            if int(labels[j + 1]) != int(labels[j]) + 1:
                break
            j += 1
        parts += [f"{labels[i]}{'–' if lang == 'zh' else '-'}{labels[j]}"] if j - i >= 2 else labels[i : j + 1]
        i = j + 1
    return ("、" if lang == "zh" else ", ").join(parts)


_LABEL = r"\d\d[a-z]?(?:[-–]\d\d)?"
_TRAILING = re.compile(rf"({_LABEL}(?:(?:, |、){_LABEL})*)\s*$")


def trailing_numbers(text: str) -> str:
    """The exercises' numbers a parenthesis ends with ("a Triton kernel, 14" -> "14"), or ""."""
    found = _TRAILING.search(text)
    return found.group(1) if found else ""


# the documents that name every kind with its exercises: ARCHITECTURE.md's kinds/ entry, the walk-throughs
KIND_LISTS = {"ARCHITECTURE.md": "en", "CONTRIBUTING.md": "en", "CONTRIBUTING.zh-CN.md": "zh"}


@pytest.mark.parametrize("doc", KIND_LISTS)
def test_the_docs_name_every_kind_with_its_exercises(doc):
    from course_utils.grade.kinds import KINDS

    lang = KIND_LISTS[doc]
    text = re.sub(r"\n(?!\n)", "" if lang == "zh" else " ", (ROOT / doc).read_text(encoding="utf-8"))
    wrong = []
    for kind in KINDS:
        said = re.findall(rf"`?\b{kind}\b`?\s*[(（]([^()（）]*)[)）]", text)
        numbers = kind_exercises(kind, lang)
        if not any(trailing_numbers(inside) == numbers for inside in said):
            wrong.append(
                f"{kind} ({'<what it calls>' if lang == 'en' else '<它调用什么>'}{', ' if numbers else ''}{numbers})"
            )
    assert not wrong, (
        f"{doc}: where it lists the kinds of exercise, name each with the exercises of that kind, in course order: "
        + "; ".join(wrong)
    )


# ------------------------------------------------------------------------------------------------ the points


def check_cells(ex) -> list[int]:
    """The points of each check cell nbgrader grades in the exercise's solution notebook, in order."""
    cells = _cells(ROOT / "solutions" / f"{ex.notebook}.ipynb")
    return [c["metadata"]["nbgrader"]["points"] for c in cells if c["metadata"].get("nbgrader", {}).get("grade")]


def points_sentence(lang: str) -> str:
    """Both READMEs' sentence of the points, made from the check cells: the exercises before interview mode one by
    one, interview mode's own check and its follow-ups, then the exercises after it (one value each, or each's)."""
    exercises = in_course_order()
    at = next(i for i, ex in enumerate(exercises) if ex.interview)
    before, interview, after = exercises[:at], exercises[at], exercises[at + 1 :]
    own, *follow_ups = check_cells(interview)
    assert len(set(follow_ups)) == 1, "the sentence says 'each of its follow-ups': give them one value, or reword it"
    total = sum(sum(check_cells(ex)) for ex in exercises)
    first, last = (number(ex).lstrip("0") for ex in (before[0], before[-1]))
    points = [sum(check_cells(ex)) for ex in before]
    later = [sum(check_cells(ex)) for ex in after]
    if lang == "zh":
        tail = f"各 {later[0]} 分" if len(set(later)) == 1 else "依次为 " + "、".join(map(str, later)) + " 分"
        asked = f"{FOLLOW_UPS_ZH[len(follow_ups)]}道追问各 {follow_ups[0]} 分"
        return (
            f"练习 {first}–{last} 依次为 " + "、".join(map(str, points)) + f" 分；面试模式 {own + sum(follow_ups)} 分："
            f"MHA {own} 分，{asked}；练习 {numbers(after, 'zh')} {tail}，共 {total} 分"
        )
    tail = f"{later[0]} each" if len(set(later)) == 1 else ", ".join(map(str, later))
    return (
        f"{total} in all: " + ", ".join(map(str, points)) + f", {own + sum(follow_ups)} for interview mode ({own} for "
        f"the MHA, {follow_ups[0]} for each of its {FOLLOW_UPS[len(follow_ups)]} follow-ups), and {tail} for "
        f"exercises {numbers(after, 'en')}"
    )


@pytest.mark.parametrize("readme,lang", [("README.md", "en"), ("README.zh-CN.md", "zh")])
def test_the_points_sentence_adds_up_the_check_cells(readme, lang):
    text = (ROOT / readme).read_text(encoding="utf-8")
    joined = re.sub(r"\n(?!\n)", "" if lang == "zh" else " ", text)  # the sentence wraps over lines
    sentence = points_sentence(lang)
    assert sentence in joined, f"{readme}: the points sentence (under 'For instructors') should read: {sentence}"


# ------------------------------------------------------------------------------------------------ next steps


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_notebook_before_an_exercise_points_to_it(lang):
    """The course notebook of each exercise ends with a next-steps cell linking the exercise and its solution."""
    up = "../../" if lang == "zh" else "../"
    sub = "zh-CN/" if lang == "zh" else ""
    wrong = []
    for ex in in_course_order():
        course = course_notebook(ex, lang)
        last = _cells(course)[-1]
        text = "".join(last["source"]) if last.get("id") == "next-steps" else ""
        links = (f"({up}exercises/{sub}{ex.notebook}.ipynb)", f"({up}solutions/{sub}{ex.notebook}.ipynb)")
        if not all(link in text for link in links):
            n = number(ex)
            cell = (
                f"**下一步：** 在[练习 {n} · <练习名>]{links[0]}中动手练习（参考答案：[...]{links[1]}），然后继续学习 "
                "[<下一本笔记本>](...)。"
                if lang == "zh"
                else f"**Next:** practise this in [exercise {n} · <its title>]{links[0]} (solution: "
                f"[solutions/{ex.notebook}]{links[1]}), then go on to [<the next notebook>](...)."
            )
            wrong.append(f"{course.relative_to(ROOT)}: end it with the markdown cell 'next-steps': {cell}")
    assert not wrong, "\n".join(wrong)
