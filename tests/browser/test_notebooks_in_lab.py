"""Every course notebook, run in JupyterLab in headless Chromium as a learner would run it.

For each notebooks/NN_*.ipynb: Run All Cells, wait for the kernel, then check that no cell shows an error or
writes to stderr, that every plot of the committed run is rendered as an image, that ipywidgets controls
render (and are wide enough to use), and that moving one control redraws the figure it drives. A screenshot
per notebook goes to tests/browser/screenshots/ (git-ignored). The server serves a copy of the repository, so
the committed files never change; the test checks that too. One test per notebook: `-k 03` picks one.
"""

import hashlib

import pytest
from jlab import (
    CELL_SELECTOR,
    change_widget,
    notebook_expectations,
    notebooks_dir,
    open_notebook,
    run_all_cells,
    skip_unless_browser_tests,
    snapshot,
    wait_until_run,
)

skip_unless_browser_tests()

MIN_SLIDER_PX = 40  # a default track is about 150 px; the squeezed ones found were 0-1 px wide
NOTEBOOKS = sorted(notebooks_dir().glob("[0-9][0-9]_*.ipynb"))
# the Chinese edition: one twin is run like the English notebooks, and its text must render in a CJK font
ZH_NOTEBOOK = notebooks_dir() / "zh-CN" / "01_self_attention.ipynb"

# For each probed element: draw two different Chinese characters and an unassigned code point in the element's
# own font on a canvas. Without a CJK font both characters come out as the same "tofu" box or as blank, like
# the unassigned one; with a font they differ from each other and from it.
_CJK_RENDERS_JS = """(selector) => {
  const canvas = document.createElement('canvas');
  canvas.width = canvas.height = 64;
  const g = canvas.getContext('2d');
  return [...document.querySelectorAll(selector)].slice(0, 5).map(el => {
    const style = getComputedStyle(el);
    const draw = ch => { g.clearRect(0, 0, 64, 64); g.font = `${style.fontSize} ${style.fontFamily}`;
                         g.fillText(ch, 4, 48); return g.getImageData(0, 0, 64, 64).data.join(','); };
    const a = draw('注'), b = draw('意'), none = draw('\\u{EFFFF}');
    return {text: el.textContent.slice(0, 30), font: style.fontFamily, ok: a !== b && a !== none && b !== none};
  });
}"""

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
    fail_if(
        [(i, cells[i]["prompt"]) for i in expect["code_cells"] if not any(ch.isdigit() for ch in cells[i]["prompt"])],
        "code cells not executed:",
    )

    fail_if(
        [(i, "image did not load") for i, c in enumerate(cells) if any(not img["ok"] for img in c["images"])],
        "broken images:",
    )
    rendered = sum(len(c["images"]) for c in cells)
    assert rendered >= max(1, expect["images"]), (
        f"{rendered} plots rendered as images, the committed run has {expect['images']} (need another front end?)"
    )
    fail_if([(i, c["widgetErrors"][0]) for i, c in enumerate(cells) if c["widgetErrors"]], "widgets do not render:")
    assert any(c["widgets"] for c in cells), "no ipywidgets control is rendered"
    fail_if(
        [
            (i, f"track widths {c['sliderWidths']} px")
            for i, c in enumerate(cells)
            if any(w < MIN_SLIDER_PX for w in c["sliderWidths"])
        ],
        f"sliders squeezed below {MIN_SLIDER_PX} px:",
    )


@pytest.mark.parametrize(
    "notebook", NOTEBOOKS + [ZH_NOTEBOOK], ids=[p.stem for p in NOTEBOOKS] + [f"zh-CN-{ZH_NOTEBOOK.stem}"]
)
def test_notebook_runs_in_jupyterlab(notebook, lab_server, page, screenshots):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    expect = notebook_expectations(notebook)
    assert expect["kernel"] == "python3", (
        f"kernelspec name is {expect['kernel']!r}; use the plain 'python3' that every Jupyter install has"
    )
    committed = _digest(notebook)
    focus = []  # the cell the screenshot shows: the first offending one, else the live figure
    try:
        rel = notebook.relative_to(notebooks_dir()).as_posix()
        open_notebook(page, lab_server, f"{lab_server.notebooks_rel}/{rel}", expect["num_cells"])
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


def test_chinese_text_renders_in_a_cjk_font(lab_server, page, screenshots):
    """The Chinese twin's headings and prose are drawn with real glyphs, not empty boxes (tofu)."""
    expect = notebook_expectations(ZH_NOTEBOOK)
    try:
        open_notebook(page, lab_server, f"{lab_server.notebooks_rel}/zh-CN/{ZH_NOTEBOOK.name}", expect["num_cells"])
        probes = page.evaluate(_CJK_RENDERS_JS, ".jp-RenderedMarkdown h1, .jp-RenderedMarkdown p")
        assert probes, "no rendered markdown found in the Chinese notebook"
        assert any("自注意力" in p["text"] for p in probes), f"the title is not Chinese: {probes[0]['text']!r}"
        bad = [p for p in probes if not p["ok"]]
        assert not bad, f"Chinese characters render as boxes or blanks (install a CJK font, fonts-noto-cjk): {bad}"
    finally:
        _screenshot(page, [], screenshots / "zh-CN-glyphs.png")
