"""The class report (report.html beside grades.csv) and a learner's own progress (make progress)."""

import html
import json
import re

import pytest

from course_utils.grade import batch, check, class_report, history
from course_utils.grade.types import Result
from tests.grader_cases.implementations import REFERENCE, mutate

Outcome, Learner = class_report.Outcome, class_report.Learner


def _class():
    wrong = Outcome(1.0, 2, False, "scale_no_sqrt", "scores not divided by √d", named=True)
    other = Outcome(0.0, 2, False, "softmax_wrong_dim", "softmax over the queries", named=True)
    return [
        Learner("alice.py", 3.0, {"mha": wrong, "gqa": Outcome(2, 2, True)}),
        Learner("<script>alert(1)</script>.py", 9.0, {"mha": wrong}),
        Learner("carol.py", 1.0, {"mha": other, "gqa": Outcome(2, 2, True)}),
        Learner("dave.py", 0.5, {}, error="could not be read"),
    ]


def _did_not_run():
    """Learners whose code did not run, or matched no known mistake: none of it a mistake the grader named."""
    return [
        Learner("erin, the second.py", 30.0, {"mha": Outcome(0.0, 2, False, "timeout", "stopped: too slow")}),
        Learner("frank.py", 2.0, {"mha": Outcome(0.0, 2, False, "crashed", "the run crashed")}),
        Learner("gina.py", 2.0, {"mha": Outcome(0.0, 2, False, "not_implemented", "not implemented yet")}),
        Learner("hal.py", 2.0, {"mha": Outcome(0.5, 2, False, "wrong_values", "wrong values")}),
    ]


def test_did_not_run_is_not_ranked_among_the_mistakes():
    learners = _class() + _did_not_run()
    assert {key for _, key, _, _ in class_report.mistakes(learners)} == {"scale_no_sqrt", "softmax_wrong_dim"}
    unrun = {key: names for _, key, _, names in class_report.mistakes(learners, named=False)}
    assert unrun == {
        "timeout": ["erin, the second.py"],
        "crashed": ["frank.py"],
        "not_implemented": ["gina.py"],
        "wrong_values": ["hal.py"],
    }
    page = class_report.render(learners, ["mha", "gqa"], "en")
    named, rest = page.split("Did not run, or no named mistake")
    assert "stopped: too slow" not in named and "stopped: too slow" in rest and "scores not divided" in named
    # one name per line: a comma in a name never reads as two learners
    assert "<li>erin, the second.py</li>" in rest


def test_the_report_counts_what_the_terminal_counts():
    page = class_report.render(_class() + _did_not_run(), ["mha", "gqa"], "en")
    # cli.graded: passed everything, did not, could not be graded (the learner with an error)
    assert "8 submissions: 0 passed everything, 7 did not, 1 could not be graded." in page


def test_mistakes_are_ranked_by_learners_and_name_who_shares_them():
    ranked = class_report.mistakes(_class())
    assert [(ex, key, len(names)) for ex, key, _, names in ranked] == [
        ("mha", "scale_no_sqrt", 2),
        ("mha", "softmax_wrong_dim", 1),
    ]
    assert ranked[0][3] == ["<script>alert(1)</script>.py", "alice.py"]


def test_distribution_counts_every_learner_once_per_exercise():
    counts = class_report.distribution(_class(), ["mha", "gqa"])
    assert counts["mha"] == {"full": 0, "partial": 2, "zero": 1, "missing": 1}
    assert counts["gqa"] == {"full": 2, "partial": 0, "zero": 0, "missing": 2}
    assert all(sum(c.values()) == 4 for c in counts.values())


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_report_page_escapes_names_and_speaks_the_language(lang):
    page = class_report.render(_class(), ["mha", "gqa"], lang)
    assert "<script>" not in page and html.escape("<script>alert(1)</script>.py") in page
    assert page.count("<svg") == 1  # the figure inline: one file to open or project
    slowest = re.search(r"<h2>[^<]*</h2>\n<table>.*?</table>\n</body>", page, re.S).group(0)
    assert slowest.index("alert") < slowest.index("alice.py") < slowest.index("carol.py")  # 9 s, 3 s, 1 s
    if lang == "zh":
        assert '<html lang="zh-CN">' in page and "班级报告" in page and "常见错误" in page
    else:
        assert "Class report" in page and "Mistakes, most common first" in page and "could not be read" in page


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_figures_pass_the_course_figure_check(lang):
    from course_utils.figure_check import figure_problems
    from course_utils.viz import cjk_font

    chinese = lang == "zh" and cjk_font() is not None
    counts = class_report.distribution(_class(), ["mha", "gqa"])
    assert figure_problems(class_report.distribution_figure(counts, lang), chinese) == []
    progress = history.summarise(
        [{"exercise": "mha", "time": 0, "passed": True, "checks_passed": 7, "checks_total": 7}]
    )
    assert figure_problems(history.figure(progress, lang), chinese) == []


def test_the_figure_is_large_enough_to_read_and_its_legend_shows_what_is_drawn():
    counts = class_report.distribution(_class()[:3], ["mha"])  # all three submitted mha: no "not submitted" bar
    fig = class_report.distribution_figure(counts, "en")
    (ax,) = fig.axes
    assert fig.get_size_inches()[0] >= class_report.FIGURE_WIDTH
    assert min(t.get_fontsize() for t in ax.get_xticklabels() + ax.get_yticklabels()) >= 12
    legend = {
        t.get_text(): h.get_facecolor()
        for t, h in zip(ax.get_legend().get_texts(), ax.get_legend().legend_handles, strict=True)
    }
    assert "not submitted" not in legend and set(legend) == {"some checks", "no check passed"}
    from matplotlib.colors import to_rgba

    assert legend["some checks"] == to_rgba(class_report.BAND_COLOURS["partial"])


def test_long_names_wrap_instead_of_widening_the_page():
    page = class_report.render([Learner("x" * 300 + ".py", 1.0, {}, error="unreadable")], ["mha"], "en")
    assert 'class="name"' in page and "overflow-wrap: anywhere" in page


def test_the_figure_has_its_labels_in_the_language():
    for lang, words in (("en", ["Scores on each exercise", "learners"]), ("zh", ["每道练习的得分分布", "学员人数"])):
        counts = class_report.distribution(_class(), ["mha", "gqa"])
        svg = class_report.distribution_svg(counts, lang)
        assert svg.startswith("<svg")
        # svg.fonttype 'path' draws glyphs; the texts are kept as the figure's comments of each text element
        assert all(w in svg for w in words), words


@pytest.mark.requires_sandbox
def test_a_graded_folder_writes_the_class_report(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    wrong = mutate(REFERENCE["mha"], {"SCALE": "scores = q @ k.transpose(2, 3) / math.sqrt(self.d_out)"})
    (subs / "alice.py").write_text(wrong)
    (subs / "b<i>ob.py").write_text(wrong)
    graded, _, failed = batch.grade_folder(subs, tmp_path / "g", exercises=["mha"], lang="en")
    assert len(graded) == 2 and not failed
    page = (tmp_path / "g" / "report.html").read_text(encoding="utf-8")
    assert "b&lt;i&gt;ob.py" in page and "b<i>ob" not in page
    row = re.search(r"<tr><td><code>mha</code></td><td>([^<]*)</td><td class=\"n\">2</td>", page)
    assert row and "√d_out" in row.group(1), page  # both learners, one mistake, named in words


# ---------------------------------------------------------------------------------------------------- progress


def _result(exercise, passed, diagnosis=None, got=0, total=7):
    return Result(exercise, passed, got / total, got, total, diagnosis, [] if passed else ["wrong"])


def test_check_records_the_verdict_on_the_learners_machine(tmp_path, monkeypatch, capsys):
    log = tmp_path / "checks.jsonl"
    monkeypatch.setenv(history.HISTORY_ENV, str(log))
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    check("mha_interview", None)
    (entry,) = history.read(log)
    assert entry["exercise"] == "mha_interview" and entry["passed"] is False
    assert entry["mistake"] == "not_implemented" and entry["mistake_en"].startswith("not implemented yet")
    assert entry["mistake_zh"].startswith("还没有实现")


def test_nothing_is_recorded_when_off_or_while_nbgrader_grades(tmp_path, monkeypatch):
    log = tmp_path / "checks.jsonl"
    monkeypatch.setenv(history.HISTORY_ENV, "off")
    assert not history.record(_result("mha", True, got=7))
    monkeypatch.setenv(history.HISTORY_ENV, str(log))
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert not history.record(_result("mha", True, got=7)) and not log.exists()


def test_progress_names_mistakes_fixed_and_open_and_leaves_breaks_out(tmp_path, monkeypatch):
    log = tmp_path / "checks.jsonl"
    monkeypatch.setenv(history.HISTORY_ENV, str(log))
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    history.record(_result("mha", False, "scale_no_sqrt", 3), now=0)
    history.record(_result("mha", False, "scale_no_sqrt", 5), now=120)
    history.record(_result("mha", True, got=7), now=300)
    history.record(_result("gqa", False, "kv_tiled", 2), now=400)
    history.record(_result("gqa", False, "kv_tiled", 4), now=400 + 2 * history.BREAK_SECONDS)
    log.open("a").write("not json\n")  # a line that is not ours is skipped
    mha, gqa = history.summarise(history.read(log))
    assert (mha.checks, mha.passed, mha.best, mha.seconds, mha.fixed) == (3, True, "7/7", 300, {"scale_no_sqrt"})
    assert (gqa.checks, gqa.passed, gqa.best, gqa.seconds, gqa.fixed) == (2, False, "4/7", 0, set())
    en, zh = history.table([mha, gqa], "en"), history.table([mha, gqa], "zh")
    assert "passed" in en and "not yet" in en and "(fixed)" in en and "(still open)" in en and "5 min" in en
    assert "已通过" in zh and "未通过" in zh and "已改正" in zh and "尚未改正" in zh
    fig = history.figure([mha, gqa], "en")
    (ax,) = fig.axes
    assert ax.get_title() and ax.get_ylabel() and ax.get_xlabel()


def test_one_command_clears_the_history(tmp_path, monkeypatch, capsys):
    log = tmp_path / "checks.jsonl"
    monkeypatch.setenv(history.HISTORY_ENV, str(log))
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    history.record(_result("mha", True, got=7))
    assert history.main(["--lang", "en"]) == 0 and "mha" in capsys.readouterr().out
    assert history.main(["--clear", "--lang", "en"]) == 0 and not log.exists()
    assert "history cleared" in capsys.readouterr().out
    history.main(["--lang", "zh"])
    assert "还没有记录" in capsys.readouterr().out


def test_the_time_counts_from_opening_the_notebook_to_the_first_pass(tmp_path, monkeypatch):
    log = tmp_path / "checks.jsonl"
    monkeypatch.setenv(history.HISTORY_ENV, str(log))
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    # an interview: the notebook opened at 1000, passed at the first check six minutes later
    history.record(_result("mha_interview", True, got=7), now=1360, session=1000)
    # a second notebook's kernel: gqa's first check, then mqa's first check in the same kernel
    history.record(_result("gqa", False, "kv_tiled", 2), now=2100, session=2000)
    history.record(_result("gqa", True, got=7), now=2200, session=2000)
    history.record(_result("mqa", True, got=7), now=2260, session=2000)
    interview, gqa, mqa = history.summarise(history.read(log))
    assert interview.seconds == 360 and gqa.seconds == 200 and mqa.seconds == 60
    assert "6 min" in history.table([interview], "en")


def test_only_named_mistakes_are_listed_as_mistakes(tmp_path, monkeypatch):
    log = tmp_path / "checks.jsonl"
    monkeypatch.setenv(history.HISTORY_ENV, str(log))
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    check("mha_interview", None)  # not implemented yet: the grader's word for a stub, not a mistake
    history.record(_result("mha", False, "wrong_values", 3))  # matches no known mistake
    history.record(_result("mha", False, "timeout", 0))
    history.record(_result("mha", False, "scale_no_sqrt", 3))  # a misconception the grader names
    entries = history.read(log)
    assert [e["named"] for e in entries] == [False, False, False, True]
    table = history.table(history.summarise(entries), "en")
    mistakes = table.split("Mistakes the grader named:")[1]
    assert "not implemented" not in mistakes and mistakes.count("\n- ") == 1


def test_a_torn_or_foreign_line_never_costs_a_record_nor_crashes(tmp_path, monkeypatch):
    log = tmp_path / "checks.jsonl"
    monkeypatch.setenv(history.HISTORY_ENV, str(log))
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    history.record(_result("mha", False, "scale_no_sqrt", 3), now=0)
    with open(log, "a", encoding="utf-8") as fh:  # a write cut off before its newline (a full disk, a killed kernel)
        fh.write('{"time": 5, "exercise": "mha", "pas')
    history.record(_result("mha", True, got=7), now=60)  # must not be swallowed by the torn line
    with open(log, "a", encoding="utf-8") as fh:  # valid JSON, not ours: each would crash a careless reader
        for foreign in (
            '{"time": 70, "exercise": "gqa", "checks_passed": "a lot", "checks_total": 7}',
            '{"time": 71, "exercise": "gqa", "passed": true, "checks_passed": 7, "checks_total": 7, "mistake": 3}',
            '{"time": true, "exercise": "gqa"}',
            '{"time": 72, "exercise": "gqa", "checks_passed": 1e400}',
            "[1, 2, 3]",
            '"a string"',
        ):
            fh.write(foreign + "\n")
        evil = {"time": 80, "exercise": "\x1b[2Jevil\nline", "passed": False, "checks_passed": 0, "checks_total": 7}
        evil |= {"mistake": "x", "named": True, "mistake_en": "a\nb\x1b[31m", "mistake_zh": "z"}
        fh.write(json.dumps(evil) + "\n")  # escapes in the record's own JSON: valid, and hostile on a terminal
    entries = history.read(log)
    assert [e["exercise"] for e in entries][:2] == ["mha", "mha"] and entries[1]["passed"] is True
    assert "gqa" not in [e["exercise"] for e in entries]
    table = history.table(history.summarise(entries), "en")
    assert "\x1b" not in table and "\\x1b" in table  # escapes shown as text, never sent to the terminal


def test_make_progress_says_where_the_record_lives(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(history.HISTORY_ENV, str(tmp_path / "checks.jsonl"))
    assert history.main(["--lang", "en"]) == 0
    said = capsys.readouterr().out
    assert "JupyterHub" in said and "Binder" in said and "on this machine only" not in said
    assert history.main(["--lang", "zh"]) == 0
    assert "Binder" in capsys.readouterr().out
