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


def test_stop_pauses_and_says_so_with_the_time_used():
    timer = Countdown(minutes=0.5)
    timer.play.playing, timer.play.value = True, 7
    assert timer.stop() == "clock paused: time used 0:07 of 0:30 (▶ on the clock goes on)"
    assert timer.play.playing is False


def test_a_countdown_needs_time():
    with pytest.raises(ValueError, match="minutes must be positive"):
        Countdown(minutes=0)


@pytest.mark.requires_sandbox
def test_make_grade_runs_the_timer_cell_quietly():
    # the sandbox runs every cell without a front end: the countdown must neither fail nor leave a note
    report = runner.grade_file(ROOT / "solutions" / "07_interview_mha.ipynb")
    assert report.passed and not report.notes, report.to_dict()


def _cell(notebook: Path, grade_id: str) -> str:
    import json

    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return next("".join(c["source"]) for c in cells if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id)


@pytest.mark.parametrize("folder", ["exercises", "exercises/zh-CN"])
def test_run_all_keeps_a_running_timers_time(folder):
    # Run All runs the timer's cell again in the same kernel: the clock the learner started goes on
    notebook = ROOT / folder / "07_interview_mha.ipynb"
    kernel = {"__name__": "__main__"}
    exec(_cell(notebook, "timer"), kernel)
    first = kernel["timer"]
    first.play.playing, first.play.value = True, 185  # started, and 3:05 ticked in the browser
    exec(_cell(notebook, "timer"), kernel)  # Run All
    assert kernel["timer"] is first and kernel["timer"].elapsed_s == 185 and first.play.playing
    used = {}
    exec(_cell(notebook, "timer-stop").replace("print(", "used['text'] = ("), {**kernel, "used": used})
    assert used["text"] in (
        "clock paused: time used 3:05 of 20:00 (▶ on the clock goes on)",
        "计时已暂停：用时 3:05（共 20:00）（按计时器上的 ▶ 继续）",
    )
    first.play.value = 0  # ■: back to zero, so the next run of the cell starts a new countdown
    exec(_cell(notebook, "timer"), kernel)
    assert kernel["timer"] is not first and kernel["timer"].elapsed_s == 0


def test_a_paused_timer_keeps_its_time_until_it_is_up():
    timer = Countdown(minutes=3, fresh=True)
    timer.play.value = 42  # paused at 0:42
    assert Countdown(minutes=3) is timer and timer.label.value == "2:18 left of 3:00"
    timer.play.value = 180  # time is up: the cell's next run starts a new countdown
    assert Countdown(minutes=3) is not timer


def test_fresh_starts_over():
    timer = Countdown(minutes=4, fresh=True)
    timer.play.playing = True
    assert Countdown(minutes=4) is timer and Countdown(minutes=4, fresh=True) is not timer
