"""What the parent records of a learner's code besides its outputs: the calls it makes into the course's reference
code (in-process grading), and the texts the sandboxed child said, as texts the grader can render."""

from __future__ import annotations

import os
import sys

from .child import from_child

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
