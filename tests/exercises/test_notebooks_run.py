"""Execute the solution notebooks (every self-check passes, in Chinese for the Chinese twins) and the generated
exercises (every self-check says "not implemented yet", and nothing crashes). One class per folder, so that
pytest-xdist's loadscope runs them in parallel."""

import re
from pathlib import Path

import pytest

from authoring.twins import run_notebook

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 120  # per cell; each notebook takes a few seconds


def execute(path):
    """Run ``path`` in a fresh python3 kernel in its folder, errors recorded in the outputs instead of raised."""
    return run_notebook(path, timeout=TIMEOUT_S, allow_errors=True)


def check_cells(nb):
    return [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]


def stdout(cell):
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream" and o.name == "stdout")


def assert_clean(nb, name):
    """No cell raised and nothing went to stderr (warnings included)."""
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            assert out.output_type != "error", f"{name}, cell {cell.id!r} raised {out.ename}: {out.evalue}"
            assert not (out.output_type == "stream" and out.name == "stderr"), (
                f"{name}, cell {cell.id!r} wrote to stderr: {out.text}"
            )


def notebooks(folder):
    return sorted((ROOT / folder).glob("*.ipynb"))


# the pass line in English, and as the Chinese twins (solutions/zh-CN, run in their folder) print it
PASSED = {"en": r"✅ {id}: all \d+ checks passed", "zh": r"✅ {id}：\d+ 项检查全部通过"}


def _solution_passes_its_self_check(path, lang):
    nb = execute(path)
    assert_clean(nb, path.name)
    checks = check_cells(nb)
    assert checks, f"{path.name} has no self-check cell"
    for cell in checks:
        found = re.search(r'check\("(\w+)"', cell.source)
        exercise_id = found.group(1) if found else "interview_numbers"  # check_answers({...})
        assert re.search(PASSED[lang].format(id=exercise_id), stdout(cell)), (
            f"{path.name}: the solution does not pass its self-check:\n{stdout(cell)}"
        )


class TestSolutions:
    @pytest.mark.parametrize("path", notebooks("solutions"), ids=lambda p: p.stem)
    def test_solution_passes_its_self_check(self, path):
        _solution_passes_its_self_check(path, "en")


class TestChineseSolutions:
    """The same code in solutions/zh-CN: run in its folder, the self-check passes and says so in Chinese."""

    @pytest.mark.parametrize("path", notebooks("solutions/zh-CN"), ids=lambda p: p.stem)
    def test_solution_passes_its_self_check_in_chinese(self, path):
        _solution_passes_its_self_check(path, "zh")


class TestExercises:
    @pytest.mark.parametrize("path", notebooks("exercises"), ids=lambda p: p.stem)
    def test_exercise_runs_and_reports_not_implemented(self, path):
        nb = execute(path)
        assert_clean(nb, path.name)
        checks = check_cells(nb)
        assert checks, f"{path.name} has no self-check cell"
        for cell in checks:
            text = stdout(cell)
            assert "not implemented yet" in text and "Traceback" not in text, f"{path.name}: {text}"
            assert "✅" not in text, f"{path.name}: an empty exercise must not pass"
