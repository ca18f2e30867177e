"""The class report: what a graded folder says about the class as a whole, for the instructor to read or project.

``make grade`` writes it beside grades.csv as ``report.html``, one self-contained page (figures inline as SVG) in the
batch's language: how the scores spread on each exercise, the named mistakes ranked by how many learners made them,
who shares each mistake (so that a TA can pair them), and the slowest submissions. It renders plain data
(``Learner``, ``Outcome``): the batch turns its reports into rows, so this module knows nothing of grading. Every
text that comes from a submission (a learner's file name) is HTML-escaped.
"""

from __future__ import annotations

import html
import io
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ..lang import pick

SLOWEST = 10  # submissions listed as the slowest
FIGURE_WIDTH = 8.0  # inches: 768 px in the page, whatever the number of exercises
FONT_SIZE = 13  # points: about 17 px in the page
BANDS = ("full", "partial", "zero", "missing")  # the score bands of the distribution figure, bottom to top
BAND_COLOURS = {"full": "#2e7d32", "partial": "#f9a825", "zero": "#c62828", "missing": "#bdbdbd"}


@dataclass
class Outcome:
    """One learner on one exercise: the points as grades.csv has them, and the mistake the grader named."""

    points: float
    max: float
    passed: bool
    mistake_key: str | None = None  # grades.csv's key (``scale_no_sqrt``); None when passed
    mistake: str | None = None  # the same in words, in the report's language
    named: bool = False  # a mistake the grader names (a misconception), not "timed out", "crashed", "missing"

    @property
    def band(self) -> str:
        if self.passed:
            return "full"
        return "partial" if self.points > 0 else "zero"


@dataclass
class Learner:
    name: str  # as shown (``names.shown``): escaped again here for HTML
    seconds: float
    outcomes: dict = field(default_factory=dict)  # exercise id -> Outcome
    error: str | None = None  # why it could not be graded, in words
    key: str = ""  # grades.csv's learner_key: unique in the batch (the name may be cut, and names may repeat)


# ---------------------------------------------------------------------------------------------------- the texts


def _t(lang: str, en: str, zh: str) -> str:
    return pick(en, zh, lang)


def _band_name(band: str, lang: str) -> str:
    return {
        "full": _t(lang, "all checks passed", "全部通过"),
        "partial": _t(lang, "some checks", "部分通过"),
        "zero": _t(lang, "no check passed", "全部未过"),
        "missing": _t(lang, "not submitted", "未提交"),
    }[band]


# ---------------------------------------------------------------------------------------------------- the numbers


def distribution(learners: list, exercises: list) -> dict:
    """exercise -> {band: number of learners}; a learner without the exercise counts as "missing"."""
    counts = {ex: dict.fromkeys(BANDS, 0) for ex in exercises}
    for learner in learners:
        for ex in exercises:
            outcome = learner.outcomes.get(ex)
            counts[ex][outcome.band if outcome else "missing"] += 1
    return counts


def mistakes(learners: list, named: bool = True) -> list:
    """[(exercise, mistake key, mistake in words, [learner names])], most learners first, then by exercise: the
    mistakes the grader named (``named``), or else what is no named mistake (did not run: timed out, crashed, not
    there, not implemented; or computed something no known mistake explains)."""
    groups: dict = defaultdict(list)
    words: dict = {}
    for learner in learners:
        for ex, outcome in learner.outcomes.items():
            if not outcome.passed and outcome.mistake_key and outcome.named == named:
                groups[(ex, outcome.mistake_key)].append(learner.name)
                words[(ex, outcome.mistake_key)] = outcome.mistake or outcome.mistake_key
    ranked = sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))
    return [(ex, key, words[(ex, key)], sorted(names)) for (ex, key), names in ranked]


def slowest(learners: list, count: int = SLOWEST) -> list:
    return sorted(learners, key=lambda learner: -learner.seconds)[:count]


# ---------------------------------------------------------------------------------------------------- the figure


def distribution_figure(counts: dict, lang: str):
    """A stacked bar per exercise: how many learners fall in each score band."""
    import matplotlib.pyplot as plt

    from ..viz import cjk_font

    exercises = list(counts)
    chinese = lang == "zh" and cjk_font()
    with (
        plt.rc_context({"font.size": FONT_SIZE}),
        plt.rc_context({"font.family": ["DejaVu Sans", cjk_font()]} if chinese else {}),
    ):
        fig, ax = plt.subplots(figsize=(max(FIGURE_WIDTH, 0.9 * len(exercises) + 4.0), 4.8))
        _draw_distribution(ax, counts, exercises, lang)
        fig.tight_layout()
    return fig


def _draw_distribution(ax, counts: dict, exercises: list, lang: str) -> None:
    from matplotlib.patches import Patch

    bottom = [0] * len(exercises)
    shown = [band for band in BANDS if any(counts[ex][band] for ex in exercises)]  # the legend: bands drawn only
    for band in shown:
        heights = [counts[ex][band] for ex in exercises]
        drawn = [i for i, h in enumerate(heights) if h]  # an empty band is left out, not drawn as a 0-high bar
        ax.bar(
            drawn,
            [heights[i] for i in drawn],
            bottom=[bottom[i] for i in drawn],
            color=BAND_COLOURS[band],
        )
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set_xticks(range(len(exercises)), exercises)
    ax.set_title(_t(lang, "Scores on each exercise", "每道练习的得分分布"))
    ax.set_xlabel(_t(lang, "exercise", "练习"))
    ax.set_ylabel(_t(lang, "learners", "学员人数"))
    ax.tick_params(axis="x", labelrotation=45)
    for label in ax.get_xticklabels():
        label.set_horizontalalignment("right")
    ax.yaxis.get_major_locator().set_params(integer=True)  # learners are counted in whole numbers
    handles = [Patch(color=BAND_COLOURS[band], label=_band_name(band, lang)) for band in reversed(shown)]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)


def distribution_svg(counts: dict, lang: str) -> str:
    """The distribution figure as inline SVG text (its Chinese drawn with a CJK font where one is installed)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    with plt.rc_context({"svg.fonttype": "path"}):  # the text as paths: the page needs no font of its own
        fig = distribution_figure(counts, lang)
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg")
        plt.close(fig)
    svg = buffer.getvalue()
    return svg[svg.index("<svg") :]  # inline: without the XML prolog and doctype


# ---------------------------------------------------------------------------------------------------- the page

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; max-width: 72em; font-size: 18px; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border-bottom: 1px solid #ccc; padding: 0.3em 0.8em; text-align: left; vertical-align: top; }
td.n { text-align: right; white-space: nowrap; }
th { white-space: nowrap; }
td.name { max-width: 24em; overflow-wrap: anywhere; }
ul.who { margin: 0; padding-left: 1.1em; max-width: 30em; overflow-wrap: anywhere; }
code { font-size: 0.9em; }
svg { max-width: 100%; height: auto; }
"""


def _table(headers: list, rows: list) -> list:
    lines = ["<table>", "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in headers) + "</tr>"]
    for row in rows:
        cells = "".join(
            f'<td class="n">{c}</td>'
            if isinstance(c, (int, float))
            else f'<td class="name">{c[1]}</td>'
            if isinstance(c, tuple)
            else f"<td>{c}</td>"
            for c in row
        )
        lines.append(f"<tr>{cells}</tr>")
    return lines + ["</table>"]


def render(learners: list, exercises: list, lang: str) -> str:
    """The report as one HTML page in ``lang`` ('en' or 'zh')."""
    e = html.escape
    counts = distribution(learners, exercises)
    title = _t(lang, "Class report", "班级报告")
    graded = [learner for learner in learners if learner.error is None]
    passed_all = sum(1 for learner in graded if learner.outcomes and all(o.passed for o in learner.outcomes.values()))
    failed = len(graded) - passed_all
    body = [
        f"<h1>{e(title)}</h1>",
        "<p>"
        + e(
            _t(  # the terminal's count (cli.graded), in the same words
                lang,
                f"{len(learners)} submissions: {passed_all} passed everything, {failed} did not, "
                f"{len(learners) - len(graded)} could not be graded.",
                f"共 {len(learners)} 份提交：{passed_all} 份全部通过，{failed} 份没有全部通过，"
                f"{len(learners) - len(graded)} 份无法评分。",
            )
        )
        + "</p>",
    ]

    body.append(f"<h2>{e(_t(lang, 'Scores on each exercise', '每道练习的得分'))}</h2>")
    if exercises:
        body.append(distribution_svg(counts, lang))
        rows = []
        for ex in exercises:
            got = [learner.outcomes[ex] for learner in learners if ex in learner.outcomes]
            mean = sum(o.points for o in got) / len(got) if got else 0.0
            worth = got[0].max if got else 0
            rows.append([f"<code>{e(ex)}</code>", len(got), counts[ex]["full"], f"{mean:.2f} / {worth:g}"])
        body += _table(
            [
                _t(lang, "exercise", "练习"),
                _t(lang, "submitted", "提交"),
                _t(lang, "all checks passed", "全部通过"),
                _t(lang, "mean points", "平均得分"),
            ],
            rows,
        )

    body.append(f"<h2>{e(_t(lang, 'Mistakes, most common first', '常见错误（按人数排序）'))}</h2>")
    body.append(
        "<p>"
        + e(
            _t(
                lang,
                "Learners who made the same mistake can be paired to find it together.",
                "犯了同一个错误的学员，可以结成一组一起找原因。",
            )
        )
        + "</p>"
    )
    ranked = mistakes(learners)
    if ranked:
        body += _who_table(ranked, _t(lang, "mistake", "错误"), lang)
    else:
        body.append("<p>" + e(_t(lang, "No named mistake.", "没有可以指名的错误。")) + "</p>")
    unrun = mistakes(learners, named=False)
    if unrun:
        body.append(f"<h2>{e(_t(lang, 'Did not run, or no named mistake', '没能运行，或不是已知的错误'))}</h2>")
        body.append(
            "<p>"
            + e(
                _t(
                    lang,
                    "Timed out, crashed, not found, not implemented yet, or wrong in a way no known mistake explains: "
                    "read these submissions' feedback.",
                    "超时、崩溃、没有找到、还没有实现，或者错得不像任何已知的错误：请看这些提交的反馈。",
                )
            )
            + "</p>"
        )
        body += _who_table(unrun, _t(lang, "what happened", "情况"), lang)

    not_graded = [learner for learner in learners if learner.error is not None]
    if not_graded:
        body.append(f"<h2>{e(_t(lang, 'Not graded', '未能评分'))}</h2>")
        body += _table(
            [_t(lang, "learner", "学员"), _t(lang, "why", "原因")],
            [[("", e(learner.name)), e(learner.error)] for learner in not_graded],
        )

    body.append(f"<h2>{e(_t(lang, 'Slowest submissions', '最慢的提交'))}</h2>")
    body += _table(
        [_t(lang, "learner", "学员"), _t(lang, "seconds", "秒")],
        [[("", e(learner.name)), round(learner.seconds, 1)] for learner in slowest(learners)],
    )

    html_lang = "zh-CN" if lang == "zh" else "en"
    return (
        f'<!DOCTYPE html>\n<html lang="{html_lang}">\n<head>\n<meta charset="utf-8">\n<title>{e(title)}</title>\n'
        f"<style>{_STYLE}</style>\n</head>\n<body>\n" + "\n".join(body) + "\n</body>\n</html>\n"
    )


def _who_table(ranked: list, what: str, lang: str) -> list:
    """A ranked list of mistakes (or outcomes) with who made each: one name per line, so that a name with a comma
    in it reads as one learner."""
    e = html.escape
    return _table(
        [_t(lang, "exercise", "练习"), what, _t(lang, "learners", "人数"), _t(lang, "who", "学员")],
        [
            [
                f"<code>{e(ex)}</code>",
                e(words),
                len(names),
                '<ul class="who">' + "".join(f"<li>{e(name)}</li>" for name in names) + "</ul>",
            ]
            for ex, _key, words, names in ranked
        ],
    )


def write(learners: list, exercises: list, out: Path, lang: str) -> Path:
    path = Path(out) / "report.html"
    path.write_text(render(learners, exercises, lang), encoding="utf-8")
    return path
