"""The sandbox's harness on its own, without the sandbox: the package the jail mounts, run as the child runs it
(its main, the plan on stdin, the result on a pipe) on a tiny plan, and run in-process on the same plan."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import torch

from course_utils.grade import jail
from course_utils.grade.protocol import Graded, verdict
from course_utils.grade.sandbox import running
from tests.grader_cases.implementations import REFERENCE, STUB_FORWARD

EXERCISE = "self_attention"


def child(tmp_path, cells: list[str], graded: Graded) -> dict:
    """The child's result for ``cells``: the harness run from the mounted tree, unsandboxed, as the jail runs it."""
    lib = jail.build_lib(tmp_path / "lib")
    plan = {
        "cell_timeout": 60.0,
        "cells": [{"index": i, "source": s} for i, s in enumerate(cells, start=1)],
        "exercises": {EXERCISE: graded.plan()},
    }
    buffer = io.BytesIO()
    torch.save(plan, buffer)
    read, write = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, *jail.child(str(lib), write)],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=(write,),
        env={"PATH": os.environ.get("PATH", ""), "OMP_NUM_THREADS": "1"},
    )
    os.close(write)
    proc.stdin.write(buffer.getvalue())
    proc.stdin.close()
    with os.fdopen(read, "rb") as result:
        data = result.read()
    assert proc.wait(timeout=120) == 0, proc.stderr.read().decode()[-2000:]
    return torch.load(io.BytesIO(data), weights_only=True)


def test_the_child_runs_the_cells_and_sends_records(tmp_path):
    graded = Graded(EXERCISE, seed=5)
    broken = "raise ValueError('a cell that fails')"
    data = child(tmp_path, [broken, REFERENCE[EXERCISE], "def (:"], graded)
    assert [n.split(":")[0] for n in data["notes"]] == ["cell 1", "cell 3"]  # the failing cells, as notes
    entry = data["exercises"][EXERCISE]
    assert entry["missing"] is None and len(entry["records"]) == len(graded.cases)
    assert verdict(EXERCISE, graded.resolve(entry["records"]), graded.cases)  # the verdict, computed here


def test_the_child_says_what_is_missing(tmp_path):
    data = child(tmp_path, ["x = 1"], Graded(EXERCISE, seed=5))
    entry = data["exercises"][EXERCISE]
    assert entry["records"] == [] and entry["missing_said"]["key"] == "no_class"


def test_in_process_the_same_plan_gives_records_and_a_stub_says_so():
    graded = Graded(EXERCISE, seed=5)
    namespace: dict = {"__name__": "__main__"}
    exec(compile(REFERENCE[EXERCISE], "<reference>", "exec"), namespace)
    cls = namespace[graded.exercise.contract]
    assert verdict(EXERCISE, graded.resolve(running.run_exercise(cls, graded.plan())), graded.cases)
    stub_ns: dict = {"__name__": "__main__"}
    exec(compile(STUB_FORWARD.format(name=cls.__name__), "<stub>", "exec"), stub_ns)
    records = running.run_exercise(stub_ns[cls.__name__], graded.plan())
    assert all(r["error"]["not_implemented"] for r in records)
