"""The grader on exercise 17a (dsa_indexer): the grader's reference computation against course_utils' checked
DSA, every named mistake caught on every seed tried (each mutant's output or indices differ from the reference's on
some case), the indices graded as a set per query (any order, -1 padding as the contract says, ties at the k-th score
either way), and the solution notebook's code passing."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import course_utils as cu
from course_utils.grade import grade_class
from course_utils.grade.exercises import get
from course_utils.grade.exercises.dsa_indexer import (
    DsaVariant,
    as_sets,
    dsa_forward,
    mutants,
    select,
    ties_read_as_reference,
)
from tests.conftest import load
from tests.grade.exercises.fixtures import FIXTURES
from tests.grader_cases.dsa_indexer import DSA_REFERENCE

ROOT = Path(__file__).resolve().parents[3]
EX = "dsa_indexer"


def test_registered():
    ex = get(EX)
    assert (ex.kind, ex.contract, ex.points, ex.notebook) == ("function", "dsa_attention", 3, "17_dsa_indexer")
    assert ex.correct == DsaVariant() and len(ex.make_cases(0)) == 3


@pytest.mark.parametrize("seed", range(3))
def test_the_reference_computation_is_course_utils_dsa(seed):
    for case in get(EX).make_cases(seed):
        args = case.calls[0].args
        out, indices = dsa_forward(args, DsaVariant())
        ref_out, ref_indices = cu.dsa_attention(*args)
        torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(as_sets(indices), as_sets(ref_indices), atol=0, rtol=0)


@pytest.mark.parametrize("seed", range(12))
def test_every_mistake_changes_the_output_on_every_seed(seed):
    cases = get(EX).make_cases(1000 + seed)
    for m in mutants():
        differs = False
        for case in cases:
            right, right_indices = dsa_forward(case.calls[0].args, DsaVariant())
            wrong, wrong_indices = dsa_forward(case.calls[0].args, m.variant)
            differs |= wrong.shape != right.shape or (wrong - right).abs().max().item() > 1e-3
            differs |= not torch.equal(as_sets(wrong_indices), as_sets(right_indices))
        assert differs, (m.key, m.variant)


def test_the_first_rows_are_padded_and_the_selection_is_causal():
    args = get(EX).make_cases(3)[0].calls[0].args  # 12 tokens, top-4
    _, indices = dsa_forward(args, DsaVariant())
    assert (indices[:, 0] == -1).sum(-1).tolist() == [3, 3] and (indices[:, 3:] >= 0).all()
    positions = torch.arange(12)[None, :, None]
    assert ((indices <= positions) | (indices == -1)).all()
    torch.testing.assert_close(as_sets(indices[:, :, [3, 1, 2, 0]]), as_sets(indices))  # the order of the slots


def test_a_gathered_padding_slot_changes_the_output():
    args = get(EX).make_cases(4)[0].calls[0].args
    right = dsa_forward(args, DsaVariant())[0]
    assert (dsa_forward(args, replace(DsaVariant(), padding="first_key"))[0] - right).abs().max() > 1e-3


def test_the_solution_notebook_passes():
    cells = json.loads((ROOT / "solutions" / "17_dsa_indexer.ipynb").read_text())["cells"]
    src = "import math\nimport torch\n" + "".join(next(c["source"] for c in cells if c.get("id") == "solution"))
    assert grade_class(EX, load(src, "dsa_attention")).passed


def test_delegating_to_course_utils_is_refused():
    from tests.grader_cases.dsa_indexer import DSA_REFERENCE

    src = DSA_REFERENCE.replace(
        "    B, H, T, d = q.shape\n",
        "    import course_utils\n    return course_utils.dsa_attention(q, k, v, q_idx, k_idx, weights, top_k)\n",
        1,
    )
    refused = grade_class(EX, load(src, "dsa_attention"))
    assert not refused and refused.diagnosis == "delegates", refused.report()


@pytest.mark.requires_sandbox
def test_graded_in_the_sandbox(tmp_path):
    """Submissions as files, through the sandboxed runner: the same verdicts as in the notebook's kernel."""
    FIXTURES[EX].graded_in_the_sandbox(tmp_path, "sort_and_sdpa")


# ---------------------------------------------------------------------------------------------------- the indices


def _graded(src):
    return grade_class(EX, load(src, "dsa_attention"))


def test_indices_that_are_not_the_keys_attended_are_caught_and_named():
    # the attention is right (the mask hides the future keys), the indices returned keep topk's future picks
    src = DSA_REFERENCE.replace("    return out, indices\n", "    return out, raw\n").replace(
        '    indices = indices.masked_fill(values == float("-inf"), -1)\n',
        '    raw = indices\n    indices = indices.masked_fill(values == float("-inf"), -1)\n',
    )
    result = _graded(src)
    assert not result and result.diagnosis == "dsa_indices_not_padded", result.report()
    assert "-1" in result.report("en") and "-1" in result.report("zh")


@pytest.mark.parametrize(
    "returned, said",
    [
        ("indices + 1", "indices"),  # keys off by one: no known mistake, the indices are still wrong
        ("indices.float()", "float32"),  # the contract's indices are integers
        ("indices[..., :-1]", "indices"),  # one slot short
    ],
)
def test_wrong_indices_fail_beside_a_right_output(returned, said):
    result = _graded(DSA_REFERENCE.replace("    return out, indices\n", f"    return out, {returned}\n"))
    assert not result and said in result.report("en"), result.report()


@pytest.mark.parametrize(
    "returned",
    [
        "indices.flip(-1)",  # the slots in another order
        "indices.sort(dim=-1, descending=True).values",  # by key, the -1 slots last
        "indices.int()",  # another integer type
    ],
)
def test_indices_in_any_order_or_integer_type_pass(returned):
    result = _graded(DSA_REFERENCE.replace("    return out, indices\n", f"    return out, {returned}\n"))
    assert result.passed, result.report()


def test_the_old_grader_would_have_missed_wrong_indices():
    # the output alone passes: what was graded before; the indices are what fails
    src = DSA_REFERENCE.replace("    return out, indices\n", "    return out, indices.flip(-2)\n")
    result = _graded(src)
    assert not result and "indices" in result.report("en"), result.report()


def _tied_args():
    """One row of 4 keys whose scores are 3, 1, 2, 2: its top-2 is key 0 and either of the tied keys 2 and 3."""
    q, k, v = (torch.randn(1, 1, 4, 2) for _ in range(3))
    q_idx, k_idx = torch.ones(1, 4, 1, 1), torch.tensor([3.0, 1.0, 2.0, 2.0]).view(1, 4, 1)
    return (q, k, v, q_idx, k_idx, torch.ones(1, 4, 1), 2)


def test_a_selection_tied_at_the_kth_score_is_read_as_the_reference():
    args = _tied_args()
    reference = as_sets(select(torch.tensor([[[3.0, 1, 2, 2]] * 4]), 2, DsaVariant()))
    chosen = int(reference[0, 3, 1])  # the tied key the reference kept, 2 or 3
    other = {2: 3, 3: 2}[chosen]
    learner = reference.clone()
    learner[0, 3] = torch.tensor([0.0, float(other)])
    assert torch.equal(ties_read_as_reference(learner, args), reference)
    untied = reference.clone()
    untied[0, 3] = torch.tensor([0.0, 1.0])  # key 1 scores 1, below the k-th score 2: a wrong selection
    assert torch.equal(ties_read_as_reference(untied, args), untied)
