"""nbgrader for real: the instructor's round trip on this repository's solutions/ (`make test-nbgrader`).

In a temporary course directory holding instructors/nbgrader_config.py, with a temporary exchange: the instructor
runs generate_assignment on solutions/ and release_assignment; a learner runs fetch_assignment, fills in the
notebooks and runs submit; the instructor runs collect, puts the other learners' files in submitted/ (as for
files from an LMS), runs autograde (in the course's kernel), generate_feedback and export, and the test reads the
scores from the gradebook. nbgrader commands are slow to start, so only alice goes through the exchange:

* alice hands in the seven solutions: full points for every notebook;
* bob hands in two notebooks untouched (a stub inside a class, and interview mode's empty cell): zero;
* carol's multi-head attention scales the scores by √d_out: partial credit, the share of checks passed, and
  the grader's diagnosis in her autograded notebook and her feedback;
* dora's is right but warns on stderr (her own debugging warning): full points, as `make grade` gives;
* erin's forward never returns: the check's own time budget stops it before nbgrader's cell timeout, and her
  feedback says so in one line, with none of the grader's frames or the installation's paths.

The learners' copies nbgrader generates must be the repository's exercises/, cell for cell.
Runs only with RUN_NBGRADER_TESTS=1; skipped, saying why, where nbgrader is not installed (an error in CI).
"""

import csv
import html
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / os.environ.get("NBGRADER_VENV", ".venv-nbgrader")
NBGRADER = VENV / "bin" / "nbgrader"
COURSE_ID, ASSIGNMENT = "attention-by-hand", "attention"
MHA = "04_multihead_attention"
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


def _skip_reason():
    if os.environ.get("RUN_NBGRADER_TESTS", "") in ("", "0"):
        return "nbgrader round trip skipped: run `make test-nbgrader` (it installs nbgrader into .venv-nbgrader)"
    if NBGRADER.exists():
        return None
    if sys.version_info < (3, 11):
        return f"nbgrader 0.9 needs Python >= 3.11, this is {platform.python_version()}: nbgrader cannot be installed"
    return f"nbgrader is not installed in {VENV.name}: `make nbgrader-setup` failed (its output says why)"


SKIP_REASON = _skip_reason()
if SKIP_REASON:
    if os.environ.get("RUN_NBGRADER_TESTS") and os.environ.get("CI", "").lower() in ("1", "true"):
        raise RuntimeError(f"CI asked for the nbgrader round trip, but {SKIP_REASON}")
    pytest.skip(SKIP_REASON, allow_module_level=True)


def _env(tmp: Path) -> dict:
    """nbgrader's environment: its venv first on PATH (it calls `alembic` by name), Jupyter's folders in ``tmp``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    env.update(
        PATH=f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        JUPYTER_CONFIG_DIR=str(tmp / "jupyter-config"),
        JUPYTER_DATA_DIR=str(tmp / "jupyter-data"),
        JUPYTER_RUNTIME_DIR=str(tmp / "jupyter-runtime"),
        OMP_NUM_THREADS="1",
    )
    return env


def _run(commands, env):
    """Run nbgrader commands [(args, cwd)] side by side; fail with their output if one fails."""
    procs = [
        (
            args,
            subprocess.Popen(
                [str(NBGRADER), *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            ),
        )
        for args, cwd in commands
    ]
    for args, proc in procs:
        out, _ = proc.communicate(timeout=600)
        if proc.returncode != 0:
            pytest.fail(f"nbgrader {' '.join(args)} exited with {proc.returncode}:\n{out[-4000:]}")


def _learner_code(solution_source: str, replace=None) -> str:
    """What a learner types: the solution without nbgrader's markers, optionally with a change."""
    code = "\n".join(line for line in solution_source.split("\n") if line.strip() not in MARKERS)
    if replace:
        old, new = replace
        assert code.count(old) == 1, f"{old!r} is not once in the solution"
        code = code.replace(old, new)
    return code


def _fill(path: Path, replace=None):
    """Write the solution's code into the fetched notebook ``path``'s solution cells."""
    solution = {c.id: c for c in nbformat.read(str(ROOT / "solutions" / path.name), as_version=4).cells}
    nb = nbformat.read(str(path), as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = _learner_code(solution[cell.id].source, replace if cell.id == "solution" else None)
    nbformat.write(nb, str(path))


def _mistake_class():
    """Carol's class, graded in this process by the course's own grader: what nbgrader must agree with."""
    import torch
    from torch import nn

    from course_utils.grade import check

    source = next(
        c.source
        for c in nbformat.read(str(ROOT / "solutions" / f"{MHA}.ipynb"), as_version=4).cells
        if c.id == "solution"
    )
    namespace = {"torch": torch, "nn": nn}
    exec(_learner_code(source, CAROL), namespace)  # noqa: S102 - our own solution, with the known mistake
    return check("mha", namespace["MultiHeadAttention"], quiet=True)


CAROL = ("attn_scores / self.head_dim ** 0.5", "attn_scores / self.d_out ** 0.5")
DORA = (
    "return self.out_proj(context)",
    "return __import__('warnings').warn('debugging: context computed') or self.out_proj(context)",
)
ERIN = (
    "        b, num_tokens, d_in = x.shape\n",
    "        b, num_tokens, d_in = x.shape\n        while True:\n            pass\n",
)


class _Clock:
    """Wall and CPU seconds of each phase (CPU: nbgrader's processes and the kernels they start)."""

    def __init__(self):
        self.phases, self._last = [], self._now()

    @staticmethod
    def _now():
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return time.monotonic(), children.ru_utime + children.ru_stime

    def lap(self, name):
        now = self._now()
        self.phases.append((name, now[0] - self._last[0], now[1] - self._last[1]))
        self._last = now

    def __str__(self):
        wall, cpu = sum(p[1] for p in self.phases), sum(p[2] for p in self.phases)
        return (
            "nbgrader round trip: "
            + ", ".join(f"{n} {w:.0f} s ({c:.0f} s CPU)" for n, w, c in self.phases)
            + f"; total {wall:.0f} s ({cpu:.0f} s CPU)"
        )


@pytest.fixture(scope="module")
def course(tmp_path_factory, request):
    """The whole round trip once; returns the course folder and the gradebook's scores."""
    tmp = tmp_path_factory.mktemp("nbgrader")
    env, clock = _env(tmp), _Clock()
    exchange = tmp / "exchange"
    exchange.mkdir(mode=0o777)
    # what a JupyterHub's global nbgrader_config.py says, for the instructor and the learners alike
    (tmp / "jupyter-config").mkdir()
    (tmp / "jupyter-config" / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.CourseDirectory.course_id = {COURSE_ID!r}\n"
        f"c.Exchange.root = {str(exchange)!r}\nc.Exchange.cache = {str(tmp / 'exchange-cache')!r}\n"
    )
    course_dir = tmp / "course"
    (course_dir / "source").mkdir(parents=True)
    shutil.copy(ROOT / "instructors" / "nbgrader_config.py", course_dir)
    shutil.copytree(ROOT / "solutions", course_dir / "source" / ASSIGNMENT)

    _run([(["generate_assignment", ASSIGNMENT], course_dir)], env)
    _run([(["release_assignment", ASSIGNMENT], course_dir)], env)
    clock.lap("generate, release")

    # alice goes through the exchange: fetch, fill in, submit; the instructor collects
    home = tmp / "learners" / "alice"
    home.mkdir(parents=True)
    _run([(["fetch_assignment", ASSIGNMENT], home)], env)
    for path in sorted((home / ASSIGNMENT).glob("*.ipynb")):
        _fill(path)
    _run([(["submit", ASSIGNMENT, "--student=alice"], home)], env)
    _run([(["collect", ASSIGNMENT], course_dir)], env)
    # the others hand in files another way (e-mail, an LMS): the instructor puts them in submitted/
    release = course_dir / "release" / ASSIGNMENT
    for name, notebooks, change in (
        ("bob", ("04", "07"), None),
        ("carol", ("04",), CAROL),
        ("dora", ("04",), DORA),
        ("erin", ("04",), ERIN),
    ):
        folder = course_dir / "submitted" / name / ASSIGNMENT
        folder.mkdir(parents=True)
        for path in release.glob("*.ipynb"):
            if path.name.startswith(notebooks):
                shutil.copy(path, folder)
                if change:
                    _fill(folder / path.name, change)
    clock.lap("fetch, submit, collect")

    _run([(["autograde", ASSIGNMENT], course_dir)], env)
    clock.lap("autograde")
    _run([(["generate_feedback", ASSIGNMENT], course_dir)], env)
    _run([(["export"], course_dir)], env)
    scores = subprocess.run(
        [
            str(VENV / "bin" / "python"),
            str(Path(__file__).with_name("gradebook_scores.py")),
            str(course_dir),
            COURSE_ID,
            ASSIGNMENT,
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert scores.returncode == 0, scores.stderr[-4000:]
    clock.lap("feedback, export, gradebook")
    with request.config.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
        print(f"\n{clock}")
    return {"dir": course_dir, "scores": json.loads(scores.stdout)}


def _points():
    """Each solution notebook's points, from its nbgrader metadata."""
    found = {}
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        cells = nbformat.read(str(path), as_version=4).cells
        found[path.stem] = sum(c.metadata["nbgrader"].get("points", 0) for c in cells if "nbgrader" in c.metadata)
    return found


def _check_output(course_dir, student, notebook):
    """The autograded check cell's stdout and its value (the points nbgrader gave)."""
    nb = nbformat.read(str(course_dir / "autograded" / student / ASSIGNMENT / f"{notebook}.ipynb"), as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade"))
    stdout = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream" and o.name == "stdout")
    assert not [o for o in cell.outputs if o.output_type == "error" or o.get("name") == "stderr"], cell.outputs
    return stdout


def test_the_learners_copies_are_the_exercises(course):
    released = sorted((course["dir"] / "release" / ASSIGNMENT).glob("*.ipynb"))
    assert [p.name for p in released] == sorted(p.name for p in (ROOT / "exercises").glob("*.ipynb"))
    for path in released:
        ours = nbformat.read(str(ROOT / "exercises" / path.name), as_version=4).cells
        theirs = nbformat.read(str(path), as_version=4).cells
        assert [(c.id, c.cell_type, c.source) for c in theirs] == [(c.id, c.cell_type, c.source) for c in ours], (
            f"nbgrader's {path.name} differs from exercises/{path.name}"
        )


def test_the_solutions_get_full_points_in_every_notebook(course):
    alice, points = course["scores"]["alice"], _points()
    assert {nb: s["score"] for nb, s in alice["notebooks"].items()} == points
    assert alice["score"] == alice["max_score"] == sum(points.values())
    for notebook in points:
        assert "checks passed" in _check_output(course["dir"], "alice", notebook)


def test_untouched_stubs_get_zero(course):
    bob = course["scores"]["bob"]
    assert bob["score"] == 0 and bob["max_score"] == sum(_points().values())
    for notebook in (MHA, "07_interview_mha"):
        assert "not implemented yet" in _check_output(course["dir"], "bob", notebook)


def test_a_known_mistake_gets_partial_credit_and_its_name(course):
    expected = _mistake_class()
    assert expected.diagnosis == "scale_d_out" and 0 < expected.score < 1
    points = _points()[MHA]
    carol = course["scores"]["carol"]
    assert carol["notebooks"][MHA]["score"] == pytest.approx(round(expected.score * points, 2))
    assert 0 < carol["score"] < points, carol
    message = expected.messages[0]  # "scores scaled by √d_out instead of √head_dim ..."
    assert message in _check_output(course["dir"], "carol", MHA)
    feedback = (course["dir"] / "feedback" / "carol" / ASSIGNMENT / f"{MHA}.html").read_text(encoding="utf-8")
    assert html.escape(message, quote=False) in feedback, "the diagnosis is missing from carol's feedback"


def test_a_warning_on_stderr_costs_no_points(course):
    dora = course["scores"]["dora"]
    assert dora["notebooks"][MHA]["score"] == dora["notebooks"][MHA]["max_score"] == _points()[MHA]


def test_a_loop_is_stopped_by_the_check_and_its_feedback_shows_no_grader_frame(course):
    import course_utils

    erin = course["scores"]["erin"]
    assert erin["notebooks"][MHA]["score"] == 0, erin
    assert "grading mha stopped: timed out (an infinite loop?)" in _check_output(course["dir"], "erin", MHA)
    feedback = (course["dir"] / "feedback" / "erin" / ASSIGNMENT / f"{MHA}.html").read_text(encoding="utf-8")
    shown = re.sub(r"<style.*?</style>", "", feedback, flags=re.S)  # the page's text, not its stylesheet's names
    assert "timed out (an infinite loop?)" in shown
    for leak in (
        "Traceback",
        "KeyboardInterrupt",
        "CellTimeoutError",
        str(Path(course_utils.__file__).parent),
        sys.prefix,
    ):
        assert leak not in shown, f"erin's feedback shows {leak!r}"


def test_export_writes_the_gradebook_totals(course):
    with open(course["dir"] / "grades.csv", newline="", encoding="utf-8") as fh:
        rows = {row["student_id"]: row for row in csv.DictReader(fh)}
    assert set(rows) == {"alice", "bob", "carol", "dora", "erin"}
    for student, row in rows.items():
        assert float(row["score"]) == pytest.approx(course["scores"][student]["score"]), row
        assert float(row["max_score"]) == sum(_points().values())
