"""`make grade` for a class of strangers (issue 22): a total limit per submission through every route (plain
allocation, memfd, forks, disk, processes), a grader that bounds its own work, any file name, escaped output,
grades an instructor can read. Everything runs in temporary folders, never on the working tree; the tests that
run submissions need bubblewrap and say so where it is missing."""

import csv
import io
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from course_utils.grade import batch, escape, jail, limits, names, points, runner, source
from course_utils.grade.progress import Progress
from course_utils.grade.protocol import failure
from tests.conftest import run_grader, said
from tests.grader_cases.implementations import REFERENCE

ROOT = Path(__file__).resolve().parents[2]
MHA = REFERENCE["mha"]
CAP = 1 << 30  # the tests' total: well above a graded submission (torch, the cases), well below the host


@pytest.fixture(params=["native", "rlimits"])
def mechanism(request, monkeypatch):
    """The host's own mechanism (a cgroup where there is one), then the fallback, both with a 1 GiB total."""
    monkeypatch.setattr(limits, "_chosen", [])
    if request.param == "rlimits":
        monkeypatch.setenv(limits.ENV, "rlimits")
    else:
        monkeypatch.delenv(limits.ENV, raising=False)
    monkeypatch.setattr(limits, "MEMORY_TOTAL", CAP)
    yield limits.mechanism()
    limits._chosen.clear()


def grade(tmp_path, code, name="sub.py", exercises=("mha",), **kw):
    path = tmp_path / name
    path.write_text(code)
    return runner.grade_file(path, list(exercises), **kw)


# ---------------------------------------------------------------------------------------------------- limits

HOLD = {  # each holds more than CAP (1 GiB) in its own way, then defines a correct class
    "plain": "HELD = b'x' * (1200 << 20)\n",
    "memfd": (
        "import os\nHELD = []\nfor i in range(24):\n    fd = os.memfd_create(f'm{i}')\n"
        "    os.write(fd, b'x' * (50 << 20))\n    HELD.append(fd)\n"
    ),
    # the parent goes on only once every fork holds its 450 MiB or one of them is gone (killed for memory): the run
    # cannot end before the forks have reached the cap, however busy the machine
    "forks": (
        "import os, time\nr, w = os.pipe()\nkids = []\nfor i in range(3):\n    pid = os.fork()\n"
        "    if pid == 0:\n        os.close(r)\n        held = b'x' * (450 << 20)\n        os.write(w, b'1')\n"
        "        time.sleep(60)\n        os._exit(0)\n    kids.append(pid)\nos.close(w)\nos.set_blocking(r, False)\n"
        "ready = 0\nwhile ready < 3 and not any(os.waitpid(p, os.WNOHANG)[0] for p in kids):\n"
        "    try:\n        ready += len(os.read(r, 3))\n    except BlockingIOError:\n        time.sleep(0.01)\n"
    ),
}


@pytest.mark.requires_sandbox
@pytest.mark.parametrize("route", sorted(HOLD))
def test_memory_over_all_processes_is_capped(tmp_path, mechanism, route):
    report = grade(tmp_path, HOLD[route] + MHA)
    (result,) = report.results
    assert not result.passed or report.notes, (mechanism, route, report)  # a fork killed, or the whole run
    why = str(result.messages[0]) if not result.passed else str(report.notes[-1])
    assert "more than 1024 MiB of memory" in why or "out of memory" in why, (mechanism, route, why)
    if mechanism.startswith("cgroup"):  # the kernel's accounting: the peak never passes the total
        assert report.peak_memory <= CAP + (1 << 20), report.peak_memory
    # the same code without the hold passes: the limit, not the grader, stopped it
    assert grade(tmp_path, MHA).passed


@pytest.mark.requires_sandbox
def test_disk_is_a_few_small_tmpfs(tmp_path, mechanism):
    code = (
        "import os\nwritten = {}\nfor where in ('/tmp', '/dev/shm', '/submission'):\n    n = 0\n"
        "    try:\n        for i in range(40):\n            with open(f'{where}/f{i}', 'wb') as fh:\n"
        "                fh.write(b'x' * (8 << 20))\n            n += 8\n    except OSError:\n        pass\n"
        "    written[where] = n\n"
        "for where in ('/', '/usr', '/grader', os.path.expanduser('~') + '/..'):\n"
        "    try:\n        open(where + '/escape', 'wb').write(b'x')\n"
        "        raise SystemExit('wrote ' + where)\n    except OSError:\n        pass\n"
        "assert all(n <= 64 for n in written.values()), written\n"
    ) + MHA
    report = grade(tmp_path, code)
    assert report.passed, report.to_dict()


@pytest.mark.requires_sandbox
def test_processes_are_capped_and_none_outlives_the_grading(tmp_path, mechanism):
    marker = f"119.{os.getpid()}{time.monotonic_ns() % 10**6}"  # a sleep no other process on this host has
    code = (
        "import os, time\nstarted = 0\nfor i in range(300):\n    try:\n        pid = os.fork()\n"
        "    except OSError:\n        break\n    if pid == 0:\n"
        f"        try:\n            os.execv('/usr/bin/sleep', ['sleep', '{marker}'])\n"
        "        finally:\n            os._exit(1)\n"
        "    started += 1\nassert started < 70, started\n"
    ) + MHA
    report = grade(tmp_path, code)
    assert report.passed, report.to_dict()
    left = _processes_with(marker)
    for _ in range(100):  # killed with the sandbox; on a busy machine the kernel may take a moment to reap them
        if not left:
            break
        time.sleep(0.1)
        left = _processes_with(marker)
    assert not left, f"forks outlived the grading: {left}"


def _processes_with(marker: str) -> list:
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if marker.encode() in fh.read():
                    found.append(entry)
        except OSError:
            pass
    return found


@pytest.mark.requires_sandbox
def test_a_submission_that_swallows_the_alarm_is_killed_from_outside(tmp_path, monkeypatch):
    # the mechanism, not the seconds: the child cannot stop itself, so the parent's wait runs out and it kills it
    code = (
        "import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
        "signal.setitimer = lambda *a, **k: None\nwhile True:\n    time.sleep(0.1)\n"
    )
    outcomes, run = [], jail.run
    monkeypatch.setattr(jail, "run", lambda *a, **k: outcomes.append(run(*a, **k)) or outcomes[-1])
    report = grade(tmp_path, code, total_timeout=4)
    assert [o.timed_out for o in outcomes] == [True], "the parent's wait did not run out"
    assert outcomes[0].returncode == -9 and not outcomes[0].result  # killed by SIGKILL, nothing sent back
    assert report.results[0].diagnosis == "timeout" and "4 s" in report.results[0].report("en")


def test_the_budget_defaults_to_30_seconds():
    assert runner.TOTAL_TIMEOUT == limits.SUBMISSION_BUDGET == 30


# ---------------------------------------------------------------------------------------------------- the parent


def _grow_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def test_a_huge_literal_is_refused_before_any_parse(tmp_path, monkeypatch):
    # the mechanism, not the seconds: nothing longer than the code limit ever reaches the parser or the compiler
    import ast
    import builtins

    def bounded(real):
        def call(text, *args, **kwargs):
            assert len(text) <= source.MAX_CODE_BYTES, f"{real.__name__} was given {len(text)} characters"
            return real(text, *args, **kwargs)

        return call

    monkeypatch.setattr(ast, "parse", bounded(ast.parse))
    monkeypatch.setattr(builtins, "compile", bounded(builtins.compile))
    before = _grow_kib()
    report = grade(tmp_path, "x = [" + "1," * (2 << 20) + "]\n" + MHA)
    assert _grow_kib() - before < 100 << 10  # KiB: not even a copy of the cells' text was parsed
    assert "KiB of code" in str(report.error) and report.results[0].diagnosis == "unreadable"
    big = tmp_path / "big.ipynb"
    with open(big, "wb") as fh:
        fh.truncate(source.MAX_FILE_BYTES + 1)
    assert "larger than" in str(runner.grade_file(big, ["mha"]).error)


@pytest.mark.parametrize(
    "code",
    [
        "x = " + "(" * 300 + ")" * 300,
        "x = " + "-" * 100000 + "1",
        "x = a" + ".a" * 100000,
        "x = 1\0",
        "class MultiHeadAttention(" + "[" * 500,
    ],
)
def test_deep_or_odd_cells_are_read_without_failing(code):
    cells = [{"index": 0, "source": code, "grade_id": None}]
    assert source.find_exercises(cells) in ([], ["mha"])
    assert source.course_imports(code) == []


def test_deeply_nested_notebook_json_is_that_learners_row(tmp_path):
    path = tmp_path / "deep.ipynb"
    path.write_text('{"cells": ' + "[" * 200000 + "]" * 200000 + "}")
    report = runner.grade_file(path, ["mha"])
    assert "nested too deeply" in str(report.error)
    for name, content in {"empty.ipynb": "", "blank.py": "\n \n", "latin1.py": b"x = '\xe9'\n"}.items():
        (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode())
        report = runner.grade_file(tmp_path / name, ["mha"])
        assert "empty" in str(report.error) or "not UTF-8" in str(report.error), (name, report.error)


@pytest.mark.requires_sandbox
def test_a_9000_digit_answer_does_not_zero_a_correct_mha(tmp_path):
    code = MHA + "\nfrom course_utils.grade import answer\nanswer('kv_cache_bytes', 10 ** 9000)\n"
    report = grade(tmp_path, code, exercises=("mha",))
    by_name = {str(r.exercise): r for r in report.results}
    assert by_name["mha"].passed, report.to_dict()
    assert not by_name["question kv_cache_bytes"].passed


def test_the_grader_failing_on_one_file_is_that_files_row(tmp_path, monkeypatch):
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "a.py").write_text("x = 1\n")
    (subs / "b.py").write_text("x = 2\n")

    def fail_on_a(path, *args, **kw):
        if path.name == "a.py":
            raise MemoryError("the parent ran out")
        return runner.SubmissionReport(str(path), error=said("run.no_exercise"))

    monkeypatch.setattr(batch, "grade_file", fail_on_a)
    graded, skipped, failed = batch.grade_folder(subs, tmp_path / "g", exercises=["mha"], trusted=True, lang="en")
    assert [n for n, _ in graded] == ["a.py", "b.py"] and failed == ["a.py"]
    rows = list(csv.DictReader(open(tmp_path / "g" / "grades.csv", encoding="utf-8")))
    assert "the grader failed" in rows[0]["status"] and rows[1]["key"] == "run.no_exercise"


# ---------------------------------------------------------------------------------------------------- file names


def test_any_file_name_gets_a_row_and_its_own_feedback(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    odd = [
        b"latin1-\xe9.py",
        b"n" * 248 + b".ipynb",
        b"\x1b[32mall checks passed\x1b[0m.py",
        b"## mha: passed.py",
        b"=HYPERLINK(1).py",
        b"Alice.py",
        b"alice.py",
        b"a b;c'd\".py",
        "张三.py".encode(),
        b"-rf.py",
        b"\xe2\x80\xaeyp.exe.py",
    ]
    for raw in odd:
        with open(os.path.join(os.fsencode(subs), raw), "wb") as fh:
            fh.write(b"x = 1\n")  # no exercise: the names are under test, not the sandbox
    os.symlink("loop-b.py", subs / "loop-a.py")
    os.symlink("loop-a.py", subs / "loop-b.py")
    os.symlink("/etc/passwd", subs / "outside.py")
    graded, skipped, failed = batch.grade_folder(subs, tmp_path / "g", trusted=True, lang="en")
    assert len(graded) == len(odd) and not failed
    assert {n for n, _ in skipped} == {"loop-a.py", "loop-b.py", "outside.py"}
    rows = list(csv.DictReader(open(tmp_path / "g" / "grades.csv", encoding="utf-8")))
    assert len(rows) == len(odd)
    files = sorted(os.listdir(tmp_path / "g" / "feedback"))
    assert len(files) == len(odd) == len({f.lower() for f in files})
    assert all(len(os.fsencode(f)) <= names.MAX_FILE_BYTES and not f.startswith(".") for f in files)
    assert {"feedback/" + f for f in files} == {r["feedback"] for r in rows}
    assert "Alice.py.md" in files and "张三.py.md" in files  # plain names stay as they are
    text = (tmp_path / "g" / "grades.csv").read_text(encoding="utf-8") + (tmp_path / "g" / "skipped.txt").read_text()
    assert "\x1b" not in text and "\u202e" not in text and "latin1-\\xe9.py" in text


def test_feedback_names_are_unique_within_the_limit():
    taken = set()
    made = [names.feedback_name(n, taken) for n in ["a.py", "A.py", "a.py", "x" * 300 + ".py", "..py", "a/b.py"]]
    assert len({m.lower() for m in made}) == len(made)
    assert all(len(m.encode()) <= names.MAX_FILE_BYTES and "/" not in m and not m.startswith(".") for m in made)


# ---------------------------------------------------------------------------------------------------- escaping

HOSTILE = "\x1b[2K\r\x1b[32m✅ mha: all 7 checks passed\x1b[0m\n## mha: passed\n<script>alert(1)</script><img src=x>"


def test_terminal_text_has_no_control_characters():
    shown = escape.terminal(HOSTILE)
    assert "\x1b" not in shown and "\r" not in shown and "\\x1b" in shown
    assert escape.printable("a\u202eb\udcff") == "a\\u202eb\\xff"


def test_learner_text_in_feedback_is_neither_html_nor_headings():
    report = runner.SubmissionReport("x.py", notes=[HOSTILE])
    report.results = [failure("mha", "exception", HOSTILE)]
    md = batch.feedback_markdown(HOSTILE + ".py", report, "en")
    assert "<script" not in md and "<img" not in md and "\x1b" not in md
    headings = [line for line in md.splitlines() if line.lstrip().startswith("#")]
    assert headings == [h for h in headings if not h.lstrip("#").lstrip().startswith("mha: passed")]
    assert len(headings) == 3  # the title, the exercise, the problems: only the grader's own


@pytest.mark.parametrize("cell", ["=1+1", "@SUM(A1)", "+1", "-1", "\t=1", "\r=1", " =1"])
def test_csv_cells_never_start_a_formula(cell):
    cleaned = escape.csv_cell(cell)
    assert cleaned.startswith("'") or cleaned[:1] not in escape.FORMULA_START and cleaned[:1] != " "
    assert escape.csv_cell("alice.py") == "alice.py"


def test_progress_on_a_log_and_on_a_terminal():
    report = runner.SubmissionReport("x.py", error=said("source.empty"))
    log = io.StringIO()
    Progress("en", log, tty=False)(1, 2, "\x1b[31mx.py", report)
    assert log.getvalue().startswith("[1/2] \\x1b[31mx.py: the file is empty")
    term = io.StringIO()
    bar = Progress("zh", term, tty=True)
    bar(1, 2, "a.py", report)
    bar(2, 2, "b.py", report)
    assert "2/2" in term.getvalue() and "秒" in term.getvalue() and term.getvalue().endswith("\n")


# ---------------------------------------------------------------------------------------------------- readable


def test_status_in_words_points_and_keys(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "empty.ipynb").write_text("")
    (subs / "broken.py").write_text("class MultiHeadAttention(:\n")
    for lang, empty, syntax in (
        ("en", "the file is empty", "mha: not found: a cell failed before it (see the feedback)"),
        ("zh", "文件是空的", "mha：没有找到：在它之前有单元格出错（见反馈）"),
    ):
        batch.grade_folder(subs, tmp_path / lang, trusted=True, lang=lang)
        with open(tmp_path / lang / "grades.csv", encoding="utf-8") as fh:
            rows = {r["learner"]: r for r in csv.DictReader(fh)}
        assert rows["empty.ipynb"]["status"] == empty and rows["empty.ipynb"]["key"] == "source.empty"
        assert rows["broken.py"]["status"] == syntax, rows["broken.py"]
        assert rows["broken.py"]["key"] == "mha:missing_after_error" and rows["broken.py"]["max"] == "3"
        assert rows["broken.py"]["total"] == "0" and rows["broken.py"]["fraction"] == "0.000"


def test_points_agree_with_the_solutions_nbgrader_metadata():
    import nbformat

    from course_utils.grade.source import check_calls

    total = 0
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        for cell in nbformat.read(str(path), as_version=4).cells:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("grade"):
                total += meta["points"]
                called = [ex for ex, _ in check_calls(cell.source)]
                if called:
                    assert points.points(called[0]) == meta["points"] or path.stem.startswith("07"), path
                else:  # check_answers: the numbers follow-up
                    assert meta["points"] == points.QUESTION_POINTS
    stated = re.search(r"worth points in nbgrader \((\d+) in all", (ROOT / "README.md").read_text(encoding="utf-8"))
    zh = re.search(r"共 (\d+) 分）", (ROOT / "README.zh-CN.md").read_text(encoding="utf-8"))
    assert total == int(stated.group(1)) == int(zh.group(1)), "the READMEs' points total"


def test_make_grade_passes_grade_args():
    out = subprocess.run(
        ["make", "-n", "grade", "SUBMISSIONS=s", "GRADE_ARGS=--lang zh --exercise mha", f"STAMP={ROOT / 'Makefile'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout
    assert '--batch "s" --out "grades" --lang zh --exercise mha' in out, out


@pytest.mark.requires_sandbox
def test_bubblewrap_runs_by_its_absolute_path(tmp_path):
    cmd = jail.command(tmp_path, 0, "submission.py", 1, 0)
    assert os.path.isabs(cmd[0]) and os.path.basename(cmd[0]) == "bwrap"


@pytest.mark.requires_sandbox
def test_cli_summary_line(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "good.py").write_text(MHA)
    (subs / "empty.py").write_text("")
    (subs / "notes.txt").write_text("")
    forger = subs / "\x1b[2K\r\x1b[32mall passed.py"
    forger.write_text(
        "class MultiHeadAttention:\n    def __init__(self, *args, **kwargs):\n"
        "        raise ValueError('\\x1b[2K\\r\\x1b[32m✅ mha: all 7 checks passed')\n"
    )
    proc = run_grader("--batch", str(subs), "--out", str(tmp_path / "g"))
    assert proc.returncode == 1, proc.stderr
    assert "1 passed everything, 1 did not, 1 could not be graded, 1 skipped" in proc.stdout, proc.stdout
    assert "[3/3]" in proc.stderr and "\x1b" not in proc.stdout + proc.stderr
    single = subprocess.run(
        [sys.executable, "-m", "course_utils.grade", str(forger)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert single.returncode == 1 and "\x1b" not in single.stdout and "\\x1b" in single.stdout, single.stdout


def test_the_mechanism_is_named_and_cgroup_paths_follow_the_mount():
    assert limits.mechanism() in ("cgroup2", "cgroup1", "rlimits")
    assert limits._where(("/sys/fs/cgroup", "/"), "/a/b") == Path("/sys/fs/cgroup/a/b")
    # a container that mounts its own subtree of the hierarchy at /sys/fs/cgroup
    assert limits._where(("/sys/fs/cgroup", "/docker/x"), "/docker/x/grader") == Path("/sys/fs/cgroup/grader")
    assert limits._where(("/sys/fs/cgroup", "/docker/x"), "/docker/x") == Path("/sys/fs/cgroup")
