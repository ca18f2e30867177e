"""Issue 21, wrong code given credit (exercises 08-11): each family of dodges is closed by a check that proves the
behaviour, names the mistake, and still passes honest alternatives.

- RoPE and MLA get a past_key_value they did not produce (the grader's reference on another prompt): a module
  keeping its own cache is cache_ignores_past.
- MLA's absorbed calls after a long past report whether per-head keys/values were built: absorb ignored is
  mla_absorb_ignored.
- The online softmax's large case is measured by the process's peak memory (the kernel's VmHWM, every thread,
  any library): query strips with a plain softmax, NumPy and another thread are scores_materialised.
- The capstone's graded models carry decoys: the largest weights belong to a silent head, the heads are
  disguised and never where the checkpoint recorded them: largest_weight_norm, checkpoint_metadata.
"""

import numpy as np
import pytest
import torch

from course_utils.grade import grade_class
from course_utils.grade.exercises import get
from course_utils.grade.exercises import induction_head as capstone
from course_utils.grade.exercises.mla import mla_forward
from course_utils.grade.exercises.rope import rope_forward
from course_utils.grade.runner import grade_file
from course_utils.grade.sandbox.kinds.function import run_case as run_function_case
from course_utils.grade.sandbox.measuring import PeakMemory
from tests.conftest import grade, load, said
from tests.grader_cases import false_credit as fc
from tests.grader_cases.induction_head import ALTERNATIVES as CAPSTONE_ALTERNATIVES
from tests.grader_cases.induction_head import REFERENCE as CAPSTONE_REFERENCE

CAPSTONE = "induction_head"


def _named(result, key, exercise):
    """The diagnosis is ``key``, its text leads the report in both languages, and no line is repeated."""
    assert not result and result.diagnosis == key, result.report()
    message = said("mutant." + key)
    for lang in ("en", "zh"):
        report = result.report(lang)
        assert message.render(lang) in report.splitlines()[0]
        lines = report.splitlines()
        assert len(lines) == len(set(lines)), report
        assert "max abs difference 1)" not in report and "e+308" not in report, report  # flags read as sentences


# --------------------------------------------------------------------------------------- every dodge is named


@pytest.mark.parametrize("name", list(fc.DODGES))
def test_dodge_gets_its_diagnosis(name):
    exercise, src, key = fc.DODGES[name]
    result = grade(exercise, src)
    _named(result, key, exercise)
    assert result.score < 1.0


@pytest.mark.parametrize("name", list(fc.HONEST))
def test_honest_implementation_passes(name):
    exercise, src = fc.HONEST[name]
    result = grade(exercise, src)
    assert result and result.score == 1.0, result.report()


# --------------------------------------------------------------------------------------- a past not its own


@pytest.mark.parametrize("exercise,forward", [("rope", rope_forward), ("mla", mla_forward)])
def test_a_case_hands_in_a_past_the_module_did_not_produce(exercise, forward):
    """The given past is what the reference caches for another prompt on the case's parameters: its first part
    is the rotated keys (RoPE) or the latents (MLA), as long as the case says, and never the module's own."""
    ex = get(exercise)
    given = [c for c in ex.make_cases(seed=5) if c.given_past is not None]
    assert given and all(c.calls[0].past == "given" for c in given)
    for case in given:
        first, second = case.given_past
        assert first.shape[0] == case.x.shape[0] and first.shape[-2 if exercise == "rope" else 1] >= 4
        # a module that keeps its own cache sees no past at all here: its output differs from the reference's
        own = forward(case.params, case.calls[0].x, case.ctor, ex.correct, None, True)[0]
        expected = ex.expected(case, ex.correct)["step1.out"]
        assert (own - expected).abs().max() > 1e-2
    assert {m.key for m in ex.mutants() if m.outputs_only} == {"cache_ignores_past"}


# --------------------------------------------------------------------------------------- MLA's absorbed path


def test_the_absorbed_bound_sits_between_the_latents_and_per_head_keys():
    """The bound is below the per-head keys of every token seen and above every parameter and latent tensor."""
    case = next(c for c in get("mla").make_cases(seed=3) if any(call.tile_bound for call in c.calls))
    c = case.ctor
    largest_param = max(p.numel() for p in case.params.values())
    seen = case.given_past[0].shape[1]
    for call in case.calls:
        seen += call.x.shape[1]
        batch = call.x.shape[0]
        per_head_keys = batch * c["num_heads"] * seen * (c["d_out"] // c["num_heads"])
        latents = batch * seen * (c["kv_latent_dim"] + c["rope_dim"])
        scores = batch * c["num_heads"] * call.x.shape[1] * seen
        assert max(largest_param, latents, scores) <= call.tile_bound < per_head_keys
        assert call.kwargs == {"absorb": True} and call.bound_label == "absorbed"


# --------------------------------------------------------------------------------------- the online softmax


def test_peak_memory_sees_numpy_and_other_threads():
    """The measure is the kernel's: 32 MiB written by NumPy in another thread count, a few small tensors do not."""
    import threading

    with PeakMemory() as idle:
        torch.ones(1000).sum()
    with PeakMemory() as busy:
        t = threading.Thread(target=lambda: np.ones((4096, 1024), dtype=np.float64).sum())
        t.start()
        t.join()
    if idle.rise is None:
        pytest.skip("no /proc/self/clear_refs here: the peak cannot be reset")
    assert idle.rise < 2**20 and busy.rise >= 30 * 2**20


@pytest.mark.parametrize("name", ["online_numpy_full", "online_thread_full"])
def test_only_the_peak_sees_numpy_and_threads(name):
    """Without the peak measure the traced tensor sizes alone pass these dodges: the measure is what closes them."""
    fn = load(fc.DODGES[name][1], "online_softmax_attention")
    plan = get("online_softmax").how.plan_case(get("online_softmax").make_cases(seed=1)[-1])
    assert run_function_case(fn, plan)["outputs"]["step1.tiled"] == 0.0
    plan["calls"][0]["peak_bound"] = None
    assert run_function_case(fn, plan)["outputs"]["step1.tiled"] == 1.0


def test_the_peak_case_separates_tiles_from_strips():
    case = get("online_softmax").make_cases(seed=2)[-1]
    call = case.calls[0]
    q, k, _, block, _ = call.args
    strip_bytes = q.shape[0] * q.shape[1] * block * k.shape[-2] * 4
    inputs_f64 = sum(t.numel() for t in call.args[:3]) * 8
    assert inputs_f64 < call.peak_bound <= strip_bytes // 2  # copies of the inputs pass, a strip does not
    assert block > q.shape[-1]  # a strip is larger than every tile and every input-sized tensor


# --------------------------------------------------------------------------------------- the capstone


def load_fn(src):
    return load(src, "find_induction_head")


@pytest.mark.parametrize("seed", [0, 7])
def test_the_proxies_point_to_the_wrong_head(seed):
    """After the first case, no weight norm and not the checkpoint's record points to the induction head, while
    the model computes what it did (test_grader_capstone checks the function and the course's scores)."""
    cases = capstone.make_cases(seed)
    assert cases[0].induction in cases[0].meta["norm_heads"]  # the trained checkpoint, untouched
    for case in cases[1:]:
        assert case.induction not in case.meta["norm_heads"], case.name
        assert case.meta["recorded"] != case.induction, case.name


@pytest.mark.parametrize("name", list(fc.INDUCTION_DODGES))
def test_a_proxy_for_the_induction_head_gets_no_credit(name):
    src, key = fc.INDUCTION_DODGES[name]
    for seed in (0, 3):
        result = grade_class(CAPSTONE, load_fn(src), learner_files={"<learner>"}, seed=seed)
        assert not result and result.checks_passed <= 1, result.report()  # at most the untouched checkpoint
        if key is not None:
            _named(result, key, CAPSTONE)


@pytest.mark.parametrize("name", ["reference"] + list(CAPSTONE_ALTERNATIVES))
def test_scoring_what_the_heads_do_still_passes(name):
    src = CAPSTONE_REFERENCE if name == "reference" else CAPSTONE_ALTERNATIVES[name]
    for seed in (0, 3):
        result = grade_class(CAPSTONE, load_fn(src), learner_files={"<learner>"}, seed=seed)
        assert result, result.report()


# --------------------------------------------------------------------------------------- through the sandbox

SANDBOXED = ["online_numpy_full", "online_thread_full", "online_numpy_tiles", "mla_absorb_ignored", "rope_own_cache"]


@pytest.mark.requires_sandbox
@pytest.mark.parametrize("name", SANDBOXED)
def test_sandboxed_grading_measures_the_same(name, tmp_path):
    """In bubblewrap too: the peak memory is read from the child's /proc, the shapes traced there."""
    if name in fc.DODGES:
        exercise, src, key = fc.DODGES[name]
    else:
        (exercise, src), key = fc.HONEST[name], None
    path = tmp_path / "submission.py"
    path.write_text(src)
    result = grade_file(path, [exercise]).results[-1]
    if key is None:
        assert result and result.score == 1.0, result.report()
    else:
        assert not result and result.diagnosis == key, result.report()


@pytest.mark.requires_sandbox
@pytest.mark.parametrize("name", ["metadata", "largest_norm"])
def test_sandboxed_capstone_names_the_proxy(name, tmp_path):
    src, key = fc.INDUCTION_DODGES[name]
    path = tmp_path / "submission.py"
    path.write_text(src)
    result = grade_file(path, [CAPSTONE]).results[-1]
    assert not result and result.diagnosis == key and result.checks_passed <= 1, result.report()
