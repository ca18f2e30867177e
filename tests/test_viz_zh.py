"""Figures in the Chinese notebooks: labels in Chinese, drawn with a CJK font (no empty boxes), and English
where no CJK font is installed (Debian: fonts-noto-cjk, which .ci/run installs)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from course_utils import viz_zh

ROOT = Path(__file__).resolve().parents[1]
# figure texts the notebooks' code sets as string literals (f-strings included)
LABEL_CALL = re.compile(
    r"""(?:set_title|set_xlabel|set_ylabel|suptitle|title|label|xlabel|ylabel)\s*[=(]\s*"""
    r"""(f?)(["'])(.+?)(?<!\\)\2"""
)
# texts that read the same in Chinese: formulas and symbols
SAME_IN_CHINESE = {
    "q·k",
    "q·k / √d_k",
    "softmax(q·k)",
    "softmax(q·k / √d_k)",
    "d_k",
    "cos(m θ_i), head_dim={head_dim}, base={base:g}",
}
# sample values for f-string fields that the translation depends on
FIELDS = {
    "LABELS[mode]": "forward",
    "role": " (induction head)",
    "kind": "mean",
    "quantity": "milliseconds, lower",
    "machine": "AMD EPYC, 2 threads",
    "which": "warmed-up",
}


def notebook_labels():
    found = set()
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code":
                for m in LABEL_CALL.finditer("".join(cell["source"])):
                    found.add((path.stem[:2], m.group(1) == "f", m.group(3)))
    return sorted(found)


def _example(text):
    """An f-string's text with sample values in place of its fields."""
    text = text.replace("\\n", "\n")
    return re.sub(r"\{([^{}]*)\}", lambda m: FIELDS.get(m.group(1), "7"), text)


def test_every_figure_text_of_the_notebooks_has_chinese():
    missing = []
    for nb, is_f, text in notebook_labels():
        if text in SAME_IN_CHINESE:
            continue
        sample = _example(text) if is_f else text
        translated = viz_zh.translate(sample)
        if translated == sample or not re.search(r"[\u4e00-\u9fff]", translated):
            missing.append(f"notebook {nb}: {text!r}")
    assert not missing, "add these to course_utils/viz_zh.py:\n" + "\n".join(missing)


def test_patterns_keep_the_values():
    assert viz_zh.translate("head 3") == "头 3"
    assert (
        viz_zh.translate("layer 1, head 2 (induction head)\nprev 0.10, ind 0.97")
        == "第 1 层，头 2（归纳头）\nprev 0.10, ind 0.97"
    )
    assert viz_zh.translate("Your") == "Your" and viz_zh.translate(0.5) == 0.5


_DRAW = """
import warnings
warnings.simplefilter("always")
import matplotlib
matplotlib.use("Agg")
import torch
from course_utils import viz
if {no_font}:
    viz._cjk_family[:] = [None]
with warnings.catch_warnings(record=True) as caught:
    fig = viz.plot_head_grid(torch.full((2, 3, 3), 1 / 3).numpy(), tokens=list("abc"), title="attention weights")
    fig.savefig("out.png")
ax = fig.axes[0]
print(ax.get_xlabel(), "|", ax.get_title(), "|", fig._suptitle.get_text())
print("glyph warnings:", sum("Glyph" in str(w.message) for w in caught))
"""


def _draw(tmp_path, no_font=False):
    folder = tmp_path / "zh-CN"
    folder.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "ATTN_LANG"}
    out = subprocess.run(
        [sys.executable, "-c", _DRAW.format(no_font=no_font)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_chinese_labels_are_drawn_with_a_cjk_font(tmp_path):
    from course_utils import viz

    if viz.cjk_font() is None:
        if os.environ.get("CI", "").lower() in ("1", "true"):
            pytest.fail("no CJK font installed: .ci/run installs Debian's fonts-noto-cjk")
        pytest.skip("no CJK font installed (Debian: apt-get install fonts-noto-cjk)")
    out = _draw(tmp_path)
    assert "键（key） | 头 0 | 注意力权重" in out and "glyph warnings: 0" in out, out


def test_without_a_cjk_font_figures_stay_english(tmp_path):
    out = _draw(tmp_path, no_font=True)
    assert "key | head 0 | attention weights" in out and "glyph warnings: 0" in out, out


@pytest.mark.parametrize(
    "lang, font, says", [("zh", None, True), ("zh", "Noto Sans CJK SC", False), ("en", None, False)]
)
def test_a_missing_cjk_font_is_said_once(monkeypatch, capsys, lang, font, says):
    """A Chinese notebook without a CJK font says once why its figures are English, naming what to install."""
    from course_utils import viz

    monkeypatch.setattr(viz, "_cjk_family", [font])
    monkeypatch.setattr(viz, "_noticed", [])
    monkeypatch.setattr(viz, "current_language", lambda: lang)
    assert viz.notice_missing_cjk_font() is says
    assert viz.notice_missing_cjk_font() is False  # once
    out = capsys.readouterr()
    assert out.err == ""
    assert out.out == (viz.NO_CJK_FONT_NOTICE + "\n" if says else "")
    if says:
        for package in ("fonts-noto-cjk", "google-noto-sans-cjk-fonts", "PingFang", "Microsoft YaHei"):
            assert package in out.out


_IMPORT_WITHOUT_FONTS = """
import ipykernel
import matplotlib
matplotlib.use("Agg")
from matplotlib import font_manager
font_manager.fontManager.ttflist = []  # a machine without a CJK font (nor any other: nothing is drawn)
font_manager.findSystemFonts = lambda *args, **kwargs: []
from course_utils import viz
from course_utils import viz  # imported twice, said once
"""


@pytest.mark.parametrize("in_jupyterlab", [True, False])
def test_the_notice_is_for_jupyterlab_only(tmp_path, in_jupyterlab):
    """A Chinese notebook open in JupyterLab (whose server sets JPY_SESSION_NAME for the kernel) says it once on
    import; a kernel that nbval, nbconvert or the grader start, or a script, says nothing, so committed outputs
    never depend on the machine's fonts."""
    folder = tmp_path / "zh-CN"
    folder.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("ATTN_LANG", "JPY_SESSION_NAME")}
    if in_jupyterlab:
        env["JPY_SESSION_NAME"] = str(folder / "01_self_attention.ipynb")
    out = subprocess.run(
        [sys.executable, "-c", _IMPORT_WITHOUT_FONTS], cwd=folder, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and out.stderr == "", out.stderr
    from course_utils.viz import NO_CJK_FONT_NOTICE

    assert out.stdout == (NO_CJK_FONT_NOTICE + "\n" if in_jupyterlab else ""), out.stdout
