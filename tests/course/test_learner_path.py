"""The learner's path: one table (notebook, exercise, solution, time, interview questions) in README.md and
README.zh-CN.md, an exercise column in the notebooks' indexes, and a "next steps" cell closing every notebook that
links its exercise, that exercise's solution and the next notebook (the last one: the index), in both languages.

The pairing is the README's table; everything else must agree with it.
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")
QUESTION = re.compile(r"<summary>\s*\d+\.")
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def path_table(readme: Path) -> list[dict]:
    """The rows of the README's table whose header names the interview questions (面试题), as dicts."""
    rows, header = [], None
    for line in readme.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            if rows:
                break
            header = None
            continue
        cells = _cells(line)
        if header is None:
            header = cells
        elif set(line) <= set("|-: "):
            continue
        elif "interview questions" in header or "面试题" in header:
            rows.append(dict(zip(header, cells, strict=True)))
    return rows


def _pairing(readme: Path) -> list[tuple[str, str, str, str, str]]:
    """(notebook, exercise, solution, time, questions) per row, as paths relative to the repository root."""
    out = []
    for row in path_table(readme):
        values = list(row.values())
        (notebook,) = LINK.findall(values[1])
        exercise, solution = LINK.findall(values[2])
        out.append((notebook, exercise, solution, values[4], values[5]))
    return out


EN = _pairing(ROOT / "README.md")
ZH = _pairing(ROOT / "README.zh-CN.md")


def test_the_readmes_have_one_path_table_in_course_order():
    assert [Path(n).name for n, *_ in EN] == NOTEBOOKS, "README.md's path table lost a notebook or its order"
    assert [Path(n).name for n, *_ in ZH] == NOTEBOOKS, "README.zh-CN.md's path table lost a notebook or its order"
    for (nb, ex, sol, *_), (zh_nb, zh_ex, zh_sol, *_) in zip(EN, ZH, strict=True):
        assert nb == f"notebooks/{Path(nb).name}" and zh_nb == f"notebooks/zh-CN/{Path(nb).name}"
        assert ex == f"exercises/{Path(ex).name}" and zh_ex == f"exercises/zh-CN/{Path(ex).name}"
        assert sol == f"solutions/{Path(ex).name}" and zh_sol == f"solutions/zh-CN/{Path(ex).name}"
        for path in (nb, ex, sol, zh_nb, zh_ex, zh_sol):
            assert (ROOT / path).is_file(), path


def test_every_exercise_is_on_the_path_once():
    exercises = [Path(ex).name for _, ex, *_ in EN]
    assert sorted(exercises) == sorted(p.name for p in (ROOT / "exercises").glob("*.ipynb"))


def test_the_two_readmes_agree_on_times_and_questions():
    for (nb, _, _, time, questions), (_, _, _, zh_time, zh_questions) in zip(EN, ZH, strict=True):
        assert re.findall(r"\d+", time) == re.findall(r"\d+", zh_time), nb
        assert questions == zh_questions, nb


@pytest.mark.parametrize("row", EN, ids=lambda row: Path(row[0]).stem)
def test_interview_questions_are_counted_from_the_notebook(row):
    notebook, *_, questions = row
    for path in (ROOT / notebook, ROOT / "notebooks" / "zh-CN" / Path(notebook).name):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        asked = sum(len(QUESTION.findall("".join(c["source"]))) for c in cells if c["cell_type"] == "markdown")
        assert questions == str(asked), f"{path.relative_to(ROOT)} asks {asked} questions, the README says {questions}"


@pytest.mark.parametrize("index, base", [("notebooks/README.md", "../"), ("notebooks/zh-CN/README.md", "../../")])
def test_the_notebooks_indexes_link_each_notebooks_exercise(index, base):
    pairing = EN if "zh-CN" not in index else ZH
    expected = {Path(nb).name: (ex, sol) for nb, ex, sol, *_ in pairing}
    seen = {}
    for line in (ROOT / index).read_text(encoding="utf-8").splitlines():
        if re.match(r"^\| \d\d \|", line):
            links = LINK.findall(line)
            seen[links[0]] = tuple(link.removeprefix(base) for link in links[1:3])
    assert seen == expected, f"{index}: its exercise column does not follow the README's table"


def _next_steps_cases():
    cases = []
    for _folder, pairing, up in (("notebooks", EN, "../"), ("notebooks/zh-CN", ZH, "../../")):
        for k, (nb, ex, sol, *_) in enumerate(pairing):
            following = Path(pairing[k + 1][0]).name if k + 1 < len(pairing) else "README.md"
            cases.append(pytest.param(nb, up + ex, up + sol, following, id=nb))
    return cases


@pytest.mark.parametrize("notebook, exercise, solution, following", _next_steps_cases())
def test_every_notebook_ends_with_its_exercise_and_the_next_notebook(notebook, exercise, solution, following):
    last = json.loads((ROOT / notebook).read_text(encoding="utf-8"))["cells"][-1]
    assert last["cell_type"] == "markdown" and last.get("id") == "next-steps", (
        f"{notebook}: the last cell is not the markdown cell 'next-steps'"
    )
    text = "".join(last["source"])
    links = LINK.findall(text)
    assert links == [exercise, solution, following], (
        f"{notebook}: 'next-steps' links {links}; it should link {[exercise, solution, following]} (its exercise, "
        "the solution, then the next notebook or, for the last, the index)"
    )
    assert text.startswith("**下一步：**" if "zh-CN" in notebook else "**Next:**"), text
