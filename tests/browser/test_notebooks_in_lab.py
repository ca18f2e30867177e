"""Every course notebook, run in JupyterLab in headless Chromium as a learner would run it.

For each notebooks/NN_*.ipynb: Run All Cells, wait for the kernel, then check that no cell shows an error or
writes to stderr, that every plot of the committed run is rendered as an image, that ipywidgets controls
render (and are wide enough to use), and that moving one control redraws the figure it drives. A screenshot
per notebook goes to tests/browser/screenshots/ (git-ignored). The server serves a copy of the repository, so
the committed files never change; the test checks that too. One test per notebook: `-k 03` picks one.
"""
import hashlib
import importlib.util
import os

import pytest

from jlab import (CELL_SELECTOR, SKIP_REASON, browser_tests_wanted, change_widget, chromium_path,
                  notebook_expectations, notebooks_dir, open_notebook, run_all_cells, snapshot, wait_until_run)

if not browser_tests_wanted() or chromium_path() is None:
    if browser_tests_wanted() and os.environ.get("CI", "").lower() in ("1", "true"):
        raise RuntimeError("CI asked for the browser test (RUN_BROWSER_TESTS=1) but `chromium` is not on PATH")
    pytest.skip(SKIP_REASON, allow_module_level=True)
if importlib.util.find_spec("playwright") is None:
    pytest.skip("browser test skipped: the playwright package is missing; run `make setup`", allow_module_level=True)

MIN_SLIDER_PX = 40  # a default track is about 150 px; the squeezed ones found were 0-1 px wide
NOTEBOOKS = sorted(notebooks_dir().glob("[0-9][0-9]_*.ipynb"))

# the figure in cell `index` has been redrawn: some image differs from `before` and every image has loaded
_REDRAWN_JS = """([selector, index, before]) => {
  const imgs = [...document.querySelectorAll(selector)[index].querySelectorAll('.jp-RenderedImage img')];
  return imgs.length > 0 && imgs.every(i => i.complete && i.naturalWidth > 0)
    && imgs.some((img, k) => img.getAttribute('src') !== before[k]);
}"""


def test_there_are_notebooks():
    assert NOTEBOOKS, f"no notebooks matching [0-9][0-9]_*.ipynb in {notebooks_dir().name}/"


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _screenshot(page, focus, path):
    # best effort: a failing screenshot must not hide the test's own failure
    try:
        if focus:
            page.locator(CELL_SELECTOR).nth(focus[0]).scroll_into_view_if_needed(timeout=5_000)
        page.screenshot(path=str(path), timeout=15_000)
    except Exception as exc:
        print(f"no screenshot {path.name}: {exc}")


def _check_cells(cells, expect, focus):
    """The learner-visible state after Run All; ``focus`` collects the cell to show in the screenshot."""
    def fail_if(bad, message):
        if bad:
            focus.append(bad[0][0])
            raise AssertionError(message + "\n" + "\n".join(f"cell {i}: {detail}" for i, detail in bad))

    # tracebacks and warnings both land on stderr: neither may show, except in cells tagged raises-exception
    shown = [(i, text[-1500:]) for i, c in enumerate(cells) if i not in expect["raises"] for text in c["stderr"]]
    fail_if([(i, t) for i, t in shown if "Traceback" in t], "cells show errors:")
    fail_if(shown, "cells write to stderr:")
    fail_if([(i, cells[i]["prompt"]) for i in expect["code_cells"]
             if not any(ch.isdigit() for ch in cells[i]["prompt"])], "code cells not executed:")

    fail_if([(i, "image did not load") for i, c in enumerate(cells) if any(not img["ok"] for img in c["images"])],
            "broken images:")
    rendered = sum(len(c["images"]) for c in cells)
    assert rendered >= max(1, expect["images"]), \
        f"{rendered} plots rendered as images, the committed run has {expect['images']} (need another front end?)"
    fail_if([(i, c["widgetErrors"][0]) for i, c in enumerate(cells) if c["widgetErrors"]], "widgets do not render:")
    assert any(c["widgets"] for c in cells), "no ipywidgets control is rendered"
    fail_if([(i, f"track widths {c['sliderWidths']} px") for i, c in enumerate(cells)
             if any(w < MIN_SLIDER_PX for w in c["sliderWidths"])], f"sliders squeezed below {MIN_SLIDER_PX} px:")


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_in_jupyterlab(notebook, lab_server, page, screenshots):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    expect = notebook_expectations(notebook)
    assert expect["kernel"] == "python3", \
        f"kernelspec name is {expect['kernel']!r}; use the plain 'python3' that every Jupyter install has"
    committed = _digest(notebook)
    focus = []  # the cell the screenshot shows: the first offending one, else the live figure
    try:
        open_notebook(page, lab_server, f"{lab_server.notebooks_rel}/{notebook.name}", expect["num_cells"])
        run_all_cells(page)
        cells = wait_until_run(page, expect["code_cells"])["cells"]
        _check_cells(cells, expect, focus)

        # one live figure per notebook: the first cell with both a control and an image
        live = [i for i, c in enumerate(cells) if c["widgets"] and c["images"]]
        assert live, "no cell shows a widget together with the figure it controls"
        index = live[0]
        focus.append(index)
        cell = page.locator(CELL_SELECTOR).nth(index)
        cell.scroll_into_view_if_needed()
        before = [img["src"] for img in cells[index]["images"]]
        what = change_widget(cell)
        try:
            page.wait_for_function(_REDRAWN_JS, arg=[CELL_SELECTOR, index, before], timeout=30_000)
        except PlaywrightTimeout:
            raise AssertionError(f"cell {index}: changing the widget ({what}) did not redraw its figure") from None
        after = snapshot(page)["cells"][index]
        assert not after["stderr"], f"cell {index}: changing the widget ({what}) wrote {after['stderr']}"
        assert not page.console_errors, f"JavaScript errors in the page: {page.console_errors}"
    finally:
        _screenshot(page, focus, screenshots / f"{notebook.stem}.png")
        assert _digest(notebook) == committed, f"running {notebook.name} in JupyterLab changed the committed file"
