"""The serving tests can fail: each mutant of tests/grader_cases/serving.py, patched into course_utils (undone after
the test), makes the named tests of test_reference_serving.py raise AssertionError."""

import pytest

import course_utils
import course_utils.reference.paged_kv_cache as paged_module
import course_utils.reference.split_k as split_k_module
from tests.grader_cases.serving import MUTANTS
from tests.reference import test_serving as serving_tests

# mutant -> the tests (function, args) that must catch it
CATCHERS = {
    "block_table_slot_without_block_size": [
        (serving_tests.test_slots_follow_the_block_table, ()),
        (serving_tests.test_gather_equals_contiguous_cache, (4, [11])),
    ],
    "block_table_ignored": [
        (serving_tests.test_gather_equals_contiguous_cache, (4, [5, 1, 6, 2])),
        (serving_tests.test_paged_attention_equals_sdpa_with_an_explicit_mask, ()),
    ],
    "shared_block_written_without_copy": [
        (serving_tests.test_fork_shares_blocks_and_copies_on_write, (6,)),
        (serving_tests.test_paged_attention_reads_a_shared_prefix, ()),
    ],
    "copy_on_write_without_data": [
        (serving_tests.test_fork_shares_blocks_and_copies_on_write, (6,)),
        (serving_tests.test_paged_attention_reads_a_shared_prefix, ()),
    ],
    "free_ignores_ref_counts": [(serving_tests.test_free_returns_blocks_only_when_unreferenced, ())],
    "rollback_leaks_blocks": [(serving_tests.test_truncate_rolls_back_and_frees_blocks, ())],
    "length_off_by_one": [
        (serving_tests.test_paged_attention_equals_sdpa_with_an_explicit_mask, ()),
        (serving_tests.test_continuous_batching_equals_one_contiguous_cache_per_sequence, ()),
    ],
    "merge_without_rescaling": [
        (serving_tests.test_split_k_equals_sdpa_in_float64, (3, 1)),
        (serving_tests.test_merge_of_partials_from_uneven_chunks_and_large_scores, ()),
    ],
    "merge_summed": [(serving_tests.test_split_k_equals_sdpa_in_float64, (7, 3))],
    "merge_without_max": [(serving_tests.test_merge_of_partials_from_uneven_chunks_and_large_scores, ())],
    "merge_not_normalised": [(serving_tests.test_split_k_equals_sdpa_in_float64, (2, 1))],
    "merge_wrong_lse": [
        (serving_tests.test_split_k_equals_sdpa_in_float64, (3, 3)),
        (serving_tests.test_split_k_with_a_mask_and_a_fully_hidden_chunk, ()),
    ],
}


def patch(monkeypatch, target, replacement):
    if target.startswith("PagedKVCache."):
        monkeypatch.setattr(paged_module.PagedKVCache, target.split(".", 1)[1], replacement)
        return
    for module in (split_k_module, paged_module, course_utils, serving_tests):
        if hasattr(module, target):
            monkeypatch.setattr(module, target, replacement)


def test_every_mutant_has_catchers_and_a_diagnosis():
    assert set(CATCHERS) == set(MUTANTS) and len(MUTANTS) >= 4
    for diagnosis, _, _ in MUTANTS.values():
        assert diagnosis and "\n" not in diagnosis


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_caught(name, monkeypatch):
    _, target, replacement = MUTANTS[name]
    patch(monkeypatch, target, replacement)
    for test, args in CATCHERS[name]:
        with pytest.raises(AssertionError):
            test(*args)


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_catchers_pass_without_the_mutant(name):
    for test, args in CATCHERS[name]:
        test(*args)
