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


def _pairing(readme: Path) -> list[tuple[str, list[tuple[str, str]], str, str]]:
    """(notebook, [(exercise, solution), ...], time, questions) per row, as paths relative to the repository root (a
    notebook with two exercises, as notebook 17, lists both pairs in its exercise column)."""
    out = []
    for row in path_table(readme):
        values = list(row.values())
        (notebook,) = LINK.findall(values[1])
        links = LINK.findall(values[2])
        assert links and len(links) % 2 == 0, f"{readme.name}: the exercise column of {notebook} needs pairs: {links}"
        out.append((notebook, list(zip(links[::2], links[1::2], strict=True)), values[4], values[5]))
    return out


EN = _pairing(ROOT / "README.md")
ZH = _pairing(ROOT / "README.zh-CN.md")


def test_the_readmes_have_one_path_table_in_course_order():
    assert [Path(n).name for n, *_ in EN] == NOTEBOOKS, "README.md's path table lost a notebook or its order"
    assert [Path(n).name for n, *_ in ZH] == NOTEBOOKS, "README.zh-CN.md's path table lost a notebook or its order"
    for (nb, pairs, *_), (zh_nb, zh_pairs, *_) in zip(EN, ZH, strict=True):
        assert nb == f"notebooks/{Path(nb).name}" and zh_nb == f"notebooks/zh-CN/{Path(nb).name}"
        assert len(pairs) == len(zh_pairs), nb
        for (ex, sol), (zh_ex, zh_sol) in zip(pairs, zh_pairs, strict=True):
            assert ex == f"exercises/{Path(ex).name}" and zh_ex == f"exercises/zh-CN/{Path(ex).name}"
            assert sol == f"solutions/{Path(ex).name}" and zh_sol == f"solutions/zh-CN/{Path(ex).name}"
            for path in (nb, ex, sol, zh_nb, zh_ex, zh_sol):
                assert (ROOT / path).is_file(), (
                    f"the READMEs' path tables link {path}, which does not exist (an exercise's notebooks come from "
                    "`make exercises` and `make twins`; a removed exercise's links go from every table)"
                )


def test_every_exercise_is_on_the_path_once():
    exercises = [Path(ex).name for _, pairs, *_ in EN for ex, _ in pairs]
    handed_out = sorted(p.name for p in (ROOT / "exercises").glob("*.ipynb"))
    assert sorted(exercises) == handed_out, (
        f"README.md's path table and exercises/ differ: not in the table {sorted(set(handed_out) - set(exercises))} "
        f"(tests/course/test_tables.py gives each row to write), linked more than once or missing from exercises/ "
        f"{sorted(ex for ex in set(exercises) if exercises.count(ex) > 1 or ex not in handed_out)}"
    )


def test_the_two_readmes_agree_on_times_and_questions():
    for (nb, _, time, questions), (_, _, zh_time, zh_questions) in zip(EN, ZH, strict=True):
        assert re.findall(r"\d+", time) == re.findall(r"\d+", zh_time), nb
        assert questions == zh_questions, nb


def questions_asked(path: Path) -> int:
    """The interview questions a notebook asks: the numbered ``<summary>`` lines of its markdown."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return sum(len(QUESTION.findall("".join(c["source"]))) for c in cells if c["cell_type"] == "markdown")


@pytest.mark.parametrize("row", EN, ids=lambda row: Path(row[0]).stem)
def test_interview_questions_are_counted_from_the_notebook(row):
    notebook, *_, questions = row
    for path in (ROOT / notebook, ROOT / "notebooks" / "zh-CN" / Path(notebook).name):
        asked = questions_asked(path)
        assert questions == str(asked), f"{path.relative_to(ROOT)} asks {asked} questions, the README says {questions}"


@pytest.mark.parametrize("index, base", [("notebooks/README.md", "../"), ("notebooks/zh-CN/README.md", "../../")])
def test_the_notebooks_indexes_link_each_notebooks_exercise(index, base):
    pairing = EN if "zh-CN" not in index else ZH
    expected = {Path(nb).name: tuple(link for pair in pairs for link in pair) for nb, pairs, *_ in pairing}
    seen = {}
    for line in (ROOT / index).read_text(encoding="utf-8").splitlines():
        if re.match(r"^\| \d\d \|", line):
            cells = _cells(line)
            links = LINK.findall(cells[1])
            seen[links[0]] = tuple(link.removeprefix(base) for link in LINK.findall(cells[2]))
    assert seen == expected, f"{index}: its exercise column does not follow the README's table"


def _next_steps_cases():
    cases = []
    for _folder, pairing, up in (("notebooks", EN, "../"), ("notebooks/zh-CN", ZH, "../../")):
        for k, (nb, pairs, *_) in enumerate(pairing):
            following = Path(pairing[k + 1][0]).name if k + 1 < len(pairing) else "README.md"
            links = [up + link for pair in pairs for link in pair]
            cases.append(pytest.param(nb, links, following, id=nb))
    return cases


@pytest.mark.parametrize("notebook, exercises, following", _next_steps_cases())
def test_every_notebook_ends_with_its_exercise_and_the_next_notebook(notebook, exercises, following):
    last = json.loads((ROOT / notebook).read_text(encoding="utf-8"))["cells"][-1]
    assert last["cell_type"] == "markdown" and last.get("id") == "next-steps", (
        f"{notebook}: the last cell is not the markdown cell 'next-steps'"
    )
    text = "".join(last["source"])
    links = LINK.findall(text)
    assert links == [*exercises, following], (
        f"{notebook}: 'next-steps' links {links}; it should link {[*exercises, following]} (its exercises, "
        "their solutions, then the next notebook or, for the last, the index)"
    )
    assert text.startswith("**下一步：**" if "zh-CN" in notebook else "**Next:**"), text
