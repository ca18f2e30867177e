"""The grader on exercise 15 (ring_attention): one step of ring attention on one rank, and its exchange of K/V
between real processes. The solution and two alternative correct implementations (of the step and of the
exchange: batch_isend_irecv, isend/irecv, blocking send/recv ordered by parity) pass, the stub says "not
implemented", every misconception gets its own named diagnosis (in the notebook's kernel and in the sandbox), a ring
that deadlocks is named after a bounded wait, the exercise's texts are its own, and the grader's reference, stepped
around the whole ring, computes what course_utils' checked ring and SDPA compute."""

import re
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F

import course_utils as cu
from course_utils.grade import check, messages, runner
from course_utils.grade.exercises import get
from course_utils.grade.exercises.ring_attention import (
    RING_SHAPES,
    TEXTS,
    RingVariant,
    positions,
    ring_forward,
    ring_run,
    ring_run_case,
)
from tests.conftest import grade, load
from tests.grader_cases.implementations import mutate
from tests.grader_cases.ring_attention import ALTERNATIVES, DEADLOCKS, MUTANTS, REFERENCE, RING_STEP, STUB

ROOT = Path(__file__).resolve().parents[3]
EX = "ring_attention"


def test_registered():
    ex = get(EX)
    assert (ex.kind, ex.contract, ex.points, ex.notebook, ex.order) == (
        "ring",
        "ring_step",
        3,
        "15_ring_attention",
        15,
    )
    cases = ex.make_cases()
    assert ex.correct == RingVariant() and len(cases) == 12
    assert [c.calls[0].ranks for c in cases[-2:]] == [shape[0] for shape in RING_SHAPES]  # the process rings last


def test_solution_notebook_holds_the_graded_reference():
    """The code tested here as REFERENCE is the solution notebook's (the mutants edit what the learner sees)."""
    nb = nbformat.read(ROOT / "solutions" / "15_ring_attention.ipynb", as_version=4)
    solution = next(c.source for c in nb.cells if c.id == "solution")
    solution = re.sub(r"(?m)^ *### (BEGIN|END) SOLUTION$\n?", "", solution).strip()
    assert solution == re.sub(r"(?m)  #[A-Z]+$", "", REFERENCE.split("\n\n", 1)[1]).strip()


def test_a_stubbed_exchange_is_named():
    """The step written, the exchange still the stub: the learner is told which function is left to write."""
    result = grade(EX, RING_STEP + "\n\n" + STUB[STUB.index("def ring_exchange") :])
    assert not result and result.diagnosis == "not_implemented", result.report()
    assert "write ring_exchange" in result.summary, result.report()


def test_catalogue_and_texts():
    keys = {m.key for m in get(EX).mutants()}
    # the mistakes the exercise is about: the merge without rescaling, a chunk's causal mask wrong for where it
    # sits (earlier or later in the sequence), the zigzag pieces wrong
    assert {
        "ring_merge_without_rescaling",
        "ring_causal_mask_local",
        "ring_later_chunk_attended",
        "ring_earlier_chunk_skipped",
        "ring_zigzag_as_contiguous",
        "ring_zigzag_second_piece",
    } <= keys
    assert {k for k, _ in MUTANTS} | {"ring_deadlock"} == keys
    own = {k for k in keys if k.startswith("ring_")}
    assert {"mutant." + k for k in own} <= set(TEXTS)
    assert {"case:" + c.name for c in get(EX).make_cases(seed=0)} <= set(TEXTS)
    for key, (en, zh) in TEXTS.items():  # every text in both languages, and registered with the catalogue
        assert en and re.search(r"[\u4e00-\u9fff]", zh) and messages.table(get("ring_attention").home)[key][1] == zh, (
            key
        )


def test_merge_without_the_max_overflows_only_on_large_scores():
    """Its cases with scores in the hundreds are what name it: elsewhere exp(lse) fits in float32."""
    cases = get(EX).make_cases(seed=2)
    no_max = RingVariant(merge="no_max")
    outputs = {c.name: get(EX).expected(c, no_max) for c in cases}
    nan_cases = [name for name, out in outputs.items() if any(torch.isnan(t).any() for t in out.values())]
    assert len(nan_cases) == 2 and all("hundreds" in name for name in nan_cases)


@pytest.mark.parametrize("seed", range(8))
def test_a_later_chunk_far_above_the_running_lse_overflows_a_relative_merge_on_every_draw(seed):
    """exp(lse_i - lse) overflows in every row of the case whose later chunk scores hundreds higher: the merge taken
    relative to the running lse fails on every seed, not on most."""
    case = next(c for c in get(EX).make_cases(seed=seed) if c.name.startswith("larger scores in the later chunk"))
    out = get(EX).expected(case, RingVariant(merge="relative"))["step1.out"]
    assert torch.isnan(out).all()
    assert torch.isfinite(get(EX).expected(case, RingVariant())["step1.out"]).all()


def test_the_points_follow_what_the_exercise_teaches():
    """A ring that never passes a chunk (the exchange a stub, or deadlocked) is half the exercise, whatever the number
    of step cases beside its two runs."""
    stub = grade(EX, RING_STEP + "\n\n" + STUB[STUB.index("def ring_exchange") :])
    deadlock = grade(EX, DEADLOCKS["send_first"])
    assert stub.score == deadlock.score == 0.5 and stub.checks_passed == 11, (stub.report(), deadlock.report())
    step_stub = grade(EX, STUB[: STUB.index("def ring_exchange")] + REFERENCE[REFERENCE.index("def ring_exchange") :])
    assert step_stub.score == 0.0, step_stub.report()


# ---------------------------------------------------------------- the grader's reference vs course_utils


@pytest.mark.parametrize(
    "world_size,seq_len,layout,causal",
    [(3, 10, "contiguous", False), (4, 13, "contiguous", True), (3, 18, "zigzag", True), (4, 24, "zigzag", True)],
)
def test_grader_reference_around_the_ring_equals_course_utils(world_size, seq_len, layout, causal):
    """Every rank stepping the grader's reference through the whole ring gives course_utils' simulated ring and
    SDPA; the grader's positions are course_utils'."""
    g = torch.Generator().manual_seed(seq_len)
    q, k, v = (torch.randn(1, 2, seq_len, 8, generator=g, dtype=torch.float64) for _ in range(3))
    pos = positions(seq_len, world_size, layout)
    assert all(torch.equal(a, b) for a, b in zip(pos, cu.chunk_positions(seq_len, world_size, layout), strict=True))
    outs = []
    for rank in range(world_size):
        out = torch.zeros_like(q[..., pos[rank], :])
        lse = torch.full(out.shape[:-1], float("-inf"), dtype=torch.float64)
        for step in range(world_size):
            src = (rank - step) % world_size
            args = (
                q[..., pos[rank], :],
                k[..., pos[src], :],
                v[..., pos[src], :],
                out,
                lse,
                rank,
                src,
                world_size,
                seq_len,
                layout,
                causal,
            )
            out, lse = ring_forward(args, RingVariant())
        outs.append(out)
    got = cu.gather_sequence(outs, layout)
    torch.testing.assert_close(got, cu.ring_attention_simulated(q, k, v, world_size, causal, layout)[0])
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, is_causal=causal))


@pytest.mark.parametrize("world_size,seq_len,layout,causal", [(3, 12, "contiguous", True), (2, 16, "zigzag", True)])
def test_grader_ring_of_processes_equals_sdpa(world_size, seq_len, layout, causal):
    """What the grader expects of the ring of processes (every rank's output, gathered) is SDPA; each chunk a rank
    receives is its left neighbour's, and the backwards ring holds rank + t's chunk at step t."""
    case = ring_run_case("ring", torch.Generator().manual_seed(seq_len), world_size, seq_len, layout, causal)
    call = case.calls[0]
    q_chunks, k_chunks, v_chunks = call.args[:3]
    expected = ring_run(call, RingVariant())
    q, k, v = (cu.gather_sequence(list(chunks), layout) for chunks in (q_chunks, k_chunks, v_chunks))
    got = cu.gather_sequence([expected[f"rank{r}.out"] for r in range(world_size)], layout)
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    assert torch.equal(expected["rank0.recv1.k"], k_chunks[world_size - 1])
    backwards = ring_run(call, RingVariant(exchange="backwards"))
    assert torch.equal(backwards["rank0.recv1.k"], k_chunks[1 % world_size])


# ---------------------------------------------------------------- the notebook's check and the sandbox


def test_check_prints_for_the_function(capsys):
    assert check(EX, load(REFERENCE, "ring_step"))
    assert not check(EX, None)
    out = capsys.readouterr().out
    assert "✅ ring_attention: all 13 checks passed" in out
    assert "not implemented yet: define function ring_step" in out


def test_course_utils_used_as_a_submission_gets_no_credit():
    src = REFERENCE.replace(
        "    m = torch.maximum(lse, lse_i)  #MAX",
        "    import course_utils\n    return course_utils.merge_step(out, lse, out_i, lse_i)",
    )
    refused = grade(EX, src)
    assert not refused and refused.diagnosis == "delegates", refused.report()


@pytest.mark.requires_sandbox
def test_graded_in_the_sandbox(tmp_path):
    """Submissions as files, through the sandboxed runner (its ring of processes on the sandbox's own loopback):
    the solution and an alternative pass, the exchange's mistakes are named as in process."""
    subs = {
        "ref": REFERENCE,
        "alt": ALTERNATIVES["stacked_partials"],
        "backwards": mutate(REFERENCE, dict(MUTANTS)["ring_passed_backwards"]),
        "deadlock": DEADLOCKS["send_first"],
        "all_gather": dict(MUTANTS)["ring_exchange_collective"],
    }
    found = {}
    for name, src in subs.items():
        path = tmp_path / f"{name}.py"
        path.write_text(src + '\nfrom course_utils.grade import check\nresult = check("ring_attention", ring_step)\n')
        report = runner.grade_file(path, sandboxed=True)
        assert [r.exercise for r in report.results] == [EX], report.to_dict()
        found[name] = report.results[0]
    assert found["ref"] and found["alt"], (found["ref"].report(), found["alt"].report())
    assert found["backwards"].diagnosis == "ring_passed_backwards", found["backwards"].report()
    assert found["deadlock"].diagnosis == "ring_deadlock", found["deadlock"].report()
    assert found["all_gather"].diagnosis == "ring_exchange_collective", found["all_gather"].report()
