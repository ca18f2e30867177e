"""Interview mode in the candidate's own dialect: seven styles written as candidates write them pass, and each
fails with the right name for two mistakes; the feedback says which dialect and mask convention it assumed."""

import pytest

from course_utils.grade import grade_class
from tests.grader_cases.dialects import DIALECTS, MISTAKES
from tests.grader_cases.implementations import mutate


def load(src):
    ns = {"__name__": "candidate"}
    exec(compile(src, "<candidate>", "exec"), ns)
    return ns["MultiHeadAttention"]


@pytest.mark.parametrize("name", sorted(DIALECTS))
def test_dialect_passes(name):
    result = grade_class("mha_interview", load(DIALECTS[name]))
    assert result, result.report()
    assert "graded as the" in result.report() and "mask convention" in result.report()


@pytest.mark.parametrize("name,key,edits", MISTAKES, ids=[f"{n}-{k}" for n, k, _ in MISTAKES])
def test_dialect_mistake_is_named(name, key, edits):
    result = grade_class("mha_interview", load(mutate(DIALECTS[name], edits)))
    assert not result and result.diagnosis == key, result.report()


def test_every_dialect_has_two_named_mistakes():
    assert len(DIALECTS) >= 6
    for name in DIALECTS:
        assert len({k for n, k, _ in MISTAKES if n == name}) >= 2, name


def test_assumed_mask_conventions():
    conventions = {name: grade_class("mha_interview", load(src)).assumed for name, src in DIALECTS.items()}
    assert "True = keep" in conventions["hugging_face"] and "True = keep" in conventions["annotated_transformer"]
    assert "True = hidden" in conventions["w_qkvo_true_hidden"]
    assert "additive" in conventions["fused_additive_mask"]
    assert "built in" in conventions["nanogpt_fused"] and "no bias on k, o, q, v" in conventions["llama_no_bias"]


def test_unmappable_class_lists_what_is_accepted():
    src = (
        "import torch\nclass MultiHeadAttention(torch.nn.Module):\n    def __init__(self, size, foo):\n"
        "        super().__init__()\n"
    )
    result = grade_class("mha_interview", load(src))
    assert result.diagnosis == "contract" and "interview mode accepts" in result.report()
    report = result.report()
    assert report.count("interview mode accepts") == 1 and "forward(query, key, value[, mask])" in report
