"""protocol on its own: what the child sends back is resolved only when it is in the plan's schema (one record per
case, mappings, plain float tensors under the expected names); anything else is refused with its reason."""

from __future__ import annotations

import pytest
import torch

from course_utils.grade.protocol import BadResult, Graded

EXERCISE = "self_attention"  # plain cases, no interview mode: cheap to draw


@pytest.fixture(scope="module")
def graded():
    return Graded(EXERCISE, seed=0)


def records(graded) -> list:
    """A well-formed result: one record per case, nothing computed."""
    return [{"case": case.name, "error": None, "outputs": {}, "calls": []} for case in graded.cases]


def with_first(graded, **fields) -> list:
    forged = records(graded)
    forged[0].update(fields)
    return forged


def an_error(**fields) -> dict:
    return {"type": "RuntimeError", "message": "boom", "line": None, "where": "forward", **fields}


MALFORMED = {
    "not a list": (lambda g: {"records": records(g)}, "bad.records"),
    "a record short": (lambda g: records(g)[:-1], "bad.records"),
    "a record that is no mapping": (lambda g: [["outputs"]] + records(g)[1:], "bad.record"),
    "outputs that are no mapping": (lambda g: with_first(g, outputs=[1.0]), "bad.outputs"),
    "calls that are not names": (lambda g: with_first(g, calls=[3]), "bad.calls"),
    "an error that is no mapping": (lambda g: with_first(g, error="boom"), "bad.error"),
    "an error field of the wrong type": (lambda g: with_first(g, error=an_error(type=3)), "bad.error_field"),
    "an error in an unknown place": (lambda g: with_first(g, error=an_error(where="kernel")), "bad.error_place"),
}


@pytest.mark.parametrize("what", MALFORMED)
def test_resolve_refuses_a_malformed_result(graded, what):
    forge, key = MALFORMED[what]
    with pytest.raises(BadResult) as refused:
        graded.resolve(forge(graded))
    assert refused.value.args[0].key == key


def test_resolve_keeps_only_the_schema(graded):
    out = torch.ones(2, 3, dtype=torch.float32)
    forged = with_first(
        graded,
        outputs={"step1.out": out, "repeat.out": torch.ones(2, dtype=torch.int64), "the answer": torch.zeros(1)},
        calls=["x" * 200] * 30,
        error=an_error(message="m" * 5000, not_implemented="yes", step=True),
    )
    first = graded.resolve(forged)[0]
    assert set(first["outputs"]) == {"step1.out", "repeat.out"}  # a name the plan does not expect is dropped
    assert first["outputs"]["step1.out"].dtype == torch.float64 and torch.equal(first["outputs"]["step1.out"], out)
    assert first["outputs"]["repeat.out"] == "<tensor of dtype int64>"  # not a float tensor: described, not kept
    assert len(first["calls"]) == 20 and all(len(c) == 80 for c in first["calls"])
    error = first["error"]
    assert len(error["message"]) < 5000 and error["not_implemented"] is False and error["step"] == 1


def test_a_well_formed_result_resolves_case_by_case(graded):
    resolved = graded.resolve(records(graded))
    assert [r["case"] for r in resolved] == [case.name for case in graded.cases]
    assert all(r["error"] is None and r["outputs"] == {} for r in resolved)
