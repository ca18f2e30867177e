"""The CLI in subprocesses: exit codes, --json, and one batch of good, wrong, broken and cheating
submissions (kept few and small: each submission is its own process)."""
import csv
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.grader_cases.implementations import REFERENCE, mutate

ROOT = Path(__file__).resolve().parents[1]
WRONG = mutate(REFERENCE["mha"], {"SCALE": "scores = q @ k.transpose(2, 3) / math.sqrt(self.d_out)"})


def notebook(cells):
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": src}
        for src in cells]})


SUBMISSIONS = {
    "good.ipynb": notebook(["%matplotlib inline\n!echo hi", "from course_utils.grade import check",
                            REFERENCE["mha"], 'check("mha", MultiHeadAttention)']),
    "wrong.py": WRONG,
    "syntax.py": "class MultiHeadAttention(:\n    pass\n",
    "broken.ipynb": '{"cells": [',
    "loop.py": REFERENCE["mha"] + "\nwhile True:\n    pass\n",
    "cheat.py": WRONG + "\nprint('PASSED')\nimport sys\nsys.exit(0)\n",
    "allclose.py": "import torch\ntorch.allclose = lambda *a, **k: True\n" + WRONG,
    "delegate.py": "from course_utils import MultiHeadAttention as Ref\n\nclass MultiHeadAttention(Ref):\n    pass\n",
    "huge.py": REFERENCE["mha"] + "\nbig = torch.empty(2 ** 40)\n",
}


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "course_utils.grade", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    subs = tmp_path_factory.mktemp("subs")
    for name, text in SUBMISSIONS.items():
        (subs / name).write_text(text)
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in subs.iterdir()}
    out = tmp_path_factory.mktemp("out") / "grades"
    proc = run_cli("--batch", str(subs), "--out", str(out), "--cell-timeout", "3", "--timeout", "60")
    after = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in subs.iterdir()}
    rows = {r["learner"]: r for r in csv.DictReader(open(out / "grades.csv", encoding="utf-8"))}
    return proc, before, after, rows, out


def test_batch_exit_code_and_submissions_untouched(batch):
    proc, before, after, rows, out = batch
    assert proc.returncode == 1, proc.stderr
    assert before == after  # nothing modified, nothing written into the submissions folder
    assert set(rows) == set(SUBMISSIONS)
    assert {p.stem for p in (out / "feedback").glob("*.md")} == {Path(n).stem for n in SUBMISSIONS}


def test_batch_rows(batch):
    _, _, _, rows, out = batch
    assert rows["good.ipynb"]["mha"] == "1" and rows["good.ipynb"]["status"] == "passed"
    assert rows["wrong.py"]["mha"] != "1" and "scale_d_out" in rows["wrong.py"]["status"]
    for cheat in ("cheat.py", "allclose.py"):  # printing PASSED, sys.exit(0), patched allclose: no credit
        assert "scale_d_out" in rows[cheat]["status"], rows[cheat]
    assert "SyntaxError" in (out / "feedback" / "syntax.md").read_text()
    assert "invalid JSON" in rows["broken.ipynb"]["status"]
    assert "timed out" in (out / "feedback" / "loop.md").read_text()
    assert rows["loop.py"]["mha"] == "1"  # the class was defined before the loop: it is still graded
    assert "delegates" in rows["delegate.py"]["status"]
    assert "memory" in (out / "feedback" / "huge.md").read_text()
    assert rows["huge.py"]["mha"] == "1"


def test_single_file_json_and_exit_codes(tmp_path):
    path = tmp_path / "answer.py"
    path.write_text(WRONG)
    proc = run_cli("--exercise", "mha", "--json", str(path))
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    (result,) = data["results"]
    assert result["exercise"] == "mha" and not result["passed"] and result["diagnosis"] == "scale_d_out"
    assert 0 < result["score"] < 1 and result["messages"]
    path.write_text(REFERENCE["gqa"])
    proc = run_cli(str(path))  # exercises found by the contract class names
    assert proc.returncode == 0 and "✅ gqa" in proc.stdout, proc.stdout + proc.stderr
