"""A graded class that loses nobody (issue 37): `make grade` on nbgrader's collected layout (a folder per learner),
a non-zero exit when nothing was graded, a learner key in grades.csv that is whole and unique, every line of
learner text one line in the terminal, what did not run said as such (a loop inside forward timed out, not
"missing"), and memory limits told by accounting, not by the clock."""

import csv
import subprocess
import sys
import time
from pathlib import Path

import pytest

from course_utils.grade import batch, jail, limits, names, runner
from tests.conftest import run_grader
from tests.grader_cases.implementations import REFERENCE, mutate

MHA = REFERENCE["mha"]


def forward_starting_with(body: str) -> str:
    """The reference's module whose forward runs ``body`` (indented lines) first."""
    return MHA.replace("    def forward(self, x):\n", "    def forward(self, x):\n" + body, 1)


LOOP_IN_FORWARD = forward_starting_with("        while True:\n            pass\n")


def _rows(out: Path) -> list:
    with open(out / "grades.csv", encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


# ---------------------------------------------------------------------------------------------------- the layout


def test_nbgraders_collected_layout_is_graded_a_learner_per_folder(tmp_path):
    submitted = tmp_path / "submitted"  # nbgrader collect: submitted/<learner>/<assignment>/<notebook>
    for learner, code in (("alice", MHA), ("bob", mutate(MHA, {"SCALE": "scores = q @ k.transpose(2, 3)"}))):
        folder = submitted / learner / "workshop"
        folder.mkdir(parents=True)
        (folder / "answer.py").write_text(code)
        (folder / "timestamp.txt").write_text("2026-01-01 00:00:00.000000 UTC")  # nbgrader's, not a submission
    (submitted / "carol" / "workshop").mkdir(parents=True)  # collected, but nothing in it
    shown = []  # what the terminal's progress names: the learner's path, not the notebook's name they all share
    graded, skipped, failed = batch.grade_folder(
        submitted, tmp_path / "g", exercises=["mha"], trusted=True, progress=lambda d, c, name, r: shown.append(name)
    )
    assert [name for name, _ in graded] == ["alice/workshop/answer.py", "bob/workshop/answer.py"] and not failed
    assert sorted(shown) == ["alice/workshop/answer.py", "bob/workshop/answer.py"]
    assert [name for name, _ in skipped] == ["carol"]
    rows = {r["learner"]: r for r in _rows(tmp_path / "g")}
    assert set(rows) == {"alice", "bob"}
    assert rows["alice"]["status"] == "passed" and rows["alice"]["learner_key"] == "alice/workshop/answer.py"
    assert rows["bob"]["status"] != "passed"
    page = (tmp_path / "g" / "report.html").read_text(encoding="utf-8")
    assert "<li>bob</li>" in page  # who made the mistake: the learner, not the path


def test_nothing_to_grade_is_an_error(tmp_path):
    empty = tmp_path / "submitted"
    (empty / "alice" / "workshop").mkdir(parents=True)
    proc = run_grader("--batch", str(empty), "--out", str(tmp_path / "g"), "--trust-submissions")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "nothing to grade" in proc.stderr
    # make grade lets exit code 1 through (graded, not everyone passed), never this one
    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    assert "|| test $$? -eq 1" in makefile


# ---------------------------------------------------------------------------------------------------- the key


@pytest.mark.parametrize(
    "pair",
    [
        ("a" * 130 + "1.py", "a" * 130 + "2.py"),  # the same once cut to 120 characters for display
        ("=x.py", "'=x.py"),  # a formula's cell, and the same name as a spreadsheet escapes it
        (" =x.py", "' =x.py"),
        ("50%.py", "50%25.py"),  # an escape, and the text of one
        ("caf\udce9.py", "caf%E9.py"),  # a byte that is not UTF-8, and its escape's text
        ("a\nb.py", "a%0Ab.py"),
    ],
)
def test_learner_keys_are_whole_and_never_shared(pair):
    first, second = map(names.key, pair)
    assert first != second
    for key in (first, second):
        assert key.isprintable() and key[:1] not in ("=", "+", "-", "@", " ", "'") or key.startswith("'")
    assert names.key("a" * 300) == "a" * 300  # never cut


def test_two_long_names_are_two_learners_in_grades_csv(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    stem = "learner-" + "x" * 140
    (subs / f"{stem}-one.py").write_text(MHA)
    (subs / f"{stem}-two.py").write_text(mutate(MHA, {"SCALE": "scores = q @ k.transpose(2, 3)"}))
    batch.grade_folder(subs, tmp_path / "g", exercises=["mha"], trusted=True)
    rows = _rows(tmp_path / "g")
    assert rows[0]["learner"] == rows[1]["learner"]  # the display name is cut
    assert {r["learner_key"] for r in rows} == {f"{stem}-one.py", f"{stem}-two.py"}  # the key is not
    assert {r["status"] == "passed" for r in rows} == {True, False}


# ---------------------------------------------------------------------------------------------------- the terminal


FORGED = "## mha: passed (8/8 checks, score 1)"


def test_the_note_line_is_one_line_of_learner_text(tmp_path):
    path = tmp_path / "forger.py"
    path.write_text(f"raise RuntimeError({('x' + chr(10) + FORGED + chr(10) + '<script>' + chr(27) + '[2J')!r})\n")
    proc = run_grader(str(path), "--exercise", "mha")  # single files run without a sandbox where there is none
    lines = proc.stdout.splitlines()
    assert any("note:" in line for line in lines), proc.stdout
    assert not [line for line in lines if line.lstrip().startswith("##")], proc.stdout
    assert "\x1b" not in proc.stdout  # the escape sequence shown as text, never sent to the terminal


# ---------------------------------------------------------------------------------------------------- did not run


def test_a_loop_inside_forward_timed_out_it_is_not_missing(tmp_path):
    path = tmp_path / "loop.py"
    path.write_text(LOOP_IN_FORWARD)
    report = runner.grade_file(path, ["mha"], sandboxed=False, cell_timeout=2.0)
    (result,) = report.results
    assert result.diagnosis == "timeout", result.report()
    assert "not found" not in result.report() and "timed out" in result.report()
    assert batch.status(report) == "mha: stopped: too slow"
    assert not batch.named_mistake(result.diagnosis)


STOPPERS = {  # what stops a grading outside any case's own errors, and what the verdict says of it
    "a loop": ("        while True:\n            pass\n", "timed out (an infinite loop?)"),
    "SystemExit": ("        raise SystemExit(3)\n", "SystemExit: 3"),
    "a BaseException of its own": (
        "        class Stop(BaseException):\n            pass\n        raise Stop('boom')\n",
        "Stop: boom",
    ),
}


@pytest.mark.parametrize("stopper", STOPPERS)
def test_what_stops_a_check_in_the_kernel_gets_the_file_graders_verdict(tmp_path, monkeypatch, stopper):
    """In the notebook's kernel (and so in nbgrader's autograde) the learner's code has the file grader's CPU budget
    per exercise, and what no case catches is a verdict, not a traceback through the grader's frames."""
    from course_utils.grade import notebook

    body, said = STOPPERS[stopper]
    source = forward_starting_with(body)
    monkeypatch.setattr(notebook, "BUDGET", 1.0)
    namespace: dict = {}
    exec(source, namespace)  # noqa: S102 - our own test submission
    here = notebook.check("mha", namespace["MultiHeadAttention"], quiet=True)
    path = tmp_path / "stopper.py"
    path.write_text(source)
    (there,) = runner.grade_file(path, ["mha"], sandboxed=False, cell_timeout=1.0).results
    assert here.diagnosis == there.diagnosis == ("timeout" if stopper == "a loop" else "crashed"), here.report()
    assert here.report() == there.report() and f"grading mha stopped: {said}" in here.report()


def test_an_interrupt_stops_the_cell_with_one_line_and_no_path(monkeypatch):
    """The Stop button, or nbgrader's cell timeout, interrupts check(): the cell stops (the notebook's later cells do
    not run), and what IPython shows (``_render_traceback_``) names neither the grader's frames nor the install."""
    import course_utils
    from course_utils.grade import notebook

    source = forward_starting_with("        raise KeyboardInterrupt\n")
    namespace: dict = {}
    exec(source, namespace)  # noqa: S102 - our own test submission
    with pytest.raises(KeyboardInterrupt) as stopped:
        notebook.check("mha", namespace["MultiHeadAttention"], lang="en")
    (shown,) = stopped.value._render_traceback_()
    assert shown.startswith("KeyboardInterrupt: grading mha was interrupted"), shown
    assert stopped.value.__cause__ is None and stopped.value.__suppress_context__
    assert str(Path(course_utils.__file__).parent) not in shown and sys.prefix not in shown


def test_an_exception_whose_message_cannot_be_made_is_still_described(tmp_path):
    body = (
        "        class Odd(Exception):\n            def __str__(self):\n                raise RuntimeError('no')\n"
        "        raise Odd()\n"
    )
    path = tmp_path / "odd.py"
    path.write_text(forward_starting_with(body))
    (result,) = runner.grade_file(path, ["mha"], sandboxed=False).results
    assert "Odd in forward: (its message could not be made: RuntimeError)" in result.report(), result.report()


def test_a_memory_limit_reached_is_said_even_when_the_clock_ran_out(tmp_path, monkeypatch):
    # what jail.run returns for a submission stopped by its total while its pages were faulted in
    outcome = jail.Outcome(-9, b"", "", timed_out=True, too_big=False, usage=limits.Usage(peak=4 << 30, hit="memory"))
    monkeypatch.setattr(jail, "run", lambda *a, **k: outcome)
    path = tmp_path / "big.py"
    path.write_text(MHA)
    (result,) = runner.grade_file(path, ["mha"]).results
    assert result.diagnosis == "crashed" and f"more than {limits.MEMORY_TOTAL >> 20} MiB" in result.report()


def test_an_allocation_refused_is_said_as_memory_not_as_a_missing_class(tmp_path):
    path = tmp_path / "huge.py"
    path.write_text(f"HELD = bytearray(1 << 62)\n{MHA}")  # no machine has this: refused at once
    (result,) = runner.grade_file(path, ["mha"], sandboxed=False).results
    assert result.diagnosis == "crashed" and "tried to use more than" in result.report(), result.report()


# ---------------------------------------------------------------------------------------------------- the clock


def _child(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


def test_the_time_limit_counts_computing_not_waiting():
    busy, waiting = _child("while True:\n    pass\n"), _child("import time\ntime.sleep(60)\n")
    try:
        time.sleep(1.0)
        assert limits.tree_cpu_seconds(busy.pid) > 0.05  # computing: counted (however little CPU a busy host gives)
        assert limits.tree_cpu_seconds(waiting.pid) < 0.05  # waiting: not counted
        assert jail._wait(busy, 0.3)[0]  # stopped: by its CPU time, or at the latest by the wall-clock backstop
        started = time.monotonic()
        assert jail._wait(waiting, 0.3)[0]  # no CPU at all: stopped by the backstop only
        assert time.monotonic() - started >= 0.3 * limits.WALL_FACTOR - 0.3
    finally:
        for child in (busy, waiting):
            child.kill()
            child.wait()
    quick = _child("pass")
    assert not jail._wait(quick, 30)[0]


BURN = "import time\nstart = time.process_time()\nwhile time.process_time() - start < {s}:\n    pass\n"


def test_a_run_says_the_cpu_time_it_used_its_reaped_children_included():
    # the kernel's count at the end (wait4), not the last sample: a grandchild that computed and was reaped counts
    grandchild = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {BURN.format(s=1.0)!r}])\n"
    computing, sleeping = _child(grandchild), _child("import time\ntime.sleep(1.0)\n")
    try:
        timed_out, used = jail._wait(computing, 30)
        assert not timed_out and 1.0 <= used < 30, used
        timed_out, used = jail._wait(sleeping, 30)
        assert not timed_out and used < 0.5, used  # a second of waiting: no CPU (Python's start only)
    finally:
        for child in (computing, sleeping):
            jail._kill_group(child)


class _Budgets:
    """jail.run for a submission graded in two sandboxes (mha together, induction_head alone): records each run's CPU
    budget and wall backstop; each run takes ``wall`` seconds of the clock and reports ``cpu`` seconds computed."""

    def __init__(self, wall: float, cpu: float):
        self.wall, self.cpu, self.given = wall, cpu, []

    def __call__(self, submission, plan, *, timeout, wall=None, **kwargs):
        import io

        import torch

        self.given.append((timeout, wall, time.monotonic()))
        time.sleep(self.wall)
        buffer = io.BytesIO()
        torch.save({"exercises": {}}, buffer)
        return jail.Outcome(0, buffer.getvalue(), "", False, False, limits.Usage(), cpu_seconds=self.cpu)


@pytest.mark.parametrize("wall, cpu", [(1.5, 0.05), (0.0, 2.5)])
def test_a_later_sandbox_gets_the_budget_less_the_cpu_time_the_earlier_used(tmp_path, monkeypatch, wall, cpu):
    # the budget is CPU time: a first run that waited 1.5 s without computing leaves the next its whole budget (the
    # clock's remainder would give it 1.5 s of 3), one that computed 2.5 s leaves it 0.5 s, at least MIN_GROUP_BUDGET
    run = _Budgets(wall, cpu)
    monkeypatch.setattr(jail, "run", run)
    path = tmp_path / "two.py"
    path.write_text(MHA)
    started = time.monotonic()
    report = runner.grade_file(path, ["mha", "induction_head"], total_timeout=3.0)
    (first, first_wall, _), (second, second_wall, second_at) = run.given
    assert first == 3.0 and 3.0 * limits.WALL_FACTOR - (second_at - started) <= first_wall <= 3.0 * limits.WALL_FACTOR
    assert second == pytest.approx(max(runner.MIN_GROUP_BUDGET, 3.0 - cpu))
    # the backstop: as many budgets of wall time as the CPU budget left, within the submission's own backstop (the
    # clock the first run and the runner took off it)
    backstop = 3.0 * limits.WALL_FACTOR
    assert min(second * limits.WALL_FACTOR, backstop - (second_at - started)) <= second_wall
    assert second_wall <= min(second * limits.WALL_FACTOR, backstop - wall)
    assert report.cpu_seconds == pytest.approx(2 * cpu)


@pytest.mark.requires_sandbox
def test_the_same_memory_verdict_on_every_run(tmp_path, monkeypatch):
    # held in 64 MiB pieces, more than the total: stopped by the accounting however slowly the pages come
    monkeypatch.setattr(limits, "MEMORY_TOTAL", 1 << 30)
    path = tmp_path / "held.py"
    path.write_text("HELD = [b'x' * (64 << 20) for _ in range(24)]\n" + MHA)
    verdicts = {runner.grade_file(path, ["mha"]).results[0].report("en") for _ in range(2)}
    assert len(verdicts) == 1, verdicts
    (verdict,) = verdicts
    assert "more than 1024 MiB" in verdict, verdict


def test_feedback_names_no_folder_of_the_instructors(tmp_path):
    import course_utils
    from course_utils.grade.escape import markdown

    venv = sys.prefix
    said = f"error in {venv}/lib/python3.11/site-packages/torch/nn/functional.py and {course_utils.__file__}"
    shown = markdown(said)
    assert venv not in shown and str(Path(course_utils.__file__).parent) not in shown
    assert "&lt;python&gt;/lib/python3.11/site-packages/torch/nn/functional.py" in shown
    path = tmp_path / "paths.py"
    path.write_text(f"raise RuntimeError({said!r})\n")
    report = runner.grade_file(path, ["mha"], sandboxed=False)
    feedback = batch.feedback_markdown("paths.py", report, "en")
    assert venv not in feedback and "&lt;python&gt;" in feedback


@pytest.mark.requires_sandbox
def test_a_forward_that_keeps_allocating_is_told_about_memory_not_time(tmp_path, monkeypatch):
    # each call holds more than the total allows; the cases call it again and again: the verdict names the memory
    # (the total reached, or, where the address-space cap refuses first, the memory it held when its time ran out)
    monkeypatch.setattr(limits, "MEMORY_TOTAL", 2 << 30)
    hog = "        hog = [b'x' * (64 << 20) for _ in range(80)]\n"
    path = tmp_path / "hog.py"
    path.write_text(forward_starting_with(hog))
    (result,) = runner.grade_file(path, ["mha"]).results
    said = result.report()
    assert result.diagnosis == "crashed" and "2048 MiB" in said and "memory" in said and "timed out" not in said, said
