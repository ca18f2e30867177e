"""The exercise registry: each exercise declared once (grade/exercises/<id>.py), and what it declares agrees with its
notebook: the notebook exists in both languages, its self-check grades that id, and nbgrader's points are the
declared ones."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from course_utils.grade import diagnose
from course_utils.grade.diagnose import compare
from course_utils.grade.exercises import EXERCISES, IDS, get
from course_utils.grade.kinds import KINDS

ROOT = Path(__file__).resolve().parents[2]


def test_declared_once_in_a_module_of_its_own():
    modules = sorted(
        p.stem for p in (ROOT / "course_utils" / "grade" / "exercises").glob("*.py") if p.stem != "__init__"
    )
    assert sorted(IDS) == modules
    assert len({ex.order for ex in EXERCISES.values()}) == len(IDS)
    assert all(ex.kind in KINDS and ex.contract for ex in EXERCISES.values())
    with pytest.raises(ValueError, match="unknown exercise 'nope'; known: self_attention"):
        get("nope")


@pytest.mark.parametrize("exercise", IDS)
def test_the_notebook_grades_it_for_its_points(exercise):
    ex = get(exercise)
    for folder in ("solutions", "solutions/zh-CN", "exercises", "exercises/zh-CN"):
        assert (ROOT / folder / f"{ex.notebook}.ipynb").is_file(), (folder, ex.notebook)
    cells = [
        "".join(c["source"])
        for c in json.loads((ROOT / "solutions" / f"{ex.notebook}.ipynb").read_text())["cells"]
        if c["cell_type"] == "code"
    ]
    points = [re.search(r"round\(result\.score \* (\d+), 2\)", c) for c in cells if f'check("{exercise}"' in c]
    assert points and all(p and int(p.group(1)) == ex.points for p in points), (exercise, ex.points)


def _same(a, b) -> bool:
    """Two variants' outputs on the same cases agree (crashing variants are told apart by where they crash)."""
    for x, y in zip(a, b, strict=True):
        if isinstance(x, Exception) or isinstance(y, Exception):
            if not (isinstance(x, Exception) and isinstance(y, Exception)) or x.step != y.step:
                return False
        elif compare(x, y) is not None:
            return False
    return True


@pytest.mark.parametrize("exercise", [ex for ex in IDS if get(ex).kind != "model"])
def test_mutants_are_distinguishable(exercise):
    """Each declared mistake differs from the reference on the exercise's cases, and no earlier mistake with another
    key shadows it (the capstone's function exercise names its mistakes by the answers instead)."""
    ex = get(exercise)
    cases = ex.make_cases(seed=1)

    def outs(v):
        return [diagnose.cached_outputs(ex.expected, c, v) for c in cases]

    ref = outs(ex.correct)
    assert not any(isinstance(r, Exception) for r in ref)
    found = ex.mutants()
    for i, m in enumerate(found):
        assert not _same(outs(m.variant), ref), m
        for earlier in found[:i]:
            assert earlier.key == m.key or not _same(outs(m.variant), outs(earlier.variant)), (earlier.key, m.key)
