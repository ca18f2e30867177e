"""The figure check: what a learner sees in a figure, read from matplotlib's own objects (never from pixels).

``figure_problems(fig)`` lists what keeps a figure from telling its story, one sentence each:

- an axes without a title or axis labels, an axis of numbers without a label, a heatmap without query/key labels;
- two texts that overlap (their window extents after layout: tick labels, titles, annotations, legends), and tick
  labels or a heatmap row's values side by side so near that they read as one ("0" and "10¹", "0.000.000.00");
- a heatmap with neither a colour bar nor its values written in its cells, and one whose written values round
  away the largest value of a row (the row's story);
- colours without a key: bars of several colours, or a line among other artists, that no legend or nearby text
  names; a colour standing for two methods, or a method drawn in two colours, across the panels of one figure;
- a legend covering the data; a bar of height 0 with no value written (it reads as missing data); cells the colour
  of the background; bars on a log axis (their lengths understate the ratios); shapes whose heights differ on an axis
  with neither ticks nor a label;
- an axis of numbers with a single labelled tick in its range (a value cannot be read off it), and fractional
  tick labels ("0.5", "-0.50") on an axis of counts or indices: a heatmap's rows and columns, or data that are
  all whole numbers;
- a colour a text names ("orange: first copy") that no artist shows at full strength (a tint over an image is
  another colour); a key in words ("orange: masked, grey: skipped") that leaves out a colour drawn; one panel
  tagged with a verdict ("WRONG") and another not;
- in a Chinese figure, a label with no Chinese in it (``COURSE_TERMS``, numbers and symbols excepted).

With ``ATTN_CHECK_FIGURES=1`` in its environment, a kernel that imports ``course_utils.viz`` checks every figure as it
is drawn for display (``check_when_drawn``) and raises ``FigureProblems`` instead of showing a figure with problems:
nbval, which runs every notebook in ``make test``, then fails at that cell and shows the list.
"""

from __future__ import annotations

import functools
import math
import re

import numpy as np
from matplotlib.backend_bases import FigureCanvasBase
from matplotlib.collections import PathCollection, QuadMesh
from matplotlib.colors import to_hex, to_rgb
from matplotlib.container import BarContainer
from matplotlib.image import AxesImage
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from . import viz_zh

CHECK_ENV_VAR = "ATTN_CHECK_FIGURES"
# Latin words a Chinese figure may keep: the course's terms (as the Chinese prose writes them), units and function
# names a formula shows. Anything else in a Chinese figure's label is English to translate (viz_zh.py).
COURSE_TERMS = frozenset(
    {
        "KV",
        "RoPE",
        "MHA",
        "GQA",
        "MQA",
        "MLA",
        "SDPA",
        "token",
        "tokens",
        "softmax",
        "cache",
        "batch",
        "head_dim",
        "ms",
        "MiB",
        "GiB",
        "KiB",
        "GFLOP",
        "float32",
        "bfloat16",
        "float16",
        "cos",
        "sin",
        "max",
        "base",
        "YaRN",
        "NTK",
    }
)
# model families, names in any language
MODEL_NAMES = frozenset({"Llama", "Falcon", "Mistral", "DeepSeek", "GPT", "Qwen", "Gemma"})
OVERLAP_PX = 1.0  # texts may touch; overlapping by more than this (in both directions) is a collision
# neighbours in a line of texts (tick labels, a heatmap row's values) closer than this, in font heights, read as one:
# "0" and "10¹" as "010¹", three zeros as "0.000.000.00" once the notebook scales the figure down to its width
MIN_GAP_EM = 0.5
NEAR_PX = 12.0  # a text this close to a line names it
MAX_CATEGORIES = 8  # an image of at most this many whole numbers is a mask or a map of categories
_CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
_SCIENTIFIC = re.compile(r"\\times\s*\\?\w*\s*10\^|×\s*10")  # "4×10⁰" on a log axis
_VERDICT = re.compile(r"\b(?:WRONG|RIGHT|CORRECT|OK)\b|错误|正确|[✓✗✅❌]")
# colours a text may name, each with the colours that show it (matplotlib's CSS and tab: colours)
NAMED_COLOURS = {
    "orange": ("orange", "tab:orange", "darkorange"),
    "red": ("red", "tab:red", "crimson"),
    "green": ("green", "tab:green", "limegreen"),
    "blue": ("blue", "tab:blue", "royalblue"),
    "purple": ("purple", "tab:purple"),
    "grey": ("gray", "lightgray", "gainsboro", "darkgray", "tab:gray"),
    "gray": ("gray", "lightgray", "gainsboro", "darkgray", "tab:gray"),
    "橙色": ("orange", "tab:orange", "darkorange"),
    "红色": ("red", "tab:red", "crimson"),
    "绿色": ("green", "tab:green", "limegreen"),
    "蓝色": ("blue", "tab:blue", "royalblue"),
    "紫色": ("purple", "tab:purple"),
    "灰色": ("gray", "lightgray", "gainsboro", "darkgray", "tab:gray"),
}
SAME_COLOUR = 0.25  # largest channel difference (0..1) at which a drawn colour still reads as the named one
SOLID = 0.5  # an artist at least this opaque shows its own colour; a fainter one over an image shows a blend
_NUMBER = re.compile(r"^[\s−\-+]*[\d.,]+(e[−\-+]?\d+)?\s*%?$|^\$.*\$$")


class FigureProblems(AssertionError):
    """A figure the check refuses; its message lists the problems."""


def figure_problems(fig, chinese: bool = False) -> list[str]:
    """The problems of ``fig`` as it will be drawn; ``chinese``: it is a Chinese notebook's figure."""
    renderer = _draw(fig)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    plots = [ax for ax in axes if not _is_colorbar(ax)]
    problems = []
    for ax in plots:
        name = _name(ax)
        problems += [f"{name}: {p}" for p in _label_problems(ax)]
        problems += [f"{name}: {p}" for p in _heatmap_problems(ax, fig, renderer)]
        problems += [f"{name}: {p}" for p in _key_problems(ax, renderer)]
        problems += [f"{name}: {p}" for p in _bar_problems(ax, renderer)]
        problems += [f"{name}: {p}" for p in _log_bar_problems(ax)]
        problems += [f"{name}: {p}" for p in _unread_height_problems(ax)]
        problems += [f"{name}: {p}" for p in _tick_problems(ax)]
    problems += _overlaps(_texts(fig, axes, renderer))
    problems += [p for ax in axes if ax.axison for p in _crowded_ticks(ax, renderer)]
    problems += _colour_problems(plots)
    problems += _named_colour_problems(fig, plots)
    problems += _unnamed_colour_problems(fig, plots)
    problems += _verdict_problems(plots)
    if chinese:
        problems += [
            f"English in a Chinese figure: {t!r} (add its Chinese to course_utils/viz_zh.py: LABELS[{t!r}] = ..., or a "
            "PATTERNS entry for a text made by an f-string)"
            for t in _labels(fig, axes)
            if _latin_only(t)
        ]
    return list(dict.fromkeys(problems))


def check_figure(fig, chinese: bool = False) -> None:
    """Raise ``FigureProblems`` naming the figure and each problem, when there is one."""
    problems = figure_problems(fig, chinese)
    if problems:
        raise FigureProblems(f"figure {_figure_name(fig)!r} does not tell its story:\n- " + "\n- ".join(problems))


def check_when_drawn(chinese=lambda: False) -> None:
    """From now on, check every figure before it is drawn to a file or for display (inline figures and
    ``viz.figure_png`` both go through ``print_figure``); ``chinese()`` says whether figures are Chinese now."""
    if hasattr(FigureCanvasBase.print_figure, "__wrapped__"):
        return
    print_figure = FigureCanvasBase.print_figure

    @functools.wraps(print_figure)
    def print_checked_figure(self, *args, **kwargs):
        check_figure(self.figure, chinese())
        return print_figure(self, *args, **kwargs)

    FigureCanvasBase.print_figure = print_checked_figure  # type: ignore[method-assign]  # patched on purpose


# --- what the figure holds ---


def _draw(fig):
    fig.draw_without_rendering()  # layout done (tight, constrained), tick labels placed
    canvas = fig.canvas
    return canvas.get_renderer() if hasattr(canvas, "get_renderer") else fig._get_renderer()


def _is_colorbar(ax) -> bool:
    return hasattr(ax, "_colorbar")


def _title(ax) -> str:
    return " ".join(t for t in (ax.get_title("left"), ax.get_title(), ax.get_title("right")) if t)


def _name(ax) -> str:
    title = _title(ax)
    if title:
        return f"axes {title!r}"
    index = ax.figure.axes.index(ax)
    return f"axes {index} ({ax.get_xlabel() or 'no x label'} / {ax.get_ylabel() or 'no y label'})"


def _figure_name(fig) -> str:
    suptitle = fig._suptitle.get_text() if fig._suptitle is not None else ""
    return suptitle or next((_title(ax) for ax in fig.axes if _title(ax)), "untitled")


def _shown(text) -> bool:
    return text.get_visible() and bool(text.get_text().strip())


def _tick_labels(axis):
    low, high = sorted(axis.get_view_interval())
    ticks = axis.get_major_ticks() + axis.get_minor_ticks()
    for tick in ticks:
        loc = tick.get_loc()
        if loc is None or not (low - 1e-9 * (abs(low) + 1) <= loc <= high + 1e-9 * (abs(high) + 1)):
            continue
        if _shown(tick.label1):
            yield tick.label1
        if _shown(tick.label2):
            yield tick.label2


def _images(ax):
    return [im for im in ax.get_images() + [c for c in ax.collections if isinstance(c, QuadMesh)] if im.get_visible()]


def _image_array(image):
    array = np.ma.masked_invalid(np.ma.asarray(image.get_array(), dtype=float))
    return array if array.ndim == 2 else None  # an RGB(A) picture is not a heatmap


def _is_number(text: str) -> bool:
    return bool(_NUMBER.match(text.replace("\u2212", "-").strip()))


# --- the rules ---


def _label_problems(ax):
    if not ax.axison:  # a drawing, or an empty panel of a grid
        drawn = ax.texts or ax.patches or ax.lines or ax.collections or _images(ax)
        return ["a drawing without a title"] if drawn and not _title(ax) else []
    problems = []
    if not (_title(ax) or ax.get_xlabel() or ax.get_ylabel()):
        problems.append("no title and no axis labels")
    heatmap = any(_image_array(im) is not None for im in _images(ax))
    for axis, label in ((ax.xaxis, ax.get_xlabel()), (ax.yaxis, ax.get_ylabel())):
        if label:
            continue
        texts = [t.get_text() for t in _tick_labels(axis)]
        if heatmap and texts:
            problems.append(f"a heatmap without a label on its {axis.axis_name} axis (what its rows or columns are)")
        elif texts and all(_is_number(t) for t in texts):
            problems.append(f"numbers on the {axis.axis_name} axis without a label saying what they are")
    for axis in (ax.xaxis, ax.yaxis):
        powers = [t.get_text() for t in _tick_labels(axis) if _SCIENTIFIC.search(t.get_text())]
        if powers:
            problems.append(
                f"tick labels in scientific form on the {axis.axis_name} axis ({powers[0]!r}): "
                "write plain numbers (a ScalarFormatter, or fewer minor labels)"
            )
    return problems


def _has_colorbar(image, fig) -> bool:
    for ax in fig.axes:
        colorbar = getattr(ax, "_colorbar", None)
        if colorbar is None:
            continue
        if colorbar.mappable is image or (
            colorbar.mappable.get_cmap().name == image.get_cmap().name
            and colorbar.mappable.get_clim() == image.get_clim()
        ):
            return True
    return False


def _cell_texts(ax, image, array):
    """{(row, column): Text} for the texts written inside the image's cells (data coordinates)."""
    if not isinstance(image, AxesImage):
        return {}
    left, right, bottom, top = image.get_extent()
    rows, cols = array.shape
    found = {}
    for text in ax.texts:
        if not _shown(text) or text.get_transform() != ax.transData:
            continue
        x, y = text.get_position()
        start, end = (top, bottom) if image.origin == "upper" else (bottom, top)  # where row 0 is, where it ends
        col = math.floor((x - left) / (right - left) * cols)
        row = math.floor((y - start) / (end - start) * rows)
        if 0 <= row < rows and 0 <= col < cols:
            found[(row, col)] = text
    return found


def _heatmap_problems(ax, fig, renderer):
    problems = []
    for image in _images(ax):
        array = _image_array(image)
        if array is None:
            continue
        values = np.unique(array.compressed())
        cells = _cell_texts(ax, image, array)
        annotated = len(cells) >= array.count()
        categories = len(values) <= MAX_CATEGORIES and bool(np.all(values == np.round(values)))  # a mask, a map
        if not (_has_colorbar(image, fig) or annotated or (categories and _has_key(ax, fig))):
            problems.append(
                "a heatmap without a colour bar or its values written in its cells"
                if not categories
                else "a map of categories whose colours no legend or title explains"
            )
        if annotated and not categories:
            problems += _rounded_away(array, cells)
        rows = [[cells[key] for key in sorted(cells) if key[0] == row] for row in range(array.shape[0])]
        crowded = [pair for row in rows for pair in _too_near(row, 0, renderer)]
        if crowded:
            first, second, gap = crowded[0]
            problems.append(
                f"values written in a row of cells nearly touch ({first.get_text()!r} and {second.get_text()!r}, "
                f"{gap:.0f} px apart): a larger figure, a smaller font or fewer digits"
            )
        if categories:
            background = to_rgb(ax.get_facecolor())
            faint = [v for v in values if _distance(image.to_rgba(v)[:3], background) < 0.06]
            if faint:
                problems.append(
                    "cells drawn in the background's colour (they vanish): give every category a visible colour"
                )
    return problems


def _has_key(ax, fig) -> bool:
    """A legend, or a title that says which colour means what ("dark = hidden", "orange: masked")."""
    if ax.get_legend() is not None:
        return True
    suptitle = fig._suptitle.get_text() if fig._suptitle is not None else ""
    return any(re.search(r"[=:：]", t) for t in (_title(ax), suptitle))


def _rounded_away(array, cells):
    """Rows whose largest value reads the same as a smaller one, and is not marked (bold) either."""
    problems = []
    for row in range(array.shape[0]):
        values = array[row]
        if values.count() < 2 or any((row, col) not in cells for col in range(array.shape[1]) if not values.mask[col]):
            continue
        best = cells[(row, int(values.argmax()))]
        ties = [
            cells[(row, col)]
            for col in range(array.shape[1])
            if not values.mask[col] and values[col] < values.max() and cells[(row, col)].get_text() == best.get_text()
        ]
        if any(_weight(t) == _weight(best) for t in ties):
            problems.append(
                f"row {row}: the largest value reads {best.get_text()!r} like a smaller one: write more "
                "digits or mark the largest (bold)"
            )
    return problems


def _weight(text) -> int:
    weight = text.get_fontweight()
    return (
        weight
        if isinstance(weight, int)
        else {"bold": 700, "heavy": 800, "black": 900, "semibold": 600, "demibold": 600, "demi": 600}.get(weight, 400)
    )


def _distance(a, b) -> float:
    return float(np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float)).max())


def _legend_labels(ax):
    legend = ax.get_legend()
    if legend is None:
        return {}
    return {
        text.get_text(): _colour(handle)
        for handle, text in zip(legend.legend_handles, legend.get_texts(), strict=False)
    }


def _colour(artist):
    if isinstance(artist, Line2D):
        return to_hex(artist.get_color())
    if isinstance(artist, Patch):
        return to_hex(artist.get_facecolor())
    if isinstance(artist, PathCollection) and len(artist.get_facecolor()):
        return to_hex(artist.get_facecolor()[0])
    return None


def _bars(ax):
    return [
        patch
        for container in ax.containers
        if isinstance(container, BarContainer)
        for patch in container.patches
        if patch.get_visible()
    ]


def _figure_legend_labels(fig) -> set:
    """The entries of the figure's own legends (``fig.legend``), which key the lines of every panel."""
    return {text.get_text() for legend in fig.legends for text in legend.get_texts()}


def _label_in(label: str, entries: set) -> bool:
    """Whether a line's label is one of a legend's entries, as drawn (a Chinese figure shows it translated)."""
    if not label or label.startswith("_"):
        return False
    return label in entries or viz_zh.translate(label) in entries


def _key_problems(ax, renderer):
    problems = []
    legend = ax.get_legend()
    keyed = set(ax.get_legend_handles_labels()[0]) if legend is not None else set()
    bar_colours = {to_hex(p.get_facecolor()) for p in _bars(ax)}
    if len(bar_colours) > 1 and legend is None:
        problems.append(f"bars in {len(bar_colours)} colours and no legend saying what each colour means")
    lines = [line for line in ax.get_lines() if line.get_visible() and len(line.get_xdata()) > 0]
    crowded = len(lines) > 1 or _images(ax) or _bars(ax) or ax.collections
    if crowded:
        texts = [t.get_window_extent(renderer) for t in ax.texts if _shown(t)]
        in_figure_legend = _figure_legend_labels(ax.figure)
        for line in lines:
            if line in keyed or _label_in(line.get_label(), in_figure_legend):
                continue
            box = line.get_window_extent(renderer)
            if not any(_gap(box, t) <= NEAR_PX for t in texts):
                style = {"--": "dashed ", ":": "dotted ", "-.": "dash-dotted "}.get(line.get_linestyle(), "")
                problems.append(f"a {style}line ({to_hex(line.get_color())}) that no legend or text names")
    if legend is not None:
        box = legend.get_window_extent(renderer).padded(-2)
        covered = sum(_area(box, p.get_window_extent(renderer)) > 4 for p in _bars(ax) if _height(p) > 0)
        points = sum(int(box.count_contains(line.get_transform().transform(line.get_xydata()))) for line in lines)
        if covered or points:
            problems.append("the legend covers the data (move it outside or to an empty corner)")
    return problems


def _height(patch) -> float:
    return abs(patch.get_height()) if patch.get_width() != 0 else 0.0


def _bar_problems(ax, renderer):
    bars = _bars(ax)
    texts = [t.get_window_extent(renderer) for t in ax.texts if _shown(t)]
    for patch in bars:
        box = patch.get_window_extent(renderer)
        if min(box.width, box.height) > 1.0:  # drawn: at least a pixel long
            continue
        if not any(_gap(box, t) <= NEAR_PX for t in texts):
            return ["a bar of length 0 with no value written next to it (it reads as missing data)"]
    return []


def _log_bar_problems(ax):
    """A bar's length on a log axis is not its value: 1 MiB against 64 MiB reads as about 1:8."""
    for container in ax.containers:
        if not isinstance(container, BarContainer) or not any(p.get_visible() for p in container.patches):
            continue
        axis = ax.xaxis if container.orientation == "horizontal" else ax.yaxis
        if axis.get_scale() != "linear":
            return [
                f"bars on a {axis.get_scale()} {axis.axis_name} axis (their lengths understate the ratios): "
                "draw dots on the log axis, or bars on a linear one with their values written"
            ]
    return []


def _unread_height_problems(ax):
    """Shapes whose heights (widths) differ say something on that axis: it needs ticks or a label to be read."""
    if not ax.axison:
        return []
    shapes = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_visible() and p.get_fill()]
    problems = []
    for axis, size in ((ax.yaxis, lambda p: abs(p.get_height())), (ax.xaxis, lambda p: abs(p.get_width()))):
        sizes = {round(size(p), 9) for p in shapes} - {0.0}
        if len(sizes) > 1 and not axis.get_label_text() and not list(_tick_labels(axis)):
            problems.append(
                f"shapes of {len(sizes)} different {'heights' if axis is ax.yaxis else 'widths'} on a "
                f"{axis.axis_name} axis with neither ticks nor a label: say what the {axis.axis_name} size means"
            )
    return problems


def _whole(values) -> bool:
    values = np.asarray(values, dtype=float).ravel()
    values = values[np.isfinite(values)]
    return values.size > 0 and bool(np.all(np.abs(values - np.round(values)) < 1e-9))


def _counts_or_indices(ax, axis) -> bool:
    """Whether ``axis`` shows whole numbers only: the rows or columns of an image placed at its cells' indices (the
    default extent), or an x axis whose plotted data (lines and points in data coordinates, bars) are all whole, with
    at least two different values (ranks, steps, heads, tokens). A y axis of whole values may be a measurement that
    happens to be whole, so only an image makes it one."""
    x = axis is ax.xaxis
    for image in _images(ax):
        array = _image_array(image)
        if array is None or not isinstance(image, AxesImage):
            continue
        left, right, bottom, top = image.get_extent()
        rows, cols = array.shape
        low, high = (left, right) if x else sorted((bottom, top))
        if math.isclose(low, -0.5) and math.isclose(high, (cols if x else rows) - 0.5):
            return True
    if _images(ax) or not x:
        return False
    coords = [
        np.asarray(line.get_xdata(), dtype=float)
        for line in ax.get_lines()
        if line.get_visible() and line.get_transform() == ax.transData
    ]
    points = [np.asarray(c.get_offsets(), dtype=float) for c in ax.collections if isinstance(c, PathCollection)]
    coords += [offsets[:, 0] for offsets in points if offsets.ndim == 2 and len(offsets)]
    coords += [np.array([patch.get_x() + patch.get_width() / 2]) for patch in _bars(ax)]
    values = np.concatenate([c.ravel() for c in coords]) if coords else np.array([])
    return _whole(values) and len(np.unique(values[np.isfinite(values)])) > 1


def _tick_value(text: str) -> float | None:
    try:
        return float(text.replace("\u2212", "-").replace(",", "").strip())
    except ValueError:
        return None


def _tick_problems(ax):
    """An axis of numbers needs two labelled ticks to read a value off it; counts and indices need whole ticks."""
    if not ax.axison:
        return []
    problems = []
    for axis in (ax.xaxis, ax.yaxis):
        labels = list(dict.fromkeys(t.get_text() for t in _tick_labels(axis)))
        numbers = [t for t in labels if _tick_value(t) is not None]
        if len(labels) == 1 and numbers:
            problems.append(
                f"a single labelled tick ({numbers[0]!r}) on the {axis.axis_name} axis: a value cannot be read off "
                "it (label more ticks: set_*ticks with the values the text quotes, or minor labels on a log axis)"
            )
        fractional = [t for t in numbers if not _whole([_tick_value(t)])]
        if fractional and _counts_or_indices(ax, axis):
            problems.append(
                f"fractional tick labels ({', '.join(repr(t) for t in fractional[:3])}) on the {axis.axis_name} "
                "axis of counts or indices: give it whole ticks (set_*ticks(range(...)) or MaxNLocator(integer=True))"
            )
    return problems


def _artist_colours(ax):
    """(rgb, opacity) of each artist drawn in ``ax``: lines, patches (their faces and edges), collections."""
    for line in ax.get_lines():
        if line.get_visible():
            yield to_rgb(line.get_color()), line.get_alpha() if line.get_alpha() is not None else 1.0
    for patch in ax.patches:
        if patch.get_visible():
            faces = [patch.get_facecolor()] if patch.get_fill() else []
            for rgba in faces + [patch.get_edgecolor()]:
                if rgba[3] > 0:
                    yield tuple(rgba[:3]), rgba[3]
    for collection in ax.collections:
        if collection.get_visible() and not isinstance(collection, QuadMesh):
            for rgba in list(collection.get_facecolor()) + list(collection.get_edgecolor()):
                yield tuple(rgba[:3]), rgba[3]


def _named(fig, axes) -> list:
    """The colour words the figure's texts say ("orange: masked inside, grey: skipped")."""
    words = " ".join(_labels(fig, axes)).lower()
    return [word for word in NAMED_COLOURS if re.search(rf"(?<![a-z]){word}(?![a-z])", words)]


def _named_colour_problems(fig, axes):
    """A text that says "orange" promises an orange artist; a faint orange span over a heatmap renders another
    colour (over viridis, a maroon). An artist shows its colour when it is solid, or faint on a plain background."""
    problems = []
    for word in _named(fig, axes):
        shown = [to_rgb(n) for n in NAMED_COLOURS[word]]
        seen = [
            alpha >= SOLID or not _images(ax)
            for ax in axes
            for rgb, alpha in _artist_colours(ax)
            if any(_distance(rgb, colour) <= SAME_COLOUR for colour in shown)
        ]
        if seen and not any(seen):
            problems.append(
                f"a text names {word!r} but every {word} artist is faint over an image (it renders another colour): "
                "draw it solid (an outline, a line) or name the colour it shows"
            )
    return problems


def _unnamed_colour_problems(fig, axes):
    """A key in words ("orange: masked, grey: skipped") must name every colour of the shapes it keys: a third colour
    it leaves out is a category the reader cannot read."""
    named = _named(fig, axes)
    if not named:
        return []
    shown = [to_rgb(n) for word in named for n in NAMED_COLOURS[word]]
    problems = []
    for ax in axes:
        if ax.get_legend() is not None or fig.legends:
            continue
        faces = {
            to_hex(p.get_facecolor())
            for p in ax.patches
            if isinstance(p, Rectangle) and p.get_visible() and p.get_fill() and p.get_facecolor()[3] > 0
        }
        unnamed = sorted(c for c in faces if not any(_distance(to_rgb(c), s) <= SAME_COLOUR for s in shown))
        if len(faces) > 1 and unnamed:
            problems.append(
                f"{_name(ax)}: the texts name {', '.join(named)} but not the colour {', '.join(unnamed)} it also "
                "draws: name every colour, or give a legend"
            )
    return problems


def _verdict_problems(axes):
    """Panels side by side compare: when one is tagged WRONG (or RIGHT), the reader looks for the tag on the others."""
    titles = [_title(ax) for ax in axes if _title(ax)]
    tagged = [t for t in titles if _VERDICT.search(t)]
    if tagged and len(tagged) < len(titles):
        untagged = next(t for t in titles if not _VERDICT.search(t))
        return [f"panel {tagged[0]!r} carries a verdict and panel {untagged!r} none: tag every panel or none"]
    return []


def _gap(a, b) -> float:
    dx = max(a.x0 - b.x1, b.x0 - a.x1, 0.0)
    dy = max(a.y0 - b.y1, b.y0 - a.y1, 0.0)
    return math.hypot(dx, dy)


def _area(a, b) -> float:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return w * h if w > 0 and h > 0 else 0.0


def _texts(fig, axes, renderer):
    """(text, window extent) of every text drawn."""
    texts = [t for t in fig.texts if _shown(t)]
    if fig._suptitle is not None and _shown(fig._suptitle):
        texts.append(fig._suptitle)
    for ax in axes:
        texts += [t for t in (ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label) if _shown(t)]
        texts += [t for t in ax.texts if _shown(t)]
        if ax.axison:
            texts += list(_tick_labels(ax.xaxis)) + list(_tick_labels(ax.yaxis))
        legend = ax.get_legend()
        if legend is not None and legend.get_visible():
            texts += [t for t in legend.get_texts() + [legend.get_title()] if _shown(t)]
    return [(t, _corners(t, renderer)) for t in dict.fromkeys(texts)]


def _corners(text, renderer):
    """The four corners of ``text`` as drawn (rotated text is a rotated rectangle, not its bounding box)."""
    box = text.get_window_extent(renderer)
    angle = math.radians(text.get_rotation() % 180)
    if min(abs(math.sin(angle)), abs(math.cos(angle))) < 1e-6 or "\n" in text.get_text():
        return np.array([[box.x0, box.y0], [box.x1, box.y0], [box.x1, box.y1], [box.x0, box.y1]])
    string, ismath = text._preprocess_math(text.get_text())
    width, height, _ = renderer.get_text_width_height_descent(string, text.get_fontproperties(), ismath=ismath)
    half = np.array([[-width, -height], [width, -height], [width, height], [-width, height]]) / 2
    turn = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    return half @ turn.T + [(box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2]


def _overlap_depth(a, b) -> float:
    """How far two convex quadrilaterals overlap (separating axes), in pixels; 0 when they do not."""
    depth = math.inf
    for quad in (a, b):
        for edge in np.diff(np.vstack([quad, quad[:1]]), axis=0):
            normal = np.array([-edge[1], edge[0]]) / (np.hypot(*edge) or 1.0)
            pa, pb = a @ normal, b @ normal
            depth = min(depth, min(pa.max(), pb.max()) - max(pa.min(), pb.min()))
            if depth <= 0:
                return 0.0
    return depth


def _overlaps(texts):
    if len(texts) < 2:
        return []
    quads = np.stack([quad for _, quad in texts])  # (n, 4, 2)
    low, high = quads.min(axis=1), quads.max(axis=1)
    # bounding boxes first, all pairs at once: only pairs whose boxes overlap can overlap
    depth = np.minimum(high[:, None], high[None]) - np.maximum(low[:, None], low[None])  # (n, n, 2)
    candidates = np.argwhere(np.triu((depth > OVERLAP_PX).all(axis=-1), k=1))
    return [
        f"texts overlap: {texts[i][0].get_text()!r} and {texts[j][0].get_text()!r}"
        for i, j in candidates
        if _overlap_depth(quads[i], quads[j]) > OVERLAP_PX
    ]


def _too_near(texts, along, renderer):
    """(text, next text, gap in pixels) for neighbours along x (``along`` 0) or y (1) nearer than ``MIN_GAP_EM``
    without overlapping (an overlap is reported as one)."""
    boxes = sorted(((t.get_window_extent(renderer), t) for t in texts), key=lambda item: item[0].get_points()[0][along])
    for (a, first), (b, second) in zip(boxes, boxes[1:], strict=False):
        gap = b.get_points()[0][along] - a.get_points()[1][along]
        if -OVERLAP_PX < gap < MIN_GAP_EM * first.get_fontsize() * first.figure.dpi / 72:
            yield first, second, gap


def _crowded_ticks(ax, renderer):
    """Unrotated tick labels next to each other on one side of an axis, too near: they do not overlap, yet read as
    one."""
    problems = []
    for axis, along in ((ax.xaxis, 0), (ax.yaxis, 1)):
        shown = set(_tick_labels(axis))
        for side in ("label1", "label2"):
            labels = [getattr(tick, side) for tick in axis.get_major_ticks() + axis.get_minor_ticks()]
            level = [t for t in labels if t in shown and t.get_rotation() % 180 == 0]
            problems += [
                f"tick labels {first.get_text()!r} and {second.get_text()!r} nearly touch ({gap:.0f} px apart): "
                "fewer ticks, or set them apart"
                for first, second, gap in _too_near(level, along, renderer)
            ]
    return problems


def _colour_problems(axes):
    """One colour per method across the panels: a label keeps its colour, a colour keeps its label."""
    colours, labels = {}, {}
    for ax in axes:
        for label, colour in _legend_labels(ax).items():
            if colour is None:
                continue
            colours.setdefault(label, set()).add(colour)
            labels.setdefault(colour, set()).add(label)
    problems = [
        f"{label!r} is drawn in {len(c)} colours ({', '.join(sorted(c))})" for label, c in colours.items() if len(c) > 1
    ]
    problems += [
        f"one colour ({colour}) stands for {len(ls)} methods: {', '.join(map(repr, sorted(ls)))}"
        for colour, ls in labels.items()
        if len(ls) > 1
    ]
    return problems


def _labels(fig, axes):
    """The texts a Chinese reader reads as words: titles, axis labels, legends, annotations, and tick labels of
    several words (a one-word tick label is a value: a token, a name, a number)."""
    texts = [t.get_text() for t in fig.texts if _shown(t)]
    if fig._suptitle is not None and _shown(fig._suptitle):
        texts.append(fig._suptitle.get_text())
    for ax in axes:
        texts += [_title(ax), ax.get_xlabel(), ax.get_ylabel()] + [t.get_text() for t in ax.texts if _shown(t)]
        if ax.axison:
            texts += [
                t.get_text()
                for axis in (ax.xaxis, ax.yaxis)
                for t in _tick_labels(axis)
                if len(t.get_text().split()) > 1
            ]
        legend = ax.get_legend()
        if legend is not None:
            texts += [t.get_text() for t in legend.get_texts() + [legend.get_title()] if _shown(t)]
    return [t for t in dict.fromkeys(texts) if t and t.strip()]


def _latin_only(text: str) -> bool:
    if _CJK.search(text):
        return False
    words = re.findall(r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)*", re.sub(r"\$[^$]*\$", "", text))
    return any(len(w) > 1 and "_" not in w and w not in COURSE_TERMS | MODEL_NAMES and not _is_symbol(w) for w in words)


def _is_symbol(word: str) -> bool:
    """A variable as formulas write it: d, T, L3H1, kv0, q4, d_k (a letter or two and digits)."""
    return bool(re.fullmatch(r"[A-Za-z]{1,2}\d*|[A-Za-z]\d+[A-Za-z]\d+", word))
