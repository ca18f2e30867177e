"""The grader on exercise 13 (paged_decode): one decode step through a paged KV cache (copy-on-write) with a
split-K merge. The solution and alternative correct implementations pass, stubs say "not implemented", every
misconception gets its own named diagnosis (in the notebook's kernel and in the sandbox), and the grader's
reference computes what course_utils' checked paged cache and split-K compute."""

import linecache
import re
from pathlib import Path

import nbformat
import pytest
import torch

import course_utils as cu
from course_utils.grade import check, grade_class, runner
from course_utils.grade.diagnose import compare
from course_utils.grade.exercises import get
from course_utils.grade.exercises.paged_decode import PagedVariant, paged_forward, read_back
from course_utils.grade.kinds.function import Call
from course_utils.grade.types import Case
from tests.grader_cases import serving
from tests.grader_cases.implementations import mutate
from tests.grader_cases.paged_decode import ALTERNATIVES, MUTANTS, REFERENCE, STATE_MUTANTS

ROOT = Path(__file__).resolve().parents[3]
EX = "paged_decode"


def load(src, name="paged_decode"):
    ns = {"__name__": "learner"}
    linecache.cache["<learner>"] = (len(src), None, src.splitlines(True), "<learner>")  # as IPython does
    exec(compile(src, "<learner>", "exec"), ns)
    return ns[name]


def grade(src):
    return grade_class(EX, load(src))


# the interleaved alternative without its copy-on-write branch: a shared block written in place, each sequence
# read right after its own write (so the mistake shows only where a later write lands in an earlier reader's block)
INTERLEAVED_NO_COPY = ALTERNATIVES["interleaved_running_merge"].replace(
    "        elif sum(t.count(table[-1]) for t in tables) > 1:", "        elif False:"
)


def test_registered():
    ex = get(EX)
    assert (ex.kind, ex.contract, ex.points, ex.notebook, ex.order) == (
        "function",
        "paged_decode",
        3,
        "13_paged_decode",
        13,
    )
    assert ex.correct == PagedVariant() and len(ex.make_cases()) == 6


def test_solution_notebook_holds_the_graded_reference():
    """The code tested here as REFERENCE is the solution notebook's (the mutants edit what the learner sees)."""
    nb = nbformat.read(ROOT / "solutions" / "13_paged_decode.ipynb", as_version=4)
    solution = next(c.source for c in nb.cells if c.id == "solution")
    solution = re.sub(r"(?m)^ *### (BEGIN|END) SOLUTION$\n?", "", solution).strip()
    assert solution == re.sub(r"(?m)  #[A-Z]+$", "", REFERENCE.split("\n\n", 1)[1]).strip()


def test_a_stub_names_the_function_left_to_write():
    # (the stub of both functions: the contract test) paged_decode written, merge_partials still a stub
    half = REFERENCE.replace("    m = lses.amax(dim=0)  #MAX", "    raise NotImplementedError('your code here')")
    result = grade(half)
    assert not result and result.diagnosis == "not_implemented", result.report()
    assert "write merge_partials (it raises" in result.summary, result.report()  # the stub, not its caller
    both = REFERENCE.replace("    m = lses.amax(dim=0)  #MAX", "    raise NotImplementedError('your code here')")
    both = both.replace("    num_blocks, block_size, heads, d = key_pool.shape\n", "    raise NotImplementedError\n")
    result = grade(both)  # the exercise notebook as handed out: both functions stubs
    assert "write merge_partials, paged_decode (they raise" in result.summary, result.report()
    assert "请写出 merge_partials、paged_decode（它们" in result.report("zh"), result.report("zh")


@pytest.mark.parametrize("key,src", STATE_MUTANTS, ids=[key for key, _ in STATE_MUTANTS])
def test_state_is_read_back(key, src):
    """Right (out, lse), wrong pool or tables: the state the step leaves is part of its result."""
    result = grade(src)
    assert not result and result.diagnosis == key, result.report()
    assert any(m.message in result.report() for m in get(EX).mutants() if m.key == key)


MERGE_MISTAKES = ["mean", "sum", "no_max", "not_normalised", "global_max", "first"]


@pytest.mark.parametrize("seed", range(20))
def test_every_merge_mistake_fails_on_every_draw(seed):
    """merge_partials is graded alone, on partials hundreds apart: each plausible wrong merge differs from the
    right one whatever the draw (not only on some seeds)."""
    case = get(EX).make_cases(seed=seed)[-1]
    right = get(EX).expected(case, PagedVariant())
    wrong = [PagedVariant(merge=m) for m in MERGE_MISTAKES] + [PagedVariant(merged_lse="max")]
    for v in wrong:
        assert compare(get(EX).expected(case, v), right) is not None, v


def test_one_pass_decode_with_the_merge_left_as_a_stub_gets_no_credit():
    """paged_decode computed in one pass (no chunks, so its merge_partials is never called), merge_partials
    left as the exercise notebook's stub."""
    one_pass = ALTERNATIVES["vectorised_softmax_merge"].replace(
        "    weights = torch.softmax(lses, dim=0)", "    raise NotImplementedError('your code here')"
    )
    assert one_pass != ALTERNATIVES["vectorised_softmax_merge"]
    result = grade(one_pass)
    assert not result and result.diagnosis == "not_implemented", result.report()
    assert "not implemented yet: write merge_partials (it raises NotImplementedError)" in result.summary
    assert "还没有实现：请写出 merge_partials" in result.report("zh")
    assert result.checks_passed == result.checks_total - 1  # the decode's own checks still count
    missing = one_pass.replace("def merge_partials(", "def merge_partials_unused(")
    result = grade(missing)
    assert not result and "merge_partials" in result.report(), result.report()


def test_state_is_compared_through_the_tables():
    """A learner may take any free block: the tokens each table points to are compared, not the pools."""
    case = get(EX).make_cases(seed=3)[3]  # both sequences need a new block
    key_pool, value_pool, tables = (a.clone() for a in case.calls[0].args[3:6])
    _, _, (ref_k, ref_v, ref_t) = paged_forward(case.calls[0].args, PagedVariant(), state=True)
    taken = sorted(set(ref_t[ref_t >= 0].tolist()) - set(tables[tables >= 0].tolist()))
    free = [i for i in range(len(key_pool)) if i not in set(ref_t[ref_t >= 0].tolist())]
    moved = ref_t.clone()  # the same tokens in other free blocks
    for old, new in zip(taken, free, strict=False):
        moved[ref_t == old] = new
        ref_k[new], ref_v[new] = ref_k[old], ref_v[old]
    assert not torch.equal(moved, ref_t)
    outputs = {"step1.key_pool": ref_k, "step1.value_pool": ref_v, "step1.block_tables": moved.double()}
    expected = get(EX).expected(case, PagedVariant())
    got = read_back(case, outputs)
    for name in ("step1.cached_keys", "step1.cached_values"):
        torch.testing.assert_close(got[name], expected[name])


def test_catalogue():
    keys = {m.key for m in get(EX).mutants()}
    assert len({k for k, _ in MUTANTS}) >= 4 and len(keys) >= 5
    # the mistakes issue 23 names: block-table index math, a shared block written without copy, partials merged
    # without rescaling or without the max; and those issue 29 names: contiguous reads through a table, chunks
    # weighted by their lengths
    assert {
        "block_table_slot_without_block_size",
        "blocks_read_contiguously",
        "shared_block_written_without_copy",
        "merge_without_rescaling",
        "merge_without_max",
        "merge_weighted_by_length",
    } <= keys
    # the same mistakes as the reference's own mutants (tests/grader_cases/serving.py) go by the same names
    shared = keys & set(serving.MUTANTS)
    assert shared >= {
        "block_table_slot_without_block_size",
        "shared_block_written_without_copy",
        "copy_on_write_without_data",
        "merge_without_max",
        "merge_not_normalised",
    }, shared
    assert {k for k, _ in MUTANTS} <= keys


def test_merge_without_the_max_overflows_only_on_large_scores():
    """Its cases with scores (or lses) in the hundreds are what name it: elsewhere exp(lse) fits in float32."""
    cases = get(EX).make_cases(seed=2)
    no_max = PagedVariant(merge="no_max")
    nan_cases = [c.name for c in cases if torch.isnan(get(EX).expected(c, no_max)["step1.out"]).any()]
    assert nan_cases == [c.name for c in cases[-2:]] and all("hundreds" in c.name for c in cases[-2:])


# ---------------------------------------------------------------- the grader's reference vs course_utils


def _contiguous(args, b):
    """Sequence b's cached keys and values in position order, its new token appended: (H, n + 1, d) each."""
    query, new_keys, new_values, key_pool, value_pool, tables, lens, _ = args
    block_size = key_pool.shape[1]
    pos = torch.arange(int(lens[b]))
    slots = tables[b, pos // block_size] * block_size + pos % block_size
    keys = torch.cat([key_pool.flatten(0, 1)[slots], new_keys[b][None]]).transpose(0, 1)
    values = torch.cat([value_pool.flatten(0, 1)[slots], new_values[b][None]]).transpose(0, 1)
    return keys, values


@pytest.mark.parametrize("seed", [0, 5])
def test_grader_reference_equals_course_utils(seed):
    """Each sequence read through its table equals course_utils' split-K over the contiguous cache (the pool
    as it was before the step: copy-on-write leaves every other sequence's tokens alone), and SDPA in float64."""
    *paged, merge = get(EX).make_cases(seed=seed)
    expected = get(EX).expected(merge, get(EX).correct)  # merge_partials alone: course_utils' merge
    for got, want in zip(
        (expected["step1.out"], expected["step1.lse"]), cu.merge_partials(*merge.calls[0].args), strict=True
    ):
        torch.testing.assert_close(got, want)
    for case in paged:
        args = case.calls[0].args
        expected = get(EX).expected(case, get(EX).correct)
        for b in range(args[0].shape[0]):
            keys, values = _contiguous(args, b)
            q = args[0][b][:, None]  # (H, 1, d)
            out, lse = cu.split_k_attention(q, keys, values, num_splits=min(args[-1], keys.shape[1]))
            rtol, atol = case.meta.get("tol", (2e-4, 2e-5))  # scores in the hundreds: float32 rounds at 1e-4
            torch.testing.assert_close(expected["step1.out"][b], out[:, 0], rtol=rtol, atol=atol)
            torch.testing.assert_close(expected["step1.lse"][b], lse[:, 0], rtol=2e-5, atol=2e-5)
            sdpa = torch.nn.functional.scaled_dot_product_attention(q.double(), keys.double(), values.double())
            torch.testing.assert_close(expected["step1.out"][b].double(), sdpa[:, 0], rtol=1e-4, atol=1e-4)


def test_grader_reference_equals_the_paged_cache():
    """A fork sharing a half-filled block, decoded through cu.PagedKVCache (copy-on-write on append) and
    cu.paged_attention, against the grader's reference run on the same pool."""
    torch.manual_seed(0)
    H, d, bs = 2, 8, 4
    cache = cu.PagedKVCache(num_blocks=12, block_size=bs, num_kv_heads=H, head_dim=d)
    cache.add_sequence("p")
    cache.append("p", torch.randn(H, 6, d), torch.randn(H, 6, d))
    cache.fork("p", "c")
    cache.add_sequence("o")
    cache.append("o", torch.randn(H, 8, d), torch.randn(H, 8, d))
    seqs = ["p", "c", "o"]
    tables = torch.full((3, 4), -1, dtype=torch.long)
    for row, s in enumerate(seqs):
        tables[row, : len(cache.block_tables[s])] = torch.tensor(cache.block_tables[s])
    lens = torch.tensor([cache.seq_lens[s] for s in seqs])
    query, k_new, v_new = (torch.randn(3, H, d) for _ in range(3))
    case = Case(
        "fork",
        {},
        {},
        [Call((query, k_new, v_new, cache.key_pool.clone(), cache.value_pool.clone(), tables, lens, 3))],
    )
    expected = get(EX).expected(case, get(EX).correct)
    for row, s in enumerate(seqs):
        cache.append(s, k_new[row, :, None], v_new[row, :, None])
    torch.testing.assert_close(expected["step1.out"], cu.paged_attention(query, cache, seqs))


# ---------------------------------------------------------------- the notebook's check and the sandbox


def test_check_prints_for_the_function(capsys):
    assert check(EX, load(REFERENCE))
    assert not check(EX, None)
    out = capsys.readouterr().out
    assert "✅ paged_decode: all 7 checks passed" in out
    assert "not implemented yet: define function paged_decode" in out


def test_course_utils_used_as_a_submission_gets_no_credit():
    src = REFERENCE.replace(
        "    out = (w[..., None] * outs).sum(dim=0) / total[..., None]  #MERGE",
        "    import course_utils\n    return course_utils.merge_partials(outs, lses)",
    )
    refused = grade(src)
    assert not refused and refused.diagnosis == "delegates", refused.report()


@pytest.mark.requires_sandbox
def test_graded_in_the_sandbox(tmp_path):
    """Submissions as files, through the sandboxed runner: the solution and an alternative pass, two mistakes
    are named."""
    subs = {
        "ref": REFERENCE,
        "alt": ALTERNATIVES["vectorised_softmax_merge"],
        "no_copy": mutate(REFERENCE, dict(MUTANTS)["shared_block_written_without_copy"]),
        "no_max": mutate(REFERENCE, dict(MUTANTS)["merge_without_max"]),
        "not_written": dict(STATE_MUTANTS)["new_token_not_written"],
        "attend_first_no_copy": dict(STATE_MUTANTS)["shared_block_written_without_copy"],
        "contiguous": mutate(REFERENCE, dict(MUTANTS)["blocks_read_contiguously"]),
        "by_length": dict(MUTANTS)["merge_weighted_by_length"],
        "merge_stub": ALTERNATIVES["vectorised_softmax_merge"].replace(
            "    weights = torch.softmax(lses, dim=0)", "    raise NotImplementedError('your code here')"
        ),
    }
    found = {}
    for name, src in subs.items():
        path = tmp_path / f"{name}.py"
        path.write_text(src + '\nfrom course_utils.grade import check\nresult = check("paged_decode", paged_decode)\n')
        report = runner.grade_file(path, sandboxed=True)
        assert [r.exercise for r in report.results] == [EX], report.to_dict()
        found[name] = report.results[0]
    assert found["ref"] and found["alt"], (found["ref"].report(), found["alt"].report())
    assert found["no_copy"].diagnosis == "shared_block_written_without_copy", found["no_copy"].report()
    assert found["no_max"].diagnosis == "merge_without_max", found["no_max"].report()
    assert found["not_written"].diagnosis == "new_token_not_written", found["not_written"].report()
    assert found["attend_first_no_copy"].diagnosis == "shared_block_written_without_copy", found[
        "attend_first_no_copy"
    ].report()
    for name in ("contiguous", "by_length", "merge_stub"):  # the same verdict as in the notebook's kernel
        in_process = grade(subs[name])
        assert (found[name].diagnosis, found[name].summary) == (in_process.diagnosis, in_process.summary)
    assert found["contiguous"].diagnosis == "blocks_read_contiguously", found["contiguous"].report()
    assert found["by_length"].diagnosis == "merge_weighted_by_length", found["by_length"].report()
    assert "write merge_partials" in found["merge_stub"].summary, found["merge_stub"].report()
