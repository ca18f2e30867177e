"""The answer boundary is a folder boundary: what a submission's sandbox mounts is derived from course_utils'
folders (the sandbox package, the top-level modules, never reference/, capstone/ or grade/, except reference/ and
capstone/ where the capstone's function is graded alone: its kind's mounts), and the in-process check counts a call
into any module of reference/."""

from __future__ import annotations

import json
from pathlib import Path

import course_utils
from course_utils.grade import jail, records, runner
from course_utils.grade.exercises import get

COURSE = Path(course_utils.__file__).resolve().parent
SANDBOX = COURSE / "grade" / "sandbox"


def files(root: Path) -> set:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_the_mounted_tree_is_the_sandbox_folder_and_the_toolbox(tmp_path):
    lib = jail.build_lib(tmp_path / "lib")
    toolbox = {f"course_utils/{p.name}" for p in COURSE.glob("*.py") if p.name != "__init__.py"}
    site = {f"course_utils/{f}" for f in files(SANDBOX / "learner_site" / "course_utils") if "__pycache__" not in f}
    own = {f"sandbox/{f}" for f in files(SANDBOX) if not f.startswith("learner_site") and "__pycache__" not in f}
    assert files(lib) == own | site | toolbox
    assert "sandbox/jail.py" not in own  # the parent's process control is not mounted
    for answer in ("reference", "capstone", "grade/"):
        assert not any(f.startswith(f"course_utils/{answer}") for f in files(lib)), answer


def test_the_capstones_sandbox_adds_the_model_and_withholds_the_scores(tmp_path):
    capstone = get("induction_head")
    lib = jail.build_lib(tmp_path / "lib", *capstone.how.mounts(capstone))
    mounted = files(lib)
    for package in ("reference", "capstone"):
        expected = {
            f"course_utils/{package}/{f}"
            for f in files(COURSE / package)
            if "__pycache__" not in f and not f.endswith(".png")
        }
        assert expected <= mounted, expected - mounted
    induction = (lib / "course_utils" / "capstone" / "induction.py").read_text(encoding="utf-8")
    assert "head_scores is not available while a submission is graded" in induction
    assert not any(f.startswith("course_utils/grade/") for f in mounted)


def test_a_call_into_any_reference_module_counts_as_delegating():
    reference = {str(p) for p in (COURSE / "reference").glob("*.py")}
    assert {str(Path(f).resolve()) for f in records._REFERENCE_FILES} == reference
    assert any(f.endswith("sizes.py") for f in reference) and any(f.endswith("mla.py") for f in reference)


def test_interview_numbers_cannot_be_computed_by_the_course(tmp_path):
    # the formula is importable (exercise 6 imports it), but calling it while graded fails: the follow-up
    # kv_cache_bytes gets no answer, the two others (worked out by hand) pass
    cells = [
        "from course_utils import kv_cache_bytes as formula\nfrom course_utils.grade import check, check_answers\n",
        "answer = formula(num_layers=32, num_kv_heads=32, head_dim=128, seq_len=4096)\n",
        "check_answers({'kv_cache_bytes': globals().get('answer'), 'score_flops': 2 * 32 * 4096 * 4096 * 128,\n"
        "               'grows_with_context': 'keys and values'})\n",
        "check('mha', None)\n",
    ]
    nb = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [
            {"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None} for c in cells
        ],
    }
    path = tmp_path / "follow_ups.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    report = runner.grade_file(path, sandboxed=jail.probe() is None)
    results = {str(r.exercise): r for r in report.results}
    kv = next(r for name, r in results.items() if "kv_cache_bytes" in name)
    assert not kv, kv.report("en")
    assert sum(bool(r) for r in results.values()) == 2, [r.report("en") for r in results.values()]
    assert any("kv_cache_bytes is not available while a submission is graded" in str(n) for n in report.notes), (
        report.notes
    )
