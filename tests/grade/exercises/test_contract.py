"""Every exercise the registry finds keeps the contract of the grader's house: its texts complete in both languages
(each mistake it can name, each case title), none of its texts unused, its notebooks where the READMEs and indexes
say, its points those its notebook's check cell is worth; and graded the same four ways on its fixture (fixtures.py,
one shape): the reference passes, each alternative passes, each stub is "not implemented", each mutant is named and
its report reads cleanly. Nothing here lists the exercises: a new one is checked by being declared."""

from pathlib import Path

import pytest
import torch

from course_utils.grade import diagnose, heads, kit
from course_utils.grade.exercises import EXERCISES, get
from course_utils.grade.messages import CATALOGUE, Msg, case_title
from course_utils.grade.types import Mutant
from tests.conftest import assert_reads_cleanly
from tests.grade.exercises.fixtures import FIXTURES, Fixture

ROOT = Path(__file__).resolve().parents[3]
ON_CASES = [ex for ex in EXERCISES.values() if ex.kind != "model"]


def named_mistakes(ex) -> list:
    """Every mutant the verdict can name for ``ex`` (pairs included), or the capstone's function mutants."""
    if ex.kind == "model":
        return list(ex.model.MUTANTS)
    return ex.mutants() + diagnose.mutant_pairs(ex.mutants(), ex.correct)


def case_names(ex) -> list:
    cases = ex.make_cases(0)
    if ex.interview:
        cases += ex.make_square_cases(0)
    return [c.name for c in cases]


def bilingual(key: str) -> bool:
    en, zh = CATALOGUE[key]
    return bool(en.strip()) and bool(zh.strip()) and en != zh


@pytest.mark.parametrize("ex", EXERCISES.values(), ids=list(EXERCISES))
def test_every_mistake_is_said_in_both_languages(ex):
    for mutant in named_mistakes(ex):
        message = mutant.message
        assert isinstance(message, Msg), (ex.id, mutant.key)
        parts = [message.args["first"], message.args["second"]] if message.key == "two_mistakes" else [message]
        for part in parts:
            assert part.key.startswith("mutant.") and bilingual(part.key), (ex.id, mutant.key)
        assert message.render("zh") != str(message), (ex.id, mutant.key)


@pytest.mark.parametrize("ex", EXERCISES.values(), ids=list(EXERCISES))
def test_every_case_title_is_said_in_both_languages(ex):
    for name in case_names(ex):
        title = case_title(name)
        assert isinstance(title, Msg) and bilingual(title.key), (ex.id, name)


def test_no_text_of_an_exercise_goes_unused():
    modules = [kit, heads]
    declared = {key for m in modules for key in m.TEXTS}
    for ex in EXERCISES.values():
        module = __import__(f"course_utils.grade.exercises.{ex.id}", fromlist=["TEXTS"])
        declared |= set(module.TEXTS)
    used = set()
    for ex in EXERCISES.values():
        used |= {"case:" + name for name in case_names(ex)}
        for mutant in named_mistakes(ex):
            message = mutant.message
            used |= (
                {message.args["first"].key, message.args["second"].key}
                if message.key == "two_mistakes"
                else {message.key}
            )
    unused = {key for key in declared - used if key.startswith(("mutant.", "case:"))}
    assert not unused, sorted(unused)


def test_each_exercise_key_names_one_text_per_wording():
    # one diagnosis key may have several wordings (softmax over the heads or the batch axis), but a wording belongs
    # to one key: a text is never shared by two diagnoses
    owner = {}
    for ex in EXERCISES.values():
        for mutant in named_mistakes(ex):
            if "+" in mutant.key:
                continue
            assert owner.setdefault(mutant.message.key, mutant.key) == mutant.key, (ex.id, mutant.message.key)


@pytest.mark.parametrize(
    "readme,prefix",
    [
        ("README.md", ""),
        ("README.zh-CN.md", "zh-CN/"),
        ("notebooks/README.md", ""),
        ("notebooks/zh-CN/README.md", "zh-CN/"),
    ],
)
def test_the_readmes_list_every_exercise(readme, prefix):
    text = (ROOT / readme).read_text(encoding="utf-8")
    for ex in EXERCISES.values():
        for folder in ("exercises", "solutions"):
            assert f"{folder}/{prefix}{ex.notebook}.ipynb)" in text, (readme, ex.id, folder)
            assert (ROOT / folder / prefix / f"{ex.notebook}.ipynb").exists(), (ex.id, folder)


def test_cases_are_drawn_from_the_seed():
    # secret cases: two seeds give different inputs, one seed the same (the verdict is recomputed in the parent)
    for ex in ON_CASES:
        a, b, c = ex.make_cases(1), ex.make_cases(1), ex.make_cases(2)
        assert all(torch.equal(x.x, y.x) for x, y in zip(a, b, strict=True)), ex.id
        assert not all(torch.equal(x.x, y.x) for x, y in zip(a, c, strict=True)), ex.id


# ---------------------------------------------------------------------- graded: the same four checks for every exercise


def test_every_exercise_graded_on_cases_has_a_fixture():
    assert set(FIXTURES) == {ex.id for ex in ON_CASES}


def _gradable(exercise: str) -> Fixture:
    fixture = FIXTURES[exercise]
    why = fixture.skip()
    if why:
        pytest.skip(why)
    return fixture


@pytest.mark.parametrize("exercise", sorted(FIXTURES))
def test_the_reference_passes(exercise):
    result = _gradable(exercise).grade(FIXTURES[exercise].reference)
    assert result and result.score == 1.0, result.report()


@pytest.mark.parametrize(
    "exercise,alt", [(ex, alt) for ex in sorted(FIXTURES) for alt in sorted(FIXTURES[ex].alternatives)]
)
def test_alternative_correct_implementations_pass(exercise, alt):
    fixture = _gradable(exercise)
    assert len(fixture.alternatives) >= fixture.min_alternatives
    result = fixture.grade(fixture.alternatives[alt])
    assert result and result.score == 1.0, result.report()


@pytest.mark.parametrize("exercise,stub", [(ex, stub) for ex in sorted(FIXTURES) for stub in FIXTURES[ex].stubs])
def test_a_stub_is_not_implemented(exercise, stub):
    fixture = _gradable(exercise)
    result = fixture.grade(fixture.stubs[stub])
    assert not result and result.diagnosis == "not_implemented", result.report()
    assert "not implemented yet" in result.summary and "Traceback" not in result.report()


@pytest.mark.parametrize(
    "exercise,i",
    [(ex, i) for ex in sorted(FIXTURES) for i in range(len(FIXTURES[ex].mutants))],
    ids=[f"{ex}-{key}-{i}" for ex in sorted(FIXTURES) for i, (key, _) in enumerate(FIXTURES[ex].mutants)],
)
def test_each_mutant_gets_its_diagnosis(exercise, i):
    fixture = _gradable(exercise)
    key, src = fixture.mutants[i]
    result = fixture.grade(src)
    assert not result and result.diagnosis == key, result.report()
    ex = get(exercise)
    said = named_mistakes(ex) + [Mutant(m.key, m.message, None) for m in diagnose.VERDICT_MISTAKES]
    assert any(m.message in result.report() for m in said if m.key == key), result.report()
    assert_reads_cleanly(result)  # the whole catalogue reads cleanly, in both languages


# ---------------------------------------------------------------------- every seed: caught, named, the same score


def _as_record(expected) -> dict:
    """A mutant's expected outputs as the record of a learner who computes them (or crashes where it crashes)."""
    if isinstance(expected, Exception):
        error = {"where": getattr(expected, "where", "forward"), "step": getattr(expected, "step", 1)}
        return {"error": {**error, "type": getattr(expected, "error_type", type(expected).__name__)}, "outputs": {}}
    return {"error": None, "outputs": expected}


def _differs(case, got, want) -> bool:
    if isinstance(got, Exception) or isinstance(want, Exception):
        return not (isinstance(got, Exception) and isinstance(want, Exception))
    return diagnose.compare(got, want, tol=case.meta.get("tol", (diagnose.RTOL, diagnose.ATOL))) is not None


@pytest.mark.parametrize("ex", ON_CASES, ids=[ex.id for ex in ON_CASES])
def test_each_mistake_is_caught_and_named_on_every_seed(ex):
    """On several seeds, every mutant's reference fails the same cases (the same wrong answer gets the same score,
    whatever the secret seed), at least one, and is named: no mutant before it in the catalogue computes the same."""
    failing = {}
    for seed in range(4):
        cases = ex.make_cases(seed)
        correct = [diagnose.cached_outputs(ex.expected, c, ex.correct) for c in cases]
        for m in ex.mutants():
            got = [diagnose.cached_outputs(ex.expected, c, m.variant) for c in cases]
            failed = frozenset(
                i for i, (c, g, w) in enumerate(zip(cases, got, correct, strict=True)) if _differs(c, g, w)
            )
            assert failed, (ex.id, m.key, seed, "caught by no case")
            assert failing.setdefault(m.variant, failed) == failed, (ex.id, m.key, seed, "another score on this seed")
            records = [_as_record(g) for g in got]
            first = next(other for other in ex.mutants() if diagnose._matches(ex, cases, records, other))
            assert first.key == m.key, (ex.id, m.key, seed, f"named {first.key}")
