"""The grader on the course's own solution notebooks, through the sandboxed path instructors use."""

from pathlib import Path

import pytest

from course_utils.grade import check, jail, runner
from course_utils.grade.batch import grade_folder

ROOT = Path(__file__).resolve().parents[2]


def test_solution_notebook_passes_without_noise():
    # every cell runs in the sandbox; the demo cell after the check cell reads `result`, which is None there
    report = runner.grade_file(ROOT / "solutions" / "04_multihead_attention.ipynb", sandboxed=jail.probe() is None)
    assert report.passed, report.to_dict()
    assert not report.notes, report.notes


@pytest.mark.requires_sandbox  # thirty sandboxes, one per notebook: make test-sandbox (every solution runs in a
# kernel in make test: tests/exercises/test_notebooks_run.py)
def test_every_solution_notebook_gets_full_credit_in_batch_grading(tmp_path):
    # what an instructor's `make grade` does with learners who hand in the solutions: every exercise passes,
    # even though the notebooks' own setup and demo cells use course_utils helpers; the Chinese edition's folder is
    # graded as a learner's folder (nbgrader's collected layout), so both editions are
    graded, skipped, failed = grade_folder(ROOT / "solutions", tmp_path / "grades")
    notebooks = sorted(
        p.relative_to(ROOT / "solutions").as_posix()
        for p in (ROOT / "solutions").rglob("*.ipynb")
        if not any(part.startswith(".") for part in p.parts)
    )
    assert sorted(name for name, _ in graded) == notebooks and not failed
    assert any(name.startswith("zh-CN/") for name in notebooks)
    bad = {name: report.to_dict() for name, report in graded if not report.passed}
    assert not bad, bad


def test_check_of_a_class_not_yet_defined_says_so(capsys):
    # the interview notebook's check cell passes globals().get("MultiHeadAttention"): None until it is written
    result = check("mha_interview", None)
    assert not result and result.diagnosis == "not_implemented"
    assert "not implemented yet: define your attention class" in capsys.readouterr().out

    class Stub:  # the same exercise graded through the full path: the counts must agree
        def __init__(self, *args, **kwargs):
            raise NotImplementedError

    assert result.checks_total == check("mha_interview", Stub, quiet=True).checks_total
