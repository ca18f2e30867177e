"""The interview notebook's countdown (course_utils.viz.Countdown): what it shows as the clock runs, and that it
runs where there is no front end (nbclient, nbgrader's autograde, `make grade`'s sandbox)."""
from pathlib import Path

import pytest

from course_utils.grade import runner
from course_utils.viz import Countdown

ROOT = Path(__file__).resolve().parents[1]


def test_label_counts_down_as_the_browser_ticks():
    timer = Countdown(minutes=20)
    assert (timer.play.max, timer.bar.max, timer.play.interval) == (1200, 1200, 1000)  # one tick a second
    assert timer.label.value == "20:00 left of 20:00"
    timer.play.value = 61  # what the front end's Play sends after 61 ticks
    assert timer.label.value == "18:59 left of 20:00" and timer.elapsed_s == 61
    timer.play.value = 1200
    assert timer.label.value == "time is up (20:00)" and timer.bar.bar_style == "danger"


def test_the_bar_follows_the_clock_in_the_browser():
    # jslink: the front end moves the bar itself, also while the kernel is busy running a cell
    timer = Countdown(minutes=1)
    source, target = timer._link.source, timer._link.target
    assert (source[0], source[1], target[0], target[1]) == (timer.play, "value", timer.bar, "value")
    assert timer.widget.children == (timer.play, timer.bar, timer.label)


def test_stop_pauses_and_says_the_time_used():
    timer = Countdown(minutes=0.5)
    timer.play.playing, timer.play.value = True, 7
    assert timer.stop() == "time used: 0:07 of 0:30"
    assert timer.play.playing is False


def test_a_countdown_needs_time():
    with pytest.raises(ValueError, match="minutes must be positive"):
        Countdown(minutes=0)


@pytest.mark.requires_sandbox
def test_make_grade_runs_the_timer_cell_quietly():
    # the sandbox runs every cell without a front end: the countdown must neither fail nor leave a note
    report = runner.grade_file(ROOT / "solutions" / "07_interview_mha.ipynb")
    assert report.passed and not report.notes, report.to_dict()
