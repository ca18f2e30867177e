"""The grader on exercises 08-10 (rope, online_softmax, mla): the reference and alternative correct implementations
pass, stubs say "not implemented", every misconception gets its own named diagnosis, the grader's reference computes
what course_utils computes, and a submission delegating to course_utils gets no credit."""

import pytest
import torch

import course_utils as cu
from course_utils.grade import check, grade_class
from course_utils.grade.exercises import EXERCISES, get
from course_utils.grade.exercises.mla import MlaVariant
from course_utils.grade.exercises.online_softmax import OnlineVariant
from course_utils.grade.exercises.rope import RopeVariant
from course_utils.grade.protocol import Graded, run_in_process, verdict
from tests.conftest import grade, load
from tests.grader_cases.beyond import DROPOUT, MUTANTS, REFERENCE
from tests.grader_cases.implementations import mutate

BEYOND = ("rope", "online_softmax", "mla")


def test_registered():
    assert set(BEYOND) <= set(EXERCISES) and get("online_softmax").kind == "function"
    correct = {"rope": RopeVariant(), "online_softmax": OnlineVariant(), "mla": MlaVariant()}
    for ex in BEYOND:
        assert get(ex).make_cases() and get(ex).correct == correct[ex]


@pytest.mark.parametrize("exercise,key,src", DROPOUT, ids=[f"{ex}-{key or 'honest'}" for ex, key, _ in DROPOUT])
def test_dropout_is_graded_in_training_mode(exercise, key, src):
    """The shared training case (one-hot values: each weight read back from the output) runs the module in
    training mode: dropout on the weights passes however it is written, dropout anywhere else is named."""
    assert any(c.name == "training mode, dropout 0.5" and c.kind == "train" for c in get(exercise).make_cases())
    result = grade(exercise, src)
    if key is None:
        assert result, result.report()
    else:
        assert not result and result.diagnosis == key, result.report()


def test_catalogue_sizes():
    for ex in BEYOND:
        assert len({k for k, _ in MUTANTS[ex]}) >= 4, ex  # learner-style mutants, each a different mistake
        assert len({m.key for m in get(ex).mutants()}) >= 5, ex
    # the mistakes the issue asks for are all named
    keys = {ex: {m.key for m in get(ex).mutants()} for ex in BEYOND}
    assert {
        "rope_on_values",
        "rope_positions_restart",
        "rope_interleaved_pairs",
        "rope_freq_d_model",
        "rope_after_cache",
    } <= keys["rope"]
    assert {
        "max_not_updated",
        "output_not_rescaled",
        "sum_not_rescaled",
        "causal_blocks_skipped_wrongly",
        "divided_too_early",
    } <= keys["online_softmax"]
    assert {"mla_cache_up_projected", "mla_rope_on_compressed_key", "mla_absorb_wrong_transpose"} <= keys["mla"]


# ---------------------------------------------------------------- the grader's reference vs course_utils


def test_rope_reference_equals_course_utils():
    for case in get("rope").make_cases():
        c = case.ctor
        m = cu.GroupedQueryAttention(
            c["d_in"],
            c["d_out"],
            c["context_length"],
            c["dropout"],
            c["num_heads"],
            c["num_heads"],
            c["qkv_bias"],
            rope=True,
            rope_base=c["rope_base"],
        ).eval()
        m.load_state_dict(case.params, strict=False)  # parameters only; the mask buffer is the module's own
        expected = get("rope").expected(case, get("rope").correct)
        cache = m.make_cache(case.x.shape[0])
        if case.given_past is not None:  # a past the module did not produce: the reference's, on another prompt
            cache.update(*case.given_past)
        with torch.no_grad():
            for i, call in enumerate(case.calls):
                if call.train:  # no expected value: the learner's own eval-mode call is the reference
                    continue
                if not call.use_cache:
                    torch.testing.assert_close(m(call.x), expected[f"step{i + 1}.out"])
                    continue
                torch.testing.assert_close(m(call.x, cache=cache), expected[f"step{i + 1}.out"])
                torch.testing.assert_close(cache.keys, expected[f"step{i + 1}.keys"])
                torch.testing.assert_close(cache.values, expected[f"step{i + 1}.values"])


def test_online_softmax_reference_equals_course_utils():
    for case in get("online_softmax").make_cases():
        q, k, v, block_size, causal = case.calls[0].args
        # course_utils in float64 against the grader's float32, on cases from a fresh secret seed, at the tolerance
        # the grader itself grants the case (scores in the hundreds lose digits to float32's rounding of exp)
        rtol, atol = case.meta.get("tol", (1e-4, 2e-5))
        q, k, v = q.double(), k.double(), v.double()
        out, lse = cu.online_softmax_attention(q, k, v, block_size=block_size, causal=causal)
        expected = get("online_softmax").expected(case, get("online_softmax").correct)
        torch.testing.assert_close(expected["step1.out"].double(), out, rtol=rtol, atol=atol)
        torch.testing.assert_close(expected["step1.lse"].double(), lse, rtol=rtol, atol=atol)
        assert expected.get("step1.tiled", torch.tensor(1.0)) == 1.0


def test_mla_reference_equals_course_utils():
    for case in get("mla").make_cases():
        c = case.ctor
        m = cu.MultiHeadLatentAttention(
            c["d_in"], c["d_out"], c["context_length"], c["dropout"], c["num_heads"], c["kv_latent_dim"], c["rope_dim"]
        ).eval()
        m.load_state_dict(case.params, strict=False)
        expected = get("mla").expected(case, get("mla").correct)
        cache = m.make_cache(case.x.shape[0])
        if case.given_past is not None:  # a past the module did not produce: the reference's, on another prompt
            cache.update(*case.given_past)
        with torch.no_grad():
            for i, call in enumerate(case.calls):
                if call.train:
                    continue
                got = m(call.x, cache=cache if call.use_cache else None, absorb=call.kwargs["absorb"])
                torch.testing.assert_close(got, expected[f"step{i + 1}.out"])
                if call.use_cache:
                    torch.testing.assert_close(cache.c_kv, expected[f"step{i + 1}.c_kv"])
                    torch.testing.assert_close(cache.k_rope, expected[f"step{i + 1}.k_rope"])


def test_course_utils_used_as_a_submission_gets_no_credit():
    refused = grade_class("online_softmax", cu.online_softmax_attention)
    assert not refused and refused.diagnosis == "delegates", refused.report()
    refused = grade_class("mla", cu.MultiHeadLatentAttention)
    assert not refused and refused.diagnosis == "delegates"
    src = REFERENCE["rope"].replace(
        "return x * angles.cos() + turned * angles.sin()",
        "import course_utils\n        return course_utils.rope(x, positions, self.rope_base)",
    )
    refused = grade("rope", src)
    assert not refused and refused.diagnosis == "delegates" and "course_utils.rotary.rope" in refused.report()


def test_a_missing_tile_check_is_named_not_a_crash():
    """A submission that materialises the scores and is otherwise right: the scores_materialised diagnosis,
    with 'tiled' checked only on cases large enough to tell."""
    cases = get("online_softmax").make_cases()
    assert [c.meta["tile_bound"] is not None for c in cases] == [False, True, True, False, True]
    materialised = dict(MUTANTS["online_softmax"])["scores_materialised"]
    result = grade("online_softmax", mutate(REFERENCE["online_softmax"], materialised))
    assert result.diagnosis == "scores_materialised" and result.checks_passed == 3  # 2 of 4 cases + determinism


def test_check_prints_for_a_function_and_a_class(capsys):
    good = check("online_softmax", load(REFERENCE["online_softmax"], "online_softmax_attention"))
    missing = check("online_softmax", None)
    out = capsys.readouterr().out
    assert good and not missing
    assert "✅ online_softmax: all 6 checks passed" in out
    assert "not implemented yet: define function online_softmax_attention" in out
    assert not check("mla", None, quiet=True)


def test_records_carry_the_exercise_outputs():
    graded = Graded("mla")
    records = run_in_process(load(REFERENCE["mla"], "MultiHeadLatentAttention"), graded)
    first = records[0]["outputs"]
    assert set(first) == {f"step{i}.{part}" for i in range(1, 5) for part in ("out", "c_kv", "k_rope")} | {"repeat.out"}
    assert first["step3.c_kv"].shape == (2, 6, 6) and first["step4.c_kv"] is None
    assert verdict("mla", records, graded.cases)


@pytest.mark.requires_sandbox
def test_dropout_verdicts_are_the_same_in_the_sandbox(tmp_path):
    """The training case through the sandboxed runner: the same verdict as in the notebook's kernel."""
    from course_utils.grade import runner

    contracts = {"rope": "RoPEAttention", "mla": "MultiHeadLatentAttention"}
    chosen = [
        (ex, key, src)
        for ex, key, src in DROPOUT
        if (ex, key) in {("rope", "dropout_on_output"), ("mla", None), ("mla", "dropout_on_values")}
    ]
    for i, (exercise, key, src) in enumerate(chosen):
        path = tmp_path / f"sub{i}.py"
        path.write_text(src + f'\nfrom course_utils.grade import check\ncheck("{exercise}", {contracts[exercise]})\n')
        (sandboxed,) = runner.grade_file(path, sandboxed=True).results
        in_process = grade(exercise, src)
        assert (sandboxed.diagnosis, sandboxed.summary) == (in_process.diagnosis, in_process.summary)
        assert sandboxed.diagnosis == key, sandboxed.report()
