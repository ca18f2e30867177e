"""Every exercise the registry finds keeps the contract of the grader's house: its texts complete in both languages
(each mistake it can name, each case title), none of its texts unused, and graded the same four ways on its fixture
(fixtures.py, one shape): the reference passes, each alternative passes, each stub is "not implemented", each mutant
is named and its report reads cleanly. Nothing here lists the exercises: a new one is checked by being declared (and
its fixture, tests/grader_cases/<id>.py, found the same way: fixtures.py). Its rows in the READMEs and indexes:
tests/course/test_tables.py; its points: tests/grade/test_registry.py."""

import pytest
import torch

from course_utils.grade import diagnose, heads, kit, messages
from course_utils.grade.exercises import EXERCISES, get
from course_utils.grade.messages import Msg
from course_utils.grade.types import Mutant
from tests.conftest import assert_reads_cleanly
from tests.grade.exercises.fixtures import FIXTURES, Fixture

ON_CASES = [ex for ex in EXERCISES.values() if ex.kind != "model"]


def named_mistakes(ex) -> list:
    """Every mutant the verdict can name for ``ex`` (pairs of mistakes of a reference computation's flags included)."""
    pairs = diagnose.mutant_pairs(ex.mutants(), ex.correct) if hasattr(ex.correct, "__dataclass_fields__") else []
    return ex.mutants() + pairs


def case_names(ex) -> list:
    cases = ex.make_cases(0)
    if ex.interview:
        cases += ex.make_square_cases(0)
    return [c.name for c in cases]


def bilingual(text: Msg) -> bool:
    en, zh = text.texts
    return bool(en.strip()) and bool(zh.strip()) and en != zh


@pytest.mark.parametrize("ex", EXERCISES.values(), ids=list(EXERCISES))
def test_every_mistake_is_said_in_both_languages(ex):
    for mutant in named_mistakes(ex):
        message = mutant.message
        assert isinstance(message, Msg), (ex.id, mutant.key)
        parts = [message.args["first"], message.args["second"]] if message.key == "two_mistakes" else [message]
        for part in parts:
            assert part.key.startswith("mutant.") and bilingual(part), (ex.id, mutant.key)
        assert message.render("zh") != str(message), (ex.id, mutant.key)


@pytest.mark.parametrize("ex", EXERCISES.values(), ids=list(EXERCISES))
def test_every_case_title_is_said_in_both_languages(ex):
    for name in case_names(ex):
        title = ex.title(name)
        assert isinstance(title, Msg) and bilingual(title), (ex.id, name)


def test_no_text_of_an_exercise_goes_unused():
    modules = [kit, heads]
    declared = {key for m in modules for key in m.TEXTS}
    for ex in EXERCISES.values():
        declared |= set(messages.table(ex.home))
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


def _tensors(value) -> list:
    """Every tensor of a case as its kind plans it for the child (inputs, parameters, a given cache...)."""
    if isinstance(value, torch.Tensor):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else []
    return [t for item in items for t in _tensors(item)]


def test_cases_are_drawn_from_the_seed():
    # secret cases: two seeds give different inputs, one seed the same (the verdict is recomputed in the parent)
    for ex in ON_CASES:
        a, b, c = ([_tensors(ex.how.plan_case(case)) for case in ex.make_cases(seed)] for seed in (1, 1, 2))
        assert all(torch.equal(x, y) for p, q in zip(a, b, strict=True) for x, y in zip(p, q, strict=True)), ex.id
        assert not all(
            len(p) == len(q) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(p, q, strict=True))
            for p, q in zip(a, c, strict=True)
        ), ex.id


# ---------------------------------------------------------------------- graded: the same four checks for every exercise


def test_every_exercise_has_a_fixture():
    assert set(FIXTURES) == set(EXERCISES)


class Graded:
    """The four checks of one exercise's fixture: the reference passes, each alternative passes, each stub is "not
    implemented", each mutant is named and its report reads cleanly. One class per exercise (below), so that the
    exercises spread over the test workers (pytest-xdist's --dist loadscope gives each class to one worker)."""

    exercise = ""

    @property
    def fixture(self) -> Fixture:
        fixture = FIXTURES[self.exercise]
        why = fixture.skip()
        if why:
            pytest.skip(why)
        return fixture

    def test_the_reference_passes(self):
        result = self.fixture.grade(self.fixture.reference)
        assert result and result.score == 1.0, result.report()

    def test_alternative_correct_implementations_pass(self, alt):
        fixture = self.fixture
        assert len(fixture.alternatives) >= fixture.min_alternatives
        result = fixture.grade(fixture.alternatives[alt])
        assert result and result.score == 1.0, result.report()

    def test_a_stub_is_not_implemented(self, stub):
        result = self.fixture.grade(self.fixture.stubs[stub])
        assert not result and result.diagnosis == "not_implemented", result.report()
        assert "not implemented yet" in result.summary and "Traceback" not in result.report()

    def test_each_mutant_gets_its_diagnosis(self, mutant):
        key, src = self.fixture.mutants[mutant]
        result = self.fixture.grade(src)
        assert not result and result.diagnosis == key, result.report()
        ex = get(self.exercise)
        own = ex.how.mistakes + diagnose.VERDICT_MISTAKES
        said = [m.message for m in named_mistakes(ex) + [Mutant(m.key, m.message, None) for m in own] if m.key == key]
        assert not said or any(message in result.report() for message in said), result.report()  # a mistake is said
        # in its words (a verdict of the grader's own, an exception, a broken contract, says what happened)
        assert_reads_cleanly(result)  # the whole catalogue reads cleanly, in both languages

    def test_each_mistake_is_caught_and_named_on_every_seed(self):
        """On several seeds, every mutant's reference fails the same cases (the same wrong answer gets the same score,
        whatever the secret seed), at least one, and is named: no mutant before it in the catalogue computes the
        same."""
        ex = get(self.exercise)
        if not hasattr(ex.correct, "__dataclass_fields__"):
            pytest.skip("its mistakes are answers, not a reference's flags (the model kind)")
        failing: dict = {}
        for seed in range(4):
            cases = ex.make_cases(seed)
            correct = [diagnose.cached_outputs(ex.expected, c, ex.correct) for c in cases]
            for m in ex.mutants():
                got = [diagnose.cached_outputs(ex.expected, c, m.variant) for c in cases]
                failed = frozenset(
                    i for i, (c, g, w) in enumerate(zip(cases, got, correct, strict=True)) if _differs(ex, c, g, w)
                )
                assert failed, (ex.id, m.key, seed, "caught by no case")
                assert failing.setdefault(m.variant, failed) == failed, (
                    ex.id,
                    m.key,
                    seed,
                    "another score on this seed",
                )
                records = [_as_record(g) for g in got]
                first = next(other for other in ex.mutants() if diagnose.matches(ex, ex.how, cases, records, other))
                assert first.key == m.key, (ex.id, m.key, seed, f"named {first.key}")


def pytest_generate_tests(metafunc):
    """Each exercise's class parametrized by its own fixture."""
    if metafunc.cls is None or not issubclass(metafunc.cls, Graded):
        return
    fixture = FIXTURES[metafunc.cls.exercise]
    if "alt" in metafunc.fixturenames:
        metafunc.parametrize("alt", sorted(fixture.alternatives))
    if "stub" in metafunc.fixturenames:
        metafunc.parametrize("stub", list(fixture.stubs))
    if "mutant" in metafunc.fixturenames:
        ids = [f"{key}-{i}" for i, (key, _) in enumerate(fixture.mutants)]
        metafunc.parametrize("mutant", range(len(fixture.mutants)), ids=ids)


for _exercise in FIXTURES:
    globals()[f"TestGraded_{_exercise}"] = type(f"TestGraded_{_exercise}", (Graded,), {"exercise": _exercise})


# ---------------------------------------------------------------------- every seed: caught, named, the same score


def _as_record(expected) -> dict:
    """A mutant's expected outputs as the record of a learner who computes them (or crashes where it crashes)."""
    if isinstance(expected, Exception):
        error = {"where": getattr(expected, "where", "forward"), "step": getattr(expected, "step", 1)}
        return {"error": {**error, "type": getattr(expected, "error_type", type(expected).__name__)}, "outputs": {}}
    return {"error": None, "outputs": expected}


def _differs(ex, case, got, want) -> bool:
    if isinstance(got, Exception) or isinstance(want, Exception):
        return not (isinstance(got, Exception) and isinstance(want, Exception))
    tol = case.meta.get("tol", (diagnose.RTOL, diagnose.ATOL))
    return diagnose.compare(got, want, tol=tol, words=ex.how.words(ex, case)) is not None
