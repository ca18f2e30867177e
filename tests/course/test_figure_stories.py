"""What one figure must show that no general rule of the figure check can know: the notebook's own drawing function,
run here on the notebook's own data (its code cells up to that function, in process: a few seconds each).

The general rules (course_utils/figure_check.py) check every figure as nbval draws it; these tests check the story of
one figure each: 07's timing bars name the variants in words and say which way is better and on which machine; 13's
block pool numbers each block under its middle, and the text above it says what the slider's step is (both
languages). The Chinese twins have the same code cells (tests/authoring/test_twins.py), so the English figure
speaks for both."""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.backend_bases import FigureCanvasBase  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _isolated():
    """The notebooks' cells set process-wide state (13: no gradients, its print options): put it back after."""
    grad = torch.is_grad_enabled()
    yield
    plt.close("all")
    torch.set_grad_enabled(grad)
    torch.set_printoptions(profile="default")


def run_until(notebook: str, definition: str, monkeypatch, skip: tuple = ()) -> dict:
    """The namespace of ``notebook``'s code cells run in order up to the one that defines ``definition``; nothing is
    displayed or rendered on the way (the figures are built, then ``print_figure`` does nothing). Cells containing
    a string of ``skip`` are left out (slow checks the figure does not read; were it to, a NameError says so)."""
    path = ROOT / "notebooks" / notebook
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    monkeypatch.chdir(path.parent)
    monkeypatch.setattr(FigureCanvasBase, "print_figure", lambda self, *args, **kwargs: None)
    monkeypatch.setattr("IPython.display.display", lambda *args, **kwargs: None)
    namespace = {"__name__": "__main__"}
    for cell in cells:
        source = "".join(cell["source"])
        if any(part in source for part in skip):
            continue
        exec(compile(source, f"{notebook} cell", "exec"), namespace)
        if f"def {definition}(" in source:
            return namespace
    raise AssertionError(f"{notebook} defines no {definition}()")


def texts_of(fig) -> str:
    found = [fig._suptitle.get_text()] if fig._suptitle is not None else []
    for ax in fig.axes:
        found += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()] + [t.get_text() for t in ax.texts]
    return " | ".join(t for t in found if t)


def test_07_timing_bars_name_variants_in_words_and_say_which_way_is_better_on_which_machine(monkeypatch):
    """The benchmark's keys (``mha_reference``, ``ours_sdpa``) are the program's names, not the reader's."""
    ns = run_until("07_performance.ipynb", "draw_variants", monkeypatch, skip=("check_variants_agree(",))
    cpu_model = ns["env"]["cpu_model"]
    for mode in ("forward", "forward_backward"):
        for metric, better in (("milliseconds", "lower"), ("attention GFLOP/s", "higher"), ("speed-up", "higher")):
            fig = ns["draw_variants"](mode, metric)
            said = texts_of(fig)
            assert f"{better} is better" in said, (mode, metric, said)
            assert cpu_model in said, (mode, metric, said)
            names = [t.get_text() for t in fig.axes[0].get_yticklabels()]
            identifiers = {key for key in ns["VARIANTS"] if "_" in key}  # einsum is a word as well as a key
            assert len(names) == len(ns["VARIANTS"]) and not set(names) & identifiers, names
            plt.close("all")


def prose_before(notebook: str, definition: str) -> str:
    """The markdown cell just above the code cell that defines ``definition``."""
    cells = json.loads((ROOT / "notebooks" / notebook).read_text())["cells"]
    at = next(i for i, c in enumerate(cells) if f"def {definition}(" in "".join(c["source"]))
    return "".join(cells[at - 1]["source"])


def test_13_each_block_is_numbered_under_its_middle_and_the_prose_says_what_a_step_is(monkeypatch):
    """A number on a block's left edge reads as the boundary between two blocks, or as the block to its left. The
    slider's steps are the decoding steps of the run above the figure: the text says so, with their range."""
    ns = run_until("13_serving.ipynb", "draw_pool", monkeypatch)
    slider = ns["_"].children[0]
    assert (slider.min, slider.max) == (0, len(ns["history"]) - 1)
    assert f"decoding step of the run above, 0 to {slider.max}" in prose_before("13_serving.ipynb", "draw_pool")
    assert f"解码步，从 0 到 {slider.max}" in prose_before("zh-CN/13_serving.ipynb", "draw_pool")
    for step in range(len(ns["history"])):
        ax = ns["draw_pool"](step).axes[0]
        slots = sorted({(p.get_x(), p.get_width()) for p in ax.patches if isinstance(p, Rectangle)})
        ticks = dict(zip(ax.get_xticks(), [t.get_text() for t in ax.get_xticklabels()], strict=True))
        assert len(ticks) == len(slots) == 14, (step, ticks)
        for number, (x, width) in enumerate(slots):
            middle = [label for loc, label in ticks.items() if x + 0.25 * width < loc < x + 0.75 * width]
            assert middle == [str(number)], (step, number, x, width, ticks)
        plt.close("all")
