"""The grader on exercise 16 (gated_delta): what is its own beyond the contract test (tests/grade/exercises/
test_contract.py grades its fixture the four ways). The grader's reference computes what course_utils' checked gated
delta rule computes; each named mistake lands far above float32 agreement on every seed, so that a learner who makes
it is never taken for right; the learner's pair is read as (o, final_state) and the initial state it was handed must
come back unchanged; the stretch's cases accept the recurrence."""

import math

import pytest
import torch

import course_utils as cu
from course_utils.grade import grade_class
from course_utils.grade.exercises import get
from course_utils.grade.exercises.gated_delta import DeltaVariant, chunked, expected, read_back, recurrent
from tests.conftest import load
from tests.grader_cases.gated_delta import ALTERNATIVES, REFERENCE
from tests.grader_cases.implementations import mutate

EX = get("gated_delta")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_reference_computation_is_course_utils_gated_delta_rule(seed):
    """In float64, on the grader's own cases: the recurrence and the chunked form against course_utils' recurrent and
    chunked references (keys and queries normalised in the kernel, fla's l2norm)."""
    for case in EX.make_cases(seed):
        q, k, v, g, beta, state, chunk_size = (x.double() if torch.is_tensor(x) else x for x in case.calls[0].args)
        want, want_state = cu.recurrent_gated_delta_rule(
            q, k, v, g, beta, initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True
        )
        got, got_state = recurrent(q, k, v, g, beta, state, DeltaVariant())
        torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)
        torch.testing.assert_close(got_state, want_state, atol=1e-10, rtol=1e-10)
        if chunk_size is not None:
            got, got_state = chunked(q, k, v, g, beta, chunk_size, state, DeltaVariant())
            torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)
            torch.testing.assert_close(got_state, want_state, atol=1e-10, rtol=1e-10)


def _distance(a: dict, b: dict) -> float:
    """The largest relative difference between two outputs of the same case (infinite where shapes differ)."""
    worst = 0.0
    for name in b:
        x, y = a.get(name), b[name]
        if x is None or x.shape != y.shape:
            return math.inf
        worst = max(worst, ((x - y).abs().max() / y.abs().max().clamp_min(1)).item())
    return worst


SEEDS = range(20)


def test_every_named_mistake_lands_far_from_float32_agreement_on_every_seed():
    """On every seed, each mutant's outputs differ from the right ones by more than 500 times the comparison's
    relative tolerance (2e-4) in at least one case: a learner making the mistake can never pass."""
    ok = DeltaVariant()
    nearest = {}
    for seed in SEEDS:
        cases = EX.make_cases(seed)
        right = [expected(case, ok) for case in cases]
        for mutant in EX.mutants():
            far = max(_distance(expected(case, mutant.variant), r) for case, r in zip(cases, right, strict=True))
            key = (mutant.key, mutant.variant)
            nearest[key] = min(nearest.get(key, math.inf), far)
    close = {key[0]: d for key, d in nearest.items() if d < 0.1}
    assert not close, f"mistakes that come within 0.1 (relative) of the right outputs on some seed: {close}"


def test_the_chunked_cases_accept_the_recurrence_and_the_chunked_form():
    for case in EX.make_cases(4):
        if case.calls[0].args[6] is None:  # no chunk_size
            continue
        by_recurrence = expected(case, DeltaVariant(chunked="recurrence"))
        by_chunks = expected(case, DeltaVariant())
        assert _distance(by_recurrence, by_chunks) < 1e-5


def test_the_pair_is_read_as_the_output_and_the_final_state():
    outputs = {"step1.out": torch.zeros(1), "step1.lse": torch.ones(1), "step1.initial_state": torch.ones(2)}
    assert set(read_back(None, outputs)) == {"step1.out", "step1.final_state", "step1.initial_state"}


def test_a_learner_who_updates_the_initial_state_in_place_is_told_so():
    """Only the read-back initial state differs: the outputs are right."""
    src = mutate(
        REFERENCE,
        {
            "DISPATCH": "if False:",
            "INIT": "S = q.new_zeros(B, H, K, v.shape[-1]) if initial_state is None else initial_state",
            "DECAY": "S.mul_(g[:, t].exp()[..., None, None])",
            "WRITE": "S.add_(k[:, t, :, :, None] * correction[:, :, None, :])",
        },
    )
    result = grade_class(EX.id, load(src, EX.contract))
    assert not result and result.diagnosis == "initial_state_modified"
    assert "initial_state.clone()" in str(result.messages[0])


def test_a_learner_in_float64_or_with_f_normalize_passes():
    for name in ("transition_matrix_per_head_float64", "loop_over_heads"):
        assert grade_class(EX.id, load(ALTERNATIVES[name], EX.contract)), name
