"""Issue 29, honest styles the grader was never told about: interview mode places parameters by role and shape and
fills constructors by what their arguments do, so multi-head attention written by someone who had not read its name
lists passes, in the notebook's kernel and in the sandbox alike; wrong answers in the same styles get their mistake
named; the report says which constructor mapping and placement were used; the search stays bounded."""

import pytest

from course_utils.grade import grade_class
from course_utils.grade.exercises import get
from course_utils.grade.kinds.module import probe
from course_utils.grade.sandbox import dialects
from tests.conftest import load
from tests.grader_cases.held_out_styles import HONEST, WRONG
from tests.grader_cases.interview_dialects import DIALECTS

NAMED = {
    "mask_transposed": "mask_transposed",
    "output_dropout_only": "dropout_on_output",
    "no_scale": "no_scale",
    "softmax_wrong_axis": "softmax_wrong_axis",
    "heads_merged_wrong": "merge_no_transpose",
    "no_mask": "no_causal_mask",
}


def test_the_held_out_set_is_large_enough():
    assert len(HONEST) >= 8 and len(WRONG) >= 3 and set(NAMED) == set(WRONG)


@pytest.mark.parametrize("name", sorted(HONEST))
def test_an_honest_style_passes_in_process(name):
    result = grade_class("mha_interview", load(*HONEST[name]))
    assert result, result.report()


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_wrong_answer_in_an_unknown_style_is_named(name):
    result = grade_class("mha_interview", load(*WRONG[name]))
    assert not result and result.diagnosis == NAMED[name], result.report()
    assert "match no known mistake" not in result.report() and "cannot" not in result.report()


def test_the_report_says_which_mapping_and_placement_were_used():
    reports = {
        name: grade_class("mha_interview", load(*HONEST[name])).report()
        for name in ("fused_3hd", "fused_h3d", "per_head_modules", "einsum_transposed")
    }
    assert "constructor: hidden=d_model, n_heads=num_heads, block_size=context_length" in reports["fused_3hd"]
    assert "parameters: to_qkv→[q;k;v], merge→o" in reports["fused_3hd"]
    assert (
        "in_proj→(heads, 3, head_dim) qkv" in reports["fused_h3d"] and "max_seq=context_length" in reports["fused_h3d"]
    )
    assert "heads.#.query→q per head" in reports["per_head_modules"]
    assert "Wq→q (x @ W)" in reports["einsum_transposed"]
    zh = grade_class("mha_interview", load(*HONEST["fused_3hd"])).report("zh")
    assert "构造参数：hidden=d_model" in zh and "参数位置：to_qkv→[q;k;v]" in zh


def test_stacked_projections_are_placed_by_the_shape_of_a_piece():
    # one raw parameter holding q, k, v (and o) along a leading axis: no name says which piece is which
    xw = grade_class("mha_interview", load(*HONEST["stacked_xw"])).report()
    assert "w_in→[q;k;v] stacked (x @ W)" in xw, xw
    qkvo = grade_class("mha_interview", load(*HONEST["stacked_qkvo"])).report()
    assert "W→[q;k;v;o] stacked" in qkvo and "(x @ W)" not in qkvo, qkvo


def test_a_dropout_after_the_output_projection_is_found_by_role_and_said():
    # found by what it is applied to (the module's result), not by its name; said in the report, never failed
    for name in ("stacked_qkvo", "to_out_dropout"):
        result = grade_class("mha_interview", load(*HONEST[name]))
        assert result and "dropout after the output projection" in result.report(), result.report()
        assert "输出投影之后的 dropout" in result.report("zh")
    plain = grade_class("mha_interview", load(*HONEST["fused_3hd"]))
    assert "output projection" not in plain.report()


def test_an_argument_no_rule_names_is_filled_by_role_and_said():
    src = DIALECTS["note_004"][0].replace("dropout: float = 0.1):", "dropout: float = 0.1, *, layer_id):")
    result = grade_class("mha_interview", load(src, "MultiHeadAttention"))
    assert result and "layer_id=" in result.report(), result.report()


def test_the_search_is_bounded():
    """A wrong answer tries every mapping and placement it may: a few dozen forward passes on the probe, never more."""
    for name in ("no_mask", "softmax_wrong_axis", "per_head_modules"):
        src, cls_name = (WRONG | HONEST)[name]
        cls = load(src, cls_name)
        calls = []
        forward = cls.forward

        def counted(self, *args, forward=forward, calls=calls, **kwargs):
            calls.append(1)
            return forward(self, *args, **kwargs)

        cls.forward = counted
        recipe = dialects.settle_placement(cls, probe(get("mha_interview")))
        assert recipe is not None and len(calls) <= dialects._SEARCH_BUDGET + 24, (name, len(calls))


@pytest.mark.requires_sandbox
def test_the_sandbox_gives_the_same_verdicts(tmp_path):
    """make grade (the batch, each file in its own sandbox): the verdicts of the notebook's check()."""
    from course_utils.grade.batch import grade_folder

    folder = tmp_path / "submissions"
    folder.mkdir()
    for name, (src, _) in (HONEST | WRONG).items():
        (folder / f"{name}.py").write_text(src)
    graded, skipped, failed = grade_folder(folder, tmp_path / "grades", workers=2, exercises=["mha_interview"])
    errors = {name: str(rep.error) for name, rep in graded if name in failed}
    assert not skipped and not failed, errors
    verdicts = {name[:-3]: [(r.passed, r.diagnosis) for r in rep.results] for name, rep in graded}
    assert verdicts == {**{n: [(True, None)] for n in HONEST}, **{n: [(False, NAMED[n])] for n in WRONG}}, verdicts


# written after reading the name lists (so not held out): a fused k/v beside its own q, and a bias of its own
FUSED_KV = (
    HONEST["to_q_k_v"][0]
    .replace("        self.toK = nn.Linear(dim, inner, bias=False)\n", "")
    .replace("self.toV = nn.Linear(dim, inner, bias=False)", "self.toKV = nn.Linear(dim, 2 * inner)")
    .replace(
        "q, k, v = (f(x).view(b, n, self.heads, -1).transpose(1, 2) for f in (self.toQ, self.toK, self.toV))",
        "k, v = self.toKV(x).chunk(2, dim=-1)\n"
        "        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2) for t in (self.toQ(x), k, v))",
    )
)


def test_a_fused_key_value_projection_is_placed():
    assert FUSED_KV.count("toKV") == 2
    result = grade_class("mha_interview", load(FUSED_KV, "Attend"))
    assert result and "toKV→[k;v]" in result.report(), result.report()
