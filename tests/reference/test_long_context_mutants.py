"""The long-context tests can fail: each classic mistake of tests/grader_cases/long_context.py, patched into
``course_utils.reference.sliding_window`` (undone after the test), makes the reference tests raise AssertionError."""

import pytest

import course_utils.reference.sliding_window as sw
from tests.grader_cases.long_context import MUTANTS
from tests.reference import test_long_context as lc

# per mutant: the reference tests (with their cases) that must catch it
CATCHERS = {
    "window_off_by_one": [
        (lc.test_sliding_window_mask_is_huggingface_rule, (7, 7, 3, 0)),
        (lc.test_sliding_window_attention_equals_sdpa_float64, (13, 4, 0)),
        (lc.test_ring_cache_decode_equals_full_recompute, lc.RING_CASES[1]),
    ],
    "slot_order": [
        (lc.test_ring_cache_decode_equals_full_recompute, lc.RING_CASES[1]),
        (lc.test_ring_cache_memory_is_constant_and_returns_the_window, (4, 0)),
        (lc.test_ring_cache_decode_equals_full_recompute, lc.RING_CASES[4]),
    ],
    "rope_reset_at_wrap": [
        (lc.test_ring_cache_decode_equals_full_recompute, lc.RING_CASES[0]),
        (lc.test_ring_cache_decode_equals_full_recompute, lc.RING_CASES[3]),
    ],
    "sinks_evicted": [
        (lc.test_ring_cache_decode_equals_full_recompute, lc.RING_CASES[2]),
        (lc.test_ring_cache_memory_is_constant_and_returns_the_window, (3, 2)),
    ],
}


def patch(monkeypatch, path, replacement):
    owner, _, attr = path.rpartition(".")
    monkeypatch.setattr(getattr(sw, owner) if owner else sw, attr, replacement)


def test_every_mutant_has_catchers_and_a_diagnosis():
    assert set(CATCHERS) == set(MUTANTS) and len(MUTANTS) >= 4
    assert all(diagnosis and path for diagnosis, path, _ in MUTANTS.values())


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_caught(monkeypatch, name):
    _, path, replacement = MUTANTS[name]
    patch(monkeypatch, path, replacement)
    for test, args in CATCHERS[name]:
        with pytest.raises(AssertionError):
            test(*args)
