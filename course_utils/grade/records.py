"""What the grader takes from a run of the learner's code: the child's records reduced to the plan's schema (nothing
it sends is trusted: ``validate`` keeps only plain tensors under the names the plan asks for, with bounded sizes, and
plain strings in error descriptions), the texts the sandboxed child said, as texts the grader can render, and the calls
the learner's code makes into the course's reference code (in-process grading)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

import torch

from .child import from_child
from .messages import Msg
from .sandbox import errors

# this module's texts, key -> (English, Chinese)
TEXTS: dict[str, tuple[str, str]] = {
    "bad.records": ("wrong number of case records", "用例记录的数量不对"),
    "bad.record": ("a case record is not a mapping", "有一条用例记录不是字典"),
    "bad.outputs": ("outputs is not a mapping", "outputs 不是字典"),
    "bad.calls": ("calls is not a list of names", "calls 不是名字列表"),
    "bad.error": ("error is not a mapping", "error 不是字典"),
    "bad.error_field": ("error field {field} has the wrong type", "error 的字段 {field} 类型不对"),
    "bad.error_place": ("unknown error place", "未知的出错位置"),
}

MAX_ELEMENTS = 1 << 20  # per returned tensor; the cases' tensors are far smaller


class BadResult(Exception):
    """What the learner's process sent back is not in the plan's schema."""


_REFERENCE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reference")
# the answers: a call into any module of course_utils/reference/ counts as delegating to the reference
_REFERENCE_FILES = {os.path.join(_REFERENCE_DIR, f) for f in os.listdir(_REFERENCE_DIR) if f.endswith(".py")}


def with_texts(clean: dict, raw: dict) -> dict:
    """``clean``'s message and line as texts the grader can render in the learner's language, from the said forms
    the child sent beside them (``raw``); where those are missing or do not say the same, the English stays."""
    clean["message"] = from_child(raw.get("said"), clean["message"])
    clean["line"] = from_child(raw.get("line_said"), clean["line"])
    return clean


class CallRecorder:
    """Records calls into course_utils' reference code while active (in-process grading only)."""

    def __init__(self) -> None:
        self.calls: set[str] = set()

    def _profile(self, frame, event, arg):
        if event == "call" and frame.f_code.co_filename in _REFERENCE_FILES:
            code = frame.f_code
            self.calls.add(f"course_utils.{os.path.basename(code.co_filename)[:-3]}.{code.co_name}")

    def __enter__(self):
        self._old = sys.getprofile()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc):
        try:
            sys.setprofile(self._old)
        except TypeError:  # a C-level profiler (cProfile) cannot be restored from Python
            sys.setprofile(None)
        return False


# ------------------------------------------------------------------------------------------------------
# validation of what comes back

_ERROR_FIELDS: dict[str, type | tuple[type, ...]] = {
    "type": str,
    "message": str,
    "line": (str, type(None)),
    "where": str,
}
_WHERES = {"construct", "load", "forward", "backward"}


def clean_error(err) -> dict | None:
    """A learner's error as the child described it, reduced to its fields (``sandbox/errors.py``); raises
    BadResult."""
    if err is None:
        return None
    if not isinstance(err, dict):
        raise BadResult(Msg("bad.error"))
    clean = {}
    for key, kind in _ERROR_FIELDS.items():
        value = err.get(key)
        if not isinstance(value, kind):
            raise BadResult(Msg("bad.error_field", field=repr(key)))
        clean[key] = value[: errors.MAX_MESSAGE] if isinstance(value, str) else value
    if clean["where"] not in _WHERES:
        raise BadResult(Msg("bad.error_place"))
    with_texts(clean, err)
    clean["not_implemented"] = err.get("not_implemented") is True
    clean["leaves_autograd"] = err.get("leaves_autograd") is True
    function = err.get("function")  # untrusted: only ever compared with the contract's function names
    clean["function"] = function[:100] if isinstance(function, str) else None
    clean["contract"] = err.get("contract") is True
    step = err.get("step", 1)
    clean["step"] = step if isinstance(step, int) and not isinstance(step, bool) else 1
    return clean


def described(tensor: torch.Tensor) -> str:
    """What a record keeps of a tensor it cannot compare: its dtype."""
    return f"<tensor of dtype {str(tensor.dtype).replace('torch.', '')}>"


def validate(records, cases: list, expected_names: Callable[[Any], Iterable[str]]) -> list:
    """The learner's records reduced to the schema: one per case, plain float tensors or None under the names
    ``expected_names(case)`` gives (anything else becomes a description string), bounded sizes. Raises BadResult."""
    if not isinstance(records, list) or len(records) != len(cases):
        raise BadResult(Msg("bad.records"))
    clean = []
    for case, rec in zip(cases, records, strict=False):
        if not isinstance(rec, dict):
            raise BadResult(Msg("bad.record"))
        allowed = set(expected_names(case))
        outputs = rec.get("outputs") or {}
        if not isinstance(outputs, dict):
            raise BadResult(Msg("bad.outputs"))
        kept: dict[str, torch.Tensor | str | None] = {}  # a tensor, None, or what came instead described
        for name, value in outputs.items():
            if name not in allowed:
                continue
            if value is None:
                kept[name] = None
            elif type(value) is torch.Tensor and value.is_floating_point() and value.numel() <= MAX_ELEMENTS:
                kept[name] = value.detach().to(torch.float64)
            elif isinstance(value, torch.Tensor):
                kept[name] = described(value)
            else:
                kept[name] = str(value)[:80]
        calls = rec.get("calls") or []
        if not isinstance(calls, list) or not all(isinstance(c, str) for c in calls):
            raise BadResult(Msg("bad.calls"))
        clean.append(
            {
                "case": case.name,
                "error": clean_error(rec.get("error")),
                "outputs": kept,
                "calls": [c[:80] for c in calls[:20]],
            }
        )
    return clean
