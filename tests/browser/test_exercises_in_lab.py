"""A few exercises done in JupyterLab as a learner does them: the answer written into the exercise's own cell, Run
All from the menu, and the verdict read from the self-check cell's output as it is shown. Exercise 04: the stub, a
typical mistake and a correct answer in another style; exercise 07 (interview mode): classes of other names and
constructors; and Run All keeps the interview's running timer. In process, every exercise:
tests/exercises/test_as_learner.py.
"""

from __future__ import annotations

import re

import pytest
from jlab import (
    CELL_SELECTOR,
    ROOT,
    notebook_expectations,
    open_notebook,
    run_all_cells,
    skip_unless_browser_tests,
    wait_until_run,
)

skip_unless_browser_tests()

from tests.exercises.test_as_learner import INTERVIEW_STYLES, TRIES  # noqa: E402

MHA = "exercises/04_multihead_attention.ipynb"
INTERVIEW = "exercises/07_interview_mha.ipynb"


def _answer_cell(rel: str) -> int:
    """Position (among all cells, as JupyterLab counts them) of the notebook's first answer cell."""
    import json

    cells = json.loads((ROOT / rel).read_text(encoding="utf-8"))["cells"]
    return next(i for i, c in enumerate(cells) if c["metadata"].get("nbgrader", {}).get("solution"))


def _check_cell(rel: str) -> int:
    import json

    cells = json.loads((ROOT / rel).read_text(encoding="utf-8"))["cells"]
    return next(i for i, c in enumerate(cells) if c["metadata"].get("nbgrader", {}).get("grade"))


def _write(page, index: int, source: str):
    """The learner's answer, put into cell ``index`` of the open notebook (what typing it would leave there)."""
    page.evaluate(
        """([i, src]) => window.jupyterapp.shell.currentWidget.content.model.cells.get(i)
                       .sharedModel.setSource(src)""",
        [index, source],
    )


def _output(page, index: int) -> str:
    return page.locator(CELL_SELECTOR).nth(index).locator(".jp-OutputArea").inner_text()


def _run_as_learner(page, lab_server, rel: str, answer: str | None) -> str:
    expect = notebook_expectations(ROOT / rel)
    open_notebook(page, lab_server, rel, expect["num_cells"])
    if answer is not None:
        _write(page, _answer_cell(rel), answer)
    run_all_cells(page)
    wait_until_run(page, expect["code_cells"])
    return _output(page, _check_cell(rel))


@pytest.mark.parametrize("attempt", ["stub", "mistake", "other_style"])
def test_exercise_04_through_its_cells_in_jupyterlab(attempt, lab_server, page):
    wrong, key, other = TRIES["mha"]
    shown = _run_as_learner(page, lab_server, MHA, {"stub": None, "mistake": wrong, "other_style": other}[attempt])
    if attempt == "stub":
        assert shown.startswith("❌ mha: 0/7 checks passed: not implemented yet"), shown
    elif attempt == "mistake":
        assert shown.startswith("❌ mha: ") and "not implemented" not in shown and "Traceback" not in shown, shown
    else:
        assert shown.startswith("✅ mha: all 7 checks passed"), shown


@pytest.mark.parametrize("style", ["book_signature_named_MHA", "causal_self_attention"])
def test_interview_mode_in_jupyterlab_takes_any_class(style, lab_server, page):
    shown = _run_as_learner(page, lab_server, INTERVIEW, INTERVIEW_STYLES[style])
    assert shown.startswith("✅ mha_interview: all 7 checks passed"), shown


def test_run_all_keeps_the_running_timer(lab_server, page):
    """▶ starts the countdown; a second Run All re-runs its cell, and the clock goes on instead of starting over."""
    expect = notebook_expectations(ROOT / INTERVIEW)
    open_notebook(page, lab_server, INTERVIEW, expect["num_cells"])
    run_all_cells(page)
    wait_until_run(page, expect["code_cells"])
    timer = 2  # the timer's cell
    page.locator(CELL_SELECTOR).nth(timer).locator(".widget-play button").first.click()  # ▶
    page.wait_for_function(
        "([sel, i]) => !document.querySelectorAll(sel)[i].innerText.includes('20:00 left')",
        arg=[CELL_SELECTOR, timer],
        timeout=30_000,
    )  # it ticked
    run_all_cells(page)  # clears the outputs and runs every cell again, the timer's included
    wait_until_run(page, expect["code_cells"])
    used = _output(page, expect["num_cells"] - 1)  # the last cell stops the clock and says the time used
    seconds = re.search(r"clock paused: time used (\d+):(\d\d) of 20:00", used)
    assert seconds and int(seconds.group(1)) * 60 + int(seconds.group(2)) >= 1, used
