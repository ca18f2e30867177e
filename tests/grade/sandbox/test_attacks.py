"""The grader attacked as a hostile class would attack it, on a throw-away copy of the project (never the
working tree): escapes from the sandbox, forged verdicts, batch-breaking files, interview-mode dodges, and
odd-but-correct submissions that must still pass. One batch of them, graded as an instructor would."""

import csv
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import run_grader
from tests.grader_cases import attacks

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.requires_sandbox


def tree_hashes(folder: Path) -> dict:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def processes_named(name: str) -> list:
    """Processes whose name (what a submission may write to /proc/self/comm) is ``name``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if open(f"/proc/{pid}/comm").read().strip() == name:
                found.append(pid)
        except OSError:
            pass
    return found


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    base = tmp_path_factory.mktemp("attack")
    project = base / "project"  # the grader that gets attacked: a copy, run from its own folder
    shutil.copytree(ROOT / "course_utils", project / "course_utils", ignore=shutil.ignore_patterns("__pycache__"))
    subs, out, outside = base / "submissions", base / "out" / "grades", base / "outside"
    subs.mkdir()
    outside.mkdir()
    marker = base / "daemon-was-here"
    victim = subs / "victim.py"
    victim.write_text(attacks.GOOD)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    connections = []
    threading.Thread(target=lambda: connections.append(server.accept()), daemon=True).start()
    fill = {
        "victim": str(victim),
        "project": str(project),
        "out": str(out),
        "marker": str(marker),
        "port": server.getsockname()[1],
        "grader_uid": os.getuid(),
    }
    files = {name: attacks.oracle(code.format(**fill)) for name, code in attacks.ESCAPES.items()}
    files["daemon.py"] = attacks.DAEMON.format(**fill)
    files["fork_forever.py"] = attacks.FORK_FOREVER
    files.update(attacks.FORGERIES)
    files.update(attacks.ODD_BUT_CORRECT)
    files.update(attacks.BROKEN)
    files.update(attacks.NOT_SUBMISSIONS)
    for name, text in files.items():
        (subs / name).write_text(text, encoding="utf-8", newline="")
    (outside / "secret.py").write_text(attacks.GOOD)
    (subs / "link_outside.py").symlink_to(outside / "secret.py")
    before = tree_hashes(project), tree_hashes(subs)
    start = time.monotonic()
    # the default 10 s per cell: room for a correct class's grading on a busy machine (3 s was not always enough)
    proc = subprocess.run(
        [sys.executable, "-m", "course_utils.grade", "--batch", str(subs), "--out", str(out), "--timeout", "60"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=600,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    seconds = time.monotonic() - start
    rows = {r["learner"]: r for r in csv.DictReader(open(out / "grades.csv", encoding="utf-8"))}
    csv_after_batch = (out / "grades.csv").read_bytes()
    time.sleep(3)  # give a daemon the time it asked for
    server.close()
    return dict(
        proc=proc,
        rows=rows,
        out=out,
        subs=subs,
        project=project,
        before=before,
        marker=marker,
        csv_after_batch=csv_after_batch,
        connections=connections,
        seconds=seconds,
        files=files,
    )


def test_batch_finishes_with_a_row_for_every_submission(attacked):
    proc, rows = attacked["proc"], attacked["rows"]
    assert proc.returncode == 1, proc.stdout + proc.stderr  # graded; not everyone passed
    graded = {n for n in attacked["files"] if n not in attacks.NOT_SUBMISSIONS} | {"victim.py"}
    assert set(rows) == graded
    feedback = {p.name for p in (attacked["out"] / "feedback").iterdir()}
    assert feedback == {f"{n}.md" for n in graded}  # alice.py and alice.ipynb each get their own
    skipped = (attacked["out"] / "skipped.txt").read_text()
    for name in ("README.txt", "notes.md", "link_outside.py"):
        assert name in skipped and f"skipped {name}" in proc.stdout
    assert "outside the submissions folder" in skipped


def test_a_class_of_thirty(attacked, capsys):
    assert len(attacked["rows"]) >= 30
    with capsys.disabled():  # a measurement for the record, not a timed assert (shared machines are noisy)
        print(f"\n[grader] {len(attacked['rows'])} submissions graded in {attacked['seconds']:.0f} s")


@pytest.mark.parametrize("name", sorted(attacks.ESCAPES))
def test_escape_fails(attacked, name):
    row = attacked["rows"][name]  # the wrong class was graded (or the import of the reference refused)
    assert "scale_d_out" in row["key"] or ("import" in name and "delegates" in row["key"]), row


def test_escapes_leave_no_trace(attacked):
    assert tree_hashes(attacked["project"]) == attacked["before"][0]  # the grader's own files
    assert tree_hashes(attacked["subs"]) == attacked["before"][1]  # every submission, the victim's too
    assert attacked["rows"]["victim.py"]["status"] == "passed"
    assert not attacked["connections"]  # no network
    assert not attacked["marker"].exists()  # the daemon died with its sandbox
    assert (attacked["out"] / "grades.csv").read_bytes() == attacked["csv_after_batch"]
    assert "scale_d_out" in attacked["rows"]["daemon.py"]["key"]
    assert attacked["rows"]["fork_forever.py"]["status"] == "passed"  # its forked child is simply killed
    assert not processes_named(attacks.FORK_NAME) and not processes_named(attacks.DAEMON_NAME)


@pytest.mark.parametrize("name", sorted(attacks.FORGERIES))
def test_forgery_gets_no_credit(attacked, name):
    row = attacked["rows"][name]
    assert row["mha"] != "3" and row["status"] != "passed", row


@pytest.mark.parametrize("name", sorted(attacks.ODD_BUT_CORRECT))
def test_odd_but_correct_submission_passes(attacked, name):
    row = attacked["rows"][name]
    assert row["status"] == "passed", (row, (attacked["out"] / "feedback" / f"{name}.md").read_text())


def test_broken_submissions_get_clear_rows(attacked):
    rows, fb = attacked["rows"], attacked["out"] / "feedback"
    assert "invalid JSON" in rows["not_json.ipynb"]["status"]
    assert "no list of cells" in rows["cells_not_list.ipynb"]["status"]
    assert "SyntaxError" in (fb / "syntax.py.md").read_text()
    assert "timed out" in (fb / "loop.py.md").read_text() and rows["loop.py"]["mha"] == "3"
    assert "memory" in (fb / "huge.py.md").read_text() and rows["huge.py"]["mha"] == "3"
    assert "scale_d_out" in rows["cheat.py"]["key"]
    assert "delegates" in rows["delegate.py"]["key"]
    assert "stderr_flood.py" in rows and len((fb / "stderr_flood.py.md").read_text()) < 20_000


def test_interview_mode_in_a_batch(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    for name, text in attacks.INTERVIEW.items():
        (subs / name).write_text(text)
    proc = run_grader("--batch", str(subs), "--out", str(tmp_path / "g"), "--exercise", "mha_interview")
    rows = {r["learner"]: r for r in csv.DictReader(open(tmp_path / "g" / "grades.csv", encoding="utf-8"))}
    assert proc.returncode == 1, proc.stderr
    assert rows["by_hand.py"]["status"] == "passed"
    for name in set(attacks.INTERVIEW) - {"by_hand.py"}:  # --exercise applies: SDPA files fail mha_interview
        assert rows[name]["mha_interview"] == "0" and "forbidden" in rows[name]["key"], rows[name]
    fb = (tmp_path / "g" / "feedback" / "thread_dynamic_name.py.md").read_text()
    assert "scaled_dot_product_attention" in fb  # seen at torch's level, from a thread, by a built name


def test_the_capstones_model_sandbox_serves_no_other_exercise(tmp_path):
    # course_utils.multihead is mounted only where the capstone's function is graded, alone: a file that also
    # hands in GQA by importing it (by a name the source check cannot see) gets no credit for GQA
    path = tmp_path / "both.py"
    path.write_text(
        "import importlib\n"
        "try:\n"
        "    GroupedQueryAttention = importlib.import_module('course_' + 'utils.multihead').GroupedQueryAttention\n"
        "except ImportError:\n"
        "    GroupedQueryAttention = None\n\n"
        "def find_induction_head(model):\n"
        "    return importlib.import_module('course_' + 'utils.multihead') and (1, 0)\n\n"
        "from course_utils.grade import check\n"
        "check('gqa', GroupedQueryAttention)\n"
        "check('induction_head', find_induction_head)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "course_utils.grade", "--json", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    import json

    results = {r["exercise"]: r for r in json.loads(proc.stdout)["results"]}
    assert not results["gqa"]["passed"] and results["gqa"]["score"] == 0, results["gqa"]
    assert "induction_head" in results  # graded, in its own sandbox, where the import works
