"""The CLI in subprocesses: exit codes, --json, a self-check of one file with and without a sandbox, and the
refusal to grade a folder of strangers' code without one. The hostile batch is in test_grader_attacks.py."""

import json
import os
from pathlib import Path

import pytest

from course_utils.grade import runner
from tests.conftest import run_grader
from tests.grader_cases.implementations import REFERENCE, mutate

ROOT = Path(__file__).resolve().parents[2]
WRONG = mutate(REFERENCE["mha"], {"SCALE": "scores = q @ k.transpose(2, 3) / math.sqrt(self.d_out)"})


def test_single_file_json_and_exit_codes(tmp_path):
    path = tmp_path / "answer.py"
    path.write_text(WRONG)
    proc = run_grader("--exercise", "mha", "--json", str(path))
    assert proc.returncode == 1, proc.stderr
    (result,) = json.loads(proc.stdout)["results"]
    assert result["exercise"] == "mha" and not result["passed"] and result["diagnosis"] == "scale_d_out"
    assert 0 < result["score"] < 1 and result["messages"]
    path.write_text(REFERENCE["gqa"])
    proc = run_grader(str(path))  # exercises found by the contract class names
    assert proc.returncode == 0 and "✅ gqa" in proc.stdout, proc.stdout + proc.stderr
    assert run_grader("--exercise", "nope", str(path)).returncode == 2
    assert run_grader().returncode == 2


def test_without_a_sandbox_single_files_still_grade_but_batches_refuse(tmp_path):
    # PATH without bwrap: what a Mac or Windows instructor sees
    env = {**os.environ, "PATH": str(tmp_path)}
    (tmp_path / "subs").mkdir()
    (tmp_path / "subs" / "a.py").write_text(REFERENCE["mha"])
    proc = run_grader("--batch", str(tmp_path / "subs"), "--out", str(tmp_path / "g"), env=env)
    assert proc.returncode == 2 and "--trust-submissions" in proc.stderr and "bubblewrap" in proc.stderr
    assert not (tmp_path / "g").exists()
    proc = run_grader("--batch", str(tmp_path / "subs"), "--out", str(tmp_path / "g"), "--trust-submissions", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run_grader(str(tmp_path / "subs" / "a.py"), env=env)
    assert proc.returncode == 0 and "without a sandbox" in proc.stdout


def test_unsandboxed_runner_gives_the_same_verdict(tmp_path):
    path = tmp_path / "answer.py"
    path.write_text(WRONG)
    report = runner.grade_file(path, ["mha"], sandboxed=False)
    assert report.results[0].diagnosis == "scale_d_out"


@pytest.mark.requires_sandbox
def test_grader_failure_exits_3_and_make_grade_fails(tmp_path, monkeypatch):
    from course_utils.grade import __main__ as cli
    from course_utils.grade import batch

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in the grader")

    (tmp_path / "subs").mkdir()
    (tmp_path / "subs" / "a.py").write_text(REFERENCE["mha"])
    monkeypatch.setattr(batch, "grade_file", broken)
    code = cli.main(["--batch", str(tmp_path / "subs"), "--out", str(tmp_path / "g")])
    assert code == 3
    assert "the grader failed on this submission" in (tmp_path / "g" / "grades.csv").read_text()
    makefile = (ROOT / "Makefile").read_text()
    assert "|| test $$? -eq 1" in makefile  # make grade succeeds on 0 and 1 only: 2 and 3 fail it
