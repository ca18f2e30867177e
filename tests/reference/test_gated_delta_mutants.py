"""The gated delta rule's tests can fail: each classic mistake of tests/grader_cases/gated_delta.py, patched into
``course_utils.reference.gated_delta`` (undone after the test), makes the named reference tests raise
AssertionError."""

import pytest

import course_utils.reference.gated_delta as gd
from tests.grader_cases.gated_delta import REFERENCE_MUTANTS as MUTANTS
from tests.reference import test_gated_delta as tests

FIRST = tests.SHAPES[0]  # B 2, T 37, H 3, chunk 16: T not divisible by the chunk
ONE_TOKEN = tests.SHAPES[1]
RECURRENT = [
    (tests.test_equals_the_paper_recurrence_in_float64, ("gdn-recurrent", FIRST, True)),
    (tests.test_equals_the_paper_recurrence_in_float64, ("kda-recurrent", ONE_TOKEN, True)),
]
CHUNKED = [
    (tests.test_equals_the_paper_recurrence_in_float64, ("gdn-chunk", FIRST, False)),
    (tests.test_equals_the_paper_recurrence_in_float64, ("kda-chunk", FIRST, True)),
    (tests.test_chunked_equals_recurrent_for_every_chunk_size, (8,)),
]
CATCHERS = {name: RECURRENT if target == "_recurrent" else CHUNKED for name, (_, target, _) in MUTANTS.items()}


def test_every_mutant_has_catchers():
    assert len(MUTANTS) >= 9 and all(CATCHERS.values())


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_caught(monkeypatch, name):
    _, target, replacement = MUTANTS[name]
    monkeypatch.setattr(gd, target, replacement)
    for test, args in CATCHERS[name]:
        with pytest.raises(AssertionError):
            test(*args)
