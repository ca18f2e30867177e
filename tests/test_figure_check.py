"""The figure check (course_utils/figure_check.py) on small figures built here: each rule fails the figure made
with its defect and passes the same figure made right. The notebooks' own figures are checked where they are drawn:
tests/conftest.py sets ATTN_CHECK_FIGURES=1 for runs with --nbval, so nbval fails at a cell whose figure has a
problem (the same run that compares the notebooks' outputs, so no notebook is executed twice)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.backend_bases import FigureCanvasBase  # noqa: E402

from course_utils import figure_check, viz  # noqa: E402
from course_utils.figure_check import figure_problems  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def problems_of(fig, chinese=False):
    return "\n".join(figure_problems(fig, chinese=chinese))


def test_a_figure_that_tells_its_story_passes():
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(9, 3.5))
    ax0.plot([1, 2, 3], [1, 4, 9], "o-", color="tab:blue", label="loop")
    ax0.plot([1, 2, 3], [1, 2, 3], "s-", color="tab:orange", label="batched")
    ax0.set_xlabel("heads"), ax0.set_ylabel("ms"), ax0.legend(loc="upper left"), ax0.set_xticks([1, 2, 3])
    viz.plot_attention(torch.softmax(torch.randn(4, 4), -1), list("abcd"), ax=ax1, title="weights")
    fig.tight_layout()
    assert figure_problems(fig) == []


def test_an_axes_needs_a_title_or_labels_and_numbers_need_a_label():
    fig, ax = plt.subplots()
    ax.bar(["a", "b"], [0.3, 0.7])
    assert "numbers on the y axis without a label" in problems_of(fig)
    assert "no title and no axis labels" in problems_of(fig)
    ax.set_ylabel("attention weight")
    assert problems_of(fig) == ""


def test_scientific_tick_labels_are_refused():
    fig, ax = plt.subplots()
    ax.semilogy([1, 2, 3], [3, 4, 6])  # minor labels: 3×10⁰, 4×10⁰, 6×10⁰
    ax.set_xlabel("step"), ax.set_ylabel("loss")
    assert "tick labels in scientific form on the y axis" in problems_of(fig)


def test_overlapping_texts_are_found_from_their_extents():
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.imshow(np.random.default_rng(0).random((8, 8)), vmin=0, vmax=1)
    for i in range(8):
        for j in range(8):
            ax.text(j, i, "0.123", fontsize=9, ha="center", va="center")
    ax.set_xlabel("key"), ax.set_ylabel("query")
    assert "texts overlap: '0.123' and '0.123'" in problems_of(fig)


def test_rotated_tick_labels_that_do_not_touch_pass():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.bar(["Your", "journey", "starts", "with"], [1, 2, 3, 4])
    ax.tick_params(axis="x", rotation=45)
    ax.set_ylabel("weight")
    fig.tight_layout()
    assert "overlap" not in problems_of(fig)


def test_a_heatmap_needs_a_colour_bar_or_its_values():
    weights = torch.softmax(torch.randn(5, 5), -1)
    fig, ax = plt.subplots()
    image = viz.plot_attention(weights, list("abcde"), ax=ax, title="weights", annotate=False)
    assert "a heatmap without a colour bar or its values written" in problems_of(fig)
    fig.colorbar(image, ax=ax, label="attention weight")
    assert problems_of(fig) == ""


def test_a_heatmap_needs_query_and_key_labels():
    fig, ax = plt.subplots()
    image = ax.imshow(np.random.default_rng(0).random((3, 3)))
    ax.set_xticks(range(3), list("abc")), ax.set_yticks(range(3), list("abc")), ax.set_title("weights")
    fig.colorbar(image, ax=ax, label="weight")
    assert "a heatmap without a label on its x axis" in problems_of(fig)
    assert "a heatmap without a label on its y axis" in problems_of(fig)


def test_written_values_must_show_the_largest_of_a_row():
    weights = torch.tensor([[0.201, 0.204, 0.595], [0.4, 0.3, 0.3], [0.396, 0.2036, 0.4004]])
    fig, ax = plt.subplots()
    ax.imshow(weights.numpy(), vmin=0, vmax=1)
    for i in range(3):
        for j in range(3):
            ax.text(j, i, f"{weights[i, j]:.2f}", ha="center", va="center")
    ax.set_xlabel("key"), ax.set_ylabel("query")
    assert "row 2: the largest value reads '0.40' like a smaller one" in problems_of(fig)
    assert "row 0" not in problems_of(fig)  # 0.60 stands out
    fig, ax = plt.subplots()
    viz.plot_attention(weights, list("abc"), ax=ax)  # the largest of each row in bold
    assert problems_of(fig) == ""


def test_a_mask_needs_a_key_and_no_cell_in_the_background_colour():
    fig, ax = plt.subplots()
    ax.imshow(np.tril(np.ones((4, 4))), cmap="Greys", vmin=0, vmax=1.5)
    ax.set_xlabel("key"), ax.set_ylabel("query"), ax.set_title("mask")
    found = problems_of(fig)
    assert "colours no legend or title explains" in found and "cells drawn in the background's colour" in found
    ax.imshow(np.tril(np.ones((4, 4))), cmap="Greys", vmin=-0.5, vmax=1.5)
    ax.images[0].remove()
    ax.set_title("mask (dark = hidden)")
    ax.set_xticks(range(4)), ax.set_yticks(range(4))  # rows and columns are indices
    assert problems_of(fig) == ""


def test_colours_need_a_legend():
    fig, ax = plt.subplots()
    ax.barh(["a", "b", "c"], [3, 2, 1], color=["tab:green", "tab:blue", "tab:blue"])
    ax.set_xlabel("ms")
    assert "bars in 2 colours and no legend" in problems_of(fig)


def test_a_reference_line_needs_a_name():
    fig, ax = plt.subplots()
    ax.plot([0, 1, 2], [0, 1, 4], label="loss")
    ax.axvline(1, ls="--", color="gray")
    ax.set_xticks([0, 1, 2])
    ax.set_xlabel("step"), ax.set_ylabel("loss"), ax.legend(loc="upper left")
    assert "a dashed line (#808080) that no legend or text names" in problems_of(fig)
    ax.text(1.05, 3, "phase change")
    assert problems_of(fig) == ""


def test_a_figure_legend_names_the_lines_of_every_panel():
    fig, axes = plt.subplots(1, 2, figsize=(8, 3))
    for ax in axes:
        ax.imshow(np.eye(4), cmap="gray"), ax.set_xlabel("key block"), ax.set_ylabel("query block")
        ax.set_title("tiles")
        ax.axhline(1.5, color="black", label="program 1's row")
    assert "that no legend or text names" in problems_of(fig)
    fig.legend(handles=[axes[0].get_lines()[0]], loc="lower center")
    assert "that no legend or text names" not in problems_of(fig)


def test_one_colour_per_method_across_panels():
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(9, 3))
    for ax, names in ((ax0, ("NTK-aware", "YaRN")), (ax1, ("YaRN", "NTK-aware"))):
        for k, name in enumerate(names):
            ax.plot([0, 1], [k, k + 1], label=name)
        ax.set_xlabel("i"), ax.set_ylabel("ratio"), ax.legend(loc="lower right")
    found = problems_of(fig)
    assert "'YaRN' is drawn in 2 colours" in found and "stands for 2 methods" in found


def test_a_legend_over_the_bars():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.bar(range(4), [1, 1, 1, 1], label="accuracy")
    ax.set_ylabel("accuracy"), ax.legend(loc="center")
    assert "the legend covers the data" in problems_of(fig)


def test_a_bar_of_height_zero_needs_its_value():
    fig, ax = plt.subplots()
    bars = ax.bar(["MHA", "GQA"], [0.0, 0.6])
    ax.set_ylabel("error")
    assert "a bar of length 0" in problems_of(fig)
    ax.bar_label(bars, fmt="%.2f")
    assert problems_of(fig) == ""


def test_a_chinese_figure_has_no_english_labels():
    fig, ax = plt.subplots()
    ax.plot([1, 2], [1, 2], label="random heads")
    ax.plot([1, 2], [2, 1], label="KV cache")
    ax.set_xlabel("tokens"), ax.set_ylabel("MiB"), ax.set_title("your model"), ax.legend()
    found = problems_of(fig, chinese=True)
    assert "'your model'" in found and "'random heads'" in found
    assert "'KV cache'" not in found and "'MiB'" not in found and "'tokens'" not in found
    assert not figure_check._latin_only("你的模型（your model）") and not figure_check._latin_only("q·k / √d_k")
    assert "English in a Chinese figure" not in problems_of(fig, chinese=False)


def test_the_hook_refuses_a_figure_with_problems_when_it_is_drawn(monkeypatch):
    """What nbval's kernels do (ATTN_CHECK_FIGURES=1 and viz imported in a kernel): every figure is checked as it
    is drawn, inline display and viz.figure_png alike (both go through print_figure). Before that, nothing is."""
    monkeypatch.setattr(FigureCanvasBase, "print_figure", FigureCanvasBase.print_figure)  # put back after the test

    def unlabelled():
        fig, ax = plt.subplots()
        ax.bar(["a", "b"], [1, 2])
        return fig

    assert viz.figure_png(unlabelled())  # a learner's own figure is never refused
    figure_check.check_when_drawn()
    with pytest.raises(figure_check.FigureProblems, match="numbers on the y axis without a label"):
        viz.figure_png(unlabelled())
    fig = unlabelled()
    fig.axes[0].set_ylabel("ms")
    assert viz.figure_png(fig)


def test_bars_on_a_log_axis_are_refused():
    """A bar's length on a log axis is not its value: 1 MiB against 64 MiB drawn from 0.5 reads as about 1:8."""
    fig, ax = plt.subplots()
    ax.barh(["MLA", "MHA"], [1.0, 64.0])
    ax.set_xscale("log"), ax.set_xlabel("KV cache (MiB)")
    assert "bars on a log x axis" in problems_of(fig)
    ax.set_xscale("linear")
    assert problems_of(fig) == ""
    fig, ax = plt.subplots()
    ax.plot([64.0, 1.0], ["MHA", "MLA"], "o")  # dots on a log axis: the positions are the values
    ax.set_xscale("log"), ax.set_xlabel("KV cache (MiB)")
    assert problems_of(fig) == ""


def test_heights_need_an_axis_that_reads_them():
    fig, ax = plt.subplots()
    for block, filled in enumerate([3, 1, 2]):
        ax.add_patch(plt.Rectangle((block, 0), 0.9, filled, color="tab:blue"))
    ax.set_xlim(0, 3), ax.set_ylim(0, 3), ax.set_yticks([]), ax.set_xlabel("block")
    assert "shapes of 3 different heights on a y axis with neither ticks nor a label" in problems_of(fig)
    ax.set_yticks(range(4)), ax.set_ylabel("slots filled")
    assert problems_of(fig) == ""


def test_a_colour_named_in_a_text_is_the_colour_drawn():
    """A faint orange span over viridis renders maroon: the label's "orange" is then a colour the reader never sees."""
    fig, ax = plt.subplots()
    image = ax.imshow(np.random.default_rng(0).random((6, 6)), vmin=0, vmax=1)
    fig.colorbar(image, ax=ax, label="weight")
    span = ax.axvspan(1.5, 3.5, color="tab:orange", alpha=0.15)
    ax.set_xlabel("key (orange: first copy)"), ax.set_ylabel("query")
    assert "a text names 'orange' but every orange artist is faint over an image" in problems_of(fig)
    span.remove()
    ax.add_patch(plt.Rectangle((1.5, -0.5), 2, 6, fill=False, edgecolor="tab:orange", lw=2))  # solid outline
    assert problems_of(fig) == ""
    fig, ax = plt.subplots()  # a tint on a plain background keeps its colour
    ax.plot([0, 5], [0, 1], label="accuracy"), ax.axvspan(1, 2, color="tab:orange", alpha=0.2, label="orange: change")
    ax.set_xlabel("step"), ax.set_ylabel("accuracy"), ax.legend(loc="lower right")
    assert problems_of(fig) == ""


def test_panels_are_tagged_all_or_none():
    fig, axes = plt.subplots(1, 2, figsize=(8, 3))
    for ax, title in zip(axes, ("is_causal=True: WRONG", "bottom-right mask"), strict=True):
        ax.plot([0, 1], [0, 1]), ax.set_title(title), ax.set_xticks([0, 1])
        ax.set_xlabel("key"), ax.set_ylabel("query")
    assert "panel 'is_causal=True: WRONG' carries a verdict and panel 'bottom-right mask' none" in problems_of(fig)
    axes[1].set_title("bottom-right mask: RIGHT")
    assert problems_of(fig) == ""


def test_tick_labels_that_nearly_touch_are_refused():
    """A symlog axis with its linear part narrow puts "0" a few pixels from "10¹": they read as "010¹"."""
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot([0, 10, 100, 16384], [1, 0.9, 0.5, 0.1])
    ax.set_xscale("symlog", linthresh=64), ax.set_xlim(0, 16384)
    ax.set_xlabel("distance"), ax.set_ylabel("score")
    found = problems_of(fig)
    assert "nearly touch" in found and "{0}$" in found and "{10^{1}}$" in found
    ax.set_xticks([0, 100, 1000, 10000])
    assert problems_of(fig) == ""


def test_values_in_a_row_of_cells_that_nearly_touch_are_refused():
    """Six values a cell apart in a narrow panel: a few pixels between them, "0.000.000.00" once the figure is
    scaled to the notebook's width."""
    weights = np.tril(np.full((6, 6), 0.004))
    fig, ax = plt.subplots(figsize=(2.6, 2.6))
    image = ax.imshow(weights, vmin=0, vmax=1)
    for i in range(6):
        for j in range(6):
            bold = "bold" if i == j else "normal"  # the row's largest marked
            ax.text(j, i, f"{weights[i, j]:.2f}", ha="center", va="center", fontsize=7, weight=bold)
    ax.set_xlabel("key"), ax.set_ylabel("query"), fig.colorbar(image, ax=ax, label="weight")
    assert "values written in a row of cells nearly touch ('0.00' and '0.00'" in problems_of(fig)
    fig.set_size_inches(4.5, 4.5)
    assert "nearly touch" not in problems_of(fig)


def test_a_key_in_words_names_every_colour():
    fig, ax = plt.subplots(figsize=(3, 3))
    for j, colour in enumerate(["lightgray", "tab:orange", "tab:blue"]):
        ax.add_patch(plt.Rectangle((j, 0), 1, 1, facecolor=colour))
    ax.set_xlim(0, 3), ax.set_xlabel("key block"), ax.set_ylabel("query block")
    ax.set_title("tiles (orange: masked inside, grey: skipped)")
    assert "the texts name orange, grey but not the colour #1f77b4" in problems_of(fig)
    ax.set_title("tiles (orange: masked inside, blue: computed, grey: skipped)")
    assert problems_of(fig) == ""


def test_an_axis_of_numbers_needs_two_labelled_ticks():
    """Notebook 15's bytes figure once had "1000" alone on its log axis: the MiB its text quotes could not be read."""
    fig, ax = plt.subplots()
    ax.plot([2, 4, 8], [448, 504, 1792], "o-", color="tab:blue")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(plt.NullFormatter())
    ax.set_xlabel("ranks"), ax.set_ylabel("MiB")
    assert "a single labelled tick ('1000') on the y axis" in problems_of(fig)
    ax.set_yticks([448, 1000, 1792], labels=["448", "1000", "1792"])
    ax.yaxis.set_minor_formatter(plt.NullFormatter())
    assert "single labelled tick" not in problems_of(fig)


def test_the_rows_and_columns_of_a_heatmap_get_whole_ticks():
    """Notebook 14's tiles widget once numbered its blocks -0.50, 0.00, 0.50 ... for a 2 x 2 grid."""
    fig, ax = plt.subplots()
    im = ax.imshow(np.arange(4.0).reshape(2, 2))
    fig.colorbar(im, ax=ax, label="value")
    ax.set_xlabel("key block"), ax.set_ylabel("query block")
    found = problems_of(fig)
    assert "fractional tick labels ('−0.50', '−0.25', '0.25') on the x axis of counts or indices" in found
    assert "on the y axis of counts or indices" in found
    ax.set_xticks(range(2)), ax.set_yticks(range(2))
    assert "fractional" not in problems_of(fig)


def test_counts_get_whole_ticks_and_measurements_keep_theirs():
    fig, (counts, seconds) = plt.subplots(1, 2, figsize=(8, 3))
    counts.plot([1, 2, 3], [5, 7, 6], "o-", color="tab:blue")  # x: 1.00, 1.25, ... steps of what is counted
    counts.set_xlabel("ranks"), counts.set_ylabel("ms")
    seconds.plot([0.1, 0.2, 0.3], [5, 7, 6], "o-", color="tab:blue")
    seconds.set_xlabel("seconds"), seconds.set_ylabel("ms")
    fig.tight_layout()
    found = problems_of(fig)
    assert "fractional tick labels" in found and "on the x axis of counts" in found
    assert found.count("fractional") == 1, found  # 0.15 s is a value, not a fraction of a count
    counts.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    assert "fractional" not in problems_of(fig)
