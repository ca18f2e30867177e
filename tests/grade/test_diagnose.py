"""diagnose on its own: outputs compared with the reference name what differs, and outputs a mistake computes are
named as that mistake, straight from records (no learner code runs here), the exercise's kind passed in."""

from __future__ import annotations

import pytest
import torch

from course_utils.grade import diagnose
from course_utils.grade.exercises import get

EXERCISES = ("self_attention", "causal")  # small cases, a handful of mistakes each


def records_of(exercise: str, cases: list, variant) -> list:
    """The records of a learner whose class computes ``variant``: its outputs on every case (deterministic), or
    the error it raises where it crashes."""
    records = []
    for case in cases:
        outputs = diagnose.cached_outputs(get(exercise).expected, case, variant)
        if isinstance(outputs, Exception):
            error = {"type": type(outputs).__name__, "message": str(outputs), "line": None, "where": outputs.where}
            error.update(step=outputs.step, not_implemented=False, contract=False)
            records.append({"case": case.name, "error": error, "outputs": {}, "calls": []})
        else:
            outputs = {**outputs, "repeat.out": outputs["step1.out"]}
            records.append({"case": case.name, "error": None, "outputs": outputs, "calls": []})
    return records


@pytest.mark.parametrize("exercise", EXERCISES)
def test_the_reference_passes_and_each_mistake_is_named(exercise):
    ex = get(exercise)
    cases = ex.make_cases(seed=1)
    passed = diagnose.judge(ex, ex.how, records_of(exercise, cases, ex.correct), cases)
    assert passed and passed.checks_passed == passed.checks_total == len(cases) + 1
    for mutant in ex.mutants():
        result = diagnose.judge(ex, ex.how, records_of(exercise, cases, mutant.variant), cases)
        assert not result and result.diagnosis == mutant.key, (mutant.key, result.diagnosis, str(result))


def test_a_stub_is_not_implemented():
    ex = get("self_attention")
    cases = ex.make_cases(seed=1)
    stub = {"type": "NotImplementedError", "message": "", "line": None, "where": "forward", "step": 1}
    stub.update(not_implemented=True, contract=False)
    records = [{"case": c.name, "error": stub, "outputs": {}, "calls": []} for c in cases]
    result = diagnose.judge(ex, ex.how, records, cases)
    assert result.diagnosis == diagnose.NOT_IMPLEMENTED and result.score == 0.0


def test_compare_names_what_differs():
    want = {"step1.out": torch.zeros(2, 3, dtype=torch.float64)}
    assert diagnose.compare({"step1.out": torch.zeros(2, 3, dtype=torch.float64)}, want) is None
    assert diagnose.compare({"step1.out": torch.zeros(3, 2, dtype=torch.float64)}, want).key == "compare.shape"
    assert diagnose.compare({"step1.out": None}, want).key == "compare.none"
    assert diagnose.compare({"step1.out": "<tuple>"}, want).key == "compare.not_tensor"
    nan = torch.zeros(2, 3, dtype=torch.float64)
    nan[0, 1] = float("nan")
    assert diagnose.compare({"step1.out": nan}, want).key == "compare.nan"
    off = diagnose.compare({"step1.out": torch.full((2, 3), 0.5, dtype=torch.float64)}, want)
    assert off.key == "compare.differs" and off.args["diff"] == pytest.approx(0.5)
