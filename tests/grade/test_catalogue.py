"""The grader in-process: references and alternatives pass, stubs say "not implemented", and every
misconception mutant gets its own diagnosis (the same logic the CLI uses)."""

import pytest
import torch

import course_utils as cu
from course_utils.grade import check, grade_class
from course_utils.grade.exercises import IDS, get
from course_utils.grade.protocol import Graded, run_in_process, verdict
from tests.conftest import grade, load
from tests.grader_cases.implementations import ALTERNATIVES, MUTANTS, REFERENCE, mutate

# the exercises whose fixtures are in implementations.py (01-07); the others' have grader tests of their own, next
# to their fixtures (test_grader_beyond.py, test_grader_capstone.py, test_grader_sliding_window.py, ...)
EXERCISES = tuple(ex for ex in IDS if ex in REFERENCE)


def test_catalogue_sizes():
    minimum = {"mha": 10, "gqa": 4}
    for ex in EXERCISES:
        assert len({k for k, _ in MUTANTS[ex]}) >= minimum.get(ex, 3), ex


@pytest.mark.parametrize(
    "exercise,cls",
    [
        ("self_attention", cu.SelfAttention_v2),
        ("causal", cu.CausalAttention),
        ("wrapper", cu.MultiHeadAttentionWrapper),
        ("mha", cu.MultiHeadAttention),
        ("gqa", cu.GroupedQueryAttention),
    ],
)
def test_grader_reference_equals_course_utils(exercise, cls):
    """The grader's functional reference computes what course_utils' checked modules compute."""
    graded = Graded(exercise)
    cases = graded.cases
    records = run_in_process(cls, graded)
    assert all(r["calls"] for r in records)  # the recorder sees the reference being used ...
    for r in records:
        r["calls"] = []
    assert verdict(exercise, records, cases)  # ... and, that ignored, the outputs agree
    # the same module used as a submission gets no credit
    refused = grade_class(exercise, cls)
    assert not refused and refused.diagnosis == "delegates"


def test_kv_cache_reference_matches_full_sequence():
    case = get("kv_cache").make_cases()[0]
    outs = get("kv_cache").expected(case, get("kv_cache").correct)
    x = case.meta["x_full"]
    stepped = torch.cat([outs["step1.out"], outs["step2.out"], outs["step3.out"]], dim=1)
    assert torch.allclose(stepped, outs["step4.out"][:, :6], atol=1e-6)
    mha = cu.MultiHeadAttention(*[case.ctor[a] for a in get("mha").args]).eval()
    mha.load_state_dict(case.params, strict=False)
    with torch.no_grad():
        assert torch.allclose(mha(x), outs["step4.out"], atol=1e-6)
    assert outs["step3.keys"].shape == (2, 3, 6, 4) and outs["step4.keys"] is None


def test_interview_mode_refuses_sdpa_and_course_utils():
    sdpa = grade("mha_interview", ALTERNATIVES["mha"]["sdpa"])
    assert not sdpa and sdpa.diagnosis == "forbidden" and "scaled_dot_product_attention" in sdpa.report()
    assert grade("mha", ALTERNATIVES["mha"]["sdpa"])  # allowed outside interview mode
    ref = grade_class("mha_interview", cu.MultiHeadAttention)
    assert not ref and ref.diagnosis == "delegates"


def test_contract_shape_mismatch_is_named():
    src = REFERENCE["mha"].replace("self.W_key = nn.Linear(d_in, d_out", "self.W_key = nn.Linear(d_in, d_in")
    result = grade("mha", src)
    assert result.diagnosis == "contract"
    assert "W_key.weight has shape (4, 4) but the contract needs (12, 4)" in result.report()


def test_exception_is_one_line_with_the_learners_line():
    src = mutate(REFERENCE["mha"], {"MERGE": "ctx = (w @ v).transpose(1, 2).reshape(b, n, self.d_out + 1)"})
    result = grade("mha", src)
    assert result.diagnosis == "exception" and "RuntimeError" in result.summary
    assert "line" in result.summary and "reshape" in result.summary and "Traceback" not in result.report()


def test_check_prints_and_returns(capsys):
    good = check("causal", load(REFERENCE["causal"], "CausalAttention"))
    bad = check("causal", load(mutate(REFERENCE["causal"], {"FILL": "pass"}), "CausalAttention"))
    out = capsys.readouterr().out
    assert good and not bad
    assert "✅ causal: all 7 checks passed" in out and "no causal mask" in out
    with pytest.raises(ValueError, match="unknown exercise"):
        check("nope", object)
