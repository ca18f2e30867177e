"""Each exercise done as a learner does it: the learner's code goes into the exercise notebook's own answer cell,
and the notebook's cells run in order, in this process as in a kernel, up to and including its self-check cell.
Three tries per exercise, each judged by what that cell prints: the stub as generated ("not implemented yet"), a
typical wrong answer (its mistake named), and a correct answer in another style than the solution's (in interview
mode also classes of other names and constructors). A few of the same tries in JupyterLab:
tests/browser/test_exercises_in_lab.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from course_utils.grade.source import strip_magics
from tests.grade.exercises.fixtures import FIXTURES
from tests.grader_cases import flash_triton, implementations
from tests.grader_cases.held_out_styles import HONEST as HELD_OUT
from tests.grader_cases.implementations import mutate
from tests.grader_cases.interview_dialects import DIALECTS

ROOT = Path(__file__).resolve().parents[2]
EXERCISES = sorted((ROOT / "exercises").glob("[0-9][0-9]_*.ipynb"))

# exercise id -> (a typical wrong answer, the mistake it must be told, a correct answer in a second style): each
# exercise's fixture's first mutant and the answer it names for a learner (tests/grade/exercises/fixtures.py)
TRIES = {ex: (fixture.mutants[0][1], fixture.mutants[0][0], fixture.as_learner) for ex, fixture in FIXTURES.items()}
# interview mode grades any class: the book's constructor under another name, and the dialects candidates bring
INTERVIEW_STYLES = {
    "book_signature_named_MHA": implementations.REFERENCE["mha"].replace("class MultiHeadAttention(", "class MHA("),
    **{
        name: DIALECTS[name][0]
        for name in ("causal_self_attention", "nanogpt_config", "with_helpers", "multi_headed_attention")
    },
    # q, k, v and o stacked in one (4, d, d) parameter, a dropout after the output projection as well
    "stacked_qkvo": HELD_OUT["stacked_qkvo"][0],
}


def _cells(notebook: Path) -> list[dict]:
    return [c for c in json.loads(notebook.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]


def _nbgrader(cell) -> dict:
    return cell["metadata"].get("nbgrader", {})


def exercise_of(notebook: Path) -> str:
    check = next(c for c in _cells(notebook) if _nbgrader(c).get("grade"))
    return re.search(r"""check\(\s*["'](\w+)["']""", "".join(check["source"])).group(1)


def run_as_learner(notebook: Path, answer: str | None) -> tuple[str, dict]:
    """Run ``notebook``'s code cells up to its first self-check, ``answer`` in its first answer cell (and its other
    answer cells before the check left empty; None: the cells as generated). Returns what the check cell printed
    and the kernel's namespace."""
    kernel = {"__name__": "__main__"}
    answered, printed = False, io.StringIO()
    for i, cell in enumerate(_cells(notebook)):
        src = "".join(cell["source"])
        if _nbgrader(cell).get("solution") and answer is not None:
            src, answered = ("" if answered else answer), True
        code = compile(strip_magics(src), f"<cell {i}>", "exec")
        if _nbgrader(cell).get("grade"):
            with contextlib.redirect_stdout(printed):
                exec(code, kernel)
            return printed.getvalue(), kernel
        exec(code, kernel)
    raise AssertionError(f"{notebook.name} has no self-check cell")


def test_every_exercise_has_its_tries():
    from course_utils.grade.exercises import EXERCISES as REGISTERED

    assert len(EXERCISES) == len({ex.notebook for ex in REGISTERED.values()})
    assert {exercise_of(nb) for nb in EXERCISES} == set(TRIES)


@pytest.mark.parametrize("notebook", EXERCISES, ids=lambda p: p.stem)
def test_the_stub_is_not_implemented(notebook):
    printed, kernel = run_as_learner(notebook, None)
    assert printed.startswith(f"❌ {exercise_of(notebook)}: ") and "not implemented yet" in printed, printed
    assert kernel["result"].diagnosis == "not_implemented" and "Traceback" not in printed


@pytest.mark.parametrize("notebook", EXERCISES, ids=lambda p: p.stem)
def test_a_typical_mistake_is_named(notebook):
    wrong, key, _ = TRIES[exercise_of(notebook)]
    printed, kernel = run_as_learner(notebook, wrong)
    result = kernel["result"]
    assert not result and result.diagnosis == key, printed
    assert printed.strip() == result.report().strip() and "not implemented" not in printed


@pytest.mark.parametrize("notebook", EXERCISES, ids=lambda p: p.stem)
def test_a_correct_answer_in_another_style_passes(notebook):
    _, _, other = TRIES[exercise_of(notebook)]
    printed, kernel = run_as_learner(notebook, other)
    assert kernel["result"], printed
    assert printed.startswith(f"✅ {exercise_of(notebook)}: all "), printed


INTERVIEW = ROOT / "exercises" / "07_interview_mha.ipynb"


@pytest.mark.parametrize("style", sorted(INTERVIEW_STYLES))
def test_interview_mode_takes_any_class_name_and_signature(style):
    printed, kernel = run_as_learner(INTERVIEW, INTERVIEW_STYLES[style])
    assert kernel["result"] and printed.startswith("✅ mha_interview: all 7 checks passed"), printed


def test_interview_follow_ups_find_classes_of_other_names():
    """The follow-ups' checks are given globals(): a KV-cached class and a GQA of the learner's own names, built on
    an MHA named MHA, are each found; the MHA itself is never taken for a follow-up."""
    mha = INTERVIEW_STYLES["book_signature_named_MHA"]
    cached = implementations.REFERENCE["kv_cache"].replace("class CachedMultiHeadAttention(", "class MyKVCacheMHA(")
    gqa = implementations.REFERENCE["gqa"].replace("class GroupedQueryAttention(", "class MyGQA(")
    kernel = {"__name__": "__main__"}
    cells = _cells(INTERVIEW)
    answers = iter([mha, cached, gqa, "kv_cache_bytes, score_flops, grows_with_context = 0, 0, 'queries'"])
    verdicts = []
    for i, cell in enumerate(cells):
        src = next(answers) if _nbgrader(cell).get("solution") else "".join(cell["source"])
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(strip_magics(src), f"<cell {i}>", "exec"), kernel)
        if _nbgrader(cell).get("grade"):
            verdicts.append(printed.getvalue())
    assert [v.split(":")[0] for v in verdicts] == ["✅ mha_interview", "✅ kv_cache", "✅ gqa", "❌ interview_numbers"]
    fresh = {"__name__": "__main__"}
    exec(mha, fresh)
    from course_utils.grade import check

    assert check("kv_cache", fresh, quiet=True).diagnosis == "not_implemented"  # the MHA is no follow-up


def test_a_chinese_learner_reads_the_verdict_in_chinese(monkeypatch):
    monkeypatch.setenv("ATTN_LANG", "zh")
    wrong, key, _ = TRIES["mha"]
    printed, kernel = run_as_learner(ROOT / "exercises" / "zh-CN" / "04_multihead_attention.ipynb", wrong)
    assert kernel["result"].diagnosis == key and printed.startswith("❌ mha：7 项检查通过了"), printed


@pytest.mark.skipif(
    __import__("course_utils.grade.jail", fromlist=["probe"]).probe() is not None,
    reason="no sandbox here (bubblewrap): the file grader's side is not run",
)
@pytest.mark.parametrize("style", ["causal_self_attention", "with_follow_ups"])
def test_the_file_grader_gives_the_notebooks_verdict(tmp_path, style):
    """The same notebook, answered the same way, graded as a file (make grade, in the sandbox): the same verdicts
    as its check cells give in the kernel."""
    from course_utils.grade import runner

    mha = INTERVIEW_STYLES["book_signature_named_MHA" if style == "with_follow_ups" else style]
    answers = [mha] + (
        [
            implementations.REFERENCE["kv_cache"].replace("CachedMultiHeadAttention(", "MyKVCache("),
            implementations.REFERENCE["gqa"].replace("GroupedQueryAttention(", "MyGQA("),
        ]
        if style == "with_follow_ups"
        else []
    )
    nb = json.loads(INTERVIEW.read_text(encoding="utf-8"))
    solution_cells = [c for c in nb["cells"] if _nbgrader(c).get("solution")]
    for cell, answer in zip(solution_cells, answers, strict=False):
        cell["source"] = answer
    path = tmp_path / INTERVIEW.name
    path.write_text(json.dumps(nb), encoding="utf-8")
    classes = ("mha_interview", "kv_cache", "gqa")  # the numbers' answers are counted per question in a file
    in_file = {
        r.exercise: (r.passed, r.checks_passed) for r in runner.grade_file(path).results if r.exercise in classes
    }
    kernel, in_kernel = {"__name__": "__main__"}, {}
    for i, cell in enumerate(c for c in nb["cells"] if c["cell_type"] == "code"):
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(strip_magics("".join(cell["source"])), f"<cell {i}>", "exec"), kernel)
        if _nbgrader(cell).get("grade") and kernel["result"].exercise in classes:
            in_kernel[kernel["result"].exercise] = (kernel["result"].passed, kernel["result"].checks_passed)
    assert in_file == in_kernel, (in_file, in_kernel)
    assert in_file["mha_interview"][0] and in_file["kv_cache"][0] == in_file["gqa"][0] == (style == "with_follow_ups")


@pytest.mark.parametrize("folder", ["exercises", "exercises/zh-CN"])
def test_exercise_14_without_triton_says_what_to_do(monkeypatch, folder):
    """macOS and Windows have no triton wheel: the setup cell says so, in both languages, instead of a bare
    ModuleNotFoundError (notebook 14's first cell does the same)."""
    setup = next(c for c in _cells(ROOT / folder / "14_flash_triton.ipynb") if c["id"] == "setup")
    monkeypatch.setitem(__import__("sys").modules, "triton", None)  # `import triton` fails as where it is missing
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the cell sets it; the test leaves the environment as it was
    with pytest.raises(RuntimeError, match="Linux only") as raised:
        exec(compile("".join(setup["source"]), "<setup>", "exec"), {"__name__": "__main__"})
    assert "WSL" in str(raised.value) and "只提供 Linux" in str(raised.value) and raised.value.__cause__ is None


FLASH = ROOT / "exercises" / "14_flash_triton.ipynb"
_needs_triton = pytest.mark.skipif(
    __import__("importlib.util").util.find_spec("triton") is None, reason="triton is not installed (Linux only)"
)


@_needs_triton
def test_the_kernel_stub_names_the_function_the_learner_writes():
    """The handed-out kernel raises NotImplementedError inside flash_kernel, launched by the given flash_attention:
    the learner is told to write flash_kernel, the function their cell holds."""
    printed, kernel = run_as_learner(FLASH, None)
    assert "write flash_kernel" in printed and "flash_attention" not in printed, printed


@_needs_triton
@pytest.mark.parametrize(
    "edits,said",
    [
        ({"STORE": "tl.store(o_ptrs, out.to(O.dtype.element_ty))"}, "stored without its mask"),  # past the output
        ({"SCALE": "s = tl.dot(q, k) * scale"}, "tl.dot: input and other must have equal reduction dimensions"),
    ],
    ids=["store_without_mask", "dot_shapes"],
)
def test_a_kernel_mistake_is_told_in_the_notebooks_kernel_which_survives_it(edits, said):
    """A store past the end of the output once corrupted the heap of the learner's own kernel ("double free or
    corruption"): now it is stopped before it writes and named; a tl.dot on blocks that do not fit is said as tl.dot's,
    at the kernel's line. The kernel (this process) goes on."""
    printed, kernel = run_as_learner(FLASH, mutate(flash_triton.REFERENCE, edits))
    assert not kernel["result"] and said in printed, printed
    assert run_as_learner(FLASH, flash_triton.REFERENCE)[1]["result"]  # still alive, and grading
