"""The grader of the capstone's function exercise (find the induction head), beyond the contract every exercise keeps
(test_contract.py: the reference and alternatives pass, the stub is "not implemented yet", each known mistake gets its
own diagnosis): the cases are built right, a missing or uncallable function is said so, an exception names the
learner's line, delegation gets no credit, and the sandboxed CLI path grades a .py submission."""

import linecache
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from course_utils.capstone import induction as ind
from course_utils.grade import check, grade_class, source
from course_utils.grade.exercises import induction_head as capstone
from tests.grader_cases.implementations import mutate
from tests.grader_cases.induction_head import DELEGATES, MUTANTS, REFERENCE, STUB

ROOT = Path(__file__).resolve().parents[3]
EX = "induction_head"


def load(src):
    ns = {"__name__": "learner"}
    linecache.cache["<learner>"] = (len(src), None, src.splitlines(True), "<learner>")
    exec(compile(src, "<learner>", "exec"), ns)
    return ns["find_induction_head"]


def grade(src, **kw):
    return grade_class(EX, load(src), learner_files={"<learner>"}, seed=kw.get("seed", capstone.DEFAULT_SEED))


@pytest.mark.parametrize("seed", [capstone.DEFAULT_SEED, 12345])
def test_cases_move_the_heads_and_keep_the_model(seed):
    cases = capstone.make_cases(seed)
    batch = ind.make_batch(256, generator=torch.Generator().manual_seed(8))
    reference = ind.load_model("mha")
    logits = reference(batch.tokens)
    for case in cases:
        model = case.build()
        assert not hasattr(model, "checkpoint_meta")  # no training metadata (it names the heads)
        # the same function, up to float32 rounding of the heads' rotated weights (a changed head moves logits by ~1)
        torch.testing.assert_close(model(batch.tokens), logits, atol=1e-3, rtol=1e-5)
        scores = ind.head_scores(model, batch)
        n_heads = model.config.n_heads
        assert divmod(int(scores["induction"].argmax()), n_heads) == case.induction, case.name
        assert divmod(int(scores["previous_token"].argmax()), n_heads) == case.previous_token, case.name
    assert len({c.induction for c in cases}) >= 3 and len({c.induction[0] for c in cases}) == 2


def test_other_seeds_give_other_cases():
    answers = [[c.induction for c in capstone.make_cases(seed)] for seed in (0, 1, 2)]
    assert len({tuple(a) for a in answers}) == 3


def test_check_prints_the_pass_line(capsys):
    result = check(EX, load(REFERENCE))  # the reference, the alternatives, the stub, the mutants: test_contract.py
    assert result and result.score == 1.0 and result.checks_total == len(capstone.make_cases())
    assert f"✅ {EX}: all {result.checks_total} checks passed" in capsys.readouterr().out


def test_stub_and_missing_function_are_not_implemented():
    result = grade(STUB)
    assert not result and result.diagnosis == "not_implemented"
    assert "not implemented yet: write find_induction_head" in result.summary and "Traceback" not in result.report()
    missing = check(EX, None, quiet=True)
    assert missing.diagnosis == "not_implemented" and "define function find_induction_head" in missing.summary
    assert missing.checks_total == result.checks_total


def test_an_exception_is_said_with_the_learners_line():
    result = grade(mutate(REFERENCE, dict(MUTANTS)["exception"]))
    assert not result and result.diagnosis == "exception", result.report()
    assert "ValueError: too many values to unpack" in result.report() and "your line" in result.report()


def test_every_mutant_differs_from_the_answer_somewhere():
    cases = capstone.make_cases()
    for mutant in capstone.mutants():
        assert not all(mutant.variant(c, c.induction) for c in cases), mutant.key
    assert len(capstone.mutants()) >= 2


def test_delegating_to_the_course_scores_gets_no_credit():
    result = grade(DELEGATES)
    assert not result and result.diagnosis == "delegates"
    assert "course_utils.induction.head_scores" in result.report()


def test_not_a_function():
    result = check(EX, 42, quiet=True)
    assert not result and result.diagnosis == "contract" and "must be a function" in result.summary


def test_the_exercise_is_found_by_check_call_and_by_function_name():
    assert source.find_exercises(
        [{"index": 0, "grade_id": None, "source": 'check("induction_head", find_induction_head)'}]
    ) == [EX]
    assert source.find_exercises([{"index": 0, "grade_id": None, "source": STUB}]) == [EX]


@pytest.mark.requires_sandbox
def test_sandboxed_cli_names_the_mistake(tmp_path):
    wrong = tmp_path / "wrong.py"
    wrong.write_text(mutate(REFERENCE, MUTANTS[0][1]))
    proc = subprocess.run(
        [sys.executable, "-m", "course_utils.grade", "--json", str(wrong)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    assert '"diagnosis": "previous_token_head"' in proc.stdout, proc.stdout
