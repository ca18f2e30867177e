"""The exercise generator (authoring.exercises) and the nbgrader layout of the solution notebooks."""

import json
import re
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from authoring import exercises as gen
from course_utils.grade.exercises import IDS

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS, EXERCISES = ROOT / "solutions", ROOT / "exercises"
# the exercise ids of the shared contract (the grader's registry), each checked by exactly one notebook
EXERCISE_IDS = set(IDS)
CHECK_CALL = re.compile(r'check\("(\w+)",|check_answers\(')


def nbgrader(grade_id, *, grade=False, solution=False, locked=True, points=None):
    meta = {
        "grade": grade,
        "grade_id": grade_id,
        "locked": locked,
        "schema_version": 3,
        "solution": solution,
        "task": False,
    }
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


SOLUTION_SRC = """\
class Foo:
    def forward(self, x):
        y = x + 1
        ### BEGIN SOLUTION
        z = y * 2
        return z
        ### END SOLUTION"""

CHECK_SRC = """\
result = check("foo", Foo)
### BEGIN HIDDEN TESTS
assert result
### END HIDDEN TESTS"""


def tiny_notebook():
    setup = new_code_cell("import torch", id="setup", metadata=nbgrader("setup"), execution_count=1)
    sol = new_code_cell(
        SOLUTION_SRC, id="solution", metadata=nbgrader("solution", solution=True, locked=False), execution_count=2
    )
    chk = new_code_cell(CHECK_SRC, id="check", metadata=nbgrader("check", grade=True, points=2), execution_count=3)
    chk.outputs = [new_output("stream", name="stdout", text="ok\n")]
    chk.metadata["execution"] = {"iopub.status.busy": "2020-01-01T00:00:00Z"}
    prose = new_markdown_cell(
        "Explain:\n### BEGIN SOLUTION\nsecret\n### END SOLUTION",
        id="prose",
        metadata=nbgrader("prose", solution=True, locked=False),
    )
    metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3"}, "widgets": {}}
    nb = new_notebook(cells=[setup, sol, chk, prose], metadata=metadata)
    return nbformat.from_dict(json.loads(json.dumps(nb)))


def test_solution_region_becomes_an_indented_stub():
    ex = gen.make_exercise(tiny_notebook())
    assert ex.cells[1].source.splitlines() == [
        "class Foo:",
        "    def forward(self, x):",
        "        y = x + 1",
        "        # YOUR CODE HERE",
        '        raise NotImplementedError("your code here")',
    ]


def test_top_level_region_becomes_a_comment_so_run_all_does_not_stop():
    nb = tiny_notebook()
    nb.cells[1].source = "### BEGIN SOLUTION\nclass Foo:\n    pass\n### END SOLUTION"
    assert gen.make_exercise(nb).cells[1].source == "# YOUR CODE HERE"


def test_hidden_tests_removed_outputs_cleared_ids_and_metadata_kept():
    nb = tiny_notebook()
    ex = gen.make_exercise(nb)
    assert ex.cells[2].source == 'result = check("foo", Foo)'
    assert [c.id for c in ex.cells] == [c.id for c in nb.cells]
    for cell in ex.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
        assert "execution" not in cell.metadata
    assert [c.metadata["nbgrader"] for c in ex.cells] == [c.metadata["nbgrader"] for c in nb.cells]
    assert ex.cells[3].source == "Explain:\nYOUR ANSWER HERE"
    assert "widgets" not in ex.metadata
    assert ex.metadata.kernelspec == gen.KERNELSPEC  # "Python 3" in the solution: JupyterLab's own name here
    assert nb.cells[2].outputs, "make_exercise must not modify its input"


@pytest.mark.parametrize(
    "source, message",
    [
        ("### BEGIN SOLUTION\nx = 1", "never closed"),
        ("x = 1\n### END SOLUTION", "without"),
        ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n### END SOLUTION", "inside another region"),
    ],
)
def test_unbalanced_markers_are_a_clear_error(source, message):
    nb = tiny_notebook()
    nb.cells[1].source = source
    with pytest.raises(ValueError, match=message) as err:
        gen.make_exercise(nb, "demo.ipynb")
    assert "demo.ipynb, cell 'solution'" in str(err.value)


def test_markers_need_matching_nbgrader_metadata():
    nb = tiny_notebook()
    nb.cells[0].source = "### BEGIN SOLUTION\nx = 1\n### END SOLUTION"  # a locked setup cell
    with pytest.raises(ValueError, match="solution=true"):
        gen.make_exercise(nb)
    nb = tiny_notebook()
    nb.cells[1].metadata["nbgrader"]["grade"] = False
    nb.cells[0].source = "### BEGIN HIDDEN TESTS\nassert 1\n### END HIDDEN TESTS"
    with pytest.raises(ValueError, match="grade=true"):
        gen.make_exercise(nb)


def test_cells_without_ids_are_refused():
    nb = tiny_notebook()
    nb.nbformat_minor = 4
    with pytest.raises(ValueError, match="cell ids"):
        gen.make_exercise(nb)


def test_check_flag_reports_stale_missing_and_extra_notebooks(tmp_path, capsys):
    src, dst = tmp_path / "solutions", tmp_path / "exercises"
    src.mkdir()
    nbformat.write(tiny_notebook(), str(src / "01_foo.ipynb"))
    assert gen.main([str(src), str(dst), "--check"]) == 1  # missing
    assert not dst.exists(), "--check must write nothing"
    assert gen.main([str(src), str(dst)]) == 0
    first = (dst / "01_foo.ipynb").read_text()
    assert gen.main([str(src), str(dst), "--check"]) == 0
    assert gen.main([str(src), str(dst)]) == 0 and (dst / "01_foo.ipynb").read_text() == first  # deterministic

    nb = nbformat.read(str(src / "01_foo.ipynb"), as_version=4)
    nb.cells[0].source = "import torch  # changed"
    nbformat.write(nb, str(src / "01_foo.ipynb"))
    (dst / "99_orphan.ipynb").write_text(first)
    capsys.readouterr()
    assert gen.main([str(src), str(dst), "--check"]) == 1
    err = capsys.readouterr().err
    assert "01_foo.ipynb is out of date" in err and "99_orphan.ipynb has no solution notebook" in err
    assert gen.main([str(src), str(dst)]) == 0
    assert gen.main([str(src), str(dst), "--check"]) == 0 and not (dst / "99_orphan.ipynb").exists()


def test_bad_solution_notebook_exits_2(tmp_path, capsys):
    src = tmp_path / "solutions"
    src.mkdir()
    nb = tiny_notebook()
    nb.cells[1].source = "### BEGIN SOLUTION\nx = 1"
    nbformat.write(nb, str(src / "bad.ipynb"))
    assert gen.main([str(src), str(tmp_path / "out")]) == 2
    assert "never closed" in capsys.readouterr().err


def test_committed_exercises_are_up_to_date():
    """`make exercises` was run after the last change to solutions/ (the comparison `make check-exercises` makes)."""
    stale = gen.generate(SOLUTIONS, EXERCISES, check=True)
    assert not stale, "run `make exercises`: " + "; ".join(stale)


def solution_notebooks(zh=False):
    return sorted((SOLUTIONS / "zh-CN" if zh else SOLUTIONS).glob("*.ipynb"))


def test_every_exercise_id_has_one_notebook():
    ids = []
    for path in solution_notebooks():
        nb = nbformat.read(str(path), as_version=4)
        # a notebook's first check is its own exercise; interview mode's follow-ups re-use exercises 5 and 6
        ids += [next(m for c in nb.cells if c.cell_type == "code" for m in CHECK_CALL.findall(c.source))]
    assert sorted(ids) == sorted(EXERCISE_IDS)


@pytest.mark.parametrize(
    "path",
    solution_notebooks() + solution_notebooks(zh=True),
    ids=lambda p: str(p.relative_to(SOLUTIONS).with_suffix("")),
)
def test_solution_notebook_layout(path):
    nb = nbformat.read(str(path), as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    grade_ids, checks = set(), []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader")
        if meta is None:  # free cells: demos that only run once the self-check passed
            assert cell.cell_type == "code" and cell.source.startswith("if result:"), cell.id
            continue
        assert meta["schema_version"] == 3 and meta["task"] is False
        assert meta["grade_id"] not in grade_ids and re.fullmatch(r"[\w-]+", meta["grade_id"])
        grade_ids.add(meta["grade_id"])
        if gen.BEGIN_SOLUTION in cell.source:
            assert meta["solution"] and not meta["grade"] and not meta["locked"], cell.id
        elif meta["grade"]:
            assert meta["locked"] and meta["points"] > 0 and not meta["solution"], cell.id
            assert CHECK_CALL.search(cell.source) and gen.BEGIN_HIDDEN in cell.source, cell.id
            checks.append(cell)
            # committed executed: the pass line is in the saved output
            text = "".join(o.get("text", "") for o in cell.outputs)
            passed = r"✅ \w+：\d+ 项检查全部通过" if path.parent.name == "zh-CN" else r"✅ \w+: all \d+ checks passed"
            assert re.search(passed, text), f"{path.name}: execute and save the notebook (in its own folder)"
            # for nbgrader, in hidden tests: warnings cannot zero the cell (anything on stderr scores 0), and the
            # cell's value is its partial credit, the share of checks passed times the cell's points
            points = meta["points"]
            assert re.search(
                r'^warnings\.simplefilter\("ignore"\).*\n(.*\n)*result = check(_answers)?\(', cell.source, re.M
            ), cell.id
            assert re.search(rf"^round\(result\.score \* {points}, 2\)", cell.source, re.M), cell.id
            values = [o.data["text/plain"] for o in cell.outputs if o.output_type == "execute_result"]
            assert values == [f"{float(points)}"], f"{path.name}: the solution's check cell must be worth {points}"
            learner = next(c for c in gen.make_exercise(nb).cells if c.id == cell.id)
            assert "warnings" not in learner.source and "result.score" not in learner.source, cell.id
        else:
            assert meta["locked"] and not meta["solution"], cell.id
    interview = "mha_interview" in checks[0].source
    assert len(checks) == 1 or interview  # interview mode has follow-ups, each with its own check
    has_skeleton = any(gen.BEGIN_SOLUTION in c.source and not c.source.startswith(gen.BEGIN_SOLUTION) for c in nb.cells)
    assert has_skeleton != interview, "exercises have a skeleton; interview mode only an empty cell"
