"""The grader on exercise 12 (sliding_window): the solution and alternative correct implementations pass, stubs say
"not implemented", every misconception gets its own named diagnosis (in-process and in the sandbox), a module handed a
ring the grader made (in the contract's layout, at a start_pos it never saw) reads it, a ring kept in another layout
or positions counted by the module are named, and the grader's reference computes what course_utils' RingKVCache and
sliding_window_mask_at compute."""

import linecache
import math
from functools import lru_cache
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import course_utils as cu
from course_utils.grade import grade_class, jail, runner
from course_utils.grade.exercises import get
from course_utils.grade.exercises.sliding_window import WindowVariant, slot_positions
from tests.grader_cases import long_context
from tests.grader_cases.sliding_window import ALTERNATIVES, LONG_CONTEXT_KEYS, MUTANTS, REFERENCE, mutant_source

EXERCISE = "sliding_window"
# graded in the sandbox too: the mistakes of the phases the cases used to miss, the ring no layout reads, the ring
# handed back rescaled (the harness scales it), and last a ring of the wrong shape
SANDBOXED_TOO = (
    "sinks_written_on_first_call_only",
    "window_off_by_one_decoding",
    "ring_layout_unreadable",
    "cache_ignores_past",
    "ring_cache_grows",
)
RING_SHAPE = "(the ring: b, num_heads, num_sinks + window, head_dim)"
ROOT = Path(__file__).resolve().parents[3]


def load(src, name="SlidingWindowAttention"):
    ns = {"__name__": "learner"}
    linecache.cache["<learner>"] = (len(src), None, src.splitlines(True), "<learner>")  # as IPython does
    exec(compile(src, "<learner>", "exec"), ns)
    return ns[name]


@lru_cache(maxsize=None)
def grade(src):  # each source graded once per run (the tests below read one result several ways)
    return grade_class(EXERCISE, load(src))


def test_registered():
    ex = get(EXERCISE)
    assert ex.kind == "module" and ex.points == 3 and ex.notebook == "12_sliding_window"
    assert ex.correct == WindowVariant() and ex.make_cases()


def test_catalogue_names_the_issues_mistakes():
    keys = {m.key for m in get(EXERCISE).mutants()}
    assert len({k for k, _ in MUTANTS}) >= 4 and len(keys) >= 5
    # the reference's mistakes (tests/grader_cases/long_context.py) all have a diagnosis, and a learner-style mutant
    assert set(LONG_CONTEXT_KEYS) == set(long_context.MUTANTS)
    assert set(LONG_CONTEXT_KEYS.values()) <= keys & {k for k, _ in MUTANTS}


def test_cases_fill_the_sinks_over_later_calls_and_send_a_later_chunk_longer_than_the_window():
    # every draw: a first call shorter than the sinks, a sink written by a later call, a later chunk over the window
    for seed in range(8):
        for case in get(EXERCISE).make_cases(seed):
            sizes = [c.x.shape[1] for c in case.calls if c.use_cache]
            sinks, window = case.ctor["num_sinks"], case.ctor["window"]
            if sizes[0] < sinks:
                assert sizes[0] + sizes[1] <= sinks and max(sizes[1:]) > window, (seed, sizes)
                break
        else:
            raise AssertionError(f"seed {seed}: no case whose first call is shorter than the sinks")


def test_unreadable_ring_is_said_in_a_sentence():
    result = grade(mutant_source(dict(MUTANTS)["ring_layout_unreadable"]))
    assert not result and result.diagnosis == "ring_layout_unreadable", result.report()
    for lang in ("en", "zh"):
        report = result.report(lang)
        assert "num_sinks + window" in report and "Error" not in report, report


def test_shape_lines_quote_the_ring():
    result = grade(mutant_source(dict(MUTANTS)["ring_cache_grows"]))
    assert not result and result.diagnosis == "ring_cache_grows", result.report()
    for lang, ring in (("en", RING_SHAPE), ("zh", "环形缓冲区：")):
        report = result.report(lang)
        assert ring in report and "n_past + n_new" not in report, report


def test_a_ring_the_grader_made_is_handed_to_a_fresh_module():
    # a ring another party filled, in the contract's layout: the honest modules read it, a module that counts its
    # own positions or reads only its own layout is named
    case = next(c for c in get(EXERCISE).make_cases(3) if c.given_past is not None)
    assert case.calls[0].past == "given" and case.calls[0].kwargs["start_pos"] == case.meta["given_x"].shape[1]
    for src in [REFERENCE, *ALTERNATIVES.values()]:
        assert grade(src), grade(src).report()
    counted = grade(mutant_source(dict(MUTANTS)["positions_counted_by_module"]))
    assert counted.diagnosis == "positions_counted_by_module" and "start_pos" in counted.report(), counted.report()
    for key, src in MUTANTS:
        if key == "ring_read_only_its_own":  # Mistral's slots and tokens before heads; the ring kept oldest first
            result = grade(mutant_source(src))
            assert result.diagnosis == key and "contract's layout" in result.report(), result.report()
            assert "present is not in the contract's layout" in result.report(), result.report()


def test_slot_positions():
    # window 3, 2 sinks: after 9 tokens the sinks hold 0, 1 and the ring slots 0, 1, 2 hold 8, 6, 7
    assert slot_positions(9, 3, 2).tolist() == [0, 1, 8, 6, 7]
    assert slot_positions(3, 3, 2).tolist() == [0, 1, 2, -1, -1]
    assert slot_positions(1, 3, 2).tolist() == [0, -1, -1, -1, -1]
    assert slot_positions(0, 4, 0).tolist() == [-1, -1, -1, -1]


# ---------------------------------------------------------------- the grader's reference vs course_utils


def _course_utils_outputs(case):
    """The case run through cu.RingKVCache, cu.rope and cu.sliding_window_mask_at (an independent formulation)."""
    c, p = case.ctor, case.params
    nh, hd, window, sinks = c["num_heads"], c["d_out"] // c["num_heads"], c["window"], c["num_sinks"]
    outs, cache = {}, None

    def projected(x):
        b, n, _ = x.shape
        return (
            F.linear(x, p[f"W_{role}.weight"]).view(b, n, nh, hd).transpose(1, 2) for role in ("query", "key", "value")
        )

    for i, call in enumerate(case.calls):
        b, n, _ = call.x.shape
        q, k, v = projected(call.x)
        if not isinstance(call.past, int):  # a new cache
            cache = cu.RingKVCache(b, nh, window, hd, num_sinks=sinks)
        if call.past == "given":  # the ring of another prompt, made here by course_utils' cache
            _, k0, v0 = projected(case.meta["given_x"])
            cache.update(cu.rope(k0, cache.next_positions(k0.shape[2]), c["rope_base"]), v0)
        elif call.past_scale is not None:  # the ring handed back rescaled: a past the module did not produce
            cache.keys.mul_(call.past_scale[0]), cache.values.mul_(call.past_scale[1])
        positions = cache.next_positions(n)
        assert positions[0] == call.kwargs["start_pos"]
        q, k = cu.rope(q, positions, c["rope_base"]), cu.rope(k, positions, c["rope_base"])
        keys, values = cache.update(k, v)
        hide = cu.sliding_window_mask_at(positions, cache.key_positions, window=window, num_sinks=sinks)
        weights = torch.softmax((q @ keys.transpose(-2, -1) / math.sqrt(hd)).masked_fill(hide, -torch.inf), -1)
        context = (weights @ values).transpose(1, 2).reshape(b, n, -1)
        outs[f"step{i + 1}.out"] = F.linear(context, p["out_proj.weight"], p["out_proj.bias"])
        if call.use_cache:
            outs[f"step{i + 1}.keys"] = torch.cat([cache.sink_keys, cache.ring_keys], dim=2)
            outs[f"step{i + 1}.values"] = torch.cat([cache.sink_values, cache.ring_values], dim=2)
    return outs


def test_reference_equals_course_utils():
    ex = get(EXERCISE)
    for case in ex.make_cases():
        expected = {k: t for k, t in ex.expected(case, ex.correct).items() if not k.endswith(".layout")}
        got = _course_utils_outputs(case)
        assert {k for k, t in expected.items() if t is not None} == set(got), case.name
        for name, tensor in got.items():
            torch.testing.assert_close(tensor, expected[name], rtol=1e-4, atol=1e-5, msg=f"{case.name}: {name}")


def test_course_utils_used_as_a_submission_gets_no_credit():
    src = REFERENCE.replace(
        "    x1, x2 = x.chunk(2, dim=-1)\n",
        "    import course_utils\n    course_utils.sliding_window_mask(2, window=1)\n    x1, x2 = x.chunk(2, dim=-1)\n",
    )
    refused = grade(src)
    assert not refused and refused.diagnosis == "delegates", refused.report()


# ---------------------------------------------------------------- in the sandbox


@pytest.mark.requires_sandbox
def test_sandbox_grades_the_solution_the_alternatives_and_the_named_mistakes(tmp_path):
    sandboxed = jail.probe() is None
    sources = {
        "reference": (REFERENCE, None),
        **{name: (src, None) for name, src in ALTERNATIVES.items()},
        **{key: (mutant_source(dict(MUTANTS)[key]), key) for key in LONG_CONTEXT_KEYS.values()},
        **{key: (mutant_source(dict(MUTANTS)[key]), key) for key in SANDBOXED_TOO},
    }
    # the long-context reference's four mistakes and the phases added since in the sandbox; every mutant is graded
    # in-process above
    for name, (src, key) in sources.items():
        path = tmp_path / f"{name}.py"
        path.write_text(src)
        result = runner.grade_file(path, [EXERCISE], sandboxed=sandboxed).results[0]
        if key is None:
            assert result and result.score == 1.0, (name, result.report())
        else:
            assert not result and result.diagnosis == key, (name, result.report())
            assert "n_past + n_new" not in result.report(), result.report()
            # (a module keeping its own ring has none when handed the grader's: its AttributeError is what it did)
            assert "Error" not in result.report() or key == "cache_ignores_past", result.report()
    assert RING_SHAPE in result.report()  # the last: the cache that grows, its shape line quotes the ring


@pytest.mark.requires_sandbox
def test_sandbox_the_generated_exercise_is_not_implemented():
    # the solution notebooks are graded in the sandbox by test_grader_solutions.py
    blank = runner.grade_file(ROOT / "exercises" / "12_sliding_window.ipynb", sandboxed=jail.probe() is None)
    assert [r.diagnosis for r in blank.results] == ["not_implemented"], blank.to_dict()
    assert "not implemented yet" in blank.results[0].summary
