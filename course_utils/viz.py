"""Figures for the notebooks: attention heatmaps, and live figures driven by ipywidgets.

``live_figure`` draws once with the controls' starting values and shows that figure as an ordinary
image output, so it is visible without a widget front end (nbval, GitHub's viewer). In JupyterLab the
controls appear above it, and each change redraws the figure in place (through a display id).

In Chinese (``course_utils.lang``: the Chinese notebooks, or ``ATTN_LANG=zh``) figure texts are translated as
they are set (``viz_zh``) and drawn with an installed CJK font; without such a font they stay English rather than
show empty boxes, and a notebook open in JupyterLab says so once, when it imports this module
(``NO_CJK_FONT_NOTICE``).
"""

from __future__ import annotations

import io
import os
import sys

import matplotlib.pyplot as plt
import torch
from matplotlib import font_manager
from matplotlib.text import Text

from . import figure_check, viz_zh
from .lang import current_language, pick

# families with Chinese glyphs, most wanted first (Debian's fonts-noto-cjk, Source Han, WenQuanYi, macOS, Windows)
CJK_FAMILIES = (
    "Noto Sans CJK SC",
    "Noto Sans CJK JP",
    "Noto Sans SC",
    "Source Han Sans SC",
    "Source Han Sans CN",
    "WenQuanYi Zen Hei",
    "WenQuanYi Micro Hei",
    "PingFang SC",
    "Hiragino Sans GB",
    "Heiti SC",
    "Microsoft YaHei",
    "SimHei",
    "Arial Unicode MS",
)
_cjk_family: list = []  # [family or None] once looked up


def cjk_font() -> str | None:
    """The first installed font family of ``CJK_FAMILIES``, or None. Fonts installed after matplotlib built its
    font cache are found too."""
    if not _cjk_family:

        def first():
            names = {f.name for f in font_manager.fontManager.ttflist}
            return next((family for family in CJK_FAMILIES if family in names), None)

        family = first()
        if family is None:
            for path in font_manager.findSystemFonts():
                if any(k in path.lower() for k in ("cjk", "wqy", "sourcehan", "pingfang", "yahei", "simhei")):
                    try:
                        font_manager.fontManager.addfont(path)
                    except (OSError, RuntimeError, ValueError):
                        continue
            family = first()
        _cjk_family.append(family)
    return _cjk_family[0]


def speaks_chinese() -> bool:
    """Whether figures are labelled in Chinese now: the course's language is Chinese and a CJK font is there."""
    return current_language() == "zh" and cjk_font() is not None


# printed once in a Chinese notebook without a CJK font: on stdout, not a warning
NO_CJK_FONT_NOTICE = (
    "提示：没有找到中文字体，图中的文字会显示为英文。装一个中文字体、重启内核即可："
    "Debian/Ubuntu 装 fonts-noto-cjk（sudo apt-get install fonts-noto-cjk），"
    "Fedora 装 google-noto-sans-cjk-fonts（sudo dnf install google-noto-sans-cjk-fonts）；"
    "macOS 自带 PingFang，Windows 自带 Microsoft YaHei（微软雅黑）。"
)
_noticed: list = []  # [True] once the notice is printed


def notice_missing_cjk_font() -> bool:
    """In Chinese without a CJK font, print ``NO_CJK_FONT_NOTICE`` once per process; return whether it printed."""
    if _noticed or current_language() != "zh" or cjk_font() is not None:
        return False
    _noticed.append(True)
    print(NO_CJK_FONT_NOTICE)
    return True


def _use_cjk_font() -> None:
    # Latin text keeps the default font; a glyph it lacks falls back to the CJK family (matplotlib >= 3.6)
    latin = font_manager.FontProperties(family=plt.rcParams["font.family"]).get_family()[0]
    if latin in ("sans-serif", "serif", "monospace", "cursive", "fantasy"):
        latin = plt.rcParams[f"font.{latin}"][0]  # type: ignore[index]  # the stubs take literal keys only
    plt.rcParams["font.family"] = [latin, cjk_font()]


def _translating_set_text(set_text):
    def set_text_in_language(self, s):
        if speaks_chinese():
            s = viz_zh.translate(s)
        return set_text(self, s)

    set_text_in_language.__wrapped__ = set_text
    return set_text_in_language


if speaks_chinese():
    _use_cjk_font()
    if not hasattr(Text.set_text, "__wrapped__"):
        Text.set_text = _translating_set_text(Text.set_text)  # type: ignore[method-assign]  # patched on purpose
elif "ipykernel" in sys.modules and os.environ.get("JPY_SESSION_NAME"):
    # a notebook open in JupyterLab (its server names the kernel's session): the learner sees it in the first output.
    # Not in kernels that nbval, nbconvert or the grader start, so no committed output depends on the machine's fonts
    notice_missing_cjk_font()


def _in_a_kernel() -> bool:
    """Whether this process is a Jupyter kernel (not merely one that imported ipykernel, as nbval's pytest does)."""
    kernelapp = sys.modules.get("ipykernel.kernelapp")
    return kernelapp is not None and kernelapp.IPKernelApp.initialized()


if os.environ.get(figure_check.CHECK_ENV_VAR) and _in_a_kernel():
    # the kernels of the test suite's nbval run (tests/conftest.py): every figure is checked before it is shown
    figure_check.check_when_drawn(chinese=speaks_chinese)


def plot_attention(
    weights, tokens=None, ax=None, title=None, key_tokens=None, cmap="viridis", annotate=True, vmax=None, decimals=2
):
    """Heatmap of one (num_queries, num_keys) weight matrix, queries down, keys across.

    ``annotate``: write each weight in its cell (matrices up to 10 x 10), the largest of each row in bold (the key
    that query attends to most, even where two weights round alike). Without annotations, give the image a colour
    bar (``plot_head_grid`` does). ``vmax``: the top of the colour scale (default: the largest weight).
    """
    weights = torch.as_tensor(weights).detach().float().cpu()
    if ax is None:
        _, ax = plt.subplots(figsize=(4, 3.5))
    top = max(1e-9, float(weights.max())) if vmax is None else vmax
    image = ax.imshow(weights.numpy(), cmap=cmap, vmin=0.0, vmax=top)
    key_tokens = key_tokens if key_tokens is not None else tokens
    if tokens is not None:
        ax.set_yticks(range(len(tokens)), tokens)
    if key_tokens is not None:
        ax.set_xticks(range(len(key_tokens)), key_tokens, rotation=45, ha="right")
    annotated = annotate and weights.numel() <= 100
    if annotated:
        largest = weights.argmax(dim=-1).tolist()
        for (i, j), value in _cells(weights):
            ax.text(
                j,
                i,
                f"{value:.{decimals}f}",
                ha="center",
                va="center",
                fontsize=7,
                fontweight="bold" if j == largest[i] else "normal",
                color="white" if value < 0.6 * top else "black",
            )
    ax.set_xlabel(KEY_BOLD_LABEL if annotated else "key")
    ax.set_ylabel("query")
    if title:
        ax.set_title(title)
    return image


KEY_BOLD_LABEL = "key (bold: the largest weight of each row)"


def _cells(matrix):
    for i in range(matrix.shape[0]):
        for j in range(matrix.shape[1]):
            yield (i, j), float(matrix[i, j])


def plot_head_grid(weights, tokens=None, title=None, ncols=None, annotate=False):
    """One heatmap per head of a (num_heads, num_queries, num_keys) weight tensor; returns the figure.

    The heads share one colour scale: with ``annotate`` each cell shows its weight (the panels grow to fit the
    numbers), else one colour bar beside the grid says what the colours mean.
    """
    weights = torch.as_tensor(weights).detach().float().cpu()
    num_heads, num_queries, num_keys = weights.shape
    ncols = ncols or min(num_heads, 4)
    nrows = -(-num_heads // ncols)
    # an annotated cell needs about 0.45 in for "0.00" at 7 pt; the labels around a panel about 1.4 in
    width, height = (0.45 * num_keys + 1.4, 0.45 * num_queries + 1.4) if annotate else (3.2, 3.0)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    vmax = max(1e-9, float(weights.max()))
    for h, ax in enumerate(axes.flat):
        if h < num_heads:
            image = plot_attention(weights[h], tokens, ax=ax, title=f"head {h}", annotate=annotate, vmax=vmax)
        else:
            ax.axis("off")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    if not annotate:
        fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="attention weight")
    return fig


def figure_png(fig) -> bytes:
    """Render ``fig`` to PNG bytes and close it (so the notebook does not also show it inline)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def compact(width: str = "210px") -> dict:
    """Keyword arguments for a narrow ipywidgets control whose whole description shows:
    ``widgets.IntSlider(..., description="kv heads", **viz.compact("210px"))``."""
    import ipywidgets as widgets

    return {"style": {"description_width": "initial"}, "layout": widgets.Layout(width=width)}


def live_figure(draw, **controls):
    """Show ``draw(**values)``'s figure under ipywidgets ``controls``; redraw whenever one changes.

    ``draw`` takes the controls' values as keyword arguments and returns a matplotlib figure.
    Returns the widget box (or None when ipywidgets is missing, when only the static figure shows).
    """
    from IPython.display import Image, display

    values = {name: widget.value for name, widget in controls.items()}
    try:
        import ipywidgets as widgets
    except ImportError:  # no widgets: the static figure alone
        display(Image(figure_png(draw(**values))))
        return None
    # wrap the controls rather than squeeze them: six in one row shrink JupyterLab's sliders to 0 px
    box = widgets.HBox(list(controls.values()), layout=widgets.Layout(flex_flow="row wrap"))
    display(box)
    handle = display(Image(figure_png(draw(**values))), display_id=True)

    def redraw(_change=None):
        current = {name: widget.value for name, widget in controls.items()}
        handle.update(Image(figure_png(draw(**current))))

    for widget in controls.values():
        widget.observe(redraw, names="value")
    return box


def _clock(seconds: int) -> str:
    return f"{seconds // 60}:{seconds % 60:02d}"


class Countdown:
    """A countdown for timed practice: ▶ starts it, ⏸ pauses, ■ resets; show it as a cell's value.

    ipywidgets' ``Play`` ticks once a second in the browser, and the progress bar is linked to it in the
    browser too (``jslink``), so the clock keeps going while a cell runs; the label saying the time left
    catches up when the kernel is free. Without a front end (nbclient, nbgrader) nothing ticks: it stays at 0.

    Re-running the timer's cell (Run All) gives back the kernel's countdown of that length while it has time on
    it, running or paused, so the clock keeps its time; ■ sets it back to zero, ``fresh=True`` makes a new one.
    """

    _kept: dict = {}  # total seconds -> the kernel's countdown of that length

    def __new__(cls, minutes: float = 20, *, fresh: bool = False):
        kept = cls._kept.get(int(round(minutes * 60)))
        if kept is not None and not fresh and (kept.play.playing or 0 < kept.elapsed_s < kept.total_s):
            return kept
        return super().__new__(cls)

    def __init__(self, minutes: float = 20, *, fresh: bool = False):
        if getattr(self, "widget", None) is not None:  # the kept countdown (__new__): its clock goes on
            return
        import ipywidgets as widgets

        self.total_s = int(round(minutes * 60))
        if self.total_s <= 0:
            raise ValueError(
                pick(
                    f"minutes must be positive, got {minutes}",
                    f"minutes 必须为正，收到的是 {minutes}",
                )
            )
        self.play = widgets.Play(value=0, min=0, max=self.total_s, step=1, interval=1000, show_repeat=False)
        self.bar = widgets.IntProgress(value=0, min=0, max=self.total_s, layout=widgets.Layout(width="240px"))
        self._link = widgets.jslink((self.play, "value"), (self.bar, "value"))
        self.label = widgets.Label(self.text)
        self.play.observe(self._tick, names="value")
        self.widget = widgets.HBox([self.play, self.bar, self.label])
        Countdown._kept[self.total_s] = self

    @property
    def elapsed_s(self) -> int:
        return int(self.play.value)

    @property
    def text(self) -> str:
        total, left = _clock(self.total_s), _clock(self.total_s - self.elapsed_s)
        if self.elapsed_s >= self.total_s:
            return pick(f"time is up ({total})", f"时间到（{total}）")
        return pick(f"{left} left of {total}", f"剩余 {left}（共 {total}）")

    def _tick(self, _change=None):
        self.label.value = self.text
        self.bar.bar_style = "danger" if self.elapsed_s >= self.total_s else ""

    def stop(self) -> str:
        """Pause the clock; returns a line saying so, with the time used (▶ starts the clock again)."""
        self.play.playing = False
        used, total = _clock(self.elapsed_s), _clock(self.total_s)
        return pick(
            f"clock paused: time used {used} of {total} (▶ on the clock goes on)",
            f"计时已暂停：用时 {used}（共 {total}）（按计时器上的 ▶ 继续）",
        )

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)
