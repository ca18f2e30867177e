"""Issue 21, honest interview code graded: the course's own source notes and the dialects candidates bring pass, in
the notebook's kernel (check) and in the sandbox (files, make grade); any nn.Module class is graded, whatever its
name; an answer without --exercise is graded in interview mode and the report says so; a class the grader cannot
call gets what it tried and a two-line adapter, never a wrong-values verdict."""

import pytest

from course_utils.grade import grade_class
from course_utils.grade.protocol import Graded, run_in_process, verdict
from course_utils.grade.runner import grade_file
from tests.grader_cases.interview_dialects import DIALECTS, HEADER, NOTE_000

# the book's signature is exercise 4's contract: without --exercise such a file is graded as exercise 4
BOOK_SIGNATURE = {"book_returns_weights", "book_parameters"}
PASSING = sorted(set(DIALECTS) - {"note_000"})  # note 000 passes where d_in == d_out only (below)
NOTE_000_FIXED = NOTE_000.replace("h = h.contiguous().view(B, S, D)", "h = h.contiguous().view(B, S, -1)")


def load(src, name):
    ns = {"__name__": "candidate"}
    exec(compile(src, "<candidate>", "exec"), ns)
    return ns[name]


def test_at_least_twelve_dialects_pass():
    assert len(PASSING) >= 12


@pytest.mark.parametrize("name", PASSING)
def test_dialect_passes_in_process(name):
    src, cls = DIALECTS[name]
    result = grade_class("mha_interview", load(src, cls))
    assert result, result.report()


def test_note_000_merges_into_the_input_width_and_is_named():
    """d_in != d_out (the book's cases, since the class names both): view(B, S, D) with the input's D fails in
    every case, and the diagnosis names that line's mistake rather than 'wrong values'."""
    result = grade_class("mha_interview", load(NOTE_000, "MHA"))
    assert not result and result.diagnosis == "merge_input_width", result.report()
    assert "view(B, S, D)" in result.report() and "match no known mistake" not in result.report()
    assert "合并多头时用了输入的宽度" in result.report("zh")


def test_note_000_passes_where_d_in_equals_d_out():
    graded = Graded("mha_interview")
    graded.cases = graded.extra["square"]  # d_in = d_out = d_model
    records = run_in_process(load(NOTE_000, "MHA"), graded)
    result = verdict("mha_interview", records, graded.cases)
    assert result, result.report()


def test_note_000_with_its_merge_fixed_passes_on_the_books_cases():
    result = grade_class("mha_interview", load(NOTE_000_FIXED, "MHA"))
    assert result, result.report()
    assert "d_in" in result.report()  # graded by name, on the book's cases (d_in != d_out)


def test_what_the_grader_assumed_is_said():
    reports = {
        name: grade_class("mha_interview", load(*DIALECTS[name])).report()
        for name in ("note_001", "note_004", "nanogpt_config", "head_dim", "seq_first_batch_first_flag")
    }
    assert "(hidden_size, num_heads) dialect; mask convention: True = keep" in reports["note_001"]
    assert "(d_model, num_heads) dialect; mask convention: True = keep" in reports["note_004"]
    assert "(config) dialect" in reports["nanogpt_config"]
    assert "(dim, head_dim) dialect" in reports["head_dim"]
    assert "mask convention: True = hidden" in reports["seq_first_batch_first_flag"]


# ---------------------------------------------------------------------------------------------- in the sandbox


def _file(tmp_path, name, src):
    path = tmp_path / f"{name}.py"
    path.write_text(src)
    return path


@pytest.mark.requires_sandbox
def test_every_dialect_passes_in_the_sandbox(tmp_path):
    failed = {}
    for name in PASSING:
        report = grade_file(_file(tmp_path, name, DIALECTS[name][0]), ["mha_interview"])
        if not report.passed:
            failed[name] = [r.report() for r in report.results] + [str(n) for n in report.notes]
    assert not failed, failed


@pytest.mark.requires_sandbox
def test_without_exercise_an_interview_answer_is_graded_in_interview_mode(tmp_path):
    """make grade and python -m course_utils.grade without --exercise: real verdicts, and the report says why
    the file was taken for interview mode."""
    for name in ("note_001", "note_004", "nanogpt_config", "causal_self_attention", "with_helpers"):
        report = grade_file(_file(tmp_path, name, DIALECTS[name][0]))
        assert [r.exercise for r in report.results] == ["mha_interview"], name
        assert report.passed, (name, [r.report() for r in report.results])
        assert any("graded as mha_interview (interview mode)" in n for n in report.notes), report.notes
        assert any("面试模式" in n.render("zh") for n in report.notes)
    report = grade_file(_file(tmp_path, "note_000", NOTE_000))
    assert [r.diagnosis for r in report.results] == ["merge_input_width"]


@pytest.mark.requires_sandbox
def test_make_grade_on_interview_files_gives_real_verdicts(tmp_path):
    """The batch (make grade) without --exercise: three correct interview answers score, none 'mha: exception'."""
    from course_utils.grade.batch import grade_folder

    folder = tmp_path / "submissions"
    folder.mkdir()
    for name in ("note_001", "note_004", "nanogpt_config"):
        (folder / f"{name}.py").write_text(DIALECTS[name][0])
    graded, skipped, failed = grade_folder(folder, tmp_path / "grades", workers=1)
    assert not skipped and not failed
    assert {name: [(r.exercise, r.passed) for r in rep.results] for name, rep in graded} == {
        f"{name}.py": [("mha_interview", True)] for name in ("note_001", "note_004", "nanogpt_config")
    }
    assert "mha_interview" in (tmp_path / "grades" / "grades.csv").read_text().splitlines()[0]


@pytest.mark.requires_sandbox
def test_the_books_signature_is_still_exercise_4(tmp_path):
    report = grade_file(_file(tmp_path, "book", DIALECTS["book_returns_weights"][0]))
    assert [r.exercise for r in report.results] == ["mha"] and not report.notes


# ---------------------------------------------------------------------------------------------- the class rule

NORM = """
class LayerNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.g = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return self.g * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-5)
"""
_, CSA = DIALECTS["causal_self_attention"]
TWO_ATTENTIONS = DIALECTS["causal_self_attention"][0] + DIALECTS["multi_headed_attention"][0].replace(HEADER, "")


@pytest.mark.requires_sandbox
def test_several_classes_the_one_that_fits_is_graded(tmp_path):
    src = DIALECTS["causal_self_attention"][0] + NORM
    report = grade_file(_file(tmp_path, "helpers", src), ["mha_interview"])
    assert report.passed, [r.report() for r in report.results]


@pytest.mark.requires_sandbox
def test_several_classes_that_fit_the_named_one_is_graded(tmp_path):
    broken = TWO_ATTENTIONS.replace("att.softmax(-1)", "att.softmax(-2)")  # CausalSelfAttention made wrong
    for how in ('check("mha_interview", MultiHeadedAttention)', 'check("mha_interview", "MultiHeadedAttention")'):
        src = broken + "\nfrom course_utils.grade import check\n" + how + "\n"
        report = grade_file(_file(tmp_path, "named", src), ["mha_interview"])
        assert report.passed, (how, [r.report() for r in report.results])
    src = broken + "\nfrom course_utils.grade import check\ncheck('mha_interview', CausalSelfAttention)\n"
    report = grade_file(_file(tmp_path, "named_wrong", src), ["mha_interview"])
    assert report.results[0].diagnosis == "softmax_wrong_axis", report.results[0].report()


@pytest.mark.requires_sandbox
def test_several_classes_that_fit_and_none_named_are_listed(tmp_path):
    src = TWO_ATTENTIONS.replace("class MultiHeadedAttention", "class Heads")  # neither named like attention...
    src = src.replace("class CausalSelfAttention", "class Block").replace("CausalSelfAttention", "Block")
    report = grade_file(_file(tmp_path, "ambiguous", src), ["mha_interview"])
    text = report.results[0].report()
    assert not report.passed and "Block, Heads" in text and 'check("mha_interview", YourClass)' in text, text
    assert "Block, Heads" in report.results[0].report("zh")


@pytest.mark.requires_sandbox
def test_no_module_at_all_says_what_interview_mode_grades(tmp_path):
    report = grade_file(_file(tmp_path, "empty", HEADER + "x = 1\n"), ["mha_interview"])
    assert "no nn.Module class found" in report.results[0].report(), report.results[0].report()


@pytest.mark.requires_sandbox
def test_a_missing_contract_class_lists_the_classes_found(tmp_path):
    src = HEADER + "class SelfAttentionV1(nn.Module):\n    pass\n"
    report = grade_file(_file(tmp_path, "v1", src), ["causal"])
    assert "the classes defined are: SelfAttentionV1" in report.results[0].report(), report.results[0].report()


# ---------------------------------------------------------------------------------------------- cannot call it


def test_unmappable_constructor_gets_what_was_tried_and_an_adapter():
    src = (
        HEADER
        + """
class Attn(nn.Module):
    def __init__(self, size, groups):
        super().__init__()
        self.size, self.groups = size, groups
"""
    )
    result = grade_class("mha_interview", load(src, "Attn"))
    text = result.report()
    assert result.diagnosis == "contract" and "differs" not in text, text
    assert "no argument's name says the model width or the number of heads, and no role the grader tried" in text
    assert (
        "class Graded(Attn):  def __init__(self, d_model, num_heads, dropout=0.0): "
        "super().__init__(size=..., groups=...)" in text
    )
    assert text.count("interview mode accepts") == 1
    assert "两行的适配器" in result.report("zh")


def test_an_argument_it_cannot_fill_gets_an_adapter():
    """An argument no role fits (an object the module calls): no mapping builds a module that runs, so the
    candidate is told what the grader tried and given the adapter. (An unknown argument a role fits is filled: see
    test_grader_held_out_styles.)"""
    src = DIALECTS["note_004"][0].replace(
        "dropout: float = 0.1):", "dropout: float = 0.1, rope_theta=None, *, rotary):\n        self_rotary = rotary"
    )
    src = src.replace(
        "self.dropout = nn.Dropout(dropout)", "self.dropout = nn.Dropout(dropout)\n        self.rotary = self_rotary"
    )
    src = src.replace("q_split = q_proj.view", "q_split = self.rotary(q_proj).view")
    result = grade_class("mha_interview", load(src, "MultiHeadAttention"))
    assert result.diagnosis == "contract" and "'rotary'" in result.report(), result.report()
    assert "class Graded(MultiHeadAttention)" in result.report()


def test_the_readmes_say_which_forms_are_accepted_and_the_class_rule():
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    for readme, rule in (
        ("README.md", "any `nn.Module` subclass the answer defines is\ngraded"),
        ("README.zh-CN.md", "答案里定义的任何 `nn.Module` 子类都会被评分"),
    ):
        text = root.joinpath(readme).read_text(encoding="utf-8")
        assert rule in text, readme
        # the principle (parameters by role and shape, not names) and the forms a candidate may recognise
        principle = (
            "placed by role and shape, whatever their names" if readme == "README.md" else "按作用和形状认，不看名字"
        )
        for form in (
            principle,
            'check("mha_interview"',
            "CausalSelfAttention(config)",
            "batch_first",
            "(d_in, d_out, ...)",
            "nn.Parameter",
            "x @ W",
            "--exercise",
        ):
            assert form in text, (readme, form)


def test_a_forward_argument_it_cannot_give_gets_an_adapter():
    src = DIALECTS["note_001"][0].replace(
        "def forward(self, hidden_states, mask=None):", "def forward(self, hidden_states, position_ids, mask=None):"
    )
    result = grade_class("mha_interview", load(src, "MHA"))
    text = result.report()
    assert result.diagnosis == "contract" and "differs" not in text, text
    assert "has nothing to give for position_ids" in text
    assert "class Graded(MHA):  def forward(self, x, mask=None): return super().forward(x, position_ids=...)" in text
    assert "无法调用 forward" in result.report("zh")


def test_a_tuple_from_exercise_4_is_reported_as_its_type_not_as_a_missing_gradient():
    """Outside interview mode the contract returns a tensor: (out, weights) is said as such, with no internal
    name of the grader's in the report."""
    result = grade_class("mha", load(DIALECTS["book_returns_weights"][0], "MultiHeadAttention"))
    assert not result and "<tuple>" in result.report(), result.report()
    assert "_NoGrad" not in result.report() and "no gradient" not in result.report()
