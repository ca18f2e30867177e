"""Issue 29, the instructor's side and one verdict everywhere: a learner's text never starts a line of the report (a
forged pass line cannot appear); a notebook whose outputs are large (50 MB of plots and printed tensors) is read,
its outputs dropped as they stream past, while a notebook whose code is too large is still refused; and a module
that writes into the cache it is handed gets the same verdict in process (check) as in the sandbox (make grade)."""

import io
import json

import pytest

from course_utils.grade import source
from course_utils.grade.batch import feedback_markdown
from course_utils.grade.escape import terminal
from course_utils.grade.runner import grade_file
from tests.conftest import grade
from tests.grader_cases.implementations import HEADER
from tests.grader_cases.sliding_window import REFERENCE as WINDOW

FORGED = "## mha: passed (8/8 checks, score 1)"
FORGER = (
    HEADER
    + f"""
Boom = type({("Boom" + chr(10) + FORGED)!r}, (Exception,), {{}})


class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)

    def forward(self, x):
        raise Boom("x" + chr(13) + chr(10) + {FORGED!r} + chr(0x2028) + {FORGED!r} + chr(11) + {FORGED!r})
"""
)


def _forged_lines(text: str) -> list:
    return [line for line in text.splitlines() if line.lstrip(" -\\").startswith(FORGED)]


def test_a_learners_line_breaks_never_start_a_line_of_the_report():
    result = grade("mha", FORGER)
    assert not result and result.diagnosis == "exception", result.report()
    for lang in ("en", "zh"):
        report = terminal(result.report(lang))
        assert not _forged_lines(report), report
        assert report.splitlines()[0].startswith("❌") and "⏎" in report.splitlines()[0]


@pytest.mark.requires_sandbox
def test_no_forged_line_in_the_terminal_or_the_feedback(tmp_path):
    path = tmp_path / "forger.py"
    path.write_text(FORGER)
    report = grade_file(path, ["mha"])
    assert not report.passed
    for r in report.results:
        assert not _forged_lines(terminal(r.report())), r.report()
    feedback = feedback_markdown("forger.py", report)
    assert not _forged_lines(feedback) and "# " + FORGED not in feedback, feedback


# ---------------------------------------------------------------------------------------------- large outputs


def _notebook_with_outputs(path, code: str, mib: int) -> None:
    """An exercise notebook whose one code cell printed ``mib`` MiB (an image and a long printed tensor), written
    piece by piece so that the test itself never holds it."""
    image = "iVBORw0KGgo" + "A" * (1 << 20)  # 1 MiB of base64, as a plot's PNG
    lines = json.dumps(["tensor([[" + ", ".join(["0.1234"] * 12) + "]])\n"] * 12000)  # ~1 MiB of printed lines
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(
            '{"cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# Exercise"]}, '
            '{"cell_type": "code", "execution_count": 1, "metadata": {"nbgrader": {"grade_id": "mha"}}, '
            f'"source": {json.dumps(code)}, "outputs": ['
        )
        for i in range(mib // 2):
            fh.write(
                ("," if i else "") + '{"output_type": "display_data", "metadata": {}, '
                f'"data": {{"image/png": "{image}", "text/plain": ["<Figure>"]}}}}, '
                f'{{"output_type": "stream", "name": "stdout", "text": {lines}}}'
            )
        fh.write(']}], "metadata": {"kernelspec": {"name": "python3"}}, "nbformat": 4, "nbformat_minor": 5}')


def test_a_notebook_with_50_mb_of_outputs_is_read_without_them(tmp_path):
    path = tmp_path / "plots.ipynb"
    _notebook_with_outputs(path, "x = 1  # the answer\n", 50)
    assert path.stat().st_size > 50 << 20
    assert source.read_cells(path) == [{"index": 1, "source": "x = 1  # the answer\n", "grade_id": "mha"}]


def test_outputs_are_dropped_as_they_stream_past(tmp_path):
    """The notebook is read a chunk at a time and what is kept is the cells without their outputs: the parent
    never holds the outputs (json.loads of the whole file would hold them several times over)."""
    path = tmp_path / "plots.ipynb"
    _notebook_with_outputs(path, "x = 1\n", 8)
    reads = []

    class Spy(io.FileIO):
        def read(self, size=-1):
            reads.append(size)
            return super().read(size)

    with Spy(path) as fh:
        kept = source._without_outputs(fh)
    assert len(reads) > 8 and all(0 < size <= source._CHUNK for size in reads), reads
    assert len(kept) < 1 << 10 and json.loads(kept)["cells"][1]["outputs"] == []


def test_a_notebook_whose_code_is_too_large_is_still_refused(tmp_path):
    path = tmp_path / "code.ipynb"
    _notebook_with_outputs(path, "x = 1\n" * (2 << 20), 2)  # 12 MiB of code
    with pytest.raises(source.SubmissionError, match="without its outputs"):
        source.read_cells(path)
    report = grade_file(path, ["mha"], sandboxed=False)
    assert "larger than 8 MiB" in str(report.error) and report.results[0].diagnosis == "unreadable"


@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_outputs_dropped_across_any_chunk_boundary(monkeypatch, chunk):
    """Strings, escapes (\\" and \\\\) and brackets cut by a chunk's end: the cells read are json.loads' cells."""
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "metadata": {"tags": ["a]b", 'c"d']},
                "execution_count": 2,
                "source": ['s = "}{\\\\"\n', "outputs = [1, {'a': ']'}]\n"],
                "outputs": [{"output_type": "stream", "text": ['"]}\\', "[{", '\\\\\\"']}],
            },
            {"cell_type": "markdown", "metadata": {}, "source": "outputs", "attachments": {"x.png": {}}},
            {"cell_type": "code", "metadata": {}, "source": "y = 2", "outputs": [], "execution_count": None},
        ],
        "metadata": {"outputs": [1, 2]},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    raw = json.dumps(nb).encode()
    monkeypatch.setattr(source, "_CHUNK", chunk)
    got = json.loads(source._without_outputs(io.BytesIO(raw)))
    assert [c.get("outputs") for c in got["cells"]] == [[], None, []]
    assert got["cells"][1]["attachments"] == {}
    for mine, theirs in zip(got["cells"], nb["cells"], strict=True):
        assert mine["source"] == theirs["source"] and mine["metadata"] == theirs["metadata"]
    assert got["metadata"] == nb["metadata"]  # only cells' outputs are dropped


# ---------------------------------------------------------------------------------------------- one verdict

# exercise 12's reference, writing the new tokens into the ring it is handed (as Hugging Face's caches update in
# place) instead of a copy: correct, since it reads the ring before it writes
IN_PLACE = WINDOW.replace(
    "cache_k, cache_v = past_key_value[0].clone(), past_key_value[1].clone()", "cache_k, cache_v = past_key_value"
)


def test_in_place_cache_is_the_case():
    assert IN_PLACE != WINDOW


def test_a_module_that_writes_into_the_cache_it_is_handed_passes_in_process():
    result = grade("sliding_window", IN_PLACE)
    assert result and result.checks_passed == result.checks_total == 9, result.report()


@pytest.mark.requires_sandbox
def test_the_same_module_gets_the_same_verdict_in_the_sandbox(tmp_path):
    path = tmp_path / "in_place.py"
    path.write_text(IN_PLACE)
    (result,) = grade_file(path, ["sliding_window"]).results
    assert result and result.checks_passed == result.checks_total, result.report()


def test_a_grader_failure_is_tried_once_more_then_reported_on_its_row(tmp_path, monkeypatch):
    """The grader's own exception (a host hiccup) gets one more try; a second failure is the row's status, and the
    batch goes on with the other files."""
    from course_utils.grade import batch
    from course_utils.grade.runner import SubmissionReport

    (tmp_path / "subs").mkdir()
    for name in ("flaky.py", "broken.py"):
        (tmp_path / "subs" / name).write_text("x = 1\n")
    tries: dict = {}

    def grade_file(path, *args, **kwargs):
        tries[path.name] = tries.get(path.name, 0) + 1
        if path.name == "broken.py" or tries[path.name] == 1:
            raise OSError("no room on the device")
        return SubmissionReport(str(path))

    monkeypatch.setattr(batch, "grade_file", grade_file)
    graded, skipped, failed = batch.grade_folder(tmp_path / "subs", tmp_path / "out", workers=1, exercises=["mha"])
    assert tries == {"flaky.py": 2, "broken.py": 2} and failed == ["broken.py"]
    status = (tmp_path / "out" / "grades.csv").read_text()
    assert "the grader failed on this submission (OSError: no room on the device)" in status
