"""The grader on exercise 14 (flash_triton): a Triton kernel graded in Triton's interpreter, on the CPU. The solution
and alternative correct kernels pass, the stub says "not implemented", every misconception gets its own named
diagnosis (in the notebook's kernel and in the sandbox), and the grader's replay of the kernel's tiles computes what
SDPA and course_utils' checked Triton kernel compute. Skipped where triton is not installed (macOS, Windows)."""

import importlib.util
import os
import re
import warnings
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F

from course_utils.grade import check, grade_class, runner
from course_utils.grade.exercises import flash_triton, get
from course_utils.grade.exercises.flash_triton import TEXTS, FlashVariant
from tests.grade.exercises.fixtures import load_kernel as load
from tests.grader_cases.flash_triton import BODY, MUTANTS, REFERENCE
from tests.grader_cases.implementations import mutate

if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed (it has wheels for Linux only)", allow_module_level=True)
if not torch.cuda.is_available():  # before triton is imported: its own jit helpers (tl.zeros, tl.sum) are made then
    os.environ.setdefault("TRITON_INTERPRET", "1")
import triton.language as tl  # noqa: E402
from triton.runtime.interpreter import InterpretedFunction  # noqa: E402

# The notebook's kernel grades in Triton's interpreter, which is one mode for the whole process: where this process
# imported triton to compile (a CUDA GPU), only the sandbox's test runs (a fresh process, interpreter on).
in_process = pytest.mark.skipif(
    not isinstance(tl.zeros, InterpretedFunction),
    reason="triton runs compiled in this process (a CUDA GPU): the sandbox test grades",
)
ROOT = Path(__file__).resolve().parents[3]
EX = "flash_triton"


def grade(src):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy in the interpreter: 0/0 of a mistaken kernel
        return grade_class(EX, load(src))


def test_registered_with_its_texts():
    ex = get(EX)
    assert (ex.kind, ex.contract, ex.points, ex.notebook, ex.order) == (
        "kernel",
        "flash_attention",
        3,
        "14_flash_triton",
        14,
    )
    assert ex.correct == FlashVariant() and len(ex.make_cases()) == 6
    for key, (en, zh) in TEXTS.items():
        assert flash_triton.TEXTS[key][1] == zh and en and zh, key
    assert {"mutant." + m.key for m in ex.mutants()} <= set(TEXTS)
    assert {"case:" + c.name for c in ex.make_cases()} <= set(TEXTS)


def test_solution_notebook_holds_the_graded_reference():
    nb = nbformat.read(ROOT / "solutions" / "14_flash_triton.ipynb", as_version=4)
    solution = next(c.source for c in nb.cells if c.id == "solution")
    body = solution.split("    ### BEGIN SOLUTION\n", 1)[1].split("\n    ### END SOLUTION", 1)[0]
    assert body == re.sub(r"  #[A-Z0-9]+$", "", BODY, flags=re.M).rstrip("\n")


@in_process
def test_reference_solution_passes_and_check_prints(capsys):
    result = check(EX, load(REFERENCE))
    assert result and result.score == 1.0, result.report()
    assert not check(EX, None)
    out = capsys.readouterr().out
    assert "✅ flash_triton: all 7 checks passed" in out
    assert "not implemented yet: define function flash_attention" in out


def test_the_named_mistakes_are_all_there():
    keys = {m.key for m in get(EX).mutants()}
    assert {
        "flash_accumulator_not_rescaled",
        "flash_sum_not_rescaled",
        "flash_max_started_at_zero",
        "flash_tail_read_without_mask",
        "flash_diagonal_block_unmasked",
        "flash_scale_after_softmax",
        "flash_lse_stored_wrong",
        "flash_max_frozen_at_first_block",
        "flash_rows_assumed_contiguous",
        "flash_store_without_mask",
    } <= keys
    assert {k for k, _ in MUTANTS} == keys


@in_process
@pytest.mark.parametrize("seed", [0, 7])
def test_grader_replay_equals_sdpa_and_the_course_kernel(seed):
    """The replay of the tiles (the correct variant) against SDPA and logsumexp in float64, and against
    course_utils' checked Triton kernel; past each sequence's end the cases hold NaN, which the mutant reading
    without a mask brings in."""
    flash_triton = pytest.importorskip("course_utils.reference.flash_triton")
    ex = get(EX)
    for case in ex.make_cases(seed=seed):
        q, k, v, causal, block_m, block_n = case.calls[0].args
        got = ex.expected(case, ex.correct)
        want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
        # float32 scores in the hundreds round at 1e-5 to 1e-4: the weights differ from float64's by about that much
        torch.testing.assert_close(got["step1.out"].double(), want, rtol=1e-3, atol=1e-3)
        scores = q.double() @ k.double().transpose(-2, -1) / q.shape[-1] ** 0.5
        if causal:
            scores = scores.masked_fill(torch.ones(q.shape[2], q.shape[2], dtype=torch.bool).triu(1), float("-inf"))
        torch.testing.assert_close(got["step1.lse"].double(), torch.logsumexp(scores, -1), rtol=1e-5, atol=1e-4)
        out, lse = flash_triton.flash_attention_triton(q, k, v, causal=causal, block_m=block_m, block_n=block_n)
        torch.testing.assert_close(out, got["step1.out"], rtol=1e-3, atol=1e-3)  # exp2 there, exp here
        assert (
            q.untyped_storage().nbytes() > q.nbytes
            and torch.isnan(q.as_strided((*q.shape[:2], q.shape[2] + 1, q.shape[3]), q.stride())[:, :, -1]).all()
        )
        tail = ex.expected(case, FlashVariant(tail="loads"))["step1.out"]
        assert torch.isnan(tail).any() == (q.shape[2] % block_n != 0)


@pytest.mark.requires_sandbox
def test_graded_in_the_sandbox(tmp_path):
    """Submissions as files, through the sandboxed runner (triton imported there, its interpreter on): the
    solution passes, a tail read without a mask is named."""
    subs = {
        "ref": REFERENCE,
        "tail": mutate(REFERENCE, dict(MUTANTS)["flash_tail_read_without_mask"]),
        "store": mutate(REFERENCE, dict(MUTANTS)["flash_store_without_mask"]),  # once a crash of the child
        "rows": mutate(REFERENCE, dict(MUTANTS)["flash_rows_assumed_contiguous"]),
    }
    found = {}
    for name, src in subs.items():
        path = tmp_path / f"{name}.py"
        path.write_text(
            src + '\nfrom course_utils.grade import check\nresult = check("flash_triton", flash_attention)\n'
        )
        report = runner.grade_file(path, sandboxed=True)
        assert [r.exercise for r in report.results] == [EX], report.to_dict()
        found[name] = report.results[0]
    assert found["ref"], found["ref"].report()
    assert found["tail"].diagnosis == "flash_tail_read_without_mask", found["tail"].report()
    assert found["store"].diagnosis == "flash_store_without_mask", found["store"].report()
    assert found["rows"].diagnosis == "flash_rows_assumed_contiguous", found["rows"].report()
