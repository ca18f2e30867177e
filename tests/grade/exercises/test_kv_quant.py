"""The grader on exercise 17b (kv_quant): the grader's reference computation against course_utils' checked KIVI
split, every named mistake caught on every seed tried (each mutant's dequantised cache differs from the reference's
on some case, NaN included), the cases clear of rounding boundaries, and the solution notebook's code passing."""

import json
from pathlib import Path

import pytest
import torch

import course_utils as cu
from course_utils.grade import grade_class
from course_utils.grade.exercises import get
from course_utils.grade.exercises.kv_quant import MARGIN, QuantVariant, kivi_forward, mutants, normalised
from tests.conftest import load
from tests.grade.exercises.fixtures import FIXTURES

ROOT = Path(__file__).resolve().parents[3]
EX = "kv_quant"


def test_registered():
    ex = get(EX)
    assert (ex.kind, ex.contract, ex.points, ex.notebook) == ("function", "kivi_quantize", 3, "17_kv_quant")
    assert ex.correct == QuantVariant() and len(ex.make_cases(0)) == 4


@pytest.mark.parametrize("seed", range(3))
def test_the_reference_computation_is_course_utils_kivi(seed):
    for case in get(EX).make_cases(seed):
        args = case.calls[0].args
        for got, ref in zip(kivi_forward(args, QuantVariant()), cu.kivi_quantize(*args), strict=True):
            torch.testing.assert_close(got, ref, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("seed", range(12))
def test_every_mistake_changes_the_cache_on_every_seed(seed):
    cases = get(EX).make_cases(2000 + seed)
    for m in mutants():
        differs = False
        for case in cases:
            right = kivi_forward(case.calls[0].args, QuantVariant())
            try:
                wrong = kivi_forward(case.calls[0].args, m.variant)
            except RuntimeError:  # this grouping does not fit this case: another one names it
                continue
            for a, b in zip(wrong, right, strict=True):
                differs |= a.shape != b.shape or not torch.allclose(a, b, atol=1e-6, rtol=1e-6, equal_nan=False)
        assert differs, (m.key, m.variant)


def test_the_cases_round_clear_of_the_boundaries():
    keys, values, bits, group, residual = get(EX).make_cases(5)[0].calls[0].args
    z = normalised(keys[:, :, :24], bits, -2, group, QuantVariant())
    assert ((z - z.floor() - 0.5).abs() >= MARGIN).all() and keys.dtype == torch.float64


def test_the_constant_groups_come_back_exactly():
    keys, values, *rest = args = get(EX).make_cases(6)[2].calls[0].args
    k_hat, v_hat = kivi_forward(args, QuantVariant())
    assert torch.equal(k_hat[:, :, 8:16, 1], keys[:, :, 8:16, 1]) and torch.equal(v_hat[:, :, 2], values[:, :, 2])


def test_the_solution_notebook_passes():
    cells = json.loads((ROOT / "solutions" / "17_kv_quant.ipynb").read_text())["cells"]
    src = "import math\nimport torch\n" + "".join(next(c["source"] for c in cells if c.get("id") == "solution"))
    assert grade_class(EX, load(src, "kivi_quantize")).passed


def test_delegating_to_course_utils_is_refused():
    from tests.grader_cases.kv_quant import KIVI_REFERENCE

    src = KIVI_REFERENCE.replace(
        "    T = keys.shape[2]\n",
        "    import course_utils\n    return course_utils.kivi_quantize(keys, values, bits, group_size, residual)\n",
        1,
    )
    refused = grade_class(EX, load(src, "kivi_quantize"))
    assert not refused and refused.diagnosis == "delegates", refused.report()


@pytest.mark.requires_sandbox
def test_graded_in_the_sandbox(tmp_path):
    """Submissions as files, through the sandboxed runner: the same verdicts as in the notebook's kernel."""
    FIXTURES[EX].graded_in_the_sandbox(tmp_path, "loops_and_cat")
