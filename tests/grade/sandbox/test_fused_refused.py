"""Interview mode refuses fused attention by what runs, never by names in the text (issue 21).

Every route to PyTorch's fused attention in tests/grader_cases/fused.py (training mode only, TorchScript, torch.library
ops, vmap over heads, torch.compile, FlexAttention, a name built at run time, nn.MultiheadAttention's functional
form, type sniffing, torch function hooks turned off, a stopped profiler) is refused with the fused-attention
diagnosis; every honest answer that only names the fused kernel (a helper of its own, a docstring, a test that
compares with SDPA, an unused import, an operator of its own) passes, in the notebook's kernel and in the sandbox.
"""

import csv
import importlib.util
import threading
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from course_utils.grade import grade_class
from course_utils.grade.sandbox.tracing import FusedTracer
from tests.conftest import run_grader
from tests.grader_cases.fused import CHEATS, HONEST

ROOT = Path(__file__).resolve().parents[3]


def load(tmp_path, name, src):
    """The submission's class, imported from a file (TorchScript compiles from the source file)."""
    path = tmp_path / name
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(f"candidate_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MultiHeadAttention


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("name", sorted(CHEATS))
def test_each_route_to_fused_attention_is_refused(tmp_path, name):
    result = grade_class("mha_interview", load(tmp_path, name, CHEATS[name]))
    report, report_zh = result.report("en"), result.report("zh")
    assert not result and result.diagnosis == "forbidden" and result.score == 0, report
    assert "not implemented" not in report and "FlexAttention" in report
    assert "stops the grader's record" in report if name == "stops_profiler.py" else "fused attention" in report
    assert "面试模式" in report_zh and "不得分" in report_zh
    if name == "flex.py":  # FlexAttention is named as the fused attention it is, in both languages
        assert "runs FlexAttention (flex_attention), fused attention" in report
        assert "运行了 FlexAttention（flex_attention），这是融合注意力" in report_zh


@pytest.mark.parametrize("name", sorted(HONEST))
def test_a_name_in_the_text_is_not_evidence(tmp_path, name):
    result = grade_class("mha_interview", load(tmp_path, name, HONEST[name]))
    assert result, result.report()


def test_the_tracer_sees_every_thread_and_only_fused_attention(capfd):
    q = torch.randn(2, 3, 5, 4, requires_grad=True)
    hop_call = torch._ops.HigherOrderOperator.__call__
    with FusedTracer() as by_hand:
        w = torch.softmax((q @ q.transpose(-2, -1)).masked_fill(torch.ones(5, 5).triu(1).bool(), -torch.inf), -1)
        (w @ q).sum().backward()
    assert by_hand.seen == set()
    with FusedTracer() as in_a_thread:
        worker = threading.Thread(target=lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True))
        worker.start()
        worker.join()
    assert "aten::scaled_dot_product_attention" in in_a_thread.seen
    assert torch._ops.HigherOrderOperator.__call__ is hop_call  # FlexAttention's hook is removed again
    assert capfd.readouterr().err == ""  # the profiler's library logs nothing into a notebook


def test_flex_attention_is_refused_without_being_compiled(monkeypatch):
    # its first call compiles the score function (seconds, far more on a loaded machine): interview mode records it
    # as called and refuses it before any of that, so that the verdict cannot depend on the machine's load
    import torch.nn.attention.flex_attention as flex

    from course_utils.grade.sandbox.tracing import FlexRefused, RefusingFlex, Traced

    ran = []
    monkeypatch.setattr(flex, "flex_attention", lambda *a, **k: ran.append(1))
    Traced.seen.clear()
    with RefusingFlex():
        from torch.nn.attention.flex_attention import flex_attention  # as a cell imports it, after the harness

        with pytest.raises(FlexRefused):
            flex_attention(torch.randn(1, 1, 4, 8), torch.randn(1, 1, 4, 8), torch.randn(1, 1, 4, 8))
    assert ran == [] and "flex_attention" in Traced.seen
    Traced.seen.clear()
    flex.flex_attention()  # left as it was found
    assert ran == [1]


@pytest.mark.requires_sandbox
def test_flex_attention_is_refused_in_the_sandbox_within_the_default_budget(tmp_path):
    path = tmp_path / "flex.py"
    path.write_text(CHEATS["flex.py"])
    proc = run_grader(str(path), "--exercise", "mha_interview", "--json", timeout=600)
    assert proc.returncode == 1 and '"diagnosis": "forbidden"' in proc.stdout, proc.stdout + proc.stderr


# torch.compile is refused in process above; in the sandbox its compilation can outlast the time limit on a busy
# machine (a time-out, 0 points as well, but not the diagnosis this test asserts)
SANDBOXED = ["train_only.py", "script_fn.py", "flex.py", "custom_op.py", "stops_profiler.py"]


@pytest.mark.requires_sandbox
def test_in_the_sandbox(tmp_path):
    """The sandboxed batch: the honest files pass (no source scan refuses them), the cheats get "forbidden"."""
    subs = tmp_path / "subs"
    subs.mkdir()
    for name in SANDBOXED:
        (subs / name).write_text(CHEATS[name])
    for name, text in HONEST.items():
        (subs / name).write_text(text)
    proc = run_grader(
        *("--batch", str(subs), "--out", str(tmp_path / "g"), "--exercise", "mha_interview"),
        # TorchScript and torch.library compile their functions: seconds, more on a busy machine
        *("--cell-timeout", "60", "--timeout", "120"),
        timeout=600,
    )
    assert proc.returncode == 1, proc.stderr
    rows = {r["learner"]: r for r in csv.DictReader(open(tmp_path / "g" / "grades.csv", encoding="utf-8"))}
    for name in HONEST:
        assert rows[name]["key"] == "passed", rows[name]
    for name in SANDBOXED:
        assert rows[name]["mha_interview"] == "0" and "forbidden" in rows[name]["key"], rows[name]
    feedback = (tmp_path / "g" / "feedback" / "flex.py.md").read_text(encoding="utf-8")
    assert "FlexAttention (flex_attention)" in feedback and "not implemented" not in feedback
